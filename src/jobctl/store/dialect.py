"""What a backend gives the logic written once above it (:mod:`.commands`, :mod:`.transfer`):
its connection's transactions and reads, its statements, its locks, its wake-ups.

A dialect is the only place where the two backends differ for the commands' side:

- how a write transaction is opened, and what a failure inside it becomes (SQLite's
  ``BEGIN IMMEDIATE`` serialises writers; PostgreSQL runs READ COMMITTED and locks what it
  decides on, and an aborted deadlock is :class:`Retryable`);
- how a cross-row rule is locked: a new job's name (:meth:`Dialect.lock_name`: an advisory
  lock on PostgreSQL, nothing under SQLite's one writer), and the table ``db copy`` fills;
- the parameter style and the few fragments of :mod:`.queries` that are written differently;
- how the daemons are woken when a change commits (:meth:`Dialect.announce`: a datagram to
  each daemon after COMMIT on SQLite, one NOTIFY inside the transaction on PostgreSQL).

Rows are read by column name on both (``row["id"]``); a cursor's ``execute`` returns
something with ``fetchone``, ``fetchall`` and ``rowcount``.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, Self, TypeVar

from ..errors import StoreError
from .queries import Queries

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def pyformat(sql: str) -> str:
    """SQLite's parameter style (``?``, ``:name``), in which every shared statement is
    written, as psycopg's (``%s``, ``%(name)s``); a literal ``%`` is doubled. Fields in
    braces stay for ``str.format``. The one translator of parameter style."""
    sql = sql.replace("%", "%%").replace("?", "%s")
    return _NAMED.sub(r"%(\1)s", sql)


@contextlib.contextmanager
def closed_on_failure(conn: Any, errors: type[BaseException], location: str) -> Iterator[None]:
    """While a new connection is set up (its schema read, migrated): on any failure it is
    closed; the driver's ``errors`` become one StoreError naming ``location``."""
    try:
        yield
    except errors as e:
        conn.close()
        raise StoreError(f"cannot use database {location}: {' '.join(str(e).split())}") from None
    except BaseException:
        conn.close()
        raise


class Retryable(StoreError):
    """A transaction the server aborted to break a deadlock (nothing of it was kept): the
    whole operation may be run again from the start."""


class Cursor(Protocol):
    def execute(self, sql: str, params: Any = ...) -> Any: ...


class Dialect(Protocol):
    """One open connection of a backend, as the shared logic uses it."""

    backend: str
    #: where the database is, fit to show (a URL without its password)
    location: str
    #: the statements of :mod:`.queries` in this dialect's parameter style
    q: Queries
    #: inside :meth:`batch`-like grouping: an outer call retries, never an inner one
    in_batch: bool

    def write(self) -> AbstractContextManager[Any]:
        """One write transaction (a cursor): committed on success, rolled back whole on
        any error, which becomes a StoreError (:class:`Retryable` when it may be rerun)."""
        ...

    def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        """The rows of one read (outside any transaction). StoreError on failure."""
        ...

    def announce(self, message: str) -> None:
        """Wake every daemon with ``message`` (``job:ID``, ``run:ID``, ``run``, ``all``)
        once the current write transaction commits; nothing is sent if it rolls back."""
        ...

    def marks(self, n: int) -> str:
        """``n`` positional parameter marks, comma-separated."""
        ...

    def named(self, name: str) -> str:
        """The mark of the named parameter ``name``."""
        ...

    def lock_name(self, c: Any, name: str) -> None:
        """Inside a write: hold the name of a job to be created until the commit, so two
        adds of one new name at once are decided one after the other."""
        ...

    def lock_for_copy(self, c: Any) -> None:
        """Inside a write: keep other writers from adding a job until the commit."""
        ...

    def copied_run(self, cols: dict[str, Any], overlap: str) -> None:
        """Adjust a copied run's row (``cols``) of a job with that overlap before it is
        inserted, for the rules this backend enforces with columns of its own."""
        ...

    def copied_locks(self, c: Any, run_id: int, state: str, locks: Sequence[str]) -> None:
        """After a copied run is inserted: what this backend keeps besides ``run_locks``."""
        ...

    def new_ids(self, c: Any, table: str, n: int) -> list[int]:
        """Inside a write: ``n`` ids never given to a row of ``table`` (``runs``, ``jobs``),
        for rows inserted with them (:attr:`Queries.insert_row_with_id`)."""
        ...

    def size_bytes(self) -> int:
        """The space the database takes (file and log, or the schema's tables)."""
        ...

    def schema_version(self) -> int: ...


T = TypeVar("T")

#: how often one operation is tried when the server aborted it to break a deadlock
MAX_TRIES = 5


def retrying(cls: type[T]) -> type[T]:
    """Run each public method again when its transaction was aborted to break a deadlock
    (:class:`~.dialect.Retryable`: nothing of it was kept). Only an outermost call retries:
    one inside a batch lets the batch's own call start over."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not callable(fn):
            continue

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                for attempt in range(1, MAX_TRIES + 1):
                    try:
                        return fn(self, *args, **kwargs)
                    except Retryable:
                        if self.db.in_batch or attempt == MAX_TRIES:
                            raise
                        time.sleep(0.005 * attempt)
                raise AssertionError("unreachable")

            return method

        setattr(cls, name, wrap(fn))
    return cls


class Closing(abc.ABC):
    """What holds a backend's connection is closed at the end of a ``with`` block; the
    class says how in ``close``."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
