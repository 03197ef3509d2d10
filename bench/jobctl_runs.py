"""jobctl's workloads: a real ``jobctl daemon`` process on a scratch database.

Jobs are created through the store's own API (``open_store(db).commands.add_jobs``, with
``JobSpec``/``Trigger`` from ``jobctl.models``), as ``jobctl add`` and ``import-crontab``
create them; the figures are read back from the ``runs`` and ``attempts`` tables, so they
are the times jobctl itself records.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from .stats import (
    helpers_cpu,
    median,
    percentile,
    proc_cpu_seconds,
    proc_cpu_split,
    proc_memory_mib,
)

UTC = UTC
FAR_FUTURE = datetime(2100, 1, 1, tzinfo=UTC)


def jobctl_exe() -> str:
    """The ``jobctl`` console script next to this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).parent / "jobctl"
    if here.exists():
        return str(here)
    found = shutil.which("jobctl")
    if found is None:
        raise SystemExit("jobctl is not installed: pip install -e '.[bench]'")
    return found


def _us(dt: datetime) -> int:
    from jobctl.clock import to_us

    return to_us(dt)


class DaemonProc:
    """A ``jobctl daemon`` child whose stderr goes to an unnamed file, read (and its lines
    timed) only while :meth:`wait_for` waits.

    A file, not a pipe: a reader of a pipe would wake at each of the daemon's writes (one
    a loop turn, some 300 in a burst) and take CPU from the machine it measures, and each
    write would pay for waking it. The file is read every ``POLL_SECONDS``, so a line's
    time is known to within that.
    """

    POLL_SECONDS = 0.005

    def __init__(self, db: Path, workers: int = 4) -> None:
        self.t_start = time.time()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop)
        self.proc = subprocess.Popen(
            [jobctl_exe(), "--db", str(db), "daemon", "--workers", str(workers)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self.lines: list[tuple[float, str]] = []
        self._read_to = 0
        self._rest = b""

    def _read(self) -> None:
        """The whole lines written since the last read, timed now."""
        fd = self._log.fileno()
        while chunk := os.pread(fd, 1 << 20, self._read_to):
            self._read_to += len(chunk)
            t = time.time()
            *lines, self._rest = (self._rest + chunk).split(b"\n")
            self.lines += [(t, line.decode(errors="replace")) for line in lines]

    def wait_for(self, pattern: str, timeout: float) -> tuple[float, re.Match[str]]:
        """(wall time the first line matching ``pattern`` was read, the match)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            exited = self.proc.poll() is not None
            self._read()
            for t, line in self.lines[seen:]:
                m = rx.search(line)
                if m:
                    return t, m
            seen = len(self.lines)
            if time.monotonic() > deadline or exited:
                tail = "\n".join(line for _, line in self.lines[-5:])
                raise RuntimeError(f"daemon: no line matching {pattern!r}; last lines:\n{tail}")
            time.sleep(self.POLL_SECONDS)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._read()
        if self._rest:  # a last line the daemon left unterminated
            self.lines.append((time.time(), self._rest.decode(errors="replace")))
            self._rest = b""
        self._log.close()


def _interval_specs(
    prefix: str, n: int, every_seconds: float, anchor: datetime, limits: object = None
):
    from jobctl.models import NO_LIMITS, JobSpec, Limits, Trigger, TriggerKind

    trig = Trigger(
        TriggerKind.INTERVAL,
        tz="UTC",
        expr=f"{every_seconds:g}s",
        every_seconds=every_seconds,
        anchor=anchor,
    )
    lim = limits if isinstance(limits, Limits) else NO_LIMITS
    return [
        JobSpec(name=f"{prefix}{i}", trigger=trig, command="true", limits=lim) for i in range(n)
    ]


#: jobs a transaction when a database is filled (a million jobs' rows are not held at once)
ADD_BATCH_JOBS = 10_000


def _add_jobs(db: Path, specs, now: datetime | None = None) -> None:
    """Add ``specs`` through the store, as ``jobctl add`` would at ``now`` (default: the
    present), each at its next fire time after ``now``; ``ADD_BATCH_JOBS`` a transaction."""
    from jobctl.store import open_store
    from jobctl.triggers import next_fire

    store = open_store(db)
    now = now or datetime.now(UTC)
    try:
        for i in range(0, len(specs), ADD_BATCH_JOBS):
            batch = specs[i : i + ADD_BATCH_JOBS]
            store.commands.add_jobs([(s, next_fire(s.trigger, now)) for s in batch], now)
    finally:
        store.close()


def _lateness_ms(db: Path, until_us: int | None = None) -> list[float]:
    """attempt.started_at − run.scheduled_for (ms) of every first attempt."""
    conn = sqlite3.connect(db)
    try:
        sql = (
            "SELECT a.started_at - r.scheduled_for FROM attempts a JOIN runs r "
            "ON r.id = a.run_id WHERE a.attempt = 1"
        )
        params: tuple = ()
        if until_us is not None:
            sql += " AND r.scheduled_for < ?"
            params = (until_us,)
        return [v / 1000 for (v,) in conn.execute(sql, params)]
    finally:
        conn.close()


def burst(
    tmp: Path,
    jobs: int = 1000,
    workers: int = 4,
    lead_seconds: float = 3.0,
    limits: object = None,
) -> dict:
    """``jobs`` runs of ``true`` due at one instant: seconds from the instant until the last
    run finished, start lateness p50/p99 (ms), and the CPU of the daemon and of its children
    from the instant until the last run finished, in ms a run (and apart, the daemon's
    before the instant, from its readiness: the windows it recorded ahead of time).
    ``limits`` (a :class:`jobctl.models.Limits`) is set on every job."""
    db = tmp / "burst.db"
    instant = (datetime.now(UTC) + timedelta(seconds=lead_seconds)).replace(microsecond=0)
    _add_jobs(db, _interval_specs("burst", jobs, 3600.0, instant, limits))
    d = DaemonProc(db, workers)
    try:
        ready, _ = d.wait_for(r"scheduling \d+ jobs", 30)
        if ready >= instant.timestamp():
            raise RuntimeError("daemon was not ready before the burst instant; raise lead")
        ahead0, _ = proc_cpu_split(d.pid)
        # the windows are recorded up to FIRE_AHEAD_SECONDS before the instant: that CPU
        # is kept apart, and the burst's own is read from the instant (as APScheduler's is)
        time.sleep(max(0.0, instant.timestamp() - time.time()))
        own0, kids0 = proc_cpu_split(d.pid)
        helpers0 = helpers_cpu(d.pid)
        conn = sqlite3.connect(db)
        deadline = time.monotonic() + 300
        while True:
            done = conn.execute(
                "SELECT COUNT(*) FROM runs WHERE state IN ('succeeded','failed','dead')"
            ).fetchone()[0]
            if done >= jobs:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"burst: only {done}/{jobs} runs finished")
            time.sleep(0.05)
        own1, kids1 = proc_cpu_split(d.pid)
        helpers1 = helpers_cpu(d.pid)
        last = conn.execute("SELECT MAX(finished_at) FROM runs").fetchone()[0]
        ok = conn.execute("SELECT COUNT(*) FROM runs WHERE state = 'succeeded'").fetchone()[0]
        conn.close()
    finally:
        d.stop()
    late = _lateness_ms(db)
    db.unlink()
    return {
        "seconds": (last - _us(instant)) / 1e6,
        "p50_ms": percentile(late, 50),
        "p99_ms": percentile(late, 99),
        "succeeded": ok,
        "cpu_ms": 1000 * (own1 - own0 + helpers1 - helpers0) / jobs,
        "helpers_cpu_ms": 1000 * (helpers1 - helpers0) / jobs,
        "children_cpu_ms": 1000 * (kids1 - kids0) / jobs,
        "cpu_ahead_ms": 1000 * (own0 - ahead0) / jobs,
    }


def precision(
    tmp: Path, jobs: int = 10, seconds: float = 30.0, lead_seconds: float = 2.0, workers: int = 4
) -> dict:
    """``jobs`` jobs every 1 s for ``seconds``: start lateness p50/p99/max (ms)."""
    db = tmp / "precision.db"
    instant = (datetime.now(UTC) + timedelta(seconds=lead_seconds)).replace(microsecond=0)
    _add_jobs(db, _interval_specs("tick", jobs, 1.0, instant))
    d = DaemonProc(db, workers)
    try:
        d.wait_for(r"scheduling \d+ jobs", 30)
        end = instant + timedelta(seconds=seconds)
        time.sleep(max(0.0, end.timestamp() - time.time()) + 0.5)
    finally:
        d.stop()
    late = _lateness_ms(db, _us(end))
    db.unlink()
    return {
        "p50_ms": percentile(late, 50),
        "p99_ms": percentile(late, 99),
        "max_ms": max(late) if late else float("nan"),
        "starts": len(late),
    }


def build_scale_db(db: Path, jobs: int, *, fresh: bool = False) -> float:
    """A database with ``jobs`` far-future interval jobs (``idle0``…, every day from 2100
    on, a second apart) and a manual job ``probe``, all added through the store.
    ``fresh``: added just now, as right after an import (else a day ago: the steady state,
    since the daemon re-reads jobs edited within the last 2 leases on every renewal, a
    safety net for lost wake-ups). Returns the seconds the adds took."""
    from jobctl.models import JobSpec, Trigger, TriggerKind

    now = datetime.now(UTC)
    added_at = now if fresh else now - timedelta(days=1)
    probe = JobSpec(name="probe", trigger=Trigger(TriggerKind.MANUAL, tz="UTC"), command="true")
    specs = [probe] + [
        JobSpec(
            name=f"idle{i}",
            trigger=Trigger(
                TriggerKind.INTERVAL,
                tz="UTC",
                expr="1d",
                every_seconds=86_400.0,
                anchor=FAR_FUTURE + timedelta(seconds=i),
            ),
            command="true",
        )
        for i in range(jobs)
    ]
    t0 = time.perf_counter()
    _add_jobs(db, specs, added_at)
    return time.perf_counter() - t0


def dispatch_ms(db: Path, samples: int) -> list[float]:
    """Enqueue a run of ``probe`` as ``jobctl run probe`` does (the store wakes the daemon); the
    cost is attempt.started_at − run.created_at (ms), waited out one at a time."""
    from jobctl.store import open_store

    handle = open_store(db)
    store = handle.commands
    out = []
    try:
        for _ in range(samples):
            now = datetime.now(UTC)
            run, _ = store.enqueue_run("probe", now)  # the store wakes the daemon after it
            deadline = time.monotonic() + 30
            while True:
                attempts = store.get_attempts(run.id)
                state = store.get_run(run.id).state.value
                if attempts and state in ("succeeded", "failed", "dead"):
                    cost = attempts[0].started_at - run.scheduled_for
                    out.append(cost.total_seconds() * 1000)
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("dispatch: the probe run did not finish in 30 s")
                time.sleep(0.005)
            time.sleep(0.05)
    finally:
        handle.close()
    return out


def scale(tmp: Path, jobs: int, starts: int, idle_seconds: float, dispatches: int) -> dict:
    """Daemon start-up until ready ("scheduling N jobs"), memory, idle CPU, dispatch cost."""
    db = tmp / f"scale-{jobs}.db"
    build_seconds = build_scale_db(db, jobs)
    ready_s, rss, hwm = [], [], []
    result: dict = {"jobs": jobs, "build_seconds": build_seconds}
    for i in range(starts):
        d = DaemonProc(db, 4)
        try:
            t_ready, m = d.wait_for(r"scheduling (\d+) jobs", 300)
            if int(m.group(1)) < jobs:
                raise RuntimeError(f"daemon scheduled {m.group(1)} of {jobs} jobs")
            ready_s.append(t_ready - d.t_start)
            time.sleep(0.2)
            r, h = proc_memory_mib(d.pid)
            rss.append(r)
            hwm.append(h)
            if i == starts - 1:
                result["dispatch_ms"] = median(dispatch_ms(db, dispatches))
                time.sleep(1.0)
                c0, t0 = proc_cpu_seconds(d.pid), time.monotonic()
                time.sleep(idle_seconds)
                c1, t1 = proc_cpu_seconds(d.pid), time.monotonic()
                result["idle_core_pct"] = 100 * (c1 - c0) / (t1 - t0)
                result["rss_after_idle_mib"] = proc_memory_mib(d.pid)[0]
        finally:
            d.stop()
    db.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    result.update(ready_s=median(ready_s), rss_mib=median(rss), peak_mib=median(hwm))
    return result


def idle_after_import(tmp: Path, jobs: int, seconds: float) -> dict:
    """CPU of a daemon over its first ``seconds`` after ready, on ``jobs`` jobs that were
    all written just before it started (right after an import: every renewal's safety
    net re-read sees them as recently changed)."""
    db = tmp / f"import-{jobs}.db"
    build_scale_db(db, jobs, fresh=True)
    d = DaemonProc(db, 4)
    try:
        d.wait_for(r"scheduling (\d+) jobs", 300)
        c0, t0 = proc_cpu_seconds(d.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = proc_cpu_seconds(d.pid), time.monotonic()
    finally:
        d.stop()
    db.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    return {"jobs": jobs, "seconds": seconds, "idle_core_pct": 100 * (c1 - c0) / (t1 - t0)}


def cli(tmp: Path, reps: int) -> dict:
    """Whole-command wall times (ms) of ``jobctl --version``, ``add`` and ``list --json`` on
    1,000 jobs, each paired with ``python3 -c "import click"`` run just before it."""
    db = tmp / "cli.db"
    _add_jobs(db, _interval_specs("cli", 1000, 3600.0, FAR_FUTURE))
    exe = jobctl_exe()
    click_cmd = [sys.executable, "-c", "import click"]
    cmds = {
        "version": lambda i: [exe, "--version"],
        "add": lambda i: [exe, "--db", str(db), "add", f"added{i}", "--every", "1h", "--", "true"],
        "list": lambda i: [exe, "--db", str(db), "list", "--json"],
    }

    # as installed: bytecode cached (a PYTHONDONTWRITEBYTECODE shell would recompile
    # every edited module on each call and time the compiler)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def timed(cmd: list[str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env
        )
        return (time.perf_counter() - t0) * 1000

    for cmd in (click_cmd, cmds["version"](0), cmds["list"](0)):  # warm the page cache
        timed(cmd)
    times: dict[str, list[float]] = {k: [] for k in ("click", *cmds)}
    ratios: dict[str, list[float]] = {k: [] for k in cmds}
    for i in range(reps):
        for name, make in cmds.items():
            base = timed(click_cmd)
            t = timed(make(i))
            times["click"].append(base)
            times[name].append(t)
            ratios[name].append(t / base)
    out = {f"{k}_ms": median(v) for k, v in times.items()}
    out.update({f"{k}_ratio": median(v) for k, v in ratios.items()})
    db.unlink()
    return out
