"""Retention's transaction (README, History: what is kept, what failed, what never ran),
written once over a :class:`~.dialect.Dialect`: the daemons' face calls it for
:meth:`~jobctl.store.protocol.DaemonStore.trim_history`; the cut of each job is the
planner's (:func:`jobctl.planner.history_cutoff`).

A pass after the first looks only at what changed since the last one started (its
:class:`~.values.RetentionMarks`): the jobs of runs that ended since, the jobs edited
since and the jobs with a ``keep_for``, each found through an index, so an idle daemon's
pass costs nothing however many jobs there are. A job is looked at only when its tallies
say it keeps more finished runs than ``keep_runs``, or when it has a ``keep_for``; then
the newest window beyond the N kept is found off the (job_id, ...) indexes and the oldest
finished runs up to it are deleted, a bounded number a transaction. The delete re-checks
each run's state, so a run made pending meanwhile (``retry-dead``, ``backfill``) is never deleted.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import datetime
from typing import Any

from ..clock import from_us, to_us
from ..planner import history_cutoff
from .dialect import Dialect
from .values import RetentionMarks

#: jobs looked at in one transaction (fewer when the row budget runs out first)
JOBS_A_STEP = 100
#: open run ids asked about in one statement
IDS_A_STATEMENT = 500
#: a job edited this long before the marks' time is looked at again: the writers' clocks
#: (PostgreSQL: the hosts' clocks, that may differ; SQLite: one host's, that may step)
EDIT_SLACK_US = {"postgresql": 60_000_000, "sqlite": 1_000_000}


def retention_marks(db: Dialect, now: datetime) -> RetentionMarks:
    """See :meth:`~jobctl.store.protocol.DaemonStore.retention_marks`."""
    q = db.q
    newest = int(db.read(q.retention_max_run)[0]["n"])
    open_ids = frozenset(int(r["id"]) for r in db.read(q.retention_open_runs))
    return RetentionMarks(newest, open_ids, now)


def changed_jobs(db: Dialect, c: Any, since: RetentionMarks) -> list[int]:
    """The ids of the jobs a pass from ``since`` looks at, in order."""
    q = db.q
    ids = {int(r["job_id"]) for r in c.execute(q.retention_changed_new, (since.max_run_id,))}
    still_open = sorted(since.open_run_ids)
    for i in range(0, len(still_open), IDS_A_STATEMENT):
        chunk = still_open[i : i + IDS_A_STATEMENT]
        sql = q.retention_changed_open.format(marks=db.marks(len(chunk)))
        ids.update(int(r["job_id"]) for r in c.execute(sql, chunk))
    ids.update(int(r["id"]) for r in c.execute(q.retention_keep_for))
    edited = to_us(since.at) - EDIT_SLACK_US[db.backend]
    ids.update(int(r["id"]) for r in c.execute(q.retention_edited, (edited,)))
    return sorted(ids)


class ChangedJobs:
    """The jobs a pass from some marks looks at, found once at the pass's first step (a
    pass right after an import of 100,000 jobs has them all: finding them again at each
    of its thousand steps made the pass quadratic) and handed out a step at a time."""

    def __init__(self) -> None:
        self._since: RetentionMarks | None = None
        self._ids: list[int] = []

    def step(self, db: Dialect, c: Any, since: RetentionMarks, after_job_id: int) -> list[int]:
        """The next :data:`JOBS_A_STEP` of them after ``after_job_id`` (0: the first step,
        which finds them)."""
        if after_job_id == 0 or self._since is not since:
            self._since, self._ids = since, changed_jobs(db, c, since)
        start = bisect_right(self._ids, after_job_id)
        return self._ids[start : start + JOBS_A_STEP]


def trim_history(
    db: Dialect,
    now: datetime,
    *,
    after_job_id: int,
    max_rows: int,
    since: RetentionMarks | None = None,
    changed: ChangedJobs | None = None,
) -> tuple[int, int | None]:
    """See :meth:`~jobctl.store.protocol.DaemonStore.trim_history`; ``changed`` keeps the
    jobs a pass looks at from one step to the next (a new one each call without it)."""
    q = db.q
    budget = max_rows
    with db.write() as c:
        if since is None:
            jobs = c.execute(q.retention_candidates, (after_job_id, JOBS_A_STEP)).fetchall()
            more = len(jobs) == JOBS_A_STEP
            last = int(jobs[-1]["id"]) if jobs else after_job_id
        else:
            step = (changed or ChangedJobs()).step(db, c, since, after_job_id)
            looked = [c.execute(q.retention_job, (i,)).fetchone() for i in step]
            jobs = [j for j in looked if j is not None and _wanted(j)]
            more = len(step) == JOBS_A_STEP
            last = step[-1] if step else after_job_id
        for j in jobs:
            beyond_kept = None
            if int(j["kept"]) > int(j["keep_runs"]):
                row = c.execute(q.nth_finished, (j["id"], int(j["keep_runs"]))).fetchone()
                beyond_kept = None if row is None else from_us(int(row["scheduled_for"]))
            keep_for = j["keep_for_seconds"]
            cut = history_cutoff(
                None if keep_for is None else float(keep_for), now, beyond_kept=beyond_kept
            )
            if cut is None:
                continue
            ids = [int(r["id"]) for r in c.execute(q.trim_ids, (j["id"], to_us(cut), budget))]
            if not ids:
                continue
            marks = db.marks(len(ids))
            c.execute(q.trim_notifications.format(marks=marks), ids)
            budget -= int(c.execute(q.trim_runs.format(marks=marks), ids).rowcount)
            if budget <= 0:
                return max_rows, int(j["id"]) - 1  # this job may have more: start at it
        return max_rows - budget, last if more else None


def _wanted(j: Any) -> bool:
    """Whether a job has a rule to apply: a --keep-for, or more finished runs kept than
    its --keep-runs (the condition of ``retention_candidates``)."""
    return j["keep_for_seconds"] is not None or int(j["kept"]) > int(j["keep_runs"])
