"""What the dashboard reads (SPEC §17), as one small protocol, and the value types it returns.

Every read is one question the store answers in a statement or two; the ranking, paging and
drawing are pure functions in :mod:`jobctl.web.triage` and :mod:`jobctl.web.charts`.

:class:`ComposedReads` answers them from the command store's own methods; it is what the
dashboard uses until the store answers them itself with statements of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from ..models import Attempt, Job, JobState, Run, RunState, natural_key

if TYPE_CHECKING:
    from ..store import CommandStore

#: enough to read every row of a test's history through the command store's listings
_ALL = 1 << 62


@dataclass(frozen=True)
class JobFacts:
    """What the overview needs of every job to filter and rank it, before paging."""

    id: int
    name: str
    state: JobState
    #: the state of its most recent run that was not skipped, None without one
    last_state: RunState | None
    #: a run of the job waits for its retry (``failed``)
    failing: bool
    #: the earliest ``not_before`` among its pending and failed runs (due or not)
    oldest_open_due: datetime | None
    #: ``failures`` when ``--pause-after-failures`` paused it, ``user``, or None
    paused_reason: str | None = None
    #: notifications of the job that ended ``failed`` recently
    notifications_failed: int = 0


@dataclass(frozen=True)
class TimelineBar:
    """One attempt on the timeline: its run's job, its span, and what became of it."""

    job_id: int
    job_name: str
    run_id: int
    attempt: int
    started_at: datetime
    #: None while it runs
    finished_at: datetime | None
    #: ``leased`` while it runs; for its run's last attempt the run's state; else ``failed``
    state: str


class DashboardReads(Protocol):
    """The dashboard's reads. Times are aware UTC datetimes passed in."""

    def job_facts(self, query: str | None, state: JobState | None) -> list[JobFacts]:
        """Every job whose name, description or command holds ``query`` (case-insensitive;
        every job when None) and, when given, whose state is ``state``; in no order."""
        ...

    def jobs_by_ids(self, ids: Sequence[int]) -> list[Job]:
        """Those jobs, in the order of ``ids`` (ids of deleted jobs are left out)."""
        ...

    def last_runs(self, job_ids: Sequence[int]) -> dict[int, Run]:
        """The most recent run that was not skipped, per job id."""
        ...

    def recent_runs(self, job_ids: Sequence[int], per_job: int) -> dict[int, list[Run]]:
        """The ``per_job`` most recent runs of each job (skipped too), newest first."""
        ...

    def run_counts_since(self, since: datetime) -> dict[str, int]:
        """Runs whose window is at or after ``since``, counted by state."""
        ...

    def busy_workers(self) -> dict[str, int]:
        """Leased runs per daemon id."""
        ...

    def runs_page(
        self,
        job_name: str | None,
        state: RunState | None,
        since: datetime | None,
        before: tuple[datetime, int] | None,
        limit: int,
    ) -> list[Run]:
        """Runs newest window first (then newest id), of one job or all, of one state or
        all, whose window is at or after ``since``, strictly older than ``before``
        (window, id) when given: the next page starts after the last row of this one.
        Raises NotFound for an unknown job."""
        ...

    def finished_runs(self, job_id: int, limit: int) -> list[Run]:
        """The ``limit`` most recent runs of a job whose last attempt has ended, newest
        first (what its duration chart draws)."""
        ...

    def timeline(self, job_ids: Sequence[int], start: datetime, end: datetime) -> list[TimelineBar]:
        """The attempts of those jobs that overlap ``[start, end)`` (running ones too),
        by start."""
        ...


class ComposedReads:
    """:class:`DashboardReads` over the command store's methods (reads whole listings)."""

    def __init__(self, store: CommandStore) -> None:
        self.store = store

    def job_facts(self, query: str | None, state: JobState | None) -> list[JobFacts]:
        needle = (query or "").casefold()
        jobs = [
            j
            for j in self.store.list_jobs()
            if (state is None or j.state is state)
            and (
                not needle
                or any(
                    needle in (text or "").casefold()
                    for text in (j.name, j.spec.description, j.spec.command)
                )
            )
        ]
        last = self.store.last_runs([j.id for j in jobs]) if jobs else {}
        failing = {r.job_id for r in self.store.list_runs(state=RunState.FAILED, limit=_ALL)}
        oldest: dict[int, datetime] = {}
        for s in (RunState.PENDING, RunState.FAILED):
            for r in self.store.list_runs(state=s, limit=_ALL):
                if r.not_before is not None and (
                    r.job_id not in oldest or r.not_before < oldest[r.job_id]
                ):
                    oldest[r.job_id] = r.not_before
        return [
            JobFacts(
                id=j.id,
                name=j.name,
                state=j.state,
                last_state=last[j.id].state if j.id in last else None,
                failing=j.id in failing,
                oldest_open_due=oldest.get(j.id),
            )
            for j in jobs
        ]

    def jobs_by_ids(self, ids: Sequence[int]) -> list[Job]:
        by_id = {j.id: j for j in self.store.list_jobs()}
        return [by_id[i] for i in ids if i in by_id]

    def last_runs(self, job_ids: Sequence[int]) -> dict[int, Run]:
        return self.store.last_runs(job_ids) if job_ids else {}

    def recent_runs(self, job_ids: Sequence[int], per_job: int) -> dict[int, list[Run]]:
        wanted = set(job_ids)
        return {
            k: v[:per_job] for k, v in self.store.recent_runs_by_job(per_job).items() if k in wanted
        }

    def run_counts_since(self, since: datetime) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.store.list_runs(limit=_ALL):
            if r.scheduled_for >= since:
                counts[r.state.value] = counts.get(r.state.value, 0) + 1
        return counts

    def busy_workers(self) -> dict[str, int]:
        busy: dict[str, int] = {}
        for r in self.store.list_runs(state=RunState.LEASED, limit=_ALL):
            if r.leased_by is not None:
                busy[r.leased_by] = busy.get(r.leased_by, 0) + 1
        return busy

    def runs_page(
        self,
        job_name: str | None,
        state: RunState | None,
        since: datetime | None,
        before: tuple[datetime, int] | None,
        limit: int,
    ) -> list[Run]:
        if job_name is not None:
            self.store.get_job(job_name)
        out: list[Run] = []
        for r in self.store.list_runs(job_name, state, limit=_ALL):
            if since is not None and r.scheduled_for < since:
                break
            if before is not None and (r.scheduled_for, r.id) >= before:
                continue
            out.append(r)
            if len(out) == limit:
                break
        return out

    def finished_runs(self, job_id: int, limit: int) -> list[Run]:
        names = [j.name for j in self.store.list_jobs() if j.id == job_id]
        if not names:
            return []
        runs = self.store.list_runs(names[0], limit=_ALL)
        return [r for r in runs if r.attempt_finished_at is not None][:limit]

    def timeline(self, job_ids: Sequence[int], start: datetime, end: datetime) -> list[TimelineBar]:
        jobs = self.jobs_by_ids(job_ids)
        bars: list[TimelineBar] = []
        for job in sorted(jobs, key=lambda j: natural_key(j.name)):
            for r in self.store.list_runs(job.name, limit=_ALL):
                if r.state is RunState.SKIPPED or r.started_at is None:
                    continue
                for a in self.store.get_attempts(r.id):
                    if a.started_at >= end or (a.finished_at is not None and a.finished_at < start):
                        continue
                    bars.append(_bar(job, r, a))
        bars.sort(key=lambda b: (b.started_at, b.run_id, b.attempt))
        return bars


def _bar(job: Job, run: Run, a: Attempt) -> TimelineBar:
    if a.finished_at is None:
        state = "leased"
    elif a.attempt == run.attempt and run.state is not RunState.LEASED:
        state = run.state.value
    else:
        state = "failed"
    return TimelineBar(job.id, job.name, run.id, a.attempt, a.started_at, a.finished_at, state)
