"""The machine's limits: raw process spawning, SQLite commits, timer lateness."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from .stats import percentile

SH = "/bin/sh"


def spawn_seconds(children: int, width: int) -> float:
    """Seconds to run ``children`` × ``sh -c true``, ``width`` at a time (posix_spawn + wait)."""
    env = dict(os.environ)
    args = ["sh", "-c", "true"]
    running = 0
    started = 0
    t0 = time.perf_counter()
    while started < children or running:
        while running < width and started < children:
            os.posix_spawn(SH, args, env)
            running += 1
            started += 1
        os.wait()
        running -= 1
    return time.perf_counter() - t0


def sqlite_commits_per_second(seconds: float = 1.0) -> float:
    """One-row ``BEGIN IMMEDIATE`` UPDATE commits per second, on a file opened by the
    project's Store (WAL, synchronous=NORMAL, foreign keys, busy timeout)."""
    from jobctl.store.sqlite import Db

    with tempfile.TemporaryDirectory(prefix="jobctl-bench-") as tmp:
        store = Db.open(Path(tmp) / "commits.db")
        c = store.conn
        c.execute("CREATE TABLE bench_counter (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        c.execute("INSERT INTO bench_counter VALUES (1, 0)")
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            c.execute("BEGIN IMMEDIATE")
            c.execute("UPDATE bench_counter SET v = v + 1 WHERE id = 1")
            c.execute("COMMIT")
            n += 1
            if n % 64 == 0 and time.perf_counter() >= deadline:
                break
        elapsed = time.perf_counter() - t0
        store.close()
    return n / elapsed


def sleep_lateness_ms(samples: int = 200, sleep_seconds: float = 0.005) -> tuple[float, float]:
    """(p50, p99) in ms of how much later than asked a ``time.sleep`` of 5 ms returns."""
    late = []
    for _ in range(samples):
        t0 = time.perf_counter()
        time.sleep(sleep_seconds)
        late.append((time.perf_counter() - t0 - sleep_seconds) * 1000)
    return percentile(late, 50), percentile(late, 99)
