"""Watched jobs in the store (README "Watching jobs that jobctl does not run"), written
once for both backends as the outbox is: the runs that pings start and end, and the
scheduler-lease holder's end of those whose end ping never came.

A watched job's runs have reason ``watch``; the claim never takes them (its statement
says so). A ping writes in one transaction: the run it belongs to (made when the window
was not recorded yet: the window's row is unique, so the scheduler's later insert of it
is a no-op), its one attempt, its end and the notifications the end causes.

Every function takes the open transaction's cursor and the backend's :class:`Sql`.
Times are integer microseconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..clock import from_us, to_us
from ..errors import NotFound
from ..models import Event, Job, RunState
from ..notifications import EventNote, event_text
from ..watching import NO_PING, PING_BODY_LIMIT_BYTES, Ping, PingKind, latest_window, watch_until
from . import outbox
from .dialect import Dialect
from .outbox import Cursor, Sql
from .rows import job_from_row, settings_json

JOB_BY_KEY = "SELECT * FROM jobs WHERE ping_key = ?"
JOB_BY_NAME = "SELECT * FROM jobs WHERE name = ?"
#: the jobs of the keys of pings written together, :data:`KEYS_AT_ONCE` keys a statement
#: (fewer are padded with the last one: one statement text, prepared once)
KEYS_AT_ONCE = 32
JOBS_BY_KEYS = f"SELECT * FROM jobs WHERE ping_key IN ({', '.join('?' * KEYS_AT_ONCE)})"
#: a run of a watched job started by its ping, made with its first attempt's number: the
#: window's row is unique, so the scheduler's later insert of the window is a no-op
INSERT_STARTED_RUN = """
INSERT INTO runs (job_id, scheduled_for, state, reason, attempt, max_attempts, not_before,
    priority, env, settings, created_at, job_revision, started_at, lease_host, run_key)
VALUES (:job_id, :window, 'leased', 'watch', 1, 1, :window, 0, '{}', :settings, :now,
    :revision, :now, :host, :rid)
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id, attempt
"""
#: PostgreSQL: that run and its attempt in one statement (SQLite, in-process, has no
#: INSERT inside WITH)
INSERT_STARTED_RUN_ATTEMPT = f"""
WITH r AS ({INSERT_STARTED_RUN.strip()})
INSERT INTO attempts (run_id, attempt, started_at, host)
SELECT id, attempt, :now, :host FROM r
RETURNING run_id AS id, attempt
"""
FORGET_RID = "UPDATE runs SET run_key = NULL WHERE job_id = ? AND run_key = ?"
#: what a ping of a key no job has is told (it says nothing of the jobs there are)
UNKNOWN_KEY = "not found"
START_RUN = """
UPDATE runs SET state = 'leased', attempt = attempt + 1, started_at = :now,
    lease_host = :host, run_key = :rid
WHERE id = :run_id AND state = 'pending'
RETURNING attempt
"""
#: a start's common case: the window's run is pending; one statement takes it
START_WINDOW = """
UPDATE runs SET state = 'leased', attempt = attempt + 1, started_at = :now,
    lease_host = :host, run_key = :rid
WHERE job_id = :job_id AND scheduled_for = :window AND state = 'pending'
RETURNING id, attempt
"""
#: PostgreSQL: the start's common case with its attempt, in one statement that always
#: answers one row: the run and attempt taken (NULL when none was pending) and whether
#: the window has a run at all (when it has, a start makes a run of its own)
START_WINDOW_ATTEMPT = f"""
WITH r AS ({START_WINDOW.strip()}),
a AS (
    INSERT INTO attempts (run_id, attempt, started_at, host)
    SELECT id, attempt, :now, :host FROM r
    RETURNING run_id, attempt
)
SELECT a.run_id AS id, a.attempt,
    EXISTS (SELECT 1 FROM runs WHERE job_id = :job_id AND scheduled_for = :window) AS recorded
FROM (SELECT 1) AS one LEFT JOIN a ON true
"""
#: an end's common case: the latest started run (of that rid) ends, in one statement
END_STARTED = """
UPDATE runs SET state = :state, exit_code = :exit_code, last_error = :error,
    finished_at = :now, leased_by = NULL, lease_until = NULL
WHERE state = 'leased' AND id = (
    SELECT id FROM runs WHERE job_id = :job_id AND reason = 'watch' AND state = 'leased'{rid}
    ORDER BY started_at DESC, id DESC LIMIT 1)
RETURNING id, attempt
"""
END_STARTED_ANY = END_STARTED.format(rid="")
END_STARTED_RID = END_STARTED.format(rid=" AND run_key = :rid")
#: PostgreSQL: that end and its attempt's (no body: its output stays) in one statement;
#: the run's row is answered whether or not the attempt's was there
END_STARTED_FINISH = """
WITH r AS ({end}),
a AS (
    UPDATE attempts SET finished_at = :now, exit_code = :exit_code, error = :error
    FROM r WHERE attempts.run_id = r.id AND attempts.attempt = r.attempt
)
SELECT id, attempt FROM r
"""
END_STARTED_ANY_FINISH = END_STARTED_FINISH.format(end=END_STARTED_ANY.strip())
END_STARTED_RID_FINISH = END_STARTED_FINISH.format(end=END_STARTED_RID.strip())
#: a success for a run that ended dead (no ping) before it was started: its attempt
RESTART_ENDED = """
UPDATE runs SET attempt = attempt + 1, started_at = COALESCE(started_at, :now),
    lease_host = :host
WHERE id = :run_id
RETURNING attempt
"""
INSERT_ATTEMPT = """
INSERT INTO attempts (run_id, attempt, started_at, host) VALUES (?, ?, ?, ?)
"""
LEASED_BY_RID = """
SELECT id, attempt, state FROM runs
WHERE job_id = ? AND run_key = ? AND reason = 'watch' AND state = 'leased'
"""
LATEST_PENDING = """
SELECT id, attempt, state FROM runs
WHERE job_id = ? AND reason = 'watch' AND state = 'pending' AND scheduled_for <= ?
ORDER BY scheduled_for DESC, id DESC LIMIT 1
"""
LATEST_ENDED = """
SELECT id, attempt, state, last_error FROM runs
WHERE job_id = ? AND reason = 'watch' AND state IN ('succeeded', 'dead')
ORDER BY scheduled_for DESC, id DESC LIMIT 1
"""
LATEST_ATTEMPTED = """
SELECT id, attempt FROM runs WHERE job_id = ? AND reason = 'watch' AND attempt > 0
ORDER BY (state = 'leased') DESC, scheduled_for DESC, id DESC LIMIT 1
"""
ATTEMPT_OUTPUT = "SELECT output, output_bytes FROM attempts WHERE run_id = ? AND attempt = ?"
END_RUN = """
UPDATE runs SET state = :state, exit_code = :exit_code, last_error = :error,
    finished_at = :now, leased_by = NULL, lease_until = NULL
WHERE id = :run_id
"""
END_ATTEMPT = """
UPDATE attempts SET finished_at = :now, exit_code = :exit_code, error = :error,
    output = :output, output_bytes = :total
WHERE run_id = :run_id AND attempt = :attempt
"""
END_ATTEMPT_KEEP_OUTPUT = """
UPDATE attempts SET finished_at = :now, exit_code = :exit_code, error = :error
WHERE run_id = :run_id AND attempt = :attempt
"""
SET_OUTPUT = """
UPDATE attempts SET output = :output, output_bytes = :total
WHERE run_id = :run_id AND attempt = :attempt
"""
OPEN_WATCHED = """
SELECT runs.id AS run_id, runs.scheduled_for AS run_window, runs.attempt AS run_attempt, jobs.*
FROM runs JOIN jobs ON jobs.id = runs.job_id
WHERE runs.reason = 'watch' AND runs.state IN ('pending', 'leased')
"""
NO_PING_RUN = """
UPDATE runs SET state = 'dead', last_error = :error, finished_at = :now, leased_by = NULL,
    lease_until = NULL
WHERE id = :run_id AND state IN ('pending', 'leased')
"""
NO_PING_ATTEMPT = """
UPDATE attempts SET finished_at = :now, error = :error
WHERE run_id = :run_id AND attempt = :attempt AND finished_at IS NULL
"""


def watched_job(c: Cursor, q: Sql, *, key: str | None = None, name: str | None = None) -> Job:
    """The watched job of a ping key, or of a name. Raises NotFound (also for a job that
    is not watched: it has no pings)."""
    if key is not None:
        row = c.execute(q(JOB_BY_KEY), (key,)).fetchone()
    else:
        row = c.execute(q(JOB_BY_NAME), (name,)).fetchone()
        if row is not None and row["ping_key"] is None:
            raise NotFound(f"job {name!r} is not watched (add it with --watch)")
    if row is None:
        raise NotFound(UNKNOWN_KEY if key is not None else f"no job named {name!r}")
    return job_from_row(row)


def watched_jobs(c: Cursor, q: Sql, keys: set[str]) -> dict[str, Job]:
    """The watched jobs of ``keys`` by key (a key no job has is left out)."""
    found: dict[str, Job] = {}
    wanted = sorted(keys)
    for i in range(0, len(wanted), KEYS_AT_ONCE):
        part = wanted[i : i + KEYS_AT_ONCE]
        part += part[-1:] * (KEYS_AT_ONCE - len(part))
        for row in c.execute(q(JOBS_BY_KEYS), part).fetchall():
            found[row["ping_key"]] = job_from_row(row)
    return found


def _new_started_run(
    c: Cursor, q: Sql, job: Job, at_us: int, params: dict[str, Any]
) -> tuple[int, int] | None:
    """A started run of ``job`` at ``at_us`` with its attempt; None when that instant
    has a run already."""
    values = {
        **params,
        "job_id": job.id,
        "window": at_us,
        "settings": settings_json(job.spec),
        "revision": job.revision,
    }
    if q.psycopg:
        row = c.execute(q(INSERT_STARTED_RUN_ATTEMPT), values).fetchone()
        return None if row is None else (int(row["id"]), int(row["attempt"]))
    row = c.execute(q(INSERT_STARTED_RUN), values).fetchone()
    if row is None:
        return None
    return _attempt_started(c, q, int(row["id"]), int(row["attempt"]), params)


def _attempt_started(
    c: Cursor, q: Sql, run_id: int, attempt: int, params: dict[str, Any]
) -> tuple[int, int]:
    """The attempt row of a run just started (at ``params``' now, on its host)."""
    c.execute(q(INSERT_ATTEMPT), (run_id, attempt, params["now"], params["host"]))
    return run_id, attempt


def _started_run_at_or_after(
    c: Cursor, q: Sql, job: Job, at_us: int, params: dict[str, Any]
) -> tuple[int, int]:
    """A started run of its own at ``at_us``, or the next free microsecond (pings
    written together share their now)."""
    while (made := _new_started_run(c, q, job, at_us, params)) is None:
        at_us += 1
    return made


def _start(
    c: Cursor, q: Sql, job: Job, ping: Ping, host: str, now: datetime, run_id: int | None = None
) -> tuple[int, int]:
    """Start a run: ``run_id`` (pending), else the pending run of the window a ping at
    ``now`` belongs to (made when it is not recorded yet; a run of its own when that one
    was started or ended already: runs that overlap). Returns (run id, attempt)."""
    now_us = to_us(now)
    if ping.rid is not None:
        c.execute(q(FORGET_RID), (job.id, ping.rid))
    params: dict[str, Any] = {"now": now_us, "host": host, "rid": ping.rid}
    if run_id is not None:
        row = c.execute(q(START_RUN), {**params, "run_id": run_id}).fetchone()
        if row is None:  # taken meanwhile by another ping: this one has a run of its own
            return _started_run_at_or_after(c, q, job, now_us, params)
        return _attempt_started(c, q, run_id, int(row["attempt"]), params)
    window_us = to_us(latest_window(job, now))
    window = {**params, "job_id": job.id, "window": window_us}
    recorded = False  # SQLite: not known; the window's insert below finds out
    if q.psycopg:
        row = c.execute(q(START_WINDOW_ATTEMPT), window).fetchone()
        if row["id"] is not None:
            return int(row["id"]), int(row["attempt"])
        recorded = bool(row["recorded"])
    else:
        row = c.execute(q(START_WINDOW), window).fetchone()
        if row is not None:
            return _attempt_started(c, q, int(row["id"]), int(row["attempt"]), params)
    made = None if recorded else _new_started_run(c, q, job, window_us, params)
    return made if made is not None else _started_run_at_or_after(c, q, job, now_us, params)


def _output(
    c: Cursor, q: Sql, run_id: int, attempt: int, body: bytes, *, append: bool
) -> tuple[bytes, int]:
    if not append:
        return body, len(body)
    row = c.execute(q(ATTEMPT_OUTPUT), (run_id, attempt)).fetchone()
    old = bytes(row["output"] or b"") if row is not None else b""
    total = (int(row["output_bytes"]) if row is not None else 0) + len(body)
    return (old + body)[-PING_BODY_LIMIT_BYTES:], total


def record_ping(
    c: Cursor,
    q: Sql,
    job: Job,
    ping: Ping,
    host: str,
    now: datetime,
    targets: outbox.Targets | None = None,
) -> int | None:
    """Write one ping of a watched job (README "Watching jobs that jobctl does not
    run"); returns the run it touched (None: a ``log`` ping with no attempt to add to).

    - start: the pending run of the latest window at or before ``now`` (made when not
      recorded yet; a run of its own when that one already started) becomes ``leased``
      with an attempt started on ``host``.
    - success, fail, exit N: the started run (by ``rid``, else the latest started one,
      else the latest pending one, else, for a success, the latest ended one when it is
      ``dead`` with ``no ping``, else a new one for the window) ends ``succeeded`` or
      ``dead`` (``exit N``); the body is its output (added to what ``log`` gave); its
      notifications are written (``targets``: who is told, read once for a batch).
    - log: the body is added to the output of the started (else the latest) attempt.
    """
    if ping.kind is PingKind.START:
        run_id, attempt = _start(c, q, job, ping, host, now)
        if ping.body:
            c.execute(
                q(SET_OUTPUT),
                {
                    "output": ping.body,
                    "total": len(ping.body),
                    "run_id": run_id,
                    "attempt": attempt,
                },
            )
        return run_id
    if ping.kind is PingKind.LOG:
        row = None
        if ping.rid is not None:
            row = c.execute(q(LEASED_BY_RID), (job.id, ping.rid)).fetchone()
        row = row or c.execute(q(LATEST_ATTEMPTED), (job.id,)).fetchone()
        if row is None:
            return None
        output, total = _output(c, q, row["id"], row["attempt"], ping.body, append=True)
        c.execute(
            q(SET_OUTPUT),
            {"output": output, "total": total, "run_id": row["id"], "attempt": row["attempt"]},
        )
        return int(row["id"])
    return _end(c, q, job, ping, host, now, targets or outbox.Targets(c, q))


def _end(
    c: Cursor,
    q: Sql,
    job: Job,
    ping: Ping,
    host: str,
    now: datetime,
    targets: outbox.Targets,
) -> int:
    now_us = to_us(now)
    state = RunState.SUCCEEDED if ping.succeeded else RunState.DEAD
    code = ping.exit_code if ping.kind is PingKind.EXIT else None
    end = {
        "state": state.value,
        "exit_code": code,
        "error": ping.error,
        "now": now_us,
        "job_id": job.id,
        "rid": ping.rid,
    }
    # PostgreSQL ends the attempt in the same statement when the ping has no body
    finished = q.psycopg and not ping.body
    by_rid, by_any = (
        (END_STARTED_RID_FINISH, END_STARTED_ANY_FINISH)
        if finished
        else (END_STARTED_RID, END_STARTED_ANY)
    )
    row = None
    if ping.rid is not None:
        row = c.execute(q(by_rid), end).fetchone()
    row = row or c.execute(q(by_any), end).fetchone()
    finished = finished and row is not None
    recovered = False
    started = row is not None
    if row is None:
        # not started: the latest pending run, else (a success) the latest ended one when
        # it is dead with no ping, else a new run for the window; started now
        run_id: int | None = None
        attempt = 0
        pending = c.execute(q(LATEST_PENDING), (job.id, now_us)).fetchone()
        if pending is not None:
            run_id = int(pending["id"])
        elif ping.succeeded:
            ended = c.execute(q(LATEST_ENDED), (job.id,)).fetchone()
            if ended is not None and ended["state"] == "dead" and ended["last_error"] == NO_PING:
                run_id, attempt, recovered = int(ended["id"]), int(ended["attempt"]), True
        if recovered:
            assert run_id is not None
            if attempt == 0:  # it ended before any start: its one attempt is this ping
                params = {"now": now_us, "host": host, "run_id": run_id}
                attempt = int(c.execute(q(RESTART_ENDED), params).fetchone()["attempt"])
                c.execute(q(INSERT_ATTEMPT), (run_id, attempt, now_us, host))
            else:
                started = True
        else:
            run_id, attempt = _start(c, q, job, ping, host, now, run_id)
        c.execute(q(END_RUN), {**end, "run_id": run_id})
        row = {"id": run_id, "attempt": attempt}
    run_id, attempt = int(row["id"]), int(row["attempt"])
    finish = {"now": now_us, "exit_code": code, "error": ping.error, "run_id": run_id}
    finish["attempt"] = attempt
    if ping.body:
        output, total = _output(c, q, run_id, attempt, ping.body, append=started)
        c.execute(q(END_ATTEMPT), {**finish, "output": output, "total": total})
    elif not finished:
        c.execute(q(END_ATTEMPT_KEEP_OUTPUT), finish)
    outbox.note_finish(c, q, run_id, attempt, False, now, targets)
    if recovered and Event.RECOVERED in targets.wants(job.id, (Event.RECOVERED,)):
        text = event_text(Event.RECOVERED, job.name, run_id=run_id, attempt=attempt)
        note = EventNote(Event.RECOVERED, f"run-{run_id}-recovered", text, job.id, run_id, attempt)
        outbox.enqueue(c, q, [note], now, targets)
    return run_id


def settle_watched(
    c: Cursor, q: Sql, now: datetime
) -> tuple[list[tuple[int, int]], datetime | None]:
    """The scheduler-lease holder's end of watched runs whose end ping never came: each
    ``pending`` or ``leased`` watched run past window + grace + (``--timeout``, else the
    period to its next window) ends ``dead`` with error ``no ping``, its notifications
    written. Returns the (job id, run id) ended and when the next one falls due."""
    now_us = to_us(now)
    ended: list[tuple[int, int]] = []
    nxt: int | None = None
    rows = c.execute(q(OPEN_WATCHED)).fetchall()
    targets = outbox.Targets(c, q)
    for r in rows:
        job = job_from_row(r)
        until = to_us(watch_until(job.spec, from_us(r["run_window"])))
        run_id = int(r["run_id"])
        if until > now_us:
            nxt = until if nxt is None else min(nxt, until)
            continue
        params = {"error": NO_PING, "now": now_us, "run_id": run_id, "attempt": r["run_attempt"]}
        c.execute(q(NO_PING_RUN), params)
        c.execute(q(NO_PING_ATTEMPT), params)
        outbox.note_finish(c, q, run_id, int(r["run_attempt"]), False, now, targets)
        ended.append((job.id, run_id))
    return ended, None if nxt is None else from_us(nxt)


class Watch:
    """What the commands (``ping``, ``exec``, ``serve``'s ``/ping``) ask of the store: a
    collaborator the commands' face holds and calls from its own methods, so its writes
    are retried with the face's."""

    def __init__(self, db: Dialect, q: Sql) -> None:
        self.db = db
        self._q = q

    def ping_many(
        self, pings: Sequence[tuple[Ping, str, str]], now: datetime
    ) -> list[int | NotFound | None]:
        """Record ``(ping, key, host)`` items in order, in one transaction (what ``serve``
        does with the pings that arrived together: one commit for all). An unknown key
        is that item's NotFound, and writes nothing for it; the others are written."""
        db, q = self.db, self._q
        with db.write() as c:
            out: list[int | NotFound | None] = []
            jobs = watched_jobs(c, q, {key for _, key, _ in pings})
            targets = outbox.Targets(c, q)  # who is told, read once for the batch
            for ping, key, host in pings:
                job = jobs.get(key)
                if job is None:
                    out.append(NotFound(UNKNOWN_KEY))
                    continue
                out.append(record_ping(c, q, job, ping, host, now, targets))
            # what follows runs (logs --follow, run --wait, the dashboard) looks again;
            # no job changed, so the schedulers are not told
            db.announce("run")
            return out

    def ping(
        self,
        ping: Ping,
        now: datetime,
        *,
        key: str | None = None,
        name: str | None = None,
        host: str,
    ) -> int | None:
        """Record ``ping`` for the watched job of ``key`` (else ``name``) in one
        transaction (see :func:`record_ping`). Raises NotFound."""
        db, q = self.db, self._q
        with db.write() as c:
            job = watched_job(c, q, key=key, name=name)
            run_id = record_ping(c, q, job, ping, host, now)
            db.announce("run")
            return run_id


__all__ = ["Watch", "record_ping", "settle_watched", "watched_job", "watched_jobs"]
