"""The commands' face of the SQLite store (:class:`~jobctl.store.protocol.CommandStore`)."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ...clock import from_us, to_us
from ...errors import Conflict, NotFound, StoreError, UsageError
from ...models import (
    Attempt,
    DaemonInfo,
    Job,
    JobSpec,
    JobState,
    Run,
    RunReason,
    RunState,
    WaitFacts,
    Window,
)
from ..protocol import CopiedJob, DbInfo, Status
from . import sql
from .db import Db
from .rows import attempt_from_row, job_from_row, opt_dt, opt_us, run_from_row, settings_json
from .schema import SCHEMA_VERSION
from .wake import poke


def spec_columns(spec: JobSpec) -> dict[str, Any]:
    """The ``jobs`` columns that hold a spec (what ``add`` sets and ``edit`` changes)."""
    t = spec.trigger
    return {
        "name": spec.name,
        "description": spec.description,
        "trigger_kind": t.kind.value,
        "trigger_expr": t.expr,
        "trigger_tz": t.tz,
        "every_seconds": t.every_seconds,
        "anchor_at": opt_us(t.anchor),
        "once_at": opt_us(t.at),
        "after_completion": int(t.after_completion),
        "command": spec.command,
        "stdin": spec.stdin,
        "env": json.dumps(spec.env, sort_keys=True),
        "cwd": spec.cwd,
        "shell": spec.shell,
        "catchup": spec.catchup.value,
        "catchup_limit": spec.catchup_limit,
        "overlap": spec.overlap.value,
        "timeout_seconds": spec.timeout_seconds,
        "retries": spec.retries,
        "backoff_seconds": spec.backoff_seconds,
        "priority": spec.priority,
        "jitter_seconds": spec.jitter_seconds,
        "on_failure": spec.on_failure,
        "locks": json.dumps(list(spec.locks)),
    }


def job_row(c: sqlite3.Connection, name: str) -> sqlite3.Row:
    row: sqlite3.Row | None = c.execute(sql.JOB_BY_NAME, (name,)).fetchone()
    if row is None:
        raise NotFound(f"no job named {name!r}")
    return row


def run_by_id(c: sqlite3.Connection, run_id: int) -> Run:
    row = c.execute(sql.RUN_BY_ID, (run_id,)).fetchone()
    if row is None:
        raise NotFound(f"no run with id {run_id}")
    return run_from_row(row)


def insert_run(
    c: sqlite3.Connection,
    job: Job,
    w: Window,
    now: datetime,
    *,
    key: str | None = None,
    env: dict[str, str] | None = None,
    extra_locks: Sequence[str] = (),
    priority: int | None = None,
) -> int | None:
    """Insert one run row; a window already present is left as it is (returns None)."""
    spec = job.spec
    row = c.execute(
        sql.INSERT_RUN,
        {
            "job_id": job.id,
            "scheduled_for": to_us(w.scheduled_for),
            "state": w.state.value,
            "skip_reason": w.skip_reason.value if w.skip_reason else None,
            "reason": w.reason.value,
            "catchup_from": opt_us(w.catchup_from),
            "max_attempts": spec.retries + 1,
            "not_before": opt_us(w.not_before or w.scheduled_for),
            "priority": spec.priority if priority is None else priority,
            "run_key": key,
            "env": json.dumps(env or {}, sort_keys=True),
            "settings": settings_json(spec),
            "now": to_us(now),
            "finished_at": to_us(now) if w.state is RunState.SKIPPED else None,
        },
    ).fetchone()
    if row is None:
        return None
    run_id: int = row[0]
    if w.state is not RunState.SKIPPED:
        for lock in sorted(set(spec.locks) | set(extra_locks)):
            c.execute(sql.INSERT_RUN_LOCK, (run_id, lock))
    return run_id


def cancel_runs_tx(c: sqlite3.Connection, ids: Sequence[int], now: datetime) -> None:
    """Waiting runs end cancelled; leased ones get a cancel request for their daemon."""
    for run_id in ids:
        c.execute(sql.CANCEL_WAITING_RUN, (to_us(now), run_id))
        c.execute(sql.REQUEST_CANCEL, (run_id,))


def _withdraw_early(c: sqlite3.Connection, job_id: int, now: datetime) -> list[int]:
    """Delete the job's windows recorded ahead of their time that have not come yet (a
    pause, an edit or a cancel decides them again); their times (µs)."""
    return [r[0] for r in c.execute(sql.WITHDRAW_EARLY_RUNS, (job_id, to_us(now))).fetchall()]


class SqliteCommands:
    """See :class:`~jobctl.store.protocol.CommandStore` for the rules of every method."""

    backend = "sqlite"

    def __init__(self, db: Db) -> None:
        self.db = db

    # ------------------------------------------------------------------ jobs

    def get_job(self, name: str) -> Job:
        rows = self.db.read(sql.JOB_BY_NAME, (name,))
        if not rows:
            raise NotFound(f"no job named {name!r}")
        return job_from_row(rows[0])

    def list_jobs(self) -> list[Job]:
        try:
            cur = self.db.conn.execute(sql.JOBS_ALL)
            cols = [d[0] for d in cur.description]
            rows = cur.fetchall()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"database error: {e}") from None
        # plain dicts: a name lookup on sqlite3.Row costs more than building them
        return [job_from_row(dict(zip(cols, r, strict=True))) for r in rows]

    def job_names(self) -> list[str]:
        return [r[0] for r in self.db.read(sql.JOB_NAMES)]

    def last_runs(self, job_ids: Sequence[int] | None = None) -> dict[int, Run]:
        ids = None if job_ids is None else sorted(set(job_ids))
        only = "" if ids is None else f"AND job_id IN ({', '.join('?' * len(ids))})"
        out = {}
        for r in self.db.read(sql.LAST_RUNS.format(only=only), ids or ()):
            run = run_from_row(r)
            out[run.job_id] = run
        return out

    def _upsert(
        self,
        c: sqlite3.Connection,
        spec: JobSpec,
        next_run_at: datetime | None,
        now: datetime,
        job_id: int | None,
        paused: bool,
    ) -> None:
        cols = spec_columns(spec)
        cols.update(
            state=(JobState.PAUSED if paused else JobState.ACTIVE).value,
            schedule_from=to_us(now),
            next_run_at=None if paused else opt_us(next_run_at),
            updated_at=to_us(now),
        )
        if job_id is None:
            cols["created_at"] = to_us(now)
            c.execute(
                sql.INSERT_JOB.format(names=", ".join(cols), marks=", ".join("?" for _ in cols)),
                list(cols.values()),
            )
        else:
            sets = ", ".join(f"{k} = ?" for k in cols)
            c.execute(sql.UPDATE_JOB.format(sets=sets), [*cols.values(), job_id])

    def add_job(
        self,
        spec: JobSpec,
        next_run_at: datetime | None,
        now: datetime,
        *,
        paused: bool = False,
        replace_existing: bool = False,
    ) -> Job:
        with self.db.write() as c:
            existing = c.execute(sql.JOB_ID_BY_NAME, (spec.name,)).fetchone()
            if existing is not None and not replace_existing:
                raise Conflict(f"a job named {spec.name!r} already exists (use --replace)")
            job_id = None if existing is None else existing["id"]
            self._upsert(c, spec, next_run_at, now, job_id, paused)
            return job_from_row(job_row(c, spec.name))

    def add_jobs(
        self, items: Sequence[tuple[JobSpec, datetime | None]], now: datetime
    ) -> list[tuple[Job, bool]]:
        out = []
        with self.db.write() as c:
            for spec, next_run_at in items:
                row = c.execute(sql.JOB_BY_NAME, (spec.name,)).fetchone()
                cols = spec_columns(spec)
                if row is not None and all(row[k] == v for k, v in cols.items()):
                    out.append((job_from_row(row), False))
                    continue
                job_id = None if row is None else row["id"]
                self._upsert(c, spec, next_run_at, now, job_id, False)
                out.append((job_from_row(job_row(c, spec.name)), True))
        return out

    def edit_job(
        self,
        name: str,
        changes: dict[str, Any],
        now: datetime,
        *,
        next_run_at: datetime | None = None,
        restart_schedule: bool = False,
    ) -> Job:
        with self.db.write() as c:
            job = job_from_row(job_row(c, name))
            new_spec = replace(job.spec, **changes)
            if new_spec.name != name and c.execute(sql.JOB_ID_BY_NAME, (new_spec.name,)).fetchone():
                raise Conflict(f"a job named {new_spec.name!r} already exists")
            cols = spec_columns(new_spec)
            cols["updated_at"] = to_us(now)
            early = _withdraw_early(c, job.id, now)
            if restart_schedule and job.state in (JobState.ACTIVE, JobState.DONE):
                # a new trigger starts from now; a one-shot that was done becomes active
                cols["state"] = JobState.ACTIVE.value
                cols["schedule_from"] = to_us(now)
                cols["next_run_at"] = opt_us(next_run_at)
            elif early:
                # the window comes again, decided with the job as it is now
                cols["state"] = JobState.ACTIVE.value
                cols["next_run_at"] = min(early)
            sets = ", ".join(f"{k} = ?" for k in cols)
            c.execute(sql.UPDATE_JOB.format(sets=sets), [*cols.values(), job.id])
            return job_from_row(job_row(c, new_spec.name))

    def pause_job(self, name: str, now: datetime) -> Job:
        with self.db.write() as c:
            row = job_row(c, name)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be paused")
            _withdraw_early(c, row["id"], now)
            c.execute(sql.PAUSE_JOB, (to_us(now), row["id"]))
            return job_from_row(job_row(c, name))

    def resume_job(self, name: str, next_run_at: datetime | None, now: datetime) -> Job:
        with self.db.write() as c:
            row = job_row(c, name)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be resumed")
            if row["state"] == JobState.ACTIVE.value:
                return job_from_row(row)
            c.execute(sql.RESUME_JOB, (to_us(now), opt_us(next_run_at), to_us(now), row["id"]))
            return job_from_row(job_row(c, name))

    def delete_job(self, name: str, *, force: bool = False) -> Job:
        with self.db.write() as c:
            row = job_row(c, name)
            if not force and c.execute(sql.LEASED_OF_JOB, (row["id"],)).fetchone()[0]:
                raise Conflict(f"job {name!r} has a running run; cancel it first or use --force")
            c.execute(sql.DELETE_JOB, (row["id"],))
            return job_from_row(row)

    def cancel_job(self, name: str, now: datetime) -> tuple[Job, list[int]]:
        with self.db.write() as c:
            row = job_row(c, name)
            _withdraw_early(c, row["id"], now)
            ids = [r[0] for r in c.execute(sql.OPEN_RUN_IDS_OF_JOB, (row["id"],))]
            cancel_runs_tx(c, ids, now)
            c.execute(sql.CANCEL_JOB, (to_us(now), row["id"]))
            return job_from_row(job_row(c, name)), ids

    # ------------------------------------------------------------------ runs

    def get_run(self, run_id: int) -> Run:
        rows = self.db.read(sql.RUN_BY_ID, (run_id,))
        if not rows:
            raise NotFound(f"no run with id {run_id}")
        return run_from_row(rows[0])

    def list_runs(
        self, job_name: str | None = None, state: RunState | None = None, limit: int = 20
    ) -> list[Run]:
        where: list[str] = []
        params: list[Any] = []
        if job_name is not None:
            where.append("runs.job_id = ?")
            params.append(self.get_job(job_name).id)
        if state is not None:
            where.append("runs.state = ?")
            params.append(state.value)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        params.append(limit)
        return [run_from_row(r) for r in self.db.read(sql.LIST_RUNS.format(where=clause), params)]

    def get_attempts(self, run_id: int) -> list[Attempt]:
        return [attempt_from_row(r) for r in self.db.read(sql.ATTEMPTS_OF_RUN, (run_id,))]

    def get_output(self, run_id: int, attempt: int | None = None) -> tuple[Attempt, bytes]:
        self.get_run(run_id)
        if attempt is None:
            rows = self.db.read(sql.LAST_ATTEMPT, (run_id,))
        else:
            rows = self.db.read(sql.ONE_ATTEMPT, (run_id, attempt))
        if not rows:
            which = "attempts yet" if attempt is None else f"attempt {attempt}"
            raise NotFound(f"run {run_id} has no {which}")
        return attempt_from_row(rows[0]), bytes(rows[0]["output"] or b"")

    def waiting(self, run_id: int, now: datetime) -> WaitFacts | None:
        rows = self.db.read(sql.WAITING, {"run_id": run_id, "now": to_us(now)})
        if not rows:
            raise NotFound(f"no run with id {run_id}")
        r = rows[0]
        state = RunState(r["state"])
        if state not in (RunState.PENDING, RunState.FAILED):
            return None
        return WaitFacts(
            run_id=run_id,
            job_name=r["job_name"],
            state=state,
            not_before=opt_dt(r["not_before"]),
            due=bool(r["due"]),
            paused=bool(r["paused"]),
            lock=None if r["lock_name"] is None else (r["lock_name"], r["lock_holder"]),
            overlap_run_id=r["overlap_run"],
            claimable=bool(r["claimable"]),
            live_daemons=r["live_daemons"],
            leased_runs=r["leased_runs"],
        )

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
        with self.db.write() as c:
            job = job_from_row(job_row(c, name))
            if job.state is JobState.CANCELLED:
                raise Conflict(f"job {name!r} is cancelled")
            if key is not None:
                found = c.execute(sql.RUN_BY_KEY, (job.id, key)).fetchone()
                if found is not None:
                    return run_by_id(c, found[0]), False
            window = to_us(now)
            while c.execute(sql.WINDOW_TAKEN, (job.id, window)).fetchone():
                window += 1
            run_id = insert_run(
                c,
                job,
                Window(from_us(window), RunState.PENDING, RunReason.MANUAL, not_before=now),
                now,
                key=key,
                env=env or {},
                extra_locks=locks,
                priority=priority,
            )
            if run_id is None:  # the window was checked free in this same transaction
                raise StoreError(f"database error: window of job {name!r} taken")
            return run_by_id(c, run_id), True

    def cancel_runs(self, ids: Sequence[int], now: datetime) -> list[Run]:
        with self.db.write() as c:
            for run_id in ids:
                run_by_id(c, run_id)
            cancel_runs_tx(c, ids, now)
            return [run_by_id(c, i) for i in ids]

    def retry_dead(
        self,
        now: datetime,
        *,
        job_name: str | None = None,
        run_ids: Sequence[int] = (),
        all_jobs: bool = False,
    ) -> list[Run]:
        with self.db.write() as c:
            if run_ids:
                ids = []
                for run_id in run_ids:
                    row = c.execute(sql.RUN_EXISTS, (run_id,)).fetchone()
                    if row is None:
                        raise NotFound(f"no run with id {run_id}")
                    if row[0] != "dead":
                        raise Conflict(f"run {run_id} is {row[0]}, not dead")
                    ids.append(run_id)
            elif job_name is not None:
                job_id = job_row(c, job_name)["id"]
                ids = [r[0] for r in c.execute(sql.DEAD_IDS_OF_JOB, (job_id,))]
            elif all_jobs:
                ids = [r[0] for r in c.execute(sql.DEAD_IDS)]
            else:
                raise UsageError("name a job, run ids, or --all")
            for run_id in ids:
                c.execute(sql.RETRY_DEAD, (to_us(now), run_id))
            return [run_by_id(c, i) for i in ids]

    def prune(self, cutoff: datetime) -> int:
        with self.db.write() as c:
            return c.execute(sql.PRUNE, (to_us(cutoff),)).rowcount

    # ------------------------------------------------------------------ the system

    def status(self, now: datetime) -> Status:
        daemons = self.live_daemons(now)
        counts = {s.value: 0 for s in RunState}
        for r in self.db.read(sql.COUNTS_BY_STATE):
            counts[r[0]] = r[1]
        vals = [
            v
            for v in (self.db.read(sql.NEXT_WINDOW)[0][0], self.db.read(sql.NEXT_DUE_RUN)[0][0])
            if v is not None
        ]
        return Status(daemons, counts, from_us(min(vals)) if vals else None)

    def live_daemons(self, now: datetime) -> list[DaemonInfo]:
        return [
            DaemonInfo(
                id=r["id"],
                pid=r["pid"],
                host=r["host"],
                leader=r["leader"] == r["id"],
                started_at=from_us(r["started_at"]),
                heartbeat_at=from_us(r["heartbeat_at"]),
                wake_address=r["wake_address"],
                boot_id=r["boot_id"],
            )
            for r in self.db.read(sql.LIVE_DAEMONS, {"now": to_us(now)})
        ]

    def notify(self, message: str) -> None:
        """Send ``message`` to every registered daemon's wake socket (hints only: a dead
        daemon's address simply does not answer; the table stays the truth)."""
        try:
            rows = self.db.conn.execute(sql.WAKE_ADDRESSES).fetchall()
        except sqlite3.DatabaseError:
            return  # a hint; the daemon's renewal re-reads what changed
        poke([r[0] for r in rows], message)

    def info(self) -> DbInfo:
        jobs = self.db.read(sql.COUNT_JOBS)[0][0]
        runs = self.db.read(sql.COUNT_RUNS)[0][0]
        size = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                size += os.stat(str(self.db.path) + suffix).st_size
            except OSError:
                pass
        return DbInfo("sqlite", str(self.db.path), SCHEMA_VERSION, jobs, runs, size)

    def load_copy(self, jobs: Sequence[CopiedJob], now: datetime, *, history: bool) -> int:
        """``db copy`` into this file (see :func:`.transfer.load_copy`)."""
        from .transfer import load_copy

        return load_copy(self.db, jobs, now, history=history)

    # ---------------------------------------------------------------- used by jobctl serve
    # used by jobctl serve: the dashboard's run strips and the /metrics scrape

    def recent_runs_by_job(self, per_job: int = 20) -> dict[int, list[Run]]:
        """The ``per_job`` most recent runs of every job (skipped ones too), newest first,
        by job id, for the dashboard's run strips: one short indexed query a job (a window
        function over every run is several times slower at 100,000 runs)."""
        out: dict[int, list[Run]] = {}
        for (job_id,) in self.db.read(sql.JOB_IDS):
            rows = self.db.read(sql.RECENT_RUNS_OF_JOB, (job_id, per_job))
            if rows:
                out[job_id] = [run_from_row(r) for r in rows]
        return out

    def run_counts_by_job(self) -> list[tuple[str, int, str | None, int]]:
        """(job name, its missed_total, run state or None, runs in that state) for every job
        and each state it has runs in (a job without runs: one row, state None). One query."""
        return [(r[0], r[1], r[2], r[3]) for r in self.db.read(sql.RUN_COUNTS_BY_JOB)]

    def attempt_duration_histogram(
        self, bounds_seconds: Sequence[float]
    ) -> list[tuple[str, list[int], int, float]]:
        """Per job with finished attempts: (job name, how many lasted at most each bound
        (cumulative), how many in all, the sum of their seconds). One query."""
        buckets = "".join(
            f"SUM(a.finished_at - a.started_at <= {int(b * 1_000_000)}), " for b in bounds_seconds
        )
        n = len(bounds_seconds)
        return [
            (r[0], [int(r[1 + i] or 0) for i in range(n)], int(r[1 + n]), (r[2 + n] or 0) / 1e6)
            for r in self.db.read(sql.ATTEMPT_DURATION_HISTOGRAM.format(buckets=buckets))
        ]


__all__ = ["SqliteCommands", "cancel_runs_tx", "insert_run", "job_row", "opt_dt", "run_by_id"]
