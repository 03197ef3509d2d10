"""The dashboard's reads (:class:`~jobctl.store.protocol.DashboardReads`), written once over
a :class:`~.dialect.Dialect` with the statements ``dash_*`` of :mod:`.queries`.

Each read is one statement, or one short indexed statement a job of the page shown (at most
50): none reads every run, so a page costs about the same with 10 million runs as with a
thousand (see jobctl(1), jobctl serve). Every job's last run state, which the overview ranks and
filters by,
comes from ``last_ends`` (each job's newest ended run, kept by triggers as runs change) and
the open runs, never from a look at each job's history.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..clock import from_us, to_us
from ..errors import NotFound
from ..models import Job, JobState, Run, RunState
from .dialect import Dialect
from .rows import job_from_row, opt_dt, run_from_row
from .values import JobFacts, StripRun, TimelineBar

#: the runs of a window this long before the timeline's start are looked at for attempts
TIMELINE_LOOKBACK = timedelta(days=1)
#: the most bars a timeline holds (the latest attempts)
MAX_TIMELINE_BARS = 5000
#: states by value (a dict lookup, not an Enum call, for each of 10,000 jobs)
_JOB_STATES = {s.value: s for s in JobState}
_RUN_STATES = {s.value: s for s in RunState}


def _like(text: str) -> str:
    """``%text%`` for ``LIKE … ESCAPE '!'``, lower-cased, its wildcards taken literally."""
    escaped = text.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return f"%{escaped}%"


class Dashboard:
    """:class:`~jobctl.store.protocol.DashboardReads` over one dialect."""

    def __init__(self, db: Dialect) -> None:
        self.db = db
        self.q = db.q

    def job_facts(
        self, query: str | None, state: JobState | None, failed_since: datetime
    ) -> list[JobFacts]:
        """Every job whose name, description or command holds ``query`` (ignoring case;
        every job when None) and, when given, whose state is ``state``, in no order;
        ``notifications_failed`` counts those that ended ``failed`` since ``failed_since``."""
        clause, params = self._where(query, state)
        failed = {
            int(r["job_id"]): int(r["n"])
            for r in self.db.read(self.q.dash_failed_notifications, (to_us(failed_since),))
        }
        retrying: set[int] = set()
        due: dict[int, int] = {}
        # per job, (window, state) of its newest open run
        newest_open: dict[int, tuple[int, str]] = {}
        for r in self.db.read(self.q.dash_open_runs):
            job_id, at, state = int(r["job_id"]), r["due"], r["state"]
            if state == "failed":
                retrying.add(job_id)
            if state != "leased" and at is not None and (job_id not in due or at < due[job_id]):
                due[job_id] = int(at)
            window = int(r["newest"])
            if job_id not in newest_open or window > newest_open[job_id][0]:
                newest_open[job_id] = (window, state)
        out = []
        for r in self.db.read(self.q.dash_job_facts.format(where=clause), params):
            job_id = int(r["id"])
            last = r["end_state"]
            open_run = newest_open.get(job_id)
            if open_run is not None and (last is None or open_run[0] > int(r["end_window"])):
                last = open_run[1]
            out.append(
                JobFacts(
                    id=job_id,
                    name=r["name"],
                    state=_JOB_STATES[r["state"]],
                    last_state=_RUN_STATES[last] if last else None,
                    failing=job_id in retrying,
                    oldest_open_due=opt_dt(due.get(job_id)),
                    paused_reason=r["paused_reason"],
                    notifications_failed=failed.get(job_id, 0),
                )
            )
        return out

    def job_names(self, query: str | None) -> list[tuple[int, str]]:
        """(id, name) of every job the search ``query`` finds (as :meth:`job_facts`)."""
        clause, params = self._where(query, None)
        return [
            (int(r["id"]), r["name"])
            for r in self.db.read(self.q.dash_job_names.format(where=clause), params)
        ]

    def _where(self, query: str | None, state: JobState | None) -> tuple[str, dict[str, Any]]:
        """The search (name, description, command; ignoring case) and the state filter."""
        where: list[str] = []
        params: dict[str, Any] = {}
        if query:
            q = self.db.named("q")
            where.append(
                "("
                + " OR ".join(
                    f"LOWER({col}) LIKE {q} ESCAPE '!'"
                    for col in ("j.name", "COALESCE(j.description, '')", "j.command")
                )
                + ")"
            )
            params["q"] = _like(query)
        if state is not None:
            where.append(f"j.state = {self.db.named('state')}")
            params["state"] = state.value
        return ("WHERE " + " AND ".join(where)) if where else "", params

    def jobs_by_ids(self, ids: Sequence[int]) -> list[Job]:
        """Those jobs, in the order of ``ids`` (ids of deleted jobs are left out)."""
        if not ids:
            return []
        rows = self.db.read(self.q.dash_jobs_by_ids.format(marks=self.db.marks(len(ids))), ids)
        by_id = {int(r["id"]): job_from_row(r) for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    def last_runs(self, job_ids: Sequence[int]) -> dict[int, Run]:
        """Per job id, its most recent run by window that was not skipped."""
        if not job_ids:
            return {}
        sql = self.q.dash_last_runs.format(marks=self.db.marks(len(job_ids)))
        runs = [run_from_row(r) for r in self.db.read(sql, list(job_ids))]
        return {r.job_id: r for r in runs}

    def recent_runs(self, job_ids: Sequence[int], per_job: int) -> dict[int, list[StripRun]]:
        """The ``per_job`` most recent runs of each job (skipped too), newest first: their
        id, state and window, what the overview's strips show."""
        out: dict[int, list[StripRun]] = {}
        for job_id in job_ids:
            rows = self.db.read(self.q.dash_strip_runs, (job_id, per_job))
            if rows:
                out[job_id] = [
                    StripRun(int(r["id"]), RunState(r["state"]), from_us(int(r["scheduled_for"])))
                    for r in rows
                ]
        return out

    def run_counts_since(self, since: datetime) -> dict[str, int]:
        """Runs whose window is at or after ``since``, counted by state (every state)."""
        rows = self.db.read(self.q.dash_run_counts_since, {"since": to_us(since)})
        return {r["state"]: int(r["n"]) for r in rows}

    def busy_workers(self) -> dict[str, int]:
        """Leased runs per daemon id."""
        return {r["leased_by"]: int(r["n"]) for r in self.db.read(self.q.dash_busy_workers)}

    def runs_page(
        self,
        job_name: str | None,
        state: RunState | None,
        since: datetime | None,
        before: tuple[datetime, int] | None,
        limit: int,
    ) -> list[Run]:
        """Runs, newest window first (then newest id), of one job or all, of one state or
        all, whose window is at or after ``since``, and strictly before ``before``
        (window, id) when given: a page goes on after the last row of the one before.
        Raises NotFound for an unknown job."""
        mark = self.db.marks(1)
        where: list[str] = []
        params: list[Any] = []
        if job_name is not None:
            rows = self.db.read(self.q.job_id_by_name, (job_name,))
            if not rows:
                raise NotFound(f"no job named {job_name!r}")
            where.append(f"runs.job_id = {mark}")
            params.append(int(rows[0]["id"]))
        if state is not None:
            where.append(f"runs.state = {mark}")
            params.append(state.value)
        if since is not None:
            where.append(f"runs.scheduled_for >= {mark}")
            params.append(to_us(since))
        if before is not None:
            where.append(
                f"(runs.scheduled_for < {mark}"
                f" OR (runs.scheduled_for = {mark} AND runs.id < {mark}))"
            )
            at = to_us(before[0])
            params += [at, at, before[1]]
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        params.append(limit)
        return [
            run_from_row(r) for r in self.db.read(self.q.list_runs.format(where=clause), params)
        ]

    def finished_runs(self, job_id: int, limit: int) -> list[Run]:
        """The ``limit`` most recent runs of a job (by window) whose last attempt has
        ended, newest first: what its duration chart draws."""
        return [run_from_row(r) for r in self.db.read(self.q.dash_finished_runs, (job_id, limit))]

    def timeline_job_ids(self, start: datetime, end: datetime) -> set[int]:
        """The ids of the jobs that have an attempt :meth:`timeline` would show for
        ``[start, end)``."""
        params = [to_us(start - TIMELINE_LOOKBACK), to_us(end), to_us(end), to_us(start)]
        return {int(r["job_id"]) for r in self.db.read(self.q.dash_timeline_jobs, params)}

    def timeline(self, job_ids: Sequence[int], start: datetime, end: datetime) -> list[TimelineBar]:
        """The attempts of those jobs that overlap ``[start, end)`` (running ones too),
        by start, of runs whose window is at most a day before ``start``."""
        if not job_ids:
            return []
        sql = self.q.dash_timeline.format(marks=self.db.marks(len(job_ids)))
        params = [
            *job_ids,
            to_us(start - TIMELINE_LOOKBACK),
            to_us(end),
            to_us(end),
            to_us(start),
            MAX_TIMELINE_BARS,
        ]
        names = {
            int(r["id"]): r["name"]
            for r in self.db.read(
                self.q.dash_job_names_by_ids.format(marks=self.db.marks(len(job_ids))),
                list(job_ids),
            )
        }
        bars = [_bar(r, names) for r in self.db.read(sql, params)]
        bars.reverse()
        return bars


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _bar(r: Any, names: dict[int, str]) -> TimelineBar:
    """An attempt row as a bar: running, its run's end when it was the last, else failed.
    (Its instants as :func:`~jobctl.clock.from_us` makes them, without its memo: the
    thousands of bars of a page have as many different instants.)"""
    attempt, finished, run_state = int(r["attempt"]), r["finished_at"], r["state"]
    if finished is None:
        state = "leased"
    elif attempt == int(r["run_attempt"]) and run_state != "leased":
        state = run_state
    else:
        state = "failed"
    job_id = int(r["job_id"])
    return TimelineBar(
        job_id=job_id,
        job_name=names[job_id],
        run_id=int(r["run_id"]),
        attempt=attempt,
        started_at=_EPOCH + timedelta(microseconds=int(r["started_at"])),
        finished_at=None if finished is None else _EPOCH + timedelta(microseconds=int(finished)),
        state=state,
    )
