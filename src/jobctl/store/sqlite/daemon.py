"""The daemons' face of the SQLite store (:class:`~jobctl.store.protocol.DaemonStore`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from ...clock import from_us, to_us
from ...errors import NotFound, StoreError
from ...models import (
    MAX_SKIPPED_ROWS,
    Attempt,
    Decision,
    Job,
    JobState,
    Plan,
    Run,
    RunReason,
    RunState,
    SkipReason,
    Window,
)
from .. import outbox, secrets
from ..commands import (
    fire_after_jobs,
    insert_run,
    note_deadline_skips,
    pause_after_failures,
    run_by_id,
)
from ..rows import (
    attempt_from_row,
    finish_params,
    job_from_row,
    next_claim_time,
    opt_us,
    output_params,
    run_from_row,
    settings_json,
)
from ..values import (
    Claimed,
    DaemonIdentity,
    ExpiredFn,
    ExpiredLease,
    Finished,
    FinishItem,
    Fired,
    IdleFixedDelay,
    PlanFn,
    Renewal,
    RetentionMarks,
    TurnResult,
)
from ..watch import WatchDaemon
from . import sql
from .db import Db
from .wake import WakeSocket

#: the column names of each hot-path statement, read from its first cursor
_NAMES: dict[str, tuple[str, ...]] = {}


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

    def __init__(self, store: SqliteDaemonStore) -> None:
        self._store = store

    def __len__(self) -> int:
        n: int = self._store.db.read(sql.COUNT_SCHEDULED)[0][0]
        return n

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return self._store._iter_heads()


class SqliteDaemonStore(outbox.OutboxDaemon, WatchDaemon):
    """See :class:`~jobctl.store.protocol.DaemonStore` for the rules of every method."""

    backend = "sqlite"

    def __init__(self, db: Db, identity: DaemonIdentity) -> None:
        self.db = db
        self.identity = identity
        self._q = outbox.Sql(psycopg=False)
        self._wake_address: str | None = None
        self._seen_version: int | None = None

    # ------------------------------------------------------------------ daemons

    def open_waker(self) -> WakeSocket:
        sock = WakeSocket(self.identity.id)
        self._wake_address = sock.published
        return sock

    def child_location(self) -> str:
        return str(self.db.path.resolve())

    def register_daemon(self, now: datetime) -> None:
        with self.db.write() as c:
            c.execute(sql.DELETE_EXPIRED_DAEMONS, (to_us(now),))
            self._upsert(c, now)
        self._refresh_peers()
        self.db.defer_checkpoints()

    def idle(self) -> None:
        self.db.checkpoint()

    def trim_history(
        self,
        now: datetime,
        *,
        after_job_id: int,
        max_rows: int,
        since: RetentionMarks | None = None,
    ) -> tuple[int, int | None]:
        from ..retention import trim_history

        return trim_history(self.db, now, after_job_id=after_job_id, max_rows=max_rows, since=since)

    def retention_marks(self, now: datetime) -> RetentionMarks:
        from ..retention import retention_marks

        return retention_marks(self.db, now)

    def _upsert(self, c: sqlite3.Connection, now: datetime) -> None:
        me = self.identity
        c.execute(
            sql.UPSERT_DAEMON,
            {
                "id": me.id,
                "pid": me.pid,
                "host": me.host,
                "boot_id": me.boot_id,
                "now": to_us(now),
                "until": to_us(now + timedelta(seconds=me.lease_seconds)),
                "wake": self._wake_address,
                "workers": me.workers,
                "reserved": me.reserved,
                "rp": me.reserved_priority,
                "tags": json.dumps(list(me.tags)),
            },
        )

    def unregister_daemon(self) -> None:
        with self.db.write() as c:
            c.execute(sql.DELETE_DAEMON, (self.identity.id,))
            c.execute(sql.RELEASE_LEADER, (self.identity.id,))

    def local_daemons(self, now: datetime) -> list[tuple[str, int]]:
        me = self.identity
        rows = self.db.read(sql.LOCAL_DAEMONS, (me.host, me.boot_id, to_us(now), me.id))
        return [(r[0], r[1]) for r in rows]

    def forget_daemons(self, daemon_ids: Sequence[str]) -> None:
        if not daemon_ids:
            return
        with self.db.write() as c:
            for daemon_id in daemon_ids:
                c.execute(sql.DELETE_DAEMON, (daemon_id,))
                c.execute(sql.EXPIRE_LEADER_OF, (daemon_id,))
                c.execute(sql.EXPIRE_LEASES_OF, (daemon_id,))

    def heartbeat(
        self, now: datetime, *, want_leader: bool, held: Sequence[tuple[int, int]]
    ) -> Renewal:
        daemon_id = self.identity.id
        until = to_us(now + timedelta(seconds=self.identity.lease_seconds))
        lost: set[int] = set()
        cancel: set[int] = set()
        leader = False
        with self.db.write() as c:
            # our row may have expired and been cleared (a suspend): register again, whole
            self._upsert(c, now)
            if want_leader:
                c.execute(sql.ENSURE_LEADER_ROW)
                cur = c.execute(
                    sql.TAKE_LEADER, {"me": daemon_id, "until": until, "now": to_us(now)}
                )
                leader = cur.rowcount == 1
            for run_id, attempt in held:
                row = c.execute(sql.RENEW_RUN, (until, run_id, attempt, daemon_id)).fetchone()
                if row is None:
                    lost.add(run_id)
                elif row[0]:
                    cancel.add(run_id)
        self._refresh_peers()
        return Renewal(leader, frozenset(lost), frozenset(cancel))

    def _refresh_peers(self) -> None:
        # the daemons list changes rarely: re-read once per renewal
        rows = self.db.read(sql.WAKE_ADDRESSES)
        # this daemon's own writes wake the others, known as of the last renewal
        self.db.peers = [r[0] for r in rows if r[0] != self._wake_address]

    def leader_lease_expiry(self) -> datetime | None:
        rows = self.db.read(sql.LEADER_LEASE)
        if not rows or rows[0][0] is None:
            return None
        return from_us(rows[0][1])

    def release_leader(self) -> None:
        with self.db.write() as c:
            c.execute(sql.RELEASE_LEADER, (self.identity.id,))

    # ------------------------------------------------------------------ the scheduler

    def schedule_heads(self) -> ScheduleHeads:
        return ScheduleHeads(self)

    def _iter_heads(self) -> Iterator[tuple[int, int]]:
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

    def get_job_by_id(self, job_id: int) -> Job | None:
        rows = self.db.read(sql.JOB_BY_ID, (job_id,))
        return job_from_row(rows[0]) if rows else None

    def reboot_jobs(self) -> list[Job]:
        return [job_from_row(r) for r in self.db.read(sql.REBOOT_JOBS)]

    def fire(self, due: Sequence[tuple[int, int]], now: datetime, plan: PlanFn) -> list[Fired]:
        # one chunk: one read of its jobs, one INSERT of its windows, one executemany that
        # moves the schedules (a handful of statements for 50 jobs, not 5 each)
        if not due:
            return []
        now_us = to_us(now)
        due_at = dict(due)
        out: list[Fired] = []
        with self.db.write() as c:
            marks = ", ".join("?" * len(due_at))
            rows = {r["id"]: r for r in named(c, sql.FIRE_JOBS.format(marks=marks), list(due_at))}
            # the maintenance windows (pause --all) that may hold the windows fired now
            held = [
                (from_us(r["since"]), None if r["ends"] is None else from_us(r["ends"]))
                for r in c.execute(
                    sql.MAINTENANCE_SINCE, {"now": now_us, "since": min(due_at.values())}
                ).fetchall()
            ]
            rows_params: list[object] = []
            windows: list[tuple[Job, Window]] = []
            moves: list[dict[str, object]] = []
            trims: list[dict[str, object]] = []
            plans: list[tuple[Job, Plan]] = []
            for job_id, due_us in due:
                row = rows.get(job_id)
                if row is None or row["next_run_at"] != due_us:
                    continue  # changed meanwhile (compare-and-set): the caller re-reads it
                job = job_from_row(row)
                p = plan(job, bool(row["has_leased"]), bool(row["has_waiting"]), held)
                if p is None:
                    continue
                if p.replace_open:
                    c.execute(sql.REPLACE_LEASED, (job_id,))
                    c.execute(sql.REPLACE_WAITING, {"now": now_us, "job_id": job_id})
                spec = job.spec
                settings = settings_json(spec) if p.windows else ""
                for w in p.windows:
                    skipped = w.state is RunState.SKIPPED
                    rows_params += (
                        job_id,
                        to_us(w.scheduled_for),
                        w.state.value,
                        w.skip_reason.value if w.skip_reason else None,
                        w.reason.value,
                        opt_us(w.catchup_from),
                        spec.retries + 1,
                        to_us(w.not_before or w.scheduled_for),
                        spec.priority,
                        settings,
                        now_us,
                        now_us if skipped else None,
                        job.revision,
                        opt_us(w.deadline_at),
                    )
                    windows.append((job, w))
                if any(w.skip_reason is SkipReason.MISSED for w in p.windows):
                    trims.append({"job_id": job_id, "keep": MAX_SKIPPED_ROWS})
                moves.append(
                    {
                        "next": opt_us(p.next_run_at),
                        "last": opt_us(p.last_window_at),
                        "missed": p.missed_increment,
                        "state": (JobState.DONE if p.done else JobState.ACTIVE).value,
                        "boot_id": None,
                        "job_id": job_id,
                    }
                )
                plans.append((job, p))
            inserted: dict[tuple[int, int], int] = {}
            per = sql.INSERT_RUNS_ROW_PARAMS
            # at most 500 rows a statement (SQLite's bound-parameter limit is 32,766)
            for i in range(0, len(windows), 500):
                part = rows_params[i * per : (i + 500) * per]
                values = ", ".join([sql.INSERT_RUNS_ROW] * (len(part) // per))
                for r in c.execute(sql.INSERT_RUNS.format(values=values), part):
                    inserted[(r[1], r[2])] = r[0]
            locks = [
                (run_id, lock)
                for job, w in windows
                if job.spec.locks
                and w.state is not RunState.SKIPPED
                and (run_id := inserted.get((job.id, to_us(w.scheduled_for)))) is not None
                for lock in sorted(set(job.spec.locks))
            ]
            if locks:
                c.executemany(sql.INSERT_RUN_LOCK, locks)
            if trims:
                c.executemany(sql.TRIM_MISSED, trims)
            c.executemany(sql.MOVE_SCHEDULE, moves)
            missed = [n for job, p in plans if (n := outbox.missed_of(job, p)) is not None]
            if missed:
                outbox.enqueue(c, self._q, missed, now)
            for job, p in plans:
                ids = [
                    run_id
                    for w in p.windows
                    if (run_id := inserted.get((job.id, to_us(w.scheduled_for)))) is not None
                ]
                out.append(Fired(job.moved_to(p.next_run_at), p, ids))
            if inserted:
                self.db.announce("run")
        return out

    def record_reboot(self, job_id: int, now: datetime, boot_id: str) -> int | None:
        with self.db.write() as c:
            row = c.execute(sql.JOB_BY_ID, (job_id,)).fetchone()
            if row is None or row["state"] != "active" or row["last_boot_id"] == boot_id:
                return None
            job = job_from_row(row)
            run_id = insert_run(
                self.db,
                c,
                job,
                Window(now, RunState.PENDING, RunReason.SCHEDULE, not_before=now),
                now,
            )
            c.execute(
                sql.MOVE_SCHEDULE,
                {
                    "next": None,
                    "last": to_us(now),
                    "missed": 0,
                    "state": JobState.ACTIVE.value,
                    "boot_id": boot_id,
                    "job_id": job_id,
                },
            )
            if run_id is not None:
                self.db.announce("run")
            return run_id

    def idle_fixed_delay(self, job_ids: Sequence[int] | None) -> list[IdleFixedDelay]:
        ids = None if job_ids is None else sorted(set(job_ids))
        only = "" if ids is None else f"AND id IN ({', '.join('?' * len(ids))})"
        if ids == []:
            return []
        rows = self.db.read(sql.IDLE_FIXED_DELAY.format(only=only), ids or ())
        out = []
        for r in rows:
            ended = r["ended_at"] if r["ended_at"] is not None else r["schedule_from"]
            out.append(IdleFixedDelay(job_from_row(r), from_us(ended)))
        return out

    def fire_after(
        self, upstream_ids: Sequence[int] | None, now: datetime
    ) -> list[tuple[Job, int, int]]:
        return fire_after_jobs(self.db, upstream_ids, now)

    def set_next_run(self, job_id: int, next_run_at: datetime, now: datetime) -> bool:
        with self.db.write() as c:
            cur = c.execute(
                sql.SET_NEXT_RUN,
                {"next": to_us(next_run_at), "now": to_us(now), "job_id": job_id},
            )
            return cur.rowcount == 1

    # ------------------------------------------------------------------ the executor

    def record_and_claim(
        self,
        now: datetime,
        *,
        finishes: Sequence[FinishItem],
        started: Sequence[tuple[int, int, int]],
        limit: int,
        low_limit: int | None,
        reserved_priority: int | None,
        on_expired: ExpiredFn,
    ) -> TurnResult:
        me = self.identity
        daemon_id = me.id
        with self.db.write() as c:
            # pids first: an attempt that started and ended since the last turn keeps
            # its pid in its attempt row
            self._set_pids(c, daemon_id, started)
            finished = self._finish_all(c, daemon_id, now, finishes)
            claimed: list[Claimed] = []
            ended: list[tuple[Run, Decision]] = []
            if limit > 0:
                claimed, ended = self._claim(
                    c,
                    daemon_id,
                    me.host,
                    now,
                    me.lease_seconds,
                    limit,
                    low_limit,
                    reserved_priority,
                    on_expired,
                )
            due = outbox.next_due(c, self._oq, now)
        return TurnResult(finished, claimed, ended, due)

    def _claim(
        self,
        c: sqlite3.Connection,
        daemon_id: str,
        host: str,
        now: datetime,
        lease_seconds: float,
        limit: int,
        low_limit: int | None,
        reserved_priority: int | None,
        on_expired: ExpiredFn,
    ) -> tuple[list[Claimed], list[tuple[Run, Decision]]]:
        now_us = to_us(now)
        until = to_us(now + timedelta(seconds=lease_seconds))
        claimed: list[Claimed] = []
        ended: list[tuple[Run, Decision]] = []
        low_used = 0
        for r in c.execute(sql.EXPIRED_LEASES, (now_us, daemon_id)).fetchall():
            lease = ExpiredLease(
                r["id"],
                r["job_id"],
                r["attempt"],
                r["max_attempts"],
                bool(r["cancel_requested"]),
            )
            decision = on_expired(lease)
            c.execute(sql.ATTEMPT_LOST, (now_us, lease.run_id, lease.attempt))
            c.execute(
                sql.SETTLE_EXPIRED,
                {
                    "state": decision.state.value,
                    "error": decision.error,
                    "now": now_us,
                    "run_id": lease.run_id,
                },
            )
            if decision.state in (RunState.DEAD, RunState.CANCELLED):
                ended.append((run_by_id(self.db, c, lease.run_id), decision))
            outbox.note_finish(
                c,
                self._q,
                lease.run_id,
                lease.attempt,
                decision.state is RunState.FAILED,
                now,
                outbox.Targets(c, self._q),
            )
            if decision.state is RunState.DEAD:
                pause_after_failures(self.db, c, self._q, lease.job_id, now)
        # runs past their --deadline never start: skipped here, before any is picked
        skipped = c.execute(sql.SKIP_PAST_DEADLINE, {"now": now_us}).fetchall()
        for r in skipped:
            self.db.announce(f"job:{r['job_id']}")
        note_deadline_skips(c, self._q, skipped, now)
        # One compare-and-set per claim: the UPDATE picks the best run that is due and
        # whose locks and job are free *now*, inside the same statement, so runs blocked
        # on a lock never block the runs behind them and two daemons cannot both win.
        attempts: list[tuple[int, int, int, str, str]] = []
        params = {
            "me": daemon_id,
            "until": until,
            "now": now_us,
            "host": host,
            "low_ok": 1,
            "rp": reserved_priority if reserved_priority is not None else -(2**62),
            "tags": json.dumps(list(self.identity.tags)),
        }
        while len(claimed) < limit:
            low_ok = reserved_priority is None or low_limit is None or low_used < low_limit
            params["low_ok"] = 1 if low_ok else 0
            row = named_one(c, sql.CLAIM_ONE, params)
            if row is None:
                break
            run = run_from_row(row)
            attempts.append((run.id, run.attempt, now_us, daemon_id, host))
            if reserved_priority is not None and run.priority < reserved_priority:
                low_used += 1
            here = row["prev_host"] == host
            stale = row["prev_lost_pid"] if here else None
            claimed.append(Claimed(run, stale or None, here and row["last_error"] == "lost"))
        if attempts:
            c.executemany(sql.INSERT_ATTEMPT, attempts)
        return claimed, ended

    def next_claim_at(self, now: datetime) -> datetime | None:
        now_us = to_us(now)
        a = self.db.read(sql.NEXT_NOT_BEFORE, (now_us,))[0][0]
        b = self.db.read(sql.NEXT_LEASE_EXPIRY, (self.identity.id, now_us))[0][0]
        return next_claim_time(a, b)

    def held_status(self, held: Sequence[tuple[int, int]]) -> tuple[frozenset[int], frozenset[int]]:
        rows = self.db.read(sql.HELD_BY, (self.identity.id,))
        leased = {(r[0], r[1]): bool(r[2]) for r in rows}
        cancel = frozenset(run_id for run_id, a in held if leased.get((run_id, a)))
        lost = frozenset(run_id for run_id, a in held if (run_id, a) not in leased)
        return cancel, lost

    def _set_pids(
        self, c: sqlite3.Connection, daemon_id: str, started: Sequence[tuple[int, int, int]]
    ) -> None:
        if not started:
            return
        rows = [(pid, run_id, attempt, daemon_id) for run_id, attempt, pid in started]
        c.executemany(sql.SET_ATTEMPT_PID, rows)

    def save_output(self, outputs: Sequence[tuple[int, int, bytes, int]]) -> None:
        if not outputs:
            return
        with self.db.write() as c:
            c.executemany(sql.SAVE_OUTPUT, output_params(self.identity.id, outputs))

    def secret_values(self, names: Sequence[str]) -> dict[str, bytes]:
        return secrets.secret_values(self.db, self._q, names)

    def _finish_all(
        self, c: sqlite3.Connection, daemon_id: str, now: datetime, items: Sequence[FinishItem]
    ) -> list[Finished]:
        # one fenced UPDATE of each run (its row count, or its RETURNING when a cancel
        # request may change the state, says whether the fence held), then the attempt
        # rows of those that did in one executemany
        now_us = to_us(now)
        out: list[Finished] = []
        dead_jobs: list[int] = []  # (paused after the notes of these ends, below)
        attempts: list[dict[str, object]] = []
        for f in items:
            run_params, attempt_params = finish_params(f, now_us, daemon_id)
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
                if f.job_id:
                    self.db.announce(f"job:{f.job_id}")  # a fixed-delay job moves on
                    if state is RunState.DEAD:
                        dead_jobs.append(f.job_id)
            out.append(Finished(state))
        if attempts:
            c.executemany(sql.FINISH_ATTEMPT, attempts)
            self.db.announce("run")  # what they held is free for the other daemons
        # the notifications of these ends, in their transaction (SPEC §12)
        targets = outbox.Targets(c, self._q)
        for f, done in zip(items, out, strict=True):
            if done.state is not None:
                retry = done.state is RunState.FAILED and f.decision.retry_at is not None
                outbox.note_finish(c, self._q, f.run_id, f.attempt, retry, now, targets)
        # after the ends' notes: the dead of a run is written before the paused it causes
        for job_id in dead_jobs:
            pause_after_failures(self.db, c, self._q, job_id, now)
        return out

    def _attempt_of(self, row: Any) -> Attempt:
        return attempt_from_row(row)

    def record_hook(self, run_id: int, status: str) -> None:
        with self.db.write() as c:
            c.execute(sql.RECORD_HOOK, (status, run_id))

    def get_run(self, run_id: int) -> Run:
        rows = self.db.read(sql.RUN_BY_ID, (run_id,))
        if not rows:
            raise NotFound(f"no run with id {run_id}")
        return run_from_row(rows[0])


__all__ = ["ScheduleHeads", "SqliteDaemonStore"]
