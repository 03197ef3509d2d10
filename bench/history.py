"""The history workloads (docs/benchmarks.md, History reads): reads with a long history against a
short one, and retention at work under a daemon.

``history``: a database of ``jobs`` jobs with ``runs_per_job`` finished runs each (one
attempt each, 1 % dead), built through the store's bulk API (``commands.load_copy``, as
``db copy --history`` fills a database), against the same jobs with one run each. Each
read is timed as a user meets it: the ``jobctl`` command in a new process (its start
included), and ``GET /v1/runs`` and ``GET /metrics`` against a running ``jobctl serve``.

``retention``: ``jobs`` jobs firing every second with ``--keep-runs keep`` under a real
daemon for ``seconds``: the file's size and the start lateness p99 of each interval.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from . import longhistory
from .jobctl_runs import DaemonProc, _add_jobs, jobctl_exe
from .longhistory import Shape
from .stats import median, percentile

#: the reads the README names (History: what is kept), as ``jobctl`` arguments (job and run filled
#: in)
CLI_READS = {
    "runs": ["runs"],
    "runs NAME": ["runs", "{job}"],
    "runs --state dead": ["runs", "--state", "dead"],
    "show NAME": ["show", "{job}"],
    "inspect ID": ["inspect", "{run}"],
    "list": ["list"],
    "status": ["status"],
}
HTTP_READS = {"GET /v1/runs": "/v1/runs", "GET /metrics": "/metrics"}
T_END = datetime(2026, 11, 1, tzinfo=UTC)


def build(db: Path, jobs: int, runs_per_job: int) -> float:
    """Fill an empty database through ``load_copy``; returns the seconds it took."""
    from jobctl.models import Job, JobSpec, JobState, Trigger, TriggerKind

    trig = Trigger(TriggerKind.CRON, "UTC", "* * * * *")
    made = [
        Job(
            i + 1,
            JobSpec(f"h{i}", trig, "true", keep_runs=max(runs_per_job, 1000)),
            JobState.ACTIVE,
            T_END - timedelta(days=30),
            T_END,
            0,
            None,
        )
        for i in range(jobs)
    ]
    shape = Shape(T_END, timedelta(minutes=1), max_ms=3000)
    return longhistory.build(str(db), made, runs_per_job, shape, T_END)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _timed_cli(db: Path, args: list[str], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(
            [jobctl_exe(), "--db", str(db), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - t0)
    return median(times) * 1000


def _timed_http(db: Path, reps: int) -> dict[str, float]:
    port = _free_port()
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write("bench-token\n")
        token_file = f.name
    proc = subprocess.Popen(
        [
            jobctl_exe(),
            "--db",
            str(db),
            "serve",
            "--listen",
            f"127.0.0.1:{port}",
            "--token-file",
            token_file,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"

    def get(path: str) -> bytes:
        req = urllib.request.Request(base + path, headers={"Authorization": "Bearer bench-token"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return bytes(r.read())

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                get("/healthz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        out = {}
        for name, path in HTTP_READS.items():
            get(path)  # warm: the first request imports what it needs
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                get(path)
                times.append(time.perf_counter() - t0)
            out[name] = median(times) * 1000
        return out
    finally:
        proc.terminate()
        proc.wait(30)
        os.unlink(token_file)


def reads(db: Path, reps: int) -> dict[str, float]:
    """Median ms of each read the README names (History: what is kept) on ``db``."""
    conn = sqlite3.connect(db)
    try:
        job = conn.execute("SELECT name FROM jobs ORDER BY id LIMIT 1").fetchone()[0]
        run = conn.execute("SELECT MAX(id) FROM runs").fetchone()[0]
    finally:
        conn.close()
    out = {
        name: _timed_cli(db, [a.format(job=job, run=run) for a in args], reps)
        for name, args in CLI_READS.items()
    }
    out.update(_timed_http(db, reps))
    return out


def store_reads(db: Path, reps: int) -> dict[str, float]:
    """Median ms of the store's side of each read (what the command or the route calls,
    in this process, warm): the part that history could make grow, without the new
    process's start that the wall times above carry."""
    from jobctl.models import RunState
    from jobctl.store import open_store
    from jobctl.web import metrics

    store = open_store(db, create=False)
    s = store.commands
    job = s.list_jobs()[0]
    run = s.list_runs(limit=1)[0]
    now = datetime.now(UTC)
    calls = {
        "runs": lambda: s.list_runs(limit=20),
        "runs NAME": lambda: s.list_runs(job.name, limit=20),
        "runs --state dead": lambda: s.list_runs(state=RunState.DEAD, limit=20),
        "show NAME": lambda: (
            s.get_job(job.name),
            s.list_runs(job.name, limit=10),
            s.last_runs([job.id]),
        ),
        "inspect ID": lambda: (s.get_run(run.id), s.get_attempts(run.id), s.waiting(run.id, now)),
        "list": lambda: (s.list_jobs(), s.last_runs()),
        "status": lambda: s.status(now),
        "GET /metrics": lambda: metrics.render(s, now),
    }
    out = {}
    try:
        for name, call in calls.items():
            call()
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            out[name] = median(times) * 1000
    finally:
        store.close()
    return out


def _built(db: Path, jobs: int, runs_per_job: int) -> float | None:
    """Build ``db`` unless a finished build of it is there (its marker file): the seconds
    the build took, or None when the file was kept from an earlier call."""
    done = db.with_suffix(".built")
    if db.exists() and done.exists():
        return None
    for old in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        old.unlink(missing_ok=True)
    took = build(db, jobs, runs_per_job)
    done.write_text(f"{took}\n")
    return took


def history(tmp: Path, jobs: int, runs_per_job: int, reps: int) -> dict[str, Any]:
    """Every read with ``jobs`` × ``runs_per_job`` runs against ``jobs`` × 1."""
    small, big = tmp / f"small-{jobs}.db", tmp / f"big-{jobs}x{runs_per_job}.db"
    build_small = _built(small, jobs, 1)
    build_big = _built(big, jobs, runs_per_job)
    small_ms, big_ms = reads(small, reps), reads(big, reps)
    small_store, big_store = store_reads(small, 3 * reps), store_reads(big, 3 * reps)
    return {
        "jobs": jobs,
        "runs": jobs * runs_per_job,
        "build_seconds": {"small": build_small, "big": build_big},
        "size_bytes": big.stat().st_size,
        "small_ms": small_ms,
        "big_ms": big_ms,
        "ratio": {k: big_ms[k] / small_ms[k] for k in small_ms},
        "store_small_ms": small_store,
        "store_big_ms": big_store,
        "store_ratio": {k: big_store[k] / small_store[k] for k in small_store},
    }


def retention(tmp: Path, jobs: int, keep: int, seconds: float, workers: int) -> dict[str, Any]:
    """``jobs`` jobs every second keeping ``keep`` runs each, under a daemon for
    ``seconds``: every 10 s the file's size (with its WAL) and the p99 start lateness of
    the windows of the 10 s before (read while they are still kept)."""
    from jobctl.models import JobSpec, Trigger, TriggerKind

    db = tmp / "retention.db"
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    trig = Trigger(TriggerKind.INTERVAL, "UTC", "1s", every_seconds=1.0, anchor=start)
    _add_jobs(db, [JobSpec(f"r{i}", trig, "true", keep_runs=keep) for i in range(jobs)])
    daemon = DaemonProc(db, workers)
    samples = []
    try:
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            time.sleep(10)
            now_us = int(time.time() * 1_000_000)
            conn = sqlite3.connect(db)
            try:
                late = [
                    v / 1000
                    for (v,) in conn.execute(
                        "SELECT a.started_at - r.scheduled_for FROM attempts a JOIN runs r "
                        "ON r.id = a.run_id WHERE a.attempt = 1 AND r.scheduled_for >= ? "
                        "AND r.scheduled_for < ?",
                        (now_us - 15_000_000, now_us - 5_000_000),
                    )
                ]
                kept = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
            finally:
                conn.close()
            size = sum(p.stat().st_size for p in (db, Path(str(db) + "-wal")) if p.exists())
            samples.append(
                {
                    "t": round(seconds - (t_end - time.monotonic())),
                    "size_bytes": size,
                    "runs_kept": kept,
                    "late_p99_ms": percentile(late, 99) if late else None,
                    "late_n": len(late),
                }
            )
    finally:
        daemon.stop()
    return {"jobs": jobs, "keep": keep, "seconds": seconds, "samples": samples}


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__)
    sub = p.add_subparsers(dest="workload", required=True)
    h = sub.add_parser("history", help="reads with a long history against a short one")
    h.add_argument("--jobs", type=int, default=1000)
    h.add_argument("--runs-per-job", type=int, default=10_000)
    h.add_argument("--reps", type=int, default=5)
    h.add_argument("--dir", type=Path, help="keep the databases here (reused when built)")
    r = sub.add_parser("retention", help="jobs every second under a daemon, retention at work")
    r.add_argument("--jobs", type=int, default=200)
    r.add_argument("--keep", type=int, default=100)
    r.add_argument("--seconds", type=float, default=600)
    r.add_argument("--workers", type=int, default=8)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        if a.workload == "history":
            keep = a.dir or Path(d)
            keep.mkdir(parents=True, exist_ok=True)
            result = history(keep, a.jobs, a.runs_per_job, a.reps)
        else:
            result = retention(Path(d), a.jobs, a.keep, a.seconds, a.workers)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
