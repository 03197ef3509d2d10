"""Rows to models: the mapping of the tables (the same columns on both backends) onto
:mod:`jobctl.models`, and the parameters both backends bind for the hot-path writes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from ..clock import from_us, to_us
from ..models import (
    OUTPUT_LIMIT_BYTES,
    Attempt,
    Catchup,
    Job,
    JobSpec,
    JobState,
    Limits,
    NotifyRule,
    Overlap,
    PausedReason,
    Run,
    RunReason,
    RunSettings,
    RunState,
    SkipReason,
    Trigger,
    TriggerKind,
)

if TYPE_CHECKING:  # for the annotations: a listing loads none of the daemon's values
    from .values import FinishItem

# --------------------------------------------------------------------------------------
# row mapping


#: parsed ``runs.settings`` by their text: the runs of a job share it, so a burst parses
#: each job's settings once (RunSettings is frozen; nothing changes its ``env``)
_SETTINGS: dict[str, RunSettings] = {}
_SETTINGS_KEPT = 1024


def settings_from_json(text: str) -> RunSettings:
    settings = _SETTINGS.get(text)
    if settings is None:
        if len(_SETTINGS) >= _SETTINGS_KEPT:
            _SETTINGS.clear()
        settings = _SETTINGS[text] = RunSettings.from_dict(json.loads(text))
    return settings


def env_from_json(text: str) -> dict[str, str]:
    return {} if text == "{}" else dict(json.loads(text))


def opt_dt(us: int | None) -> datetime | None:
    return None if us is None else from_us(us)


def opt_us(dt: datetime | None) -> int | None:
    return None if dt is None else to_us(dt)


#: enum members by their stored text (a dict lookup, not an Enum call per column)
_TRIGGER_KINDS = {k.value: k for k in TriggerKind}
_JOB_STATES = {k.value: k for k in JobState}
_CATCHUPS = {k.value: k for k in Catchup}
_OVERLAPS = {k.value: k for k in Overlap}
_RUN_STATES = {k.value: k for k in RunState}
_RUN_REASONS = {k.value: k for k in RunReason}
_SKIP_REASONS = {k.value: k for k in SkipReason}
_PAUSED_REASONS = {k.value: k for k in PausedReason}


def _codes(text: str) -> tuple[int, ...]:
    return () if text == "[]" else tuple(json.loads(text))


#: triggers by their columns: many jobs share one (``0 * * * *``, a burst's interval), and
#: an equal trigger is one object (frozen), so the planner's memo finds it at once
_TRIGGERS: dict[tuple[Any, ...], Trigger] = {}
_TRIGGERS_KEPT = 4096


def _cron_named(expr: str | None) -> bool:
    """Whether a cron expression uses ``H`` (cron's parser is imported for cron jobs only:
    a listing of interval jobs never loads it)."""
    if not expr:
        return False
    from ..cronexpr import has_hash

    return has_hash(expr)


def _trigger(r: Any) -> Trigger:
    expr = r["trigger_expr"]
    key = (
        r["trigger_kind"],
        r["trigger_tz"],
        expr,
        r["every_seconds"],
        r["anchor_at"],
        r["once_at"],
        r["after_completion"],
        # H is chosen from the job's name: such a trigger is the job's own
        r["name"] if r["trigger_kind"] in ("cron", "set") and _cron_named(expr) else None,
        r["active_from"],
        r["active_until"],
        r["anchor_phase_only"],
    )
    trigger = _TRIGGERS.get(key)
    if trigger is None:
        if len(_TRIGGERS) >= _TRIGGERS_KEPT:
            _TRIGGERS.clear()
        trigger = _TRIGGERS[key] = Trigger(
            kind=_TRIGGER_KINDS[key[0]],
            tz=key[1],
            expr=key[2],
            every_seconds=key[3],
            anchor=opt_dt(key[4]),
            at=opt_dt(key[5]),
            after_completion=bool(key[6]),
            active_from=opt_dt(key[8]),
            active_until=opt_dt(key[9]),
            phase_only=bool(key[10]),
        )
        if key[7] is not None:
            from ..triggers import named

            trigger = _TRIGGERS[key] = named(trigger, key[7])
    return trigger


def job_from_row(r: Any) -> Job:
    if not isinstance(r, dict):
        # an sqlite3.Row finds a column by name in a scan of its ~45 names: a dict once
        r = dict(zip(r.keys(), r, strict=True))
    # built at once (JobSpec.of, Job.of): a listing reads every job, and the frozen
    # constructors' 45 object.__setattr__ calls were half of each job's cost
    spec = JobSpec.of(
        {
            "name": r["name"],
            "trigger": _trigger(r),
            "command": r["command"],
            "description": r["description"],
            "stdin": r["stdin"],
            "env": env_from_json(r["env"]),
            "cwd": r["cwd"],
            "shell": r["shell"],
            "catchup": _CATCHUPS[r["catchup"]],
            "catchup_limit": r["catchup_limit"],
            "overlap": _OVERLAPS[r["overlap"]],
            "timeout_seconds": r["timeout_seconds"],
            "retries": r["retries"],
            "backoff_seconds": r["backoff_seconds"],
            "priority": r["priority"],
            "jitter_seconds": r["jitter_seconds"],
            "on_failure": r["on_failure"],
            "locks": () if r["locks"] == "[]" else tuple(json.loads(r["locks"])),
            "notify": _rules(r["notify"]),
            "grace_seconds": r["grace_seconds"],
            "warn_after_seconds": r["warn_after_seconds"],
            "keep_runs": r["keep_runs"],
            "keep_for_seconds": r["keep_for_seconds"],
            "deadline_seconds": r["deadline_seconds"],
            "pause_after_failures": r["pause_after_failures"],
            "max_running": r["max_running"],
            "ok_exit": _codes(r["ok_exit"]),
            "no_retry_exit": _codes(r["no_retry_exit"]),
            "limits": Limits.from_dict(None if r["limits"] == "{}" else json.loads(r["limits"])),
            "secrets": env_from_json(r["secrets"]),
            "env_file": r["env_file"],
            "excepts": _texts(r["excepts"]),
            "except_calendars": _texts(r["except_calendars"]),
            "on_tags": () if r["on_tags"] == "[]" else tuple(json.loads(r["on_tags"])),
            "ping_key": r["ping_key"],
        }
    )
    next_run_at = r["next_run_at"]
    paused_reason = r["paused_reason"]
    return Job.of(
        {
            "id": r["id"],
            "spec": spec,
            "state": _JOB_STATES[r["state"]],
            "created_at": from_us(r["created_at"]),
            "next_run_at": None if next_run_at is None else from_us(next_run_at),
            "missed_total": r["missed_total"],
            "last_boot_id": r["last_boot_id"],
            "paused_reason": None if paused_reason is None else _PAUSED_REASONS[paused_reason],
            "revision": r["revision"],
            "except_dates": _dates(r["except_dates"]),
        }
    )


def _rules(text: str | None) -> tuple[NotifyRule, ...]:
    """A job's ``notify`` column; its parser (the outbox's, with the notifications') is
    loaded for a job that has rules, not by a listing of jobs that have none."""
    if not text or text == "[]":
        return ()
    from .outbox import rules_of

    return rules_of(text)


def _texts(text: str) -> tuple[str, ...]:
    return () if text == "[]" else tuple(json.loads(text))


#: a job's excluded dates by their text: the jobs of one calendar share it
_DATES: dict[str, frozenset[date]] = {}


def _dates(text: str) -> frozenset[date]:
    if text == "[]":
        return frozenset()
    days = _DATES.get(text)
    if days is None:
        if len(_DATES) >= _SETTINGS_KEPT:
            _DATES.clear()
        days = _DATES[text] = frozenset(map(date.fromisoformat, json.loads(text)))
    return days


def run_from_row(r: Any) -> Run:
    return Run.of(
        {
            "id": r["id"],
            "job_id": r["job_id"],
            "job_name": r["job_name"],
            "scheduled_for": from_us(r["scheduled_for"]),
            "state": _RUN_STATES[r["state"]],
            "skip_reason": _SKIP_REASONS[r["skip_reason"]] if r["skip_reason"] else None,
            "attempt": r["attempt"],
            "max_attempts": r["max_attempts"],
            "not_before": opt_dt(r["not_before"]),
            "leased_by": r["leased_by"],
            "lease_until": opt_dt(r["lease_until"]),
            "started_at": opt_dt(r["started_at"]),
            "finished_at": opt_dt(r["finished_at"]),
            "exit_code": r["exit_code"],
            "last_error": r["last_error"],
            "reason": _RUN_REASONS[r["reason"]],
            "catchup_from": opt_dt(r["catchup_from"]),
            "priority": r["priority"],
            "run_key": r["run_key"],
            "env": env_from_json(r["env"]),
            "locks": tuple(sorted(r["lock_list"].split("\n"))) if r["lock_list"] else (),
            "settings": settings_from_json(r["settings"]),
            "cancel_requested": bool(r["cancel_requested"]),
            "attempt_base": r["attempt_base"],
            "hook_status": r["hook_status"],
            "attempt_started_at": opt_dt(r["attempt_started_at"]),
            "attempt_finished_at": opt_dt(r["attempt_finished_at"]),
            "host": r["attempt_host"],
            "cpu": r["attempt_cpu"],
            "max_rss": r["attempt_max_rss"],
            "job_revision": r["job_revision"],
        }
    )


def attempt_from_row(r: Any) -> Attempt:
    return Attempt(
        run_id=r["run_id"],
        attempt=r["attempt"],
        started_at=from_us(r["started_at"]),
        finished_at=opt_dt(r["finished_at"]),
        exit_code=r["exit_code"],
        error=r["error"],
        output_bytes=r["output_bytes"],
        host=r["host"],
        pid=r["pid"],
        cpu_user=r["cpu_user"],
        cpu_system=r["cpu_system"],
        max_rss=r["max_rss"],
    )


#: the settings text of a run by what it is made of: jobs that share a command and its
#: settings (a burst, an imported crontab's ``MAILTO``) encode it once
_SETTINGS_TEXT: dict[tuple[Any, ...], str] = {}


def settings_json(spec: JobSpec) -> str:
    key = (
        spec.command,
        spec.shell,
        spec.cwd,
        tuple(sorted(spec.env.items())),
        spec.stdin,
        spec.timeout_seconds,
        spec.backoff_seconds,
        spec.on_failure,
        spec.ok_exit,
        spec.no_retry_exit,
        spec.limits,
        tuple(sorted(spec.secrets.items())),
        spec.env_file,
        spec.trigger,
    )
    text = _SETTINGS_TEXT.get(key)
    if text is None:
        if len(_SETTINGS_TEXT) >= _SETTINGS_KEPT:
            _SETTINGS_TEXT.clear()
        settings = RunSettings.from_spec(spec)
        text = _SETTINGS_TEXT[key] = json.dumps(settings.to_dict(), sort_keys=True)
    return text


def finish_params(
    f: FinishItem, now_us: int, daemon_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An attempt's end as parameters: of the fenced update of its run, and of its attempt
    row (both backends bind the same names). The end time is ``f.ended_at`` when given,
    else ``now_us``."""
    decision, result = f.decision, f.result
    if f.ended_at is not None:
        now_us = to_us(f.ended_at)
    run = {
        "state": decision.state.value,
        "if_cancelled": decision.if_cancelled.value if decision.if_cancelled else None,
        "error": decision.error,
        "exit_code": result.exit_code,
        "uncounted": 0 if decision.counts_attempt else 1,
        "retry_at": opt_us(decision.retry_at),
        "now": now_us,
        "run_id": f.run_id,
        "attempt": f.attempt,
        "me": daemon_id,
    }
    attempt = {
        "now": now_us,
        "exit_code": result.exit_code,
        # an --ok-exit code is no error of the attempt either
        "error": None if decision.state is RunState.SUCCEEDED else result.error,
        "cpu_user": result.cpu_user,
        "cpu_system": result.cpu_system,
        "max_rss": result.max_rss,
        "output": result.output[-OUTPUT_LIMIT_BYTES:],
        "total": result.output_bytes,
        "pid": f.pid,
        "run_id": f.run_id,
        "attempt": f.attempt,
    }
    return run, attempt


def next_claim_time(not_before: int | None, foreign_lease_until: int | None) -> datetime | None:
    """When a claim may next find something, from the earliest ``not_before`` ahead and
    the earliest lease of another daemon that runs out (µs, either None): a run is due at
    its ``not_before``; a lease is free a moment (1 ms) after its expiry. Both backends."""
    free_at = None if foreign_lease_until is None else foreign_lease_until + 1000
    times = [t for t in (not_before, free_at) if t is not None]
    return from_us(min(times)) if times else None


def output_params(
    daemon_id: str, outputs: Sequence[tuple[int, int, bytes, int]]
) -> list[dict[str, Any]]:
    """``(run_id, attempt, tail, total)`` of running attempts as the parameters of the
    fenced output write (both backends bind the same names)."""
    return [
        {
            "output": tail[-OUTPUT_LIMIT_BYTES:],
            "total": total,
            "run_id": run_id,
            "attempt": attempt,
            "me": daemon_id,
        }
        for run_id, attempt, tail, total in outputs
    ]


def spec_columns(spec: JobSpec) -> dict[str, Any]:
    """The ``jobs`` columns that hold a spec (what ``add`` sets and ``edit`` changes)."""
    from .outbox import rules_text  # a write's: a listing's start never loads it

    t = spec.trigger
    return {
        "name": spec.name,
        "description": spec.description,
        "trigger_kind": t.kind.value,
        "trigger_expr": t.expr,
        "trigger_tz": t.tz,
        "every_seconds": t.every_seconds,
        "anchor_at": opt_us(t.anchor),
        "once_at": opt_us(t.at),
        "after_completion": int(t.after_completion),
        "active_from": opt_us(t.active_from),
        "active_until": opt_us(t.active_until),
        "anchor_phase_only": int(t.phase_only),
        "excepts": json.dumps(list(spec.excepts)),
        "except_calendars": json.dumps(list(spec.except_calendars)),
        "command": spec.command,
        "stdin": spec.stdin,
        "env": json.dumps(spec.env, sort_keys=True),
        "cwd": spec.cwd,
        "shell": spec.shell,
        "catchup": spec.catchup.value,
        "catchup_limit": spec.catchup_limit,
        "overlap": spec.overlap.value,
        "timeout_seconds": spec.timeout_seconds,
        "retries": spec.retries,
        "backoff_seconds": spec.backoff_seconds,
        "priority": spec.priority,
        "jitter_seconds": spec.jitter_seconds,
        "on_failure": spec.on_failure,
        "locks": json.dumps(list(spec.locks)),
        "on_tags": json.dumps(list(spec.on_tags)),
        "deadline_seconds": spec.deadline_seconds,
        "pause_after_failures": spec.pause_after_failures,
        "max_running": spec.max_running,
        "ok_exit": json.dumps(list(spec.ok_exit)),
        "no_retry_exit": json.dumps(list(spec.no_retry_exit)),
        "limits": json.dumps(
            {k: v for k, v in spec.limits.to_dict().items() if v is not None}, sort_keys=True
        ),
        "keep_runs": spec.keep_runs,
        "keep_for_seconds": spec.keep_for_seconds,
        "notify": rules_text(spec.notify),
        "grace_seconds": spec.grace_seconds,
        "warn_after_seconds": spec.warn_after_seconds,
        "secrets": json.dumps(spec.secrets, sort_keys=True),
        "env_file": spec.env_file,
        "ping_key": spec.ping_key,
    }
