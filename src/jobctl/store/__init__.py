"""The store: the only part of jobctl that speaks SQL, behind two protocols.

:mod:`.protocol` states what the commands (:class:`~.protocol.CommandStore`) and the
daemons (:class:`~.protocol.DaemonStore`) may ask, with the ordering, lease and fencing
rules every backend keeps. :func:`open_store` picks the backend from the location: a
``postgresql://`` or ``postgres://`` URL, or else a SQLite file path.
"""

from __future__ import annotations

from pathlib import Path

from .protocol import (
    Claimed,
    CommandStore,
    DaemonStore,
    DbInfo,
    Finished,
    Fired,
    Renewal,
    Status,
    Store,
)

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def open_store(location: str | Path, *, create: bool = True) -> Store:
    """Open the database at ``location`` (creating and migrating it with ``create``).

    Raises StoreError when it cannot be used, NotFound when it does not exist and
    ``create`` is false.
    """
    if is_postgres_url(location):
        from .postgresql import open_postgres  # type: ignore[import-not-found,unused-ignore]

        store: Store = open_postgres(str(location), create=create)
        return store
    from .sqlite import SqliteStore

    return SqliteStore.open(location, create=create)


__all__ = [
    "Claimed",
    "CommandStore",
    "DaemonStore",
    "DbInfo",
    "Finished",
    "Fired",
    "Renewal",
    "Status",
    "Store",
    "is_postgres_url",
    "open_store",
]
