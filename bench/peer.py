"""The peer: APScheduler 3 (BackgroundScheduler, SQLAlchemyJobStore on a SQLite file,
ThreadPoolExecutor(4) running ``sh -c true`` through ``subprocess``).

Each workload runs in its own process (``python -m bench.peer MODE ...``, one JSON line
on stdout) so its memory and CPU are its own, as the jobctl daemon's are.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from .stats import median, percentile, proc_cpu_seconds, proc_cpu_split, proc_memory_mib

UTC = UTC
WORKERS = 4


def run_true() -> tuple[float, float]:
    """The job: ``sh -c true``. Returns (start, end) wall times for the listener."""
    t0 = time.time()
    subprocess.run(["sh", "-c", "true"], check=False)
    return t0, time.time()


class Recorder:
    """Collects (scheduled, started, finished) of every executed job from the events."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, float]] = []
        self.missed = 0
        self.errors = 0
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)

    def __call__(self, event) -> None:
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED

        with self.cond:
            if event.code == EVENT_JOB_EXECUTED:
                start, end = event.retval
                self.rows.append((event.scheduled_run_time.timestamp(), start, end))
            elif event.code == EVENT_JOB_MISSED:
                self.missed += 1
            elif event.code == EVENT_JOB_ERROR:
                self.errors += 1
            self.cond.notify_all()

    def wait_count(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.rows) + self.missed + self.errors < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"apscheduler: {len(self.rows)}/{n} jobs ran")
                self.cond.wait(left)


def make_scheduler(db: Path):
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    sched = BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{db}")},
        executors={"default": ThreadPoolExecutor(WORKERS)},
        # every window runs however late (jobctl's windows do too), none coalesced
        job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
        timezone=UTC,
    )
    rec = Recorder()
    sched.add_listener(rec, EVENT_JOB_EXECUTED | EVENT_JOB_MISSED | EVENT_JOB_ERROR)
    return sched, rec


def bulk_insert(
    db: Path, n: int, trigger, first_run: datetime, spread_seconds: float = 0.0
) -> None:
    """Insert ``n`` jobs straight into the job table, each a copy of one job APScheduler
    pickled itself (as jobctl's scale jobs are inserted with SQL)."""
    sched, _ = make_scheduler(db)
    sched.start(paused=True)
    sched.add_job(run_true, trigger, id="template", next_run_time=first_run)
    sched.shutdown(wait=False)
    conn = sqlite3.connect(db, isolation_level=None)
    blob = conn.execute("SELECT job_state FROM apscheduler_jobs WHERE id = 'template'").fetchone()[
        0
    ]
    state = pickle.loads(blob)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("BEGIN")
    conn.execute("DELETE FROM apscheduler_jobs")

    def rows():
        for i in range(n):
            when = first_run + timedelta(seconds=i * spread_seconds)
            state["id"] = f"job{i}"
            state["next_run_time"] = when
            yield (f"job{i}", when.timestamp(), pickle.dumps(state, pickle.HIGHEST_PROTOCOL))

    conn.executemany(
        "INSERT INTO apscheduler_jobs (id, next_run_time, job_state) VALUES (?, ?, ?)", rows()
    )
    conn.execute("COMMIT")
    conn.close()


def burst(db: Path, jobs: int, lead_seconds: float) -> dict:
    from apscheduler.triggers.date import DateTrigger

    instant = (datetime.now(UTC) + timedelta(seconds=lead_seconds)).replace(microsecond=0)
    bulk_insert(db, jobs, DateTrigger(instant), instant)
    sched, rec = make_scheduler(db)
    sched.start()
    if time.time() >= instant.timestamp():
        raise RuntimeError("apscheduler was not started before the burst instant")
    time.sleep(max(0.0, instant.timestamp() - time.time()))
    own0, kids0 = proc_cpu_split(os.getpid())
    rec.wait_count(jobs, 600)
    own1, kids1 = proc_cpu_split(os.getpid())
    sched.shutdown(wait=True)
    late = [(s - sch) * 1000 for sch, s, _ in rec.rows]
    return {
        "seconds": max(e for _, _, e in rec.rows) - instant.timestamp(),
        "p50_ms": percentile(late, 50),
        "p99_ms": percentile(late, 99),
        "succeeded": len(rec.rows),
        "missed": rec.missed,
        "cpu_ms": 1000 * (own1 - own0) / jobs,
        "children_cpu_ms": 1000 * (kids1 - kids0) / jobs,
    }


def precision(db: Path, jobs: int, seconds: float, lead_seconds: float) -> dict:
    from apscheduler.triggers.interval import IntervalTrigger

    instant = (datetime.now(UTC) + timedelta(seconds=lead_seconds)).replace(microsecond=0)
    sched, rec = make_scheduler(db)
    sched.start(paused=True)
    for i in range(jobs):
        sched.add_job(run_true, IntervalTrigger(seconds=1, start_date=instant), id=f"tick{i}")
    sched.resume()
    end = instant.timestamp() + seconds
    time.sleep(max(0.0, end - time.time()) + 0.5)
    sched.shutdown(wait=True)
    late = [(s - sch) * 1000 for sch, s, _ in rec.rows if sch < end]
    return {
        "p50_ms": percentile(late, 50),
        "p99_ms": percentile(late, 99),
        "max_ms": max(late) if late else float("nan"),
        "starts": len(late),
    }


def scale(db: Path, jobs: int, idle_seconds: float, dispatches: int) -> dict:
    from apscheduler.triggers.interval import IntervalTrigger

    far = datetime(2100, 1, 1, tzinfo=UTC)
    bulk_insert(db, jobs, IntervalTrigger(days=1, start_date=far), far, spread_seconds=1.0)
    pid = os.getpid()
    base_rss = proc_memory_mib(pid)[0]
    t0 = time.perf_counter()
    sched, rec = make_scheduler(db)
    sched.start()
    # ready: its first look at the job store is done (start() only wakes the thread)
    sched._jobstores_lock.acquire()
    sched._jobstores_lock.release()
    ready = time.perf_counter() - t0
    time.sleep(0.2)
    rss, hwm = proc_memory_mib(pid)
    costs = []
    for i in range(dispatches):
        n = len(rec.rows)
        t = time.time()
        sched.add_job(run_true, id=f"probe{i}")  # no trigger: run now
        rec.wait_count(n + 1, 30)
        costs.append((rec.rows[-1][1] - t) * 1000)
        time.sleep(0.05)
    time.sleep(1.0)
    c0, m0 = proc_cpu_seconds(pid), time.monotonic()
    time.sleep(idle_seconds)
    c1, m1 = proc_cpu_seconds(pid), time.monotonic()
    out = {
        "jobs": jobs,
        "ready_s": ready,
        "rss_mib": rss,
        "peak_mib": hwm,
        "interpreter_rss_mib": base_rss,
        "dispatch_ms": median(costs),
        "idle_core_pct": 100 * (c1 - c0) / (m1 - m0),
    }
    sched.shutdown(wait=True)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.peer")
    p.add_argument("mode", choices=["burst", "precision", "scale"])
    p.add_argument("--db", required=True, type=Path)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--lead", type=float, default=3.0)
    p.add_argument("--idle", type=float, default=30.0)
    p.add_argument("--dispatches", type=int, default=7)
    a = p.parse_args(argv)
    if a.mode == "burst":
        out = burst(a.db, a.jobs, a.lead)
    elif a.mode == "precision":
        out = precision(a.db, a.jobs, a.seconds, a.lead)
    else:
        out = scale(a.db, a.jobs, a.idle, a.dispatches)
    print(json.dumps(out))


def run(mode: str, db: Path, **kw: object) -> dict:
    """Run one peer workload in a fresh interpreter and return its figures."""
    args = [sys.executable, "-m", "bench.peer", mode, "--db", str(db)]
    for k, v in kw.items():
        args += [f"--{k}", str(v)]
    proc = subprocess.run(
        args,
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"peer {mode} failed:\n{proc.stderr[-2000:]}")
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
