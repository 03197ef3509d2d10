"""The SQLite backend: one file, WAL, ``BEGIN IMMEDIATE`` for every write.

:class:`SqliteStore` is an open file with the faces written once above the backends, built
by composition over one :class:`~.db.Db` (the SQLite dialect): :attr:`commands`
(:class:`~jobctl.store.commands.Commands`), :attr:`dashboard` and, for a daemon,
:meth:`open_daemon` (:class:`~jobctl.store.daemon.Daemons` over the
:class:`~.driver.SqliteDriver`). The statements live in :mod:`.sql`,
:mod:`jobctl.store.queries` and :mod:`jobctl.store.daemon_sql`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from ..commands import Commands
from .db import Db
from .schema import SCHEMA_VERSION, check_ownership, migrations, schema_sql, split_statements

if TYPE_CHECKING:
    from ..daemon import Daemons
    from ..dashboard import Dashboard
    from ..values import DaemonIdentity


class SqliteStore:
    """An open jobctl SQLite file."""

    backend = "sqlite"

    def __init__(self, db: Db) -> None:
        self.db = db
        self.location = str(db.path)
        self.commands = Commands(db)

    @functools.cached_property
    def dashboard(self) -> Dashboard:
        """The dashboard's reads (``jobctl serve``), made when first asked for."""
        from ..dashboard import Dashboard

        return Dashboard(self.db)

    def open_daemon(self, identity: DaemonIdentity) -> Daemons:
        # off the commands' path, as on PostgreSQL
        from ..daemon import Daemons
        from .driver import SqliteDriver

        return Daemons(SqliteDriver(self.db), identity)

    @classmethod
    def open(cls, path: Path | str, *, create: bool = True) -> SqliteStore:
        return cls(Db.open(path, create=create))

    @property
    def path(self) -> Path:
        return self.db.path

    def check_safe(self) -> None:
        """Refuse to run jobs from a file or folder others can write (SecurityError)."""
        check_ownership(self.db.path)

    def close(self) -> None:
        self.db.close()


__all__ = [
    "SCHEMA_VERSION",
    "Db",
    "SqliteStore",
    "check_ownership",
    "migrations",
    "schema_sql",
    "split_statements",
]
