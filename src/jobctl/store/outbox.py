"""The outbox (see jobctl(1), jobctl notify), written once for both backends: channels, the
notifications an
operation writes in its own transaction, their delivery under a lease, and the reads of
``notifications``, ``check`` and the metrics.

Every function takes the open transaction's cursor ``c`` (rows read by column name) and
the backend's :class:`Sql`, which turns the statements below (SQLite's parameter style,
``?`` and ``:name``) into its own. Times are integer microseconds since the epoch.

:func:`enqueue` is the one way a notification is written: any operation calls it inside
its write transaction with the :class:`~jobctl.notifications.EventNote` it caused, so the
state change and the message are one commit. One row is written per channel that wants
the event (the job's ``--notify`` rules, else the channels whose ``--default`` holds it);
``(cause, channel)`` is unique, so an event is written once for what caused it however
often its cause is looked at.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..clock import from_us, to_us
from ..errors import Conflict, NotFound, UsageError
from ..models import Event, Job, NotifyRule, RunState, SkipReason
from ..notifications import (
    DROP_AFTER_SECONDS,
    Channel,
    ChannelKind,
    EventNote,
    Notification,
    NotificationState,
    Outcome,
    Outgoing,
    channels_for,
    event_text,
    finish_events,
    possible_finish_events,
    rules_from_json,
)
from ..outcomes import Plan
from .dialect import Dialect, pyformat

if TYPE_CHECKING:  # only jobctl check builds one
    from ..checks import CheckFacts


class Sql:
    """A backend's way of writing the statements of this module: its parameter marks (the
    one translator, :func:`~.dialect.pyformat`, on PostgreSQL) and whether a claim may pass
    rows other transactions hold (``SKIP LOCKED``)."""

    def __init__(self, backend: str) -> None:
        self.psycopg = backend == "postgresql"
        self._cache: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        out = self._cache.get(text)
        if out is None:
            out = self._cache[text] = pyformat(text) if self.psycopg else text
        return out

    @property
    def skip_locked(self) -> str:
        return " FOR UPDATE SKIP LOCKED" if self.psycopg else ""


Cursor = Any


# ---------------------------------------------------------------------- channels

CHANNEL_COLUMNS = "name, kind, target, headers, smtp, default_events"
INSERT_CHANNEL = (
    "INSERT INTO channels (name, kind, target, headers, smtp, default_events, created_at) "
    "VALUES (:name, :kind, :target, :headers, :smtp, :default_events, :now)"
)
UPDATE_CHANNEL = (
    "UPDATE channels SET kind = :kind, target = :target, headers = :headers, smtp = :smtp, "
    "default_events = :default_events WHERE name = :name"
)
CHANNEL_BY_NAME = f"SELECT {CHANNEL_COLUMNS} FROM channels WHERE name = ?"
CHANNELS_ALL = f"SELECT {CHANNEL_COLUMNS} FROM channels ORDER BY name"
DEFAULT_CHANNELS = f"SELECT {CHANNEL_COLUMNS} FROM channels WHERE default_events <> ''"
ANY_CHANNEL = "SELECT 1 FROM channels LIMIT 1"
DELETE_CHANNEL = "DELETE FROM channels WHERE name = ?"
JOBS_WITH_NOTIFY = "SELECT name, notify FROM jobs WHERE notify <> '[]' ORDER BY name"
DROP_OF_CHANNEL = (
    "UPDATE notifications SET state = 'dropped', ended_at = :now, leased_by = NULL, "
    "lease_until = NULL, last_error = 'channel removed' "
    "WHERE channel = :name AND state = 'pending'"
)


def channel_from_row(r: Any) -> Channel:
    events = r["default_events"]
    return Channel(
        r["name"],
        ChannelKind(r["kind"]),
        r["target"],
        headers=tuple((k, v) for k, v in json.loads(r["headers"])),
        smtp=r["smtp"],
        default_events=tuple(Event(e) for e in events.split(",")) if events else (),
    )


def _channel_params(ch: Channel, now_us: int) -> dict[str, Any]:
    return {
        "name": ch.name,
        "kind": ch.kind.value,
        "target": ch.target,
        "headers": json.dumps([list(h) for h in ch.headers]),
        "smtp": ch.smtp,
        "default_events": ",".join(e.value for e in ch.default_events),
        "now": now_us,
    }


def add_channel(c: Cursor, q: Sql, ch: Channel, now: datetime, *, replace: bool) -> Channel:
    """Create a channel (``replace``: overwrite the one of that name). Conflict when the
    name is taken."""
    exists = c.execute(q(CHANNEL_BY_NAME), (ch.name,)).fetchone() is not None
    if exists and not replace:
        raise Conflict(f"channel {ch.name} exists (use --replace to overwrite it)")
    c.execute(q(UPDATE_CHANNEL if exists else INSERT_CHANNEL), _channel_params(ch, to_us(now)))
    return ch


def get_channel(c: Cursor, q: Sql, name: str) -> Channel:
    row = c.execute(q(CHANNEL_BY_NAME), (name,)).fetchone()
    if row is None:
        raise NotFound(f"no channel named {name}")
    return channel_from_row(row)


def list_channels(c: Cursor, q: Sql) -> list[Channel]:
    return [channel_from_row(r) for r in c.execute(q(CHANNELS_ALL)).fetchall()]


def delete_channel(c: Cursor, q: Sql, name: str, now: datetime) -> int:
    """Delete a channel; its undelivered notifications become ``dropped`` (how many is
    returned). Conflict, naming them, while jobs name it; NotFound when there is none."""
    get_channel(c, q, name)
    users = [
        r["name"]
        for r in c.execute(q(JOBS_WITH_NOTIFY)).fetchall()
        if any(rule.channel == name for rule in rules_from_json(json.loads(r["notify"])))
    ]
    if users:
        shown = ", ".join(users[:10]) + (" …" if len(users) > 10 else "")
        raise Conflict(f"channel {name} is named by jobs {shown}: change their --notify first")
    dropped = int(c.execute(q(DROP_OF_CHANNEL), {"name": name, "now": to_us(now)}).rowcount)
    c.execute(q(DELETE_CHANNEL), (name,))
    return dropped


def check_rules(c: Cursor, q: Sql, rules: Sequence[NotifyRule], job: str) -> None:
    """Inside a job's write: every channel its rules name exists (UsageError, exit 2)."""
    for rule in rules:
        if c.execute(q(CHANNEL_BY_NAME), (rule.channel,)).fetchone() is None:
            raise UsageError(f"invalid --notify of job {job}: no channel named {rule.channel}")


def rules_text(rules: Sequence[NotifyRule]) -> str:
    """A job's rules as kept in ``jobs.notify``."""
    return json.dumps([r.to_json() for r in rules])


def rules_of(text: str | None) -> tuple[NotifyRule, ...]:
    return rules_from_json(json.loads(text)) if text and text != "[]" else ()


# ---------------------------------------------------------------------- writing events

INSERT_NOTIFICATION = (
    "INSERT INTO notifications (key, channel, cause, event, job_id, job_name, run_id, "
    "attempt, text, detail, next_try_at, created_at) VALUES (:key, :channel, :cause, "
    ":event, :job_id, :job_name, :run_id, :attempt, :text, :detail, :now, :now) "
    "ON CONFLICT (cause, channel) DO NOTHING"
)
JOB_NOTIFY = "SELECT name, notify FROM jobs WHERE id = ?"


class Targets:
    """Who is told, read at most once per job in one transaction (a burst's finishes)."""

    def __init__(self, c: Cursor, q: Sql, *, any_channel: bool | None = None) -> None:
        """``any_channel``: whether a channel exists, when the caller read it already
        (:data:`ANY_CHANNEL`, sent with other statements)."""
        self.c, self.q = c, q
        self._any: bool | None = any_channel
        self._defaults: list[Channel] | None = None
        self._jobs: dict[int, tuple[str, tuple[NotifyRule, ...]]] = {}

    def any_channel(self) -> bool:
        if self._any is None:
            self._any = self.c.execute(self.q(ANY_CHANNEL)).fetchone() is not None
        return self._any

    def job(self, job_id: int) -> tuple[str, tuple[NotifyRule, ...]] | None:
        got = self._jobs.get(job_id)
        if got is None:
            row = self.c.execute(self.q(JOB_NOTIFY), (job_id,)).fetchone()
            if row is None:
                return None
            got = self._jobs[job_id] = (row["name"], rules_of(row["notify"]))
        return got

    def channels(self, job_id: int | None, event: Event) -> list[str]:
        if not self.any_channel():
            return []
        rules: tuple[NotifyRule, ...] = ()
        if job_id is not None:
            got = self.job(job_id)
            rules = got[1] if got else ()
        if not rules and self._defaults is None:
            self._defaults = [channel_from_row(r) for r in self.c.execute(self.q(DEFAULT_CHANNELS))]
        return channels_for(event, rules, self._defaults or [])

    def wants(self, job_id: int, events: Iterable[Event]) -> set[Event]:
        """Of ``events``, those some channel of the job is told about."""
        return {e for e in events if self.channels(job_id, e)}


def enqueue(
    c: Cursor, q: Sql, notes: Sequence[EventNote], now: datetime, targets: Targets | None = None
) -> None:
    """Write each note's notifications in the caller's transaction: one row per channel
    that wants it, none twice for one cause.

    The API for every operation that causes an event (an attempt's end, windows recorded
    missed, a pause after failures): call it inside the write that makes the change."""
    t = targets or Targets(c, q)
    now_us = to_us(now)
    for note in notes:
        channels = t.channels(note.job_id, note.event)
        if not channels:
            continue
        job_name = None
        if note.job_id is not None:
            got = t.job(note.job_id)
            job_name = got[0] if got else None
        for channel in channels:
            c.execute(
                q(INSERT_NOTIFICATION),
                {
                    "key": uuid.uuid4().hex,
                    "channel": channel,
                    "cause": note.cause,
                    "event": note.event.value,
                    "job_id": note.job_id,
                    "job_name": job_name,
                    "run_id": note.run_id,
                    "attempt": note.attempt,
                    "text": note.text,
                    "detail": None if note.detail is None else json.dumps(note.detail),
                    "now": now_us,
                },
            )


# what an attempt's end needs to say which events it caused
FINISH_FACTS = """
SELECT runs.job_id, runs.scheduled_for, runs.state, runs.last_error, a.started_at
FROM runs LEFT JOIN attempts a ON a.run_id = runs.id AND a.attempt = :attempt
WHERE runs.id = :run_id
"""
PREVIOUS_FINAL = """
SELECT state FROM runs WHERE job_id = :job_id AND state IN ('succeeded', 'dead')
    AND scheduled_for < :before ORDER BY scheduled_for DESC LIMIT 1
"""
PREVIOUS_DURATIONS = """
SELECT a.finished_at - a.started_at AS us FROM runs
JOIN attempts a ON a.run_id = runs.id AND a.attempt = runs.attempt
WHERE runs.job_id = :job_id AND runs.state = 'succeeded' AND runs.scheduled_for < :before
    AND a.finished_at IS NOT NULL
ORDER BY runs.scheduled_for DESC LIMIT 20
"""


def note_finish(
    c: Cursor,
    q: Sql,
    run_id: int,
    attempt: int,
    retry_scheduled: bool,
    now: datetime,
    targets: Targets,
) -> None:
    """After an attempt's end was written (in the same transaction): the notifications of
    the events it caused (failed, dead, succeeded, recovered, anomaly)."""
    if not targets.any_channel():
        return
    row = c.execute(q(FINISH_FACTS), {"run_id": run_id, "attempt": attempt}).fetchone()
    if row is None:
        return
    job_id = row["job_id"]
    state = RunState(row["state"])
    wanted = targets.wants(job_id, possible_finish_events(state))
    if not wanted:
        return
    started = row["started_at"]
    duration = None if started is None else max(to_us(now) - started, 0) / 1e6
    previous: RunState | None = None
    durations: list[float] = []
    params = {"job_id": job_id, "before": row["scheduled_for"]}
    if Event.RECOVERED in wanted:
        prev = c.execute(q(PREVIOUS_FINAL), params).fetchone()
        previous = RunState(prev["state"]) if prev else None
    if Event.ANOMALY in wanted:
        durations = [r["us"] / 1e6 for r in c.execute(q(PREVIOUS_DURATIONS), params).fetchall()]
    events = finish_events(
        state=state,
        retry_scheduled=retry_scheduled,
        previous_final=previous,
        duration_seconds=duration,
        previous_durations=durations,
    )
    got = targets.job(job_id)
    name = got[0] if got else None
    notes = []
    for event, detail in events:
        if event not in wanted:
            continue
        per_attempt = event in (Event.FAILED, Event.DEAD)
        cause = (
            f"run-{run_id}-{attempt}-{event.value}"
            if per_attempt
            else f"run-{run_id}-{event.value}"
        )
        text = event_text(
            event,
            name,
            run_id=run_id,
            attempt=attempt,
            error=row["last_error"],
            duration_seconds=duration,
            detail=detail,
        )
        notes.append(EventNote(event, cause, text, job_id, run_id, attempt, detail))
    enqueue(c, q, notes, now, targets)


def missed_note(
    job_id: int, job_name: str, count: int, first: datetime, last: datetime, reason: str
) -> EventNote:
    """The ``missed`` event of one decision that recorded windows ``skipped`` (reason
    ``missed`` here; ``deadline`` from the claim of see README, Run policies and what a run
    costs)."""
    from ..clock import iso

    detail = {"count": count, "first": iso(first), "last": iso(last), "reason": reason}
    return EventNote(
        Event.MISSED,
        f"job-{job_id}-{reason}-{to_us(first)}-{to_us(last)}",
        event_text(Event.MISSED, job_name, detail=detail),
        job_id,
        detail=detail,
    )


def paused_note(job_id: int, job_name: str, failures: int, now: datetime) -> EventNote:
    """The ``paused`` event of a job paused by ``--pause-after-failures`` (see README, Run policies
    and what a run costs): the
    pause's transaction passes it to :func:`enqueue`."""
    detail = {"failures": failures}
    return EventNote(
        Event.PAUSED,
        f"job-{job_id}-paused-{to_us(now)}",
        event_text(Event.PAUSED, job_name, detail=detail),
        job_id,
        detail=detail,
    )


def missed_of(job: Job, plan: Plan) -> EventNote | None:
    """The ``missed`` event of one firing decision that recorded windows skipped as
    missed: how many windows did not run (all of them, beyond the rows kept), the first
    and the last."""
    missed = [w.scheduled_for for w in plan.windows if w.skip_reason is SkipReason.MISSED]
    if not missed:
        return None
    count = max(plan.missed_increment, len(missed))
    return missed_note(job.id, job.name, count, min(missed), max(missed), "missed")


# ---------------------------------------------------------------------- late and long

LATE_RUNS = """
SELECT runs.id, runs.job_id, runs.scheduled_for, jobs.grace_seconds AS grace
FROM runs JOIN jobs ON jobs.id = runs.job_id
WHERE jobs.grace_seconds IS NOT NULL AND runs.state IN ('pending', 'failed')
    AND runs.started_at IS NULL
    AND runs.scheduled_for + CAST(jobs.grace_seconds * 1000000 AS BIGINT) <= :now
    AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.cause = 'run-' || runs.id || '-late')
"""
NEXT_LATE = """
SELECT MIN(runs.scheduled_for + CAST(jobs.grace_seconds * 1000000 AS BIGINT)) AS at
FROM runs JOIN jobs ON jobs.id = runs.job_id
WHERE jobs.grace_seconds IS NOT NULL AND runs.state IN ('pending', 'failed')
    AND runs.started_at IS NULL
    AND runs.scheduled_for + CAST(jobs.grace_seconds * 1000000 AS BIGINT) > :now
"""
LONG_ATTEMPTS = """
SELECT runs.id, runs.job_id, runs.attempt, jobs.warn_after_seconds AS warn_after
FROM runs JOIN jobs ON jobs.id = runs.job_id
JOIN attempts a ON a.run_id = runs.id AND a.attempt = runs.attempt
WHERE runs.state = 'leased' AND jobs.warn_after_seconds IS NOT NULL AND a.finished_at IS NULL
    AND a.started_at + CAST(jobs.warn_after_seconds * 1000000 AS BIGINT) <= :now
    AND NOT EXISTS (SELECT 1 FROM notifications n
                    WHERE n.cause = 'run-' || runs.id || '-' || runs.attempt || '-long')
"""
NEXT_LONG = """
SELECT MIN(a.started_at + CAST(jobs.warn_after_seconds * 1000000 AS BIGINT)) AS at
FROM runs JOIN jobs ON jobs.id = runs.job_id
JOIN attempts a ON a.run_id = runs.id AND a.attempt = runs.attempt
WHERE runs.state = 'leased' AND jobs.warn_after_seconds IS NOT NULL AND a.finished_at IS NULL
    AND a.started_at + CAST(jobs.warn_after_seconds * 1000000 AS BIGINT) > :now
"""
DROP_STALE = (
    "UPDATE notifications SET state = 'dropped', ended_at = :now, leased_by = NULL, "
    "lease_until = NULL, last_error = 'undelivered for 7 days' "
    "WHERE state = 'pending' AND created_at < :cutoff"
)


def note_overdue(c: Cursor, q: Sql, now: datetime) -> datetime | None:
    """The scheduler-lease holder's look at time passing: ``late`` runs (not started by
    window + grace), ``long`` attempts (running past ``--warn-after``), and undelivered
    notifications older than 7 days dropped. Returns when the next late or long falls
    due (None: nothing waits for it)."""
    now_us = to_us(now)
    t = Targets(c, q)
    c.execute(q(DROP_STALE), {"now": now_us, "cutoff": now_us - int(DROP_AFTER_SECONDS * 1e6)})
    if not t.any_channel():
        return None
    notes = []
    for r in c.execute(q(LATE_RUNS), {"now": now_us}).fetchall():
        got = t.job(r["job_id"])
        detail = {"grace": r["grace"], "scheduled_for": from_us(r["scheduled_for"]).isoformat()}
        text = event_text(Event.LATE, got[0] if got else None, run_id=r["id"], detail=detail)
        notes.append(
            EventNote(Event.LATE, f"run-{r['id']}-late", text, r["job_id"], r["id"], None, detail)
        )
    for r in c.execute(q(LONG_ATTEMPTS), {"now": now_us}).fetchall():
        got = t.job(r["job_id"])
        detail = {"warn_after": r["warn_after"]}
        text = event_text(
            Event.LONG, got[0] if got else None, run_id=r["id"], attempt=r["attempt"], detail=detail
        )
        notes.append(
            EventNote(
                Event.LONG,
                f"run-{r['id']}-{r['attempt']}-long",
                text,
                r["job_id"],
                r["id"],
                r["attempt"],
                detail,
            )
        )
    enqueue(c, q, notes, now, t)
    times = [
        row["at"]
        for stmt in (NEXT_LATE, NEXT_LONG)
        if (row := c.execute(q(stmt), {"now": now_us}).fetchone()) is not None
        and row["at"] is not None
    ]
    return from_us(min(times)) if times else None


# ---------------------------------------------------------------------- delivery


NOTIFICATION_COLUMNS = (
    "n.id, n.key, n.channel, n.event, n.job_id, n.job_name, n.run_id, n.attempt, n.state, "
    "n.tries, n.created_at, n.sent_at, n.last_error, n.text, n.detail"
)
#: one job's notifications to one channel go in the order they were written (the dead of
#: a run before the paused it caused): one waits while an earlier one is undelivered
#: (pending, leased or not; a failed or dropped one no longer holds the next)
IN_TURN = """NOT EXISTS (
        SELECT 1 FROM notifications e
        WHERE e.job_id = n.job_id AND e.id < n.id AND e.channel = n.channel
            AND e.state = 'pending')"""
CLAIM_DUE = f"""
SELECT n.id FROM notifications n
WHERE n.state = 'pending' AND n.next_try_at <= :now
    AND (n.lease_until IS NULL OR n.lease_until < :now
         OR NOT EXISTS (SELECT 1 FROM daemons d WHERE d.id = n.leased_by AND d.expires_at >= :now))
    AND {IN_TURN}
ORDER BY n.next_try_at, n.id LIMIT :limit{{skip_locked}}
"""
LEASE_ONE = (
    "UPDATE notifications SET leased_by = :me, lease_until = :until WHERE id = :id "
    "AND state = 'pending'"
)
NOTIFICATION_BY_ID = f"""
SELECT {NOTIFICATION_COLUMNS}, {", ".join("ch." + col for col in CHANNEL_COLUMNS.split(", ")[1:])},
    ch.name AS ch_name
FROM notifications n LEFT JOIN channels ch ON ch.name = n.channel WHERE n.id = ?
"""
#: when the next notification may be leased: its next try, or when its lease ends; a lease
#: ends early when the daemon holding it is gone (its row expired or removed), so a daemon
#: that took over from a killed one wakes then, not when the long delivery lease runs out
NEXT_DUE = f"""
SELECT MIN(CASE WHEN n.lease_until IS NULL OR n.lease_until < n.next_try_at
                  OR d.expires_at IS NULL OR d.expires_at < n.next_try_at
                THEN n.next_try_at
                WHEN d.expires_at < n.lease_until THEN d.expires_at + 1
                ELSE n.lease_until + 1 END) AS at
FROM notifications n LEFT JOIN daemons d ON d.id = n.leased_by
WHERE n.state = 'pending' AND {IN_TURN}
"""
MARK_SENT = """
UPDATE notifications SET state = 'sent', tries = tries + 1, sent_at = :now, ended_at = :now,
    leased_by = NULL, lease_until = NULL, last_error = NULL
WHERE id = :id AND leased_by = :me AND state = 'pending'
"""
MARK_RETRY = """
UPDATE notifications SET tries = tries + 1, next_try_at = :retry_at, leased_by = NULL,
    lease_until = NULL, last_error = :error
WHERE id = :id AND leased_by = :me AND state = 'pending'
"""
MARK_FAILED = """
UPDATE notifications SET state = 'failed', tries = tries + 1, ended_at = :now,
    leased_by = NULL, lease_until = NULL, last_error = :error
WHERE id = :id AND leased_by = :me AND state = 'pending'
"""
MARK_DROPPED = """
UPDATE notifications SET state = 'dropped', ended_at = :now, leased_by = NULL,
    lease_until = NULL, last_error = 'channel removed'
WHERE id = :id AND leased_by = :me AND state = 'pending'
"""
COUNT_OUTCOME = """
INSERT INTO notification_counts (channel, event, state, n)
SELECT channel, event, :state, 1 FROM notifications WHERE id = :id
ON CONFLICT (channel, event, state) DO UPDATE SET n = notification_counts.n + 1
"""


def notification_from_row(r: Any) -> Notification:
    return Notification(
        id=r["id"],
        key=r["key"],
        channel=r["channel"],
        event=Event(r["event"]),
        job=r["job_name"],
        run_id=r["run_id"],
        attempt=r["attempt"],
        state=NotificationState(r["state"]),
        tries=r["tries"],
        created_at=from_us(r["created_at"]),
        sent_at=from_us(r["sent_at"]) if r["sent_at"] is not None else None,
        last_error=r["last_error"],
        text=r["text"],
        detail=json.loads(r["detail"]) if r["detail"] else None,
    )


def claim_due(
    c: Cursor, q: Sql, daemon_id: str, now: datetime, lease_seconds: float, limit: int
) -> list[Outgoing]:
    """Lease up to ``limit`` notifications that are due: pending, their time come, and
    not leased by a live daemon (a lease runs out, or its daemon is gone). Oldest first."""
    if limit <= 0:
        return []
    now_us = to_us(now)
    ids = [
        r["id"]
        for r in c.execute(
            q(CLAIM_DUE.format(skip_locked=q.skip_locked)), {"now": now_us, "limit": limit}
        ).fetchall()
    ]
    out = []
    until = now_us + int(lease_seconds * 1e6)
    for nid in ids:
        c.execute(q(LEASE_ONE), {"me": daemon_id, "until": until, "id": nid})
        r = c.execute(q(NOTIFICATION_BY_ID), (nid,)).fetchone()
        channel = None
        if r["ch_name"] is not None:
            channel = channel_from_row({**dict(r), "name": r["ch_name"]})
        out.append(Outgoing(notification_from_row(r), r["job_id"], channel))
    return out


def next_due(c: Cursor, q: Sql, now: datetime) -> datetime | None:
    """When a notification may next be leased (None: none is pending)."""
    return due_of(c.execute(q(NEXT_DUE)).fetchone())


def due_of(row: Any) -> datetime | None:
    """:func:`next_due` from the row of :data:`NEXT_DUE` (read in a pipeline)."""
    return from_us(row["at"]) if row and row["at"] is not None else None


def record_outcome(
    c: Cursor,
    q: Sql,
    daemon_id: str,
    nid: int,
    now: datetime,
    *,
    error: str | None,
    retry_at: datetime | None,
    dropped: bool = False,
) -> bool:
    """A delivery's outcome, fenced by this daemon's lease: sent (``error`` None), tried
    again at ``retry_at``, ``failed`` for good, or dropped (its channel is gone). The
    counters of sent and failed rise with it. Returns whether it was applied."""
    p: dict[str, Any] = {"id": nid, "me": daemon_id, "now": to_us(now), "error": error}
    if dropped:
        return int(c.execute(q(MARK_DROPPED), p).rowcount) == 1
    if error is None:
        stmt, counted = MARK_SENT, "sent"
    elif retry_at is not None:
        p["retry_at"] = to_us(retry_at)
        stmt, counted = MARK_RETRY, None
    else:
        stmt, counted = MARK_FAILED, "failed"
    if int(c.execute(q(stmt), p).rowcount) != 1:
        return False
    if counted:
        c.execute(q(COUNT_OUTCOME), {"state": counted, "id": nid})
    return True


# ---------------------------------------------------------------------- reads

LIST_NOTIFICATIONS = (
    f"SELECT {NOTIFICATION_COLUMNS} FROM notifications n {{where}} ORDER BY n.id DESC LIMIT ?"
)
JOB_ID_BY_NAME = "SELECT id FROM jobs WHERE name = ?"
COUNTS = "SELECT channel, event, state, n FROM notification_counts ORDER BY channel, event, state"


def list_notifications(
    c: Cursor,
    q: Sql,
    *,
    job: str | None = None,
    state: NotificationState | None = None,
    run_id: int | None = None,
    limit: int = 20,
) -> list[Notification]:
    """Notifications, newest first. NotFound for an unknown job."""
    where: list[str] = []
    params: list[Any] = []
    if job is not None:
        row = c.execute(q(JOB_ID_BY_NAME), (job,)).fetchone()
        if row is None:
            raise NotFound(f"no job named {job}")
        where.append("n.job_id = ?")
        params.append(row["id"])
    if run_id is not None:
        where.append("n.run_id = ?")
        params.append(run_id)
    if state is not None:
        where.append("n.state = ?")
        params.append(state.value)
    text = LIST_NOTIFICATIONS.format(where=("WHERE " + " AND ".join(where)) if where else "")
    rows = c.execute(q(text), (*params, limit)).fetchall()
    return [notification_from_row(r) for r in rows]


def counts(c: Cursor, q: Sql) -> list[tuple[str, str, str, int]]:
    """(channel, event, state, n) of every notification ever sent or failed."""
    return [(r["channel"], r["event"], r["state"], r["n"]) for r in c.execute(q(COUNTS))]


CHECK_DAEMONS = "SELECT COUNT(*) AS n FROM daemons WHERE expires_at >= :now"
CHECK_LEADER = """
SELECT d.host FROM scheduler_lease s JOIN daemons d ON d.id = s.holder
WHERE s.expires_at >= :now AND d.expires_at >= :now
"""
CHECK_DEAD = """
SELECT COUNT(*) AS n FROM runs WHERE state = 'dead' AND finished_at >= :since
"""
CHECK_FAILED = """
SELECT COUNT(*) AS n FROM notifications WHERE state = 'failed' AND ended_at >= :since
"""


def check_counts(
    c: Cursor, q: Sql, now: datetime, late_seconds: float, since_seconds: float, late_sql: str
) -> CheckFacts:
    """What ``jobctl check`` judges, at ``now``. ``late_sql`` counts the runs due before
    ``:cutoff`` that the claim would take (the caller's, in its dialect: the claim's rules
    belong to the queries)."""
    from ..checks import CheckFacts

    now_us = to_us(now)
    p = {"now": now_us}
    daemons = c.execute(q(CHECK_DAEMONS), p).fetchone()["n"]
    leader = c.execute(q(CHECK_LEADER), p).fetchone()
    late = c.execute(
        late_sql, {"cutoff": now_us - int(late_seconds * 1e6), "now": now_us}
    ).fetchone()
    since = {"since": now_us - int(since_seconds * 1e6)}
    dead = c.execute(q(CHECK_DEAD), since).fetchone()
    failed = c.execute(q(CHECK_FAILED), since).fetchone()
    return CheckFacts(
        int(daemons),
        leader["host"] if leader else None,
        int(late["n"]),
        int(dead["n"]),
        int(failed["n"]),
    )


# ---------------------------------------------------------------------- the stores' faces


class ReadCursor:
    """A cursor over a backend's plain reads (``read(sql, params) -> rows``), for the
    functions above outside a write transaction."""

    def __init__(self, read: Callable[..., list[Any]]) -> None:
        self._read = read
        self._rows: list[Any] = []

    def execute(self, sql: str, params: Any = ()) -> ReadCursor:
        self._rows = self._read(sql, params)
        return self

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Any:
        return iter(self._rows)


class Outbox:
    """The outbox as the faces use it, over one backend's connection (``write()``,
    ``read(sql, params)``): a collaborator each face holds and calls from its own methods,
    so its writes are retried with the face's (:func:`~.dialect.retrying`)."""

    def __init__(self, db: Dialect) -> None:
        self.db = db
        self.q = Sql(db.backend)

    def _reader(self) -> ReadCursor:
        return ReadCursor(self.db.read)

    # ------------------------------------------------------------------ the commands

    def add_channel(self, channel: Channel, now: datetime, *, replace: bool) -> Channel:
        with self.db.write() as c:
            return add_channel(c, self.q, channel, now, replace=replace)

    def get_channel(self, name: str) -> Channel:
        return get_channel(self._reader(), self.q, name)

    def list_channels(self) -> list[Channel]:
        return list_channels(self._reader(), self.q)

    def delete_channel(self, name: str, now: datetime) -> int:
        with self.db.write() as c:
            return delete_channel(c, self.q, name, now)

    def list_notifications(
        self, *, job: str | None, state: NotificationState | None, run_id: int | None, limit: int
    ) -> list[Notification]:
        return list_notifications(
            self._reader(), self.q, job=job, state=state, run_id=run_id, limit=limit
        )

    def counts(self) -> list[tuple[str, str, str, int]]:
        return counts(self._reader(), self.q)

    # ------------------------------------------------------------------ the daemons

    def exchange(
        self,
        daemon_id: str,
        now: datetime,
        outcomes: Sequence[Outcome],
        *,
        limit: int,
        lease_seconds: float,
    ) -> tuple[list[Outgoing], datetime | None]:
        """One transaction: record ``outcomes`` (fenced by the daemon's lease), lease up to
        ``limit`` due notifications, and say when the next one is due."""
        with self.db.write() as c:
            for o in outcomes:
                record_outcome(
                    c,
                    self.q,
                    daemon_id,
                    o.id,
                    now,
                    error=o.error,
                    retry_at=o.retry_at,
                    dropped=o.dropped,
                )
            claimed = claim_due(c, self.q, daemon_id, now, lease_seconds, limit)
            return claimed, next_due(c, self.q, now)

    def next_due(self, now: datetime) -> datetime | None:
        return next_due(self._reader(), self.q, now)

    def note_overdue(self, now: datetime) -> datetime | None:
        if self._reader().execute(self.q(ANY_CHANNEL)).fetchone() is None:
            return None  # no channel: nothing to tell, and no write transaction for it
        with self.db.write() as c:
            return note_overdue(c, self.q, now)


#: an attempt's row with its stored output tail, for a notification's context
ATTEMPT_ROW = "SELECT * FROM attempts WHERE run_id = ? AND attempt = ?"
#: a job's most recent run by window that was not skipped (its ``last_run``), walked down
#: the (job_id, scheduled_for) index
LAST_RUN_ID = (
    "SELECT id FROM runs WHERE job_id = ? AND state <> 'skipped' "
    "ORDER BY scheduled_for DESC LIMIT 1"
)


__all__ = [
    "Outbox",
    "ReadCursor",
    "Sql",
    "Targets",
    "add_channel",
    "check_counts",
    "check_rules",
    "claim_due",
    "counts",
    "delete_channel",
    "enqueue",
    "get_channel",
    "list_channels",
    "list_notifications",
    "missed_note",
    "missed_of",
    "next_due",
    "note_finish",
    "note_overdue",
    "paused_note",
    "record_outcome",
    "rules_of",
    "rules_text",
]
