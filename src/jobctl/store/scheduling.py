"""What daemons do: heartbeats and the scheduler lease, windows, claims, finishes."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from ..clock import from_us, to_us
from ..models import (
    MAX_SKIPPED_ROWS,
    OUTPUT_LIMIT_BYTES,
    DaemonInfo,
    Job,
    JobState,
    Overlap,
    Run,
    RunState,
    SkipReason,
)
from .rows import _RUN_SELECT, Claimed, Status, WindowRow, _job_from_row, _opt_us, _run_from_row
from .runs import RunOps

# Claim the single best claimable run (SPEC §5, §9): due, pending or failed, none of its
# locks held by a leased run, and (forbid/replace) no other run of its job leased. Runs of
# priority < :rp are eligible only while :low_ok (the reserved-worker quota).
_CLAIMABLE = """
    state IN ('pending', 'failed') AND not_before <= :now
    AND (:low_ok OR priority >= :rp)
    AND NOT EXISTS (
        SELECT 1 FROM run_locks mine
        JOIN run_locks other ON other.name = mine.name AND other.run_id != mine.run_id
        JOIN runs holder ON holder.id = other.run_id
        WHERE mine.run_id = runs.id AND holder.state = 'leased'
    )
    AND NOT EXISTS (
        SELECT 1 FROM runs sib JOIN jobs j ON j.id = runs.job_id
        WHERE sib.job_id = runs.job_id AND sib.id != runs.id
          AND sib.state = 'leased' AND j.overlap IN ('forbid', 'replace')
    )
"""

_CLAIM_ONE = f"""
UPDATE runs SET state = 'leased', leased_by = :me, lease_until = :until,
    attempt = attempt + 1, started_at = COALESCE(started_at, :now)
WHERE id = (
    -- walk the queue in order and stop at the first claimable run; without INDEXED BY
    -- the planner picks runs_claimable and sorts every due run on each claim (O(n²) burst)
    SELECT id FROM runs INDEXED BY runs_queue WHERE {_CLAIMABLE}
    ORDER BY priority DESC, scheduled_for ASC, id ASC LIMIT 1
) AND {_CLAIMABLE}
RETURNING id, attempt, pgid, lease_host, priority
"""


class SchedulingOps(RunOps):
    # ---------------------------------------------------------------- daemons

    def status(self, now: datetime) -> Status:
        """Live daemons, run counts by state, and the earliest next window or due run."""
        daemons = self.live_daemons(now)
        counts = {s.value: 0 for s in RunState}
        for r in self._read("SELECT state, COUNT(*) FROM runs GROUP BY state"):
            counts[r[0]] = r[1]
        a = self._read("SELECT MIN(next_run_at) FROM jobs WHERE state = 'active'")[0][0]
        b = self._read("SELECT MIN(not_before) FROM runs WHERE state IN ('pending','failed')")[0][0]
        vals = [v for v in (a, b) if v is not None]
        return Status(daemons, counts, from_us(min(vals)) if vals else None)

    def register_daemon(
        self,
        daemon_id: str,
        pid: int,
        host: str,
        wake_address: str | None,
        now: datetime,
        lease_seconds: float,
    ) -> None:
        with self.write() as c:
            c.execute("DELETE FROM daemons WHERE expires_at < ?", (to_us(now),))
            c.execute(
                "INSERT OR REPLACE INTO daemons (id, pid, host, started_at, heartbeat_at, "
                "expires_at, wake_address) VALUES (?,?,?,?,?,?,?)",
                (
                    daemon_id,
                    pid,
                    host,
                    to_us(now),
                    to_us(now),
                    to_us(now + timedelta(seconds=lease_seconds)),
                    wake_address,
                ),
            )

    def unregister_daemon(self, daemon_id: str) -> None:
        """A clean stop: forget the daemon and hand the scheduler lease back at once."""
        with self.batch():
            with self.write() as c:
                c.execute("DELETE FROM daemons WHERE id = ?", (daemon_id,))
            self.release_leader(daemon_id)

    def live_daemons(self, now: datetime) -> list[DaemonInfo]:
        rows = self._read(
            "SELECT d.*, (SELECT holder FROM scheduler_lease WHERE id = 1 AND expires_at >= ?) "
            "AS leader FROM daemons d WHERE d.expires_at >= ? ORDER BY d.started_at",
            (to_us(now), to_us(now)),
        )
        return [
            DaemonInfo(
                id=r["id"],
                pid=r["pid"],
                host=r["host"],
                leader=r["leader"] == r["id"],
                started_at=from_us(r["started_at"]),
                heartbeat_at=from_us(r["heartbeat_at"]),
                wake_address=r["wake_address"],
            )
            for r in rows
        ]

    def wake_addresses(self, now: datetime) -> list[str]:
        """The wake addresses of live daemons (for the CLI to poke after a change)."""
        try:
            rows = self.conn.execute(
                "SELECT wake_address FROM daemons WHERE expires_at >= ? AND wake_address IS NOT "
                "NULL",
                (to_us(now),),
            ).fetchall()
        except sqlite3.Error:
            return []
        return [r[0] for r in rows]

    def heartbeat(
        self,
        daemon_id: str,
        now: datetime,
        lease_seconds: float,
        *,
        want_leader: bool,
        held: Sequence[tuple[int, int]],
        host: str = "",
        wake_address: str | None = None,
    ) -> tuple[bool, set[int], set[int]]:
        """One renewal turn in one transaction.

        Renews this daemon's row, tries to take or keep the scheduler lease (when
        ``want_leader``), and renews the lease of each held (run_id, attempt). Returns
        (is_leader, lost_run_ids, cancel_requested_run_ids). A run is lost when its lease
        no longer names this attempt (fencing).
        """
        until = to_us(now + timedelta(seconds=lease_seconds))
        lost: set[int] = set()
        cancel: set[int] = set()
        with self.write() as c:
            cur = c.execute(
                "UPDATE daemons SET heartbeat_at = ?, expires_at = ? WHERE id = ?",
                (to_us(now), until, daemon_id),
            )
            if cur.rowcount == 0:
                c.execute(
                    # our row expired and was cleared (a suspend): register again, whole
                    "INSERT INTO daemons (id, pid, host, started_at, heartbeat_at, expires_at, "
                    "wake_address) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (daemon_id, os.getpid(), host, to_us(now), to_us(now), until, wake_address),
                )
            leader = False
            if want_leader:
                c.execute(
                    "INSERT OR IGNORE INTO scheduler_lease (id, holder, expires_at) VALUES (1, "
                    "NULL, 0)"
                )
                cur = c.execute(
                    "UPDATE scheduler_lease SET holder = ?, expires_at = ? "
                    "WHERE id = 1 AND (holder = ? OR holder IS NULL OR expires_at < ?)",
                    (daemon_id, until, daemon_id, to_us(now)),
                )
                leader = cur.rowcount == 1
            for run_id, attempt in held:
                row = c.execute(
                    "UPDATE runs SET lease_until = ? WHERE id = ? AND attempt = ? AND "
                    "state = 'leased' AND leased_by = ? RETURNING cancel_requested",
                    (until, run_id, attempt, daemon_id),
                ).fetchone()
                if row is None:
                    lost.add(run_id)
                elif row[0]:
                    cancel.add(run_id)
        return leader, lost, cancel

    def leader_lease_expiry(self) -> datetime | None:
        """When the current scheduler lease runs out (None if nobody holds it)."""
        rows = self._read("SELECT holder, expires_at FROM scheduler_lease WHERE id = 1")
        if not rows or rows[0][0] is None:
            return None
        return from_us(rows[0][1])

    def jobs_changed_since(self, since: datetime) -> list[tuple[int, int | None]]:
        """(job id, next_run_at µs or None) of jobs a user changed at or after ``since``.

        The scheduler's safety net for a lost wake-up (or a writer on another host):
        it re-reads only what changed, through the ``jobs_updated`` index.
        """
        rows = self._read(
            "SELECT id, CASE WHEN state = 'active' THEN next_run_at END FROM jobs "
            "WHERE updated_at >= ?",
            (to_us(since),),
        )
        return [(r[0], r[1]) for r in rows]

    def release_leader(self, daemon_id: str) -> None:
        with self.write() as c:
            c.execute(
                "UPDATE scheduler_lease SET holder = NULL, expires_at = 0 WHERE holder = ?",
                (daemon_id,),
            )

    # ---------------------------------------------------------------- scheduling

    def schedule_heads(self) -> list[tuple[int, int]]:
        """(next_run_at µs, job id) of every active job that has a next window."""
        return [
            (r[0], r[1])
            for r in self._read(
                "SELECT next_run_at, id FROM jobs WHERE state = 'active' AND next_run_at IS NOT "
                "NULL"
            )
        ]

    def reboot_jobs(self) -> list[Job]:
        rows = self._read("SELECT * FROM jobs WHERE state = 'active' AND trigger_kind = 'reboot'")
        return [_job_from_row(r) for r in rows]

    def record_windows(
        self,
        job_id: int,
        expected_next_run_at: datetime | None,
        rows: Sequence[WindowRow],
        *,
        next_run_at: datetime | None,
        last_window_at: datetime | None,
        missed_increment: int,
        now: datetime,
        done: bool = False,
        boot_id: str | None = None,
        job: Job | None = None,
    ) -> list[int] | None:
        """Record a job's fired windows and move its schedule on, in one transaction.

        Applied only if the job is still active and its ``next_run_at`` is still
        ``expected_next_run_at`` (compare-and-set against a concurrent edit); returns None
        when it was not applied, else the ids of the runs inserted (windows already present
        are ignored by the UNIQUE key). Overlap is decided here, against the table: with
        ``forbid`` a scheduled window that fires while a run of the job is leased is recorded
        ``skipped`` (``overlap``); with ``replace`` the leased runs get a cancel request.
        ``job``, when given, was read inside the caller's :meth:`batch` transaction (so
        it cannot have changed) and is not read again.
        """
        with self.write() as c:
            if job is None:
                row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
                job = None if row is None else _job_from_row(row)
            if job is None or job.state is not JobState.ACTIVE:
                return None
            if boot_id is None and job.next_run_at != expected_next_run_at:
                return None
            ids = []
            leased = None
            for w in rows:
                if w.state is RunState.PENDING and job.spec.overlap is not Overlap.ALLOW:
                    if leased is None:
                        leased = c.execute(
                            "SELECT COUNT(*) FROM runs WHERE job_id = ? AND state = 'leased'",
                            (job_id,),
                        ).fetchone()[0]
                    if leased and job.spec.overlap is Overlap.FORBID:
                        w = replace(w, state=RunState.SKIPPED, skip_reason=SkipReason.OVERLAP)
                    elif job.spec.overlap is Overlap.REPLACE:
                        # the new window replaces whatever of the job is still open
                        c.execute(
                            "UPDATE runs SET cancel_requested = 1 WHERE job_id = ? AND "
                            "state = 'leased'",
                            (job_id,),
                        )
                        c.execute(
                            "UPDATE runs SET state = 'cancelled', finished_at = ?, "
                            "last_error = 'replaced' WHERE job_id = ? AND "
                            "state IN ('pending', 'failed') AND reason != 'manual' "
                            "AND created_at < ?",  # keyed/manual runs and this call's rows stay
                            (to_us(now), job_id, to_us(now)),
                        )
                run_id = self._insert_run(c, job, w, now)
                if run_id is not None:
                    ids.append(run_id)
            # keep at most MAX_SKIPPED_ROWS missed rows per job
            c.execute(
                "DELETE FROM runs WHERE job_id = ? AND state = 'skipped' AND skip_reason = "
                "'missed' AND id NOT IN (SELECT id FROM runs WHERE job_id = ? AND state = "
                "'skipped' AND skip_reason = 'missed' ORDER BY scheduled_for DESC LIMIT ?)",
                (job_id, job_id, MAX_SKIPPED_ROWS),
            )
            c.execute(
                "UPDATE jobs SET next_run_at = ?, last_window_at = COALESCE(?, last_window_at), "
                "missed_total = missed_total + ?, state = ?, "
                "last_boot_id = COALESCE(?, last_boot_id) WHERE id = ?",
                (
                    _opt_us(next_run_at),
                    _opt_us(last_window_at),
                    missed_increment,
                    JobState.DONE.value if done else JobState.ACTIVE.value,
                    boot_id,
                    job_id,
                ),
            )
            return ids

    # ---------------------------------------------------------------- claims

    def next_claim_at(self, daemon_id: str, now: datetime) -> datetime | None:
        """The earliest future time a run becomes claimable: a retry or delayed window's
        ``not_before``, or the expiry of another daemon's lease. None if nothing waits."""
        now_us = to_us(now)
        a = self._read(
            "SELECT MIN(not_before) FROM runs WHERE state IN ('pending','failed') "
            "AND not_before > ?",
            (now_us,),
        )[0][0]
        b = self._read(
            "SELECT MIN(lease_until) FROM runs WHERE state = 'leased' AND leased_by != ? "
            "AND lease_until > ?",
            (daemon_id, now_us),
        )[0][0]
        vals = [v for v in (a, b) if v is not None]
        # an expiring lease is free a moment after its expiry
        return from_us(min(vals) + 1000) if vals else None

    def cancel_requests(self, daemon_id: str) -> list[int]:
        """Ids of runs this daemon holds that have a cancel request."""
        return [
            r[0]
            for r in self._read(
                "SELECT id FROM runs WHERE state = 'leased' AND leased_by = ? AND "
                "cancel_requested = 1",
                (daemon_id,),
            )
        ]

    def claim_runs(
        self,
        daemon_id: str,
        host: str,
        now: datetime,
        lease_seconds: float,
        *,
        limit: int,
        low_limit: int | None = None,
        reserved_priority: int | None = None,
    ) -> tuple[list[Claimed], list[Run]]:
        """Claim up to ``limit`` due runs, highest priority first, then oldest window.

        Runs with priority < ``reserved_priority`` are claimed at most ``low_limit`` times.
        Each claim is one compare-and-set UPDATE: the run is still pending/failed and due
        (or leased with an expired lease), none of its locks is held by another live leased
        run, and with ``forbid``/``replace`` no other run of its job is leased. A leased run
        whose lease expired has its attempt recorded ``lost``; if it is out of attempts it
        becomes ``dead`` instead (returned in the second list, for the on-failure hook).
        """
        now_us = to_us(now)
        until = to_us(now + timedelta(seconds=lease_seconds))
        claimed: list[Claimed] = []
        dead: list[Run] = []
        low_used = 0
        with self.write() as c:
            # expired leases: record the lost attempt; cancel or dead where due
            expired = c.execute(
                "SELECT id, attempt, max_attempts, cancel_requested, lease_host, pgid, "
                "leased_by, job_id FROM runs WHERE state = 'leased' AND lease_until < ? "
                "AND leased_by != ?",  # our own leases are renewed (fenced) by heartbeat()
                (now_us, daemon_id),
            ).fetchall()
            for r in expired:
                c.execute(
                    "UPDATE attempts SET finished_at = ?, error = 'lost' WHERE run_id = ? AND "
                    "attempt = ? AND finished_at IS NULL",
                    (now_us, r["id"], r["attempt"]),
                )
                if r["cancel_requested"]:
                    c.execute(
                        "UPDATE runs SET state = 'cancelled', finished_at = ?, last_error = "
                        "'cancelled', leased_by = NULL, lease_until = NULL WHERE id = ?",
                        (now_us, r["id"]),
                    )
                    self._after_run_end(c, r["job_id"], now)
                elif r["attempt"] >= r["max_attempts"]:
                    c.execute(
                        "UPDATE runs SET state = 'dead', finished_at = ?, last_error = 'lost', "
                        "leased_by = NULL, lease_until = NULL WHERE id = ?",
                        (now_us, r["id"]),
                    )
                    self._after_run_end(c, r["job_id"], now)
                    dead.append(
                        _run_from_row(
                            c.execute(_RUN_SELECT + " WHERE runs.id = ?", (r["id"],)).fetchone()
                        )
                    )
                else:
                    # free again: claimable at once (the next claim increments attempt)
                    c.execute(
                        "UPDATE runs SET state = 'failed', last_error = 'lost', not_before = ?, "
                        "leased_by = NULL, lease_until = NULL WHERE id = ?",
                        (now_us, r["id"]),
                    )
            # One compare-and-set per claim: the UPDATE picks the best run that is due and
            # whose locks and job are free *now*, inside the same statement, so runs blocked
            # on a lock never block the runs behind them and two daemons cannot both win.
            while len(claimed) < limit:
                low_ok = reserved_priority is None or low_limit is None or low_used < low_limit
                row = c.execute(
                    _CLAIM_ONE,
                    {
                        "me": daemon_id,
                        "until": until,
                        "now": now_us,
                        "low_ok": 1 if low_ok else 0,
                        "rp": reserved_priority if reserved_priority is not None else -(2**62),
                    },
                ).fetchone()
                if row is None:
                    break
                run_id, attempt, old_pgid, old_host, priority = row
                c.execute(
                    "UPDATE runs SET lease_host = ?, pgid = NULL WHERE id = ?", (host, run_id)
                )
                c.execute(
                    "INSERT OR REPLACE INTO attempts (run_id, attempt, started_at, daemon_id, "
                    "host) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (run_id, attempt, now_us, daemon_id, host),
                )
                if reserved_priority is not None and priority < reserved_priority:
                    low_used += 1
                run = _run_from_row(
                    c.execute(_RUN_SELECT + " WHERE runs.id = ?", (run_id,)).fetchone()
                )
                stale = old_pgid if (old_pgid and old_host == host) else None
                lost_here = old_host == host and run.last_error == "lost"
                claimed.append(Claimed(run, stale, lost_here))
        return claimed, dead

    def set_attempt_processes(
        self, daemon_id: str, started: Sequence[tuple[int, int, int]]
    ) -> None:
        """Record (run_id, attempt, pid) of children started in one turn, in one
        transaction. Fenced per run: a run no longer held by that attempt is skipped."""
        if not started:
            return
        with self.write() as c:
            for run_id, attempt, pid in started:
                cur = c.execute(
                    "UPDATE runs SET pgid = ? WHERE id = ? AND attempt = ? AND "
                    "state = 'leased' AND leased_by = ?",
                    (pid, run_id, attempt, daemon_id),
                )
                if cur.rowcount:
                    c.execute(
                        "UPDATE attempts SET pid = ? WHERE run_id = ? AND attempt = ?",
                        (pid, run_id, attempt),
                    )

    def finish_attempt(
        self,
        run_id: int,
        attempt: int,
        daemon_id: str,
        now: datetime,
        *,
        exit_code: int | None,
        error: str | None,
        output: bytes,
        output_bytes: int,
        outcome: RunState,
        retry_at: datetime | None = None,
        interrupted: bool = False,
    ) -> tuple[bool, Job | None]:
        """Record the end of an attempt and move the run to ``outcome``. Fenced.

        ``outcome`` is succeeded, failed (retry at ``retry_at``), dead, or cancelled; with
        ``interrupted`` the run goes back to pending without using up an attempt. Returns
        (applied, job) where job is the job when a fixed-delay schedule moved on.
        """
        now_us = to_us(now)
        with self.write() as c:
            row = c.execute(
                "SELECT job_id, cancel_requested FROM runs WHERE id = ? AND attempt = ? AND "
                "state = 'leased' AND leased_by = ?",
                (run_id, attempt, daemon_id),
            ).fetchone()
            if row is None:
                return False, None
            if row["cancel_requested"] and outcome in (RunState.FAILED, RunState.DEAD):
                # the user asked to cancel while it ran: a failure is not retried (nor dead)
                outcome, interrupted = RunState.CANCELLED, False
            c.execute(
                "UPDATE attempts SET finished_at = ?, exit_code = ?, error = ?, output = ?, "
                "output_bytes = ? WHERE run_id = ? AND attempt = ?",
                (
                    now_us,
                    exit_code,
                    error,
                    output[-OUTPUT_LIMIT_BYTES:],
                    output_bytes,
                    run_id,
                    attempt,
                ),
            )
            if interrupted:
                c.execute(
                    "UPDATE runs SET state = 'pending', max_attempts = max_attempts + 1, "
                    "not_before = ?, leased_by = NULL, lease_until = NULL, pgid = NULL, "
                    "last_error = 'interrupted' WHERE id = ?",
                    (now_us, run_id),
                )
                return True, None
            if outcome is RunState.FAILED:
                c.execute(
                    "UPDATE runs SET state = 'failed', not_before = ?, leased_by = NULL, "
                    "lease_until = NULL, pgid = NULL, exit_code = ?, last_error = ? WHERE id = ?",
                    (_opt_us(retry_at), exit_code, error, run_id),
                )
                return True, None
            c.execute(
                "UPDATE runs SET state = ?, finished_at = ?, leased_by = NULL, lease_until = NULL, "
                "pgid = NULL, lease_host = NULL, exit_code = ?, last_error = ? WHERE id = ?",
                (outcome.value, now_us, exit_code, error, run_id),
            )
            return True, self._after_run_end(c, row["job_id"], now)
