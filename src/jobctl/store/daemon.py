"""The daemons' face of the store (:class:`~jobctl.store.protocol.DaemonStore`), written once
over a backend's :class:`~.driver.DaemonDriver`.

The bookkeeping around what truly differs lives here: registering and renewing a daemon,
the per-plan work of a firing, settling the leases other daemons lost, the notes and pauses
an end causes, ``--after`` followers, retention's transaction and the outbox. Each change a
daemon should act on is announced inside its transaction
(:meth:`~.dialect.Dialect.announce`); the dialect wakes the daemons when it commits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..clock import Clock, from_us, to_us
from ..models import MAX_SKIPPED_ROWS, Attempt, Job, JobState, Run, RunReason, RunState, SkipReason
from ..notifications import Outcome, Outgoing
from ..outcomes import Decision, Plan, Window
from . import outbox, secrets, watch
from .daemon_sql import INSERT_RUNS_CHUNK, INSERT_RUNS_ROW_PARAMS
from .dialect import retrying
from .driver import DaemonDriver, Ended, Quota
from .retention import ChangedJobs, retention_marks, trim_history
from .rows import (
    attempt_from_row,
    job_from_row,
    next_claim_time,
    opt_us,
    output_params,
    run_from_row,
    settings_json,
)
from .values import (
    DaemonIdentity,
    ExpiredFn,
    ExpiredLease,
    Finished,
    FinishItem,
    Fired,
    Heads,
    IdleFixedDelay,
    PlanFn,
    Renewal,
    RetentionMarks,
    TurnResult,
    Waker,
)
from .writes import (
    fire_after_jobs,
    insert_run,
    note_deadline_skips,
    pause_after_failures,
    read_run,
)


@retrying
class Daemons:
    """See :class:`~jobctl.store.protocol.DaemonStore` for the rules of every method."""

    def __init__(self, driver: DaemonDriver, identity: DaemonIdentity) -> None:
        self.driver = driver
        self.db = driver.db
        self.dq = driver.dq
        self.backend = driver.backend
        self.identity = identity
        self.outbox = outbox.Outbox(driver.db)
        self._oq = self.outbox.q
        #: the jobs retention's pass under way looks at, found at its first step
        self._changed_jobs = ChangedJobs()

    def clock(self, base: Clock) -> Clock:
        """The clock this daemon reads: ``base`` on SQLite (one host's clock), the
        server's on PostgreSQL (``base`` plus the offset each renewal measures), so leases
        and due times are judged by one clock for every host (README, Many hosts on
        PostgreSQL)."""
        return self.driver.clock(base)

    # ------------------------------------------------------------------ daemons

    def open_waker(self) -> Waker:
        """This daemon's wake-up source, published to the commands by :meth:`register_daemon`."""
        return self.driver.open_waker(self.identity)

    def child_location(self) -> str:
        """The database location handed to children as ``JOBCTL_DB`` (no password)."""
        return self.driver.child_location()

    def _upsert(self, c: Any, now: datetime) -> None:
        me = self.identity
        c.execute(
            self.dq.upsert_daemon,
            {
                "id": me.id,
                "pid": me.pid,
                "host": me.host,
                "boot_id": me.boot_id,
                "now": to_us(now),
                "until": to_us(now + timedelta(seconds=me.lease_seconds)),
                "wake": self.driver.wake_address,
                "workers": me.workers,
                "reserved": me.reserved,
                "rp": me.reserved_priority,
                "tags": json.dumps(list(me.tags)),
            },
        )

    def register_daemon(self, now: datetime) -> None:
        """Announce a daemon; rows of expired daemons are cleared. From here on the store
        may put off its upkeep until :meth:`idle`."""
        with self.db.write() as c:
            c.execute(self.dq.delete_expired_daemons, (to_us(now),))
            self.driver.claim_host(c, self.identity, to_us(now))
            self._upsert(c, now)
        self.driver.renewed(registered=True)

    def unregister_daemon(self) -> None:
        """A clean stop: forget the daemon and hand the scheduler lease back at once."""
        with self.db.write() as c:
            c.execute(self.dq.delete_daemon, (self.identity.id,))
            c.execute(self.dq.release_leader, (self.identity.id,))
            self.db.announce("all")  # another daemon may take the scheduler lease now

    def local_daemons(self, now: datetime) -> list[tuple[str, int]]:
        """(daemon id, pid) of the other live daemon rows on this host and boot: the
        caller checks whether each pid is still a jobctl daemon."""
        me = self.identity
        rows = self.db.read(self.dq.local_daemons, (me.host, me.boot_id, to_us(now), me.id))
        return [(r["id"], r["pid"]) for r in rows]

    def forget_daemons(self, daemon_ids: Sequence[str]) -> None:
        """Drop the rows of daemons found dead on this host, and expire the scheduler
        lease and run leases they held, so they are taken at once."""
        if not daemon_ids:
            return
        ids = [(daemon_id,) for daemon_id in daemon_ids]
        with self.db.write() as c:
            c.executemany(self.dq.delete_daemon, ids)
            c.executemany(self.dq.expire_leader_of, ids)
            c.executemany(self.dq.expire_leases_of, ids)
            self.db.announce("run")

    def heartbeat(
        self, now: datetime, *, want_leader: bool, held: Sequence[tuple[int, int]]
    ) -> Renewal:
        """One renewal in one transaction: this daemon's row (re-inserted whole if it
        expired meanwhile), the scheduler lease when ``want_leader`` (taken when free or
        expired), and the lease of each held ``(run_id, attempt)``; a held run whose lease
        no longer names that attempt is reported lost (fencing)."""
        me = self.identity.id
        until = to_us(now + timedelta(seconds=self.identity.lease_seconds))
        leader = False
        with self.db.write() as c:
            # our row may have expired and been cleared (a suspend): register again, whole
            self._upsert(c, now)
            if want_leader:
                leader = self.driver.take_leader(c, me, until, to_us(now))
            renewed = dict(self.driver.renew_runs(c, me, until, held)) if held else {}
        self.driver.renewed(registered=False)
        lost = frozenset(run_id for run_id, _ in held if run_id not in renewed)
        cancel = frozenset(run_id for run_id, asked in renewed.items() if asked)
        return Renewal(leader, lost, cancel)

    def leader_lease_expiry(self) -> datetime | None:
        rows = self.db.read(self.dq.leader_lease)
        if not rows or rows[0]["holder"] is None:
            return None
        return from_us(rows[0]["expires_at"])

    def release_leader(self) -> None:
        with self.db.write() as c:
            c.execute(self.dq.release_leader, (self.identity.id,))

    def idle(self) -> None:
        """The daemon is about to sleep with nothing due soon: do the upkeep it put off
        while busy (SQLite: checkpoint the write-ahead log). Never blocks on others."""
        self.driver.idle()

    def upkeep_pending(self) -> int:
        """The commits whose upkeep :meth:`idle` has yet to do (0: none)."""
        return self.driver.upkeep_pending()

    # ------------------------------------------------------------------ the scheduler

    def schedule_heads(self) -> Heads:
        """(next_run_at µs, job id) of every active job that has a next window, in
        ascending (next_run_at, id) order; ``len()`` is their count. May be read lazily
        when iterated (a cursor: a million jobs need no list): iterate it at once,
        before other calls."""
        return self.driver.schedule_heads()

    def jobs_changed_since(self, since: datetime) -> list[tuple[int, int | None]]:
        """(job id, next_run_at µs or None when not active) of jobs changed at or after
        ``since``: the safety net for a lost wake-up.

        A backend may keep a watermark (SQLite does): when no other connection or process
        has committed to the database since this store's previous call of this method or
        of :meth:`schedule_heads` (which returns the whole schedule as current), it may
        return ``[]`` without reading (what it would return was already known). The caller
        treats every row as a hint to push again, so reporting a job twice is harmless;
        missing a change committed after the previous call is not allowed."""
        return self.driver.jobs_changed_since(since)

    def get_job_by_id(self, job_id: int) -> Job | None:
        rows = self.db.read(self.dq.job_by_id, (job_id,))
        return job_from_row(rows[0]) if rows else None

    def reboot_jobs(self) -> list[Job]:
        return [job_from_row(r) for r in self.db.read(self.dq.reboot_jobs)]

    def fire(self, due: Sequence[tuple[int, int]], now: datetime, plan: PlanFn) -> list[Fired]:
        # one chunk: one read of its jobs, one INSERT of its windows, one executemany that
        # moves the schedules (a handful of statements for 50 jobs, not 5 each)
        """Record the windows of due jobs, ``(job id, due µs)`` pairs, in one transaction.

        For each job still active whose ``next_run_at`` is still the due time
        (compare-and-set), ``plan(job, has_leased_run)`` decides the rows; they are inserted
        (a window already present is ignored: one run per window, whatever races), the
        job's schedule moves to the plan's ``next_run_at``, and at most ``MAX_SKIPPED_ROWS``
        missed rows are kept. A plan with ``replace_open`` cancels the job's open scheduled
        runs and asks its leased ones to stop. Jobs that changed meanwhile are left out.
        """
        if not due:
            return []
        now_us = to_us(now)
        dq = self.dq
        with self.db.write() as c:
            rows = self.driver.due_jobs(c, due)
            # the maintenance windows (pause --all) that may hold the windows fired now
            since = {"now": now_us, "since": min(d for _, d in due)}
            held = [
                (from_us(r["since"]), None if r["ends"] is None else from_us(r["ends"]))
                for r in c.execute(dq.maintenance_since, since).fetchall()
            ]
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
                    c.execute(dq.replace_leased, (job_id,))
                    c.execute(dq.replace_waiting, {"now": now_us, "job_id": job_id})
                plans.append((job, p))
            inserted = self._insert_windows(c, plans, now_us)
            trims = [
                {"job_id": job.id, "keep": MAX_SKIPPED_ROWS}
                for job, p in plans
                if any(w.skip_reason is SkipReason.MISSED for w in p.windows)
            ]
            if trims:
                c.executemany(dq.trim_missed, trims)
            if plans:
                c.executemany(dq.move_schedule, [_move(job.id, p) for job, p in plans])
            missed = [n for job, p in plans if (n := outbox.missed_of(job, p)) is not None]
            if missed:
                outbox.enqueue(c, self._oq, missed, now)
            if inserted:
                self.db.announce("run")
        out = []
        for job, p in plans:
            ids = [
                run_id
                for w in p.windows
                if (run_id := inserted.get((job.id, to_us(w.scheduled_for)))) is not None
            ]
            out.append(Fired(job.moved_to(p.next_run_at), p, ids))
        return out

    def _insert_windows(
        self, c: Any, plans: Sequence[tuple[Job, Plan]], now_us: int
    ) -> dict[tuple[int, int], int]:
        """Every window of ``plans`` in statements of up to INSERT_RUNS_CHUNK rows, and
        the lock names of those that will run; the ids of those inserted by (job id,
        window µs) (a window already present is left as it is)."""
        params: list[object] = []
        windows: list[tuple[Job, Window]] = []
        for job, p in plans:
            spec = job.spec
            settings = settings_json(spec) if p.windows else ""
            for w in p.windows:
                skipped = w.state is RunState.SKIPPED
                params += (
                    job.id,
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
        inserted: dict[tuple[int, int], int] = {}
        per = INSERT_RUNS_ROW_PARAMS
        step = INSERT_RUNS_CHUNK
        for i in range(0, len(windows), step):
            part = params[i * per : (i + step) * per]
            values = ", ".join([self.dq.insert_runs_row] * (len(part) // per))
            for r in c.execute(self.dq.insert_runs.format(values=values), part).fetchall():
                inserted[(r["job_id"], r["scheduled_for"])] = r["id"]
        locks = [
            (run_id, lock)
            for job, w in windows
            if job.spec.locks
            and w.state is not RunState.SKIPPED
            and (run_id := inserted.get((job.id, to_us(w.scheduled_for)))) is not None
            for lock in sorted(set(job.spec.locks))
        ]
        if locks:
            c.executemany(self.db.q.insert_run_lock, locks)
        return inserted

    def record_reboot(self, job_id: int, now: datetime, boot_id: str) -> int | None:
        """One ``@reboot`` run for this boot (None when this boot already had one)."""
        with self.db.write() as c:
            row = c.execute(self.dq.job_by_id_locked, (job_id,)).fetchone()
            if row is None or row["state"] != "active" or row["last_boot_id"] == boot_id:
                return None
            job = job_from_row(row)
            w = Window(now, RunState.PENDING, RunReason.SCHEDULE, not_before=now)
            run_id = insert_run(self.db, c, job, w, now)
            c.execute(self.dq.move_schedule, {**_move(job_id, None, now), "boot_id": boot_id})
            if run_id is not None:
                self.db.announce("run")
            return run_id

    def idle_fixed_delay(self, job_ids: Sequence[int] | None) -> list[IdleFixedDelay]:
        """Fixed-delay jobs (of ``job_ids``, or all) that are active, have no open run and
        no next window: each moves on from when its last run ended."""
        ids = None if job_ids is None else sorted(set(job_ids))
        if ids == []:
            return []
        only = "" if ids is None else f"AND id IN ({self.db.marks(len(ids))})"
        rows = self.db.read(self.dq.idle_fixed_delay.format(only=only), ids or ())
        out = []
        for r in rows:
            ended = r["ended_at"] if r["ended_at"] is not None else r["schedule_from"]
            out.append(IdleFixedDelay(job_from_row(r), from_us(ended)))
        return out

    def fire_after(
        self, upstream_ids: Sequence[int] | None, now: datetime
    ) -> list[tuple[Job, int, int]]:
        """see README, Run policies and what a run costs ``--after``: record the runs of the jobs
        that follow these jobs (None:
        any) for their upstream runs that ended since each one last looked (see
        :func:`jobctl.store.commands.fire_after`). Returns (job, run id, upstream run id)
        of the runs created."""
        return fire_after_jobs(self.db, upstream_ids, now)

    def set_next_run(self, job_id: int, next_run_at: datetime, now: datetime) -> bool:
        """Give a fixed-delay job its next window, only if it still has none and no open
        run (compare-and-set). Returns whether it was applied."""
        with self.db.write() as c:
            c.execute(self.dq.lock_job, (job_id,))
            cur = c.execute(
                self.dq.set_next_run,
                {"next": to_us(next_run_at), "now": to_us(now), "job_id": job_id},
            )
            moved = int(cur.rowcount) == 1
            if moved:
                self.db.announce(f"job:{job_id}")  # another daemon may be the scheduler
            return moved

    def trim_history(
        self,
        now: datetime,
        *,
        after_job_id: int,
        max_rows: int,
        since: RetentionMarks | None = None,
    ) -> tuple[int, int | None]:
        """One retention transaction (see README, History: what is kept, what failed, what never
        ran): for jobs with id > ``after_job_id``, in id
        order, delete finished runs (succeeded, dead, cancelled, skipped; never pending,
        leased or failed), with their attempts and delivered notifications, beyond the
        job's ``keep_runs`` most recent by window or whose window is older than
        ``keep_for`` before ``now``; at most ``max_rows`` runs. With ``since`` (the marks
        of the last pass's start) only the jobs that may have changed since are looked
        at: those with runs ended since, edited since, or with a ``keep_for``; without it,
        every job. Returns (runs deleted, the job id to start the next step after, or None
        when the pass over the jobs is done). The counters are not touched."""
        done = trim_history(
            self.db,
            now,
            after_job_id=after_job_id,
            max_rows=max_rows,
            since=since,
            changed=self._changed_jobs,
        )
        if done[1] is None:
            self.driver.end_of_retention_pass(since)
        return done

    def retention_marks(self, now: datetime) -> RetentionMarks:
        """Where a retention pass starts: the newest run id and the open runs' ids (read
        through indexes: as many rows as runs are open), at ``now``."""
        return retention_marks(self.db, now)

    def settle_watched(self, now: datetime) -> datetime | None:
        """For the scheduler-lease holder: end ``dead`` (``no ping``) each watched run still
        without its end ping at window + grace + (``--timeout``, else the period to its
        next window), with its notifications. Returns when the next one falls due."""
        if not self.db.read(self.dq.any_watched_open):
            return None  # no watched run open: no write transaction for it
        with self.db.write() as c:
            ended, nxt = watch.settle_watched(c, self._oq, now)
            nxt_at: datetime | None = nxt
            for job_id, _ in ended:
                self.db.announce(f"job:{job_id}")
            if ended:
                self.db.announce("run")
            return nxt_at

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
        """What one loop turn learned, and its claims, in ONE transaction (all or nothing).

        In this order:

        1. The ``(run_id, attempt, pid)`` of children ``started`` (first, so an attempt that
           started and ended since the last turn keeps its pid). Fenced.
        2. Each of ``finishes``: the attempt's end and the planner's decision. Fenced: a run
           no longer leased by that attempt is not touched (``Finished(None)``); a cancel
           requested meanwhile applies ``decision.if_cancelled`` instead.
        3. Only when ``limit`` > 0: leases of other daemons that expired are settled
           (``on_expired`` decides each: retry now, dead, cancelled; the lost attempt is
           recorded ``lost``; those that ended are returned in ``ended``), then up to
           ``limit`` due runs are claimed, highest priority first, then oldest window, each
           a compare-and-set: still pending/failed and due, none of its locks held by a
           leased run, and with ``forbid``/``replace`` no other run of its job leased. Runs
           of priority < ``reserved_priority`` are claimed at most ``low_limit`` times. The
           workers, locks and overlap the finishes freed are claimable in the same call.

        ``limit`` 0 claims nothing and settles no lease. The ends are announced to the
        other daemons (``run``, and ``job:ID`` of each ended run's job) when it commits.
        """
        me = self.identity
        driver = self.driver
        with driver.turn() as c:
            claim_next = (me, limit) if limit > 0 else None
            ends, any_channel = driver.finish(c, me.id, now, finishes, started, claim_next)
            self._after_ends(c, now, finishes, ends, any_channel)
            claimed = []
            ended: list[tuple[Run, Decision]] = []
            if limit > 0:
                now_us = to_us(now)
                expired, skipped, ahead = driver.expired_and_skipped(c, me, now_us, limit)
                ended = self._settle_expired(c, expired, now, on_expired)
                if expired:  # a settled run may be past its deadline too
                    skipped += driver.skip_past_deadline(c, now_us)
                    ahead = None  # and a candidate now: the claim reads again
                for r in skipped:
                    self.db.announce(f"job:{r['job_id']}")
                note_deadline_skips(c, self._oq, skipped, now)
                quota = Quota(limit, low_limit, reserved_priority, ahead)
                claimed = driver.claim(c, me, now, quota)
            # the notifications' next due time, read with the COMMIT
            due = driver.read_later(c, self._oq(outbox.NEXT_DUE))
        finished = [Finished(None if e is None else e[0]) for e in ends]
        return TurnResult(finished, claimed, ended, outbox.due_of(due.fetchone()))

    def _after_ends(
        self,
        c: Any,
        now: datetime,
        finishes: Sequence[FinishItem],
        ends: Sequence[Ended | None],
        any_channel: bool | None,
    ) -> None:
        """What the ends of a turn cause, in its transaction: the other daemons told (a
        fixed-delay job moves on; what they held is free), the notifications of each end,
        and a job paused after failures."""
        held = [(f, e) for f, e in zip(finishes, ends, strict=True) if e is not None]
        if not held:
            return
        for _, (_, job_id) in held:
            if job_id:
                self.db.announce(f"job:{job_id}")
        self.db.announce("run")
        targets = outbox.Targets(c, self._oq, any_channel=any_channel)
        for f, (state, _) in held:
            retry = state is RunState.FAILED and f.decision.retry_at is not None
            outbox.note_finish(c, self._oq, f.run_id, f.attempt, retry, now, targets)
        for _, (state, job_id) in held:
            if state is RunState.DEAD and job_id:
                pause_after_failures(self.db, c, self._oq, job_id, now)

    def _settle_expired(
        self, c: Any, expired: Sequence[Any], now: datetime, on_expired: ExpiredFn
    ) -> list[tuple[Run, Decision]]:
        """Settle other daemons' leases that ran out, as ``on_expired`` decides each: the
        lost attempt recorded ``lost``, its notes, a pause after failures."""
        now_us = to_us(now)
        ended: list[tuple[Run, Decision]] = []
        for r in expired:
            lease = ExpiredLease(
                r["id"], r["job_id"], r["attempt"], r["max_attempts"], bool(r["cancel_requested"])
            )
            decision = on_expired(lease)
            c.execute(self.dq.attempt_lost, (now_us, lease.run_id, lease.attempt))
            c.execute(
                self.dq.settle_expired,
                {
                    "state": decision.state.value,
                    "error": decision.error,
                    "now": now_us,
                    "run_id": lease.run_id,
                },
            )
            if decision.state in (RunState.DEAD, RunState.CANCELLED):
                row = c.execute(self.db.q.run_by_id, (lease.run_id,)).fetchone()
                ended.append((read_run(row, lease.run_id), decision))
            retry = decision.state is RunState.FAILED
            targets = outbox.Targets(c, self._oq)
            outbox.note_finish(c, self._oq, lease.run_id, lease.attempt, retry, now, targets)
            if decision.state is RunState.DEAD:
                pause_after_failures(self.db, c, self._oq, lease.job_id, now)
        return ended

    def next_claim_at(self, now: datetime) -> datetime | None:
        """The earliest future time a run may become claimable (a ``not_before`` or the
        expiry of another daemon's lease); None when nothing waits."""
        now_us = to_us(now)
        a = self.db.read(self.dq.next_not_before, {"now": now_us})[0]["at"]
        b = self.db.read(self.dq.next_lease_expiry, (self.identity.id, now_us))[0]["at"]
        return next_claim_time(a, b)

    def held_status(self, held: Sequence[tuple[int, int]]) -> tuple[frozenset[int], frozenset[int]]:
        """Of the held ``(run_id, attempt)``: those with a cancel request, and those this
        attempt no longer leases (taken over, deleted by ``rm --force``). Read only."""
        rows = self.db.read(self.dq.held_by, (self.identity.id,))
        leased = {(r["id"], r["attempt"]): bool(r["cancel_requested"]) for r in rows}
        cancel = frozenset(run_id for run_id, a in held if leased.get((run_id, a)))
        lost = frozenset(run_id for run_id, a in held if (run_id, a) not in leased)
        return cancel, lost

    def save_output(self, outputs: Sequence[tuple[int, int, bytes, int]]) -> None:
        """Store ``(run_id, attempt, tail, total bytes)`` of running attempts. Fenced."""
        if not outputs:
            return
        with self.db.write() as c:
            c.executemany(self.dq.save_output, output_params(self.identity.id, outputs))

    def secret_values(self, names: Sequence[str]) -> dict[str, bytes]:
        """The values of the named secrets that exist, read when an attempt starts (a
        rotated secret reaches the next attempt). Read only."""
        return secrets.secret_values(self.db, self._oq, names)

    def record_hook(self, run_id: int, status: str) -> None:
        """How the run's ``--on-failure`` command ended (``exit 0``, ``signal 9``, ...)."""
        with self.db.write() as c:
            c.execute(self.dq.record_hook, (status, run_id))

    def get_run(self, run_id: int) -> Run:
        rows = self.db.read(self.db.q.run_by_id, (run_id,))
        return read_run(rows[0] if rows else None, run_id)

    # ------------------------------------------------------------------ the outbox

    def exchange_notifications(
        self,
        now: datetime,
        outcomes: Sequence[Outcome],
        *,
        limit: int,
        lease_seconds: float,
    ) -> tuple[list[Outgoing], datetime | None]:
        """One transaction: record each delivery's outcome (fenced: only while this daemon
        leases it; sent and failed raise the counters), lease up to ``limit`` due
        notifications (pending, their try due, not leased by a live daemon: a dead
        daemon's lease is free at once), oldest first; and when the next is due."""
        return self.outbox.exchange(
            self.identity.id, now, outcomes, limit=limit, lease_seconds=lease_seconds
        )

    def next_notification_at(self, now: datetime) -> datetime | None:
        """When a notification may next be leased (None: none pending). Read only."""
        return self.outbox.next_due(now)

    def note_overdue(self, now: datetime) -> datetime | None:
        """For the scheduler-lease holder: write ``late`` (runs not started by window +
        grace) and ``long`` (attempts running past warn-after) notifications, each once,
        and drop undelivered ones older than 7 days. Returns when the next late or long
        falls due."""
        return self.outbox.note_overdue(now)

    def notification_context(
        self, job_id: int | None, run_id: int | None, attempt: int | None
    ) -> tuple[Job | None, Run | None, Run | None, Attempt | None, bytes]:
        """What a notification's body shows: its job and the job's last run (its most
        recent window that was not skipped), its run and attempt (each None when gone) and
        the attempt's stored output tail."""
        job = self.get_job_by_id(job_id) if job_id is not None else None
        last_run = None
        if job is not None:
            ids = self.db.read(self._oq(outbox.LAST_RUN_ID), (job.id,))
            last_run = self._run_or_none(int(ids[0]["id"])) if ids else None
        run = None if run_id is None else self._run_or_none(run_id)
        if run is None:
            return job, last_run, None, None, b""
        number = attempt if attempt is not None else run.attempt
        found = self.db.read(self._oq(outbox.ATTEMPT_ROW), (run.id, number))
        if not found:
            return job, last_run, run, None, b""
        output = bytes(found[0]["output"] or b"")
        return job, last_run, run, attempt_from_row(found[0]), output

    def _run_or_none(self, run_id: int) -> Run | None:
        rows = self.db.read(self.db.q.run_by_id, (run_id,))
        return run_from_row(rows[0]) if rows else None


def _move(job_id: int, p: Plan | None, now: datetime | None = None) -> dict[str, object]:
    """The parameters of ``move_schedule``: after a firing plan ``p``, or after a reboot
    run recorded at ``now`` (no next run: a reboot job fires once a boot)."""
    if p is None:
        assert now is not None
        return {
            "next": None,
            "last": to_us(now),
            "missed": 0,
            "state": JobState.ACTIVE.value,
            "boot_id": None,
            "job_id": job_id,
        }
    return {
        "next": opt_us(p.next_run_at),
        "last": opt_us(p.last_window_at),
        "missed": p.missed_increment,
        "state": (JobState.DONE if p.done else JobState.ACTIVE).value,
        "boot_id": None,
        "job_id": job_id,
    }


__all__ = ["Daemons"]
