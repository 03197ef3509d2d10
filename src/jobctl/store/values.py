"""The values the store's methods take and return: frozen dataclasses, no behaviour."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from ..fleet import DaemonInfo, Maintenance
from ..models import Attempt, Job, JobState, Run, RunState
from ..outcomes import AttemptResult, BackfillPlan, Decision, Plan


@dataclass(frozen=True)
class DaemonIdentity:
    """Who a daemon is, given once when its face of the store opens."""

    id: str
    host: str
    pid: int
    #: the machine's boot (``/proc/sys/kernel/random/boot_id``)
    boot_id: str
    #: how long its leases (its row, the scheduler's, its runs') last unless renewed
    lease_seconds: float
    #: what it runs at once (``--workers``), and how many of them only runs of priority
    #: ``reserved_priority`` or more may hold (``--reserved``): ``inspect`` reads them
    workers: int | None = None
    reserved: int = 0
    reserved_priority: int | None = None
    #: ``--tag`` and ``host:HOSTNAME``, sorted: the claim takes a run only when these hold
    #: every tag of its job's ``--on``
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Claimed:
    """A run this daemon now holds, and (when the lease was taken over) what to kill first."""

    run: Run
    #: the process group of the attempt that lost this run on this host, if recorded
    stale_pgid: int | None = None
    #: the run's previous attempt was lost on this host (its processes may still live)
    lost_here: bool = False


@dataclass(frozen=True)
class Status:
    daemons: list[DaemonInfo]
    counts: dict[str, int]
    next_due_at: datetime | None
    #: the maintenance window in force (``pause --all``), if any
    maintenance: Maintenance | None = None


@dataclass(frozen=True)
class Renewal:
    """What one heartbeat learned: leadership, held runs that were lost, cancel requests."""

    leader: bool
    lost: frozenset[int]
    cancel: frozenset[int]


@dataclass(frozen=True)
class Fired:
    """One job whose due windows were recorded: the inserted run ids and what the plan was."""

    job: Job
    plan: Plan
    run_ids: list[int]


@dataclass(frozen=True)
class Finished:
    """The result of recording an attempt's end. ``state`` is the state written, or None
    when the write was fenced out (the attempt no longer held the lease)."""

    state: RunState | None


@dataclass(frozen=True)
class FinishItem:
    """An attempt's end to record (see :meth:`DaemonStore.record_and_claim`)."""

    run_id: int
    attempt: int
    result: AttemptResult
    decision: Decision
    #: the child's pid when it was not recorded while the attempt ran (a short one)
    pid: int | None = None
    #: the run's job (0: not known): its end is announced to the daemons as ``job:ID``
    job_id: int = 0
    #: when the attempt ended (its main process exited), recorded as its end and the
    #: run's, however much later the write comes (the database was unreachable); None:
    #: the time of the write
    ended_at: datetime | None = None


@dataclass(frozen=True)
class RetentionMarks:
    """Where a retention pass started (:meth:`DaemonStore.retention_marks`): the newest run
    id, the runs still open then (pending, leased, failed), and the time. The next pass
    looks only at the jobs of runs that ended since: newer runs, or those open then."""

    max_run_id: int
    open_run_ids: frozenset[int]
    at: datetime


@dataclass(frozen=True)
class TurnResult:
    """What :meth:`DaemonStore.record_and_claim` did: ``finished`` has one entry per
    finish passed in, in the same order; ``claimed`` the runs now held; ``ended`` the
    expired leases of other daemons that ended, with the planner's decision;
    ``next_notification`` when a notification may next be leased (None: none is pending),
    read in the same transaction, so the notifier need not ask again after the turn."""

    finished: list[Finished]
    claimed: list[Claimed]
    ended: list[tuple[Run, Decision]]
    next_notification: datetime | None


@dataclass(frozen=True)
class ExpiredLease:
    """A leased run whose lease ran out under another daemon (it died or was cut off)."""

    run_id: int
    job_id: int
    attempt: int
    max_attempts: int
    cancel_requested: bool


@dataclass(frozen=True)
class IdleFixedDelay:
    """A fixed-delay job with no open run and no next window: it moves on from ``ended_at``."""

    job: Job
    ended_at: datetime


@dataclass(frozen=True)
class DbInfo:
    backend: str
    location: str
    schema_version: int
    jobs: int
    runs: int
    size_bytes: int


class Heads(Protocol):
    """What :meth:`DaemonStore.schedule_heads` returns: sized and iterable."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[tuple[int, int]]: ...


@dataclass(frozen=True)
class CopiedAttempt:
    """One attempt of a copied run, with its stored output tail (``db copy``)."""

    attempt: Attempt
    output: bytes


@dataclass(frozen=True)
class CopiedRun:
    run: Run
    attempts: list[CopiedAttempt]


@dataclass(frozen=True)
class CopiedJob:
    """A job, (with history) its runs, oldest id first, and its revisions (always: they
    are the job's own history, not its runs')."""

    job: Job
    runs: list[CopiedRun]
    revisions: list[Revision] = field(default_factory=list)


class Waker(Protocol):
    """A daemon's end of the wake-ups: readable (``fileno``) when a hint arrived."""

    def fileno(self) -> int: ...

    def drain(self) -> list[str]:
        """Every hint waiting (``job:ID``, ``run`` or ``all``); never blocks."""
        ...

    def close(self) -> None: ...


#: the planner's decision for one due job, applied inside the firing transaction:
#: ``(job, has_leased_run, has_waiting_run) -> Plan | None`` (waiting: a run of the job is
#: pending or failed, what ``--overlap queue`` keeps at one)
#: a due job, whether it has a leased run, whether it has one waiting, and the maintenance
#: windows (``[since, end)``, end None while in force) that may hold its windows
PlanFn = Callable[[Job, bool, bool, Sequence[tuple[datetime, datetime | None]]], "Plan | None"]
#: the planner's decision for an expired lease of another daemon
ExpiredFn = Callable[[ExpiredLease], Decision]


# ------------------------------------------------------------------------- the dashboard


@dataclass(frozen=True)
class JobFacts:
    """What the dashboard's overview needs of every job to filter and rank it, before it
    pages (see jobctl(1), jobctl serve)."""

    id: int
    name: str
    state: JobState
    #: the state of its most recent run (by window) that was not skipped, None without one
    last_state: RunState | None
    #: a run of the job waits for its retry (``failed``)
    failing: bool
    #: the earliest ``not_before`` among its pending and failed runs (due or not)
    oldest_open_due: datetime | None
    #: ``failures`` when ``--pause-after-failures`` paused it, ``user``, or None
    paused_reason: str | None = None
    #: its notifications that ended ``failed`` since the time asked about
    notifications_failed: int = 0


@dataclass(frozen=True)
class StripRun:
    """One run in a job's strip of recent runs on the overview: what a cell shows."""

    id: int
    state: RunState
    scheduled_for: datetime


@dataclass(frozen=True)
class TimelineBar:
    """One attempt on the timeline: its run's job, its span, and what became of it."""

    job_id: int
    job_name: str
    run_id: int
    attempt: int
    started_at: datetime
    #: None while it runs
    finished_at: datetime | None
    #: ``leased`` while it runs; for its run's last attempt the run's state; else ``failed``
    state: str


@dataclass(frozen=True)
class Revision:
    """One change to a job (see jobctl(1), jobctl history): its number (1, 2, ... per job), when,
    who
    (``USER@HOST``, ``api``, ``daemon``), from where (``cli``, ``apply``, ``import``,
    ``api``, ``daemon``), ``{KEY: [old, new]}`` with the keys of the job file, and the
    job's table of the job file after it (what ``rollback`` goes back to)."""

    revision: int
    at: datetime
    who: str
    source: str
    changes: dict[str, list[Any]]
    definition: dict[str, Any]


#: the planner's decision for a backfill, applied inside its transaction:
#: ``(windows, {window: (run id, state)}) -> BackfillPlan`` (:func:`jobctl.planner.plan_backfill`)
BackfillFn = Callable[[Sequence[datetime], Mapping[datetime, tuple[int, RunState]]], BackfillPlan]


@dataclass(frozen=True)
class Backfilled:
    """What a backfill did: the plan, and the runs it created and made pending again (a
    window the scheduler recorded meanwhile is not among them; with a dry run, nothing
    was created and ``requeued`` is what would be)."""

    plan: BackfillPlan
    created: list[int]
    requeued: list[int]
