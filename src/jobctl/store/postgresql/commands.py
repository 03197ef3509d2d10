"""The commands' face of the PostgreSQL store (:class:`~jobctl.store.protocol.CommandStore`):
the same operations and results as :mod:`jobctl.store.sqlite.commands`.

Each method is one READ COMMITTED transaction. Where SQLite's ``BEGIN IMMEDIATE``
serialises writers, this store locks what it decides on (the job's row ``FOR UPDATE``, an
advisory lock on a new job's name), and each change is announced with ``NOTIFY`` inside
its own transaction.
"""

from __future__ import annotations

import json
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
from ..sqlite.rows import (
    attempt_from_row,
    job_from_row,
    opt_dt,
    opt_us,
    run_from_row,
    settings_json,
)
from ..transfer import attempt_columns, job_columns, run_columns
from .db import PgDb, retrying
from .schema import SCHEMA_VERSION

RUN_SELECT = """
SELECT runs.*, jobs.name AS job_name,
       (SELECT string_agg(l.name, E'\\n' ORDER BY l.name) FROM run_locks l
        WHERE l.run_id = runs.id) AS lock_list,
       la.started_at AS attempt_started_at, la.finished_at AS attempt_finished_at,
       la.host AS attempt_host
FROM runs JOIN jobs ON jobs.id = runs.job_id
LEFT JOIN attempts la ON la.run_id = runs.id AND la.attempt = runs.attempt
"""

# why a run waits, from the predicates the claim uses (held_locks: the locks of leased runs)
_LOCK_HELD = """
    FROM run_locks mine JOIN held_locks h ON h.name = mine.name AND h.run_id <> mine.run_id
    WHERE mine.run_id = runs.id ORDER BY h.name, h.run_id LIMIT 1
"""
WAITING = f"""
SELECT runs.state, runs.not_before, j.name AS job_name,
    (runs.not_before IS NOT NULL AND runs.not_before <= %(now)s) AS due,
    (j.state = 'paused') AS paused,
    (SELECT h.name {_LOCK_HELD}) AS lock_name,
    (SELECT h.run_id {_LOCK_HELD}) AS lock_holder,
    CASE WHEN j.overlap IN ('forbid', 'replace') THEN (
        SELECT sib.id FROM runs sib WHERE sib.job_id = runs.job_id AND sib.id <> runs.id
        AND sib.state = 'leased' ORDER BY sib.id LIMIT 1) END AS overlap_run,
    (SELECT COUNT(*) FROM daemons WHERE expires_at >= %(now)s) AS live_daemons,
    (SELECT COUNT(*) FROM runs r2 WHERE r2.state = 'leased') AS leased_runs
FROM runs JOIN jobs j ON j.id = runs.job_id
WHERE runs.id = %(run_id)s
"""
RUN_BY_ID = RUN_SELECT + " WHERE runs.id = %s"

INSERT_RUN = """
INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, catchup_from, attempt,
    max_attempts, not_before, priority, run_key, env, settings, created_at, finished_at)
VALUES (%(job_id)s, %(scheduled_for)s, %(state)s, %(skip_reason)s, %(reason)s,
    %(catchup_from)s, 0, %(max_attempts)s, %(not_before)s, %(priority)s, %(run_key)s, %(env)s,
    %(settings)s, %(now)s, %(finished_at)s)
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id
"""


def spec_columns(spec: JobSpec) -> dict[str, Any]:
    """The ``jobs`` columns that hold a spec (what ``add`` sets and ``edit`` changes)."""
    from ..sqlite.commands import spec_columns as columns

    return columns(spec)


def job_row(c: Any, name: str, *, lock: bool = False) -> dict[str, Any]:
    """The job's row (``lock``: locked for the rest of the transaction). Raises NotFound."""
    sql = "SELECT * FROM jobs WHERE name = %s" + (" FOR UPDATE" if lock else "")
    row: dict[str, Any] | None = c.execute(sql, (name,)).fetchone()
    if row is None:
        raise NotFound(f"no job named {name!r}")
    return row


def run_by_id(c: Any, run_id: int) -> Run:
    row = c.execute(RUN_BY_ID, (run_id,)).fetchone()
    if row is None:
        raise NotFound(f"no run with id {run_id}")
    return run_from_row(row)


def insert_run(
    c: Any,
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
        INSERT_RUN,
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
    run_id = int(row["id"])
    if w.state is not RunState.SKIPPED:
        for lock in sorted(set(spec.locks) | set(extra_locks)):
            c.execute("INSERT INTO run_locks (run_id, name) VALUES (%s, %s)", (run_id, lock))
    return run_id


def cancel_runs_tx(c: Any, ids: Sequence[int], now: datetime) -> None:
    """Waiting runs end cancelled; leased ones get a cancel request for their daemon."""
    for run_id in ids:
        c.execute(
            "UPDATE runs SET state = 'cancelled', finished_at = %s, "
            "last_error = COALESCE(last_error, 'cancelled') "
            "WHERE id = %s AND state IN ('pending', 'failed')",
            (to_us(now), run_id),
        )
        c.execute(
            "UPDATE runs SET cancel_requested = 1 WHERE id = %s AND state = 'leased'", (run_id,)
        )


def _withdraw_early(c: Any, job_id: int, now: datetime) -> list[int]:
    """Delete the job's windows recorded ahead of their time (the scheduler's
    FIRE_AHEAD_SECONDS) that have not come yet: a pause, an edit or a cancel decides them
    again. Their times (µs)."""
    rows = c.execute(
        "DELETE FROM runs WHERE job_id = %s AND state = 'pending' AND attempt = 0 "
        "AND reason = 'schedule' AND scheduled_for > %s RETURNING scheduled_for",
        (job_id, to_us(now)),
    ).fetchall()
    return [r["scheduled_for"] for r in rows]


def live_daemons(db: PgDb, now: datetime) -> list[DaemonInfo]:
    now_us = to_us(now)
    rows = db.read(
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
            boot_id=r["boot_id"],
        )
        for r in rows
    ]


@retrying
class PgCommands:
    """See :class:`~jobctl.store.protocol.CommandStore` for the rules of every method."""

    backend = "postgresql"

    def __init__(self, db: PgDb) -> None:
        self.db = db

    # ------------------------------------------------------------------ jobs

    def get_job(self, name: str) -> Job:
        rows = self.db.read("SELECT * FROM jobs WHERE name = %s", (name,))
        if not rows:
            raise NotFound(f"no job named {name!r}")
        return job_from_row(rows[0])

    def list_jobs(self) -> list[Job]:
        return [job_from_row(r) for r in self.db.read("SELECT * FROM jobs ORDER BY name")]

    def job_names(self) -> list[str]:
        return [r["name"] for r in self.db.read("SELECT name FROM jobs ORDER BY name")]

    def last_runs(self, job_ids: Sequence[int] | None = None) -> dict[int, Run]:
        ids = None if job_ids is None else sorted(set(job_ids))
        only = "" if ids is None else "AND job_id = ANY(%s::bigint[])"
        sql = (
            RUN_SELECT
            + f"""
            WHERE runs.id IN (
                SELECT MAX(id) FROM runs WHERE state <> 'skipped' {only} GROUP BY job_id
            )"""
        )
        out = {}
        for r in self.db.read(sql, () if ids is None else (ids,)):
            run = run_from_row(r)
            out[run.job_id] = run
        return out

    def _upsert(
        self,
        c: Any,
        spec: JobSpec,
        next_run_at: datetime | None,
        now: datetime,
        job_id: int | None,
        paused: bool,
    ) -> int:
        cols = spec_columns(spec)
        cols.update(
            state=(JobState.PAUSED if paused else JobState.ACTIVE).value,
            schedule_from=to_us(now),
            next_run_at=None if paused else opt_us(next_run_at),
            updated_at=to_us(now),
        )
        if job_id is None:
            cols["created_at"] = to_us(now)
            names = ", ".join(cols)
            marks = ", ".join("%s" for _ in cols)
            row = c.execute(
                f"INSERT INTO jobs ({names}) VALUES ({marks}) RETURNING id", list(cols.values())
            ).fetchone()
            job_id = int(row["id"])
        else:
            sets = ", ".join(f"{k} = %s" for k in cols)
            c.execute(f"UPDATE jobs SET {sets} WHERE id = %s", [*cols.values(), job_id])
        self.db.announce(f"job:{job_id}")
        return job_id

    @staticmethod
    def _lock_name(c: Any, name: str) -> None:
        # two adds of one new name at once: the second waits here, then sees the first
        c.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("job:" + name,))

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
            self._lock_name(c, spec.name)
            existing = c.execute("SELECT id FROM jobs WHERE name = %s", (spec.name,)).fetchone()
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
                self._lock_name(c, spec.name)
                row = c.execute("SELECT * FROM jobs WHERE name = %s", (spec.name,)).fetchone()
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
            job = job_from_row(job_row(c, name, lock=True))
            new_spec = replace(job.spec, **changes)
            if new_spec.name != name:
                self._lock_name(c, new_spec.name)
                if c.execute("SELECT 1 FROM jobs WHERE name = %s", (new_spec.name,)).fetchone():
                    raise Conflict(f"a job named {new_spec.name!r} already exists")
            cols = spec_columns(new_spec)
            cols["updated_at"] = to_us(now)
            early = _withdraw_early(c, job.id, now)
            if restart_schedule and job.state in (JobState.ACTIVE, JobState.DONE):
                cols["state"] = JobState.ACTIVE.value
                cols["schedule_from"] = to_us(now)
                cols["next_run_at"] = opt_us(next_run_at)
            elif early:
                # the window comes again, decided with the job as it is now
                cols["state"] = JobState.ACTIVE.value
                cols["next_run_at"] = min(early)
            sets = ", ".join(f"{k} = %s" for k in cols)
            c.execute(f"UPDATE jobs SET {sets} WHERE id = %s", [*cols.values(), job.id])
            self.db.announce(f"job:{job.id}")
            return job_from_row(job_row(c, new_spec.name))

    def pause_job(self, name: str, now: datetime) -> Job:
        with self.db.write() as c:
            row = job_row(c, name, lock=True)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be paused")
            _withdraw_early(c, row["id"], now)
            c.execute(
                "UPDATE jobs SET state = 'paused', next_run_at = NULL, updated_at = %s "
                "WHERE id = %s",
                (to_us(now), row["id"]),
            )
            self.db.announce(f"job:{row['id']}")
            return job_from_row(job_row(c, name))

    def resume_job(self, name: str, next_run_at: datetime | None, now: datetime) -> Job:
        with self.db.write() as c:
            row = job_row(c, name, lock=True)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be resumed")
            if row["state"] == JobState.ACTIVE.value:
                return job_from_row(row)
            c.execute(
                "UPDATE jobs SET state = 'active', schedule_from = %s, next_run_at = %s, "
                "updated_at = %s WHERE id = %s",
                (to_us(now), opt_us(next_run_at), to_us(now), row["id"]),
            )
            self.db.announce(f"job:{row['id']}")
            return job_from_row(job_row(c, name))

    def delete_job(self, name: str, *, force: bool = False) -> Job:
        with self.db.write() as c:
            row = job_row(c, name, lock=True)
            if not force:
                leased = c.execute(
                    "SELECT COUNT(*) AS n FROM runs WHERE job_id = %s AND state = 'leased'",
                    (row["id"],),
                ).fetchone()["n"]
                if leased:
                    raise Conflict(
                        f"job {name!r} has a running run; cancel it first or use --force"
                    )
            c.execute("DELETE FROM jobs WHERE id = %s", (row["id"],))
            self.db.announce(f"job:{row['id']}")
            return job_from_row(row)

    def cancel_job(self, name: str, now: datetime) -> tuple[Job, list[int]]:
        with self.db.write() as c:
            row = job_row(c, name, lock=True)
            _withdraw_early(c, row["id"], now)
            ids = [
                r["id"]
                for r in c.execute(
                    "SELECT id FROM runs WHERE job_id = %s AND "
                    "state IN ('pending', 'failed', 'leased') ORDER BY id",
                    (row["id"],),
                )
            ]
            cancel_runs_tx(c, ids, now)
            c.execute(
                "UPDATE jobs SET state = 'cancelled', next_run_at = NULL, updated_at = %s "
                "WHERE id = %s",
                (to_us(now), row["id"]),
            )
            self.db.announce(f"job:{row['id']}")
            self.db.announce("run")
            return job_from_row(job_row(c, name)), ids

    # ------------------------------------------------------------------ runs

    def get_run(self, run_id: int) -> Run:
        rows = self.db.read(RUN_BY_ID, (run_id,))
        if not rows:
            raise NotFound(f"no run with id {run_id}")
        return run_from_row(rows[0])

    def list_runs(
        self, job_name: str | None = None, state: RunState | None = None, limit: int = 20
    ) -> list[Run]:
        where: list[str] = []
        params: list[Any] = []
        if job_name is not None:
            where.append("runs.job_id = %s")
            params.append(self.get_job(job_name).id)
        if state is not None:
            where.append("runs.state = %s")
            params.append(state.value)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        params.append(limit)
        sql = RUN_SELECT + f" {clause} ORDER BY runs.scheduled_for DESC, runs.id DESC LIMIT %s"
        return [run_from_row(r) for r in self.db.read(sql, params)]

    def get_attempts(self, run_id: int) -> list[Attempt]:
        rows = self.db.read("SELECT * FROM attempts WHERE run_id = %s ORDER BY attempt", (run_id,))
        return [attempt_from_row(r) for r in rows]

    def get_output(self, run_id: int, attempt: int | None = None) -> tuple[Attempt, bytes]:
        self.get_run(run_id)
        if attempt is None:
            rows = self.db.read(
                "SELECT * FROM attempts WHERE run_id = %s ORDER BY attempt DESC LIMIT 1",
                (run_id,),
            )
        else:
            rows = self.db.read(
                "SELECT * FROM attempts WHERE run_id = %s AND attempt = %s", (run_id, attempt)
            )
        if not rows:
            which = "attempt yet" if attempt is None else f"attempt {attempt}"
            raise NotFound(f"run {run_id} has no {which}")
        return attempt_from_row(rows[0]), bytes(rows[0]["output"] or b"")

    def waiting(self, run_id: int, now: datetime) -> WaitFacts | None:
        rows = self.db.read(WAITING, {"run_id": run_id, "now": to_us(now)})
        if not rows:
            raise NotFound(f"no run with id {run_id}")
        r = rows[0]
        state = RunState(r["state"])
        if state not in (RunState.PENDING, RunState.FAILED):
            return None
        lock = None if r["lock_name"] is None else (r["lock_name"], r["lock_holder"])
        claimable = bool(r["due"]) and not r["paused"] and lock is None
        return WaitFacts(
            run_id=run_id,
            job_name=r["job_name"],
            state=state,
            not_before=opt_dt(r["not_before"]),
            due=bool(r["due"]),
            paused=bool(r["paused"]),
            lock=lock,
            overlap_run_id=r["overlap_run"],
            claimable=claimable and r["overlap_run"] is None,
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
            # the job's row lock serialises the enqueues of one job: keys and windows stay
            # unique without a retry
            job = job_from_row(job_row(c, name, lock=True))
            if job.state is JobState.CANCELLED:
                raise Conflict(f"job {name!r} is cancelled")
            if key is not None:
                found = c.execute(
                    "SELECT id FROM runs WHERE job_id = %s AND run_key = %s", (job.id, key)
                ).fetchone()
                if found is not None:
                    return run_by_id(c, found["id"]), False
            window = to_us(now)
            taken = "SELECT 1 FROM runs WHERE job_id = %s AND scheduled_for = %s"
            while c.execute(taken, (job.id, window)).fetchone():
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
            if run_id is None:  # the window was checked free under the job's lock
                raise StoreError(f"database error: window of job {name!r} taken")
            self.db.announce(f"run:{run_id}")
            return run_by_id(c, run_id), True

    def cancel_runs(self, ids: Sequence[int], now: datetime) -> list[Run]:
        with self.db.write() as c:
            for run_id in ids:
                run_by_id(c, run_id)
            cancel_runs_tx(c, ids, now)
            self.db.announce("run:cancel")
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
                    row = c.execute(
                        "SELECT state FROM runs WHERE id = %s FOR UPDATE", (run_id,)
                    ).fetchone()
                    if row is None:
                        raise NotFound(f"no run with id {run_id}")
                    if row["state"] != "dead":
                        raise Conflict(f"run {run_id} is {row['state']}, not dead")
                    ids.append(run_id)
            elif job_name is not None:
                job_id = job_row(c, job_name)["id"]
                ids = [
                    r["id"]
                    for r in c.execute(
                        "SELECT id FROM runs WHERE job_id = %s AND state = 'dead' "
                        "ORDER BY id FOR UPDATE",
                        (job_id,),
                    )
                ]
            elif all_jobs:
                ids = [
                    r["id"]
                    for r in c.execute(
                        "SELECT id FROM runs WHERE state = 'dead' ORDER BY id FOR UPDATE"
                    )
                ]
            else:
                raise UsageError("name a job, run ids, or --all")
            for run_id in ids:
                c.execute(
                    "UPDATE runs SET state = 'pending', attempt_base = attempt, "
                    "max_attempts = attempt + "
                    "(SELECT retries + 1 FROM jobs WHERE jobs.id = runs.job_id), "
                    "not_before = %s, finished_at = NULL, leased_by = NULL, lease_until = NULL, "
                    "cancel_requested = 0, hook_status = NULL WHERE id = %s",
                    (to_us(now), run_id),
                )
            if ids:
                self.db.announce("run:retry")
            return [run_by_id(c, i) for i in ids]

    def prune(self, cutoff: datetime) -> int:
        with self.db.write() as c:
            cur = c.execute(
                "DELETE FROM runs WHERE state IN ('succeeded', 'dead', 'cancelled', 'skipped') "
                "AND COALESCE(finished_at, scheduled_for) < %s",
                (to_us(cutoff),),
            )
            return int(cur.rowcount)

    # ------------------------------------------------------------------ the system

    def status(self, now: datetime) -> Status:
        daemons = self.live_daemons(now)
        counts = {s.value: 0 for s in RunState}
        for r in self.db.read("SELECT state, COUNT(*) AS n FROM runs GROUP BY state"):
            counts[r["state"]] = r["n"]
        a = self.db.scalar("SELECT MIN(next_run_at) FROM jobs WHERE state = 'active'")
        b = self.db.scalar("SELECT MIN(not_before) FROM runs WHERE state IN ('pending', 'failed')")
        vals = [v for v in (a, b) if v is not None]
        return Status(daemons, counts, from_us(min(vals)) if vals else None)

    def live_daemons(self, now: datetime) -> list[DaemonInfo]:
        return live_daemons(self.db, now)

    def notify(self, message: str) -> None:
        """A hint to every daemon on every host. The writes of this store already announce
        themselves in their own transactions; this one is for what a caller knows more."""
        self.db.notify(message)

    def info(self) -> DbInfo:
        jobs = int(self.db.scalar("SELECT COUNT(*) FROM jobs"))
        runs = int(self.db.scalar("SELECT COUNT(*) FROM runs"))
        size = int(
            self.db.scalar(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relnamespace = 'jobctl'::regnamespace AND c.relkind = 'r'"
            )
        )
        version = int(self.db.scalar("SELECT version FROM schema_version") or SCHEMA_VERSION)
        return DbInfo("postgresql", self.db.location, version, jobs, runs, size)

    def load_copy(self, jobs: Sequence[CopiedJob], now: datetime, *, history: bool) -> int:
        """``db copy`` into this database (see :func:`load_copy`)."""
        return load_copy(self.db, jobs, now, history=history)

    # ------------------------------------------------------------------ used by jobctl serve

    def recent_runs_by_job(self, per_job: int = 20) -> dict[int, list[Run]]:
        """The ``per_job`` most recent runs of every job (skipped ones too), newest first,
        by job id: one indexed query a job, as on SQLite."""
        out: dict[int, list[Run]] = {}
        for job in self.db.read("SELECT id FROM jobs ORDER BY id"):
            rows = self.db.read(
                RUN_SELECT + " WHERE runs.job_id = %s ORDER BY runs.scheduled_for DESC LIMIT %s",
                (job["id"], per_job),
            )
            if rows:
                out[job["id"]] = [run_from_row(r) for r in rows]
        return out

    def run_counts_by_job(self) -> list[tuple[str, int, str | None, int]]:
        """(job name, its missed_total, run state or None, runs in that state) for every job
        and each state it has runs in (a job without runs: one row, state None)."""
        rows = self.db.read(
            "SELECT jobs.name, jobs.missed_total, c.state, COALESCE(c.n, 0) AS n FROM jobs "
            "LEFT JOIN (SELECT job_id, state, COUNT(*) AS n FROM runs GROUP BY job_id, state) c "
            "ON c.job_id = jobs.id ORDER BY jobs.name, c.state"
        )
        return [(r["name"], int(r["missed_total"]), r["state"], int(r["n"])) for r in rows]

    def attempt_duration_histogram(
        self, bounds_seconds: Sequence[float]
    ) -> list[tuple[str, list[int], int, float]]:
        """Per job with finished attempts: (job name, how many lasted at most each bound
        (cumulative), how many in all, the sum of their seconds). One query."""
        buckets = "".join(
            f"COUNT(*) FILTER (WHERE a.finished_at - a.started_at <= {int(b * 1_000_000)}) "
            f"AS b{i}, "
            for i, b in enumerate(bounds_seconds)
        )
        rows = self.db.read(
            f"SELECT jobs.name, {buckets} COUNT(*) AS n, "
            "COALESCE(SUM(a.finished_at - a.started_at), 0) AS total FROM attempts a "
            "JOIN runs ON runs.id = a.run_id JOIN jobs ON jobs.id = runs.job_id "
            "WHERE a.finished_at IS NOT NULL GROUP BY jobs.id, jobs.name ORDER BY jobs.name"
        )
        n = len(bounds_seconds)
        return [
            (r["name"], [int(r[f"b{i}"]) for i in range(n)], int(r["n"]), int(r["total"]) / 1e6)
            for r in rows
        ]


def _insert(c: Any, table: str, cols: dict[str, Any]) -> int:
    names = ", ".join(cols)
    marks = ", ".join(f"%({k})s" for k in cols)
    sql = f"INSERT INTO {table} ({names}) VALUES ({marks})"
    if table in ("jobs", "runs"):
        return int(c.execute(sql + " RETURNING id", cols).fetchone()["id"])
    c.execute(sql, cols)
    return 0


def load_copy(db: PgDb, jobs: Sequence[CopiedJob], now: datetime, *, history: bool) -> int:
    """Insert every job (and its runs and attempts) with new ids, in one transaction.
    Refused (Conflict) when the database already holds a job. A copied leased run holds
    its locks and its job's overlap slot here too. Returns how many jobs."""
    with db.write() as c:
        c.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")  # no add meanwhile
        held = c.execute("SELECT COUNT(*) AS n FROM jobs").fetchone()["n"]
        if held:
            raise Conflict(f"the target database holds {held} jobs; db copy fills an empty one")
        for copied in jobs:
            job_id = _insert(c, "jobs", job_columns(copied, now, history=history))
            exclusive = copied.job.spec.overlap.value in ("forbid", "replace")
            for cr in copied.runs:
                cols = run_columns(cr.run, job_id)
                cols["exclusive"] = exclusive and cr.run.state is RunState.LEASED
                run_id = _insert(c, "runs", cols)
                for lock in cr.run.locks:
                    c.execute(
                        "INSERT INTO run_locks (run_id, name) VALUES (%s, %s)", (run_id, lock)
                    )
                    if cr.run.state is RunState.LEASED:
                        c.execute(
                            "INSERT INTO held_locks (name, run_id) VALUES (%s, %s) "
                            "ON CONFLICT DO NOTHING",
                            (lock, run_id),
                        )
                for a in cr.attempts:
                    _insert(c, "attempts", attempt_columns(a, run_id))
        db.announce("all")
    return len(jobs)


__all__ = [
    "PgCommands",
    "cancel_runs_tx",
    "insert_run",
    "job_row",
    "live_daemons",
    "load_copy",
    "run_by_id",
]
