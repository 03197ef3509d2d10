"""``import-crontab`` as a library: plan an import, then preview or save it (README, Migrating from
crontab).

:func:`plan_import` is pure (text in, specs and errors out); :func:`save_import` writes
every job in one transaction, so an import with any error writes nothing, and a second
import of the same file changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from . import crontab, specs, triggers, watching
from .cronexpr import validate_cron_expr
from .errors import JobctlError
from .models import Job, JobSpec, JobState, Run

if TYPE_CHECKING:
    from .store import CommandStore


@dataclass(frozen=True)
class ImportPlan:
    """A parsed crontab: the specs to write, and every problem, by line number.

    ``errors`` holds the parse errors and the specs that failed validation, in line
    order; any error means nothing is imported.
    """

    report: crontab.CrontabReport
    specs: list[JobSpec] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class ImportedRow:
    """One job of an import: the job (id 0 when not stored), its last run, and what the
    import does to it (``added``, ``updated``, ``unchanged``)."""

    job: Job
    last_run: Run | None
    verb: str


def plan_import(
    text: str,
    now: datetime,
    *,
    prefix: str,
    system: bool,
    current_user: str | None,
    sendmail: str | None,
    watch: bool = False,
) -> ImportPlan:
    """Parse crontab ``text`` and validate each job as ``add`` would. Raises UsageError
    only for a prefix that cannot make job names. With ``watch``, each line becomes a
    watched job (the work stays in the crontab, wrapped by ``jobctl exec``)."""
    report = crontab.parse_crontab(
        text,
        prefix=prefix,
        system=system,
        current_user=current_user,
        sendmail=sendmail,
        validate_cron=validate_cron_expr,
    )
    errors = list(report.errors)
    out = []
    for job in report.jobs:
        try:
            spec = specs.spec_from_crontab(job, now)
            out.append(watching.watch_spec_of(spec) if watch else spec)
        except JobctlError as e:
            errors.append((job.line, str(e)))
    errors.sort(key=lambda e: e[0])
    return ImportPlan(report, out, errors)


@dataclass(frozen=True)
class Matched:
    """An import matched against the jobs of its prefix (README, Migrating from crontab): the specs
    under the names they take, what happens to each job (``added``, ``updated``, ``unchanged``), and
    the jobs of the prefix that no line matches (``removed`` from the file)."""

    specs: list[JobSpec]
    actions: dict[str, str]
    removed: list[Job]


def match_jobs(specs: Sequence[JobSpec], jobs: Sequence[Job], prefix: str) -> Matched:
    """Give each line of a crontab the job it was imported as before, by content.

    A line takes the job of the prefix (``PREFIX-N``) with the same schedule and command,
    else the one with the same command (its schedule changed), else the next free
    ``PREFIX-N``; each job is taken once, and lines are matched in file order. So deleting
    or moving a line never moves a job's history onto another command, and a first
    import names its jobs ``PREFIX-1`` ... ``PREFIX-N`` in file order. A job whose line
    only moved keeps its description (the line it was first imported from). ``specs`` come
    named by ordinal (as :func:`plan_import` makes them); ``jobs`` may hold other jobs.
    """
    own = re.compile(re.escape(prefix) + r"-([1-9][0-9]*)")
    mine = [j for j in jobs if own.fullmatch(j.name)]
    taken: set[str] = set()
    names: list[str | None] = [None] * len(specs)

    def what(spec: JobSpec) -> tuple[str, str | None]:
        return (spec.command, spec.stdin)

    def when(spec: JobSpec) -> tuple[str, str | None, str]:
        return (spec.trigger.kind.value, spec.trigger.expr, spec.trigger.tz)

    for same_schedule in (True, False):
        for i, spec in enumerate(specs):
            if names[i] is not None:
                continue
            for job in mine:
                if job.name in taken or what(job.spec) != what(spec):
                    continue
                if same_schedule and when(job.spec) != when(spec):
                    continue
                names[i] = job.name
                taken.add(job.name)
                break
    used = {j.name for j in jobs} | taken
    n = 0
    for i in range(len(specs)):
        if names[i] is None:
            n += 1
            while f"{prefix}-{n}" in used:
                n += 1
            names[i] = f"{prefix}-{n}"
            used.add(f"{prefix}-{n}")
    by_name = {j.name: j for j in mine}
    out, actions = [], {}
    for spec, name in zip(specs, names, strict=True):
        assert name is not None
        spec = replace(spec, name=name)
        old = by_name.get(name)
        if old is not None and old.spec.ping_key is not None and spec.ping_key is not None:
            spec = replace(spec, ping_key=old.spec.ping_key)  # its pingers keep their key
        if old is not None and _only_moved(old.spec, spec):
            spec = replace(spec, description=old.spec.description)
        out.append(spec)
        actions[name] = "added" if old is None else "unchanged" if old.spec == spec else "updated"
    removed = [j for j in mine if j.name not in taken]
    return Matched(out, actions, removed)


_FROM_LINE = re.compile(r"imported from crontab line [0-9]+")


def _only_moved(old: JobSpec, new: JobSpec) -> bool:
    """The job's line moved: its description (which names the line it was imported from)
    is all that differs. A moved line leaves its job unchanged."""
    if old.description is None or new.description is None:
        return False
    a = _FROM_LINE.sub("", old.description, count=1)
    b = _FROM_LINE.sub("", new.description, count=1)
    return a == b and replace(old, description=new.description) == new


def preview(plan: ImportPlan, matched: Matched, now: datetime) -> list[ImportedRow]:
    """What ``--dry-run`` shows: every job as it would be written now, with what would
    happen to it; none with errors."""
    if plan.errors:
        return []
    return [
        ImportedRow(_unsaved_job(spec, now), None, matched.actions[spec.name])
        for spec in matched.specs
    ]


def save_import(
    store: CommandStore, plan: ImportPlan, matched: Matched, now: datetime, *, prune: bool
) -> list[ImportedRow]:
    """Write every spec of an error-free plan in one transaction; with ``prune``, delete
    the jobs no line matches in it too (refused, nothing written, while one of them has a
    leased run)."""
    if plan.errors:
        raise ValueError("a plan with errors is never saved")
    saved = store.add_jobs(
        [(spec, triggers.next_fire(spec.trigger, now)) for spec in matched.specs],
        now,
        delete=[job.name for job in matched.removed] if prune else (),
    )
    last = store.last_runs([job.id for job, _ in saved])
    return [
        ImportedRow(job, last.get(job.id), matched.actions[job.name] if changed else "unchanged")
        for job, changed in saved
    ]


def _unsaved_job(spec: JobSpec, now: datetime) -> Job:
    """The Job a spec would become if it were written now (id 0: not stored)."""
    return Job(
        id=0,
        spec=spec,
        state=JobState.ACTIVE,
        created_at=now,
        next_run_at=triggers.next_fire(spec.trigger, now),
        missed_total=0,
        last_boot_id=None,
    )


def wrapped_crontab(
    text: str, plan: ImportPlan, matched: Matched, exec_prefix: str, *, system: bool
) -> str:
    """The crontab ``text`` with each job line's command run by ``exec_prefix NAME --``
    (``jobctl exec``) under its job's name: to install in place of the old one, so the
    work stays where it is and its runs are watched. The command runs in the crontab's
    ``SHELL`` (else ``/bin/sh``) ``-c``, as cron ran it (its stdin after ``%`` kept as
    written)."""
    import shlex

    wrapped = {
        job.line: f"{exec_prefix} {spec.name} -- {shlex.quote(job.shell or '/bin/sh')} -c "
        f"{shlex.quote(job.command)}"
        for job, spec in zip(plan.report.jobs, matched.specs, strict=True)
    }
    return crontab.wrap_commands(text, wrapped, system=system)
