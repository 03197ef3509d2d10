"""The machine's limits: raw process spawning, SQLite commits, timer lateness, and the
floor of a durable dispatch loop."""

from __future__ import annotations

import os
import select
import tempfile
import time
from pathlib import Path

from .stats import percentile, proc_cpu_split

SH = "/bin/sh"
#: the child of every spawn measured here
TRUE_ARGV = ["sh", "-c", "true"]


def spawn_seconds(children: int, width: int) -> tuple[float, float, float]:
    """Seconds to run ``children`` × ``sh -c true``, ``width`` at a time (posix_spawn + wait),
    and the CPU seconds of the spawning loop and of the children."""
    env = dict(os.environ)
    running = 0
    started = 0
    own0, kids0 = proc_cpu_split(os.getpid())
    t0 = time.perf_counter()
    while started < children or running:
        while running < width and started < children:
            os.posix_spawn(SH, TRUE_ARGV, env)
            running += 1
            started += 1
        os.wait()
        running -= 1
    elapsed = time.perf_counter() - t0
    own1, kids1 = proc_cpu_split(os.getpid())
    return elapsed, own1 - own0, kids1 - kids0


def durable_loop_seconds(children: int, width: int) -> float:
    """Seconds for the least a durable dispatcher does, in Python on this machine.

    ``children`` x ``sh -c true``, ``width`` alive at a time. Each child's row is claimed
    (set to leased) before its spawn and finished (its exit code and end written) after
    it exits. Each turn writes what it learned in one ``BEGIN IMMEDIATE`` transaction on
    a file opened by the store's ``Db``, with the daemon's checkpoint setting, and spawns
    after the commit: ``os.posix_spawn`` in a new session, watched by a pidfd in epoll,
    which is taken out of epoll before it is closed (as the daemon does: a child spawned
    an instant before can still hold a copy of it, whose registration would report the
    old child's exit for a new pidfd given the same number).

    There are no models, decisions, attempt rows, output pipes or logs. So this is the
    floor a jobctl burst is compared with: what is above it is jobctl's own work.
    """
    from jobctl.store.sqlite import Db

    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="jobctl-bench-") as tmp:
        db = Db.open(Path(tmp) / "floor.db")
        db.defer_checkpoints()
        c = db.conn
        c.execute(
            "CREATE TABLE floor_runs (id INTEGER PRIMARY KEY, state TEXT NOT NULL, "
            "exit_code INTEGER, started_at INTEGER, finished_at INTEGER)"
        )
        c.execute("BEGIN")
        c.executemany(
            "INSERT INTO floor_runs (id, state) VALUES (?, 'pending')",
            [(i,) for i in range(children)],
        )
        c.execute("COMMIT")
        ep = select.epoll()
        running: dict[int, tuple[int, int]] = {}  # pidfd -> (row id, pid)
        ended: list[tuple[int, int]] = []  # (row id, exit code) not yet written
        next_id = 0
        t0 = time.perf_counter()
        while True:
            claim = list(range(next_id, min(children, next_id + width - len(running))))
            next_id += len(claim)
            now = time.time_ns() // 1000
            c.execute("BEGIN IMMEDIATE")
            c.executemany(
                "UPDATE floor_runs SET state = 'succeeded', exit_code = ?, finished_at = ? "
                "WHERE id = ? AND state = 'leased'",
                [(code, now, row) for row, code in ended],
            )
            c.executemany(
                "UPDATE floor_runs SET state = 'leased', started_at = ? "
                "WHERE id = ? AND state = 'pending'",
                [(now, row) for row in claim],
            )
            c.execute("COMMIT")
            ended = []
            for row in claim:
                pid = os.posix_spawn(SH, TRUE_ARGV, env, setsid=True)
                fd = os.pidfd_open(pid)
                ep.register(fd, select.EPOLLIN)
                running[fd] = (row, pid)
            if not running:
                break
            for fd, _ in ep.poll():
                row, pid = running.pop(fd)
                ep.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                ended.append((row, os.waitstatus_to_exitcode(status)))
        elapsed = time.perf_counter() - t0
        ep.close()
        (done,) = c.execute("SELECT COUNT(*) FROM floor_runs WHERE state = 'succeeded'").fetchone()
        db.close()
    if done != children:
        raise RuntimeError(f"durable loop: {done} of {children} rows finished")
    return elapsed


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
