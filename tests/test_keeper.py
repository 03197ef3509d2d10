"""The daemon's keeper (issue 29, item 2): attempts do not outlive a daemon killed outright.

A real ``jobctl daemon`` on the suite's backend, real shell pipelines with backgrounded
grandchildren, SIGKILL, and ``/proc`` to see what is left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import pid_alive, proc_state, wait_until

from jobctl.keeper import TABLE_SLOTS, Keeper, boot_ticks, held, kill_all, start_time
from jobctl.models import RunState
from jobctl.reaper import processes_of_run

#: a pipeline in the background (two grandchildren), one more backgrounded grandchild,
#: and the shell waiting for them: five processes in the attempt's group
PIPELINE = "sleep 60 | cat & sleep 61 & sleep 62; wait"


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(x) for x in f.read().split()]
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def keepers_of(daemon_pid: int) -> list[int]:
    """The daemon's children running keeper.py."""
    return [c for c in _children(daemon_pid) if any("keeper" in a for a in _cmdline(c))]


def keeper_of(daemon_pid: int) -> int:
    """The daemon's keeper."""
    [pid] = keepers_of(daemon_pid)
    return pid


def wait_keeper_up(daemon_pid: int) -> int:
    """The daemon's keeper once it runs its loop (only its four descriptors open): a
    keeper whose interpreter is still starting kills as surely, but later, by as long as a
    busy machine takes to start Python."""
    keeper: int = wait_until(lambda: keepers_of(daemon_pid), 10, what="the keeper")[0]

    def up() -> bool:
        with contextlib.suppress(OSError):
            return sorted(int(fd) for fd in os.listdir(f"/proc/{keeper}/fd")) == [0, 1, 2, 3]
        return False

    wait_until(up, 10, what=f"keeper {keeper} to run")
    return keeper


def wait_all_gone(procs: list[int], keeper: int, timeout: float = 15.0) -> None:
    """Every one of ``procs`` gone; on a timeout, say what is left and what the keeper does."""

    def gone() -> bool:
        return not any(pid_alive(p) for p in procs)

    try:
        wait_until(gone, timeout, what="the attempt's processes killed")
    except AssertionError as e:
        left = [(p, proc_state(p), _cmdline(p)) for p in procs if pid_alive(p)]
        raise AssertionError(
            f"{e}: left {left}; keeper {keeper}: {proc_state(keeper) or 'gone'}"
        ) from None


def attempt_processes(jobctl: Any, run_id: int) -> list[int]:
    db = jobctl.store().daemon.child_location()
    return [p for p in processes_of_run(run_id, db) if pid_alive(p)]


def start_pipelines(jobctl: Any, start_daemon: Any, count: int) -> tuple[Any, list[int]]:
    """A daemon running ``count`` attempts of PIPELINE; returns it and their processes."""
    jobctl("add", "pipe", "--manual", "--", PIPELINE)
    d = start_daemon("--workers", str(count))
    runs = [jobctl.json("run", "pipe")["id"] for _ in range(count)]
    procs: list[int] = []
    for run_id in runs:
        procs += wait_until(
            lambda r=run_id: (p := attempt_processes(jobctl, r)) and len(p) >= 5 and p,
            10,
            what=f"run {run_id}'s five processes",
        )
    return d, procs


def test_a_daemon_killed_outright_leaves_no_attempt_process_alive(jobctl, start_daemon):
    d, procs = start_pipelines(jobctl, start_daemon, 3)
    keeper = wait_keeper_up(d.pid)
    assert keepers_of(d.pid) == [keeper]
    d.kill()  # SIGKILL: no shutdown runs
    # none is left a moment later (README, Guarantees): waited for with a deadline wide
    # enough for a machine busy with other tests
    try:
        wait_until(
            lambda: not any(pid_alive(p) for p in procs), 10, what="the attempts to be killed"
        )
    except AssertionError:
        alive = [p for p in procs if pid_alive(p)]
        raise AssertionError([(p, _cmdline(p)) for p in alive]) from None
    wait_until(lambda: not pid_alive(keeper), 5, what="the keeper to exit")
    assert "the daemon is gone: killed the process groups" in d.log()


def test_the_keeper_holds_none_of_the_daemons_descriptors(jobctl, start_daemon):
    d, _ = start_pipelines(jobctl, start_daemon, 1)
    keeper = keeper_of(d.pid)

    def fds() -> dict[int, str]:
        return {
            int(fd): os.readlink(f"/proc/{keeper}/fd/{fd}")
            for fd in os.listdir(f"/proc/{keeper}/fd")
        }

    # once it runs (an interpreter that starts opens its own modules for a moment)
    wait_until(lambda: sorted(fds()) == [0, 1, 2, 3], 5, what=f"only 0 to 3 open: {fds()}")
    assert os.readlink(f"/proc/{keeper}/fd/0").startswith("pipe:")
    assert os.readlink(f"/proc/{keeper}/fd/1") == os.devnull
    # the table the daemon names its attempts' groups in: a memory file, no file of its
    assert os.readlink(f"/proc/{keeper}/fd/3").startswith("/memfd:jobctl-keeper")
    # its own process group: a terminal's Ctrl-C to the daemon's group is not for it
    assert os.getpgid(keeper) == keeper != os.getpgid(d.pid)
    # a stop signal is the daemon's to act on: the keeper lives on until the pipe ends
    os.kill(keeper, signal.SIGTERM)
    os.kill(keeper, signal.SIGINT)
    os.kill(keeper, signal.SIGHUP)
    time.sleep(0.2)
    assert pid_alive(keeper), d.log()


def test_a_normal_shutdown_still_puts_the_runs_back_and_the_keeper_goes(jobctl, start_daemon):
    d, procs = start_pipelines(jobctl, start_daemon, 2)
    keeper = keeper_of(d.pid)
    assert d.terminate() == 0
    assert [p for p in procs if pid_alive(p)] == []
    wait_until(lambda: not pid_alive(keeper), 10, what="the keeper to exit")
    for run in jobctl.json("runs", "pipe"):
        assert run["state"] == "pending" and run["last_error"] == "interrupted", run
    # nothing was left for the keeper to kill: the daemon had killed and reaped it all
    assert "the daemon is gone" not in d.log()


def test_a_killed_keeper_is_replaced_and_told_every_running_group(jobctl, start_daemon):
    d, procs = start_pipelines(jobctl, start_daemon, 2)
    first = keeper_of(d.pid)
    os.kill(first, signal.SIGKILL)
    d.wait_log("the keeper exited (signal 9): starting another")
    wait_until(lambda: keeper_of(d.pid) != first, 10, what="another keeper")
    second = wait_keeper_up(d.pid)
    assert all(pid_alive(p) for p in procs)  # the attempts ran on
    d.kill()
    wait_all_gone(procs, second)  # the second keeper was told every group
    wait_until(lambda: not pid_alive(second), 5, what="the second keeper to exit")


def test_the_keeper_is_no_stray(jobctl, start_daemon):
    """The daemon sweeps the children that are not attempts after an attempt exits: the
    keeper is one of its children, and stays."""
    jobctl("add", "quick", "--manual", "--", "true")
    d = start_daemon()
    keeper = keeper_of(d.pid)
    for _ in range(3):
        run = jobctl.json("run", "quick", "--wait")
        assert run["state"] == "succeeded"
    time.sleep(0.5)  # the sweep comes 0.1 s after an exit
    assert keepers_of(d.pid) == [keeper] and pid_alive(keeper)
    assert "killed stray" not in d.log() and "keeper exited" not in d.log()


def test_runs_of_a_killed_daemon_run_again_once_and_end(jobctl, start_daemon, tmp_path):
    """The issue's scene: after the SIGKILL another daemon runs attempt 2 while nothing of
    attempt 1 runs."""
    starts = tmp_path / "starts"
    jobctl(
        "add",
        "work",
        "--manual",
        "--",
        f'echo "$JOBCTL_ATTEMPT" >> {starts}; if [ "$JOBCTL_ATTEMPT" = 1 ]; then {PIPELINE}; fi',
    )
    first = start_daemon()
    run = jobctl.json("run", "work")
    procs = wait_until(
        lambda: (p := attempt_processes(jobctl, run["id"])) and len(p) >= 5 and p, 10
    )
    keeper = wait_keeper_up(first.pid)
    first.kill()
    wait_all_gone(procs, keeper)  # attempt 1 killed, by the keeper alone
    start_daemon()
    wait_until(lambda: jobctl.store().get_run(run["id"]).state is RunState.SUCCEEDED, 15)
    assert starts.read_text().split() == ["1", "2"]
    assert jobctl.store().get_attempts(run["id"])[0].error == "lost"


# ---------------------------------------------------------------------- the keeper's list


@pytest.fixture
def group() -> Any:
    """A real process group of our own (a sleeping leader), killed after the test."""
    p = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield p
    if p.poll() is None:
        p.kill()
    p.wait()


def _fake_proc(root: Path, pid: int, started: int) -> None:
    (root / str(pid)).mkdir(exist_ok=True)
    fields = ["S", "1", str(pid)] + ["0"] * 16 + [str(started)] + ["0"] * 10
    (root / str(pid) / "stat").write_text(f"{pid} (sleep) {' '.join(fields)}\n")


def test_the_keeper_kills_a_group_it_holds(group):
    assert kill_all([group.pid], boot_ticks()) == [group.pid]
    assert group.wait(5) == -signal.SIGKILL


def test_the_daemon_names_its_groups_in_the_table_the_keeper_reads():
    # hold and release write the shared table; a released slot is taken again first
    keeper = Keeper(lambda message, level=0: None)
    keeper._table()
    table = keeper._slots
    assert table is not None and len(table) == TABLE_SLOTS
    keeper.hold(1234)
    keeper.hold(5678)
    assert held(table) == [1234, 5678]
    keeper.release(1234)
    keeper.release(1234)  # twice: nothing more
    assert held(table) == [5678]
    keeper.hold(42)
    assert list(table[:2]) == [42, 5678] and held(table) == [42, 5678]
    keeper.release(42)
    keeper.release(5678)
    assert held(table) == []


def test_the_keeper_never_kills_a_group_whose_id_was_reused(group, tmp_path):
    """A process that has the id and started after the daemon's end is another's: only
    the daemon reaped its attempts, so the id was its attempt's until then."""
    _fake_proc(tmp_path, group.pid, 2000)
    assert kill_all([group.pid], died=1999, proc_root=str(tmp_path)) == []
    assert group.poll() is None
    # one that started before the end (or in its tick) is the attempt's leader, killed
    _fake_proc(tmp_path, group.pid, 1000)
    assert kill_all([group.pid], died=2000, proc_root=str(tmp_path)) == [group.pid]
    assert group.wait(5) == -signal.SIGKILL


def test_a_leaderless_group_is_still_killed(tmp_path):
    """The shell of an attempt exited (reaped by init after the daemon died) but its
    backgrounded grandchild still runs in the group: no process has the id, the group
    does, and it is killed."""
    marker = tmp_path / "grandchild"
    leader = subprocess.Popen(
        ["sh", "-c", f"sleep 60 & echo $! > {marker}"], start_new_session=True
    )
    leader.wait(5)  # reaped: no process has the id now, its grandchild holds the group
    grandchild = int(wait_until(lambda: marker.exists() and marker.read_text().strip(), 5))
    try:
        assert start_time(leader.pid) is None and pid_alive(grandchild)
        assert kill_all([leader.pid], boot_ticks()) == [leader.pid]
        wait_until(lambda: not pid_alive(grandchild), 5, what="the grandchild killed")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)


def test_a_process_started_this_tick_never_looks_started_after_now():
    # the keeper's now and a start time are both clock ticks since boot, rounded down
    # alike: one just started is never taken for a reused id
    for _ in range(100):
        p = subprocess.Popen(["sleep", "5"])
        try:
            started = start_time(p.pid)
            assert started is not None and started <= boot_ticks()
        finally:
            p.kill()
            p.wait()
