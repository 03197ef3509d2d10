"""The PostgreSQL backend (README, Many hosts on PostgreSQL): the same operations and
results as the SQLite store, for any number of daemons on any number of hosts.

:func:`open_postgres` gives a :class:`PostgresStore` over one connection: its
:attr:`~PostgresStore.commands` (the shared :class:`~jobctl.store.commands.Commands`),
its :attr:`~PostgresStore.dashboard`, and, for a daemon, :meth:`~PostgresStore.open_daemon`
(the shared :class:`~jobctl.store.daemon.Daemons` over the :class:`~.driver.PgDriver`).
psycopg (the ``jobctl[postgresql]`` extra) is imported when a store is opened, never by
importing :mod:`jobctl.store` for a SQLite file. Layers, one idea a module: :mod:`.url`
(no psycopg) › :mod:`.schema` › :mod:`.sql` › :mod:`.db` (the dialect: open, migrate,
transactions, reconnects, NOTIFY) › :mod:`.driver`; :mod:`.waker` is a daemon's LISTEN
connection.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..commands import Commands
from ..dialect import Closing
from ..protocol import CommandStore, DashboardReads
from .db import EXTRA_MISSING, PgDb, load_driver
from .schema import SCHEMA_VERSION
from .url import redact

if TYPE_CHECKING:
    from ..daemon import Daemons
    from ..values import DaemonIdentity
    from .waker import Waker


def __getattr__(name: str) -> Any:
    """The daemon's modules are imported when a daemon asks for them, not by every command
    (a ``list`` on PostgreSQL already pays for importing psycopg)."""
    if name == "Waker":
        from .waker import Waker

        return Waker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class PostgresStore(Closing):
    """An open jobctl database on PostgreSQL."""

    backend = "postgresql"

    def __init__(self, db: PgDb) -> None:
        self.db = db
        #: the URL without its password
        self.location = db.location
        self.commands: CommandStore = Commands(db)

    @functools.cached_property
    def dashboard(self) -> DashboardReads:
        """The dashboard's reads (``jobctl serve``), made when first asked for."""
        from ..dashboard import Dashboard

        return Dashboard(self.db)

    def open_daemon(self, identity: DaemonIdentity) -> Daemons:
        from ..daemon import Daemons
        from .driver import PgDriver

        return Daemons(PgDriver(self.db), identity)

    @classmethod
    def open(cls, url: str, *, create: bool = True) -> PostgresStore:
        return cls(PgDb.open(url, create=create))

    def check_safe(self) -> None:
        """Nothing to refuse on a server (its roles decide who may write); a connection in
        clear text over a network is warned about when the store is opened."""

    def close(self) -> None:
        self.db.close()


def open_postgres(url: str, *, create: bool = True) -> PostgresStore:
    """Open the jobctl schema of the database at ``url`` (created and migrated with
    ``create``). Raises StoreError (naming the extra when psycopg is missing), NotFound
    without ``create`` when the database has no jobctl schema."""
    return PostgresStore.open(url, create=create)


__all__ = [
    "EXTRA_MISSING",
    "SCHEMA_VERSION",
    "PostgresStore",
    "Waker",
    "load_driver",
    "open_postgres",
    "redact",
]
