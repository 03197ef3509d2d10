"""Named calendars of dates (``calendar add|rm|list``) and the dates a job excludes.

A job names its calendars (``except_calendars``) and keeps the union of their dates with
it (``except_dates``): a calendar's change rewrites that copy on each job that names it,
in the same transaction, and wakes the scheduler for them, so a fire reads a job's
exclusions with the job and never a calendar. The statements are written once for both
backends (:class:`~jobctl.store.outbox.Sql` gives each its parameter marks).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import date
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, NotFound, UsageError

if TYPE_CHECKING:  # for the annotations: the outbox's module is not a listing's to load
    from .outbox import Sql

Cursor = Any

CALENDAR_BY_NAME = "SELECT name, dates FROM calendars WHERE name = ?"
CALENDARS_ALL = "SELECT name, dates FROM calendars ORDER BY name"
INSERT_CALENDAR = "INSERT INTO calendars (name, dates) VALUES (?, ?)"
UPDATE_CALENDAR = "UPDATE calendars SET dates = ? WHERE name = ?"
DELETE_CALENDAR = "DELETE FROM calendars WHERE name = ?"
#: the jobs that name any calendar (few: a LIKE would not spare the scan of jobs)
JOBS_WITH_CALENDARS = "SELECT id, name, except_calendars FROM jobs WHERE except_calendars <> '[]'"
SET_EXCEPT_DATES = "UPDATE jobs SET except_dates = ? WHERE id = ?"


def dates_text(days: Iterable[date]) -> str:
    """Dates as kept in ``calendars.dates`` and ``jobs.except_dates``: a sorted JSON array
    of ISO dates."""
    return json.dumps(sorted({d.isoformat() for d in days}))


def dates_of(text: str) -> frozenset[date]:
    return frozenset() if text == "[]" else frozenset(map(date.fromisoformat, json.loads(text)))


def job_dates(c: Cursor, q: Sql, names: Sequence[str], job: str) -> str:
    """Inside a job's write: the union of the dates of the calendars it names, as kept in
    ``jobs.except_dates``. A calendar that does not exist is invalid input (UsageError,
    exit 2), as a ``--notify`` channel that does not exist is."""
    days: set[date] = set()
    for name in names:
        row = c.execute(q(CALENDAR_BY_NAME), (name,)).fetchone()
        if row is None:
            raise UsageError(
                f"invalid --except-calendar of job {job}: no calendar named {name} "
                "(create it with jobctl calendar add)"
            )
        days |= dates_of(row["dates"])
    return dates_text(days)


def _users(c: Cursor, q: Sql, name: str) -> list[tuple[int, str, list[str]]]:
    out = []
    for r in c.execute(q(JOBS_WITH_CALENDARS)).fetchall():
        names = json.loads(r["except_calendars"])
        if name in names:
            out.append((int(r["id"]), str(r["name"]), names))
    return out


def _refresh_users(c: Cursor, q: Sql, name: str) -> list[int]:
    """Rewrite ``except_dates`` of every job that names calendar ``name``; their ids."""
    ids = []
    for job_id, job_name, names in _users(c, q, name):
        c.execute(q(SET_EXCEPT_DATES), (job_dates(c, q, names, job_name), job_id))
        ids.append(job_id)
    return ids


def add_dates(c: Cursor, q: Sql, name: str, days: Sequence[date]) -> list[int]:
    """Create calendar ``name`` with ``days``, or add them to it. Returns the ids of the
    jobs that name it (their exclusions changed)."""
    row = c.execute(q(CALENDAR_BY_NAME), (name,)).fetchone()
    if row is None:
        c.execute(q(INSERT_CALENDAR), (name, dates_text(days)))
        return _refresh_users(c, q, name)
    c.execute(q(UPDATE_CALENDAR), (dates_text(dates_of(row["dates"]) | set(days)), name))
    return _refresh_users(c, q, name)


def set_dates(c: Cursor, q: Sql, name: str, days: Iterable[date]) -> list[int]:
    """Make calendar ``name`` hold exactly ``days`` (created when missing), as ``apply``
    does. Returns the ids of the jobs that name it."""
    row = c.execute(q(CALENDAR_BY_NAME), (name,)).fetchone()
    text = dates_text(days)
    if row is None:
        c.execute(q(INSERT_CALENDAR), (name, text))
    elif row["dates"] != text:
        c.execute(q(UPDATE_CALENDAR), (text, name))
    else:
        return []
    return _refresh_users(c, q, name)


def remove(c: Cursor, q: Sql, name: str, days: Sequence[date]) -> list[int]:
    """Remove ``days`` from calendar ``name`` or, with none, the calendar itself (refused,
    Conflict, naming the jobs, while one names it). NotFound for an unknown calendar.
    Returns the ids of the jobs whose exclusions changed."""
    row = c.execute(q(CALENDAR_BY_NAME), (name,)).fetchone()
    if row is None:
        raise NotFound(f"no calendar named {name!r}")
    if days:
        kept = dates_of(row["dates"]) - set(days)
        c.execute(q(UPDATE_CALENDAR), (dates_text(kept), name))
        return _refresh_users(c, q, name)
    users = _users(c, q, name)
    if users:
        raise Conflict(
            f"calendar {name!r} is used by {', '.join(sorted(u[1] for u in users))}; "
            "remove it from them first (edit --no-except or --except-calendar)"
        )
    c.execute(q(DELETE_CALENDAR), (name,))
    return []


def listing(
    read: Callable[[str, Sequence[Any]], list[Any]], q: Sql, name: str | None
) -> list[tuple[str, list[date], list[str]]]:
    """(name, dates, names of the jobs that use it) of every calendar, by name, or of the
    one named (NotFound when it does not exist), through ``read`` (a read-only query)."""
    if name is None:
        rows = read(q(CALENDARS_ALL), ())
    else:
        rows = read(q(CALENDAR_BY_NAME), (name,))
        if not rows:
            raise NotFound(f"no calendar named {name!r}")
    users: dict[str, list[str]] = {}
    for r in read(q(JOBS_WITH_CALENDARS), ()):
        for cal in json.loads(r["except_calendars"]):
            users.setdefault(cal, []).append(str(r["name"]))
    return [
        (str(r["name"]), sorted(dates_of(r["dates"])), sorted(users.get(r["name"], [])))
        for r in rows
    ]
