"""Why a run waits (jobctl(1), WATCHING A RUN): the facts the store reads about a run that
is not running, and the one reason said of them (decided by
:func:`jobctl.planner.waiting_reason`).

Apart from :mod:`jobctl.models`: only ``inspect`` and the dashboard ask why a run waits,
and a command's start pays for each frozen dataclass it imports (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from .models import RunState


class WaitReason(str, Enum):
    """Why a ``pending`` or ``failed`` run is not running (jobctl(1), WATCHING A RUN)."""

    NOT_DUE = "not_due"
    BACKOFF = "backoff"
    LOCK = "lock"
    OVERLAP = "overlap"
    PAUSED = "paused"
    NO_DAEMON = "no_daemon"
    WORKERS = "workers"
    MAX_RUNNING = "max_running"
    #: no live daemon carries every tag of the job's ``--on``
    TAGS = "tags"
    #: a maintenance window holds every start (``pause --all``)
    MAINTENANCE = "maintenance"
    #: a watched job's run: its work runs elsewhere and starts and ends it by pinging
    PING = "ping"


@dataclass(frozen=True)
class WaitFacts:
    """What the store knows about a run that waits, read in one go from the same predicates
    the claim uses (see :meth:`jobctl.store.protocol.CommandStore.waiting`).

    ``claimable`` is the claim's own condition (minus the reserved-worker quota, which
    belongs to each daemon); the other fields say which part of it fails.
    """

    run_id: int
    job_name: str
    state: RunState
    not_before: datetime | None
    #: ``not_before <= now``
    due: bool
    #: the job is paused
    paused: bool
    #: a lock of this run held by a leased run: (lock name, holder run id), first by name
    lock: tuple[str, int] | None
    #: with overlap forbid/replace: the lowest id of another leased run of the same job
    overlap_run_id: int | None
    claimable: bool
    live_daemons: int
    #: runs leased right now (by any daemon)
    leased_runs: int
    #: the run's priority, and what each live daemon can run (read for a claimable run)
    priority: int = 0
    daemons: tuple[DaemonLoad, ...] = ()
    #: the job's ``--max-running`` (None: no cap) and its runs leased right now
    max_running: int | None = None
    job_leased: int = 0
    #: the job's ``--on`` tags (a daemon must carry every one)
    on_tags: tuple[str, ...] = ()
    #: a maintenance window (``pause --all``) is in force, and when it ends (None: at
    #: ``resume --all``)
    maintenance: bool = False
    maintenance_until: datetime | None = None
    #: a watched job's run (reason ``watch``): no daemon takes it, its pings do
    watched: bool = False


@dataclass(frozen=True)
class DaemonLoad:
    """A live daemon's workers and what holds them: ``workers`` (None for a daemon that
    does not say), the ``reserved`` ones only runs of priority ``reserved_priority`` or more
    may hold, its ``leased`` runs and how many of them are below that priority."""

    workers: int | None
    reserved: int
    reserved_priority: int | None
    leased: int
    low_leased: int
    #: its tags (``daemon --tag`` and ``host:HOSTNAME``)
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Waiting:
    """The one reason a run waits, with a line for people (``detail``) and, where it
    applies, the time it waits for (``until``), the lock and the run that holds it."""

    reason: WaitReason
    detail: str
    until: datetime | None = None
    lock: str | None = None
    run_id: int | None = None
