"""``import-crontab`` as a library: plan an import, then preview or save it (SPEC §8).

:func:`plan_import` is pure (text in, specs and errors out); :func:`save_import` writes
every job in one transaction, so an import with any error writes nothing, and a second
import of the same file changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from . import crontab, specs, triggers
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
    """One job of an import: the job (id 0 when not stored), its last run, and a verb
    (``would import``, ``added``, ``updated``, ``unchanged``)."""

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
) -> ImportPlan:
    """Parse crontab ``text`` and validate each job as ``add`` would. Raises UsageError
    only for a prefix that cannot make job names."""
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
            out.append(specs.spec_from_crontab(job, now))
        except JobctlError as e:
            errors.append((job.line, str(e)))
    errors.sort(key=lambda e: e[0])
    return ImportPlan(report, out, errors)


def preview(plan: ImportPlan, now: datetime) -> list[ImportedRow]:
    """What ``--dry-run`` shows: every job as it would be written now; none with errors."""
    if plan.errors:
        return []
    return [ImportedRow(_unsaved_job(spec, now), None, "would import") for spec in plan.specs]


def save_import(store: CommandStore, plan: ImportPlan, now: datetime) -> list[ImportedRow]:
    """Write every spec of an error-free plan in one transaction."""
    if plan.errors:
        raise ValueError("a plan with errors is never saved")
    existing = set(store.job_names())
    saved = store.add_jobs(
        [(spec, triggers.next_fire(spec.trigger, now)) for spec in plan.specs], now
    )
    last = store.last_runs([job.id for job, _ in saved])
    return [
        ImportedRow(
            job,
            last.get(job.id),
            "unchanged" if not changed else "updated" if job.name in existing else "added",
        )
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
