"""What daemons do, on PostgreSQL: heartbeats and the scheduler lease, windows, claims,
finishes. The same results as :mod:`jobctl.store.scheduling`, safe with many daemons on
many hosts at once.

Claims (SPEC §5, §9, §10). ``FOR UPDATE SKIP LOCKED`` lets claimers pass each other's
candidates without waiting, but the overlap and lock rules span rows, which row locks at
READ COMMITTED cannot protect. So the cross-row decision is serialised per job and per
lock name with *non-blocking* transaction advisory locks (``pg_try_advisory_xact_lock``:
a claimer that cannot get one passes that run by, it never waits), re-checked in a fresh
statement once they are held, and enforced by the database besides: a partial unique
index allows one leased exclusive run per job, and ``held_locks`` (primary key: the lock
name) one leased holder per lock, freed by a trigger when the run leaves its lease.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ...clock import from_us, to_us
from ...errors import Conflict
from ...models import (
    MAX_SKIPPED_ROWS,
    OUTPUT_LIMIT_BYTES,
    DaemonInfo,
    Job,
    JobState,
    Overlap,
    Run,
    RunState,
    SkipReason,
    Window,
)
from ..rows import Claimed, Status, _job_from_row, _opt_us
from .ops import PgRunOps

#: candidates read per round of a claim (a batch: the MATERIALIZED CTE keeps its LIMIT)
CLAIM_BATCH = 32

_CANDIDATES = """
WITH cand AS MATERIALIZED (
    SELECT runs.id, runs.job_id, runs.priority, runs.pgid, runs.lease_host, runs.last_error,
           runs.scheduled_for
    FROM runs
    WHERE runs.state IN ('pending', 'failed') AND runs.not_before <= %(now)s
      AND (%(low_ok)s OR runs.priority >= %(rp)s)
      AND runs.id <> ALL(%(tried)s::bigint[])
      AND NOT EXISTS (
          SELECT 1 FROM run_locks mine JOIN held_locks h ON h.name = mine.name
          WHERE mine.run_id = runs.id AND h.run_id <> runs.id
      )
    ORDER BY runs.priority DESC, runs.scheduled_for ASC, runs.id ASC
    LIMIT %(n)s
    FOR UPDATE OF runs SKIP LOCKED
)
SELECT cand.*, jobs.overlap,
       ARRAY(SELECT l.name FROM run_locks l WHERE l.run_id = cand.id ORDER BY l.name) AS locks
FROM cand JOIN jobs ON jobs.id = cand.job_id
ORDER BY cand.priority DESC, cand.scheduled_for ASC, cand.id ASC
"""

# The compare-and-set of one claim, re-checked after the advisory locks are held.
_CLAIM_ONE = """
UPDATE runs SET state = 'leased', leased_by = %(me)s, lease_until = %(until)s,
    attempt = runs.attempt + 1, started_at = COALESCE(runs.started_at, %(now)s),
    exclusive = (jobs.overlap IN ('forbid', 'replace')), lease_host = %(host)s, pgid = NULL
FROM jobs
WHERE runs.id = %(id)s AND jobs.id = runs.job_id
  AND runs.state IN ('pending', 'failed') AND runs.not_before <= %(now)s
  AND NOT EXISTS (
      SELECT 1 FROM run_locks mine JOIN held_locks h ON h.name = mine.name
      WHERE mine.run_id = runs.id
  )
  AND NOT (jobs.overlap IN ('forbid', 'replace') AND EXISTS (
      SELECT 1 FROM runs sib WHERE sib.job_id = runs.job_id AND sib.id <> runs.id
        AND sib.state = 'leased'
  ))
RETURNING runs.id, runs.attempt
"""

_SERVER_NOW_US = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us"


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


class PgSchedulingOps(PgRunOps):
    # ---------------------------------------------------------------- the server's clock

    def measure_clock_offset(self) -> float:
        """Measure (server clock − this host's clock) in seconds, keep and return it.

        Leases and due times are judged by the server's clock (SPEC §10): a daemon reads
        its time as its own clock plus this offset (see :class:`ServerClock`), re-measured
        at each lease renewal, so a host whose clock is wrong neither steals a live lease
        nor fires early or late. The round trip's midpoint stands for the server's reading.
        """
        before = time.time()
        server_us = self._scalar(_SERVER_NOW_US)
        after = time.time()
        self.clock_offset_seconds = server_us / 1e6 - (before + after) / 2
        return self.clock_offset_seconds

    # ---------------------------------------------------------------- daemons

    def status(self, now: datetime) -> Status:
        """Live daemons, run counts by state, and the earliest next window or due run."""
        daemons = self.live_daemons(now)
        counts = {s.value: 0 for s in RunState}
        for r in self._read("SELECT state, COUNT(*) AS n FROM runs GROUP BY state"):
            counts[r["state"]] = r["n"]
        a = self._scalar("SELECT MIN(next_run_at) FROM jobs WHERE state = 'active'")
        b = self._scalar("SELECT MIN(not_before) FROM runs WHERE state IN ('pending','failed')")
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
        *,
        boot_id: str | None = None,
    ) -> None:
        """Record a starting daemon. Refused (Conflict, exit 1) when a live daemon with the
        same host name runs under another boot id: two machines share a name, and the
        kill of a lost attempt's leftovers (by host) would hit the wrong machine."""
        boot = boot_id if boot_id is not None else _boot_id()
        now_us = to_us(now)
        with self.write() as c:
            c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("host:" + host,))
            c.execute("DELETE FROM daemons WHERE expires_at < %s", (now_us,))
            other = c.execute(
                "SELECT id, pid FROM daemons WHERE host = %s AND boot_id IS DISTINCT FROM %s "
                "AND id <> %s LIMIT 1",
                (host, boot, daemon_id),
            ).fetchone()
            if other is not None:
                raise Conflict(
                    f"host name {host!r} is taken by a live daemon of another machine (pid "
                    f"{other['pid']}, another boot id); give each host its own name"
                )
            c.execute(
                "INSERT INTO daemons (id, pid, host, boot_id, started_at, heartbeat_at, "
                "expires_at, wake_address) VALUES (%s,%s,%s,%s,%s,%s,%s,%s) "
                "ON CONFLICT (id) DO UPDATE SET pid = EXCLUDED.pid, host = EXCLUDED.host, "
                "boot_id = EXCLUDED.boot_id, started_at = EXCLUDED.started_at, "
                "heartbeat_at = EXCLUDED.heartbeat_at, expires_at = EXCLUDED.expires_at, "
                "wake_address = EXCLUDED.wake_address",
                (
                    daemon_id,
                    pid,
                    host,
                    boot,
                    now_us,
                    now_us,
                    to_us(now + timedelta(seconds=lease_seconds)),
                    wake_address,
                ),
            )

    def unregister_daemon(self, daemon_id: str) -> None:
        """A clean stop: forget the daemon and hand the scheduler lease back at once."""
        with self.write() as c:
            c.execute("DELETE FROM daemons WHERE id = %s", (daemon_id,))
            c.execute(
                "UPDATE scheduler_lease SET holder = NULL, expires_at = 0 WHERE holder = %s",
                (daemon_id,),
            )
            self._notify("all")

    def live_daemons(self, now: datetime) -> list[DaemonInfo]:
        now_us = to_us(now)
        rows = self._read(
            "SELECT d.*, (SELECT holder FROM scheduler_lease WHERE id = 1 AND expires_at >= %s) "
            "AS leader FROM daemons d WHERE d.expires_at >= %s ORDER BY d.started_at, d.id",
            (now_us, now_us),
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
        """None on PostgreSQL: every change is announced by NOTIFY in its own transaction,
        to daemons on every host (see :class:`~.waker.Waker`)."""
        return []

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
        """One renewal turn in one transaction (as on SQLite), and the clock offset measured.

        Taking the scheduler lease from another holder (or from nobody) moves its ``term``
        on. Returns (is_leader, lost_run_ids, cancel_requested_run_ids)."""
        until = to_us(now + timedelta(seconds=lease_seconds))
        now_us = to_us(now)
        lost: set[int] = set()
        cancel: set[int] = set()
        with self.write() as c:
            cur = c.execute(
                "UPDATE daemons SET heartbeat_at = %s, expires_at = %s WHERE id = %s",
                (now_us, until, daemon_id),
            )
            if cur.rowcount == 0:
                c.execute(
                    "INSERT INTO daemons (id, pid, host, boot_id, started_at, heartbeat_at, "
                    "expires_at, wake_address) VALUES (%s,%s,%s,%s,%s,%s,%s,%s) "
                    "ON CONFLICT (id) DO NOTHING",
                    (daemon_id, os.getpid(), host, _boot_id(), now_us, now_us, until, wake_address),
                )
            leader = False
            if want_leader:
                row = c.execute(
                    "UPDATE scheduler_lease SET expires_at = %(until)s, holder = %(me)s, "
                    "term = term + CASE WHEN holder IS DISTINCT FROM %(me)s THEN 1 ELSE 0 END "
                    "WHERE id = 1 AND (holder = %(me)s OR holder IS NULL OR expires_at < %(now)s) "
                    "RETURNING term",
                    {"until": until, "me": daemon_id, "now": now_us},
                ).fetchone()
                leader = row is not None
            if held:
                rows = c.execute(
                    "UPDATE runs SET lease_until = %s FROM unnest(%s::bigint[], %s::int[]) "
                    "AS h(id, attempt) WHERE runs.id = h.id AND runs.attempt = h.attempt AND "
                    "runs.state = 'leased' AND runs.leased_by = %s "
                    "RETURNING runs.id, runs.cancel_requested",
                    (until, [r for r, _ in held], [a for _, a in held], daemon_id),
                ).fetchall()
                renewed = {r["id"] for r in rows}
                lost = {run_id for run_id, _ in held if run_id not in renewed}
                cancel = {r["id"] for r in rows if r["cancel_requested"]}
        self.measure_clock_offset()
        return leader, lost, cancel

    def leader_lease_expiry(self) -> datetime | None:
        """When the current scheduler lease runs out (None if nobody holds it)."""
        rows = self._read("SELECT holder, expires_at FROM scheduler_lease WHERE id = 1")
        if not rows or rows[0]["holder"] is None:
            return None
        return from_us(rows[0]["expires_at"])

    def leader_term(self) -> int:
        """How many times the scheduler lease changed hands (for logs and tests)."""
        return int(self._scalar("SELECT term FROM scheduler_lease WHERE id = 1") or 0)

    def jobs_changed_since(self, since: datetime) -> list[tuple[int, int | None]]:
        """(job id, next_run_at µs or None) of jobs changed at or after ``since``."""
        rows = self._read(
            "SELECT id, CASE WHEN state = 'active' THEN next_run_at END AS nxt FROM jobs "
            "WHERE updated_at >= %s",
            (to_us(since),),
        )
        return [(r["id"], r["nxt"]) for r in rows]

    def release_leader(self, daemon_id: str) -> None:
        with self.write() as c:
            c.execute(
                "UPDATE scheduler_lease SET holder = NULL, expires_at = 0 WHERE holder = %s",
                (daemon_id,),
            )

    # ---------------------------------------------------------------- scheduling

    def schedule_heads(self) -> list[tuple[int, int]]:
        """(next_run_at µs, job id) of every active job that has a next window."""
        return [
            (r["next_run_at"], r["id"])
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
        rows: Sequence[Window],
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

        As on SQLite; the job's row is locked (``FOR UPDATE``) for the compare-and-set, and
        each window is inserted with ``ON CONFLICT DO NOTHING`` on (job_id, scheduled_for),
        so even two leaders for a moment cannot make two runs of one window.
        """
        with self.write() as c:
            row = c.execute("SELECT * FROM jobs WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
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
                            "SELECT COUNT(*) AS n FROM runs WHERE job_id = %s AND state = 'leased'",
                            (job_id,),
                        ).fetchone()["n"]
                    if leased and job.spec.overlap is Overlap.FORBID:
                        w = replace(w, state=RunState.SKIPPED, skip_reason=SkipReason.OVERLAP)
                    elif job.spec.overlap is Overlap.REPLACE:
                        c.execute(
                            "UPDATE runs SET cancel_requested = 1 WHERE job_id = %s AND "
                            "state = 'leased'",
                            (job_id,),
                        )
                        c.execute(
                            "UPDATE runs SET state = 'cancelled', finished_at = %s, "
                            "last_error = 'replaced' WHERE job_id = %s AND "
                            "state IN ('pending', 'failed') AND reason <> 'manual' "
                            "AND created_at < %s",
                            (to_us(now), job_id, to_us(now)),
                        )
                run_id = self._insert_run(c, job, w, now)
                if run_id is not None:
                    ids.append(run_id)
            c.execute(
                "DELETE FROM runs WHERE job_id = %s AND state = 'skipped' AND skip_reason = "
                "'missed' AND id NOT IN (SELECT id FROM runs WHERE job_id = %s AND state = "
                "'skipped' AND skip_reason = 'missed' ORDER BY scheduled_for DESC LIMIT %s)",
                (job_id, job_id, MAX_SKIPPED_ROWS),
            )
            c.execute(
                "UPDATE jobs SET next_run_at = %s, "
                "last_window_at = COALESCE(%s, last_window_at), "
                "missed_total = missed_total + %s, state = %s, "
                "last_boot_id = COALESCE(%s, last_boot_id) WHERE id = %s",
                (
                    _opt_us(next_run_at),
                    _opt_us(last_window_at),
                    missed_increment,
                    JobState.DONE.value if done else JobState.ACTIVE.value,
                    boot_id,
                    job_id,
                ),
            )
            if ids:
                self._notify("run")
            return ids

    # ---------------------------------------------------------------- claims

    def next_claim_at(self, daemon_id: str, now: datetime) -> datetime | None:
        """The earliest future time a run becomes claimable (a ``not_before``, or the
        expiry of another daemon's lease). None if nothing waits."""
        now_us = to_us(now)
        a = self._scalar(
            "SELECT MIN(not_before) FROM runs WHERE state IN ('pending','failed') "
            "AND not_before > %s",
            (now_us,),
        )
        b = self._scalar(
            "SELECT MIN(lease_until) FROM runs WHERE state = 'leased' AND leased_by <> %s "
            "AND lease_until > %s",
            (daemon_id, now_us),
        )
        vals = [v for v in (a, b) if v is not None]
        return from_us(min(vals) + 1000) if vals else None

    def cancel_requests(self, daemon_id: str) -> list[int]:
        """Ids of runs this daemon holds that have a cancel request."""
        return [
            r["id"]
            for r in self._read(
                "SELECT id FROM runs WHERE state = 'leased' AND leased_by = %s AND "
                "cancel_requested = 1 ORDER BY id",
                (daemon_id,),
            )
        ]

    def _expire_leases(self, c: Any, daemon_id: str, now: datetime, dead: list[Run]) -> None:
        now_us = to_us(now)
        expired = c.execute(
            "SELECT id, attempt, max_attempts, cancel_requested, job_id FROM runs "
            "WHERE state = 'leased' AND lease_until < %s AND leased_by <> %s "
            "ORDER BY id FOR UPDATE SKIP LOCKED",
            (now_us, daemon_id),
        ).fetchall()
        for r in expired:
            c.execute(
                "UPDATE attempts SET finished_at = %s, error = 'lost' WHERE run_id = %s AND "
                "attempt = %s AND finished_at IS NULL",
                (now_us, r["id"], r["attempt"]),
            )
            if r["cancel_requested"]:
                c.execute(
                    "UPDATE runs SET state = 'cancelled', finished_at = %s, last_error = "
                    "'cancelled', leased_by = NULL, lease_until = NULL WHERE id = %s",
                    (now_us, r["id"]),
                )
                self._after_run_end(c, r["job_id"], now)
            elif r["attempt"] >= r["max_attempts"]:
                c.execute(
                    "UPDATE runs SET state = 'dead', finished_at = %s, last_error = 'lost', "
                    "leased_by = NULL, lease_until = NULL WHERE id = %s",
                    (now_us, r["id"]),
                )
                self._after_run_end(c, r["job_id"], now)
                dead.append(self._run_by_id(c, r["id"]))
            else:
                c.execute(
                    "UPDATE runs SET state = 'failed', last_error = 'lost', not_before = %s, "
                    "leased_by = NULL, lease_until = NULL WHERE id = %s",
                    (now_us, r["id"]),
                )

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

        The same contract as on SQLite (quota of runs below ``reserved_priority``, expired
        leases recorded ``lost`` or ``dead``), correct with any number of concurrent
        claimers: see the module docstring. Never waits on another claimer.
        """
        now_us = to_us(now)
        until = to_us(now + timedelta(seconds=lease_seconds))
        claimed: list[Claimed] = []
        dead: list[Run] = []
        low_used = 0
        rp = reserved_priority if reserved_priority is not None else -(2**62)
        tried: list[int] = []
        with self.write() as c:
            self._expire_leases(c, daemon_id, now, dead)
            while len(claimed) < limit:
                low_ok = reserved_priority is None or low_limit is None or low_used < low_limit
                cands = c.execute(
                    _CANDIDATES,
                    {
                        "now": now_us,
                        "low_ok": low_ok,
                        "rp": rp,
                        "tried": tried,
                        "n": min(CLAIM_BATCH, max(limit - len(claimed), 1) * 4),
                    },
                ).fetchall()
                if not cands:
                    break
                progress = False
                for cand in cands:
                    if len(claimed) >= limit:
                        break
                    tried.append(cand["id"])
                    low = reserved_priority is not None and cand["priority"] < reserved_priority
                    if low and low_limit is not None and low_used >= low_limit:
                        continue
                    run = self._try_claim(c, cand, daemon_id, host, now_us, until)
                    if run is None:
                        continue
                    progress = True
                    if low:
                        low_used += 1
                    old_host = cand["lease_host"]
                    stale = cand["pgid"] if (cand["pgid"] and old_host == host) else None
                    lost_here = old_host == host and cand["last_error"] == "lost"
                    claimed.append(Claimed(run, stale, lost_here))
                if not progress and len(cands) < CLAIM_BATCH:
                    break
        return claimed, dead

    def _try_claim(
        self, c: Any, cand: dict[str, Any], daemon_id: str, host: str, now_us: int, until: int
    ) -> Run | None:
        """One compare-and-set claim of the candidate ``cand`` inside a savepoint; None when
        another claimer holds its job or one of its locks (nothing is waited for)."""
        exclusive = cand["overlap"] in (Overlap.FORBID.value, Overlap.REPLACE.value)
        keys = ([f"job:{cand['job_id']}"] if exclusive else []) + [
            f"lock:{name}" for name in cand["locks"]
        ]
        if keys:
            got = c.execute(
                "SELECT bool_and(pg_try_advisory_xact_lock(hashtextextended(k, 0))) AS ok "
                "FROM unnest(%s::text[]) AS k",
                (keys,),
            ).fetchone()["ok"]
            if not got:
                return None
        psycopg = self._psycopg
        try:
            with c.connection.transaction():  # a savepoint: a violation undoes this claim only
                row = c.execute(
                    _CLAIM_ONE,
                    {
                        "me": daemon_id,
                        "until": until,
                        "now": now_us,
                        "host": host,
                        "id": cand["id"],
                    },
                ).fetchone()
                if row is None:
                    return None
                run_id, attempt = row["id"], row["attempt"]
                if cand["locks"]:
                    c.execute(
                        "INSERT INTO held_locks (name, run_id) SELECT name, run_id FROM run_locks "
                        "WHERE run_id = %s",
                        (run_id,),
                    )
                c.execute(
                    "INSERT INTO attempts (run_id, attempt, started_at, daemon_id, host) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id, attempt) DO UPDATE SET "
                    "started_at = EXCLUDED.started_at, daemon_id = EXCLUDED.daemon_id, "
                    "host = EXCLUDED.host, finished_at = NULL, exit_code = NULL, error = NULL, "
                    "output = NULL, output_bytes = 0, pid = NULL",
                    (run_id, attempt, now_us, daemon_id, host),
                )
        except psycopg.errors.UniqueViolation:
            return None  # the database's own rule caught what the checks let through
        return self._run_by_id(c, run_id)

    def set_attempt_processes(
        self, daemon_id: str, started: Sequence[tuple[int, int, int]]
    ) -> None:
        """Record (run_id, attempt, pid) of children started in one turn. Fenced per run."""
        if not started:
            return
        with self.write() as c:
            for run_id, attempt, pid in started:
                cur = c.execute(
                    "UPDATE runs SET pgid = %s WHERE id = %s AND attempt = %s AND "
                    "state = 'leased' AND leased_by = %s",
                    (pid, run_id, attempt, daemon_id),
                )
                if cur.rowcount:
                    c.execute(
                        "UPDATE attempts SET pid = %s WHERE run_id = %s AND attempt = %s",
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
        """Record the end of an attempt and move the run to ``outcome``. Fenced (as on
        SQLite): applied only while that attempt of this daemon holds the lease."""
        now_us = to_us(now)
        with self.write() as c:
            row = c.execute(
                "SELECT job_id, cancel_requested FROM runs WHERE id = %s AND attempt = %s AND "
                "state = 'leased' AND leased_by = %s FOR UPDATE",
                (run_id, attempt, daemon_id),
            ).fetchone()
            if row is None:
                return False, None
            if row["cancel_requested"] and outcome in (RunState.FAILED, RunState.DEAD):
                outcome, interrupted = RunState.CANCELLED, False
            c.execute(
                "UPDATE attempts SET finished_at = %s, exit_code = %s, error = %s, output = %s, "
                "output_bytes = %s WHERE run_id = %s AND attempt = %s",
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
            self._notify(f"run:{run_id}")
            if interrupted:
                c.execute(
                    "UPDATE runs SET state = 'pending', max_attempts = max_attempts + 1, "
                    "not_before = %s, leased_by = NULL, lease_until = NULL, pgid = NULL, "
                    "last_error = 'interrupted' WHERE id = %s",
                    (now_us, run_id),
                )
                return True, None
            if outcome is RunState.FAILED:
                c.execute(
                    "UPDATE runs SET state = 'failed', not_before = %s, leased_by = NULL, "
                    "lease_until = NULL, pgid = NULL, exit_code = %s, last_error = %s "
                    "WHERE id = %s",
                    (_opt_us(retry_at), exit_code, error, run_id),
                )
                return True, None
            c.execute(
                "UPDATE runs SET state = %s, finished_at = %s, leased_by = NULL, "
                "lease_until = NULL, pgid = NULL, lease_host = NULL, exit_code = %s, "
                "last_error = %s WHERE id = %s",
                (outcome.value, now_us, exit_code, error, run_id),
            )
            return True, self._after_run_end(c, row["job_id"], now)
