"""Retention's transaction (SPEC §13), written once over a :class:`~.dialect.Dialect`:
the daemons' halves of both backends call it for
:meth:`~jobctl.store.protocol.DaemonStore.trim_history`.

A job is looked at only when its tallies say it keeps more finished runs than
``keep_runs``, or when it has a ``keep_for``; then the newest window beyond the N kept is
found off the (job_id, ...) indexes and the oldest finished runs up to it are deleted, a
bounded number a transaction. The delete re-checks each run's state, so a run made
pending meanwhile (``retry-dead``, ``backfill``) is never deleted.
"""

from __future__ import annotations

from datetime import datetime

from ..clock import to_us
from .dialect import Dialect

#: jobs looked at in one transaction (fewer when the row budget runs out first)
JOBS_A_STEP = 100


def trim_history(
    db: Dialect, now: datetime, *, after_job_id: int, max_rows: int
) -> tuple[int, int | None]:
    """See :meth:`~jobctl.store.protocol.DaemonStore.trim_history`."""
    q = db.q
    budget = max_rows
    now_us = to_us(now)
    with db.write() as c:
        jobs = c.execute(q.retention_candidates, (after_job_id, JOBS_A_STEP)).fetchall()
        for j in jobs:
            cut: int | None = None
            if int(j["kept"]) > int(j["keep_runs"]):
                row = c.execute(q.nth_finished, (j["id"], int(j["keep_runs"]))).fetchone()
                cut = None if row is None else int(row["scheduled_for"])
            if j["keep_for_seconds"] is not None:
                age_cut = now_us - round(float(j["keep_for_seconds"]) * 1_000_000) - 1
                cut = age_cut if cut is None else max(cut, age_cut)
            if cut is None:
                continue
            ids = [int(r["id"]) for r in c.execute(q.trim_ids, (j["id"], cut, budget))]
            if not ids:
                continue
            marks = db.marks(len(ids))
            c.execute(q.trim_notifications.format(marks=marks), ids)
            budget -= int(c.execute(q.trim_runs.format(marks=marks), ids).rowcount)
            if budget <= 0:
                return max_rows, int(j["id"]) - 1  # this job may have more: start at it
        done = len(jobs) < JOBS_A_STEP
        return max_rows - budget, None if done else int(jobs[-1]["id"])
