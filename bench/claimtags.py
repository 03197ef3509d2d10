"""``python -m bench.claimtags``: what ``--on`` costs the claim.

A fleet of ``--jobs`` manual jobs (10,000), one due run each, on SQLite and on a scratch
PostgreSQL server (``bench/postgresql.py``'s). A daemon's face of the store claims the runs
four at a time (a turn of ``--workers 4``) until ``--claims`` turns have run; the figure is
the median time of one turn's claim (the store's ``record_and_claim``: the claim's own
statements, nothing else; CPU time of the process on SQLite, wall time on PostgreSQL, whose
statements run in the server), measured twice on fresh copies of the same fleet:

- **without**: no job has ``--on``;
- **with**: every job has ``--on gpu`` and the claiming daemon carries ``gpu`` (every run
  passes the tag rule, so both claim the same runs in the same order).

The ratio with / without is the cost of the rule (bound: 1.2). Reps alternate the two.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobctl import planner
from jobctl.models import JobSpec, Overlap, Trigger, TriggerKind
from jobctl.store import open_store
from jobctl.store.values import DaemonIdentity

from .stats import median

T0 = datetime(2027, 1, 1, tzinfo=UTC)


def _fleet(location: str, jobs: int, tagged: bool) -> None:
    store = open_store(location)
    try:
        trig = Trigger(TriggerKind.MANUAL, tz="UTC")
        on = ("gpu",) if tagged else ()
        specs = [
            (JobSpec(f"j{i}", trig, "true", overlap=Overlap.ALLOW, on_tags=on), None)
            for i in range(jobs)
        ]
        store.commands.add_jobs(specs, T0)
        for i in range(jobs):
            store.commands.enqueue_run(f"j{i}", T0 + timedelta(microseconds=i))
    finally:
        store.close()


def _claim_turns(location: str, claims: int, tags: tuple[str, ...]) -> list[float]:
    # SQLite runs in this process: its CPU time is the statements' own, whatever else the
    # machine does; PostgreSQL's statements run in the server, so there it is wall time
    clock = time.process_time if not location.startswith("postgresql") else time.perf_counter
    store = open_store(location)
    try:
        face = store.open_daemon(DaemonIdentity("bench", "h", 1, "b", 3600.0, tags=tags))
        face.register_daemon(T0)
        now = T0 + timedelta(seconds=1)
        times = []
        for _ in range(claims):
            t = clock()
            res = face.record_and_claim(
                now,
                finishes=[],
                started=[],
                limit=4,
                low_limit=None,
                reserved_priority=None,
                on_expired=lambda e: planner.decide_expired(
                    e.attempt, e.max_attempts, e.cancel_requested
                ),
            )
            times.append(clock() - t)
            assert len(res.claimed) == 4, len(res.claimed)
        return times
    finally:
        store.close()


def measure(new_location, jobs: int, claims: int, reps: int) -> dict[str, float]:
    """Median turn time without and with ``--on`` (alternating, fresh fleets each)."""
    without: list[float] = []
    with_tags: list[float] = []
    order = [False, True]
    for _ in range(reps):
        random.shuffle(order)
        for tagged in order:
            location = new_location()
            _fleet(location, jobs, tagged)
            got = _claim_turns(location, claims, ("gpu", "host:h") if tagged else ("host:h",))
            (with_tags if tagged else without).extend(got)
    a, b = median(without), median(with_tags)
    return {"without_ms": a * 1e3, "with_ms": b * 1e3, "ratio": b / a}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    out: dict[str, dict[str, float]] = {}
    backends = args.backends.split(",")
    if "sqlite" in backends:
        tmp = Path(tempfile.mkdtemp(prefix="jobctl-bench-tags-"))
        n = iter(range(1_000_000))
        out["sqlite"] = measure(
            lambda: str(tmp / f"{next(n)}.db"), args.jobs, args.claims, args.reps
        )
    if "postgresql" in backends:
        from .postgresql import server

        with server() as srv:
            out["postgresql"] = measure(srv.new_db, args.jobs, args.claims, args.reps)
    for backend, r in out.items():
        print(
            f"{backend:10}  claim of 4, {args.jobs} jobs: without --on {r['without_ms']:.3f} ms, "
            f"with {r['with_ms']:.3f} ms, ratio {r['ratio']:.2f} (bound 1.2)"
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
