"""Daemons on several hosts sharing one PostgreSQL database (SPEC §10).

Each daemon runs in its own UTS namespace (``unshare --uts`` + ``hostname``, as root), so
one machine plays two hosts. A job fires every second and appends its window to a log;
the checks are on that log and on the runs table: one leader at a time, every window
recorded once and run once, whatever dies.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from conftest import wait_until

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

    def __init__(self, url: str, host: str, log: Path) -> None:
        self.host = host
        self.log_path = log
        self._log = open(log, "ab")
        code = "from jobctl.cli import main; main()"
        argv = [sys.executable, "-c", code, "--db", url, "daemon", "--lease", LEASE]
        argv += ["--shutdown-grace", "2s"]
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

    def start(host: str) -> HostDaemon:
        d = HostDaemon(pg_url, host, tmp_path / f"{host}-{len(started)}.log")
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
    for _ in range(5):  # exactly one leader, seen again and again
        assert len(_leaders(jobctl)) == 1
        time.sleep(0.2)
    leader = _leaders(jobctl)[0]
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
    assert max(ran.values()) == 1, [w for w, n in ran.items() if n > 1]
    finished = {r["scheduled_for"] for r in runs if r["state"] == "succeeded"}
    assert finished <= set(ran) | {w.replace("Z", "+00:00") for w in ran}
    assert not [r for r in runs if r["state"] == "skipped"]


def test_a_host_name_taken_by_another_machine_is_refused(jobctl, pg_url, hosts, tmp_path):
    hosts("host-a")
    from jobctl.store import open_store

    store = open_store(pg_url)
    try:  # as if another machine (another boot) already ran a daemon named host-c
        store.daemon.register_daemon(
            "other-machine", 4242, "host-c", "another-boot-id", _now(), 3600
        )
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
