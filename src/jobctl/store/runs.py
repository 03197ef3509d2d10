"""Runs as the CLI sees them: enqueue, list, logs, cancel, retry-dead, prune, status."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from .. import triggers
from ..clock import from_us, to_us
from ..errors import Conflict, NotFound, UsageError
from ..models import (
    Attempt,
    Job,
    JobState,
    Run,
    RunReason,
    RunState,
)
from .jobs import JobOps
from .rows import (
    _RUN_SELECT,
    WindowRow,
    _attempt_from_row,
    _job_from_row,
    _opt_us,
    _run_from_row,
    _settings_json,
)


class RunOps(JobOps):
    # ---------------------------------------------------------------- runs (CLI side)

    def get_run(self, run_id: int) -> Run:
        rows = self._read(_RUN_SELECT + " WHERE runs.id = ?", (run_id,))
        if not rows:
            raise NotFound(f"no run with id {run_id}")
        return _run_from_row(rows[0])

    def list_runs(
        self, job_name: str | None = None, state: RunState | None = None, limit: int = 20
    ) -> list[Run]:
        """Runs, newest window first (then newest id)."""
        where: list[str] = []
        params: list[Any] = []
        if job_name is not None:
            job = self.get_job(job_name)
            where.append("runs.job_id = ?")
            params.append(job.id)
        if state is not None:
            where.append("runs.state = ?")
            params.append(state.value)
        sql = _RUN_SELECT
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY runs.scheduled_for DESC, runs.id DESC LIMIT ?"
        params.append(limit)
        return [_run_from_row(r) for r in self._read(sql, params)]

    def get_attempts(self, run_id: int) -> list[Attempt]:
        rows = self._read("SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt", (run_id,))
        return [_attempt_from_row(r) for r in rows]

    def get_output(self, run_id: int, attempt: int | None = None) -> tuple[Attempt, bytes]:
        """The captured output tail of an attempt (default: the last). Raises NotFound."""
        self.get_run(run_id)
        if attempt is None:
            rows = self._read(
                "SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt DESC LIMIT 1", (run_id,)
            )
        else:
            rows = self._read(
                "SELECT * FROM attempts WHERE run_id = ? AND attempt = ?", (run_id, attempt)
            )
        if not rows:
            which = "any attempt" if attempt is None else f"attempt {attempt}"
            raise NotFound(f"run {run_id} has no {which}")
        return _attempt_from_row(rows[0]), bytes(rows[0]["output"] or b"")

    def enqueue_run(
        self,
        name: str,
        now: datetime,
        *,
        key: str | None = None,
        env: dict[str, str] | None = None,
        locks: Sequence[str] = (),
        priority: int | None = None,
    ) -> tuple[Run, bool]:
        """Insert a manual run with window ``now``; with ``key``, at most one per (job, key).

        Returns (run, created). An existing keyed run is returned unchanged (created False).
        Raises NotFound, Conflict for a cancelled job.
        """
        with self.write() as c:
            row = self._job_row(c, name)
            job = _job_from_row(row)
            if job.state is JobState.CANCELLED:
                raise Conflict(f"job {name!r} is cancelled")
            if key is not None:
                found = c.execute(
                    "SELECT id FROM runs WHERE job_id = ? AND run_key = ?", (job.id, key)
                ).fetchone()
                if found is not None:
                    return _run_from_row(
                        c.execute(_RUN_SELECT + " WHERE runs.id = ?", (found[0],)).fetchone()
                    ), False
            window = to_us(now)
            while c.execute(
                "SELECT 1 FROM runs WHERE job_id = ? AND scheduled_for = ?", (job.id, window)
            ).fetchone():
                window += 1
            run_id = self._insert_run(
                c,
                job,
                WindowRow(
                    scheduled_for=from_us(window),
                    state=RunState.PENDING,
                    reason=RunReason.MANUAL,
                    not_before=now,
                ),
                now,
                key=key,
                env=env or {},
                extra_locks=locks,
                priority=priority,
            )
            assert run_id is not None
            return _run_from_row(
                c.execute(_RUN_SELECT + " WHERE runs.id = ?", (run_id,)).fetchone()
            ), True

    def _insert_run(
        self,
        c: sqlite3.Connection,
        job: Job,
        w: WindowRow,
        now: datetime,
        *,
        key: str | None = None,
        env: dict[str, str] | None = None,
        extra_locks: Sequence[str] = (),
        priority: int | None = None,
    ) -> int | None:
        """Insert one run row (ignored if the window exists). Returns its id or None."""
        spec = job.spec
        finished = to_us(now) if w.state is RunState.SKIPPED else None
        cur = c.execute(
            "INSERT OR IGNORE INTO runs (job_id, scheduled_for, state, skip_reason, reason, "
            "catchup_from, attempt, max_attempts, not_before, priority, run_key, env, settings, "
            "created_at, finished_at) VALUES (?,?,?,?,?,?,0,?,?,?,?,?,?,?,?)",
            (
                job.id,
                to_us(w.scheduled_for),
                w.state.value,
                w.skip_reason.value if w.skip_reason else None,
                w.reason.value,
                _opt_us(w.catchup_from),
                spec.retries + 1,
                _opt_us(w.not_before or w.scheduled_for),
                spec.priority if priority is None else priority,
                key,
                json.dumps(env or {}, sort_keys=True),
                _settings_json(spec),
                to_us(now),
                finished,
            ),
        )
        if cur.rowcount == 0:
            return None
        run_id = cur.lastrowid
        if w.state is not RunState.SKIPPED:
            for lock in sorted(set(spec.locks) | set(extra_locks)):
                c.execute("INSERT INTO run_locks (run_id, name) VALUES (?, ?)", (run_id, lock))
        return run_id

    def _cancel_runs_tx(self, c: sqlite3.Connection, ids: Iterable[int], now: datetime) -> None:
        for run_id in ids:
            row = c.execute(
                "UPDATE runs SET state = 'cancelled', finished_at = ?, last_error = "
                "COALESCE(last_error, 'cancelled') WHERE id = ? AND state IN ('pending','failed') "
                "RETURNING job_id",
                (to_us(now), run_id),
            ).fetchone()
            if row is not None:
                self._after_run_end(c, row[0], now)  # a fixed-delay job moves on
            c.execute(
                "UPDATE runs SET cancel_requested = 1 WHERE id = ? AND state = 'leased'", (run_id,)
            )

    def cancel_runs(self, ids: Sequence[int], now: datetime) -> list[Run]:
        """Cancel runs: pending/failed ones at once, leased ones by a cancel request the
        daemon acts on. Finished runs are left as they are. Raises NotFound (nothing written)."""
        with self.write() as c:
            for run_id in ids:
                if c.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                    raise NotFound(f"no run with id {run_id}")
            self._cancel_runs_tx(c, ids, now)
            return [
                _run_from_row(c.execute(_RUN_SELECT + " WHERE runs.id = ?", (i,)).fetchone())
                for i in ids
            ]

    def retry_dead(
        self,
        now: datetime,
        *,
        job_name: str | None = None,
        run_ids: Sequence[int] = (),
        all_jobs: bool = False,
    ) -> list[Run]:
        """Dead runs back to ``pending`` with a fresh set of attempts (numbered on)."""
        with self.write() as c:
            if run_ids:
                ids = []
                for run_id in run_ids:
                    row = c.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
                    if row is None:
                        raise NotFound(f"no run with id {run_id}")
                    if row[0] != "dead":
                        raise Conflict(f"run {run_id} is {row[0]}, not dead")
                    ids.append(run_id)
            elif job_name is not None:
                job_id = self._job_row(c, job_name)["id"]
                ids = [
                    r[0]
                    for r in c.execute(
                        "SELECT id FROM runs WHERE job_id = ? AND state = 'dead'", (job_id,)
                    )
                ]
            elif all_jobs:
                ids = [r[0] for r in c.execute("SELECT id FROM runs WHERE state = 'dead'")]
            else:
                raise UsageError("name a job, run ids, or --all")
            for run_id in ids:
                c.execute(
                    "UPDATE runs SET state = 'pending', max_attempts = attempt + "
                    "(SELECT retries + 1 FROM jobs WHERE jobs.id = runs.job_id), "
                    "not_before = ?, finished_at = NULL, leased_by = NULL, lease_until = NULL, "
                    "cancel_requested = 0 WHERE id = ?",
                    (to_us(now), run_id),
                )
            return [
                _run_from_row(c.execute(_RUN_SELECT + " WHERE runs.id = ?", (i,)).fetchone())
                for i in ids
            ]

    def prune(self, cutoff: datetime) -> int:
        """Delete finished runs (succeeded, dead, cancelled, skipped) that ended before cutoff."""
        with self.write() as c:
            cur = c.execute(
                "DELETE FROM runs WHERE state IN ('succeeded','dead','cancelled','skipped') "
                "AND COALESCE(finished_at, scheduled_for) < ?",
                (to_us(cutoff),),
            )
            return cur.rowcount

    def cancel_job(self, name: str, now: datetime) -> tuple[Job, list[int]]:
        """Cancel a job's open runs and stop the job for good. Returns the job and run ids."""
        with self.write() as c:
            row = self._job_row(c, name)
            ids = [
                r[0]
                for r in c.execute(
                    "SELECT id FROM runs WHERE job_id = ? AND state IN "
                    "('pending','failed','leased')",
                    (row["id"],),
                )
            ]
            self._cancel_runs_tx(c, ids, now)
            c.execute(
                "UPDATE jobs SET state = 'cancelled', next_run_at = NULL, updated_at = ? "
                "WHERE id = ?",
                (to_us(now), row["id"]),
            )
            return _job_from_row(self._job_row(c, name)), ids

    def _after_run_end(self, c: sqlite3.Connection, job_id: int, now: datetime) -> Job | None:
        """A fixed-delay job's next window is its interval after the run ended."""
        jrow = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if jrow is None or jrow["state"] != "active" or not jrow["after_completion"]:
            return None
        open_runs = c.execute(
            "SELECT COUNT(*) FROM runs WHERE job_id = ? AND state IN ('pending','leased','failed')",
            (job_id,),
        ).fetchone()[0]
        if open_runs:
            return None
        job = _job_from_row(jrow)
        nxt = triggers.next_fire(job.trigger, now)
        # updated_at too: the scheduler's safety net re-reads changed jobs (lost wake-ups)
        c.execute(
            "UPDATE jobs SET next_run_at = ?, updated_at = ? WHERE id = ?",
            (_opt_us(nxt), to_us(now), job_id),
        )
        return replace(job, next_run_at=nxt)

    # ---------------------------------------------------------------- used by jobctl serve
    # used by jobctl serve: the dashboard's run strips and the /metrics scrape

    def recent_runs_by_job(self, per_job: int = 20) -> dict[int, list[Run]]:
        """The ``per_job`` most recent runs of every job (skipped ones too), newest first,
        by job id, for the dashboard's run strips: one short query a job, each read off the
        ``UNIQUE (job_id, scheduled_for)`` index (a window function over every run is
        ten times slower at 100,000 runs)."""
        out: dict[int, list[Run]] = {}
        for (job_id,) in self._read("SELECT id FROM jobs ORDER BY id"):
            rows = self._read(
                _RUN_SELECT + " WHERE runs.job_id = ? ORDER BY runs.scheduled_for DESC LIMIT ?",
                (job_id, per_job),
            )
            if rows:
                out[job_id] = [_run_from_row(r) for r in rows]
        return out

    def run_counts_by_job(self) -> list[tuple[str, int, str | None, int]]:
        """(job name, job's missed_total, run state or None, runs in that state) for every
        job and state it has runs in (a job without runs: one row with state None).
        One query over the (job_id, state) index."""
        rows = self._read(
            "SELECT jobs.name, jobs.missed_total, c.state, COALESCE(c.n, 0) FROM jobs "
            "LEFT JOIN (SELECT job_id, state, COUNT(*) AS n FROM runs GROUP BY job_id, state) c "
            "ON c.job_id = jobs.id ORDER BY jobs.name, c.state"
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def attempt_duration_histogram(
        self, bounds_seconds: Sequence[float]
    ) -> list[tuple[str, list[int], int, float]]:
        """Per job with finished attempts: (job name, cumulative count of attempts that
        lasted at most each bound, count of all, sum of their seconds). One query."""
        buckets = ", ".join(
            f"SUM(a.finished_at - a.started_at <= {int(b * 1_000_000)})" for b in bounds_seconds
        )
        rows = self._read(
            f"SELECT jobs.name, {buckets + ', ' if buckets else ''}COUNT(*), "
            "SUM(a.finished_at - a.started_at) FROM attempts a "
            "JOIN runs ON runs.id = a.run_id JOIN jobs ON jobs.id = runs.job_id "
            "WHERE a.finished_at IS NOT NULL GROUP BY jobs.id ORDER BY jobs.name"
        )
        n = len(bounds_seconds)
        return [
            (r[0], [int(r[1 + i] or 0) for i in range(n)], int(r[1 + n]), (r[2 + n] or 0) / 1e6)
            for r in rows
        ]
