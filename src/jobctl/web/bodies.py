"""Request bodies and query strings -> the values the CLI's validation takes.

Pure functions, no web framework. A JSON job object (shaped as ``show --json`` gives it)
is turned into the same :class:`~jobctl.specs.TriggerOptions` and policy dict that
``add``/``edit`` build from their flags, then validated by the same functions of
:mod:`jobctl.specs`, so every message is the CLI's. JSON type errors (a string where a
number goes) get their own one-line message. Everything raises UsageError (422).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import UsageError
from ..models import Job, JobSpec, RunState, Trigger, TriggerKind
from ..notifications import NotificationState
from ..specs import (
    TriggerOptions,
    build_spec,
    check_lock_name,
    check_run_key,
    edit_changes,
    parse_env_pairs,
)
from ..triggers import EVERY_PREFIX, split_set

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: fields of the job object that are read-only: ignored when a ``show --json`` object is
#: posted back
READ_ONLY_JOB_FIELDS = frozenset(
    {
        "id",
        "state",
        "next_run_at",
        "missed_total",
        "last_run",
        "created_at",
        "runs",
        "paused_reason",
        "revision",
        # a watched job's key (README "Watching jobs that jobctl does not run") is made
        # when the job is, never given; ``watch`` itself is read when a job is created
        "ping_key",
        # a set's triggers, one object each: written through trigger (kind set)
        "triggers",
    }
)
#: the active range (README, Schedule sets): ISO times, naive in the job's zone; JSON
#: gives them in UTC with Z; null leaves it, "" clears it
RANGE_FIELDS = frozenset({"active_from", "active_until"})


def _with_range(trig: TriggerOptions, body: Mapping[str, Any]) -> TriggerOptions:
    for field in RANGE_FIELDS:
        if body.get(field) is not None:
            setattr(trig, field, _str(body[field], field))
    return trig


TRIGGER_FIELDS = frozenset({"kind", "expr", "tz", "every", "at", "start", "after_completion"})
#: a cron trigger's ``resolved`` (its expression with each H drawn, README "Where runs go,
#: spreading the load, one pause for everything") is read-only: made from ``expr`` and the
#: job's name, ignored when posted back
READ_ONLY_TRIGGER_FIELDS = frozenset({"resolved"})
# JSON field -> the policy key of ``cli.base.POLICY_KEYS``, and how its value is read
_POLICY_FIELDS: dict[str, str] = {
    "catchup": "str",
    "catchup_limit": "int",
    "overlap": "str",
    "timeout": "duration",
    "retries": "int",
    "backoff": "duration",
    "priority": "int",
    "jitter": "duration",
    "env": "env",
    "secrets": "secrets",
    "env_file": "env_file",
    "cwd": "str",
    "shell": "str",
    "on_failure": "str",
    "stdin": "str",
    "description": "str",
    "locks": "locks",
    "on": "tags",
    "deadline": "duration",
    "pause_after_failures": "int",
    "max_running": "int",
    "ok_exit": "codes",
    "no_retry_exit": "codes",
    "limits": "limits",
    "keep_runs": "int",
    "keep_for": "duration",
    "notify": "notify",
    "grace": "duration",
    "warn_after": "duration",
    "except": "excepts",
    "except_calendars": "calendars",
}
JOB_FIELDS = frozenset(
    {
        "name",
        "trigger",
        "command",
        "paused",
        "watch",
        "active_from",
        "active_until",
        *_POLICY_FIELDS,
    }
)
LIMIT_FIELDS = frozenset({"nice", "io_class", "memory_max", "cpu_max", "files_max"})


class BadRequest(Exception):
    """A body that is not JSON, or not a JSON object (HTTP 400)."""


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object; an empty body is ``{}``. Raises BadRequest."""
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise BadRequest(f"malformed JSON: {' '.join(str(e).split())}") from None
    if not isinstance(value, dict):
        raise BadRequest("the body must be a JSON object")
    return value


# ---------------------------------------------------------------------- typed fields


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"invalid {what} {json.dumps(value)}: must be an integer")
    if not INT64_MIN <= value <= INT64_MAX:
        raise UsageError(f"invalid {what} {value}: beyond the 64-bit range")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise UsageError(f"invalid {what} {json.dumps(value)}: must be a string")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"invalid {what} {json.dumps(value)}: must be true or false")
    return value


def _duration_text(value: Any, what: str) -> str:
    """A number of seconds or a DURATION string -> the text ``parse_duration`` takes."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UsageError(
            f"invalid {what} {json.dumps(value)}: must be seconds or a DURATION such as '90m'"
        )
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _env_pairs(value: Any, what: str) -> list[str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise UsageError(f"invalid {what}: must be an object of NAME: string")
    return [f"{k}={v}" for k, v in value.items()]


def _str_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"invalid {what}: must be an array of strings")
    return value


def _codes(value: Any, what: str) -> str:
    """A list of exit codes -> the comma text ``--ok-exit`` takes."""
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise UsageError(f"invalid {what}: must be an array of exit codes 1-255")
    return ",".join(str(v) for v in value)


def _size_text(value: Any, what: str) -> str:
    """A number of bytes or a SIZE string -> the text ``--memory-max`` takes."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value % 1024:
            raise UsageError(f"invalid {what} {value}: a whole number of KiB, at least 1M")
        return f"{value // 1024}K"
    if isinstance(value, str):
        return value
    raise UsageError(f"invalid {what} {json.dumps(value)}: must be bytes or a SIZE such as '1G'")


def _limits(value: Any, out: dict[str, Any]) -> None:
    """The ``limits`` object (null members: not given) -> the limit flags' values."""
    if not isinstance(value, dict):
        raise UsageError("invalid limits: must be an object")
    _check_fields(value, LIMIT_FIELDS, "limits.")
    for key in ("nice", "files_max"):
        if value.get(key) is not None:
            out[key] = _int(value[key], f"limits.{key}")
    if value.get("io_class") is not None:
        out["io_class"] = _str(value["io_class"], "limits.io_class")
    if value.get("memory_max") is not None:
        out["memory_max"] = _size_text(value["memory_max"], "limits.memory_max")
    if value.get("cpu_max") is not None:
        out["cpu_max"] = _duration_text(value["cpu_max"], "limits.cpu_max")


def _check_fields(body: Mapping[str, Any], allowed: frozenset[str], where: str = "") -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise UsageError(f"unknown field {where}{unknown[0]!r}")


# ---------------------------------------------------------------------- job bodies


def _policies(body: Mapping[str, Any]) -> dict[str, Any]:
    """The policy fields given (null = not given) -> ``policy_changes``' input."""
    out: dict[str, Any] = {}
    for field, kind in _POLICY_FIELDS.items():
        value = body.get(field)
        if value is None:
            continue
        if kind == "int":
            out[field] = _int(value, field)
        elif kind == "str":
            out[field] = _str(value, field)
        elif kind == "duration":
            out[field] = _duration_text(value, field)
        elif kind == "env":
            out["env"] = _env_pairs(value, field)
        elif kind == "secrets":
            # {ENV: secret name}; {} clears them
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise UsageError('invalid secrets: must be an object of ENV: "secret name"')
            out["secret"] = [f"{k}={v}" for k, v in value.items()]
            out["no_secrets"] = not value
        elif kind == "env_file":
            path = _str(value, field)
            if path:
                out["env_file"] = path
            else:  # "" reads no file
                out["no_env_file"] = True
        elif kind == "locks":
            out["lock"] = _str_list(value, field)
        elif kind == "excepts":
            # [EXPR]; [] clears the expressions and the calendars, as --no-except
            exprs = _str_list(value, field)
            out["except_"] = exprs
            out["no_except"] = not exprs and not body.get("except_calendars")
        elif kind == "calendars":
            out["except_calendar"] = _str_list(value, field)
        elif kind == "tags":
            tags = _str_list(value, field)
            if tags:
                out["on"] = tags
            else:
                out["anywhere"] = True
        elif kind == "codes":
            out[field] = _codes(value, field)
        elif kind == "limits":
            _limits(value, out)
        elif kind == "notify":
            out["notify"] = _notify(value)
            out["no_notify"] = not out["notify"]
    return out


def _notify(value: Any) -> list[str]:
    """``notify``: ``[{channel, events}]`` (or ``"CHANNEL[:EVENTS]"`` strings) -> the
    ``--notify`` values; ``[]`` clears the list."""
    from ..notifications import rules_from_json

    if not isinstance(value, list):
        raise UsageError("invalid notify: must be an array of {channel, events}")
    rules = rules_from_json(value)
    return [f"{r.channel}:{','.join(e.value for e in r.events)}" for r in rules]


def _trigger_options(trigger: Any, *, partial: bool) -> TriggerOptions:
    """The ``trigger`` object -> the trigger flags: ``kind`` picks the flag, ``expr`` (or
    ``every``/``at``) is what that flag takes. With ``partial`` (PATCH), ``kind`` may be
    left out to change only ``tz``."""
    if not isinstance(trigger, dict):
        raise UsageError("invalid trigger: must be an object with a kind")
    _check_fields(trigger, TRIGGER_FIELDS | READ_ONLY_TRIGGER_FIELDS, "trigger.")
    opts = TriggerOptions()
    if trigger.get("tz") is not None:
        opts.tz = _str(trigger["tz"], "trigger.tz")
    if trigger.get("after_completion") is not None:
        opts.after_completion = _bool(trigger["after_completion"], "trigger.after_completion")
    kind_text = trigger.get("kind")
    if kind_text is None:
        if partial:
            if trigger.get("start") is not None:
                opts.start = _str(trigger["start"], "trigger.start")
            return opts
        raise UsageError("trigger.kind is required: cron|interval|once|reboot|manual|after|set")
    try:
        kind = TriggerKind(kind_text)
    except (ValueError, TypeError):
        raise UsageError(
            f"invalid trigger.kind {json.dumps(kind_text)}: use "
            + "|".join(k.value for k in TriggerKind)
        ) from None
    expr = trigger.get("expr")
    if kind is TriggerKind.CRON:
        if expr is None:
            raise UsageError("trigger.expr is required for a cron trigger")
        opts.cron = _str(expr, "trigger.expr")
    elif kind is TriggerKind.REBOOT:
        opts.cron = "@reboot"
    elif kind is TriggerKind.INTERVAL:
        every = expr if expr is not None else trigger.get("every")
        if every is None:
            raise UsageError("trigger.expr (or trigger.every) is required for an interval")
        opts.every = _duration_text(every, "trigger.expr")
        if trigger.get("start") is not None:
            opts.start = _str(trigger["start"], "trigger.start")
    elif kind is TriggerKind.ONCE:
        at = expr if expr is not None else trigger.get("at")
        if at is None:
            raise UsageError("trigger.expr (or trigger.at) is required for a one-shot trigger")
        opts.at = _str(at, "trigger.expr")
    elif kind is TriggerKind.SET:
        # the members' texts joined with " | ", as job JSON gives them
        if expr is None:
            raise UsageError("trigger.expr is required for a set: its triggers joined by |")
        texts = split_set(_str(expr, "trigger.expr"))
        opts.cron = [t for t in texts if not t.startswith(EVERY_PREFIX)]
        opts.every = [t[len(EVERY_PREFIX) :] for t in texts if t.startswith(EVERY_PREFIX)]
        opts.order = ["every" if t.startswith(EVERY_PREFIX) else "cron" for t in texts]
        if trigger.get("start") is not None:
            opts.start = _str(trigger["start"], "trigger.start")
    elif kind is TriggerKind.AFTER:
        if expr is None:
            raise UsageError("trigger.expr is required for an after trigger: JOB[:STATES]")
        opts.after = _str(expr, "trigger.expr")
    else:
        opts.manual = True
    return opts


def _command(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise UsageError("invalid command: must be a shell string (or an array of arguments)")


def job_spec_from_body(body: Mapping[str, Any], now: datetime) -> tuple[JobSpec, bool]:
    """``POST /v1/jobs``: a job object -> a validated JobSpec, as ``add`` builds it, and
    whether the job is created paused."""
    _check_fields(body, JOB_FIELDS | READ_ONLY_JOB_FIELDS)
    if body.get("name") is None:
        raise UsageError("name is required")
    if body.get("trigger") is None:
        raise UsageError("trigger is required: an object with a kind")
    name = _str(body["name"], "name")
    trig = _with_range(_trigger_options(body["trigger"], partial=False), body)
    paused = _bool(body["paused"], "paused") if body.get("paused") is not None else False
    if body.get("watch") is not None and _bool(body["watch"], "watch"):
        from ..watching import build_watch_spec

        if body.get("command") is not None:
            raise UsageError("a watched job takes no command: the work runs elsewhere and pings")
        return build_watch_spec(name, trig, _policies(_watched(body)), now), paused
    if body.get("command") is None:
        raise UsageError("command is required")
    return build_spec(name, trig, _policies(body), _command(body["command"]), now), paused


def _watched(body: Mapping[str, Any]) -> dict[str, Any]:
    """A watched job's body without the fields about starting a command that hold what
    every watched job shows (``show --json`` of one gives them all), so that one posted
    back makes the same job; any other value stays, and is refused as ``add --watch``
    refuses its flag."""
    defaults = JobSpec(
        name="w", trigger=Trigger(TriggerKind.MANUAL, tz="UTC"), command="", retries=0
    )
    shown = {
        "catchup": defaults.catchup.value,
        "catchup_limit": defaults.catchup_limit,
        "overlap": defaults.overlap.value,
        "retries": defaults.retries,
        "backoff": defaults.backoff_seconds,
        "priority": defaults.priority,
        "jitter": defaults.jitter_seconds,
        "env": defaults.env,
        "secrets": defaults.secrets,
        "shell": defaults.shell,
        "locks": list(defaults.locks),
        "ok_exit": list(defaults.ok_exit),
        "no_retry_exit": list(defaults.no_retry_exit),
    }
    return {k: v for k, v in body.items() if k not in shown or type(v) is bool or v != shown[k]}


def job_changes_from_body(body: Mapping[str, Any], now: datetime, job: Job) -> dict[str, Any]:
    """``PATCH /v1/jobs/{name}``: any subset of the job object -> ``edit``'s changes.

    ``name`` renames; ``paused`` is not a field ``edit`` changes (POST ``…/pause``)."""
    _check_fields(body, JOB_FIELDS | READ_ONLY_JOB_FIELDS)
    if body.get("paused") is not None:
        raise UsageError("paused is changed by POST /v1/jobs/NAME/pause or /resume")
    if body.get("watch") is not None and _bool(body["watch"], "watch") != job.spec.watched:
        raise UsageError("watch is set when a job is created, not changed")
    if job.spec.watched:
        # as edit refuses for a watched job: no command, no flag about starting one
        from ..watching import refuse_start_flags

        body = _watched(body)
        refuse_start_flags(_policies(body))
        if body.get("command") is not None:
            raise UsageError(f"job {job.name!r} is watched: it has no command")
    trig = _with_range(
        _trigger_options(body["trigger"], partial=True)
        if body.get("trigger") is not None
        else TriggerOptions(),
        body,
    )
    command = None
    if body.get("command") is not None:
        from ..specs import join_command

        command = join_command(_command(body["command"]))
    rename = _str(body["name"], "name") if body.get("name") is not None else None
    changes = edit_changes(job, trig, _policies(body), command=command, rename=rename, now=now)
    if job.spec.watched and "trigger" in changes:
        from ..watching import check_watch_trigger

        check_watch_trigger(changes["trigger"])
    return changes


# ---------------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunRequest:
    """What ``jobctl run NAME`` takes: ``--key``, ``--env``, ``--lock``, ``--priority``."""

    key: str | None
    env: dict[str, str]
    locks: list[str]
    priority: int | None


def run_request_from_body(body: Mapping[str, Any]) -> RunRequest:
    """``POST /v1/jobs/{name}/runs``: ``{key?, env?, locks?, priority?}``."""
    _check_fields(body, frozenset({"key", "env", "locks", "priority"}))
    key = check_run_key(_str(body["key"], "key")) if body.get("key") is not None else None
    env = parse_env_pairs(_env_pairs(body["env"], "env")) if body.get("env") is not None else {}
    locks = (
        [check_lock_name(lk) for lk in _str_list(body["locks"], "locks")]
        if body.get("locks") is not None
        else []
    )
    priority = _int(body["priority"], "priority") if body.get("priority") is not None else None
    return RunRequest(key=key, env=env, locks=locks, priority=priority)


def revision_from_body(body: Mapping[str, Any]) -> int:
    """``POST /v1/jobs/{name}/rollback``: ``{revision}``, a revision number (1 or more)."""
    _check_fields(body, frozenset({"revision"}))
    if body.get("revision") is None:
        raise UsageError("revision is required")
    revision = _int(body["revision"], "revision")
    if revision < 1:
        raise UsageError(f"invalid revision {revision}: must be at least 1")
    return revision


# ---------------------------------------------------------------------- query strings


def query_int(value: str | None, what: str, *, minimum: int | None = None) -> int | None:
    """A query-string integer (None when absent). Raises UsageError."""
    if value is None:
        return None
    try:
        n = int(value.strip(), 10)
    except ValueError:
        raise UsageError(f"invalid {what} {value!r}: must be an integer") from None
    if not INT64_MIN <= n <= INT64_MAX:
        raise UsageError(f"invalid {what} {value}: beyond the 64-bit range")
    if minimum is not None and n < minimum:
        raise UsageError(f"invalid {what} {n}: must be at least {minimum}")
    return n


def if_match_revisions(header: str | None) -> frozenset[int] | None:
    """``If-Match`` (RFC 9110) -> the job revisions it matches (``ETag: "REV"``): None
    when absent or ``*`` (any revision); a weak or foreign tag matches none (strong
    comparison), so it leaves the set empty and the change is refused (412)."""
    if header is None or header.strip() == "*":
        return None
    found = set()
    for tag in header.split(","):
        tag = tag.strip()
        inner = tag[1:-1] if len(tag) >= 2 and tag[0] == tag[-1] == '"' else ""
        if inner.isascii() and inner.isdigit() and len(inner) <= 19:
            found.add(int(inner))
    return frozenset(found)


def query_bool(value: str | None, what: str) -> bool:
    if value is None or value.lower() in ("false", "0", "no", ""):
        return False
    if value.lower() in ("true", "1", "yes"):
        return True
    raise UsageError(f"invalid {what} {value!r}: use true or false")


def query_state(value: str | None) -> RunState | None:
    """``?state=`` with the message of ``runs --state``."""
    if value is None:
        return None
    try:
        return RunState(value)
    except ValueError:
        raise UsageError(
            f"invalid --state {value!r}: use " + "|".join(s.value for s in RunState)
        ) from None


def query_since(value: str | None, now: datetime) -> datetime | None:
    """``?since=`` as ``runs --since``: a DURATION back from now or a time (naive: the
    server's local zone). Raises UsageError (422)."""
    if value is None or value == "":
        return None
    from ..durations import parse_since
    from ..zones import local_zone_name

    return parse_since(value, local_zone_name(), now)


def backfill_request_from_body(body: Mapping[str, Any]) -> tuple[str, str, bool]:
    """``{from, to, dry_run?}`` -> (from text, to text, dry run). Raises UsageError (422)."""
    _check_fields(body, frozenset({"from", "to", "dry_run"}))
    for field in ("from", "to"):
        if body.get(field) is None:
            raise UsageError(f"missing field {field!r}")
    dry_run = body.get("dry_run")
    return (
        _str(body["from"], "from"),
        _str(body["to"], "to"),
        _bool(dry_run, "dry_run") if dry_run is not None else False,
    )


def maintenance_request_from_body(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``{until?, reason?}`` (``POST /v1/maintenance``) -> (until text, reason). Raises
    UsageError (422)."""
    _check_fields(body, frozenset({"until", "reason"}))
    until, reason = body.get("until"), body.get("reason")
    return (
        _str(until, "until") if until is not None else None,
        _str(reason, "reason") if reason is not None else None,
    )


def query_notification_state(value: str | None) -> NotificationState | None:
    """``?state=`` with the message of ``notifications --state``."""
    if value is None:
        return None
    try:
        return NotificationState(value)
    except ValueError:
        raise UsageError(
            f"invalid --state {value!r}: use " + "|".join(s.value for s in NotificationState)
        ) from None


def secret_value_from_body(body: Mapping[str, Any]) -> bytes:
    """``PUT /v1/secrets/{name}``: ``{"value": "…"}`` -> the value's UTF-8 bytes."""
    _check_fields(body, frozenset({"value"}))
    value = body.get("value")
    if not isinstance(value, str):
        raise UsageError("invalid value: must be a string")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("invalid value: not valid UTF-8") from None
