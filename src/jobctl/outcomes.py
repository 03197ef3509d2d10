"""What an attempt comes to and what the planner decides: how an attempt ended
(:class:`AttemptResult`) and what that does to its run (:class:`Decision`), the windows
recorded for a due job (:class:`Window`, :class:`Plan`), a backfill's plan and a window's
coverage (:class:`BackfillPlan`, :class:`Coverage`).

Apart from :mod:`jobctl.models`: the daemon and the history commands use them, a listing
of jobs does not, and a command's start pays for each frozen dataclass it imports
(docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .models import RunReason, RunState, SkipReason, StopReason


@dataclass(frozen=True)
class AttemptResult:
    """How one attempt ended, from the child process to the row.

    ``exit_code`` is the command's status (None when a signal ended it or it never
    started); ``signal`` the signal that ended it; ``spawn_error`` why it could not start.
    ``output`` is the tail kept (at most ``OUTPUT_LIMIT_BYTES``), ``output_bytes`` all the
    bytes it wrote.
    """

    exit_code: int | None
    signal: int | None = None
    stop_reason: StopReason | None = None
    spawn_error: str | None = None
    output: bytes = b""
    output_bytes: int = 0
    #: what the kernel counted for the reaped main process and the processes it waited
    #: for (README, Run policies and what a run costs): CPU seconds in user and system mode, the
    #: largest resident set
    cpu_user: float | None = None
    cpu_system: float | None = None
    max_rss: int | None = None
    #: a limit the kernel stopped the attempt for (``cpu limit``)
    limit_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error(self) -> str | None:
        """The attempt's ``last_error`` text (jobctl(1), ENVIRONMENT: JOBCTL_ERROR), None when it
        succeeded."""
        if self.spawn_error is not None:
            return self.spawn_error
        if self.stop_reason is not None:
            return self.stop_reason.value
        if self.limit_error is not None:
            return self.limit_error
        if self.signal is not None:
            return f"signal {self.signal}"
        if self.exit_code == 0:
            return None
        return f"exit {self.exit_code}"


@dataclass(frozen=True)
class Window:
    """One window the scheduler decided to record for a job: a run (``pending``) or a
    ``skipped`` row, with why (``reason``, ``skip_reason``) and from when it may start."""

    scheduled_for: datetime
    state: RunState
    reason: RunReason
    skip_reason: SkipReason | None = None
    catchup_from: datetime | None = None
    not_before: datetime | None = None
    #: a run not started by then is skipped (jobctl(1), jobctl add ``--deadline``)
    deadline_at: datetime | None = None


@dataclass(frozen=True)
class Plan:
    """What the planner decided for one due job at one turn: the rows to record, where the
    schedule moves, and (``--overlap replace``) whether the job's open runs make way."""

    windows: list[Window]
    next_run_at: datetime | None
    last_window_at: datetime | None
    missed_increment: int = 0
    done: bool = False
    replace_open: bool = False


@dataclass(frozen=True)
class BackfillPlan:
    """What ``backfill`` does to a range of windows (decided by
    :func:`jobctl.planner.plan_backfill`): the windows that get a new ``pending`` run, the
    runs (ids) made ``pending`` again, and how many windows are left alone."""

    create: list[datetime]
    requeue: list[int]
    left: int


@dataclass(frozen=True)
class Coverage:
    """One window of ``coverage``: its run's state, id and skip reason, or all None where
    no row is kept for it."""

    scheduled_for: datetime
    state: RunState | None = None
    run_id: int | None = None
    skip_reason: SkipReason | None = None


@dataclass(frozen=True)
class Decision:
    """What an attempt's end does to its run (decided by :func:`jobctl.planner.decide`).

    ``state`` is succeeded, failed (retried at ``retry_at``), dead, cancelled, or pending
    (interrupted by a shutdown: the attempt does not count). When a cancel was requested
    while the attempt ran, ``if_cancelled`` is written instead. ``error`` is the run's
    ``last_error``.
    """

    state: RunState
    error: str | None
    retry_at: datetime | None = None
    if_cancelled: RunState | None = None
    counts_attempt: bool = True
