"""Process groups, a lost attempt's leftovers, and strays reparented to a subreaper."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import pid_alive, wait_until

from jobctl.reaper import group_alive, kill_group, kill_run_processes, processes_of_run, run_of

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _sleeper(run_id: str, db: str) -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ.get("PATH", "/bin"), "JOBCTL_RUN_ID": run_id, "JOBCTL_DB": db}
    return subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)


def _execed(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"JOBCTL_RUN_ID=" in f.read()
    except OSError:
        return False


def test_processes_of_run_match_both_the_run_and_the_database(tmp_path):
    db, other = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    procs = {
        "mine": _sleeper("7", db),
        "other_db": _sleeper("7", other),
        "db_prefix": _sleeper("7", db + "-wal"),
        "other_run": _sleeper("70", db),
    }
    try:
        # every exec done: each environ is the new one (until its exec, a child's is ours)
        wait_until(lambda: all(_execed(p.pid) for p in procs.values()), 5, what="the execs")
        assert processes_of_run(7, db) == [procs["mine"].pid]
        assert processes_of_run(7, other) == [procs["other_db"].pid]
        assert processes_of_run(70, db) == [procs["other_run"].pid]
        assert processes_of_run(8, db) == []
        assert kill_run_processes(7, db) == 1
        assert procs["mine"].wait(5) == -signal.SIGKILL
        assert all(p.poll() is None for k, p in procs.items() if k != "mine")
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def _proc_tree(tmp_path, environs):
    """A stand-in for /proc under ``tmp_path``: a directory per pid with its environ."""
    root = tmp_path / "proc"
    for pid, env in environs.items():
        (root / pid).mkdir(parents=True)
        (root / pid / "environ").write_bytes(env)
    return root


def test_processes_of_run_reads_a_proc_tree(tmp_path):
    root = _proc_tree(
        tmp_path,
        {
            "100": b"JOBCTL_RUN_ID=3\0JOBCTL_DB=/x.db\0",
            "101": b"JOBCTL_DB=/x.db\0JOBCTL_RUN_ID=3\0HOME=/\0",
            "102": b"JOBCTL_RUN_ID=3\0JOBCTL_DB=/y.db\0",
            "103": b"XJOBCTL_RUN_ID=3\0JOBCTL_DB=/x.db\0",
            "self": b"JOBCTL_RUN_ID=3\0JOBCTL_DB=/x.db\0",
        },
    )
    (root / "104").mkdir()  # no environ to read: skipped
    assert sorted(processes_of_run(3, "/x.db", proc_root=str(root))) == [100, 101]
    assert processes_of_run(3, "/x.db", proc_root=str(tmp_path / "none")) == []


def test_run_of_reads_the_run_of_this_database_only(tmp_path):
    root = _proc_tree(
        tmp_path,
        {
            "100": b"HOME=/\0JOBCTL_RUN_ID=3\0JOBCTL_DB=/x.db\0",
            "101": b"JOBCTL_RUN_ID=3\0JOBCTL_DB=/y.db\0",
            "102": b"JOBCTL_DB=/x.db\0",
            "103": b"JOBCTL_RUN_ID=x\0JOBCTL_DB=/x.db\0",
        },
    )
    got = {pid: run_of(pid, "/x.db", proc_root=str(root)) for pid in (100, 101, 102, 103, 104)}
    assert got == {100: 3, 101: None, 102: None, 103: None, 104: None}


def test_a_database_path_that_is_not_utf8_is_matched_as_its_bytes(tmp_path):
    """A ``JOBCTL_DB`` that is not UTF-8 (held with surrogates, as the daemon got it from
    its environment) is looked for as the bytes its children were given; encoding it
    strictly raised, and the daemon died looking for a lost attempt's processes."""
    db = "/caf\udce9.db"  # the bytes b"/caf\xe9.db"
    root = _proc_tree(
        tmp_path,
        {
            "100": b"JOBCTL_RUN_ID=3\0JOBCTL_DB=/caf\xe9.db\0",
            "101": b"JOBCTL_RUN_ID=3\0JOBCTL_DB=/cafe.db\0",
        },
    )
    assert processes_of_run(3, db, proc_root=str(root)) == [100]
    assert run_of(100, db, proc_root=str(root)) == 3
    assert run_of(101, db, proc_root=str(root)) is None


def test_kill_group_reaches_the_whole_group_and_never_group_0_or_1():
    p = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60; wait"], start_new_session=True)
    try:
        wait_until(lambda: group_alive(p.pid), 5)
        assert not kill_group(0) and not kill_group(1)
        assert kill_group(p.pid)
        assert p.wait(5) == -signal.SIGKILL
        wait_until(lambda: not group_alive(p.pid), 5, what="the whole group gone")
        assert not kill_group(p.pid)
    finally:
        p.kill()
        p.wait()


# The reaper changes how orphans are reparented, so it runs in a process of its own.
SUBREAPER_SCRIPT = textwrap.dedent(
    """
    import json, os, select, sys, time
    sys.path.insert(0, sys.argv[1])
    from jobctl.models import RunSettings, StopReason
    from jobctl.reaper import StrayReaper, child_pids, pgid_of
    from jobctl.worker import Child

    def settings(command):
        return RunSettings(command, "/bin/sh", None, {}, None, None, 10.0, None)

    def drive(child):
        while not child.finished:
            ready, _, _ = select.select([child.pidfd], [], [], 10)
            assert ready
            child.on_exit()

    def wait_for(cond):
        deadline = time.monotonic() + 10
        while not cond():
            assert time.monotonic() < deadline
            time.sleep(0.01)

    out = {}
    reaper = StrayReaper()
    out["enabled"] = reaper.enable()
    env = {"PATH": os.environ["PATH"], "JOBCTL_RUN_ID": "5", "JOBCTL_DB": "/x.db"}
    # an attempt that leaves a daemonised grandchild (setsid, its parent gone)
    f = sys.argv[2]
    cmd = "( setsid sh -c 'echo $$ > %s; exec sleep 300' & ); until [ -s %s ]; do :; done" % (f, f)
    child = Child.start(settings(cmd), env, time.monotonic())
    drive(child)
    stray = int(open(f).read())
    wait_for(lambda: stray in child_pids())
    out["reparented"] = True
    # a running attempt is tracked: never touched
    busy = Child.start(settings("exec sleep 300"), env, time.monotonic())
    # left alone while its group is still running an attempt
    out["spared"] = reaper.sweep({busy.pid}, {pgid_of(stray)})
    # and while the run it came from (its environment says) is running
    out["spared_run"] = reaper.sweep({busy.pid}, {busy.pid}, {5}, "/x.db")
    # (the same run id of another database is another run)
    fds = reaper.sweep({busy.pid}, {busy.pid}, {5}, "/y.db")
    out["killed"] = len(fds)
    out["again"] = reaper.sweep({busy.pid}, {busy.pid})  # pending: not killed twice
    ready, _, _ = select.select(fds, [], [], 10)
    out["pid"] = reaper.reap(ready[0])
    out["stray"] = stray
    out["gone"] = not os.path.exists("/proc/%d" % stray)
    out["busy_alive"] = os.path.exists("/proc/%d" % busy.pid) and busy.returncode is None
    out["unknown"] = reaper.reap(12345)
    busy.kill_now(StopReason.CANCELLED)
    drive(busy)
    out["left"] = child_pids()
    print(json.dumps(out))
    """
)


def test_stray_reaper_kills_and_reaps_an_escaped_grandchild(tmp_path):
    p = subprocess.run(
        [sys.executable, "-c", SUBREAPER_SCRIPT, SRC, str(tmp_path / "stray.pid")],
        capture_output=True,
        timeout=60,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["enabled"] and out["reparented"]
    assert out["spared"] == [] and out["spared_run"] == []
    assert out["killed"] == 1 and out["again"] == []
    assert out["pid"] == out["stray"] and out["gone"]
    assert out["busy_alive"]
    assert out["unknown"] is None
    assert out["left"] == []
    assert not pid_alive(out["stray"])
