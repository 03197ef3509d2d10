"""The scheduler role: while this daemon holds the scheduler lease, turn due windows into runs.

It keeps a heap of jobs keyed by their next window, fires the due ones in chunks (one
transaction each) through the planner, a little ahead of their time
(``FIRE_AHEAD_SECONDS``), handles catch-up after a gap, ``@reboot`` once per boot, and
fixed-delay jobs moving on when their run ended. It never touches children nor
claims runs: :meth:`Scheduler.fire_due` says whether runs were created and the loop passes
that on to the executor.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from . import planner
from .clock import from_us, iso, to_us
from .logs import DEBUG, INFO, LogFn
from .models import Job, Overlap, RunReason, RunState
from .outcomes import Plan
from .store import DaemonStore

#: due jobs whose windows are recorded in one transaction, one chunk a loop turn
FIRE_BATCH_JOBS = 50
#: a window is recorded up to this long before its time, decided as at its time: its run
#: waits (``not_due``) until then, so at the instant of a burst only the starts are left.
#: Not a window whose decision depends on what happens before its time (its job has a
#: run going, or ``--overlap replace``): that one is decided at its time.
FIRE_AHEAD_SECONDS = 0.25
_AHEAD_US = int(FIRE_AHEAD_SECONDS * 1_000_000)


#: the jobs whose runs ended are passed on together, at most this often (a burst's ends
#: move their fixed-delay jobs on in one read, not one each)
PASS_ON_SECONDS = 0.05


class Scheduler:
    """The heap and the firing. The loop drives it with four calls: :meth:`on_renewal`
    (what each heartbeat said of the lease), :meth:`runs_ended`, :meth:`turn`, and
    :meth:`next_wake`, the one question it asks: when do you next need a turn?"""

    def __init__(
        self,
        store: DaemonStore,
        *,
        log: LogFn,
        rng: random.Random,
        boot_id: str,
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.log = log
        self.rng = rng
        self.boot_id = boot_id
        self.lease_seconds = lease_seconds
        self.heap = planner.FireHeap()
        #: jobs whose window came up early but is decided only at its time (see
        #: FIRE_AHEAD_SECONDS), keyed by that time
        self.at_time = planner.FireHeap()
        self.leading = False
        #: windows at or before this instant (µs) passed while no scheduler ran: missed
        self.missed_until_us = -1
        self._reload = False
        #: jobs whose runs ended, passed on together at ``_pass_on_at`` (monotonic)
        self._ended: list[int] = []
        self._pass_on_at: float | None = None

    # ------------------------------------------------------------------ what the loop asks

    def next_wake(self, now: datetime, mono: float, *, firing: bool) -> float | None:
        """Seconds from now until this role needs a turn (0: at once), or None: never
        until something wakes the loop. With ``firing`` false (the daemon is stopping)
        only the passing-on of ended runs counts."""
        waits = []
        if self._pass_on_at is not None:
            waits.append(self._pass_on_at - mono)
        head = self.next_due() if firing else None
        if head is not None:
            waits.append((head - now).total_seconds())
        return max(min(waits), 0.0) if waits else None

    def turn(self, now: datetime, mono: float, *, firing: bool) -> bool:
        """Fire one chunk of due windows (with ``firing``) and pass on the runs that
        ended when that is due. Returns whether runs were created."""
        created = firing and self.fire_due(now)
        if self._pass_on_at is not None and mono >= self._pass_on_at:
            ended, self._ended, self._pass_on_at = self._ended, [], None
            if self.on_runs_ended(ended, now):
                created = True
        return created

    def runs_ended(self, job_ids: list[int], mono: float) -> None:
        """Runs of these jobs ended here: while leading, they are passed on within
        PASS_ON_SECONDS (otherwise the store told the leader when it recorded them)."""
        if not self.leading or not job_ids:
            return
        self._ended += job_ids
        if self._pass_on_at is None:
            self._pass_on_at = mono + PASS_ON_SECONDS

    def on_renewal(self, leader: bool, now: datetime) -> None:
        """A heartbeat said whether this daemon holds the scheduler lease."""
        if leader and not self.leading:
            self.take_lease(now)
        elif not leader and self.leading:
            self.lose_lease()
        elif leader:
            self.catch_changes(now)

    # ------------------------------------------------------------------ the lease

    def take_lease(self, now: datetime) -> bool:
        """This daemon now holds the scheduler lease: every window that already passed
        was missed (jobctl(1), CATCH-UP AND DST). Loads the heap, records ``@reboot`` runs for this
        boot, and moves on fixed-delay jobs left without a next window. Returns whether runs were
        created."""
        self.leading = True
        self.missed_until_us = to_us(now)
        self._load()
        created = False
        for job in self.store.reboot_jobs():
            if job.last_boot_id == self.boot_id:
                continue
            run_id = self.store.record_reboot(job.id, now, self.boot_id)
            if run_id is not None:
                created = True
                self.log(f"job {job.name}: @reboot run {run_id} (boot {self.boot_id[:8]})")
        if self.on_runs_ended(None, now):
            created = True
        self.log(f"took the scheduler lease: scheduling {len(self.heap)} jobs")
        return created

    def lose_lease(self) -> bool:
        """Stop leading; returns whether it led."""
        led = self.leading
        if led:
            self.log("lost the scheduler lease")
        self.leading = False
        self.heap = planner.FireHeap()
        self.at_time = planner.FireHeap()
        self._ended, self._pass_on_at = [], None
        return led

    def _load(self) -> None:
        self.heap.load(self.store.schedule_heads())
        self.at_time = planner.FireHeap()
        self._reload = False

    def note_gap(self, now: datetime) -> None:
        """The loop woke far later than it planned (a suspend): windows up to now are missed."""
        self.missed_until_us = to_us(now)

    # ------------------------------------------------------------------ firing

    def next_due(self) -> datetime | None:
        """When the next firing is due: the heap's head ``FIRE_AHEAD_SECONDS`` before its
        window, or a window decided at its time (None when not leading or nothing is
        scheduled)."""
        if not self.leading:
            return None
        if self._reload:
            self._load()
        head, later = self.heap.peek(), self.at_time.peek()
        times = [t for t in (later, None if head is None else head - _AHEAD_US) if t is not None]
        return from_us(min(times)) if times else None

    def fire_due(self, now: datetime) -> bool:
        """Record one chunk of the windows due by ``FIRE_AHEAD_SECONDS`` from now in one
        transaction. Returns whether runs were created. A burst of 1,000 windows is 20
        commits, not 1,000, made before its instant; one larger than fits in that lead goes
        on at the instant, the executor claiming the first chunks' runs while the next
        chunk waits (the head is still due, so the loop comes straight back)."""
        if not self.leading:
            return False
        if self._reload:
            self._load()
        now_us = to_us(now)
        due = self.at_time.pop_due(now_us, FIRE_BATCH_JOBS)
        due += self.heap.pop_due(now_us + _AHEAD_US, FIRE_BATCH_JOBS - len(due))
        if not due:
            return False
        missed_until = self.missed_until_us
        later: dict[int, int] = {}

        def plan(
            job: Job,
            has_leased: bool,
            has_waiting: bool,
            maintenance: Sequence[tuple[datetime, datetime | None]],
        ) -> Plan | None:
            window = job.next_run_at
            at = now
            if window is not None and window > now:
                # early: decided as at its time, unless what happens until then decides
                if has_leased or job.spec.overlap is Overlap.REPLACE:
                    later[job.id] = to_us(window)
                    return None
                at = window
            missed = window is not None and to_us(window) <= missed_until
            return planner.plan_due(
                job,
                at,
                missed=missed,
                rng=self.rng,
                has_leased_run=has_leased,
                has_waiting_run=has_waiting,
                maintenance=maintenance,
            )

        fired = self.store.fire([(job_id, due_us) for due_us, job_id in due], now, plan)
        seen = {f.job.id for f in fired}
        created = False
        for f in fired:
            created |= bool(f.run_ids)
            if f.plan.next_run_at is not None:
                self.heap.push(f.job.id, to_us(f.plan.next_run_at))
            windows = f.plan.windows
            on_time = len(windows) == 1 and windows[0].reason is RunReason.SCHEDULE
            plain = f.run_ids and not f.plan.replace_open and not f.plan.missed_increment
            if on_time and windows[0].state is RunState.PENDING and plain:
                continue  # one window on time: its run's own lines say the rest
            n_run = sum(1 for w in windows if w.state is RunState.PENDING)
            n_skip = len(windows) - n_run
            missed = any(w.reason is RunReason.CATCHUP for w in windows)
            what = "missed windows" if missed or f.plan.missed_increment else "window"
            # missed windows are news; a window skipped for an overlap comes every time
            self.log(
                f"job {f.job.name}: {what} up to {iso(f.plan.last_window_at)}: "
                f"{n_run} to run, {n_skip} skipped",
                INFO if missed or f.plan.missed_increment else DEBUG,
            )
        for _, job_id in due:
            if job_id in later:
                self.at_time.push(job_id, later[job_id])
            elif job_id not in seen:  # changed under us (or nothing to do): the stored state
                self.reload_job(job_id)
        return created

    # ------------------------------------------------------------------ changes

    def reload(self) -> None:
        """Read every job's next window again before the next firing (after a store error)."""
        self._reload = True

    def reload_job(self, job_id: int) -> None:
        self.at_time.remove(job_id)
        job = self.store.get_job_by_id(job_id)
        if job is None or job.state.value != "active" or job.next_run_at is None:
            self.heap.remove(job_id)
            return
        self.heap.push(job_id, to_us(job.next_run_at))

    def on_wake(self, messages: Iterable[str], now: datetime) -> None:
        """Hints from the commands: ``all`` reloads the heap, ``job:ID`` one job."""
        if not self.leading:
            return
        ended: list[int] | None = []
        for msg in messages:
            if msg == "all":
                self._reload = True
                ended = None
            elif msg.startswith("job:"):
                try:
                    job_id = int(msg[4:])
                except ValueError:
                    continue
                self.reload_job(job_id)
                if ended is not None:
                    ended.append(job_id)
        if ended is None or ended:
            self.on_runs_ended(ended, now)

    def on_runs_ended(self, job_ids: list[int] | None, now: datetime) -> bool:
        """Runs of these jobs (None: of any job) ended: a fixed-delay job with no open run
        left gets its next window, its interval after the last run ended, and the jobs
        that follow them (``--after``) get their runs. Returns whether runs were created."""
        if not self.leading:
            return False
        for idle in self.store.idle_fixed_delay(job_ids):
            nxt = planner.next_after_completion(idle.job, idle.ended_at)
            if nxt is not None and self.store.set_next_run(idle.job.id, nxt, now):
                self.heap.push(idle.job.id, to_us(nxt))
        fired = self.store.fire_after(job_ids, now)
        for job, run_id, upstream_id in fired:
            self.log(f"job {job.name}: run {run_id} after run {upstream_id}")
        return bool(fired)

    def catch_changes(self, now: datetime) -> None:
        """The safety net at each renewal: re-read the jobs changed lately, in case a
        wake-up was lost (or a writer on another host sent none)."""
        if not self.leading:
            return
        since = now - timedelta(seconds=2 * self.lease_seconds)
        for job_id, next_us in self.store.jobs_changed_since(since):
            self.heap.push(job_id, next_us)
        # an upstream run's end told by a wake-up that was lost
        for job, run_id, upstream_id in self.store.fire_after(None, now):
            self.log(f"job {job.name}: run {run_id} after run {upstream_id}")
