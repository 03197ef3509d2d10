"""A whole database as values (:class:`~.values.CopiedJob`), for ``db copy`` (see jobctl(1),
COMMANDS):
read through the commands' protocol from one backend, and loaded whole into another in one
transaction of its dialect."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any, Protocol

from ..clock import to_us
from ..errors import Conflict
from ..models import Attempt, Job, Run
from .calendars import dates_text, set_dates
from .dialect import Dialect
from .outbox import Sql
from .rows import spec_columns
from .secrets import load_secrets
from .values import CopiedAttempt, CopiedJob, CopiedRun, Revision

#: ``list_runs`` with this limit returns every run
ALL_RUNS = 2**62


class Source(Protocol):
    """What :func:`read_all` reads from a store's commands' face."""

    def list_jobs(self) -> list[Job]: ...

    def list_runs(
        self, job_name: str | None = ..., state: Any = ..., limit: int = ...
    ) -> list[Run]: ...

    def get_attempts(self, run_id: int) -> list[Attempt]: ...

    def get_output(self, run_id: int, attempt: int | None = ...) -> tuple[Attempt, bytes]: ...

    def history(self, name: str) -> list[Revision]: ...


def read_all(commands: Source, *, history: bool) -> list[CopiedJob]:
    """Every job (by name), with ``history`` each of its runs and their attempts."""
    out = []
    for job in commands.list_jobs():
        runs: list[CopiedRun] = []
        if history:
            for run in sorted(
                commands.list_runs(job.spec.name, limit=ALL_RUNS), key=lambda r: r.id
            ):
                attempts = [
                    CopiedAttempt(a, commands.get_output(run.id, a.attempt)[1])
                    for a in commands.get_attempts(run.id)
                ]
                runs.append(CopiedRun(run, attempts))
        out.append(CopiedJob(job, runs, commands.history(job.spec.name)))
    return out


# ---------------------------------------------------------------- rows for the target


def job_columns(copied: CopiedJob, now: datetime, *, history: bool) -> dict[str, Any]:
    """The target's ``jobs`` row: the spec, state and schedule as they were; without
    ``history`` no trace of past runs (``missed_total`` 0, no boot recorded)."""
    job = copied.job
    cols = spec_columns(job.spec)
    cols.update(
        except_dates=dates_text(job.except_dates),
        state=job.state.value,
        schedule_from=to_us(now),
        next_run_at=None if job.next_run_at is None else to_us(job.next_run_at),
        last_window_at=None,  # set once its runs are in (they are read once)
        missed_total=job.missed_total if history else 0,
        last_boot_id=job.last_boot_id if history else None,
        created_at=to_us(job.created_at),
        updated_at=to_us(now),
        revision=job.revision,
    )
    return cols


def run_columns(run: Run, job_id: int, settings_json: str | None = None) -> dict[str, Any]:
    """The target's ``runs`` row (its id is the target's own); ``settings_json`` is its
    settings already as JSON."""

    def us(dt: datetime | None) -> int | None:
        return None if dt is None else to_us(dt)

    return {
        "job_id": job_id,
        "scheduled_for": to_us(run.scheduled_for),
        "state": run.state.value,
        "skip_reason": run.skip_reason.value if run.skip_reason else None,
        "reason": run.reason.value,
        "catchup_from": us(run.catchup_from),
        "attempt": run.attempt,
        "max_attempts": run.max_attempts,
        "not_before": us(run.not_before),
        "priority": run.priority,
        "leased_by": run.leased_by,
        "lease_until": us(run.lease_until),
        "cancel_requested": int(run.cancel_requested),
        "started_at": us(run.started_at),
        "finished_at": us(run.finished_at),
        "exit_code": run.exit_code,
        "last_error": run.last_error,
        "run_key": run.run_key,
        "env": json.dumps(run.env, sort_keys=True),
        "settings": settings_json
        if settings_json is not None
        else json.dumps(run.settings.to_dict(), sort_keys=True),
        "attempt_base": run.attempt_base,
        "hook_status": run.hook_status,
        "created_at": to_us(run.started_at or run.scheduled_for),
        "job_revision": run.job_revision,
    }


def attempt_columns(a: CopiedAttempt, run_id: int) -> dict[str, Any]:
    at = a.attempt
    return {
        "run_id": run_id,
        "attempt": at.attempt,
        "started_at": to_us(at.started_at),
        "finished_at": None if at.finished_at is None else to_us(at.finished_at),
        "exit_code": at.exit_code,
        "error": at.error,
        "output": a.output,
        "output_bytes": at.output_bytes,
        "host": at.host,
        "pid": at.pid,
        "cpu_user": at.cpu_user,
        "cpu_system": at.cpu_system,
        "max_rss": at.max_rss,
    }


def _insert(db: Dialect, c: Any, table: str, cols: dict[str, Any], *, returning: bool) -> int:
    sql = db.q.insert_row.format(
        table=table, names=", ".join(cols), named=", ".join(db.named(k) for k in cols)
    )
    if not returning:
        c.execute(sql, cols)
        return 0
    return int(c.execute(sql + " RETURNING id", cols).fetchone()["id"])


def _insert_many(db: Dialect, c: Any, table: str, rows: list[dict[str, Any]], *, ids: bool) -> None:
    """Rows of one shape in one call of the driver (with ``ids``, each brings its ``id``)."""
    if not rows:
        return
    names = [k for k in rows[0] if k != "id"]
    sql = (db.q.insert_row_with_id if ids else db.q.insert_row).format(
        table=table, names=", ".join(names), named=", ".join(db.named(k) for k in names)
    )
    c.executemany(sql, rows)


#: runs inserted a driver call at a time (their ids taken before, in one statement)
RUNS_A_CALL = 1000


def _load_runs(db: Dialect, c: Any, copied: CopiedJob, job_id: int) -> int | None:
    """Insert a job's runs (with their locks and attempts) a chunk at a time; returns its
    last window (None: no run)."""
    overlap = copied.job.spec.overlap.value
    last_window: int | None = None
    settings: tuple[Any, str] | None = None  # the last run's settings and their JSON

    def flush(chunk: list[CopiedRun]) -> None:
        nonlocal settings, last_window
        rows: list[dict[str, Any]] = []
        locks: list[tuple[int, str]] = []
        attempts: list[dict[str, Any]] = []
        for run_id, cr in zip(db.new_ids(c, "runs", len(chunk)), chunk, strict=True):
            if settings is None or settings[0] is not cr.run.settings:
                settings = (cr.run.settings, json.dumps(cr.run.settings.to_dict(), sort_keys=True))
            cols = run_columns(cr.run, job_id, settings_json=settings[1])
            db.copied_run(cols, overlap)
            cols["id"] = run_id
            rows.append(cols)
            window = cols["scheduled_for"]
            last_window = window if last_window is None else max(last_window, window)
            locks.extend((run_id, lock) for lock in cr.run.locks)
            attempts.extend(attempt_columns(a, run_id) for a in cr.attempts)
        _insert_many(db, c, "runs", rows, ids=True)
        if locks:
            c.executemany(db.q.insert_run_lock, locks)
        for cols, cr in zip(rows, chunk, strict=True):
            if cr.run.locks:
                db.copied_locks(c, cols["id"], cr.run.state.value, cr.run.locks)
        _insert_many(db, c, "attempts", attempts, ids=False)

    chunk: list[CopiedRun] = []
    for cr in copied.runs:
        chunk.append(cr)
        if len(chunk) == RUNS_A_CALL:
            flush(chunk)
            chunk = []
    if chunk:
        flush(chunk)
    return last_window


def load_copy(
    db: Dialect,
    jobs: Sequence[CopiedJob],
    now: datetime,
    *,
    history: bool,
    secrets: Sequence[tuple[str, bytes, datetime]] = (),
    calendars: Mapping[str, Sequence[date]] | None = None,
    q: Sql | None = None,
) -> int:
    """Insert every job (and its runs and attempts) with new ids, in one transaction.
    Refused (Conflict) when the database already holds a job. Returns how many jobs.
    Each job's runs are read once, as they come (a long history is never held whole)."""
    with db.write() as c:
        db.lock_for_copy(c)  # no add meanwhile
        held = c.execute(db.q.count_jobs).fetchone()["n"]
        if held:
            raise Conflict(f"the target database holds {held} jobs; db copy fills an empty one")
        if secrets:
            assert q is not None, "secrets are loaded with the backend's statements"
            load_secrets(c, q, secrets)
        if calendars:
            assert q is not None, "calendars are loaded with the backend's statements"
            for name, days in calendars.items():
                set_dates(c, q, name, days)
        for copied in jobs:
            cols = job_columns(copied, now, history=history)
            job_id = _insert(db, c, "jobs", cols, returning=True)
            last_window = _load_runs(db, c, copied, job_id)
            if last_window is not None:
                c.execute(db.q.set_last_window, (last_window, job_id))
            for rev in copied.revisions:
                cols = {
                    "job_id": job_id,
                    "revision": rev.revision,
                    "at": to_us(rev.at),
                    "who": rev.who,
                    "source": rev.source,
                    "changes": json.dumps(rev.changes, ensure_ascii=False),
                    "definition": json.dumps(rev.definition, ensure_ascii=False),
                }
                _insert(db, c, "job_revisions", cols, returning=False)
        db.announce("all")
    return len(jobs)
