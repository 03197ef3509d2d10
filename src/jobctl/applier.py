"""Applying a job file (README, Jobs in git): the text, the jobs as stored, and the plan that makes
them match, for ``apply``, ``edit -e``, ``rollback`` and the dashboard's editor.

:func:`plan_text` reads and validates the whole file first, so a file with any error
changes nothing; the store then applies the plan in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from . import jobfile, specs, triggers
from .errors import Conflict, RevisionChanged, UsageError
from .jobfile import ApplyPlan, FileErrors, Problem
from .models import Job, JobSpec, JobState

if TYPE_CHECKING:
    from .store import CommandStore


def plan_text(
    store: CommandStore,
    text: str,
    now: datetime,
    *,
    prune: bool = False,
    force: bool = False,
    scope: Sequence[str] | None = None,
) -> ApplyPlan:
    """What applying ``text`` to the store's jobs would do. Raises FileErrors listing
    every problem of the file (each with its line where it has one), and the start
    settings ``add`` checks (``cwd``, ``shell``) of each job it adds or changes; Conflict
    for a ``prune`` that would delete every job and add none, unless ``force``."""
    jobs = store.list_jobs()
    parsed = jobfile.parse_text(text, now, {j.name: j for j in jobs})
    if parsed.problems:
        raise FileErrors(parsed.problems)
    stored_calendars = {name: days for name, days, _ in store.calendar_list()}
    plan = jobfile.plan_apply(
        parsed.jobs,
        jobs,
        prune=prune,
        scope=scope,
        calendars=parsed.calendars,
        stored_calendars=stored_calendars,
    )
    if prune and not force and not plan.added and jobs and len(plan.removed) == len(jobs):
        # an empty file (or a wrong one) given to --prune is more often a slip than a wish
        raise Conflict(
            f"--prune would delete every job ({len(jobs)}) and add none; nothing was "
            "applied: give --force if that is what you want"
        )
    problems = []
    known = set(stored_calendars) | set(parsed.calendars)
    touched = [d.spec for d in plan.added] + [c.new.spec for c in plan.changed]
    # the jobs as they would be: --after jobs follow one of them, and make no cycle
    gone = {j.name for j in plan.removed} | {spec.name for spec in touched}
    after = [j for j in jobs if j.name not in gone] + [_as_job(spec, now) for spec in touched]
    secrets = {s.name for s in store.list_secrets()} if any(s.secrets for s in touched) else set()
    for spec in touched:
        line = parsed.line_of
        try:
            specs.check_start_settings(spec.cwd, spec.shell)
        except UsageError as e:
            problems.append(Problem(line(spec.name, "cwd" if spec.cwd else "shell"), _of(spec, e)))
        try:
            specs.check_after(spec.name, spec.trigger, after)
        except UsageError as e:
            problems.append(Problem(line(spec.name, "after"), _of(spec, e)))
        for name in spec.except_calendars:
            if name not in known:
                problems.append(
                    Problem(
                        line(spec.name, "except_calendars"),
                        f"job {spec.name}: except_calendars: no calendar named {name}",
                    )
                )
        for env, name in spec.secrets.items():
            if name not in secrets:  # as add refuses it (exit 2); the store checks it again
                problems.append(
                    Problem(
                        line(spec.name, "secrets", env),
                        f"job {spec.name}: secrets: {env}: no secret named {name}",
                    )
                )
    problems += _shared_ping_keys(after)
    problems.sort(key=lambda p: (p.line is None, p.line or 0))
    if problems:
        raise FileErrors(problems)
    return plan


def _of(spec: JobSpec, e: UsageError) -> str:
    return f"job {spec.name}: {e}"


def _shared_ping_keys(jobs: Sequence[Job]) -> list[Problem]:
    """A ``ping_key`` held by two jobs as they would be (``jobs``: those the file leaves
    alone, then the file's): a table copied from one job to another, or two tables with
    the same key. Each key is one job's ``/ping/KEY``; the later job is named."""
    holder: dict[str, str] = {}
    problems = []
    for job in jobs:
        key = job.spec.ping_key
        if key is None:
            continue
        if key in holder:
            problems.append(
                Problem(
                    None,
                    f"job {job.name}: ping_key: it is the key of job {holder[key]} (leave "
                    "ping_key out and a new one is made)",
                )
            )
        else:
            holder[key] = job.name
    return problems


def check_unchanged(base: Sequence[Job], current: Sequence[Job]) -> None:
    """Refuse a text made from the jobs ``base`` when one of them is no longer at the
    revision it had then (``current`` are the jobs now): applying it would silently undo
    the other change. Raises RevisionChanged naming each job and both revisions."""
    now_by_id = {j.id: j for j in current}
    problems = []
    for job in base:
        cur = now_by_id.get(job.id)
        if cur is None:
            problems.append(
                f"job {job.name} was deleted since the text was made (at revision {job.revision})"
            )
        elif cur.revision != job.revision:
            problems.append(
                f"job {job.name} changed since the text was made: it was at revision "
                f"{job.revision}, it is at revision {cur.revision}"
            )
    if problems:
        raise RevisionChanged("; ".join(problems))


def _as_job(spec: JobSpec, now: datetime) -> Job:
    """A job of the file as it would be stored, for the checks across jobs."""
    return Job(0, spec, JobState.ACTIVE, now, None, 0, None)


def warnings(plan: ApplyPlan) -> list[str]:
    """What ``add`` would warn about the jobs the plan adds or changes (a cron
    expression that never fires, a path that cannot be checked now)."""
    out = []
    for spec in [d.spec for d in plan.added] + [c.new.spec for c in plan.changed]:
        out += [f"job {spec.name}: {w}" for w in specs.trigger_warnings(spec.trigger)]
        out += [f"job {spec.name}: {w}" for w in specs.check_start_settings(spec.cwd, spec.shell)]
    return out


def apply_plan(store: CommandStore, plan: ApplyPlan, now: datetime, *, source: str) -> None:
    """Write the plan in one transaction (nothing for an empty one)."""
    if plan.empty():
        return
    next_runs = {d.spec.name: triggers.next_fire(d.spec.trigger, now) for d in plan.added}
    next_runs |= {c.job.name: triggers.next_fire(c.new.spec.trigger, now) for c in plan.changed}
    store.apply_plan(plan, next_runs, now, source=source)
