"""Frozen value types shared by every layer: triggers, jobs, runs, attempts, states, policies.

Times are aware UTC datetimes. Durations are float seconds (names end in ``_seconds``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import Enum
from typing import Any, TypeVar

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DIGITS = re.compile(r"[0-9]+")


def _counted(m: re.Match[str]) -> str:
    digits = m.group().lstrip("0") or "0"
    return f"{len(digits):02d}{digits}"


@functools.lru_cache(maxsize=1 << 16)
def natural_key(name: str) -> tuple[str, str]:
    """The key that sorts names as people count: ``job-2`` before ``job-10``.

    Each run of digits is written as its length and its value without leading zeros (so
    it compares by value: ``7`` as ``017``, ``10`` as ``0210``), the rest case-folded; ties
    go by the name as written, so the order is total. A name sorts before the longer
    names it begins. A pair of strings, memoised: the dashboard sorts every job's name at
    each page it serves."""
    return _DIGITS.sub(_counted, name.casefold()), name


OUTPUT_LIMIT_BYTES = 64 * 1024
DEFAULT_CATCHUP_LIMIT = 6
DEFAULT_RETRIES = 2
DEFAULT_BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 3600.0
MAX_SKIPPED_ROWS = 100
#: finished runs a job keeps by default (``--keep-runs``; README, History: what is kept)
DEFAULT_KEEP_RUNS = 1000
#: the most windows one ``backfill`` or ``coverage`` call may cover (jobctl(1), jobctl backfill)
MAX_HISTORY_WINDOWS = 10_000


class TriggerKind(str, Enum):
    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"
    REBOOT = "reboot"
    MANUAL = "manual"
    AFTER = "after"
    #: several cron and fixed-rate triggers: the union of their windows (README, Schedule sets)
    SET = "set"


class JobState(str, Enum):
    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    DONE = "done"


class RunState(str, Enum):
    PENDING = "pending"
    LEASED = "leased"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


FINISHED_RUN_STATES = (
    RunState.SUCCEEDED,
    RunState.DEAD,
    RunState.CANCELLED,
    RunState.SKIPPED,
)


class Catchup(str, Enum):
    SKIP = "skip"
    ONCE = "once"
    ALL = "all"


class Overlap(str, Enum):
    FORBID = "forbid"
    ALLOW = "allow"
    REPLACE = "replace"
    QUEUE = "queue"


class RunReason(str, Enum):
    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    MANUAL = "manual"
    BACKFILL = "backfill"
    AFTER = "after"
    #: a window of a watched job: recorded, started and ended by pings, never claimed
    WATCH = "watch"


class SkipReason(str, Enum):
    MISSED = "missed"
    OVERLAP = "overlap"
    DEADLINE = "deadline"
    #: the window matched an ``--except`` expression or a date of an ``--except-calendar``
    EXCLUDED = "excluded"
    #: the window fell in a maintenance window (``pause --all``)
    MAINTENANCE = "maintenance"


class PausedReason(str, Enum):
    """Why a job is paused (jobctl(1), jobctl add --pause-after-failures): by a user, or by
    ``--pause-after-failures``."""

    USER = "user"
    FAILURES = "failures"


class IoClass(str, Enum):
    """``--io-class``: the I/O scheduling class of an attempt's processes."""

    BEST_EFFORT = "best-effort"
    IDLE = "idle"


#: the states of an upstream run that may fire an ``--after`` job (jobctl(1), jobctl add)
AFTER_STATES = ("succeeded", "dead", "cancelled")


def after_parts(expr: str) -> tuple[str, tuple[str, ...]]:
    """An ``--after JOB[:STATES]`` text as (upstream job name, states); no validation
    beyond the split (see :func:`jobctl.specs.parse_after`)."""
    name, sep, states = expr.partition(":")
    if not sep:
        return name, ("succeeded",)
    return name, tuple(s.strip() for s in states.split(","))


_Made = TypeVar("_Made")


def _whole(cls: type[_Made], fields: dict[str, Any]) -> _Made:
    """An instance of the frozen dataclass ``cls`` from every one of its fields at once
    (the ``of`` of :class:`JobSpec`, :class:`Job` and :class:`Run`)."""
    made = object.__new__(cls)
    made.__dict__.update(fields)
    return made


@dataclass(frozen=True)
class Limits:
    """What an attempt's processes may use (README, Run policies and what a run costs), each None
    when unset: ``nice`` (0-19), ``io_class``, ``memory_max`` (bytes of address space a process),
    ``cpu_max_seconds`` (CPU seconds a process), ``files_max`` (open files a process)."""

    nice: int | None = None
    io_class: IoClass | None = None
    memory_max: int | None = None
    cpu_max_seconds: float | None = None
    files_max: int | None = None

    @property
    def empty(self) -> bool:
        return self == NO_LIMITS

    def to_dict(self) -> dict[str, Any]:
        """The job JSON's ``limits`` object (bytes, seconds; null when unset)."""
        return {
            "nice": self.nice,
            "io_class": None if self.io_class is None else self.io_class.value,
            "memory_max": self.memory_max,
            "cpu_max": self.cpu_max_seconds,
            "files_max": self.files_max,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Limits:
        if not d:
            return NO_LIMITS
        io = d.get("io_class")
        cpu = d.get("cpu_max")
        return cls(
            nice=d.get("nice"),
            io_class=None if io is None else IoClass(io),
            memory_max=d.get("memory_max"),
            cpu_max_seconds=None if cpu is None else float(cpu),
            files_max=d.get("files_max"),
        )


NO_LIMITS = Limits()


class StopReason(str, Enum):
    """Why the daemon ended an attempt itself; an attempt that ended on its own has none."""

    TIMEOUT = "timeout"  # --timeout passed: SIGTERM, SIGKILL 5 s later
    CANCELLED = "cancelled"  # a cancel request (cancel, rm --force, overlap replace)
    INTERRUPTED = "interrupted"  # shutdown grace ran out: back to pending, not counted
    LOST = "lost"  # the lease was lost (taken over, or self-fencing): nothing is written


@dataclass(frozen=True)
class Trigger:
    """When a job fires. Exactly one kind; the other fields are None where they do not apply.

    - cron: ``expr`` is the expression as given (macros kept), read in zone ``tz``;
      ``resolved`` is the same with each ``H`` replaced by the job's numbers (None when
      ``expr`` has no ``H``; see :func:`jobctl.triggers.named`).
    - interval: ``every_seconds`` > 0; fixed rate from ``anchor`` unless ``after_completion``.
    - once: ``at`` (aware UTC).
    - reboot: ``expr`` is ``@reboot``.
    - manual: nothing.
    - set: ``expr`` is its members' texts joined with `` | `` (a cron expression, or
      ``every DURATION``, each fixed-rate member anchored at ``anchor``), read in ``tz``.

    ``active_from`` and ``active_until`` (aware UTC, either may be None) bound the
    windows: one before or after them is no window at all.

    ``phase_only`` (fixed rate, a set's too): the anchor is the instant the trigger was
    set without ``--start`` (add, edit, apply, the API): it only sets the phase and is no
    window, the first being one interval later (``anchor + k*every``, k >= 1). A
    ``--start`` given is a window (k >= 0).
    """

    kind: TriggerKind
    tz: str
    expr: str | None = None
    every_seconds: float | None = None
    anchor: datetime | None = None
    at: datetime | None = None
    after_completion: bool = False
    resolved: str | None = None
    active_from: datetime | None = None
    active_until: datetime | None = None
    phase_only: bool = False


class Event(str, Enum):
    """What a notification reports (README, Getting told)."""

    FAILED = "failed"
    DEAD = "dead"
    SUCCEEDED = "succeeded"
    RECOVERED = "recovered"
    MISSED = "missed"
    LATE = "late"
    LONG = "long"
    ANOMALY = "anomaly"
    PAUSED = "paused"
    TEST = "test"


#: what ``--notify CHANNEL`` tells when it names no events
DEFAULT_EVENTS: tuple[Event, ...] = (
    Event.DEAD,
    Event.RECOVERED,
    Event.MISSED,
    Event.LATE,
    Event.ANOMALY,
    Event.PAUSED,
)


@dataclass(frozen=True)
class NotifyRule:
    """One ``--notify CHANNEL[:EVENTS]`` of a job."""

    channel: str
    events: tuple[Event, ...] = DEFAULT_EVENTS

    def to_json(self) -> dict[str, Any]:
        return {"channel": self.channel, "events": [e.value for e in self.events]}


@dataclass(frozen=True)
class JobSpec:
    """Everything a user sets on a job: what ``add`` creates and ``edit`` changes."""

    name: str
    trigger: Trigger
    command: str
    description: str | None = None
    stdin: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    shell: str = "/bin/sh"
    catchup: Catchup = Catchup.ONCE
    catchup_limit: int = DEFAULT_CATCHUP_LIMIT
    overlap: Overlap = Overlap.FORBID
    timeout_seconds: float | None = None
    retries: int = DEFAULT_RETRIES
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS
    priority: int = 0
    jitter_seconds: float = 0.0
    on_failure: str | None = None
    locks: tuple[str, ...] = ()
    #: the channels told and for which events (README, Getting told); none: the default channels
    notify: tuple[NotifyRule, ...] = ()
    #: a run not started by its window + grace is ``late``
    grace_seconds: float | None = None
    #: an attempt still running after this long is ``long``
    warn_after_seconds: float | None = None
    #: finished runs kept beyond which the scheduler-lease holder deletes
    #: (README, History: what is kept)
    keep_runs: int = DEFAULT_KEEP_RUNS
    #: finished runs whose window is older than this are deleted; None: no age limit
    keep_for_seconds: float | None = None
    #: a run not started within this long of its window is skipped (``deadline``)
    deadline_seconds: float | None = None
    #: pause the job after this many runs in a row end ``dead``
    pause_after_failures: int | None = None
    #: at most this many runs leased at once (``--overlap allow`` only)
    max_running: int | None = None
    #: exit codes that count as success besides 0
    ok_exit: tuple[int, ...] = ()
    #: exit codes after which the run is dead at once
    no_retry_exit: tuple[int, ...] = ()
    #: what the attempt's processes may use (README, Run policies and what a run costs)
    limits: Limits = NO_LIMITS
    #: ``--secret ENV=NAME``: the attempt's ENV gets the secret's value, read when each
    #: attempt starts (never a value here)
    secrets: dict[str, str] = field(default_factory=dict)
    #: ``--env-file PATH``: a file in systemd's EnvironmentFile= syntax read at each attempt
    env_file: str | None = None
    #: a window whose minute (in the job's zone) matches one of these is skipped
    excepts: tuple[str, ...] = ()
    #: a window on a date of one of these calendars (in the job's zone) is skipped
    except_calendars: tuple[str, ...] = ()
    #: ``--on TAG``: only a daemon carrying every one of these tags claims its runs
    on_tags: tuple[str, ...] = ()
    #: a watched job's key: something else runs the work and pings ``/ping/KEY``; such a
    #: job has no command and its runs are never claimed (None: jobctl runs the command)
    ping_key: str | None = None

    @property
    def watched(self) -> bool:
        return self.ping_key is not None

    @classmethod
    def of(cls, fields: dict[str, Any]) -> JobSpec:
        """A JobSpec from every one of its fields at once, as a store reads it (see
        :meth:`Run.of`; ``fields`` must name every field, in order: the stores' tests
        check it)."""
        return _whole(cls, fields)


@dataclass(frozen=True)
class Job:
    """A stored job: the spec plus what the store and the scheduler keep about it."""

    id: int
    spec: JobSpec
    state: JobState
    created_at: datetime
    next_run_at: datetime | None
    missed_total: int
    last_boot_id: str | None
    paused_reason: PausedReason | None = None
    #: the number of its last revision (jobctl(1), jobctl history); 0 before its first
    revision: int = 0
    #: the dates of its ``except_calendars``, kept with the job when a calendar changes
    except_dates: frozenset[date] = frozenset()

    @classmethod
    def of(cls, fields: dict[str, Any]) -> Job:
        """A Job from every one of its fields at once, as a store reads it (see
        :meth:`Run.of`; ``fields`` must name every field, in order: the stores' tests
        check it)."""
        return _whole(cls, fields)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def trigger(self) -> Trigger:
        return self.spec.trigger

    def moved_to(self, next_run_at: datetime | None) -> Job:
        """This job with its next window moved (what ``dataclasses.replace`` gives, at a
        fifth of its cost: it runs once per window fired)."""
        return Job(
            self.id,
            self.spec,
            self.state,
            self.created_at,
            next_run_at,
            self.missed_total,
            self.last_boot_id,
            self.paused_reason,
            self.revision,
            self.except_dates,
        )


@dataclass(frozen=True)
class RunSettings:
    """A run's copy of its job's settings, taken when the run is created."""

    command: str
    shell: str
    cwd: str | None
    env: dict[str, str]
    stdin: str | None
    timeout_seconds: float | None
    backoff_seconds: float
    on_failure: str | None
    ok_exit: tuple[int, ...] = ()
    no_retry_exit: tuple[int, ...] = ()
    limits: Limits = NO_LIMITS
    #: {ENV: secret name}: the names only; the values are read when each attempt starts
    secrets: dict[str, str] = field(default_factory=dict)
    env_file: str | None = None
    #: the job's trigger (kind, expr, tz, anchor) when it has windows, so the attempt
    #: can say which trigger made its window (``JOBCTL_TRIGGER``)
    trigger: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "command": self.command,
            "shell": self.shell,
            "cwd": self.cwd,
            "env": self.env,
            "stdin": self.stdin,
            "timeout_seconds": self.timeout_seconds,
            "backoff_seconds": self.backoff_seconds,
            "on_failure": self.on_failure,
        }
        # written only when set, so the settings of runs made before them read the same
        if self.ok_exit:
            d["ok_exit"] = list(self.ok_exit)
        if self.no_retry_exit:
            d["no_retry_exit"] = list(self.no_retry_exit)
        if not self.limits.empty:
            d["limits"] = self.limits.to_dict()
        if self.secrets:
            d["secrets"] = self.secrets
        if self.env_file is not None:
            d["env_file"] = self.env_file
        if self.trigger is not None:
            d["trigger"] = dict(self.trigger)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSettings:
        return cls(
            command=d["command"],
            shell=d["shell"],
            cwd=d.get("cwd"),
            env=dict(d.get("env") or {}),
            stdin=d.get("stdin"),
            timeout_seconds=d.get("timeout_seconds"),
            backoff_seconds=float(d.get("backoff_seconds", DEFAULT_BACKOFF_SECONDS)),
            on_failure=d.get("on_failure"),
            ok_exit=tuple(d.get("ok_exit") or ()),
            no_retry_exit=tuple(d.get("no_retry_exit") or ()),
            limits=Limits.from_dict(d.get("limits")),
            secrets=dict(d.get("secrets") or {}),
            env_file=d.get("env_file"),
            trigger=d.get("trigger"),
        )

    @classmethod
    def from_spec(cls, spec: JobSpec) -> RunSettings:
        return cls(
            command=spec.command,
            shell=spec.shell,
            cwd=spec.cwd,
            env=dict(spec.env),
            stdin=spec.stdin,
            timeout_seconds=spec.timeout_seconds,
            backoff_seconds=spec.backoff_seconds,
            on_failure=spec.on_failure,
            ok_exit=spec.ok_exit,
            no_retry_exit=spec.no_retry_exit,
            limits=spec.limits,
            secrets=dict(spec.secrets),
            env_file=spec.env_file,
            trigger=_trigger_ref(spec.trigger),
        )


def _trigger_ref(trigger: Trigger) -> dict[str, Any] | None:
    """What a run keeps of its job's trigger to name the one that made its window: a set's
    expression, zone and anchor; a cron expression's or an interval's text."""
    kind = trigger.kind
    if kind is TriggerKind.SET:
        anchor = trigger.anchor
        return {
            "set": trigger.expr,
            **({"resolved": trigger.resolved} if trigger.resolved else {}),
            "tz": trigger.tz,
            "anchor": None if anchor is None else anchor.isoformat(),
        }
    if kind is TriggerKind.CRON:
        return {"text": trigger.expr}
    if kind is TriggerKind.INTERVAL and not trigger.after_completion:
        return {"text": f"every {trigger.expr}"}
    return None


@dataclass(frozen=True)
class Run:
    id: int
    job_id: int
    job_name: str
    scheduled_for: datetime
    state: RunState
    skip_reason: SkipReason | None
    attempt: int
    max_attempts: int
    not_before: datetime | None
    leased_by: str | None
    lease_until: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    last_error: str | None
    reason: RunReason
    catchup_from: datetime | None
    priority: int
    run_key: str | None
    env: dict[str, str]
    locks: tuple[str, ...]
    settings: RunSettings
    cancel_requested: bool = False
    #: the attempt number the current set of attempts counts from (``retry-dead`` moves it)
    attempt_base: int = 0
    #: how the ``--on-failure`` command ended (``exit 0``, ``signal 9``, ``not started``)
    hook_status: str | None = None
    #: the last attempt's start and end (None before the first claim, or while it runs)
    attempt_started_at: datetime | None = None
    attempt_finished_at: datetime | None = None
    #: the host of the last attempt
    host: str | None = None
    #: user + system CPU seconds and the largest resident set (bytes) of its
    #: last attempt, once it ended
    cpu: float | None = None
    max_rss: int | None = None
    #: the revision its job had when the run was created (README, Jobs in git)
    job_revision: int | None = None

    @classmethod
    def of(cls, fields: dict[str, Any]) -> Run:
        """A Run from every one of its fields at once, as a store reads it: the generated
        ``__init__`` of a frozen dataclass sets each of the 29 through
        ``object.__setattr__``, several times the cost of this on a claim's hot path
        (``fields`` must name every field; the stores' tests check it)."""
        return _whole(cls, fields)

    @property
    def duration_seconds(self) -> float | None:
        """Seconds its last attempt took; None before it ended."""
        if self.attempt_started_at is None or self.attempt_finished_at is None:
            return None
        return (self.attempt_finished_at - self.attempt_started_at).total_seconds()


@dataclass(frozen=True)
class Attempt:
    run_id: int
    attempt: int
    started_at: datetime
    finished_at: datetime | None
    exit_code: int | None
    error: str | None
    output_bytes: int
    host: str | None = None
    pid: int | None = None
    #: what the kernel counted when its main process was reaped
    cpu_user: float | None = None
    cpu_system: float | None = None
    max_rss: int | None = None

    @property
    def duration_seconds(self) -> float | None:
        """Seconds from start to end; None while it runs."""
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


class Role(str, Enum):
    """What an API token may do (README "Tokens"): each role may do what the one before
    it may, and more."""

    READ = "read"
    OPERATE = "operate"
    ADMIN = "admin"

    def allows(self, needed: Role) -> bool:
        order = (Role.READ, Role.OPERATE, Role.ADMIN)
        return order.index(self) >= order.index(needed)
