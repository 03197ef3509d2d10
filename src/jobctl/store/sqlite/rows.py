"""Rows to models: the mapping of the SQLite tables onto :mod:`jobctl.models`."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from ...clock import from_us, to_us
from ...models import (
    Attempt,
    Catchup,
    Job,
    JobSpec,
    JobState,
    Overlap,
    Run,
    RunReason,
    RunSettings,
    RunState,
    SkipReason,
    Trigger,
    TriggerKind,
)

# --------------------------------------------------------------------------------------
# row mapping


def opt_dt(us: int | None) -> datetime | None:
    return None if us is None else from_us(us)


def opt_us(dt: datetime | None) -> int | None:
    return None if dt is None else to_us(dt)


def job_from_row(r: Any) -> Job:
    trigger = Trigger(
        kind=TriggerKind(r["trigger_kind"]),
        tz=r["trigger_tz"],
        expr=r["trigger_expr"],
        every_seconds=r["every_seconds"],
        anchor=opt_dt(r["anchor_at"]),
        at=opt_dt(r["once_at"]),
        after_completion=bool(r["after_completion"]),
    )
    state = JobState(r["state"])
    spec = JobSpec(
        name=r["name"],
        trigger=trigger,
        command=r["command"],
        description=r["description"],
        stdin=r["stdin"],
        env=json.loads(r["env"]),
        cwd=r["cwd"],
        shell=r["shell"],
        catchup=Catchup(r["catchup"]),
        catchup_limit=r["catchup_limit"],
        overlap=Overlap(r["overlap"]),
        timeout_seconds=r["timeout_seconds"],
        retries=r["retries"],
        backoff_seconds=r["backoff_seconds"],
        priority=r["priority"],
        jitter_seconds=r["jitter_seconds"],
        on_failure=r["on_failure"],
        locks=tuple(json.loads(r["locks"])),
    )
    return Job(
        id=r["id"],
        spec=spec,
        state=state,
        created_at=from_us(r["created_at"]),
        next_run_at=opt_dt(r["next_run_at"]),
        missed_total=r["missed_total"],
        last_boot_id=r["last_boot_id"],
    )


def run_from_row(r: sqlite3.Row) -> Run:
    return Run(
        id=r["id"],
        job_id=r["job_id"],
        job_name=r["job_name"],
        scheduled_for=from_us(r["scheduled_for"]),
        state=RunState(r["state"]),
        skip_reason=SkipReason(r["skip_reason"]) if r["skip_reason"] else None,
        attempt=r["attempt"],
        max_attempts=r["max_attempts"],
        not_before=opt_dt(r["not_before"]),
        leased_by=r["leased_by"],
        lease_until=opt_dt(r["lease_until"]),
        started_at=opt_dt(r["started_at"]),
        finished_at=opt_dt(r["finished_at"]),
        exit_code=r["exit_code"],
        last_error=r["last_error"],
        reason=RunReason(r["reason"]),
        catchup_from=opt_dt(r["catchup_from"]),
        priority=r["priority"],
        run_key=r["run_key"],
        env=json.loads(r["env"]),
        locks=tuple(sorted(r["lock_list"].split("\n"))) if r["lock_list"] else (),
        settings=RunSettings.from_dict(json.loads(r["settings"])),
        cancel_requested=bool(r["cancel_requested"]),
        attempt_base=r["attempt_base"],
        hook_status=r["hook_status"],
        attempt_started_at=opt_dt(r["attempt_started_at"]),
        attempt_finished_at=opt_dt(r["attempt_finished_at"]),
        host=r["attempt_host"],
    )


def attempt_from_row(r: sqlite3.Row) -> Attempt:
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
    )


def settings_json(spec: JobSpec) -> str:
    settings = RunSettings.from_spec(spec)
    return json.dumps(settings.to_dict(), sort_keys=True)
