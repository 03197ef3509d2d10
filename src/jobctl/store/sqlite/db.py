"""A SQLite database file: opening it (permissions, WAL, migrations), its transactions, and
its wake-ups: the :class:`~jobctl.store.dialect.Dialect` of the SQLite backend."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ...errors import NotFound, StoreError
from ..dialect import Closing, closed_on_failure
from .schema import BUSY_TIMEOUT_MS, SCHEMA_VERSION, migrations, split_statements
from .sql import QUERIES, WAKE_ADDRESSES

#: the write-ahead log size (pages) at which a daemon's own commit checkpoints it; the
#: daemon checkpoints when it goes idle (:meth:`Db.checkpoint`), so a burst of commits
#: does not stop for one (SQLite's default is 1,000 pages, each checkpoint an fsync)
DAEMON_AUTOCHECKPOINT_PAGES = 20_000
#: what the write-ahead log file is cut back to once a checkpoint emptied it
DAEMON_WAL_LIMIT_BYTES = 4 * 1024 * 1024


#: the page cache of a connection that fills a database by ``db copy`` (KiB)
COPY_CACHE_KIB = 1 << 20


class Db(Closing):
    """One connection to a jobctl SQLite file. Open with :meth:`open`."""

    backend = "sqlite"
    q = QUERIES
    #: one writer at a time: no transaction is ever aborted to be run again
    in_batch = False

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self.location = str(path)
        #: commits since the last complete :meth:`checkpoint` (0: none)
        self.wrote = 0
        #: wake-ups to send once the current transaction commits
        self._notes: list[str] = []
        #: the wake addresses of the other daemons, kept by a daemon's own store (renewed
        #: at each heartbeat); None: read them from the file after each commit
        self.peers: list[str] | None = None

    @classmethod
    def open(cls, path: Path | str, *, create: bool = True) -> Db:
        """Open (and with ``create``, create and migrate) the database at ``path``.

        The folder is made 0700 and the file 0600 (including ``-wal``/``-shm``) whatever
        the umask. A file from a newer jobctl is refused untouched (StoreError). A file
        that is not a SQLite database is a StoreError. Without ``create`` a missing file
        is NotFound and nothing is made.
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
                    # another process may make it between the look and the mkdir
                    path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
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
            db = cls(conn, path)
            with closed_on_failure(conn, sqlite3.DatabaseError, str(path)):
                db._setup_waiting()
        finally:
            os.umask(old_umask)
        if not existed:
            with contextlib.suppress(OSError):
                os.chmod(path, 0o600)
        return db

    def _setup_waiting(self) -> None:
        """:meth:`_setup`, tried again while another process holds the file busy. The
        busy timeout covers a transaction's statements, but SQLite returns "database is
        locked" at once to a connection whose first statements meet another one creating
        the file or switching it to WAL (six processes racing on a new file); every step
        of the set-up is idempotent and the migration is one transaction, so it is run
        again until the busy timeout has passed."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.005
        while True:
            try:
                self._setup()
                return
            except sqlite3.OperationalError as e:
                busy = getattr(e, "sqlite_errorcode", None) in (5, 6)  # SQLITE_BUSY, _LOCKED
                if not busy or time.monotonic() + pause > deadline:
                    raise
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

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
        if version < SCHEMA_VERSION:
            self._migrate()
        c.execute("PRAGMA foreign_keys = ON")

    def _migrate(self) -> None:
        # foreign keys stay off while tables are rebuilt (a DROP would cascade), and are
        # checked before the commit: a migration that breaks one is rolled back whole
        self.conn.execute("PRAGMA foreign_keys = OFF")
        with self.write() as c:
            version = c.execute("PRAGMA user_version").fetchone()[0]
            for number, sql in migrations():
                if number <= version:
                    continue
                for stmt in split_statements(sql):
                    c.execute(stmt)
                c.execute(f"PRAGMA user_version = {number}")
            broken = c.execute("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise StoreError(f"migration left {len(broken)} broken references; not applied")

    def close(self) -> None:
        self.conn.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error.

        Immediate, because a deferred read-then-write gets "database is locked" at once
        whatever the busy timeout; any SQLite error inside becomes a StoreError with
        nothing kept.
        """
        c = self.conn
        try:
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise StoreError(f"database error: {e}") from None
        try:
            yield c
        except sqlite3.Error as e:
            # SQLITE_FULL, SQLITE_IOERR, a busy timeout... mid-transaction: nothing is kept
            self._rollback()
            raise StoreError(f"database error: {e}") from None
        except BaseException:
            self._rollback()
            raise
        else:
            try:
                c.execute("COMMIT")
            except sqlite3.Error as e:
                self._rollback()
                raise StoreError(f"database error: {e}") from None
            self.wrote += 1
            if self._notes:
                self._wake()
        finally:
            self._notes.clear()

    # ---------------------------------------------------------------- the dialect

    def announce(self, message: str) -> None:
        """Wake the daemons with ``message`` once the current transaction commits."""
        self._notes.append(message)

    def _wake(self) -> None:
        """A datagram per message to each daemon (hints only: the table is the truth; a
        lost one delays a daemon until its next renewal re-reads what changed)."""
        addresses = self.peers
        if addresses is None:
            try:
                addresses = [r[0] for r in self.conn.execute(WAKE_ADDRESSES).fetchall()]
            except sqlite3.DatabaseError:
                return
        if not addresses:
            return  # no other daemon to tell (a daemon alone: every commit of its turns)
        from .wake import poke  # here: a command that only reads never loads sockets

        for message in dict.fromkeys(self._notes):
            poke(addresses, message)

    @staticmethod
    def marks(n: int) -> str:
        return ", ".join("?" * n)

    @staticmethod
    def named(name: str) -> str:
        return f":{name}"

    def lock_name(self, c: Any, name: str) -> None:
        """Nothing to lock: ``BEGIN IMMEDIATE`` already made this the only writer."""

    def lock_for_copy(self, c: Any) -> None:
        """Nothing to lock: ``BEGIN IMMEDIATE`` already made this the only writer. A copy
        writes a whole history in one transaction, across every index of ``runs``: a page
        cache of up to 1 GiB for this connection keeps those pages off the disk meanwhile
        (the memory is taken only as pages are touched)."""
        c.execute(f"PRAGMA cache_size = -{COPY_CACHE_KIB}")

    def copied_run(self, cols: dict[str, Any], overlap: str) -> None:
        """A copied run needs nothing more here (the claim reads the rules off the rows)."""

    def copied_locks(self, c: Any, run_id: int, state: str, locks: Sequence[str]) -> None:
        """Nothing more than ``run_locks``."""

    def new_ids(self, c: Any, table: str, n: int) -> list[int]:
        """The next ``n`` after the table's AUTOINCREMENT counter (the only writer holds
        ``BEGIN IMMEDIATE``; inserting them moves the counter past them)."""
        row = c.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
        first = (row[0] if row else 0) + 1
        return list(range(first, first + n))

    def size_bytes(self) -> int:
        size = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                size += os.stat(str(self.path) + suffix).st_size
            except OSError:
                pass
        return size

    def schema_version(self) -> int:
        return SCHEMA_VERSION

    def defer_checkpoints(self) -> None:
        """Leave the checkpoints of the write-ahead log to :meth:`checkpoint` (a daemon
        calls it when idle), with a large log as the safety net under sustained load."""
        try:
            self.conn.execute(f"PRAGMA wal_autocheckpoint = {DAEMON_AUTOCHECKPOINT_PAGES}")
            self.conn.execute(f"PRAGMA journal_size_limit = {DAEMON_WAL_LIMIT_BYTES}").fetchall()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"database error: {e}") from None

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the file if anything was committed since the last
        complete copy (PASSIVE: never waits for readers or writers). The log file is cut
        back to DAEMON_WAL_LIMIT_BYTES when the next write starts it over."""
        if not self.wrote:
            return
        try:
            busy, log, done = self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"database error: {e}") from None
        # a reader or writer in the way: the frames left are copied next time
        if not busy and done >= log:
            self.wrote = 0

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error as e:  # the connection is unusable: say so, do not hide it
                raise StoreError(f"database error: rollback failed: {e}") from None

    def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"database error: {e}") from None

    def schema_dump(self) -> list[tuple[str, str, str]]:
        """(type, name, sql) of every schema object, for the migration test."""
        rows = self.read(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        )
        return [(r[0], r[1], r[2]) for r in rows]
