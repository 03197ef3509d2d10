"""Children that misbehave: each ends right and leaves nothing behind."""

from __future__ import annotations

import os

from conftest import pid_alive, wait_until
from rhelpers import children, fd_count, zombies_of

from jobctl.models import FINISHED_RUN_STATES, RunState


def _state(jobctl, run_id):
    return jobctl.store().get_run(run_id).state


def test_misbehaving_children(jobctl, start_daemon, tmp_path):
    d = start_daemon("--workers", "6")
    warm = jobctl("add", "warm", "--manual", "--", "true")
    assert warm.exit_code == 0
    r0 = jobctl.json("run", "warm")
    wait_until(lambda: _state(jobctl, r0["id"]) is RunState.SUCCEEDED, 5)
    wait_until(lambda: children(d.pid) == [], 3)
    fds_before = fd_count(d.pid)

    gc_pid = tmp_path / "grandchild.pid"
    closer_pid = tmp_path / "closer.pid"
    stubborn_pid = tmp_path / "stubborn.pid"
    jobctl(
        "add",
        "daemonise",
        "--manual",
        "--env",
        f"MARK={tmp_path}",
        "--",
        # ends once its escaped grandchild is there (however slow the machine is to start it)
        f"( setsid sh -c 'sleep 300 & echo $! > {gc_pid}' & ); "
        f"while [ ! -s {gc_pid} ]; do sleep 0.05; done; exit 0",
    )
    jobctl(
        "add",
        "closer",
        "--manual",
        "--env",
        f"MARK={tmp_path}",
        "--",
        f"exec >&- 2>&-; echo $$ > {closer_pid}; sleep 1.5; exit 0",
    )
    jobctl(
        "add",
        "stubborn",
        "--manual",
        "--env",
        f"MARK={tmp_path}",
        "--timeout",
        "1s",
        "--retries",
        "0",
        "--",
        f"trap '' TERM; echo $$ > {stubborn_pid}; sleep 30; sleep 30",
    )
    jobctl(
        "add",
        "flood",
        "--manual",
        "--env",
        f"MARK={tmp_path}",
        "--",
        "head -c 100000000 /dev/zero; echo END",
    )
    runs = {n: jobctl.json("run", n)["id"] for n in ("daemonise", "closer", "stubborn", "flood")}

    # a loaded machine may take seconds to start the grandchild the job waits for
    wait_until(lambda: _state(jobctl, runs["daemonise"]) is RunState.SUCCEEDED, 30)
    wait_until(lambda: gc_pid.exists() and gc_pid.read_text().strip(), 5)
    grandchild = int(gc_pid.read_text())
    wait_until(lambda: not pid_alive(grandchild), 5, what="daemonised grandchild killed")

    wait_until(lambda: _state(jobctl, runs["closer"]) is RunState.SUCCEEDED, 10)
    assert not pid_alive(int(closer_pid.read_text()))

    wait_until(lambda: _state(jobctl, runs["flood"]) is RunState.SUCCEEDED, 30)
    att = jobctl.store().get_attempts(runs["flood"])[0]
    assert att.output_bytes == 100_000_000 + 4

    wait_until(lambda: _state(jobctl, runs["stubborn"]) is RunState.DEAD, 15)
    r = jobctl.store().get_run(runs["stubborn"])
    assert r.last_error == "timeout"
    assert not pid_alive(int(stubborn_pid.read_text()))

    wait_until(lambda: children(d.pid) == [], 5, what="no children (and no zombie) left")
    assert zombies_of(d.pid) == []
    wait_until(lambda: fd_count(d.pid) <= fds_before, 5, what="no descriptor left open")
    # no stray process anywhere that came from these jobs
    strays = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"MARK={tmp_path}".encode() in env and pid_alive(int(pid)):
            strays.append(pid)
    assert strays == []
    assert d.terminate() == 0


def test_a_process_that_left_its_group_lives_while_its_attempt_runs(jobctl, start_daemon, tmp_path):
    """A command may start a helper that leaves its process group (``ssh-agent`` does:
    fork and ``setsid``) and go on using it. The daemon, a child subreaper, inherits it
    and sweeps strays each time a child exits; the helper is killed only once the attempt
    it came from has ended, not while it runs."""
    d = start_daemon("--workers", "4")
    helper = tmp_path / "helper.pid"
    other_done = tmp_path / "other.done"
    jobctl(
        "add",
        "agent",
        "--manual",
        "--retries",
        "0",
        "--",
        f"( setsid sh -c 'echo $$ > {helper}; exec sleep 300' & ); "
        f"while [ ! -s {helper} ] || [ ! -e {other_done} ]; do sleep 0.05; done; "
        # the other job's exit made the daemon sweep (0.1 s after it): the helper is there
        "sleep 1; kill -0 $(cat " + str(helper) + ")",
    )
    jobctl(
        "add",
        "other",
        "--manual",
        "--",
        f"while [ ! -s {helper} ]; do sleep 0.05; done; touch {other_done}",
    )
    agent = jobctl.json("run", "agent")["id"]
    other = jobctl.json("run", "other")["id"]
    wait_until(lambda: _state(jobctl, other) is RunState.SUCCEEDED, 30)
    wait_until(lambda: _state(jobctl, agent) in FINISHED_RUN_STATES, 30)
    assert _state(jobctl, agent) is RunState.SUCCEEDED
    # and once the attempt ended, nothing of it runs on
    wait_until(lambda: not pid_alive(int(helper.read_text())), 5, what="the helper killed")
    wait_until(lambda: children(d.pid) == [], 5, what="no children (and no zombie) left")
