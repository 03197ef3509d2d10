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

from .connection import Connection
from .rows import Claimed, Status, WindowRow
from .scheduling import SchedulingOps
from .schema import (
    BUSY_TIMEOUT_MS,
    SCHEMA_VERSION,
    _migrations,
    check_ownership,
    schema_sql,
    split_statements,
)


class Store(SchedulingOps):
    """A jobctl database: every named operation, over one SQLite connection.

    Layers (one idea a module): :mod:`.connection` (open, migrate, transactions) ›
    :mod:`.jobs` › :mod:`.runs` (the CLI's operations) › :mod:`.scheduling` (the daemon's).
    """


__all__ = [
    "BUSY_TIMEOUT_MS",
    "SCHEMA_VERSION",
    "Claimed",
    "Connection",
    "Status",
    "Store",
    "WindowRow",
    "_migrations",
    "check_ownership",
    "schema_sql",
    "split_statements",
]
