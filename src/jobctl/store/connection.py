"""Opening a database (permissions, WAL, migrations) and its transactions."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Self

from ..errors import NotFound, StoreError
from .schema import BUSY_TIMEOUT_MS, SCHEMA_VERSION, _migrations, split_statements


class Connection:
    """A jobctl database connection. Open with :meth:`open`; close with :meth:`close`."""

    """A jobctl database. Open with :meth:`open`; close with :meth:`close`."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self._in_batch = False

    # ---------------------------------------------------------------- connection

    @classmethod
    def open(cls, path: Path | str, *, create: bool = True) -> Self:
        """Open (and with ``create``, create and migrate) the database at ``path``.

        The folder is made 0700 and the file 0600 (including ``-wal``/``-shm``) whatever
        the umask. A file from a newer jobctl is refused untouched (StoreError). A file
        that is not a SQLite database is a StoreError.
        """
        path = Path(path)
        try:
            existed = path.exists()
            is_dir = path.is_dir()
        except OSError as e:
            raise StoreError(f"cannot open database {path}: {e.strerror or e}") from None
        if not existed and not create:
            raise NotFound(f"no database at {path}")
        if is_dir:
            raise StoreError(f"{path} is a directory, not a database file")
        old_umask = os.umask(0o077)
        try:
            if not path.parent.exists():
                try:
                    path.parent.mkdir(parents=True, mode=0o700)
                except OSError as e:
                    raise StoreError(f"cannot create {path.parent}: {e.strerror}") from None
            try:
                conn = sqlite3.connect(
                    str(path),
                    isolation_level=None,
                    timeout=BUSY_TIMEOUT_MS / 1000,
                    check_same_thread=False,
                )
            except sqlite3.Error as e:
                raise StoreError(f"cannot open database {path}: {e}") from None
            conn.row_factory = sqlite3.Row
            store = cls(conn, path)
            try:
                store._setup()
            except sqlite3.DatabaseError as e:
                conn.close()
                raise StoreError(f"cannot use database {path}: {e}") from None
            except BaseException:
                conn.close()
                raise
        finally:
            os.umask(old_umask)
        if not existed:
            with contextlib.suppress(OSError):
                os.chmod(path, 0o600)
        return store

    def _setup(self) -> None:
        c = self.conn
        c.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"database {self.path} has schema version {version}, newer than this jobctl "
                f"understands ({SCHEMA_VERSION}); upgrade jobctl (the file was not modified)"
            )
        mode = c.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() != "wal":
            c.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL mode: a power loss may roll back the last commits, never corrupts;
        # a rolled-back window or finish is redone (at-least-once), see README "Guarantees".
        c.execute("PRAGMA synchronous = NORMAL")
        c.execute("PRAGMA foreign_keys = ON")
        if version < SCHEMA_VERSION:
            self._migrate()

    def _migrate(self) -> None:
        with self.write() as c:
            version = c.execute("PRAGMA user_version").fetchone()[0]
            for number, sql in _migrations():
                if number <= version:
                    continue
                for stmt in split_statements(sql):
                    c.execute(stmt)
                c.execute(f"PRAGMA user_version = {number}")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction for several named writes: each ``write()``
        inside joins it, and all commit together at the end (or all roll back on error).
        The daemon records a burst of due windows this way: one commit, not one per job."""
        if self._in_batch:
            yield
            return
        with self.write():
            self._in_batch = True
            try:
                yield
            finally:
                self._in_batch = False

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error.
        Inside :meth:`batch` it joins the batch's transaction instead."""
        c = self.conn
        if self._in_batch:
            yield c
            return
        try:
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise StoreError(f"database error: {e}") from None
        try:
            yield c
        except sqlite3.Error as e:
            # SQLITE_FULL, SQLITE_IOERR, a busy timeout... mid-transaction: nothing is kept
            with contextlib.suppress(sqlite3.Error):
                c.execute("ROLLBACK")
            raise StoreError(f"database error: {e}") from None
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                c.execute("ROLLBACK")
            raise
        else:
            try:
                c.execute("COMMIT")
            except sqlite3.Error as e:
                with contextlib.suppress(sqlite3.Error):
                    c.execute("ROLLBACK")
                raise StoreError(f"database error: {e}") from None

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"database error: {e}") from None

    def schema_dump(self) -> list[tuple[str, str, str]]:
        """(type, name, sql) of every schema object, for the migration test."""
        rows = self._read(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        )
        return [(r[0], r[1], r[2]) for r in rows]
