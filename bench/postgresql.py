"""``python -m bench --only postgresql``: jobctl's daemons on one PostgreSQL server beside
procrastinate's workers on the same server, in the same run.

The server is a throwaway cluster in a temporary folder (as ``tests/pg.py`` starts one):
its socket in that folder, TCP on 127.0.0.1 only, ``fsync=off`` (a scratch server: the
figures are the schedulers' cost, not the disk's). Each measurement gets a fresh database.

- **throughput**: ``runs`` runs of ``true`` are queued while N idle daemons (``--workers 4``
  each) or N procrastinate workers (``concurrency=4`` each, a task that runs
  ``sh -c true`` through ``subprocess``) are stopped (SIGSTOP), then all go on at once
  (SIGCONT); runs/s from the first attempt start to
  the last finish, as recorded in the database.
- **claim latency**: one run at a time, enqueue → attempt start (jobctl:
  ``attempts.started_at − runs.created_at``, enqueued as ``jobctl run`` does;
  procrastinate: its ``started`` event − its ``deferred`` event), one daemon / worker.
- **cli**: ``jobctl --db postgresql://… list --json`` (1,000 jobs) and ``jobctl --version``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from .jobctl_runs import DaemonProc, jobctl_exe
from .stats import helpers_cpu, median, percentile, proc_cpu_split


class Server:
    """A scratch PostgreSQL cluster (run as ``postgres`` under root: initdb refuses root)."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        initdb = found[-1] if found else shutil.which("initdb")
        if not initdb:
            raise SystemExit("PostgreSQL is not installed (apt-get install -y postgresql)")
        self.bindir = Path(initdb).parent
        self.root = Path(tempfile.mkdtemp(prefix="jobctl-bench-pg-"))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.sock.mkdir()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            for p in (self.root, self.sock):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._n = 0

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, stdout=subprocess.DEVNULL)

    def start(self) -> None:
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
            "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync",
        )  # fmt: skip
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.sock}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                "max_connections = 200\n"
            )
        log = str(self.root / "server.log")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", log, "-w", "start")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def new_db(self) -> str:
        import psycopg

        self._n += 1
        name = f"bench{self._n}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
        return self.url(name)


@contextlib.contextmanager
def server() -> Iterator[Server]:
    s = Server()
    try:
        s.start()
        yield s
    finally:
        s.stop()


def _query(url: str, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(sql).fetchall())  # type: ignore[arg-type]


@contextlib.contextmanager
def _counting(url: str, sql: str) -> Iterator[Callable[[], int]]:
    """``sql``'s count, read on one connection opened before a measure starts. Polled on
    a new connection each time, the count cost the server more than what it measured:
    a connection's start is about 3 ms of the server's CPU, 20 a second."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        yield lambda: int(conn.execute(sql).fetchone()[0])  # type: ignore[arg-type,index]


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"postgresql bench: timed out waiting for {what}")
        time.sleep(0.05)


def _pause(pids: Iterable[int]) -> None:
    """Stop the idle daemons / workers while the runs are queued, so that the queue is
    full when they all go on at once: the span measures dispatch, not the enqueue."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def _resume(pids: Iterable[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


def _manual_jobs(url: str, names: list[str]) -> None:
    from jobctl.models import JobSpec, Trigger, TriggerKind
    from jobctl.store import open_store

    trig = Trigger(TriggerKind.MANUAL, tz="UTC")
    store = open_store(url)
    try:
        now = datetime.now(UTC)
        store.commands.add_jobs(
            [(JobSpec(name=n, trigger=trig, command="true"), None) for n in names], now
        )
    finally:
        store.close()


def _daemons(url: str, n: int, workers: int = 4) -> list[DaemonProc]:
    ds = [DaemonProc(url, workers) for _ in range(n)]  # type: ignore[arg-type]
    for d in ds:
        d.wait_for(r"started", 30)
    return ds


def _server_cpu(srv: Server) -> float:
    """CPU seconds of the whole server so far: the postmaster's own and its reaped
    children's, and the live backends' own."""
    post = int((srv.data / "postmaster.pid").read_text().split()[0])
    own, reaped = proc_cpu_split(post)
    total = own + reaped
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == post:
                total += proc_cpu_split(int(entry))[0]
        except (OSError, ValueError, IndexError):
            continue
    return total


#: each scheduler process's (own, reaped children's) CPU seconds, the server's, and the
#: live helpers' of jobctl's daemons (their spawner and keeper; none for procrastinate)
CpuReading = tuple[list[tuple[float, float]], float, float]


def _cpu_now(srv: Server, pids: list[int]) -> CpuReading:
    helpers = sum(helpers_cpu(pid) for pid in pids)
    return [proc_cpu_split(pid) for pid in pids], _server_cpu(srv), helpers


def _cpu_a_run(before: CpuReading, after: CpuReading, runs: int) -> dict[str, float]:
    """CPU a run in ms between two readings: the schedulers' own (a jobctl daemon's with
    its spawner's and keeper's, its work done in other processes, as the burst counts
    it; ``helpers``: theirs alone), their children's, the server's (the bench's polling
    of the count included: 20 statements a second on one connection)."""
    own = sum(b[0] - a[0] for a, b in zip(before[0], after[0], strict=True))
    kids = sum(b[1] - a[1] for a, b in zip(before[0], after[0], strict=True))
    helpers = after[2] - before[2]
    return {
        "daemon": (own + helpers) / runs * 1000,
        "helpers": helpers / runs * 1000,
        "children": kids / runs * 1000,
        "server": (after[1] - before[1]) / runs * 1000,
    }


def jobctl_throughput(srv: Server, daemons: int, runs: int) -> dict:
    from jobctl.store import open_store

    url = srv.new_db()
    names = [f"t{i}" for i in range(runs)]
    _manual_jobs(url, names)
    ds = _daemons(url, daemons)
    done = "SELECT count(*) FROM jobctl.runs WHERE state IN ('succeeded', 'failed', 'dead')"
    try:
        _pause(d.pid for d in ds)
        store = open_store(url)
        with _counting(url, done) as count:
            try:
                t0 = time.perf_counter()
                now = datetime.now(UTC)
                for name in names:
                    store.commands.enqueue_run(name, now)  # each wakes the (stopped) daemons
                enqueue_s = time.perf_counter() - t0
            finally:
                store.close()
                cpu0 = _cpu_now(srv, [d.pid for d in ds])
                _resume(d.pid for d in ds)
            _wait(lambda: count() >= runs, 300, "jobctl's runs")
            cpu1 = _cpu_now(srv, [d.pid for d in ds])
    finally:
        for d in ds:
            d.stop()
    first, last, ok = _query(
        url,
        "SELECT (SELECT min(started_at) FROM jobctl.attempts), max(finished_at), "
        "count(*) FILTER (WHERE state = 'succeeded') FROM jobctl.runs",
    )[0]
    span = (last - first) / 1e6
    return {
        "enqueue_s": enqueue_s,
        "span_s": span,
        "runs_per_s": runs / span,
        "succeeded": ok,
        "cpu_ms": _cpu_a_run(cpu0, cpu1, runs),
    }


class _Peer:
    def __init__(self, url: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.pg_peer", url, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )

    def ready(self) -> None:
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("procrastinate worker did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _peer_call(url: str, *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "bench.pg_peer", url, *args],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout


def _peer_db(srv: Server) -> str:
    url = srv.new_db()
    _peer_call(url, "schema")
    return url


def peer_throughput(srv: Server, workers: int, runs: int) -> dict:
    url = _peer_db(srv)
    ws = [_Peer(url, "worker", "4") for _ in range(workers)]
    done = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('succeeded', 'failed')"
    try:
        for w in ws:
            w.ready()
        _pause(w.proc.pid for w in ws)
        with _counting(url, done) as count:
            try:
                enqueue_s = float(_peer_call(url, "defer", str(runs)))
            finally:
                cpu0 = _cpu_now(srv, [w.proc.pid for w in ws])
                _resume(w.proc.pid for w in ws)
            _wait(lambda: count() >= runs, 300, "procrastinate's jobs")
            cpu1 = _cpu_now(srv, [w.proc.pid for w in ws])
    finally:
        for w in ws:
            w.stop()
    span, ok = _query(
        url,
        "SELECT EXTRACT(EPOCH FROM max(at) FILTER (WHERE type = 'succeeded') "
        "- min(at) FILTER (WHERE type = 'started')), "
        "count(*) FILTER (WHERE type = 'succeeded') FROM procrastinate_events",
    )[0]
    span = float(span)
    return {
        "enqueue_s": enqueue_s,
        "span_s": span,
        "runs_per_s": runs / span,
        "succeeded": ok,
        "cpu_ms": _cpu_a_run(cpu0, cpu1, runs),
    }


def jobctl_latency(srv: Server, samples: int) -> list[float]:
    from jobctl.store import open_store

    url = srv.new_db()
    _manual_jobs(url, ["probe"])
    ds = _daemons(url, 1)
    out = []
    try:
        handle = open_store(url)
        store = handle.commands
        try:
            for _ in range(samples):
                run, _ = store.enqueue_run("probe", datetime.now(UTC))  # wakes the daemon
                deadline = time.monotonic() + 30
                while True:
                    attempts = store.get_attempts(run.id)
                    if attempts and store.get_run(run.id).state.value in ("succeeded", "failed"):
                        out.append(
                            (attempts[0].started_at - run.scheduled_for).total_seconds() * 1e3
                        )
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError("jobctl: the probe run did not end in 30 s")
                    time.sleep(0.005)
                time.sleep(0.05)
        finally:
            handle.close()
    finally:
        for d in ds:
            d.stop()
    return out


def peer_latency(srv: Server, samples: int) -> list[float]:
    url = _peer_db(srv)
    w = _Peer(url, "worker", "4")
    try:
        w.ready()
        return [float(v) for v in _peer_call(url, "latency", str(samples)).split()]
    finally:
        w.stop()


def cli(srv: Server, reps: int) -> dict:
    """``list --json`` on 1,000 jobs on PostgreSQL and on an SQLite file holding the same
    jobs, in pairs; beside them what importing the driver costs a new process."""
    url = srv.new_db()
    names = [f"cli{i}" for i in range(1000)]
    _manual_jobs(url, names)
    file = srv.root / "cli.db"
    _manual_jobs(str(file), names)
    exe = jobctl_exe()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def timed(cmd: list[str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env
        )
        return (time.perf_counter() - t0) * 1000

    cmds = {
        "version": [exe, "--version"],
        "list": [exe, "--db", url, "list", "--json"],
        "sqlite_list": [exe, "--db", str(file), "list", "--json"],
        "bare": [sys.executable, "-c", "pass"],
        "driver": [sys.executable, "-c", "import psycopg"],
    }
    for cmd in cmds.values():
        timed(cmd)  # warm the page cache
    times: dict[str, list[float]] = {k: [] for k in cmds}
    ratios = []
    for _ in range(reps):
        for k, cmd in cmds.items():
            times[k].append(timed(cmd))
        ratios.append(times["list"][-1] / times["sqlite_list"][-1])
    m = {k: median(v) for k, v in times.items()}
    return {
        "version_ms": m["version"],
        "list_ms": m["list"],
        "ratio": m["list"] / m["version"],
        "sqlite_list_ms": m["sqlite_list"],
        "vs_sqlite": median(ratios),
        "vs_sqlite_reps": ratios,
        "driver_import_ms": m["driver"] - m["bare"],
    }


def _medians(trials: list[dict]) -> dict:
    """Each figure's median over the trials (a figure that is a dict: each of its own)."""
    out: dict = {}
    for k, v in trials[0].items():
        each = [t[k] for t in trials]
        out[k] = _medians(each) if isinstance(v, dict) else median(each)
    return out


def run(
    runs: int, samples: int, cli_reps: int, reps: int = 1, counts: tuple[int, ...] = (1, 2, 4)
) -> dict:
    """Every PostgreSQL figure, jobctl and procrastinate interleaved on one server
    (throughput: medians of ``reps`` rounds, each round every count for both)."""
    import procrastinate  # noqa: F401  (fail early: pip install -e '.[bench,postgresql]')

    res: dict = {"runs": runs, "samples": samples, "reps": reps, "throughput": {}}
    trials: dict[int, dict[str, list[dict]]] = {
        n: {"jobctl": [], "procrastinate": []} for n in counts
    }
    with server() as srv:
        res["server"] = _query(srv.url(), "SHOW server_version")[0][0]
        for _ in range(reps):
            for n in counts:
                trials[n]["jobctl"].append(jobctl_throughput(srv, n, runs))
                trials[n]["procrastinate"].append(peer_throughput(srv, n, runs))
        for n in counts:
            for who, ts in trials[n].items():
                if any(t["succeeded"] < runs for t in ts):
                    raise RuntimeError(f"postgresql bench: {who} did not succeed every run")
            res["throughput"][n] = {who: _medians(ts) for who, ts in trials[n].items()}
            # each rep's own figure, beside the median (the machine drifts from rep to rep)
            for who, ts in trials[n].items():
                res["throughput"][n][who]["reps_runs_per_s"] = [t["runs_per_s"] for t in ts]
        late = jobctl_latency(srv, samples)
        peer_late = peer_latency(srv, samples)
        res["latency"] = {
            who: {"p50_ms": percentile(v, 50), "p99_ms": percentile(v, 99)}
            for who, v in (("jobctl", late), ("procrastinate", peer_late))
        }
        res["cli"] = cli(srv, cli_reps)
    return res
