"""Pure scheduling logic: which windows are due, catch-up, retry backoff, the fire heap.

Nothing here reads the clock or the database: ``now`` and the job come in as arguments,
so the tests drive it with plain datetimes.
"""

from __future__ import annotations

import functools
import heapq
import random
from array import array
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from . import triggers
from .clock import iso
from .models import (
    MAX_BACKOFF_SECONDS,
    MAX_SKIPPED_ROWS,
    Catchup,
    Job,
    Overlap,
    Run,
    RunReason,
    RunState,
    SkipReason,
    StopReason,
    Trigger,
    TriggerKind,
    after_parts,
)
from .outcomes import AttemptResult, BackfillPlan, Coverage, Decision, Plan, Window
from .waits import DaemonLoad, WaitFacts, Waiting, WaitReason

#: a loop that wakes this much later than it planned counts the gap as missed
#: (jobctl(1), CATCH-UP AND DST)
MISSED_GAP_SECONDS = 60.0
#: cron windows are enumerated at most this far when catching up (then only counted)
MAX_ENUMERATED_WINDOWS = 2_000_000


@functools.lru_cache(maxsize=4096)
def next_fire(trigger: Trigger, after: datetime) -> datetime | None:
    """:func:`triggers.next_fire`, memoised per (trigger, instant): the jobs of a burst
    share their trigger and window, so one computation serves them all (pure function of
    hashable frozen values; raises as the original, uncached)."""
    return triggers.next_fire(trigger, after)


def retry_delay_seconds(attempt: int, backoff_seconds: float, rng: random.Random) -> float:
    """Delay before retry ``attempt`` (1-based): ``min(backoff·2^(k-1), 1h)`` × U[0.5, 1]."""
    base = min(backoff_seconds * (2 ** max(attempt - 1, 0)), MAX_BACKOFF_SECONDS)
    return float(base * rng.uniform(0.5, 1.0))


def _jittered(when: datetime, jitter_seconds: float, rng: random.Random) -> datetime:
    if jitter_seconds <= 0:
        return when
    return when + timedelta(seconds=rng.random() * jitter_seconds)


def _due_windows(job: Job, now: datetime, keep: int) -> tuple[int, datetime | None, list[datetime]]:
    """(count, earliest, the ``keep`` latest) windows in [job.next_run_at, now]."""
    first = job.next_run_at
    if first is None or first > now:
        return 0, None, []
    trig = job.trigger
    if trig.kind is not TriggerKind.ONCE and not trig.after_completion:
        # the common case, one window due (its successor is the memoised next fire)
        after = next_fire(trig, first)
        if after is None or after > now:
            return 1, first, [first]
    if triggers.is_fixed_rate(trig):
        count = 1 + triggers.count_fires(trig, first, now)
        # only the last ``keep`` windows are enumerated, however long the gap
        start = first + timedelta(seconds=trig.every_seconds or 0) * max(count - keep, 0)
        tail: deque[datetime] = deque([start], maxlen=keep)
        tail.extend(triggers.iter_fires(trig, start, now))
        return count, first, list(tail)
    if trig.kind is not TriggerKind.CRON and trig.kind is not TriggerKind.SET:
        return 1, first, [first]
    count = 1
    tail = deque([first], maxlen=keep)
    for w in triggers.iter_fires(trig, first, now):
        count += 1
        tail.append(w)
        if count >= MAX_ENUMERATED_WINDOWS:
            break
    return count, first, list(tail)


def plan_due(
    job: Job,
    now: datetime,
    *,
    missed: bool,
    rng: random.Random,
    has_leased_run: bool = False,
    has_waiting_run: bool = False,
    maintenance: Sequence[tuple[datetime, datetime | None]] = (),
) -> Plan | None:
    """Decide the rows for a job whose next window is due (``job.next_run_at <= now``).

    ``missed`` says the windows passed while no scheduler ran (start-up, a takeover, or a
    loop that woke more than a minute late); the job's catch-up policy then applies:
    ``skip`` records them skipped, ``once`` runs the latest with ``catchup_from`` the
    earliest, ``all`` runs the ``catchup_limit`` latest, oldest first. At most
    ``MAX_SKIPPED_ROWS`` skipped rows are written; every missed window that does not run
    counts in ``missed_increment``. Overlap: with ``forbid`` a window that would run while
    ``has_leased_run`` is recorded skipped (``overlap``); with ``queue`` one run waits at
    most (``has_waiting_run``: one already does); with ``replace`` the plan asks for the
    job's open runs to make way. A window excluded by ``--except`` or a calendar is
    recorded skipped (``excluded``) whatever else applies; it is neither run nor missed.
    A window inside one of the ``maintenance`` windows (``[since, end)``, end None: still
    in force) and not excluded is recorded skipped (``maintenance``) whatever the catch-up
    policy, and is not counted missed. After the last window of an active range the job is
    done. Returns None when nothing is due.
    """
    spec = job.spec
    keep = MAX_SKIPPED_ROWS + max(spec.catchup_limit, 1)
    count, earliest, tail = _due_windows(job, now, keep)
    if count == 0 or earliest is None:
        return None
    last = tail[-1]
    windows: list[Window] = []
    missed_increment = 0
    if spec.ping_key is not None:
        return _plan_watched(job, now, missed=missed, count=count, tail=tail)
    if spec.excepts or job.except_dates:
        tz = job.trigger.tz
        out = [w for w in tail if triggers.excluded(spec.excepts, job.except_dates, tz, w)]
        if out:
            gone = set(out)
            tail = [w for w in tail if w not in gone]
            count -= len(out)
            windows.extend(
                Window(w, RunState.SKIPPED, RunReason.SCHEDULE, SkipReason.EXCLUDED)
                for w in out[-MAX_SKIPPED_ROWS:]
            )
            if not tail:
                count = 0
            elif earliest in gone:
                earliest = tail[0]
    if not missed:
        for w in tail:
            windows.append(
                Window(
                    w,
                    RunState.PENDING,
                    RunReason.SCHEDULE,
                    not_before=_jittered(w, spec.jitter_seconds, rng),
                )
            )
    else:
        if spec.catchup is Catchup.SKIP:
            run_n = 0
        elif spec.catchup is Catchup.ONCE:
            run_n = 1
        else:
            run_n = min(spec.catchup_limit, count)
        run_n = min(run_n, len(tail))
        skipped = tail[: len(tail) - run_n]
        running = tail[len(tail) - run_n :]
        missed_increment = count - run_n
        for w in skipped[-MAX_SKIPPED_ROWS:]:
            windows.append(Window(w, RunState.SKIPPED, RunReason.SCHEDULE, SkipReason.MISSED))
        for w in running:
            frm = earliest if spec.catchup is Catchup.ONCE else w
            windows.append(
                Window(w, RunState.PENDING, RunReason.CATCHUP, catchup_from=frm, not_before=now)
            )
    if len(windows) > 1:
        windows.sort(key=lambda w: w.scheduled_for)
    trig = job.trigger
    done = False
    if trig.kind is TriggerKind.ONCE:
        nxt = None
        done = True
    elif triggers.is_fixed_delay(trig):
        # the next window is set when this run ends; skipped: one interval from now
        nxt = None if any(w.state is RunState.PENDING for w in windows) else (next_fire(trig, now))
    else:
        nxt = next_fire(trig, max(last, now) if missed else last)
        done = nxt is None and trig.active_until is not None
    if spec.deadline_seconds is not None:
        windows = [
            replace(w, deadline_at=deadline_at(w.scheduled_for, w.reason, spec.deadline_seconds))
            if w.state is RunState.PENDING
            else w
            for w in windows
        ]
    if maintenance:
        held = [
            w.skip_reason is not SkipReason.EXCLUDED
            and in_maintenance(w.scheduled_for, maintenance)
            for w in windows
        ]
        missed_increment -= sum(
            1
            for w, h in zip(windows, held, strict=True)
            if h and w.skip_reason is SkipReason.MISSED
        )
        windows = [_skipped_maintenance(w) if h else w for w, h in zip(windows, held, strict=True)]
    windows, replace_open = apply_overlap(
        windows, spec.overlap, has_leased_run, has_waiting_run=has_waiting_run
    )
    return Plan(windows, nxt, last, max(missed_increment, 0), done, replace_open)


def in_maintenance(
    instant: datetime, maintenance: Sequence[tuple[datetime, datetime | None]]
) -> bool:
    """Whether ``instant`` falls in one of the maintenance windows ``[since, end)``."""
    return any(since <= instant and (end is None or instant < end) for since, end in maintenance)


def _skipped_maintenance(w: Window) -> Window:
    return replace(
        w,
        state=RunState.SKIPPED,
        skip_reason=SkipReason.MAINTENANCE,
        catchup_from=None,
        not_before=None,
        deadline_at=None,
    )


def _plan_watched(
    job: Job, now: datetime, *, missed: bool, count: int, tail: list[datetime]
) -> Plan:
    """A watched job's windows (README "Watching jobs that jobctl does not run"): each one
    is a run of reason ``watch`` that pings start and end; catch-up, overlap, jitter and
    deadlines do not apply. Windows that passed while no scheduler ran were not watched:
    the latest is recorded (a ping may still end it), the others ``skipped`` (missed)."""
    windows: list[Window] = []
    missed_increment = 0
    running = tail
    if missed and len(tail) > 1:
        running = tail[-1:]
        missed_increment = count - 1
        for w in tail[:-1][-MAX_SKIPPED_ROWS:]:
            windows.append(Window(w, RunState.SKIPPED, RunReason.WATCH, SkipReason.MISSED))
    for w in running:
        windows.append(Window(w, RunState.PENDING, RunReason.WATCH, not_before=w))
    last = tail[-1]
    nxt = next_fire(job.trigger, max(last, now) if missed else last)
    return Plan(windows, nxt, last, missed_increment)


def apply_overlap(
    windows: list[Window],
    overlap: Overlap,
    has_leased_run: bool,
    *,
    has_waiting_run: bool = False,
) -> tuple[list[Window], bool]:
    """Overlap policy (jobctl(1), jobctl add --overlap) on the windows a job fires while
    ``has_leased_run`` says whether one of its runs is leased and ``has_waiting_run`` whether one is
    open and not leased (``pending`` or ``failed``). Returns the windows and whether open runs make
    way.

    ``queue`` keeps at most one run waiting: the first window to run when none waits,
    every later one skipped (``overlap``); it never runs two at once (the claim sees to
    that, as for ``forbid``)."""
    runs = any(w.state is RunState.PENDING for w in windows)
    if overlap is Overlap.REPLACE:
        return windows, runs
    if overlap is Overlap.FORBID and has_leased_run:
        return [_skipped_overlap(w) if w.state is RunState.PENDING else w for w in windows], False
    if overlap is Overlap.QUEUE:
        room = 0 if has_waiting_run else 1
        out = []
        for w in windows:
            if w.state is RunState.PENDING:
                if room:
                    room -= 1
                else:
                    w = _skipped_overlap(w)
            out.append(w)
        return out, False
    return windows, False


def _skipped_overlap(w: Window) -> Window:
    return replace(w, state=RunState.SKIPPED, skip_reason=SkipReason.OVERLAP, deadline_at=None)


def deadline_at(
    scheduled_for: datetime, reason: RunReason, deadline_seconds: float | None
) -> datetime | None:
    """The instant after which a run that has not started never starts (jobctl(1),
    jobctl add ``--deadline``): its window plus the deadline; None without one, and for a manual run
    (exempt)."""
    if deadline_seconds is None or reason is RunReason.MANUAL:
        return None
    return scheduled_for + timedelta(seconds=deadline_seconds)


def should_pause(recent_states: Iterable[RunState], pause_after_failures: int | None) -> bool:
    """Whether a job pauses itself (jobctl(1), jobctl add ``--pause-after-failures N``): its N most
    recent finished runs (``succeeded`` or ``dead``, newest first, as given) all ended
    ``dead``. Fewer than N of them: not yet."""
    if not pause_after_failures:
        return False
    for n, state in enumerate(recent_states, 1):
        if state is not RunState.DEAD:
            return False
        if n >= pause_after_failures:
            return True
    return False


def after_fires(job: Job, upstream_state: RunState) -> bool:
    """Whether a run of this ``--after`` job's upstream that ended in ``upstream_state``
    fires it (jobctl(1), jobctl add --after)."""
    if job.trigger.kind is not TriggerKind.AFTER or job.trigger.expr is None:
        return False
    return upstream_state.value in after_parts(job.trigger.expr)[1]


def next_after_completion(job: Job, ended_at: datetime) -> datetime | None:
    """A fixed-delay job's next window: its interval after its last run ended."""
    return triggers.next_fire(job.trigger, ended_at)


def decide(
    run: Run, attempt: int, result: AttemptResult, now: datetime, rng: random.Random
) -> Decision | None:
    """What the end of ``attempt`` of ``run`` does to the run (jobctl(1), jobctl add: --retries,
    --backoff, --ok-exit, --no-retry-exit).

    Succeeded on exit 0 or an exit code of the run's ``ok_exit``; dead at once on one of
    its ``no_retry_exit``; a shutdown's kill puts the run back to pending without counting
    the attempt; a cancel ends it cancelled; any other failure is retried after the
    backoff while attempts remain (counted from the current set's ``attempt_base``), else
    the run is dead. A cancel requested while it ran turns a failure into cancelled
    (``if_cancelled``). None when the lease was lost: nothing may be written.
    """
    stop = result.stop_reason
    if stop is StopReason.LOST:
        return None
    if stop is StopReason.INTERRUPTED:
        return Decision(RunState.PENDING, "interrupted", retry_at=now, counts_attempt=False)
    if stop is StopReason.CANCELLED:
        return Decision(RunState.CANCELLED, "cancelled")
    settings = run.settings
    if result.ok or (
        result.exit_code in settings.ok_exit
        and result.stop_reason is None
        and result.spawn_error is None
        and result.limit_error is None
    ):
        return Decision(RunState.SUCCEEDED, None)
    if result.exit_code is not None and result.exit_code in settings.no_retry_exit:
        return Decision(RunState.DEAD, result.error, if_cancelled=RunState.CANCELLED)
    if attempt < run.max_attempts:
        k = attempt - run.attempt_base
        delay = retry_delay_seconds(k, run.settings.backoff_seconds, rng)
        return Decision(
            RunState.FAILED,
            result.error,
            retry_at=now + timedelta(seconds=delay),
            if_cancelled=RunState.CANCELLED,
        )
    return Decision(RunState.DEAD, result.error, if_cancelled=RunState.CANCELLED)


def decide_expired(attempt: int, max_attempts: int, cancel_requested: bool) -> Decision:
    """A run whose daemon lost its lease (died, cut off): its attempt is ``lost``; it is
    cancelled if that was asked, dead when out of attempts, else claimable again now."""
    if cancel_requested:
        return Decision(RunState.CANCELLED, "cancelled")
    if attempt >= max_attempts:
        return Decision(RunState.DEAD, "lost")
    return Decision(RunState.FAILED, "lost")


#: the states of a window's run that ``backfill`` makes pending again (jobctl(1), jobctl backfill)
BACKFILL_REQUEUES = frozenset({RunState.SKIPPED, RunState.DEAD})


def plan_backfill(
    windows: Sequence[datetime], runs: Mapping[datetime, tuple[int, RunState]]
) -> BackfillPlan:
    """What ``backfill`` does to ``windows`` (oldest first), given ``runs``: the id and
    state of the run kept for each window that has one.

    A window with no run gets one; a window whose run is ``skipped`` or ``dead`` has it
    made pending again; every other window is left alone, so a second call over the same
    range creates and requeues nothing (unless a requeued run ended dead again).
    """
    create: list[datetime] = []
    requeue: list[int] = []
    left = 0
    for window in windows:
        run = runs.get(window)
        if run is None:
            create.append(window)
        elif run[1] in BACKFILL_REQUEUES:
            requeue.append(run[0])
        else:
            left += 1
    return BackfillPlan(create, requeue, left)


def plan_coverage(
    windows: Sequence[datetime],
    runs: Mapping[datetime, Run],
    excluded: Iterable[datetime] = (),
) -> list[Coverage]:
    """Each of ``windows`` (oldest first) with the run kept for it, or none
    (jobctl(1), jobctl coverage); a
    window of ``excluded`` without a row is ``skipped`` (``excluded``): it was never to
    run, whether or not its row was written yet or kept."""
    out: list[Coverage] = []
    out_of = set(excluded)
    for window in windows:
        run = runs.get(window)
        if run is None and window in out_of:
            out.append(Coverage(window, RunState.SKIPPED, None, SkipReason.EXCLUDED))
        elif run is None:
            out.append(Coverage(window))
        else:
            out.append(Coverage(window, run.state, run.id, run.skip_reason))
    return out


def history_cutoff(
    keep_for_seconds: float | None, now: datetime, *, beyond_kept: datetime | None = None
) -> datetime | None:
    """Retention's cut for one job (jobctl(1), jobctl add's --keep-runs and --keep-for): its
    finished runs whose window is at or before the time returned are deleted (None: none).
    ``beyond_kept``: the window of its newest finished run beyond the ``--keep-runs`` N it
    keeps (None: it keeps no more); ``keep_for_seconds``: a run whose window is before
    ``now`` minus that is past ``--keep-for``. The later of the two cuts wins."""
    cuts = [] if beyond_kept is None else [beyond_kept]
    if keep_for_seconds is not None:
        cuts.append(now - timedelta(seconds=keep_for_seconds) - timedelta(microseconds=1))
    return max(cuts) if cuts else None


def waiting_reason(facts: WaitFacts | None) -> Waiting | None:
    """The one reason a run waits (jobctl(1), WATCHING A RUN), from the facts the store read with
    the claim's own predicates; None for a run that is leased or final (``facts`` None or not
    ``pending``/``failed``).

    The reasons are ordered by what must change first for the run to start: a paused job
    (nothing runs it until ``resume``), no live daemon; then a run the claim would take
    (``claimable``) waits only for a free worker (``workers``); else its time (``backoff``
    for a retry, else ``not_due``), a held lock, a leased run of the same job (overlap),
    the job's ``--max-running`` cap (``max_running``).
    """
    if facts is None or facts.state not in (RunState.PENDING, RunState.FAILED):
        return None
    if facts.watched:
        return Waiting(WaitReason.PING, "its work runs elsewhere: it waits for its start ping")
    if facts.paused:
        return Waiting(WaitReason.PAUSED, f"job {facts.job_name} is paused (jobctl resume)")
    if facts.maintenance:
        end = facts.maintenance_until
        return Waiting(
            WaitReason.MAINTENANCE,
            f"maintenance until {iso(end)}" if end else "maintenance until resume --all",
            until=end,
        )
    if facts.live_daemons == 0:
        return Waiting(WaitReason.NO_DAEMON, "no daemon is running; start one with jobctl daemon")
    if facts.on_tags and not _tagged(facts):
        tags = ", ".join(facts.on_tags)
        return Waiting(WaitReason.TAGS, f"no live daemon carries every tag of --on {tags}")
    if facts.claimable:
        return _workers(facts)
    if not facts.due:
        when = iso(facts.not_before)
        if facts.state is RunState.FAILED:
            return Waiting(WaitReason.BACKOFF, f"retry at {when}", until=facts.not_before)
        return Waiting(WaitReason.NOT_DUE, f"due at {when}", until=facts.not_before)
    if facts.lock is not None:
        name, holder = facts.lock
        return Waiting(
            WaitReason.LOCK, f"lock {name} is held by run {holder}", lock=name, run_id=holder
        )
    if facts.overlap_run_id is not None:
        return Waiting(
            WaitReason.OVERLAP,
            f"run {facts.overlap_run_id} of job {facts.job_name} is running",
            run_id=facts.overlap_run_id,
        )
    if facts.max_running is not None and facts.job_leased >= facts.max_running:
        n, cap = facts.job_leased, facts.max_running
        return Waiting(
            WaitReason.MAX_RUNNING,
            f"{n} of {cap} run{'' if cap == 1 else 's'} of {facts.job_name} running",
        )
    return _workers(facts)  # not reached while the store's facts agree


def _tagged(facts: WaitFacts) -> list[DaemonLoad]:
    """The live daemons that may claim the run: those carrying every tag of its job."""
    need = set(facts.on_tags)
    return [d for d in facts.daemons if need <= set(d.tags)]


def _workers(facts: WaitFacts) -> Waiting:
    """A claimable run waits for a worker: every one is busy, or the free ones are
    reserved for runs of a higher priority than this one's (``daemon --reserved K
    --reserved-priority P``) and the runs below P hold all the others. Only the daemons
    that carry the job's ``--on`` tags count."""
    free = [d for d in _tagged(facts) if d.workers is None or d.leased < d.workers]
    quota = [
        d
        for d in free
        if d.workers is not None
        and d.reserved_priority is not None
        and d.reserved > 0
        and facts.priority < d.reserved_priority
        and d.low_leased >= d.workers - d.reserved
    ]
    if free and len(quota) == len(free):
        d = quota[0]
        k, p, low = d.reserved, d.reserved_priority, d.low_leased
        return Waiting(
            WaitReason.WORKERS,
            f"due and free: the {k} reserved worker{'' if k == 1 else 's'} "
            f"{'is' if k == 1 else 'are'} only for priority >= {p} (this run has "
            f"{facts.priority}; {low} run{'' if low == 1 else 's'} below {p} running)",
        )
    n = facts.leased_runs
    return Waiting(
        WaitReason.WORKERS,
        f"due and free: every worker is busy ({n} run{'' if n == 1 else 's'} running)",
    )


_NONE = -(2**63)  # "no current time" in the compact map


class _DueMap:
    """job id -> its current due time (µs): a flat ``array('q')`` indexed by id while ids
    are dense (AUTOINCREMENT ids mostly are: 8 bytes a job), a dict when they are not."""

    def __init__(self, size: int) -> None:
        self._arr: array[int] | None = array("q", [_NONE]) * size
        self._dict: dict[int, int] = {}

    def get(self, job_id: int) -> int | None:
        if self._arr is not None:
            if 0 <= job_id < len(self._arr):
                v = self._arr[job_id]
                return None if v == _NONE else v
            return None
        return self._dict.get(job_id)

    def set(self, job_id: int, due_us: int | None, live: int) -> None:
        arr = self._arr
        if arr is not None:
            if 0 <= job_id < len(arr):
                arr[job_id] = _NONE if due_us is None else due_us
                return
            if due_us is None:
                return
            if 0 <= job_id <= 2 * live + 1024:
                arr.extend(array("q", [_NONE]) * (job_id + 1 - len(arr)))
                arr[job_id] = due_us
                return
            # sparse ids: fall back to a dict of the live entries
            self._dict = {i: v for i, v in enumerate(arr) if v != _NONE}
            self._arr = None
        if due_us is None:
            self._dict.pop(job_id, None)
        else:
            self._dict[job_id] = due_us


class FireHeap:
    """Jobs keyed by next fire time (µs). Stale entries are dropped lazily on pop.

    ``push`` replaces a job's time; ``remove`` forgets it. ``pop_due(now_us)`` returns
    the ids of jobs whose time is ≤ now_us, earliest first. O(log n) per operation.

    Compact for a million waiting jobs: what :meth:`load` gets is kept as two sorted
    ``array('q')`` (time, id) read from the front, and each job's current time in a flat
    array by id (24 bytes a job, no object per job); only jobs pushed later go through a
    ``heapq`` of tuples, folded back into the arrays when it grows.
    """

    def __init__(self) -> None:
        self._base_due: array[int] = array("q")
        self._base_id: array[int] = array("q")
        self._pos = 0
        self._heap: list[tuple[int, int]] = []
        self._due = _DueMap(0)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def load(self, items: Iterable[tuple[int, int]]) -> None:
        """Replace the contents with (due_us, job_id) pairs (read once, lazily: pass the
        store's cursor). Sorted input, as :meth:`DaemonStore.schedule_heads` gives, is
        taken in O(n); other input is sorted first."""
        dues: array[int] = array("q")
        ids: array[int] = array("q")
        ordered = True
        last = (_NONE, _NONE)
        for due, job_id in items:
            if ordered and (due, job_id) < last:
                ordered = False
            last = (due, job_id)
            dues.append(due)
            ids.append(job_id)
        if not ordered:
            # a job listed twice keeps its last time, in the order given
            last_of = {j: d for d, j in zip(dues, ids, strict=True)}
            pairs = sorted((d, j) for j, d in last_of.items())
            dues = array("q", (d for d, _ in pairs))
            ids = array("q", (j for _, j in pairs))
        self._set_base(dues, ids)

    def _set_base(self, dues: array[int], ids: array[int]) -> None:
        top = max(ids) + 1 if ids else 0
        self._due = _DueMap(top if top <= 2 * len(ids) + 1024 else 0)
        n = 0
        keep_d: array[int] = array("q")
        keep_i: array[int] = array("q")
        for due, job_id in zip(dues, ids, strict=True):
            if self._due.get(job_id) is None:
                n += 1
            self._due.set(job_id, due, n)
        # (sorted input) a job listed twice keeps its last time; drop its other entries
        if n != len(ids):
            for due, job_id in zip(dues, ids, strict=True):
                if self._due.get(job_id) == due:
                    keep_d.append(due)
                    keep_i.append(job_id)
            dues, ids = keep_d, keep_i
        self._base_due, self._base_id, self._pos = dues, ids, 0
        self._heap = []
        self._n = n

    def push(self, job_id: int, due_us: int | None) -> None:
        cur = self._due.get(job_id)
        if due_us is None:
            if cur is not None:
                self._n -= 1
                self._due.set(job_id, None, self._n)
            return
        if cur == due_us:
            return
        if cur is None:
            self._n += 1
        self._due.set(job_id, due_us, self._n)
        heapq.heappush(self._heap, (due_us, job_id))
        if len(self._heap) > 2 * self._n + 1024:
            self._compact()

    def remove(self, job_id: int) -> None:
        self.push(job_id, None)

    def _compact(self) -> None:
        pairs = [
            (d, j)
            for d, j in zip(self._base_due[self._pos :], self._base_id[self._pos :], strict=True)
            if self._due.get(j) == d
        ]
        pairs += [(d, j) for d, j in self._heap if self._due.get(j) == d]
        pairs = sorted(set(pairs))
        self._set_base(array("q", (d for d, _ in pairs)), array("q", (j for _, j in pairs)))

    def _head(self) -> tuple[int, int, bool] | None:
        """(due, id, from the base arrays) of the earliest live entry."""
        due_of = self._due.get
        base_due, base_id = self._base_due, self._base_id
        while self._pos < len(base_due) and due_of(base_id[self._pos]) != base_due[self._pos]:
            self._pos += 1
        heap = self._heap
        while heap and due_of(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        if self._pos < len(base_due):
            b = (base_due[self._pos], base_id[self._pos])
            if not heap or b <= heap[0]:
                return b[0], b[1], True
        if heap:
            return heap[0][0], heap[0][1], False
        return None

    def peek(self) -> int | None:
        """The earliest due time (µs), or None when empty."""
        head = self._head()
        return None if head is None else head[0]

    def pop_due(self, now_us: int, limit: int | None = None) -> list[tuple[int, int]]:
        """Remove and return (due_us, job_id) for the jobs due at or before ``now_us``,
        earliest first; at most ``limit`` of them (the rest stay, still due)."""
        out: list[tuple[int, int]] = []
        while limit is None or len(out) < limit:
            head = self._head()
            if head is None or head[0] > now_us:
                return out
            due, job_id, from_base = head
            if from_base:
                self._pos += 1
            else:
                heapq.heappop(self._heap)
            self._n -= 1
            self._due.set(job_id, None, self._n)
            out.append((due, job_id))
        return out
