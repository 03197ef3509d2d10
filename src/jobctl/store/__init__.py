"""The store: the only part of jobctl that speaks SQL, behind two protocols.

:mod:`.protocol` states what the commands (:class:`~.protocol.CommandStore`) and the
daemons (:class:`~.protocol.DaemonStore`) may ask, with the ordering, lease and fencing
rules every backend keeps; :mod:`.values` holds what they take and return (imported
from there, by those that use them: a command's start loads none of them). The commands'
logic is written once (:mod:`.commands`, :mod:`.transfer`) over a dialect
(:mod:`.dialect`); :mod:`.sqlite` and :mod:`.postgresql` hold what truly differs.
:func:`open_store` picks the backend from the location: a PostgreSQL URL
(:func:`jobctl.paths.is_db_url`, the program's one rule), or else a SQLite file path.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..paths import db_url, is_db_url
from .protocol import CommandStore, DaemonStore, Store

if TYPE_CHECKING:
    from .values import CopiedJob


def open_store(location: str | Path, *, create: bool = True) -> Store:
    """Open the database at ``location`` (creating and migrating it with ``create``).

    Raises StoreError when it cannot be used, NotFound when it does not exist and
    ``create`` is false.
    """
    if is_db_url(location):
        from .postgresql import open_postgres

        store: Store = open_postgres(db_url(str(location)), create=create)
        return store
    from .sqlite import SqliteStore

    return SqliteStore.open(location, create=create)


def shown_location(location: str | Path) -> str:
    """The location as it may be shown or handed on: a URL loses its password."""
    if is_db_url(location):
        from .postgresql.url import redact

        return redact(db_url(str(location)))
    return str(location)


def read_copy(commands: CommandStore, *, history: bool) -> list[CopiedJob]:
    """Every job of a database (with ``history`` its runs and attempts), for ``db copy``."""
    from .transfer import read_all

    return read_all(commands, history=history)


__all__ = [
    "CommandStore",
    "DaemonStore",
    "Store",
    "open_store",
    "read_copy",
    "shown_location",
]
