"""Jobs and runs as the CLI sees them, on PostgreSQL: the same operations and results as
the SQLite store (:mod:`jobctl.store.jobs`, :mod:`jobctl.store.runs`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ... import triggers
from ...clock import from_us, to_us
from ...errors import Conflict, NotFound, UsageError
from ...models import Attempt, Job, JobSpec, JobState, Run, RunReason, RunState, Window
from ..rows import _attempt_from_row, _job_from_row, _opt_us, _run_from_row, _settings_json
from .connection import PgConnection

RUN_SELECT = """
SELECT runs.*, jobs.name AS job_name,
       (SELECT COALESCE(json_agg(l.name ORDER BY l.name), '[]')::text
        FROM run_locks l WHERE l.run_id = runs.id) AS lock_list
FROM runs JOIN jobs ON jobs.id = runs.job_id
"""


class PgJobOps(PgConnection):
    # ---------------------------------------------------------------- jobs

    def _job_row(self, c: Any, name: str, *, lock: bool = False) -> dict[str, Any]:
        sql = "SELECT * FROM jobs WHERE name = %s" + (" FOR UPDATE" if lock else "")
        row = c.execute(sql, (name,)).fetchone()
        if row is None:
            raise NotFound(f"no job named {name!r}")
        return row  # type: ignore[no-any-return]

    def _run_by_id(self, c: Any, run_id: int) -> Run:
        return _run_from_row(c.execute(RUN_SELECT + " WHERE runs.id = %s", (run_id,)).fetchone())

    def get_job(self, name: str) -> Job:
        rows = self._read("SELECT * FROM jobs WHERE name = %s", (name,))
        if not rows:
            raise NotFound(f"no job named {name!r}")
        return _job_from_row(rows[0])

    def get_job_by_id(self, job_id: int) -> Job | None:
        rows = self._read("SELECT * FROM jobs WHERE id = %s", (job_id,))
        return _job_from_row(rows[0]) if rows else None

    def list_jobs(self) -> list[Job]:
        return [_job_from_row(r) for r in self._read("SELECT * FROM jobs ORDER BY name")]

    def job_names(self) -> list[str]:
        return [r["name"] for r in self._read("SELECT name FROM jobs ORDER BY name")]

    def last_runs(self, job_ids: Iterable[int] | None = None) -> dict[int, Run]:
        """The most recent run that was not skipped, per job id."""
        ids = None if job_ids is None else sorted(set(job_ids))
        only = "" if ids is None else "AND job_id = ANY(%s)"
        sql = (
            RUN_SELECT
            + f"""
            WHERE runs.id IN (
                SELECT MAX(id) FROM runs WHERE state <> 'skipped' {only} GROUP BY job_id
            )"""
        )
        out = {}
        for r in self._read(sql, () if ids is None else (ids,)):
            run = _run_from_row(r)
            out[run.job_id] = run
        return out

    @staticmethod
    def _spec_columns(spec: JobSpec) -> dict[str, Any]:
        t = spec.trigger
        return {
            "name": spec.name,
            "description": spec.description,
            "trigger_kind": t.kind.value,
            "trigger_expr": t.expr,
            "trigger_tz": t.tz,
            "every_seconds": t.every_seconds,
            "anchor_at": _opt_us(t.anchor),
            "once_at": _opt_us(t.at),
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

    @staticmethod
    def _update(c: Any, table: str, cols: dict[str, Any], where_id: int) -> None:
        sets = ", ".join(f"{k} = %s" for k in cols)
        c.execute(f"UPDATE {table} SET {sets} WHERE id = %s", [*cols.values(), where_id])

    def _upsert_job(self, c: Any, spec: JobSpec, now: datetime, job_id: int | None) -> int:
        """Insert the job (``job_id`` None) or overwrite that row; windows count from now."""
        cols = self._spec_columns(spec)
        nxt = None if spec.paused else triggers.next_fire(spec.trigger, now)
        cols.update(
            state=(JobState.PAUSED if spec.paused else JobState.ACTIVE).value,
            schedule_from=to_us(now),
            next_run_at=_opt_us(nxt),
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
            self._update(c, "jobs", cols, job_id)
        self._notify(f"job:{job_id}")
        return job_id

    def add_job(self, spec: JobSpec, now: datetime, *, replace_existing: bool = False) -> Job:
        """Create a job (or with ``replace_existing`` overwrite the one of that name).
        Raises Conflict when the name is taken and ``replace_existing`` is false."""
        with self.write() as c:
            # two concurrent adds of one name: the second waits here, then sees the first
            c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("job:" + spec.name,))
            existing = c.execute("SELECT id FROM jobs WHERE name = %s", (spec.name,)).fetchone()
            if existing is not None and not replace_existing:
                raise Conflict(f"a job named {spec.name!r} already exists (use --replace)")
            self._upsert_job(c, spec, now, None if existing is None else existing["id"])
            return _job_from_row(self._job_row(c, spec.name))

    def add_jobs(self, specs: Sequence[JobSpec], now: datetime) -> list[tuple[Job, bool]]:
        """Create or overwrite several jobs in one transaction (for import-crontab); an
        identical job is left untouched (changed False)."""
        out = []
        with self.write() as c:
            for spec in specs:
                c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("job:" + spec.name,))
                row = c.execute("SELECT * FROM jobs WHERE name = %s", (spec.name,)).fetchone()
                cols = self._spec_columns(spec)
                if row is not None and all(row[k] == v for k, v in cols.items()):
                    out.append((_job_from_row(row), False))
                    continue
                self._upsert_job(c, spec, now, None if row is None else row["id"])
                out.append((_job_from_row(self._job_row(c, spec.name)), True))
        return out

    def edit_job(self, name: str, changes: dict[str, Any], now: datetime) -> Job:
        """Change fields of a job's spec; a new trigger restarts the schedule from ``now``."""
        with self.write() as c:
            job = _job_from_row(self._job_row(c, name, lock=True))
            new_spec = replace(job.spec, **changes)
            cols = self._spec_columns(new_spec)
            cols["updated_at"] = to_us(now)
            if "trigger" in changes and job.state in (JobState.ACTIVE, JobState.DONE):
                cols["state"] = JobState.ACTIVE.value
                cols["schedule_from"] = to_us(now)
                cols["next_run_at"] = _opt_us(triggers.next_fire(new_spec.trigger, now))
            try:
                self._update(c, "jobs", cols, job.id)
            except self._psycopg.errors.UniqueViolation:
                raise Conflict(f"a job named {new_spec.name!r} already exists") from None
            self._notify(f"job:{job.id}")
            return _job_from_row(self._job_row(c, new_spec.name))

    def pause_job(self, name: str, now: datetime) -> Job:
        """Stop firing. Raises Conflict for a cancelled or done job."""
        with self.write() as c:
            row = self._job_row(c, name, lock=True)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be paused")
            c.execute(
                "UPDATE jobs SET state = 'paused', next_run_at = NULL, updated_at = %s "
                "WHERE id = %s",
                (to_us(now), row["id"]),
            )
            self._notify(f"job:{row['id']}")
            return _job_from_row(self._job_row(c, name))

    def resume_job(self, name: str, now: datetime) -> Job:
        """Restart firing from the next window strictly after ``now``."""
        with self.write() as c:
            row = self._job_row(c, name, lock=True)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be resumed")
            if row["state"] == JobState.ACTIVE.value:
                return _job_from_row(row)
            job = _job_from_row(row)
            nxt = triggers.next_fire(job.trigger, now)
            c.execute(
                "UPDATE jobs SET state = 'active', schedule_from = %s, next_run_at = %s, "
                "updated_at = %s WHERE id = %s",
                (to_us(now), _opt_us(nxt), to_us(now), job.id),
            )
            self._notify(f"job:{job.id}")
            return _job_from_row(self._job_row(c, name))

    def delete_job(self, name: str, *, force: bool = False) -> Job:
        """Delete a job and its whole history. Refused (Conflict) while a run is leased."""
        with self.write() as c:
            row = self._job_row(c, name, lock=True)
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
            self._notify(f"job:{row['id']}")
            return _job_from_row(row)


class PgRunOps(PgJobOps):
    # ---------------------------------------------------------------- runs (CLI side)

    def get_run(self, run_id: int) -> Run:
        rows = self._read(RUN_SELECT + " WHERE runs.id = %s", (run_id,))
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
            where.append("runs.job_id = %s")
            params.append(job.id)
        if state is not None:
            where.append("runs.state = %s")
            params.append(state.value)
        sql = RUN_SELECT
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY runs.scheduled_for DESC, runs.id DESC LIMIT %s"
        params.append(limit)
        return [_run_from_row(r) for r in self._read(sql, params)]

    def get_attempts(self, run_id: int) -> list[Attempt]:
        rows = self._read("SELECT * FROM attempts WHERE run_id = %s ORDER BY attempt", (run_id,))
        return [_attempt_from_row(r) for r in rows]

    def get_output(self, run_id: int, attempt: int | None = None) -> tuple[Attempt, bytes]:
        """The captured output tail of an attempt (default: the last). Raises NotFound."""
        self.get_run(run_id)
        if attempt is None:
            rows = self._read(
                "SELECT * FROM attempts WHERE run_id = %s ORDER BY attempt DESC LIMIT 1",
                (run_id,),
            )
        else:
            rows = self._read(
                "SELECT * FROM attempts WHERE run_id = %s AND attempt = %s", (run_id, attempt)
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
        Returns (run, created). Raises NotFound, Conflict for a cancelled job."""
        with self.write() as c:
            # the job's row lock serialises enqueues of one job: keys and windows stay unique
            job = _job_from_row(self._job_row(c, name, lock=True))
            if job.state is JobState.CANCELLED:
                raise Conflict(f"job {name!r} is cancelled")
            if key is not None:
                found = c.execute(
                    "SELECT id FROM runs WHERE job_id = %s AND run_key = %s", (job.id, key)
                ).fetchone()
                if found is not None:
                    return self._run_by_id(c, found["id"]), False
            window = to_us(now)
            taken = c.execute(
                "SELECT MAX(scheduled_for) AS m FROM runs WHERE job_id = %s AND "
                "scheduled_for >= %s",
                (job.id, window),
            ).fetchone()["m"]
            if taken is not None:
                free = c.execute(
                    "SELECT 1 FROM runs WHERE job_id = %s AND scheduled_for = %s", (job.id, window)
                ).fetchone()
                while free is not None:
                    window += 1
                    free = c.execute(
                        "SELECT 1 FROM runs WHERE job_id = %s AND scheduled_for = %s",
                        (job.id, window),
                    ).fetchone()
            run_id = self._insert_run(
                c,
                job,
                Window(
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
            self._notify(f"run:{run_id}")
            return self._run_by_id(c, run_id), True

    def _insert_run(
        self,
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
        """Insert one run row (nothing if the window exists). Returns its id or None."""
        spec = job.spec
        finished = to_us(now) if w.state is RunState.SKIPPED else None
        row = c.execute(
            "INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, "
            "catchup_from, attempt, max_attempts, not_before, priority, run_key, env, settings, "
            "created_at, finished_at) VALUES (%s,%s,%s,%s,%s,%s,0,%s,%s,%s,%s,%s,%s,%s,%s) "
            "ON CONFLICT DO NOTHING RETURNING id",
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
        ).fetchone()
        if row is None:
            return None
        run_id = int(row["id"])
        if w.state is not RunState.SKIPPED:
            for lock in sorted(set(spec.locks) | set(extra_locks)):
                c.execute("INSERT INTO run_locks (run_id, name) VALUES (%s, %s)", (run_id, lock))
        return run_id

    def _cancel_runs_tx(self, c: Any, ids: Iterable[int], now: datetime) -> None:
        for run_id in ids:
            row = c.execute(
                "UPDATE runs SET state = 'cancelled', finished_at = %s, last_error = "
                "COALESCE(last_error, 'cancelled') WHERE id = %s AND state IN ('pending','failed') "
                "RETURNING job_id",
                (to_us(now), run_id),
            ).fetchone()
            if row is not None:
                self._after_run_end(c, row["job_id"], now)
            c.execute(
                "UPDATE runs SET cancel_requested = 1 WHERE id = %s AND state = 'leased'",
                (run_id,),
            )
            self._notify("run:cancel")

    def cancel_runs(self, ids: Sequence[int], now: datetime) -> list[Run]:
        """Cancel runs: pending/failed ones at once, leased ones by a cancel request.
        Raises NotFound (nothing written)."""
        with self.write() as c:
            for run_id in ids:
                if c.execute("SELECT 1 FROM runs WHERE id = %s", (run_id,)).fetchone() is None:
                    raise NotFound(f"no run with id {run_id}")
            self._cancel_runs_tx(c, ids, now)
            return [self._run_by_id(c, i) for i in ids]

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
                    row = c.execute(
                        "SELECT state FROM runs WHERE id = %s FOR UPDATE", (run_id,)
                    ).fetchone()
                    if row is None:
                        raise NotFound(f"no run with id {run_id}")
                    if row["state"] != "dead":
                        raise Conflict(f"run {run_id} is {row['state']}, not dead")
                    ids.append(run_id)
            elif job_name is not None:
                job_id = self._job_row(c, job_name)["id"]
                ids = [
                    r["id"]
                    for r in c.execute(
                        "SELECT id FROM runs WHERE job_id = %s AND state = 'dead' ORDER BY id "
                        "FOR UPDATE",
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
                    "UPDATE runs SET state = 'pending', max_attempts = attempt + "
                    "(SELECT retries + 1 FROM jobs WHERE jobs.id = runs.job_id), "
                    "not_before = %s, finished_at = NULL, leased_by = NULL, lease_until = NULL, "
                    "cancel_requested = 0 WHERE id = %s AND state = 'dead'",
                    (to_us(now), run_id),
                )
            if ids:
                self._notify("run:retry")
            return [self._run_by_id(c, i) for i in ids]

    def prune(self, cutoff: datetime) -> int:
        """Delete finished runs (succeeded, dead, cancelled, skipped) that ended before cutoff."""
        with self.write() as c:
            cur = c.execute(
                "DELETE FROM runs WHERE state IN ('succeeded','dead','cancelled','skipped') "
                "AND COALESCE(finished_at, scheduled_for) < %s",
                (to_us(cutoff),),
            )
            return int(cur.rowcount)

    def cancel_job(self, name: str, now: datetime) -> tuple[Job, list[int]]:
        """Cancel a job's open runs and stop the job for good. Returns the job and run ids."""
        with self.write() as c:
            row = self._job_row(c, name, lock=True)
            ids = [
                r["id"]
                for r in c.execute(
                    "SELECT id FROM runs WHERE job_id = %s AND state IN "
                    "('pending','failed','leased') ORDER BY id",
                    (row["id"],),
                )
            ]
            self._cancel_runs_tx(c, ids, now)
            c.execute(
                "UPDATE jobs SET state = 'cancelled', next_run_at = NULL, updated_at = %s "
                "WHERE id = %s",
                (to_us(now), row["id"]),
            )
            self._notify(f"job:{row['id']}")
            return _job_from_row(self._job_row(c, name)), ids

    def _after_run_end(self, c: Any, job_id: int, now: datetime) -> Job | None:
        """A fixed-delay job's next window is its interval after the run ended."""
        jrow = c.execute("SELECT * FROM jobs WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
        if jrow is None or jrow["state"] != "active" or not jrow["after_completion"]:
            return None
        open_runs = c.execute(
            "SELECT COUNT(*) AS n FROM runs WHERE job_id = %s AND "
            "state IN ('pending','leased','failed')",
            (job_id,),
        ).fetchone()["n"]
        if open_runs:
            return None
        job = _job_from_row(jrow)
        nxt = triggers.next_fire(job.trigger, now)
        c.execute(
            "UPDATE jobs SET next_run_at = %s, updated_at = %s WHERE id = %s",
            (_opt_us(nxt), to_us(now), job_id),
        )
        self._notify(f"job:{job_id}")
        return replace(job, next_run_at=nxt)
