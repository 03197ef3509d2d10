"""The PostgreSQL store (SPEC §10): the same operations and results as the SQLite store,
for any number of daemons on any number of hosts.

Importing this package imports psycopg (the ``jobctl[postgresql]`` extra); the store
package imports it only for a PostgreSQL URL. Layers, one idea a module: :mod:`.url`
(no driver) › :mod:`.schema` › :mod:`.connection` (open, migrate, transactions,
reconnects, NOTIFY) › :mod:`.ops` (the CLI's operations) › :mod:`.scheduling` (the
daemon's) ; :mod:`.waker` is the daemon's LISTEN connection.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .connection import EXTRA_MISSING, load_driver
from .scheduling import PgSchedulingOps
from .schema import SCHEMA_VERSION
from .url import is_postgresql_url, redact
from .waker import Waker


class PostgresStore(PgSchedulingOps):
    """A jobctl database on PostgreSQL: every named operation, over one connection."""

    def waker(self) -> Waker:
        """A new LISTEN connection for the daemon's selector."""
        return Waker(self.url)

    def size_bytes(self) -> int:
        """The bytes the ``jobctl`` schema's tables and indexes take."""
        return int(
            self._scalar(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relnamespace = 'jobctl'::regnamespace AND c.relkind = 'r'"
            )
        )

    def schema_version(self) -> int:
        return int(self._scalar("SELECT version FROM schema_version"))


class ServerClock:
    """A clock that reads this host's clock plus the offset to the server's clock that
    the store re-measures at each heartbeat (SPEC §10: leases and due times are judged by
    the database server's clock)."""

    def __init__(self, store: PostgresStore, base: Any) -> None:
        self.store = store
        self.base = base

    def now(self) -> datetime:
        return self.base.now() + timedelta(seconds=self.store.clock_offset_seconds)

    def monotonic(self) -> float:
        return float(self.base.monotonic())


__all__ = [
    "EXTRA_MISSING",
    "SCHEMA_VERSION",
    "PostgresStore",
    "ServerClock",
    "Waker",
    "is_postgresql_url",
    "load_driver",
    "redact",
]
