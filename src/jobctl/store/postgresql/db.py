"""Opening a PostgreSQL database, its transactions, reconnects and notifications.

psycopg is imported here only, and this module only when a location is a PostgreSQL URL,
so SQLite users never load the driver.

A lost connection (server restart, connection terminated, network gone) is a StoreError
for the call that met it; the next call reconnects, with a backoff that doubles up to
:data:`MAX_BACKOFF_SECONDS` between tries, so a daemon that retries each turn never
hammers a server that is down and never exits for it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, Self

from ...errors import NotFound, StoreError
from ..dialect import Closing, Retryable, closed_on_failure
from .schema import SCHEMA_VERSION, current_version, migrate, refuse_newer
from .sql import QUERIES
from .url import insecure_reason, redact

EXTRA_MISSING = "PostgreSQL support is not installed: pip install 'jobctl[postgresql]' (psycopg 3)"
MAX_BACKOFF_SECONDS = 5.0
FIRST_BACKOFF_SECONDS = 0.1
CONNECT_TIMEOUT_SECONDS = 10
#: the channel every change is announced on (payloads as in jobctl.wake: job:ID, run:ID, all)
CHANNEL = "jobctl"
#: every message of a transaction in one statement (one round trip, however many)
NOTIFY_ALL = "SELECT count(pg_notify(%s, m)) FROM unnest(%s::text[]) AS m"


#: a deadlock or a serialization failure: the server rolled the transaction back whole,
#: so running it again from the start is safe
RETRYABLE_SQLSTATES = ("40P01", "40001")


def load_driver() -> Any:
    """The psycopg module, or a StoreError naming the extra."""
    try:
        import psycopg
    except ImportError:
        raise StoreError(EXTRA_MISSING) from None
    return psycopg


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def connect(url: str) -> Any:
    """A new autocommit connection with dict rows; StoreError when it cannot be had."""
    psycopg = load_driver()
    from psycopg.rows import dict_row

    try:
        conn = psycopg.connect(
            url,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name="jobctl",
        )
        conn.execute("SET search_path TO jobctl, pg_catalog")
        return conn
    except psycopg.Error as e:
        raise StoreError(f"cannot connect to {redact(url)}: {_one_line(e)}") from None


class PgDb(Closing):
    """One connection to a jobctl database on PostgreSQL, the
    :class:`~jobctl.store.dialect.Dialect` of this backend. Open with :meth:`open`."""

    backend = "postgresql"
    q = QUERIES

    def __init__(self, url: str, conn: Any) -> None:
        self.url = url
        #: the URL without its password: what logs, status, db info and children see
        self.location = redact(url)
        self.conn = conn
        self.psycopg = load_driver()
        self.in_batch = False
        self._batch_cur: Any = None
        #: the pipeline of the pipelined transaction under way (see :meth:`write`)
        self._pipeline: Any = None
        self._notes: list[str] = []
        self._backoff = FIRST_BACKOFF_SECONDS
        self._retry_at = 0.0
        #: how many times the connection was made again (a LISTEN must be renewed after)
        self.reconnects = 0
        #: server clock minus this host's clock, re-measured at each heartbeat (seconds)
        self.clock_offset_seconds = 0.0
        #: the server process of the connection: what a NOTIFY it sent carries as its pid
        self.backend_pid: int = conn.info.backend_pid

    @classmethod
    def open(cls, url: str, *, create: bool = True) -> Self:
        """Open (with ``create``, create and migrate) the jobctl schema of the database at
        ``url``. A schema from a newer jobctl is refused untouched (StoreError); without
        ``create`` a database with no jobctl schema is NotFound."""
        reason = insecure_reason(url)
        if reason:
            print(f"warning: {reason}", file=sys.stderr)
        conn = connect(url)
        psycopg = load_driver()
        location = redact(url)
        with closed_on_failure(conn, psycopg.Error, location):
            version = current_version(conn)
            refuse_newer(version, location)
            if version is None and not create:
                raise NotFound(f"no database at {location}")
            if version is None or version < SCHEMA_VERSION:
                migrate(conn, location)
        return cls(url, conn)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

    # ---------------------------------------------------------------- connection upkeep

    def _error(self, e: Exception) -> StoreError:
        if getattr(e, "sqlstate", None) in RETRYABLE_SQLSTATES:
            return Retryable(f"database error: {_one_line(e)}")
        if isinstance(e, self.psycopg.OperationalError) or self.conn.broken:
            return StoreError(f"database {self.location} unreachable: {_one_line(e)}")
        return StoreError(f"database error: {_one_line(e)}")

    def _live(self) -> Any:
        """The connection, made again if it was lost (at most once per backoff period)."""
        if not (self.conn.closed or self.conn.broken):
            return self.conn
        now = time.monotonic()
        if now < self._retry_at:
            wait = self._retry_at - now
            raise StoreError(
                f"database {self.location} unreachable (next connection in {wait:.1f}s)"
            )
        try:
            conn = connect(self.url)
        except StoreError:
            self._retry_at = now + self._backoff
            self._backoff = min(self._backoff * 2, MAX_BACKOFF_SECONDS)
            raise
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn = conn
        self.backend_pid = conn.info.backend_pid
        self._backoff = FIRST_BACKOFF_SECONDS
        self._retry_at = 0.0
        self.reconnects += 1
        return conn

    # ---------------------------------------------------------------- transactions

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction for several named writes: each ``write()`` inside joins it."""
        if self.in_batch:
            yield
            return
        with self.write(pipelined=True):
            self.in_batch = True
            try:
                yield
            finally:
                self.in_batch = False

    @contextlib.contextmanager
    def write(self, *, pipelined: bool = False) -> Iterator[Any]:
        """A transaction (READ COMMITTED): committed on success, rolled back on error.
        Notifications queued with :meth:`announce` are sent inside it, so they are
        delivered exactly when the change is visible: all of them in one statement, each
        message once. Inside :meth:`batch` it joins.

        ``pipelined`` (a daemon's turn): the whole transaction in pipeline mode, so that
        its ``BEGIN`` travels with the first statement and the ``NOTIFY`` with the
        ``COMMIT``: the server is waited for only where a result is read."""
        if self.in_batch:
            yield self._batch_cur
            return
        conn = self._live()
        psycopg = self.psycopg
        try:
            if pipelined:
                with self._pipelined_transaction(conn) as cur:
                    yield cur
            else:
                with conn.transaction():
                    cur = conn.cursor()
                    self._batch_cur = cur
                    yield cur
                    if self._notes:
                        cur.execute(NOTIFY_ALL, (CHANNEL, list(dict.fromkeys(self._notes))))
        except psycopg.Error as e:
            raise self._error(e) from None
        finally:
            self._notes.clear()
            self._batch_cur = None
            self._pipeline = None

    @contextlib.contextmanager
    def _pipelined_transaction(self, conn: Any) -> Iterator[Any]:
        """A transaction in pipeline mode, begun and ended by statements of its own: the
        ``BEGIN`` goes with the first statement, the ``NOTIFY`` and ``COMMIT`` with the
        pipeline's ``Sync`` as it ends. (psycopg's ``transaction()`` in a pipeline syncs
        as it enters and as it leaves, a round trip each, for what needs none.) On an
        error it is rolled back once the pipeline has ended."""
        try:
            with conn.pipeline() as pipeline:
                cur = conn.cursor()
                self._batch_cur, self._pipeline = cur, pipeline
                cur.execute("BEGIN")
                yield cur
                if self._notes:
                    cur.execute(NOTIFY_ALL, (CHANNEL, list(dict.fromkeys(self._notes))))
                cur.execute("COMMIT")
        except BaseException:
            idle = self.psycopg.pq.TransactionStatus.IDLE
            if not conn.broken and conn.pgconn.transaction_status != idle:
                with contextlib.suppress(self.psycopg.Error):
                    conn.execute("ROLLBACK")
            raise

    def sync_past_error(self) -> None:
        """In a pipelined transaction (:meth:`write`), after a statement failed: what was
        sent after it is discarded until a ``Sync``; sent here, so that the transaction
        can go on (``ROLLBACK TO SAVEPOINT``) or be rolled back."""
        if self._pipeline is not None:
            with contextlib.suppress(self.psycopg.Error):
                self._pipeline.sync()

    def announce(self, message: str) -> None:
        """Announce ``message`` to every daemon when the current transaction commits."""
        self._notes.append(message)

    def read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        conn = self._live()
        try:
            return list(conn.execute(sql, params).fetchall())
        except self.psycopg.Error as e:
            raise self._error(e) from None

    def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        """The first column of the first row (None when there is no row)."""
        rows = self.read(sql, params)
        if not rows:
            return None
        return next(iter(rows[0].values()))

    # ---------------------------------------------------------------- the dialect

    @staticmethod
    def marks(n: int) -> str:
        return ", ".join(["%s"] * n)

    @staticmethod
    def named(name: str) -> str:
        return f"%({name})s"

    def lock_name(self, c: Any, name: str) -> None:
        """Two adds of one new name at once: the second waits here, then sees the first."""
        c.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("job:" + name,))

    def lock_for_copy(self, c: Any) -> None:
        c.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")

    def copied_run(self, cols: dict[str, Any], overlap: str) -> None:
        """A copied leased run of a forbid/replace job holds its job's overlap slot here."""
        cols["exclusive"] = overlap in ("forbid", "replace") and cols["state"] == "leased"

    def copied_locks(self, c: Any, run_id: int, state: str, locks: Sequence[str]) -> None:
        """A copied leased run holds its locks here too."""
        if state != "leased":
            return
        for lock in locks:
            c.execute(
                "INSERT INTO held_locks (name, run_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (lock, run_id),
            )

    def new_ids(self, c: Any, table: str, n: int) -> list[int]:
        """``n`` values of the identity column's sequence, in one statement."""
        c.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) AS id FROM generate_series(1, %s)",
            ("jobctl." + table, n),
        )
        return sorted(int(r["id"]) for r in c.fetchall())

    def size_bytes(self) -> int:
        return int(
            self.scalar(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relnamespace = 'jobctl'::regnamespace AND c.relkind = 'r'"
            )
        )

    def schema_version(self) -> int:
        return int(self.scalar("SELECT version FROM schema_version") or SCHEMA_VERSION)
