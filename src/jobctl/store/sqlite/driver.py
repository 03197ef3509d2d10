"""The SQLite driver of the daemons' face (:class:`~jobctl.store.driver.DaemonDriver`): one
file, one writer at a time (``BEGIN IMMEDIATE``), so a claim is a compare-and-set that
picks the best free run inside one ``UPDATE``; the other daemons of the file are woken by
datagrams (:mod:`.wake`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from ...clock import Clock, to_us
from ...errors import StoreError
from ...models import RunState
from ..daemon_sql import DaemonQueries
from ..driver import Ended, Ends, Finishes, Quota, Started
from ..rows import finish_params, run_from_row
from ..values import Claimed, DaemonIdentity, RetentionMarks
from . import sql
from .db import Db
from .wake import WakeSocket

#: the column names of each hot-path statement, read from its first cursor
_NAMES: dict[str, tuple[str, ...]] = {}

DAEMON_QUERIES = DaemonQueries(for_update="")


def _tuples(c: sqlite3.Connection, sql: str, params: Any) -> tuple[sqlite3.Cursor, tuple[str, ...]]:
    cur = c.cursor()
    cur.row_factory = None
    cur.execute(sql, params)
    desc = cur.description  # made by the execute: reading it costs nothing more
    if desc is None:
        return cur, ()
    names = _NAMES.get(sql)
    if names is None or len(names) != len(desc) or names[-1] != desc[-1][0]:
        # first use, or the file's schema changed under a running daemon (``*``)
        names = _NAMES[sql] = tuple(d[0] for d in desc)
    return cur, names


def named(c: sqlite3.Connection, sql: str, params: Any = ()) -> list[dict[str, Any]]:
    """The rows of a statement as dicts (for the hot path: a dict lookup by name is several
    times cheaper than ``sqlite3.Row``'s, which compares the names one by one)."""
    cur, names = _tuples(c, sql, params)
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def named_one(c: sqlite3.Connection, sql: str, params: Any = ()) -> dict[str, Any] | None:
    """The first row of a statement as a dict (see :func:`named`), or None."""
    cur, names = _tuples(c, sql, params)
    row = cur.fetchone()
    return None if row is None else dict(zip(names, row, strict=True))


class ScheduleHeads:
    """The schedule, read lazily from a cursor when iterated; ``len()`` counts it."""

    def __init__(self, driver: SqliteDriver) -> None:
        self._driver = driver

    def __len__(self) -> int:
        n: int = self._driver.db.read(sql.COUNT_SCHEDULED)[0][0]
        return n

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return self._driver.iter_heads()


class _Fetched:
    """A read's rows, fetched before the commit (SQLite answers at once)."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None


class SqliteDriver:
    """The daemons' statements on one SQLite file."""

    backend = "sqlite"
    dq = DAEMON_QUERIES

    def __init__(self, db: Db) -> None:
        self.db = db
        self.wake_address: str | None = None
        self._seen_version: int | None = None

    # ---------------------------------------------------------------- connection

    def open_waker(self, identity: DaemonIdentity) -> WakeSocket:
        sock = WakeSocket(identity.id)
        self.wake_address = sock.published
        return sock

    def child_location(self) -> str:
        return str(self.db.path.resolve())

    def clock(self, base: Clock) -> Clock:
        """This host's: a file's daemons share one machine's clock."""
        return base

    def renewed(self, *, registered: bool) -> None:
        # the daemons list changes rarely: re-read once per renewal; this daemon's own
        # writes wake the others, known as of the last renewal
        rows = self.db.read(sql.WAKE_ADDRESSES)
        self.db.peers = [r[0] for r in rows if r[0] != self.wake_address]
        if registered:
            self.db.defer_checkpoints()

    def idle(self) -> None:
        self.db.checkpoint()

    def upkeep_pending(self) -> int:
        return self.db.wrote

    def end_of_retention_pass(self, since: RetentionMarks | None) -> None:
        """Nothing kept as delta rows: the tallies are updated in place."""

    # ---------------------------------------------------------------- daemons

    def claim_host(self, c: Any, identity: DaemonIdentity, now_us: int) -> None:
        """Nothing to refuse: a file is one machine's."""

    def take_leader(self, c: Any, me: str, until_us: int, now_us: int) -> bool:
        c.execute(sql.ENSURE_LEADER_ROW)
        cur = c.execute(sql.TAKE_LEADER, {"me": me, "until": until_us, "now": now_us})
        return bool(cur.rowcount == 1)

    def renew_runs(
        self, c: Any, me: str, until_us: int, held: Sequence[tuple[int, int]]
    ) -> list[tuple[int, bool]]:
        out = []
        for run_id, attempt in held:
            row = c.execute(sql.RENEW_RUN, (until_us, run_id, attempt, me)).fetchone()
            if row is not None:
                out.append((run_id, bool(row[0])))
        return out

    # ---------------------------------------------------------------- the scheduler

    def schedule_heads(self) -> ScheduleHeads:
        return ScheduleHeads(self)

    def iter_heads(self) -> Iterator[tuple[int, int]]:
        # the whole schedule is current as of this read: the watermark of
        # jobs_changed_since starts here (the version is read before the query)
        self._seen_version = self.db.read(sql.DATA_VERSION)[0][0]
        # a cursor read as it is consumed: no list of a million rows (the heap keeps
        # them in flat arrays); plain tuples, not sqlite3.Row
        c = self.db.conn.cursor()
        c.row_factory = None
        try:
            c.execute(sql.SCHEDULE_HEADS)
            while rows := c.fetchmany(4096):
                yield from rows
        except sqlite3.DatabaseError as e:
            raise StoreError(f"database error: {e}") from None
        finally:
            c.close()

    def jobs_changed_since(self, since: datetime) -> list[tuple[int, int | None]]:
        # the watermark: PRAGMA data_version moves only when another connection commits,
        # so a renewal with nothing new reads nothing (read before the query: a commit in
        # between is read now and again next time, never missed)
        version = self.db.read(sql.DATA_VERSION)[0][0]
        if version == self._seen_version:
            return []
        rows = self.db.read(sql.JOBS_CHANGED_SINCE, (to_us(since),))
        self._seen_version = version
        return [(r[0], r[1]) for r in rows]

    def due_jobs(self, c: Any, due: Sequence[tuple[int, int]]) -> dict[int, Mapping[str, Any]]:
        ids = [job_id for job_id, _ in due]
        marks = ", ".join("?" * len(ids))
        return {r["id"]: r for r in named(c, sql.FIRE_JOBS.format(marks=marks), ids)}

    # ---------------------------------------------------------------- the executor

    def turn(self) -> AbstractContextManager[Any]:
        return self.db.write()

    def finish(
        self,
        c: Any,
        me: str,
        now: datetime,
        finishes: Finishes,
        started: Started,
        claim_next: tuple[DaemonIdentity, int] | None = None,
    ) -> Ends:
        # pids first: an attempt that started and ended since the last turn keeps its pid
        # in its attempt row
        if started:
            c.executemany(sql.SET_ATTEMPT_PID, [(p, r, a, me) for r, a, p in started])
        # one fenced UPDATE of each run (its row count, or its RETURNING when a cancel
        # request may change the state, says whether the fence held), then the attempt
        # rows of those that did in one executemany
        now_us = to_us(now)
        ended: list[Ended | None] = []
        attempts: list[dict[str, object]] = []
        for f in finishes:
            run_params, attempt_params = finish_params(f, now_us, me)
            state: RunState | None
            if run_params["if_cancelled"] is None:
                # a cancel cannot change what is written: the row count says it all
                d = f.decision
                plain = d.state is RunState.SUCCEEDED and d.counts_attempt and d.error is None
                cur = c.execute(sql.FINISH_SUCCEEDED if plain else sql.FINISH_RUN, run_params)
                state = d.state if cur.rowcount == 1 else None
            else:
                row = c.execute(sql.FINISH_RUN_RETURNING_STATE, run_params).fetchone()
                state = None if row is None else RunState(row[0])
            if state is not None:
                attempts.append(attempt_params)
            ended.append(None if state is None else (state, f.job_id or None))
        if attempts:
            c.executemany(sql.FINISH_ATTEMPT, attempts)
        return ended, None

    def expired_and_skipped(
        self, c: Any, me: DaemonIdentity, now_us: int, limit: int
    ) -> tuple[list[Any], list[Any], Any]:
        # our own leases are renewed (fenced) by the heartbeat, never taken back here
        expired = c.execute(sql.EXPIRED_LEASES, (now_us, me.id)).fetchall()
        return expired, self.skip_past_deadline(c, now_us), None

    def skip_past_deadline(self, c: Any, now_us: int) -> list[Any]:
        if c.execute(sql.ANY_PAST_DEADLINE, {"now": now_us}).fetchone() is None:
            return []
        return list(c.execute(sql.SKIP_PAST_DEADLINE, {"now": now_us}).fetchall())

    def claim(self, c: Any, me: DaemonIdentity, now: datetime, quota: Quota) -> list[Claimed]:
        # One compare-and-set per claim: the UPDATE picks the best run that is due and
        # whose locks and job are free *now*, inside the same statement, so runs blocked
        # on a lock never block the runs behind them and two daemons cannot both win.
        limit, low_limit, reserved_priority = quota.limit, quota.low_limit, quota.reserved_priority
        now_us = to_us(now)
        claimed: list[Claimed] = []
        attempts: list[tuple[int, int, int, str, str]] = []
        low_used = 0
        params = {
            "me": me.id,
            "until": to_us(now + timedelta(seconds=me.lease_seconds)),
            "now": now_us,
            "host": me.host,
            "low_ok": 1,
            "rp": reserved_priority if reserved_priority is not None else -(2**62),
            "tags": json.dumps(list(me.tags)),
        }
        while len(claimed) < limit:
            low_ok = reserved_priority is None or low_limit is None or low_used < low_limit
            params["low_ok"] = 1 if low_ok else 0
            row = named_one(c, sql.CLAIM_ONE, params)
            if row is None:
                break
            run = run_from_row(row)
            attempts.append((run.id, run.attempt, now_us, me.id, me.host))
            if reserved_priority is not None and run.priority < reserved_priority:
                low_used += 1
            here = row["prev_host"] == me.host
            stale = row["prev_lost_pid"] if here else None
            claimed.append(Claimed(run, stale or None, here and row["last_error"] == "lost"))
        if attempts:
            c.executemany(sql.INSERT_ATTEMPT, attempts)
        return claimed

    def read_later(self, c: Any, sql: str) -> _Fetched:
        return _Fetched(c.execute(sql).fetchall())


__all__ = ["DAEMON_QUERIES", "ScheduleHeads", "SqliteDriver", "named", "named_one"]
