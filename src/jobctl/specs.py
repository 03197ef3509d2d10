"""Turning what a user typed into validated values: names, triggers, env pairs, job specs.

Pure functions: no click, no database. Every problem raises UsageError (exit 2) with a
one-line message, before anything is written.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from . import cronexpr, durations, notifications, zones
from .clock import iso
from .errors import UsageError
from .models import (
    AFTER_STATES,
    MAX_HISTORY_WINDOWS,
    NAME_RE,
    Catchup,
    IoClass,
    Job,
    JobSpec,
    Limits,
    Overlap,
    Trigger,
    TriggerKind,
    after_parts,
)
from .triggers import hashed_phase, named

if TYPE_CHECKING:
    from .crontab import ImportedJob


def check_text(value: str, what: str) -> str:
    """Refuse text that cannot be stored as UTF-8 (e.g. undecodable bytes from argv)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what} is not valid UTF-8") from None
    if "\x00" in value:
        raise UsageError(f"{what} contains a NUL byte")
    return value


#: a tag is spelled as a job name, with ``:`` besides (``host:db1``); a host name may be long
_TAG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")


def check_name(name: str, what: str = "job name") -> str:
    check_text(name, what)
    if not NAME_RE.fullmatch(name):
        raise UsageError(
            f"invalid {what} {name!r}: use letters, digits, '.', '_' and '-' "
            "(first a letter or digit, at most 64)"
        )
    return name


def parse_env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings -> dict. KEY is a shell identifier."""
    out: dict[str, str] = {}
    for pair in pairs:
        check_text(pair, "--env")
        key, sep, value = pair.partition("=")
        if (
            not sep
            or not key
            or not (key[0].isalpha() or key[0] == "_")
            or not all(ch.isalnum() or ch == "_" for ch in key)
            or not key.isascii()
        ):
            raise UsageError(f"invalid --env {pair!r}: use KEY=VALUE with KEY a shell name")
        out[key] = value
    return out


#: an ``--env`` key holding one of these (any case) looks like it holds a secret
SECRET_LOOKING_WORDS = ("PASSWORD", "SECRET", "TOKEN", "API_KEY")


def secret_looking_env(env: Sequence[str] | dict[str, str]) -> list[str]:
    """The warnings for ``--env`` keys that look like they hold a secret (README
    "Secrets"), one a key, in key order."""
    keys = sorted(env) if isinstance(env, dict) else sorted(parse_env_pairs(env))
    return [
        f"--env {key} is shown by show, export and history; use --secret"
        for key in keys
        if any(word in key.upper() for word in SECRET_LOOKING_WORDS)
    ]


def parse_secret_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``--secret ENV=NAME`` (or ``NAME``, meaning ``NAME=NAME``) -> ``{ENV: NAME}``. ENV
    is a shell name; NAME a secret's name (shaped as a job name). Whether the secret
    exists is checked by the store, in the job's own write."""
    out: dict[str, str] = {}
    for pair in pairs:
        check_text(pair, "--secret")
        env, sep, name = pair.partition("=")
        if not sep:
            name = env
        if (
            not env
            or not (env[0].isalpha() or env[0] == "_")
            or not all(ch.isalnum() or ch == "_" for ch in env)
            or not env.isascii()
        ):
            raise UsageError(f"invalid --secret {pair!r}: use ENV=NAME with ENV a shell name")
        out[env] = check_name(name, "secret name")
    return out


#: a secret's value is at most this many bytes
MAX_SECRET_BYTES = 64 * 1024


def check_secret_value(value: bytes) -> bytes:
    """A secret's value: at most 64 KiB, no NUL (an environment cannot hold one). Raises
    UsageError, which never quotes the value."""
    if len(value) > MAX_SECRET_BYTES:
        raise UsageError(f"a secret's value is at most {MAX_SECRET_BYTES} bytes")
    if b"\0" in value:
        raise UsageError("a secret's value cannot hold a NUL byte")
    return value


def hash_token(token: str) -> str:
    """The SHA-256 (hex) of an API token's text: all that is kept of it."""
    import hashlib

    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def check_env_file(path: str) -> str:
    """An ``--env-file`` path, made absolute (``~`` expanded): the daemon reads it from
    wherever it runs. Its content is read by the daemon, never here."""
    check_text(path, "--env-file")
    if not path.strip():
        raise UsageError("--env-file needs a path")
    return os.path.abspath(os.path.expanduser(path))


#: the most one argument of an exec may hold on Linux (MAX_ARG_STRLEN: 32 pages of 4 KiB,
#: its NUL included): a longer ``sh -c COMMAND`` can never start
#: (README, Run policies and what a run costs)
MAX_ARG_BYTES = 131072


def check_command(text: str, what: str = "command") -> str:
    """A shell command the system can start: valid text, and short enough to be one
    argument of ``SHELL -c``. Raises UsageError."""
    check_text(text, what)
    size = len(text.encode("utf-8"))
    if size >= MAX_ARG_BYTES:
        raise UsageError(
            f"{what} is {size} bytes: the system starts a command of at most "
            f"{MAX_ARG_BYTES - 1} bytes (put a longer one in a script)"
        )
    return text


def join_command(args: Sequence[str]) -> str:
    """One argument is a shell string; several are shell-quoted and joined (jobctl(1), jobctl add).
    Raises UsageError when it is empty or too long to start (:func:`check_command`)."""
    if not args:
        raise UsageError("no command given: add -- COMMAND after the options")
    for a in args:
        check_text(a, "command")
    if len(args) == 1:
        if not args[0].strip():
            raise UsageError("the command is empty")
        return check_command(args[0])
    return check_command(shlex.join(args))


@dataclass
class TriggerOptions:
    """The trigger flags as given; ``cron`` and ``every`` may be repeated (a set)."""

    cron: str | Sequence[str] | None = None
    every: str | Sequence[str] | None = None
    after_completion: bool = False
    start: str | None = None
    at: str | None = None
    in_: str | None = None
    manual: bool = False
    tz: str | None = None
    after: str | None = None
    active_from: str | None = None
    active_until: str | None = None
    #: a set's members as given, ``"cron"`` or ``"every"`` each, in the order of the
    #: command line (or file, or API body); None: every ``cron``, then every ``every``.
    #: The first given names a window several make (``JOBCTL_TRIGGER``).
    order: Sequence[str] | None = None

    def given(self) -> bool:
        """Whether a trigger flag was given, an empty one too (``--cron ''`` is an empty
        expression, not an absent flag)."""
        texts = (self.cron, self.every, self.at, self.in_, self.after)
        # a repeatable flag not given is an empty tuple
        return self.manual or any(v is not None and v != () for v in texts)

    def range_given(self) -> bool:
        return self.active_from is not None or self.active_until is not None


def _texts(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def in_order(
    order: Sequence[str] | None, crons: Sequence[str], everys: Sequence[str]
) -> list[tuple[str, str]]:
    """A set's members as ``(flag, text)`` in the order given: ``order`` names the flag of
    each (``cron``/``every``); without one (or one that does not fit the values), the
    crons, then the everys."""
    if order is None or sorted(order) != sorted(["cron"] * len(crons) + ["every"] * len(everys)):
        return [("cron", c) for c in crons] + [("every", e) for e in everys]
    rest = {"cron": iter(crons), "every": iter(everys)}
    return [(flag, next(rest[flag])) for flag in order]


def build_trigger(
    opts: TriggerOptions,
    now: datetime,
    *,
    default_tz: str | None = None,
    name: str | None = None,
) -> Trigger:
    """One trigger (--cron/--every/--at/--in/--manual/--after), or a set of several --cron
    and --every -> a validated Trigger, read in ``opts.tz``, else ``default_tz``, else the
    machine's zone, within ``--active-from``/``--active-until`` when given.

    ``name`` is the job's: ``H`` in a cron expression and ``--start H`` are chosen from it
    (see jobctl(1), SPREADING THE LOAD). Without a name an ``H`` expression is only checked;
    a JobSpec's trigger is resolved with :func:`jobctl.triggers.named`. A set's members take
    no ``H``."""
    trigger = _build_trigger(opts, now, default_tz=default_tz, name=name)
    return with_range(trigger, opts, now) if opts.range_given() else trigger


def with_range(trigger: Trigger, opts: TriggerOptions, now: datetime) -> Trigger:
    """``trigger`` with the active range given in ``opts`` (naive times in its zone; an
    empty text clears that end). Raises UsageError for a range that ends before it starts
    or a trigger without windows to bound."""
    if trigger.kind not in (TriggerKind.CRON, TriggerKind.INTERVAL, TriggerKind.SET):
        raise UsageError("--active-from and --active-until go with --cron or --every")

    def bound(text: str | None, flag: str, current: datetime | None) -> datetime | None:
        if text is None:
            return current
        text = check_text(text, flag).strip()
        return durations.parse_time(text, trigger.tz, now) if text else None

    out = replace(
        trigger,
        active_from=bound(opts.active_from, "--active-from", trigger.active_from),
        active_until=bound(opts.active_until, "--active-until", trigger.active_until),
    )
    if out.active_from and out.active_until and out.active_until < out.active_from:
        raise UsageError("--active-until is before --active-from")
    return out


def _build_trigger(
    opts: TriggerOptions, now: datetime, *, default_tz: str | None, name: str | None
) -> Trigger:
    crons, everys = _texts(opts.cron), _texts(opts.every)
    for what, given in (
        ("cron expression", crons),
        ("interval", everys),
        ("time", _texts(opts.at)),
        ("delay", _texts(opts.in_)),
        ("--after job", _texts(opts.after)),
    ):
        for text in given:
            if not text.strip():
                raise UsageError(f"the {what} is empty")
    chosen = [
        flag
        for flag, v in (
            ("--cron", crons),
            ("--every", everys),
            ("--at", opts.at),
            ("--in", opts.in_),
            ("--manual", opts.manual),
            ("--after", opts.after),
        )
        if v
    ]
    if len(crons) + len(everys) > 1:
        if len(chosen) != len({"--cron", "--every"} & set(chosen)) or "@reboot" in [
            c.strip() for c in crons
        ]:
            raise UsageError(
                "--at, --in, --manual, --after and @reboot stand alone: several --cron and "
                "--every make a set of their own"
            )
    elif len(chosen) != 1:
        raise UsageError(
            "give exactly one trigger: --cron, --every, --at, --in, --manual or --after"
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    tz = check_zone(opts.tz) if opts.tz is not None else default_tz or zones.local_zone_name()
    zones.parse_zone(tz)
    if opts.after_completion and not everys:
        raise UsageError("--after-completion goes with --every")
    if opts.start and not everys:
        raise UsageError("--start goes with --every")
    if len(crons) + len(everys) > 1:
        if opts.after_completion:
            raise UsageError("--after-completion goes with one --every, not a set")
        texts: list[str] = []
        for flag, given_text in in_order(opts.order, crons, everys):
            if flag == "every":
                seconds = durations.parse_duration(given_text)
                texts.append("every " + durations.format_duration(seconds))
                continue
            member = check_text(given_text.strip(), "--cron")
            cronexpr.parse_cron(cronexpr.resolve_hashes(member, name or ""))
            texts.append(member)
        # without --start the anchor, now, only sets the phase: it is no window
        anchor = durations.parse_time(opts.start, tz, now) if opts.start else now
        trigger = Trigger(
            TriggerKind.SET,
            tz=tz,
            expr=" | ".join(dict.fromkeys(texts)),
            anchor=anchor if everys else None,
            phase_only=bool(everys) and not opts.start,
        )
        return named(trigger, name) if name else trigger
    every = everys[0] if everys else None
    if crons:
        expr = check_text(crons[0].strip(), "--cron")
        if expr == "@reboot":
            return Trigger(TriggerKind.REBOOT, tz=tz, expr="@reboot")
        if cronexpr.has_hash(expr):
            resolved = cronexpr.resolve_hashes(expr, name or "")
            return Trigger(TriggerKind.CRON, tz=tz, expr=expr, resolved=resolved if name else None)
        cronexpr.parse_cron(expr)
        return Trigger(TriggerKind.CRON, tz=tz, expr=expr)
    if every is not None:
        seconds = durations.parse_duration(every)
        if opts.start is not None and opts.start.strip().upper() == "H":
            if opts.after_completion:
                raise UsageError("--start H goes with a fixed-rate --every")
            anchor = hashed_phase(name or "", seconds)
        else:
            anchor = durations.parse_time(opts.start, tz, now) if opts.start else now
        return Trigger(
            TriggerKind.INTERVAL,
            tz=tz,
            expr=durations.format_duration(seconds),
            every_seconds=seconds,
            anchor=None if opts.after_completion else anchor,
            after_completion=opts.after_completion,
            # without --start the anchor, now, only sets the phase: it is no window
            phase_only=not opts.after_completion and not opts.start,
        )
    if opts.at is not None:
        at = durations.parse_time(opts.at, tz, now)
        if at <= now:
            # a one-shot window is the first fire strictly after now: a past one never fires
            raise UsageError(f"--at {opts.at!r} is in the past")
        return Trigger(TriggerKind.ONCE, tz=tz, at=at)
    if opts.in_ is not None:
        at = durations.parse_relative(opts.in_, now)
        return Trigger(TriggerKind.ONCE, tz=tz, at=at)
    if opts.after is not None:
        return Trigger(TriggerKind.AFTER, tz=tz, expr=parse_after(opts.after))
    return Trigger(TriggerKind.MANUAL, tz=tz)


def parse_after(text: str) -> str:
    """An ``--after JOB[:STATES]`` value, checked (jobctl(1), jobctl add): a job name, then
    optionally a comma list of ``succeeded``, ``dead``, ``cancelled``. Returns it as given, without
    surrounding spaces. Raises UsageError."""
    check_text(text, "--after")
    text = text.strip()
    name, states = after_parts(text)
    check_name(name, "--after job name")
    for state in states:
        if state not in AFTER_STATES:
            raise UsageError(
                f"invalid --after state {state!r}: use a comma list of {', '.join(AFTER_STATES)}"
            )
    return text


def check_after_cycle(name: str, upstream: str, edges: dict[str, str]) -> None:
    """Refuse an ``--after`` that closes a cycle (README, Run policies and what a run costs):
    ``name`` would follow ``upstream``; ``edges`` maps each other ``--after`` job to the job it
    follows. Raises UsageError naming the cycle."""
    path = [name]
    current: str | None = upstream
    seen = {name}
    while current is not None:
        path.append(current)
        if current in seen:
            raise UsageError(f"--after makes a cycle: {' -> '.join(reversed(path))}")
        seen.add(current)
        current = edges.get(current)


def check_after(name: str, trigger: Trigger, jobs: Sequence[Job]) -> None:
    """An ``--after`` trigger against the jobs stored (README, Run policies and what a run costs):
    its upstream job exists and following it makes no cycle. ``name`` is the job's name once written
    (a job of that name among ``jobs`` is replaced by it). Raises UsageError."""
    if trigger.kind is not TriggerKind.AFTER or not trigger.expr:
        return
    upstream = after_parts(trigger.expr)[0]
    if upstream != name and not any(j.name == upstream for j in jobs):
        raise UsageError(f"--after {trigger.expr!r}: no job named {upstream!r}")
    edges = after_edges([j for j in jobs if j.name != name])
    check_after_cycle(name, upstream, edges)


def after_edges(jobs: Sequence[Job]) -> dict[str, str]:
    """Each ``--after`` job's name -> the name of the job it follows."""
    return {
        j.name: after_parts(j.trigger.expr)[0]
        for j in jobs
        if j.trigger.kind is TriggerKind.AFTER and j.trigger.expr
    }


def check_zone(name: str, flag: str = "--tz") -> str:
    """A ``--tz`` value: an IANA zone name this machine knows (``''`` is invalid)."""
    check_text(name, flag)
    zones.parse_zone(name)
    return name


def trigger_warnings(trigger: Trigger) -> list[str]:
    """What to tell a user about a valid trigger: a cron expression that can never fire."""
    exprs = [trigger.expr] if trigger.kind is TriggerKind.CRON else []
    if trigger.kind is TriggerKind.SET:
        exprs = [t for t in (trigger.expr or "").split(" | ") if not t.startswith("every ")]
    return [
        f"cron expression {expr!r} can never fire (no date matches it)"
        for expr in exprs
        if expr
        and not cronexpr.parse_cron(
            trigger.resolved
            if trigger.kind is TriggerKind.CRON and trigger.resolved
            else cronexpr.resolve_hashes(expr, "")
        ).can_fire
    ]


def check_start_settings(cwd: str | None, shell: str | None) -> list[str]:
    """Check ``--cwd`` and ``--shell`` now rather than at the first run (README, Choices where the
    contract is silent).

    A path that provably does not exist (or is not a directory, not an executable) is
    invalid input. A path this user cannot look into (another user's home, a mount
    not readable now) may still exist when the daemon runs the job: that is only a
    warning. A shell without a ``/`` is looked up on ``PATH`` as the daemon does.
    Returns the warnings; raises UsageError.
    """
    warnings: list[str] = []
    if cwd is not None:
        state = _path_state(cwd)
        if state == "missing":
            raise UsageError(f"--cwd {cwd!r}: no such directory")
        if state == "exists" and not os.path.isdir(cwd):
            raise UsageError(f"--cwd {cwd!r} is not a directory")
        if state == "unknown":
            warnings.append(f"--cwd {cwd!r} cannot be checked now; it must exist when the job runs")
    if shell is not None:
        if "/" not in shell:
            if shutil.which(shell) is None:
                raise UsageError(f"--shell {shell!r}: not found on PATH")
            return warnings
        state = _path_state(shell)
        if state == "missing":
            raise UsageError(f"--shell {shell!r}: no such file")
        if state == "exists" and not _executable(shell):
            raise UsageError(f"--shell {shell!r} is not an executable file")
        if state == "unknown":
            warnings.append(
                f"--shell {shell!r} cannot be checked now; it must exist when the job runs"
            )
    return warnings


def _executable(path: str) -> bool:
    """A regular file with an execute bit (os.access says yes to root for any file)."""
    return os.path.isfile(path) and bool(os.stat(path).st_mode & 0o111) and os.access(path, os.X_OK)


def _path_state(path: str) -> str:
    """``exists``, ``missing`` (a parent we can read says so) or ``unknown`` (no access)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return "missing"
    except NotADirectoryError:
        return "missing"
    except OSError:
        return "unknown"
    return "exists"


def _choice(value: str, enum: Any, flag: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        allowed = "|".join(e.value for e in enum)
        raise UsageError(f"invalid {flag} {value!r}: use {allowed}") from None


INT64_MAX = 2**63 - 1
"""The largest integer an option or id may be (SQLite's INTEGER; jobctl(1) gives each option's
range)."""


def check_int(value: int, flag: str, minimum: int = -INT64_MAX - 1) -> int:
    """An integer option within ``[minimum, 2**63-1]``; beyond 64 bits is invalid input."""
    if value < minimum:
        raise UsageError(f"invalid {flag} {value}: must be at least {minimum}")
    if value > INT64_MAX or value < -INT64_MAX - 1:
        raise UsageError(f"invalid {flag} {value}: beyond the 64-bit integer range")
    return value


def _nonneg_int(value: int, flag: str, minimum: int = 0) -> int:
    return check_int(value, flag, minimum)


def _nonempty(value: str, flag: str) -> str:
    if not value.strip():
        raise UsageError(f"{flag} is empty")
    return value


def parse_exit_codes(text: str, flag: str) -> tuple[int, ...]:
    """A comma list of exit codes 1-255 (``24``, ``3,75``), sorted, without repeats; the
    empty text is the empty list (``edit --ok-exit ''`` clears it). Raises UsageError."""
    check_text(text, flag)
    if not text.strip():
        return ()
    codes = set()
    for part in text.split(","):
        p = part.strip()
        if not p.isascii() or not p.isdigit() or not 1 <= int(p) <= 255:
            raise UsageError(f"invalid {flag} {text!r}: use a comma list of exit codes 1-255")
        codes.add(int(p))
    return tuple(sorted(codes))


_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, flag: str = "--memory-max") -> int:
    """SIZE (jobctl(1), jobctl add --memory-max): a whole number followed by K, M, G or T (powers of
    1024), at least 1M, in bytes. A bare number is invalid. Raises UsageError."""
    check_text(text, flag)
    s = text.strip()
    unit = s[-1:].upper()
    number = s[:-1]
    if unit not in _SIZE_UNITS or not number.isascii() or not number.isdigit():
        raise UsageError(f"invalid {flag} {text!r}: use a whole number with K, M, G or T (1G)")
    size = int(number) * _SIZE_UNITS[unit]
    if size < _SIZE_UNITS["M"]:
        raise UsageError(f"invalid {flag} {text!r}: at least 1M")
    if size > INT64_MAX:
        raise UsageError(f"invalid {flag} {text!r}: too large")
    return size


def format_size(size: int) -> str:
    """Bytes as the largest SIZE unit that divides them (``1073741824`` -> ``1G``)."""
    for unit in ("T", "G", "M", "K"):
        if size % _SIZE_UNITS[unit] == 0:
            return f"{size // _SIZE_UNITS[unit]}{unit}"
    return f"{size}B"


#: the limit options and their Limits field
LIMIT_KEYS = ("nice", "io_class", "memory_max", "cpu_max", "files_max")


def limit_changes(p: dict[str, Any]) -> dict[str, Any]:
    """The limit options a user gave (None = not given) -> Limits field values."""
    out: dict[str, Any] = {}
    if p.get("nice") is not None:
        n = check_int(p["nice"], "--nice", 0)
        if n > 19:
            raise UsageError(f"invalid --nice {n}: use 0 to 19")
        out["nice"] = n
    if p.get("io_class") is not None:
        out["io_class"] = _choice(p["io_class"], IoClass, "--io-class")
    if p.get("memory_max") is not None:
        out["memory_max"] = parse_size(p["memory_max"])
    if p.get("cpu_max") is not None:
        out["cpu_max_seconds"] = durations.parse_duration(p["cpu_max"])
    if p.get("files_max") is not None:
        out["files_max"] = check_int(p["files_max"], "--files-max", 1)
    return out


def policy_changes(p: dict[str, Any]) -> dict[str, Any]:
    """The policy options a user gave (None = not given) -> JobSpec field values (limits as
    a dict of the Limits fields given, under ``limits``)."""
    out: dict[str, Any] = {}
    if p.get("catchup") is not None:
        out["catchup"] = _choice(p["catchup"], Catchup, "--catchup")
    if p.get("catchup_limit") is not None:
        out["catchup_limit"] = _nonneg_int(p["catchup_limit"], "--catchup-limit", 1)
    if p.get("overlap") is not None:
        out["overlap"] = _choice(p["overlap"], Overlap, "--overlap")
    if p.get("timeout") is not None:
        out["timeout_seconds"] = durations.parse_duration(p["timeout"])
    if p.get("retries") is not None:
        out["retries"] = _nonneg_int(p["retries"], "--retries")
    if p.get("backoff") is not None:
        out["backoff_seconds"] = durations.parse_duration(p["backoff"])
    if p.get("priority") is not None:
        out["priority"] = check_int(p["priority"], "--priority")
    if p.get("jitter") is not None:
        out["jitter_seconds"] = durations.parse_duration(p["jitter"], allow_zero=True)
    if p.get("env"):
        out["env"] = parse_env_pairs(p["env"])
    if p.get("no_secrets"):
        if p.get("secret"):
            raise UsageError("give --secret or --no-secrets, not both")
        out["secrets"] = {}
    elif p.get("secret"):
        out["secrets"] = parse_secret_pairs(p["secret"])
    if p.get("no_env_file"):
        if p.get("env_file") is not None:
            raise UsageError("give --env-file or --no-env-file, not both")
        out["env_file"] = None
    elif p.get("env_file") is not None:
        out["env_file"] = check_env_file(p["env_file"])
    if p.get("cwd") is not None:
        out["cwd"] = _nonempty(check_text(p["cwd"], "--cwd"), "--cwd")
    if p.get("shell") is not None:
        out["shell"] = _nonempty(check_text(p["shell"], "--shell"), "--shell")
    if p.get("on_failure") is not None:
        out["on_failure"] = check_command(p["on_failure"], "--on-failure") or None
    if p.get("stdin") is not None:
        out["stdin"] = check_text(p["stdin"], "--stdin")
    if p.get("description") is not None:
        out["description"] = check_text(p["description"], "--description")
    if p.get("lock"):
        out["locks"] = tuple(sorted({check_lock_name(lk) for lk in p["lock"]}))
    if p.get("on") and p.get("anywhere"):
        raise UsageError("give --on TAG or --anywhere, not both")
    if p.get("on"):
        out["on_tags"] = tuple(sorted({check_tag(t, "--on") for t in p["on"]}))
    elif p.get("anywhere"):
        out["on_tags"] = ()
    if p.get("deadline") is not None:
        out["deadline_seconds"] = durations.parse_duration(p["deadline"])
    if p.get("pause_after_failures") is not None:
        # 0 clears it (edit)
        out["pause_after_failures"] = (
            _nonneg_int(p["pause_after_failures"], "--pause-after-failures") or None
        )
    if p.get("max_running") is not None:
        out["max_running"] = _nonneg_int(p["max_running"], "--max-running") or None
    if p.get("ok_exit") is not None:
        out["ok_exit"] = parse_exit_codes(p["ok_exit"], "--ok-exit")
    if p.get("no_retry_exit") is not None:
        out["no_retry_exit"] = parse_exit_codes(p["no_retry_exit"], "--no-retry-exit")
    limits = limit_changes(p)
    if limits:
        out["limits"] = limits
    if p.get("keep_runs") is not None:
        out["keep_runs"] = _nonneg_int(p["keep_runs"], "--keep-runs")
    if p.get("keep_for") is not None:
        out["keep_for_seconds"] = durations.parse_duration(p["keep_for"])
    out.update(notify_changes(p))
    out.update(except_changes(p))
    return out


def except_changes(p: dict[str, Any]) -> dict[str, Any]:
    """``--except EXPR``... and ``--except-calendar NAME``... (each replaces the job's
    list when given), ``--no-except`` (clears both) -> JobSpec field values. That each
    calendar exists is checked by the store, in the job's own write."""
    out: dict[str, Any] = {}
    if p.get("no_except"):
        if p.get("except_") or p.get("except_calendar"):
            raise UsageError("give --except/--except-calendar or --no-except, not both")
        return {"excepts": (), "except_calendars": ()}
    if p.get("except_"):
        out["excepts"] = tuple(dict.fromkeys(check_except(e) for e in p["except_"]))
    if p.get("except_calendar"):
        out["except_calendars"] = tuple(
            dict.fromkeys(check_name(c, "calendar name") for c in p["except_calendar"])
        )
    return out


def check_except(text: str) -> str:
    """An ``--except`` value: a 5-field cron expression (macros too, not ``@reboot``).
    Raises UsageError."""
    expr = check_text(text, "--except").strip()
    if expr == "@reboot":
        raise UsageError("--except takes a cron expression, not @reboot")
    try:
        cronexpr.parse_cron(expr)
    except UsageError as e:
        raise UsageError(f"invalid --except: {e}") from None
    return expr


def notify_changes(p: dict[str, Any]) -> dict[str, Any]:
    """``--notify CHANNEL[:EVENTS]``... (replaces the job's list), ``--no-notify`` (clears
    it), ``--grace`` and ``--warn-after`` -> JobSpec field values. That each channel
    exists is checked by the store, in the job's own write."""
    out: dict[str, Any] = {}
    if p.get("no_notify"):
        if p.get("notify"):
            raise UsageError("give --notify or --no-notify, not both")
        out["notify"] = ()
    elif p.get("notify"):
        rules = tuple(notifications.parse_notify(check_text(v, "--notify")) for v in p["notify"])
        names = [r.channel for r in rules]
        if len(set(names)) != len(names):
            raise UsageError("invalid --notify: a channel is named twice")
        out["notify"] = rules
    if p.get("grace") is not None:
        out["grace_seconds"] = durations.parse_duration(p["grace"])
    if p.get("warn_after") is not None:
        out["warn_after_seconds"] = durations.parse_duration(p["warn_after"])
    return out


def check_policies(spec: JobSpec) -> JobSpec:
    """Rules between a job's fields (jobctl(1), jobctl add), on the job as it would be stored: a
    ``--max-running`` needs ``--overlap allow``. Raises UsageError."""
    if spec.max_running is not None and spec.overlap is not Overlap.ALLOW:
        raise UsageError(
            f"--max-running goes with --overlap allow (--overlap {spec.overlap.value} "
            "already runs one at a time)"
        )
    return spec


def build_spec(
    name: str,
    trig: TriggerOptions,
    policies: dict[str, Any],
    command: Sequence[str],
    now: datetime,
) -> JobSpec:
    """Everything ``add`` was given -> a JobSpec. Raises UsageError."""
    check_name(name)
    trigger = build_trigger(trig, now, name=name)
    cmd = join_command(command)
    changes = policy_changes(policies)
    if trigger.kind is TriggerKind.MANUAL:
        # a keyed queue (README, Two workloads) runs its keys side by side; locks keep them polite
        changes.setdefault("overlap", Overlap.ALLOW)
    if "limits" in changes:
        changes["limits"] = Limits(**changes["limits"])
    return check_policies(JobSpec(name=name, trigger=trigger, command=cmd, **changes))


def edit_changes(
    job: Job,
    trig: TriggerOptions,
    policies: dict[str, Any],
    *,
    command: str | None,
    rename: str | None,
    now: datetime,
) -> dict[str, Any]:
    """What ``edit`` was given -> the JobSpec changes to write (jobctl(1), jobctl edit). Raises
    UsageError.

    A new trigger replaces the job's. ``--tz`` alone changes the zone of a cron job.
    ``--every`` alone on a fixed-delay job keeps it fixed-delay (``--start`` makes it
    fixed-rate again). At least one change is required.
    """
    changes = policy_changes(policies)
    current = job.trigger
    if trig.given():
        if (
            trig.every
            and not trig.after_completion
            and not trig.start
            and current.kind is TriggerKind.INTERVAL
            and current.after_completion
        ):
            trig = replace(trig, after_completion=True)
        # the job's zone stays unless a new one is given: a new expression is read in it;
        # the set is replaced whole, its active range kept unless one is given
        new = _build_trigger(trig, now, default_tz=current.tz, name=rename or job.name)
        if new.kind in (TriggerKind.CRON, TriggerKind.INTERVAL, TriggerKind.SET):
            new = replace(new, active_from=current.active_from, active_until=current.active_until)
        changes["trigger"] = with_range(new, trig, now) if trig.range_given() else new
    elif trig.tz is not None or trig.after_completion or trig.start:
        if (
            current.kind not in (TriggerKind.CRON, TriggerKind.SET)
            or trig.after_completion
            or trig.start
        ):
            raise UsageError("--tz, --start and --after-completion need their trigger flag too")
        changes["trigger"] = replace(current, tz=check_zone(trig.tz or ""))
        if trig.range_given():
            changes["trigger"] = with_range(changes["trigger"], trig, now)
    elif trig.range_given():
        changes["trigger"] = with_range(current, trig, now)
    if command is not None:
        changes["command"] = join_command([command])
    if rename is not None:
        changes["name"] = check_name(rename)
        moved = named(changes.get("trigger", current), rename)
        if moved != changes.get("trigger", current):
            # H is chosen from the name: a renamed job's windows move with it
            changes["trigger"] = moved
    if not changes:
        raise UsageError("nothing to change: give a trigger, a policy, --command or --rename")
    if "limits" in changes:
        changes["limits"] = replace(job.spec.limits, **changes["limits"])
    fields = {k: v for k, v in changes.items() if k in JobSpec.__dataclass_fields__}
    check_policies(replace(job.spec, **fields))
    return changes


def check_tag(tag: str, flag: str = "--tag") -> str:
    """A daemon tag (``--tag``, ``--on``): a job name's characters, and ``:`` (``host:db1``).
    Raises UsageError."""
    check_text(tag, flag)
    if not _TAG_RE.fullmatch(tag):
        raise UsageError(
            f"invalid {flag} {tag!r}: use letters, digits, '.', '_', '-' and ':' "
            "(at most 200), starting with a letter or digit"
        )
    return tag


def maintenance_window(
    until: str | None, reason: str | None, tz: str, now: datetime
) -> tuple[datetime | None, str | None]:
    """``pause --all``'s ``--until`` (read in ``tz``; it must be in the future) and
    ``--reason`` (blank: none). Raises UsageError."""
    end = durations.parse_time(until, tz, now) if until is not None else None
    if end is not None and end <= now:
        raise UsageError(f"--until {until!r} is not in the future")
    text = check_text(reason, "--reason").strip() if reason is not None else ""
    return end, text or None


def check_lock_name(name: str) -> str:
    """Lock names are freer than job names (``host:example.org``): printable, ≤ 200."""
    check_text(name, "lock name")
    if not name or len(name) > 200 or not name.isprintable():
        raise UsageError(f"invalid lock name {name!r}")
    return name


def spec_from_crontab(job: ImportedJob, now: datetime) -> JobSpec:
    """One parsed crontab line -> the JobSpec ``import-crontab`` writes (README, Migrating from
    crontab).

    The schedule goes through the same validation as ``add --cron`` (``@reboot`` included),
    read in ``CRON_TZ`` or the machine's local zone. Raises UsageError.
    """
    trigger = build_trigger(TriggerOptions(cron=job.cron, tz=job.tz), now, name=job.name)
    return JobSpec(
        name=check_name(job.name),
        trigger=trigger,
        command=check_command(job.command),
        description=job.description,
        stdin=job.stdin,
        env=dict(job.env),
        cwd=job.cwd,
        shell=job.shell or JobSpec.shell,
        jitter_seconds=job.jitter_seconds,
        on_failure=job.on_failure,
    )


# ---------------------------------------------------------------------- shared by `jobctl serve`


def check_run_key(key: str) -> str:
    """A keyed run's key (``run --key``): 1 to 1024 characters of UTF-8. Raises UsageError."""
    check_text(key, "--key")
    if not key or len(key) > 1024:
        raise UsageError("invalid --key: 1 to 1024 characters")
    return key


# ---------------------------------------------------------------------- backfill and coverage

#: how many windows ``coverage`` shows when no range is given (jobctl(1), jobctl coverage)
DEFAULT_COVERAGE_WINDOWS = 24


def backfill_windows(job: Job, start: str, end: str, now: datetime) -> list[datetime]:
    """``backfill NAME --from TIME --to TIME``: the job's windows in ``[from, to)``, oldest
    first, with ``to`` at most ``now`` (times read in the job's zone). Raises UsageError
    for a trigger without listable windows, a range in the future or more than
    ``MAX_HISTORY_WINDOWS`` windows (naming the count)."""
    from .triggers import windows_between

    tz = job.trigger.tz
    lo = durations.parse_time(check_text(start, "--from"), tz, now)
    hi = durations.parse_time(check_text(end, "--to"), tz, now)
    if hi > now:
        raise UsageError(
            f"backfill: --to {iso(hi)} is in the future; windows to come run by themselves"
        )
    windows = windows_between(job.trigger, lo, hi, MAX_HISTORY_WINDOWS)
    out_of = excluded_windows(job, windows)
    return [w for w in windows if w not in out_of] if out_of else windows


def excluded_windows(job: Job, windows: Sequence[datetime]) -> set[datetime]:
    """Those of ``windows`` that the job excludes (``--except``, its calendars' dates):
    ``coverage`` shows them skipped, ``backfill`` never runs them."""
    from .triggers import excluded

    spec = job.spec
    if not spec.excepts and not job.except_dates:
        return set()
    tz = job.trigger.tz
    return {w for w in windows if excluded(spec.excepts, job.except_dates, tz, w)}


def coverage_windows(job: Job, start: str | None, end: str | None, now: datetime) -> list[datetime]:
    """``coverage NAME [--from TIME] [--to TIME]``: the windows of ``[from, to)``, oldest
    first; ``to`` defaults to now; without ``--from``, the last
    :data:`DEFAULT_COVERAGE_WINDOWS` windows before ``to``. At most
    ``MAX_HISTORY_WINDOWS``. Raises UsageError as :func:`backfill_windows`."""
    from .triggers import windows_before, windows_between

    tz = job.trigger.tz
    hi = durations.parse_time(check_text(end, "--to"), tz, now) if end is not None else now
    if start is None:
        return windows_before(job.trigger, hi, DEFAULT_COVERAGE_WINDOWS)
    lo = durations.parse_time(check_text(start, "--from"), tz, now)
    return windows_between(job.trigger, lo, hi, MAX_HISTORY_WINDOWS, "coverage")


# ---------------------------------------------------------------------- calendars


def parse_dates(texts: Sequence[str], flag: str = "DATE") -> list[date]:
    """ISO dates (``2026-12-25``) of ``calendar add|rm`` and a job file's calendars.
    Raises UsageError naming the first that is not one."""
    out = []
    for text in texts:
        check_text(text, flag)
        try:
            out.append(date.fromisoformat(text.strip()))
        except ValueError:
            raise UsageError(f"invalid {flag} {text!r}: give an ISO date like 2026-12-25") from None
    return out
