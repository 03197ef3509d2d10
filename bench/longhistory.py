"""A database with a long history, filled through the store's bulk API
(``commands.load_copy``, as ``db copy --history`` fills one): the history and dashboard
workloads each describe their jobs and how their runs look, and build with this.

Each job's runs are made as ``load_copy`` reads them (once), so ten million are never
held at once: every run finished with one attempt, 1 % of them dead.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class Shape:
    """How a job's runs look: one window every ``every`` up to ``end``; each lasts up to
    ``max_ms``; ``last_dead(seed)`` forces the last run of a job dead (True) or alive
    (False), None draws it like the others; ``costs`` records CPU and peak memory."""

    end: datetime
    every: timedelta
    max_ms: int
    last_dead: Any = None  # Callable[[int], bool | None] | None
    costs: bool = False


class Runs:
    """A job's ``n`` runs of ``shape``, made as they are read."""

    def __init__(self, job: Any, n: int, shape: Shape, seed: int) -> None:
        self.job, self.n, self.shape, self.seed = job, n, shape, seed

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Any]:
        from jobctl.models import Attempt, Run, RunReason, RunSettings, RunState
        from jobctl.store.values import CopiedAttempt, CopiedRun

        shape = self.shape
        forced = shape.last_dead(self.seed) if shape.last_dead is not None else None
        rng = random.Random(self.seed)
        settings = RunSettings.from_spec(self.job.spec)
        costs = {"cpu": 0.01, "max_rss": 4 << 20} if shape.costs else {}
        for k in range(self.n, 0, -1):
            window = shape.end - k * shape.every
            dead = forced if (k == 1 and forced is not None) else rng.random() < 0.01
            started = window + timedelta(milliseconds=rng.randint(1, 50))
            ended = started + timedelta(milliseconds=rng.randint(5, shape.max_ms))
            run = Run.of(
                {
                    "id": 0,
                    "job_id": self.job.id,
                    "job_name": self.job.name,
                    "scheduled_for": window,
                    "state": RunState.DEAD if dead else RunState.SUCCEEDED,
                    "skip_reason": None,
                    "attempt": 1,
                    "max_attempts": 1,
                    "not_before": window,
                    "leased_by": None,
                    "lease_until": None,
                    "started_at": started,
                    "finished_at": ended,
                    "exit_code": 3 if dead else 0,
                    "last_error": "exit 3" if dead else None,
                    "reason": RunReason.SCHEDULE,
                    "catchup_from": None,
                    "priority": 0,
                    "run_key": None,
                    "env": {},
                    "locks": (),
                    "settings": settings,
                    "cancel_requested": False,
                    "attempt_base": 0,
                    "hook_status": None,
                    "attempt_started_at": started,
                    "attempt_finished_at": ended,
                    "host": "bench",
                    **costs,
                }
            )
            attempt = Attempt(0, 1, started, ended, run.exit_code, run.last_error, 3, "bench", 4242)
            yield CopiedRun(run, [CopiedAttempt(attempt, b"ok\n")])


def build(db: str, jobs: Sequence[Any], runs_per_job: int, shape: Shape, now: datetime) -> float:
    """Fill the empty database at ``db`` with ``jobs`` (jobctl ``Job`` values), each with
    ``runs_per_job`` runs of ``shape``, through ``load_copy``; the seconds it took."""
    from jobctl.store import open_store
    from jobctl.store.values import CopiedJob

    copied = [
        CopiedJob(job, Runs(job, runs_per_job, shape, i))  # type: ignore[arg-type]
        for i, job in enumerate(jobs)
    ]
    t0 = time.perf_counter()
    store = open_store(db)
    try:
        store.commands.load_copy(copied, now, history=True)
    finally:
        store.close()
    return time.perf_counter() - t0
