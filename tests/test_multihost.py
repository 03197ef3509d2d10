"""Daemons on several hosts sharing one PostgreSQL database (README, Many hosts on PostgreSQL).

Each daemon runs in its own UTS namespace (``unshare --uts`` + ``hostname``, as root), so
one machine plays two hosts. A job fires every second and appends its window to a log;
the checks are on that log and on the runs table: one leader at a time, every window
recorded once and run once, whatever dies.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from conftest import pid_alive, wait_until

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="needs root and unshare(1) to give a daemon its own host name",
    ),
]

LEASE = "2s"
LEASE_SECONDS = 2.0


class HostDaemon:
    """A ``jobctl daemon`` with its own host name."""

    def __init__(self, url: str, host: str, log: Path, *args: str) -> None:
        self.host = host
        self.log_path = log
        self._log = open(log, "ab")
        code = "from jobctl.cli import main; main()"
        argv = [sys.executable, "-c", code, "--db", url, "daemon", "--lease", LEASE]
        argv += ["--shutdown-grace", "2s", *args]
        script = f'hostname {host} && exec "$@"'
        self.proc = subprocess.Popen(
            ["unshare", "--uts", "sh", "-c", script, "sh", *argv],
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()


@pytest.fixture
def jobctl(pg_url):
    """The CLI on the shared PostgreSQL database, whatever JOBCTL_TEST_BACKEND says."""
    from conftest import Jobctl

    j = Jobctl(pg_url)
    yield j
    j.close()


@pytest.fixture
def hosts(pg_url, tmp_path):
    started: list[HostDaemon] = []

    def start(host: str, *args: str) -> HostDaemon:
        d = HostDaemon(pg_url, host, tmp_path / f"{host}-{len(started)}.log", *args)
        started.append(d)
        wait_until(lambda: "started" in d.log(), 15, what=f"daemon on {host}")
        return d

    yield start
    for d in started:
        d.stop()


def _status(jobctl) -> dict:
    return jobctl.json("status")


def _leaders(jobctl) -> list[dict]:
    return [d for d in _status(jobctl)["daemons"] if d["leader"]]


def _windows(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [line.split()[0] for line in log.read_text().splitlines() if line.strip()]


def test_one_leader_and_failover_within_one_lease_loses_no_window(jobctl, hosts, tmp_path):
    log = tmp_path / "windows.log"
    jobctl(
        "add",
        "tick",
        "--every",
        "1s",
        "--catchup",
        "all",
        "--catchup-limit",
        "20",
        "--overlap",
        "allow",
        "--",
        f'echo "$JOBCTL_SCHEDULED_FOR $(hostname)" >> {log}',
    )
    daemons = [hosts("host-a"), hosts("host-a"), hosts("host-b")]
    wait_until(lambda: len(_status(jobctl)["daemons"]) == 3, 10, what="three daemons")
    assert {d["host"] for d in _status(jobctl)["daemons"]} == {"host-a", "host-b"}
    wait_until(lambda: len(_windows(log)) >= 3, 15, what="the first windows")
    for _ in range(5):  # never two leaders, seen again and again (a late renewal may
        assert len(_leaders(jobctl)) <= 1  # leave none for a moment on a busy machine)
        time.sleep(0.2)
    leader = wait_until(lambda: (ls := _leaders(jobctl)) and len(ls) == 1 and ls[0], 10)
    victim = next(d for d in daemons if str(leader["pid"]) in d.log())
    os.killpg(victim.proc.pid, signal.SIGKILL)
    victim.proc.wait()
    killed_at = time.monotonic()

    def new_leader() -> bool:
        return any(d["leader"] and d["id"] != leader["id"] for d in _status(jobctl)["daemons"])

    wait_until(new_leader, LEASE_SECONDS + 3, interval=0.05, what="a new leader")
    took = time.monotonic() - killed_at
    assert took <= LEASE_SECONDS + 1.5, took
    seen = len(_windows(log))
    wait_until(lambda: len(_windows(log)) >= seen + 3, 15, what="windows after the failover")
    for d in daemons:
        if d is not victim:
            os.kill(d.proc.pid, signal.SIGSTOP)  # freeze the rest before reading
    try:
        runs = jobctl.json("runs", "tick", "--limit", "100000")
    finally:
        for d in daemons:
            if d is not victim:
                os.kill(d.proc.pid, signal.SIGCONT)
    windows = sorted(r["scheduled_for"] for r in runs)
    assert len(windows) == len(set(windows)), "a window recorded twice"
    times = [datetime.fromisoformat(w.replace("Z", "+00:00")) for w in windows]
    gaps = {round((b - a).total_seconds(), 3) for a, b in itertools.pairwise(times)}
    assert gaps == {1.0}, f"a window was lost: gaps {sorted(gaps)}"
    ran = collections.Counter(_windows(log))
    # at least once: the one window that may run twice is the victim's own, whose command
    # ended before the kill but whose end it never wrote (its attempt lost, run again)
    by_window = {r["scheduled_for"]: r for r in runs}
    for w, n in ran.items():
        if n == 1:
            continue
        run = by_window.get(w) or by_window[w.replace("+00:00", "Z")]
        attempts = jobctl.json("inspect", str(run["id"]))["attempts"]
        assert n == 2 and len(attempts) == 2 and attempts[0]["error"] == "lost", (w, attempts)
    finished = {r["scheduled_for"] for r in runs if r["state"] == "succeeded"}
    assert finished <= set(ran) | {w.replace("Z", "+00:00") for w in ran}
    assert not [r for r in runs if r["state"] == "skipped"]


def test_a_host_name_taken_by_another_machine_is_refused(jobctl, pg_url, hosts, tmp_path):
    hosts("host-a")
    from jobctl.store import open_store
    from jobctl.store.values import DaemonIdentity

    store = open_store(pg_url)
    try:  # as if another machine (another boot) already ran a daemon named host-c
        other = DaemonIdentity("other-machine", "host-c", 4242, "another-boot-id", 3600)
        store.open_daemon(other).register_daemon(_now())
    finally:
        store.close()
    d = HostDaemon(pg_url, "host-c", tmp_path / "refused.log")
    try:
        assert d.proc.wait(30) == 1
        text = d.log()
        assert "Error: host name 'host-c' is taken" in text
        assert len([line for line in text.splitlines() if line.startswith("Error:")]) == 1
    finally:
        d.stop()


def _now():
    from jobctl.clock import SystemClock

    return SystemClock().now()


def test_a_server_restart_under_load_ends_every_run_once_per_window(
    jobctl, hosts, tmp_path, pg_databases
):
    if pg_databases.server is None:
        pytest.skip("JOBCTL_TEST_PG names a server this test cannot restart")
    log = tmp_path / "windows.log"
    jobctl(
        "add",
        "tick",
        "--every",
        "1s",
        "--catchup",
        "all",
        "--catchup-limit",
        "50",
        "--overlap",
        "allow",
        "--retries",
        "5",
        "--backoff",
        "1s",
        "--",
        f'echo "$JOBCTL_SCHEDULED_FOR $JOBCTL_ATTEMPT" >> {log}',
    )
    daemons = [hosts("host-a"), hosts("host-b")]
    wait_until(lambda: len(_windows(log)) >= 3, 15, what="the first windows")
    pg_databases.server.restart("immediate")
    time.sleep(0.5)  # the daemons meet the dead connections, then reconnect
    seen = len(set(_windows(log)))
    wait_until(lambda: len(set(_windows(log))) >= seen + 4, 30, what="windows after the restart")
    for d in daemons:
        assert d.proc.poll() is None, d.log()  # never exits for a lost connection
    jobctl("pause", "tick")
    wait_until(
        lambda: all(
            r["state"] in ("succeeded", "dead", "cancelled", "skipped")
            for r in jobctl.json("runs", "tick", "--limit", "100000")
        ),
        30,
        what="every run to end",
    )
    runs = jobctl.json("runs", "tick", "--limit", "100000")
    windows = [r["scheduled_for"] for r in runs]
    assert len(windows) == len(set(windows))
    ok = [r for r in runs if r["state"] == "succeeded"]
    assert len(ok) >= seen + 4
    by_window = collections.Counter(_windows(log))
    # a run cut by the restart may have been tried again; a window never runs twice at once
    # and never succeeds twice: one succeeded row per window
    assert len({r["scheduled_for"] for r in ok}) == len(ok)
    assert set(by_window) >= {r["scheduled_for"] for r in ok}
    json.dumps(runs)  # the runs are plain JSON


def _ticks(log: Path) -> list[tuple[str, int, float]]:
    """(host, attempt, time) of every tick a job wrote."""
    out = []
    if log.exists():
        for line in log.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append((parts[0], int(parts[1]), float(parts[2])))
    return out


def test_a_frozen_host_is_taken_over_and_its_attempt_never_runs_beside_the_new_one(
    jobctl, hosts, tmp_path
):
    log = tmp_path / "ticks.log"
    jobctl(
        "add",
        "slow",
        "--manual",
        "--retries",
        "3",
        "--backoff",
        "1s",
        "--",
        f'for i in $(seq 60); do echo "$(hostname) $JOBCTL_ATTEMPT $(date +%s.%N)" >> {log}; '
        "sleep 0.1; done",
    )
    b = hosts("host-b")
    run = jobctl.json("run", "slow")
    wait_until(lambda: any(h == "host-b" for h, _, _ in _ticks(log)), 10, what="host-b ticks")
    child = wait_until(lambda: jobctl.store().get_attempts(run["id"])[0].pid, 5, what="a pid")
    assert child
    # the whole host freezes: the daemon and its attempt
    os.kill(b.proc.pid, signal.SIGSTOP)
    os.killpg(child, signal.SIGSTOP)
    frozen_at = time.time()
    try:
        hosts("host-a")
        wait_until(
            lambda: any(h == "host-a" for h, _, _ in _ticks(log)),
            LEASE_SECONDS * 3 + 5,
            what="the run retried on host-a",
        )
        taken_at = min(t for h, _, t in _ticks(log) if h == "host-a")
        # the host wakes: its daemon must kill the attempt it no longer holds before that
        # attempt runs one more step (it is still stopped, and SIGKILL reaches it anyway)
        os.kill(b.proc.pid, signal.SIGCONT)
        wait_until(lambda: not pid_alive(child), 5, what="the frozen attempt killed")
    finally:
        os.kill(b.proc.pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGCONT)
    assert taken_at - frozen_at >= LEASE_SECONDS * 0.5  # not before its lease ran out
    late = [t for h, _, t in _ticks(log) if h == "host-b" and t > frozen_at + 0.2]
    assert late == [], "the frozen attempt ran on after the takeover"
    # the kill comes first, its log line a moment later
    wait_until(
        lambda: "lease lost" in b.log() or "cannot renew" in b.log(), 5, what="the loss logged"
    )
    attempts = jobctl.store().get_attempts(run["id"])
    assert (attempts[0].host, attempts[0].error) == ("host-b", "lost")
    assert attempts[1].host == "host-a"
    assert b.proc.poll() is None  # the frozen daemon carries on


class _Link:
    """A TCP relay between one daemon and the server: ``cut()`` is a network partition
    (every connection dropped, new ones refused) while the daemon itself runs on."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        self.up = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if not self.up:
                    client.close()
                    continue
                server = socket.create_connection(self.target)
                self.socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self.lock:
            self.up = False
            self.listener.close()
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


def test_a_host_cut_off_from_the_database_fences_itself_before_the_takeover(
    jobctl, pg_url, hosts, tmp_path
):
    """A partition, not a freeze: the cut-off daemon runs on but cannot renew, so it must
    kill its attempt itself (at 2/3 of the lease) before another host may take the run."""
    log = tmp_path / "ticks.log"
    jobctl(
        "add",
        "slow",
        "--manual",
        "--retries",
        "3",
        "--backoff",
        "1s",
        "--",
        f'for i in $(seq 80); do echo "$(hostname) $JOBCTL_ATTEMPT $(date +%s.%N)" >> {log}; '
        "sleep 0.1; done",
    )
    parts = urlsplit(pg_url)
    link = _Link((parts.hostname or "127.0.0.1", parts.port or 5432))
    b = HostDaemon(
        urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{link.port}")),
        "host-b",
        tmp_path / "host-b.log",
    )
    try:
        wait_until(lambda: "started" in b.log(), 15, what="daemon on host-b")
        run = jobctl.json("run", "slow")
        wait_until(lambda: any(h == "host-b" for h, _, _ in _ticks(log)), 10, what="host-b ticks")
        link.cut()
        cut_at = time.time()
        hosts("host-a")
        wait_until(
            lambda: any(h == "host-a" for h, _, _ in _ticks(log)),
            LEASE_SECONDS * 3 + 5,
            what="the run retried on host-a",
        )
        wait_until(  # long enough for an attempt left running on host-b to show
            lambda: len([h for h, _, _ in _ticks(log) if h == "host-a"]) >= 5, 10, what="ticks"
        )
        taken_at = min(t for h, _, t in _ticks(log) if h == "host-a")
        last_b = max(t for h, _, t in _ticks(log) if h == "host-b")
        assert last_b < taken_at, "the cut-off attempt ran beside the new one"
        assert last_b - cut_at <= LEASE_SECONDS, "fenced later than its lease"
        assert "cannot renew its lease" in b.log()
        assert b.proc.poll() is None  # the cut-off daemon carries on
        attempts = jobctl.store().get_attempts(run["id"])
        assert (attempts[0].host, attempts[1].host) == ("host-b", "host-a")
    finally:
        b.stop()


def test_on_tags_send_runs_only_to_the_daemons_carrying_them(jobctl, hosts, tmp_path):
    """--on host:a runs only on a over many windows while b idles; --on gpu runs on the two
    gpu daemons and never on the untagged one."""
    pinned, gpu = tmp_path / "pinned.log", tmp_path / "gpu.log"
    common = ["--every", "1s", "--catchup", "all", "--overlap", "allow"]
    jobctl("add", "pinned", *common, "--on", "host:host-a", "--",
           f'echo "$JOBCTL_SCHEDULED_FOR $(hostname)" >> {pinned}')  # fmt: skip
    jobctl("add", "render", *common, "--on", "gpu", "--",
           f'echo "$JOBCTL_SCHEDULED_FOR $(hostname)" >> {gpu}')  # fmt: skip
    hosts("host-a", "--tag", "gpu")
    hosts("host-b")
    hosts("host-c", "--tag", "gpu")
    wait_until(lambda: len(_status(jobctl)["daemons"]) == 3, 10, what="three daemons")
    tags = {d["host"]: d["tags"] for d in _status(jobctl)["daemons"]}
    assert tags == {
        "host-a": ["gpu", "host:host-a"],
        "host-b": ["host:host-b"],
        "host-c": ["gpu", "host:host-c"],
    }
    wait_until(lambda: len(_windows(pinned)) >= 8 and len(_windows(gpu)) >= 8, 40, what="runs")
    pinned_hosts = collections.Counter(line.split()[1] for line in pinned.read_text().splitlines())
    gpu_hosts = collections.Counter(line.split()[1] for line in gpu.read_text().splitlines())
    assert set(pinned_hosts) == {"host-a"}, pinned_hosts
    assert set(gpu_hosts) <= {"host-a", "host-c"}, gpu_hosts
    # and no run of either was ever claimed by host-b (its attempts' host)
    for name in ("pinned", "render"):
        for run in jobctl.json("runs", name, "--limit", "1000"):
            if run["state"] == "succeeded":
                assert run["host"] in ("host-a", "host-c"), run
