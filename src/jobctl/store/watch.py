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

from datetime import datetime
from typing import Any

from ..clock import from_us, to_us
from ..errors import NotFound
from ..models import Event, Job, RunState
from ..notifications import EventNote, event_text
from ..watching import NO_PING, PING_BODY_LIMIT_BYTES, Ping, PingKind, latest_window, watch_until
from . import outbox
from .outbox import Cursor, Sql
from .rows import job_from_row, settings_json

JOB_BY_KEY = "SELECT * FROM jobs WHERE ping_key = ?"
JOB_BY_NAME = "SELECT * FROM jobs WHERE name = ?"
RUN_OF_WINDOW = "SELECT id, state FROM runs WHERE job_id = ? AND scheduled_for = ?"
INSERT_WATCH_RUN = """
INSERT INTO runs (job_id, scheduled_for, state, reason, attempt, max_attempts, not_before,
    priority, env, settings, created_at, job_revision)
VALUES (:job_id, :window, 'pending', 'watch', 0, 1, :window, 0, '{}', :settings, :now,
    :revision)
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id
"""
FORGET_RID = "UPDATE runs SET run_key = NULL WHERE job_id = ? AND run_key = ?"
START_RUN = """
UPDATE runs SET state = 'leased', attempt = attempt + 1, started_at = :now,
    lease_host = :host, run_key = :rid
WHERE id = :run_id AND state = 'pending'
RETURNING attempt
"""
INSERT_ATTEMPT = """
INSERT INTO attempts (run_id, attempt, started_at, host) VALUES (?, ?, ?, ?)
"""
LEASED_BY_RID = """
SELECT id, attempt, state FROM runs
WHERE job_id = ? AND run_key = ? AND reason = 'watch' AND state = 'leased'
"""
LATEST_LEASED = """
SELECT id, attempt, state FROM runs WHERE job_id = ? AND reason = 'watch' AND state = 'leased'
ORDER BY started_at DESC, id DESC LIMIT 1
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
        raise NotFound("not found" if key is not None else f"no job named {name!r}")
    return job_from_row(row)


def _new_run(c: Cursor, q: Sql, job: Job, window_us: int, now_us: int) -> int | None:
    row = c.execute(
        q(INSERT_WATCH_RUN),
        {
            "job_id": job.id,
            "window": window_us,
            "settings": settings_json(job.spec),
            "now": now_us,
            "revision": job.revision,
        },
    ).fetchone()
    return None if row is None else int(row["id"])


def _run_for_window(c: Cursor, q: Sql, job: Job, now: datetime) -> int:
    """The pending run of the window a ping at ``now`` belongs to: the window's run when
    it is still pending, else a run of its own at ``now`` (the window's run was started
    or ended already: runs that overlap)."""
    now_us = to_us(now)
    window_us = to_us(latest_window(job, now))
    got = c.execute(q(RUN_OF_WINDOW), (job.id, window_us)).fetchone()
    if got is None:
        made = _new_run(c, q, job, window_us, now_us)
        if made is not None:
            return made
        got = c.execute(q(RUN_OF_WINDOW), (job.id, window_us)).fetchone()
    if got is not None and got["state"] == RunState.PENDING.value:
        return int(got["id"])
    made = _new_run(c, q, job, now_us, now_us)
    if made is None:  # a run at this very microsecond: take it as it is
        return int(c.execute(q(RUN_OF_WINDOW), (job.id, now_us)).fetchone()["id"])
    return made


def _start(
    c: Cursor, q: Sql, job: Job, run_id: int, rid: str | None, host: str, now_us: int
) -> int:
    if rid is not None:
        c.execute(q(FORGET_RID), (job.id, rid))
    row = c.execute(
        q(START_RUN), {"now": now_us, "host": host, "rid": rid, "run_id": run_id}
    ).fetchone()
    attempt = int(row["attempt"])
    c.execute(q(INSERT_ATTEMPT), (run_id, attempt, now_us, host))
    return attempt


def _output(
    c: Cursor, q: Sql, run_id: int, attempt: int, body: bytes, *, append: bool
) -> tuple[bytes, int]:
    if not append:
        return body, len(body)
    row = c.execute(q(ATTEMPT_OUTPUT), (run_id, attempt)).fetchone()
    old = bytes(row["output"] or b"") if row is not None else b""
    total = (int(row["output_bytes"]) if row is not None else 0) + len(body)
    return (old + body)[-PING_BODY_LIMIT_BYTES:], total


def record_ping(c: Cursor, q: Sql, job: Job, ping: Ping, host: str, now: datetime) -> int | None:
    """Write one ping of a watched job (README "Watching jobs that jobctl does not
    run"); returns the run it touched (None: a ``log`` ping with no attempt to add to).

    - start: the pending run of the latest window at or before ``now`` (made when not
      recorded yet; a run of its own when that one already started) becomes ``leased``
      with an attempt started on ``host``.
    - success, fail, exit N: the started run (by ``rid``, else the latest started one,
      else the latest pending one, else, for a success, the latest ended one when it is
      ``dead`` with ``no ping``, else a new one for the window) ends ``succeeded`` or
      ``dead`` (``exit N``); the body is its output; its notifications are written.
    - log: the body is added to the output of the started (else the latest) attempt.
    """
    now_us = to_us(now)
    if ping.kind is PingKind.START:
        run_id = _run_for_window(c, q, job, now)
        attempt = _start(c, q, job, run_id, ping.rid, host, now_us)
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
    return _end(c, q, job, ping, host, now)


def _end(c: Cursor, q: Sql, job: Job, ping: Ping, host: str, now: datetime) -> int:
    now_us = to_us(now)
    row = None
    if ping.rid is not None:
        row = c.execute(q(LEASED_BY_RID), (job.id, ping.rid)).fetchone()
    row = row or c.execute(q(LATEST_LEASED), (job.id,)).fetchone()
    row = row or c.execute(q(LATEST_PENDING), (job.id, now_us)).fetchone()
    recovered = False
    if row is None and ping.succeeded:
        ended = c.execute(q(LATEST_ENDED), (job.id,)).fetchone()
        if ended is not None and ended["state"] == "dead" and ended["last_error"] == NO_PING:
            row, recovered = ended, True
    if row is None:
        run_id = _run_for_window(c, q, job, now)
        row = {"id": run_id, "attempt": 0, "state": RunState.PENDING.value}
    run_id = int(row["id"])
    attempt = int(row["attempt"])
    if row["state"] == RunState.PENDING.value:
        attempt = _start(c, q, job, run_id, ping.rid, host, now_us)
    append = row["state"] == RunState.LEASED.value
    output, total = _output(c, q, run_id, attempt, ping.body, append=append)
    state = RunState.SUCCEEDED if ping.succeeded else RunState.DEAD
    c.execute(
        q(END_RUN),
        {
            "state": state.value,
            "exit_code": ping.exit_code if ping.kind is PingKind.EXIT else None,
            "error": ping.error,
            "now": now_us,
            "run_id": run_id,
        },
    )
    c.execute(
        q(END_ATTEMPT),
        {
            "now": now_us,
            "exit_code": ping.exit_code if ping.kind is PingKind.EXIT else None,
            "error": ping.error,
            "output": output,
            "total": total,
            "run_id": run_id,
            "attempt": attempt,
        },
    )
    targets = outbox.Targets(c, q)
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


class WatchCommands:
    """What the commands (``ping``, ``exec``, ``serve``'s ``/ping``) ask of the store."""

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
        db: Any = self.db  # type: ignore[attr-defined]
        q: Sql = self._q  # type: ignore[attr-defined]
        with db.write() as c:
            job = watched_job(c, q, key=key, name=name)
            run_id = record_ping(c, q, job, ping, host, now)
            db.announce(f"job:{job.id}")
            db.announce("run")
            return run_id


class WatchDaemon:
    """What the scheduler-lease holder asks: :func:`settle_watched`, when some watched
    run is open."""

    def settle_watched(self, now: datetime) -> datetime | None:
        db: Any = self.db  # type: ignore[attr-defined]
        q: Sql = self._q  # type: ignore[attr-defined]
        if not db.read(
            q(
                "SELECT 1 FROM runs WHERE reason = 'watch' AND state IN "
                "('pending', 'leased') LIMIT 1"
            ),
            (),
        ):
            return None
        with db.write() as c:
            ended, nxt = settle_watched(c, q, now)
            for job_id, _ in ended:
                db.announce(f"job:{job_id}")
            if ended:
                db.announce("run")
            return nxt


__all__ = ["WatchCommands", "WatchDaemon", "record_ping", "settle_watched", "watched_job"]
