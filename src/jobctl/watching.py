"""Watched jobs (README "Watching jobs that jobctl does not run"): pure rules of the ping
protocol of Healthchecks.io and of a watched run's time limits.

Something else runs the work and pings ``/ping/KEY`` (success), ``/ping/KEY/start``,
``/ping/KEY/fail``, ``/ping/KEY/log`` or ``/ping/KEY/N`` (exit code N); jobctl records
the runs. Nothing here reads the clock or the database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from .clock import from_us, to_us
from .errors import UsageError
from .models import Job, JobSpec, Trigger, TriggerKind

if TYPE_CHECKING:  # the parsers are imported where a watch is made or judged: the store's
    # import (a listing's start) loads neither
    from . import specs

#: a ping's body kept as the attempt's output (Healthchecks keeps 100 kB too)
PING_BODY_LIMIT_BYTES = 100_000
#: what ``exec`` sends of its command's output: the last 64 KiB, as an attempt keeps
EXEC_OUTPUT_LIMIT_BYTES = 64 * 1024
#: the grace of a watched job that names none
DEFAULT_GRACE_SECONDS = 300.0
#: the host an attempt started by ``jobctl ping`` or ``jobctl exec`` (no server) shows
CLI_HOST = "ping"
#: the error of a watched run whose end ping never came
NO_PING = "no ping"

_KEY_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_RID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class PingKind(str, Enum):
    START = "start"
    SUCCESS = "success"
    FAIL = "fail"
    LOG = "log"
    EXIT = "exit"


@dataclass(frozen=True)
class Ping:
    """One ping: what it says (an exit code only with ``EXIT``), its optional run id
    (``rid``, ties a start to its end when runs overlap) and its body (the output)."""

    kind: PingKind
    exit_code: int | None = None
    rid: str | None = None
    body: bytes = b""

    @property
    def ends(self) -> bool:
        return self.kind in (PingKind.SUCCESS, PingKind.FAIL, PingKind.EXIT)

    @property
    def succeeded(self) -> bool:
        """An end that is a success: ``/ping/KEY`` or ``/ping/KEY/0``."""
        return self.kind is PingKind.SUCCESS or (self.kind is PingKind.EXIT and self.exit_code == 0)

    @property
    def error(self) -> str | None:
        """The run's ``last_error`` for a failing end, else None."""
        if self.kind is PingKind.FAIL:
            return "fail ping"
        if self.kind is PingKind.EXIT and self.exit_code:
            return f"exit {self.exit_code}"
        return None


def check_exit_code(code: int) -> int:
    if not 0 <= code <= 255:
        raise UsageError(f"exit code {code} is not within 0-255")
    return code


def check_rid(rid: str | None) -> str | None:
    if rid is None:
        return None
    if not _RID_RE.fullmatch(rid):
        raise UsageError(f"invalid rid {rid!r}: 1-128 letters, digits or _.:-")
    return rid


def make_ping(
    kind: PingKind, *, exit_code: int | None = None, rid: str | None = None, body: bytes = b""
) -> Ping:
    """A checked :class:`Ping`, its body cut to :data:`PING_BODY_LIMIT_BYTES` (the start
    kept: what a Healthchecks server keeps). Raises UsageError."""
    if kind is PingKind.EXIT:
        if exit_code is None:
            raise UsageError("an exit ping needs its code")
        check_exit_code(exit_code)
    return Ping(kind, exit_code, check_rid(rid), body[:PING_BODY_LIMIT_BYTES])


def parse_ping_path(rest: str) -> tuple[str, PingKind, int | None] | None:
    """``KEY``, ``KEY/start``, ``KEY/fail``, ``KEY/log`` or ``KEY/N`` (what follows
    ``/ping/``) -> (key, kind, exit code); None when it is none of them."""
    parts = rest.split("/")
    if not 1 <= len(parts) <= 2 or not _KEY_RE.fullmatch(parts[0]):
        return None
    if len(parts) == 1:
        return parts[0], PingKind.SUCCESS, None
    tail = parts[1]
    if tail in ("start", "fail", "log"):
        return parts[0], PingKind(tail), None
    if tail.isdigit() and len(tail) <= 3 and int(tail) <= 255:
        return parts[0], PingKind.EXIT, int(tail)
    return None


# ---------------------------------------------------------------------- the job


#: the flags of ``add`` about starting a command: invalid with --watch
START_FLAGS = {
    "catchup": "--catchup",
    "catchup_limit": "--catchup-limit",
    "overlap": "--overlap",
    "retries": "--retries",
    "backoff": "--backoff",
    "priority": "--priority",
    "jitter": "--jitter",
    "env": "--env",
    "secret": "--secret",
    "env_file": "--env-file",
    "cwd": "--cwd",
    "shell": "--shell",
    "on_failure": "--on-failure",
    "stdin": "--stdin",
    "lock": "--lock",
    "on": "--on",
    "deadline": "--deadline",
    "max_running": "--max-running",
    "ok_exit": "--ok-exit",
    "no_retry_exit": "--no-retry-exit",
    "nice": "--nice",
    "io_class": "--io-class",
    "memory_max": "--memory-max",
    "cpu_max": "--cpu-max",
    "files_max": "--files-max",
}


def refuse_start_flags(policies: dict[str, object]) -> None:
    """A watched job starts no command: each flag about starting one is invalid input
    (``--timeout`` stays: here it is how long a started run may go without its end)."""
    given = [flag for key, flag in START_FLAGS.items() if policies.get(key) not in (None, ())]
    if given:
        raise UsageError(f"{given[0]} is about starting a command: not with --watch")


def check_watch_trigger(trigger: Trigger) -> None:
    """A watched job's windows come from ``--cron`` or ``--every`` (fixed rate)."""
    if trigger.kind not in (TriggerKind.CRON, TriggerKind.INTERVAL) or trigger.after_completion:
        raise UsageError("--watch takes --cron EXPR or --every DURATION")


def new_rid() -> str:
    """A run id for one wrapped run's start and end (``exec``)."""
    import uuid

    return uuid.uuid4().hex


def check_ping_key(key: str) -> str:
    """A ping key given (a job file, the API): what ``/ping/KEY`` takes. Raises UsageError."""
    if not _KEY_RE.fullmatch(key):
        raise UsageError(f"invalid ping_key {key!r}: 1-128 letters, digits, _ or -")
    return key


def new_ping_key() -> str:
    import uuid

    return str(uuid.uuid4())


def build_watch_spec(
    name: str, trig: specs.TriggerOptions, policies: dict[str, Any], now: datetime
) -> JobSpec:
    """What ``add NAME --watch`` was given -> the watched job's spec, with a new
    ``ping_key``, no command, no retries and ``--grace`` 5m unless given. Raises
    UsageError."""
    from . import specs

    refuse_start_flags(policies)
    specs.check_name(name)
    trigger = specs.build_trigger(trig, now)
    check_watch_trigger(trigger)
    changes = specs.policy_changes(policies)
    changes.setdefault("grace_seconds", DEFAULT_GRACE_SECONDS)
    changes.pop("limits", None)
    return JobSpec(
        name=name, trigger=trigger, command="", retries=0, ping_key=new_ping_key(), **changes
    )


# ---------------------------------------------------------------------- time limits


def watch_spec_of(spec: JobSpec) -> JobSpec:
    """A job jobctl would run (an imported crontab line) as a watched one: its schedule,
    name and description, a new ping key, no command, grace 5m."""
    if spec.trigger.kind is not TriggerKind.CRON:
        raise UsageError("an @reboot line cannot be watched: it has no windows")
    return JobSpec(
        name=spec.name,
        trigger=spec.trigger,
        command="",
        description=spec.description,
        retries=0,
        grace_seconds=DEFAULT_GRACE_SECONDS,
        ping_key=new_ping_key(),
    )


def latest_window(job: Job, now: datetime) -> datetime:
    """The window a ping at ``now`` belongs to: the job's latest window at or before
    ``now``; ``now`` itself when the job had none since it was made (a ping before its
    first window is recorded as a run of its own)."""
    from . import triggers

    found = triggers.windows_before(job.trigger, now + timedelta(microseconds=1), 1)
    if not found or found[-1] < job.created_at:
        return from_us(to_us(now))
    return found[-1]


def watch_until(spec: JobSpec, window: datetime) -> datetime:
    """When a watched run of ``window`` that has not ended becomes ``dead`` (``no ping``):
    window + grace + the job's ``--timeout``, else the period to its next window."""
    from . import triggers

    grace = timedelta(seconds=spec.grace_seconds or 0)
    if spec.timeout_seconds is not None:
        return window + grace + timedelta(seconds=spec.timeout_seconds)
    nxt = triggers.next_fire(spec.trigger, window)
    period = (nxt - window) if nxt is not None else timedelta(days=1)
    return window + grace + period


__all__ = [
    "CLI_HOST",
    "DEFAULT_GRACE_SECONDS",
    "EXEC_OUTPUT_LIMIT_BYTES",
    "NO_PING",
    "PING_BODY_LIMIT_BYTES",
    "Ping",
    "PingKind",
    "build_watch_spec",
    "check_ping_key",
    "check_watch_trigger",
    "latest_window",
    "make_ping",
    "new_ping_key",
    "new_rid",
    "parse_ping_path",
    "refuse_start_flags",
    "watch_spec_of",
    "watch_until",
]
