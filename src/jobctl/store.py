"""The SQLite store: the only module that speaks SQL.

Every write runs in ``BEGIN IMMEDIATE`` so that concurrent writers wait on the busy
timeout instead of failing. Times are passed in (aware UTC datetimes) and kept as integer
microseconds. Callers use named operations; no SQL leaves this module, so a PostgreSQL
store can later stand beside this one with the same methods.

Fencing rule: every write about an attempt names ``(run_id, attempt, daemon_id)`` and is
applied only while that attempt still holds the run's lease; otherwise it is rejected
(the method returns False) and nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from . import triggers
from .clock import from_us, to_us
from .errors import Conflict, NotFound, SecurityError, StoreError, UsageError
from .models import (
    MAX_SKIPPED_ROWS,
    Attempt,
    Catchup,
    DaemonInfo,
    Job,
    JobSpec,
    JobState,
    Overlap,
    Run,
    RunReason,
    RunSettings,
    RunState,
    SkipReason,
    Trigger,
    TriggerKind,
)

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30_000
OUTPUT_LIMIT_BYTES = 64 * 1024


def _migrations() -> list[tuple[int, str]]:
    """(version, sql) for every numbered migration in ``sql/``, in order."""
    from importlib import resources  # deferred: it pulls in tempfile, zlib, lzma...

    out = []
    for entry in resources.files("jobctl").joinpath("sql").iterdir():
        name = entry.name
        if name[:4].isdigit() and name.endswith(".sql"):
            out.append((int(name[:4]), entry.read_text(encoding="utf-8")))
    out.sort()
    return out


def schema_sql() -> str:
    """The whole current schema, as kept in ``sql/schema.sql``."""
    from importlib import resources

    return resources.files("jobctl").joinpath("sql", "schema.sql").read_text(encoding="utf-8")


def split_statements(sql: str) -> list[str]:
    """Split a script into complete statements (so they can run inside one transaction)."""
    stmts: list[str] = []
    buf = ""
    for line in sql.splitlines(keepends=True):
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            stmts.append(buf.strip())
            buf = ""
    if buf.strip():
        stmts.append(buf.strip())
    return stmts


def check_ownership(path: Path) -> None:
    """Refuse a database file or folder that another user owns or others can write.

    Raises SecurityError. Like cron with crontabs: whoever can write the file can run
    commands as its user.
    """
    uid = os.geteuid()
    for p in (path.parent, path):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if st.st_uid != uid:
            raise SecurityError(f"refusing to run jobs from {p}: it is owned by uid {st.st_uid}, not {uid}")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise SecurityError(
                f"refusing to run jobs from {p}: it is writable by group or others "
                f"(chmod go-w {p})"
            )


# --------------------------------------------------------------------------------------
# row mapping


def _opt_dt(us: int | None) -> datetime | None:
    return None if us is None else from_us(us)


def _opt_us(dt: datetime | None) -> int | None:
    return None if dt is None else to_us(dt)


def _job_from_row(r: Any) -> Job:
    trigger = Trigger(
        kind=TriggerKind(r["trigger_kind"]),
        tz=r["trigger_tz"],
        expr=r["trigger_expr"],
        every_seconds=r["every_seconds"],
        anchor=_opt_dt(r["anchor_at"]),
        at=_opt_dt(r["once_at"]),
        after_completion=bool(r["after_completion"]),
    )
    state = JobState(r["state"])
    spec = JobSpec(
        name=r["name"],
        trigger=trigger,
        command=r["command"],
        description=r["description"],
        stdin=r["stdin"],
        env=json.loads(r["env"]),
        cwd=r["cwd"],
        shell=r["shell"],
        paused=state is JobState.PAUSED,
        catchup=Catchup(r["catchup"]),
        catchup_limit=r["catchup_limit"],
        overlap=Overlap(r["overlap"]),
        timeout_seconds=r["timeout_seconds"],
        retries=r["retries"],
        backoff_seconds=r["backoff_seconds"],
        priority=r["priority"],
        jitter_seconds=r["jitter_seconds"],
        on_failure=r["on_failure"],
        locks=tuple(json.loads(r["locks"])),
    )
    return Job(
        id=r["id"],
        spec=spec,
        state=state,
        created_at=from_us(r["created_at"]),
        schedule_from=from_us(r["schedule_from"]),
        next_run_at=_opt_dt(r["next_run_at"]),
        last_window_at=_opt_dt(r["last_window_at"]),
        missed_total=r["missed_total"],
        last_boot_id=r["last_boot_id"],
    )


_RUN_SELECT = """
SELECT runs.*, jobs.name AS job_name,
       (SELECT json_group_array(name) FROM run_locks WHERE run_locks.run_id = runs.id) AS lock_list
FROM runs JOIN jobs ON jobs.id = runs.job_id
"""


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


def _run_from_row(r: sqlite3.Row) -> Run:
    settings = r["settings"]
    return Run(
        id=r["id"],
        job_id=r["job_id"],
        job_name=r["job_name"],
        scheduled_for=from_us(r["scheduled_for"]),
        state=RunState(r["state"]),
        skip_reason=SkipReason(r["skip_reason"]) if r["skip_reason"] else None,
        attempt=r["attempt"],
        max_attempts=r["max_attempts"],
        not_before=_opt_dt(r["not_before"]),
        leased_by=r["leased_by"],
        lease_until=_opt_dt(r["lease_until"]),
        started_at=_opt_dt(r["started_at"]),
        finished_at=_opt_dt(r["finished_at"]),
        exit_code=r["exit_code"],
        last_error=r["last_error"],
        reason=RunReason(r["reason"]),
        catchup_from=_opt_dt(r["catchup_from"]),
        priority=r["priority"],
        run_key=r["run_key"],
        env=json.loads(r["env"]),
        locks=tuple(sorted(json.loads(r["lock_list"] or "[]"))),
        settings=RunSettings.from_dict(json.loads(settings)) if settings else None,
        cancel_requested=bool(r["cancel_requested"]),
        pgid=r["pgid"],
        lease_host=r["lease_host"],
    )


def _attempt_from_row(r: sqlite3.Row) -> Attempt:
    return Attempt(
        run_id=r["run_id"],
        attempt=r["attempt"],
        started_at=from_us(r["started_at"]),
        finished_at=_opt_dt(r["finished_at"]),
        exit_code=r["exit_code"],
        error=r["error"],
        output_bytes=r["output_bytes"],
    )


# --------------------------------------------------------------------------------------
# value types passed between the daemon and the store


@dataclass(frozen=True)
class WindowRow:
    """One window the scheduler decided to record for a job."""

    scheduled_for: datetime
    state: RunState  # pending or skipped
    reason: RunReason
    skip_reason: SkipReason | None = None
    catchup_from: datetime | None = None
    not_before: datetime | None = None


@dataclass(frozen=True)
class Claimed:
    """A run this daemon now holds, and (when the lease was taken over) what to kill first."""

    run: Run
    stale_pgid: int | None = None
    #: the run's previous attempt was lost on this host (its processes may still live)
    lost_here: bool = False


@dataclass(frozen=True)
class ExpiredOutcome:
    run_id: int
    became_dead: bool


@dataclass(frozen=True)
class Status:
    daemons: list[DaemonInfo]
    counts: dict[str, int]
    next_due_at: datetime | None


def _settings_json(spec: JobSpec, extra_env: dict[str, str] | None = None) -> str:
    settings = RunSettings.from_spec(spec)
    return json.dumps(settings.to_dict(), sort_keys=True)


class Store:
    """A jobctl database. Open with :meth:`open`; close with :meth:`close`."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self._in_batch = False

    # ---------------------------------------------------------------- connection

    @classmethod
    def open(cls, path: Path | str, *, create: bool = True) -> Store:
        """Open (and with ``create``, create and migrate) the database at ``path``.

        The folder is made 0700 and the file 0600 (including ``-wal``/``-shm``) whatever
        the umask. A file from a newer jobctl is refused untouched (StoreError). A file
        that is not a SQLite database is a StoreError.
        """
        path = Path(path)
        try:
            existed = path.exists()
            is_dir = path.is_dir()
        except OSError as e:
            raise StoreError(f"cannot open database {path}: {e.strerror or e}") from None
        if not existed and not create:
            raise NotFound(f"no database at {path}")
        if is_dir:
            raise StoreError(f"{path} is a directory, not a database file")
        old_umask = os.umask(0o077)
        try:
            if not path.parent.exists():
                try:
                    path.parent.mkdir(parents=True, mode=0o700)
                except OSError as e:
                    raise StoreError(f"cannot create {path.parent}: {e.strerror}") from None
            try:
                conn = sqlite3.connect(
                    str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000,
                    check_same_thread=False,
                )
            except sqlite3.Error as e:
                raise StoreError(f"cannot open database {path}: {e}") from None
            conn.row_factory = sqlite3.Row
            store = cls(conn, path)
            try:
                store._setup()
            except sqlite3.DatabaseError as e:
                conn.close()
                raise StoreError(f"cannot use database {path}: {e}") from None
            except BaseException:
                conn.close()
                raise
        finally:
            os.umask(old_umask)
        if not existed:
            with contextlib.suppress(OSError):
                os.chmod(path, 0o600)
        return store

    def _setup(self) -> None:
        c = self.conn
        c.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"database {self.path} has schema version {version}, newer than this jobctl "
                f"understands ({SCHEMA_VERSION}); upgrade jobctl (the file was not modified)"
            )
        mode = c.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() != "wal":
            c.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode: a power loss may roll back the last commits, never corrupts;
        # a rolled-back window or finish is redone (at-least-once), see README "Guarantees".
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("PRAGMA foreign_keys = ON")
        if version < SCHEMA_VERSION:
            self._migrate()

    def _migrate(self) -> None:
        with self.write() as c:
            version = c.execute("PRAGMA user_version").fetchone()[0]
            for number, sql in _migrations():
                if number <= version:
                    continue
                for stmt in split_statements(sql):
                    c.execute(stmt)
                c.execute(f"PRAGMA user_version = {number}")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction for several named writes: each ``write()``
        inside joins it, and all commit together at the end (or all roll back on error).
        The daemon records a burst of due windows this way: one commit, not one per job."""
        if self._in_batch:
            yield
            return
        with self.write():
            self._in_batch = True
            try:
                yield
            finally:
                self._in_batch = False

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error.
        Inside :meth:`batch` it joins the batch's transaction instead."""
        c = self.conn
        if self._in_batch:
            yield c
            return
        try:
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise StoreError(f"database error: {e}") from None
        try:
            yield c
        except sqlite3.Error as e:
            # SQLITE_FULL, SQLITE_IOERR, a busy timeout... mid-transaction: nothing is kept
            with contextlib.suppress(sqlite3.Error):
                c.execute("ROLLBACK")
            raise StoreError(f"database error: {e}") from None
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                c.execute("ROLLBACK")
            raise
        else:
            try:
                c.execute("COMMIT")
            except sqlite3.Error as e:
                with contextlib.suppress(sqlite3.Error):
                    c.execute("ROLLBACK")
                raise StoreError(f"database error: {e}") from None

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"database error: {e}") from None

    def schema_dump(self) -> list[tuple[str, str, str]]:
        """(type, name, sql) of every schema object, for the migration test."""
        rows = self._read(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        )
        return [(r[0], r[1], r[2]) for r in rows]

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
        return [_job_from_row(dict(zip(cols, r))) for r in rows]

    def job_names(self) -> list[str]:
        return [r[0] for r in self._read("SELECT name FROM jobs ORDER BY name")]

    def last_runs(self, job_ids: Iterable[int] | None = None) -> dict[int, Run]:
        """The most recent run that was not skipped, per job id."""
        sql = _RUN_SELECT + """
            WHERE runs.id IN (
                SELECT MAX(id) FROM runs WHERE state != 'skipped' GROUP BY job_id
            )"""
        out = {}
        for r in self._read(sql):
            run = _run_from_row(r)
            out[run.job_id] = run
        if job_ids is not None:
            wanted = set(job_ids)
            out = {k: v for k, v in out.items() if k in wanted}
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
    def _first_window(trigger: Trigger, after: datetime) -> datetime | None:
        return triggers.next_fire(trigger, after)

    def add_job(self, spec: JobSpec, now: datetime, *, replace_existing: bool = False) -> Job:
        """Create a job (or with ``replace_existing`` overwrite the one of that name).

        Windows count from ``now``: the first is the trigger's first fire strictly after it.
        Raises Conflict when the name is taken and ``replace_existing`` is false.
        """
        with self.write() as c:
            existing = c.execute("SELECT id FROM jobs WHERE name = ?", (spec.name,)).fetchone()
            if existing is not None and not replace_existing:
                raise Conflict(f"a job named {spec.name!r} already exists (use --replace)")
            cols = self._spec_columns(spec)
            state = JobState.PAUSED if spec.paused else JobState.ACTIVE
            nxt = None if spec.paused else self._first_window(spec.trigger, now)
            cols.update(
                state=state.value,
                schedule_from=to_us(now),
                next_run_at=_opt_us(nxt),
                updated_at=to_us(now),
            )
            if existing is None:
                cols["created_at"] = to_us(now)
                names = ", ".join(cols)
                marks = ", ".join("?" for _ in cols)
                c.execute(f"INSERT INTO jobs ({names}) VALUES ({marks})", list(cols.values()))
            else:
                sets = ", ".join(f"{k} = ?" for k in cols)
                c.execute(
                    f"UPDATE jobs SET {sets} WHERE id = ?", [*cols.values(), existing["id"]]
                )
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
                nxt = self._first_window(spec.trigger, now)
                cols.update(
                    state=JobState.ACTIVE.value,
                    schedule_from=to_us(now),
                    next_run_at=_opt_us(nxt),
                    updated_at=to_us(now),
                )
                if row is None:
                    cols["created_at"] = to_us(now)
                    names = ", ".join(cols)
                    marks = ", ".join("?" for _ in cols)
                    c.execute(f"INSERT INTO jobs ({names}) VALUES ({marks})", list(cols.values()))
                else:
                    sets = ", ".join(f"{k} = ?" for k in cols)
                    c.execute(f"UPDATE jobs SET {sets} WHERE id = ?", [*cols.values(), row["id"]])
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
            if "trigger" in changes and job.state is JobState.ACTIVE:
                cols["schedule_from"] = to_us(now)
                cols["next_run_at"] = _opt_us(self._first_window(new_spec.trigger, now))
            elif "trigger" in changes and job.state is JobState.DONE:
                cols["state"] = JobState.ACTIVE.value
                cols["schedule_from"] = to_us(now)
                cols["next_run_at"] = _opt_us(self._first_window(new_spec.trigger, now))
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
            nxt = self._first_window(job.trigger, now)
            c.execute(
                "UPDATE jobs SET state = 'active', schedule_from = ?, next_run_at = ?, "
                "updated_at = ? WHERE id = ?",
                (to_us(now), _opt_us(nxt), to_us(now), job.id),
            )
            return _job_from_row(self._job_row(c, name))

    def cancel_job(self, name: str, now: datetime) -> tuple[Job, list[int]]:
        """Cancel a job's open runs and stop the job for good. Returns the job and run ids."""
        with self.write() as c:
            row = self._job_row(c, name)
            ids = [
                r[0]
                for r in c.execute(
                    "SELECT id FROM runs WHERE job_id = ? AND state IN ('pending','failed','leased')",
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
        where, params = [], []
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
            c.execute(
                "UPDATE runs SET state = 'cancelled', finished_at = ?, last_error = "
                "COALESCE(last_error, 'cancelled') WHERE id = ? AND state IN ('pending','failed')",
                (to_us(now), run_id),
            )
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

    def status(self, now: datetime) -> Status:
        """Live daemons, run counts by state, and the earliest next window or due run."""
        daemons = self.live_daemons(now)
        counts = {s.value: 0 for s in RunState}
        for r in self._read("SELECT state, COUNT(*) FROM runs GROUP BY state"):
            counts[r[0]] = r[1]
        a = self._read("SELECT MIN(next_run_at) FROM jobs WHERE state = 'active'")[0][0]
        b = self._read(
            "SELECT MIN(not_before) FROM runs WHERE state IN ('pending','failed')"
        )[0][0]
        vals = [v for v in (a, b) if v is not None]
        return Status(daemons, counts, from_us(min(vals)) if vals else None)

    # ---------------------------------------------------------------- daemons

    def register_daemon(
        self, daemon_id: str, pid: int, host: str, wake_address: str | None,
        now: datetime, lease_seconds: float,
    ) -> None:
        with self.write() as c:
            c.execute(
                "DELETE FROM daemons WHERE expires_at < ?", (to_us(now),)
            )
            c.execute(
                "INSERT OR REPLACE INTO daemons (id, pid, host, started_at, heartbeat_at, "
                "expires_at, wake_address) VALUES (?,?,?,?,?,?,?)",
                (daemon_id, pid, host, to_us(now), to_us(now),
                 to_us(now + timedelta(seconds=lease_seconds)), wake_address),
            )

    def unregister_daemon(self, daemon_id: str) -> None:
        with self.write() as c:
            c.execute("DELETE FROM daemons WHERE id = ?", (daemon_id,))
            c.execute(
                "UPDATE scheduler_lease SET holder = NULL, expires_at = 0 WHERE holder = ?",
                (daemon_id,),
            )

    def live_daemons(self, now: datetime) -> list[DaemonInfo]:
        rows = self._read(
            "SELECT d.*, (SELECT holder FROM scheduler_lease WHERE id = 1 AND expires_at >= ?) "
            "AS leader FROM daemons d WHERE d.expires_at >= ? ORDER BY d.started_at",
            (to_us(now), to_us(now)),
        )
        return [
            DaemonInfo(
                id=r["id"], pid=r["pid"], host=r["host"], leader=r["leader"] == r["id"],
                started_at=from_us(r["started_at"]), heartbeat_at=from_us(r["heartbeat_at"]),
                wake_address=r["wake_address"],
            )
            for r in rows
        ]

    def wake_addresses(self, now: datetime) -> list[str]:
        """The wake addresses of live daemons (for the CLI to poke after a change)."""
        try:
            rows = self.conn.execute(
                "SELECT wake_address FROM daemons WHERE expires_at >= ? AND wake_address IS NOT NULL",
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
                    "INSERT INTO daemons (id, pid, host, started_at, heartbeat_at, expires_at) "
                    "VALUES (?, ?, '', ?, ?, ?)",
                    (daemon_id, os.getpid(), to_us(now), to_us(now), until),
                )
            leader = False
            if want_leader:
                c.execute(
                    "INSERT OR IGNORE INTO scheduler_lease (id, holder, expires_at) VALUES (1, NULL, 0)"
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
                "SELECT next_run_at, id FROM jobs WHERE state = 'active' AND next_run_at IS NOT NULL"
            )
        ]

    def reboot_jobs(self) -> list[Job]:
        rows = self._read(
            "SELECT * FROM jobs WHERE state = 'active' AND trigger_kind = 'reboot'"
        )
        return [_job_from_row(r) for r in rows]

    def has_leased_run(self, job_id: int) -> bool:
        return bool(
            self._read(
                "SELECT 1 FROM runs WHERE job_id = ? AND state = 'leased' LIMIT 1", (job_id,)
            )
        )

    def has_open_run(self, job_id: int) -> bool:
        return bool(
            self._read(
                "SELECT 1 FROM runs WHERE job_id = ? AND state IN ('pending','leased','failed') "
                "LIMIT 1",
                (job_id,),
            )
        )

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
    ) -> list[int] | None:
        """Record a job's fired windows and move its schedule on, in one transaction.

        Applied only if the job is still active and its ``next_run_at`` is still
        ``expected_next_run_at`` (compare-and-set against a concurrent edit); returns None
        when it was not applied, else the ids of the runs inserted (windows already present
        are ignored by the UNIQUE key). Overlap is decided here, against the table: with
        ``forbid`` a scheduled window that fires while a run of the job is leased is recorded
        ``skipped`` (``overlap``); with ``replace`` the leased runs get a cancel request.
        """
        with self.write() as c:
            row = c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row["state"] != JobState.ACTIVE.value:
                return None
            if boot_id is None and row["next_run_at"] != _opt_us(expected_next_run_at):
                return None
            job = _job_from_row(row)
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
                            "state IN ('pending', 'failed')",
                            (to_us(now), job_id),
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
                "leased_by FROM runs WHERE state = 'leased' AND lease_until < ?",
                (now_us,),
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
                elif r["attempt"] >= r["max_attempts"]:
                    c.execute(
                        "UPDATE runs SET state = 'dead', finished_at = ?, last_error = 'lost', "
                        "leased_by = NULL, lease_until = NULL WHERE id = ?",
                        (now_us, r["id"]),
                    )
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
                low_ok = (
                    reserved_priority is None or low_limit is None or low_used < low_limit
                )
                row = c.execute(_CLAIM_ONE, {
                    "me": daemon_id, "until": until, "now": now_us,
                    "low_ok": 1 if low_ok else 0,
                    "rp": reserved_priority if reserved_priority is not None else -(2**62),
                }).fetchone()
                if row is None:
                    break
                run_id, attempt, old_pgid, old_host, priority = row
                c.execute(
                    "UPDATE runs SET lease_host = ?, pgid = NULL WHERE id = ?", (host, run_id)
                )
                c.execute(
                    "INSERT OR REPLACE INTO attempts (run_id, attempt, started_at, daemon_id, host) "
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
                (now_us, exit_code, error, output[-OUTPUT_LIMIT_BYTES:], output_bytes, run_id,
                 attempt),
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
        c.execute("UPDATE jobs SET next_run_at = ? WHERE id = ?", (_opt_us(nxt), job_id))
        return _job_from_row(c.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone())

    def end_open_runs(self, job_id: int, now: datetime) -> Job | None:
        """After a run of a fixed-delay job was cancelled outside the daemon: move it on."""
        with self.write() as c:
            return self._after_run_end(c, job_id, now)

    def cancel_leased_run(
        self, run_id: int, attempt: int, daemon_id: str, now: datetime,
        *, exit_code: int | None, output: bytes, output_bytes: int,
    ) -> tuple[bool, Job | None]:
        """The daemon killed a leased run on a cancel request: it ends ``cancelled``."""
        return self.finish_attempt(
            run_id, attempt, daemon_id, now, exit_code=exit_code, error="cancelled",
            output=output, output_bytes=output_bytes, outcome=RunState.CANCELLED,
        )


def jitter(rng: random.Random, seconds: float) -> float:
    """A uniform delay in [0, seconds)."""
    return rng.random() * seconds if seconds > 0 else 0.0
