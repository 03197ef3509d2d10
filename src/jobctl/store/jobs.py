"""Jobs: create, edit, pause, resume, cancel, delete; the CLI's reads of jobs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from .. import triggers
from ..clock import to_us
from ..errors import Conflict, NotFound, StoreError
from ..models import (
    Job,
    JobSpec,
    JobState,
    Run,
)
from .connection import Connection
from .rows import _RUN_SELECT, _job_from_row, _opt_us, _run_from_row


class JobOps(Connection):
    # ---------------------------------------------------------------- jobs

    def _job_row(self, c: sqlite3.Connection, name: str) -> sqlite3.Row:
        row = c.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"no job named {name!r}")
        return row

    def get_job(self, name: str) -> Job:
        rows = self._read("SELECT * FROM jobs WHERE name = ?", (name,))
        if not rows:
            raise NotFound(f"no job named {name!r}")
        return _job_from_row(rows[0])

    def get_job_by_id(self, job_id: int) -> Job | None:
        rows = self._read("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return _job_from_row(rows[0]) if rows else None

    def list_jobs(self) -> list[Job]:
        try:
            cur = self.conn.execute("SELECT * FROM jobs ORDER BY name")
            cols = [d[0] for d in cur.description]
            rows = cur.fetchall()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"database error: {e}") from None
        # plain dicts: a name lookup on sqlite3.Row costs more than building them
        return [_job_from_row(dict(zip(cols, r, strict=True))) for r in rows]

    def job_names(self) -> list[str]:
        return [r[0] for r in self._read("SELECT name FROM jobs ORDER BY name")]

    def last_runs(self, job_ids: Iterable[int] | None = None) -> dict[int, Run]:
        """The most recent run that was not skipped, per job id."""
        ids = None if job_ids is None else sorted(set(job_ids))
        only = "" if ids is None else f"AND job_id IN ({', '.join('?' * len(ids))})"
        sql = (
            _RUN_SELECT
            + f"""
            WHERE runs.id IN (
                SELECT MAX(id) FROM runs WHERE state != 'skipped' {only} GROUP BY job_id
            )"""
        )
        out = {}
        for r in self._read(sql, ids or ()):
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

    def _upsert_job(
        self, c: sqlite3.Connection, spec: JobSpec, now: datetime, job_id: int | None
    ) -> None:
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
            marks = ", ".join("?" for _ in cols)
            c.execute(f"INSERT INTO jobs ({names}) VALUES ({marks})", list(cols.values()))
        else:
            sets = ", ".join(f"{k} = ?" for k in cols)
            c.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*cols.values(), job_id])

    def add_job(self, spec: JobSpec, now: datetime, *, replace_existing: bool = False) -> Job:
        """Create a job (or with ``replace_existing`` overwrite the one of that name).

        Windows count from ``now``: the first is the trigger's first fire strictly after it.
        Raises Conflict when the name is taken and ``replace_existing`` is false.
        """
        with self.write() as c:
            existing = c.execute("SELECT id FROM jobs WHERE name = ?", (spec.name,)).fetchone()
            if existing is not None and not replace_existing:
                raise Conflict(f"a job named {spec.name!r} already exists (use --replace)")
            self._upsert_job(c, spec, now, None if existing is None else existing["id"])
            return _job_from_row(self._job_row(c, spec.name))

    def add_jobs(self, specs: Sequence[JobSpec], now: datetime) -> list[tuple[Job, bool]]:
        """Create or overwrite several jobs in one transaction (for import-crontab).

        Returns (job, changed) pairs; a job whose spec is identical to the stored one is
        left untouched (changed False), so a second import changes nothing.
        """
        out = []
        with self.write() as c:
            for spec in specs:
                row = c.execute("SELECT * FROM jobs WHERE name = ?", (spec.name,)).fetchone()
                cols = self._spec_columns(spec)
                if row is not None and all(row[k] == v for k, v in cols.items()):
                    out.append((_job_from_row(row), False))
                    continue
                self._upsert_job(c, spec, now, None if row is None else row["id"])
                out.append((_job_from_row(self._job_row(c, spec.name)), True))
        return out

    def edit_job(self, name: str, changes: dict[str, Any], now: datetime) -> Job:
        """Change fields of a job's spec (``changes`` maps JobSpec field names to values).

        A new trigger restarts the schedule from ``now``. Runs already created keep their
        own copy of the settings. Raises NotFound.
        """
        with self.write() as c:
            row = self._job_row(c, name)
            job = _job_from_row(row)
            new_spec = replace(job.spec, **changes)
            cols = self._spec_columns(new_spec)
            cols["updated_at"] = to_us(now)
            if "trigger" in changes and job.state in (JobState.ACTIVE, JobState.DONE):
                # a new trigger starts from now; a one-shot that was done becomes active
                cols["state"] = JobState.ACTIVE.value
                cols["schedule_from"] = to_us(now)
                cols["next_run_at"] = _opt_us(triggers.next_fire(new_spec.trigger, now))
            sets = ", ".join(f"{k} = ?" for k in cols)
            c.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*cols.values(), job.id])
            return _job_from_row(self._job_row(c, new_spec.name))

    def pause_job(self, name: str, now: datetime) -> Job:
        """Stop firing. Raises Conflict for a cancelled or done job."""
        with self.write() as c:
            row = self._job_row(c, name)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be paused")
            c.execute(
                "UPDATE jobs SET state = 'paused', next_run_at = NULL, updated_at = ? WHERE id = ?",
                (to_us(now), row["id"]),
            )
            return _job_from_row(self._job_row(c, name))

    def resume_job(self, name: str, now: datetime) -> Job:
        """Restart firing from the next window strictly after ``now`` (missed ones are not run)."""
        with self.write() as c:
            row = self._job_row(c, name)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be resumed")
            if row["state"] == JobState.ACTIVE.value:
                return _job_from_row(row)
            job = _job_from_row(row)
            nxt = triggers.next_fire(job.trigger, now)
            c.execute(
                "UPDATE jobs SET state = 'active', schedule_from = ?, next_run_at = ?, "
                "updated_at = ? WHERE id = ?",
                (to_us(now), _opt_us(nxt), to_us(now), job.id),
            )
            return _job_from_row(self._job_row(c, name))

    def delete_job(self, name: str, *, force: bool = False) -> Job:
        """Delete a job and its whole history. Refused (Conflict) while a run is leased."""
        with self.write() as c:
            row = self._job_row(c, name)
            if not force:
                leased = c.execute(
                    "SELECT COUNT(*) FROM runs WHERE job_id = ? AND state = 'leased'", (row["id"],)
                ).fetchone()[0]
                if leased:
                    raise Conflict(
                        f"job {name!r} has a running run; cancel it first or use --force"
                    )
            c.execute("DELETE FROM jobs WHERE id = ?", (row["id"],))
            return _job_from_row(row)
