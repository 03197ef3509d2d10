"""What a run costs and what it may use, and exit codes that are not failures or
not worth a retry (README, Run policies and what a run costs), through a real daemon and real children, on both backends."""

from __future__ import annotations

import sys

import pytest
from conftest import wait_until

from jobctl.errors import UsageError

ALLOC_200M = f"{sys.executable} -c \"b = b'x' * (200 << 20); print(len(b))\""


def _final(jobctl, run_id, timeout=30.0):
    return wait_until(
        lambda: (
            (r := jobctl.json("inspect", str(run_id)))["state"]
            in ("succeeded", "dead", "cancelled")
            and r
        ),
        timeout,
        what=f"run {run_id} to end",
    )


def test_max_rss_and_cpu_of_an_attempt_are_recorded(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "big", "--manual", "--", ALLOC_200M)
    run = _final(jobctl, jobctl.json("run", "big")["id"])
    assert run["state"] == "succeeded"
    [attempt] = run["attempts"]
    # the command's own peak, never the daemon's (tens of MiB): see jobctl.spawner
    assert 200 << 20 <= attempt["max_rss"] <= 230 << 20
    assert attempt["cpu_user"] > 0 and attempt["cpu_system"] >= 0
    # run JSON: its last attempt's
    assert run["max_rss"] == attempt["max_rss"]
    assert abs(run["cpu"] - (attempt["cpu_user"] + attempt["cpu_system"])) < 1e-6
    human = jobctl("inspect", str(run["id"])).stdout
    assert "MAXRSS" in human and "M" in human.split("MAXRSS")[1]


def test_max_rss_of_true_is_its_own_not_the_daemons(jobctl, start_daemon):
    d = start_daemon()
    jobctl("add", "t", "--manual", "--", "true")
    run = _final(jobctl, jobctl.json("run", "t")["id"])
    assert run["state"] == "succeeded"
    assert 0 < run["max_rss"] < 8 << 20
    with open(f"/proc/{d.pid}/status") as f:
        daemon_peak = int(next(line for line in f if line.startswith("VmHWM:")).split()[1]) << 10
    assert daemon_peak > 16 << 20  # what it recorded before (the daemon's own peak)


def test_memory_max_makes_the_200_mib_child_fail(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "capped", "--manual", "--retries", "0", "--memory-max", "100M", "--", ALLOC_200M)
    run = _final(jobctl, jobctl.json("run", "capped")["id"])
    assert run["state"] == "dead" and run["last_error"] == "exit 1"
    assert "MemoryError" in jobctl("logs", str(run["id"])).stdout


def test_nice_is_seen_by_the_child(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "gentle", "--manual", "--nice", "10", "--", "ps -o ni= -p $$")
    run = _final(jobctl, jobctl.json("run", "gentle")["id"])
    assert run["state"] == "succeeded"
    assert jobctl("logs", str(run["id"])).stdout.strip() == "10"


def test_cpu_max_stops_a_busy_loop_with_cpu_limit(jobctl, start_daemon):
    start_daemon()
    jobctl(
        "add", "spin", "--manual", "--retries", "0", "--cpu-max", "1s", "--", "while :; do :; done"
    )
    run = _final(jobctl, jobctl.json("run", "spin")["id"], timeout=60)
    assert run["state"] == "dead" and run["last_error"] == "cpu limit"
    assert run["attempts"][0]["error"] == "cpu limit"
    assert run["cpu"] >= 0.5


def test_an_ok_exit_code_succeeds(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "rsync", "--manual", "--retries", "0", "--ok-exit", "24", "--", "exit 24")
    run = _final(jobctl, jobctl.json("run", "rsync")["id"])
    assert run["state"] == "succeeded" and run["exit_code"] == 24 and run["last_error"] is None
    assert run["attempts"][0]["error"] is None
    # without it, exit 24 is a failure
    jobctl("edit", "rsync", "--ok-exit", "")
    again = _final(jobctl, jobctl.json("run", "rsync")["id"])
    assert again["state"] == "dead" and again["last_error"] == "exit 24"


def test_a_no_retry_exit_code_is_dead_at_once(jobctl, start_daemon):
    start_daemon()
    jobctl(
        "add", "perm", "--manual", "--retries", "5", "--backoff", "1s",
        "--no-retry-exit", "3", "--", "exit 3",
    )  # fmt: skip
    run = _final(jobctl, jobctl.json("run", "perm")["id"])
    assert run["state"] == "dead" and run["last_error"] == "exit 3"
    assert len(run["attempts"]) == 1
    # another code is retried as usual
    jobctl("edit", "perm", "--command", "exit 4", "--retries", "1")
    other = _final(jobctl, jobctl.json("run", "perm")["id"])
    assert other["state"] == "dead" and len(other["attempts"]) == 2


def test_limits_and_policies_round_trip_through_the_job_json(jobctl):
    jobctl(
        "add", "j", "--every", "1h", "--nice", "5", "--memory-max", "1G", "--io-class", "idle",
        "--cpu-max", "1m", "--files-max", "64", "--deadline", "30s", "--ok-exit", "24",
        "--no-retry-exit", "3,4", "--pause-after-failures", "3", "--overlap", "queue", "--", "true",
    )  # fmt: skip
    job = jobctl.json("show", "j")
    assert job["limits"] == {
        "nice": 5,
        "io_class": "idle",
        "memory_max": 1 << 30,
        "cpu_max": 60.0,
        "files_max": 64,
    }
    assert (job["deadline"], job["pause_after_failures"], job["overlap"]) == (30.0, 3, "queue")
    assert (job["ok_exit"], job["no_retry_exit"], job["max_running"]) == ([24], [3, 4], None)
    assert job["paused_reason"] is None
    jobctl("edit", "j", "--nice", "0", "--overlap", "allow", "--max-running", "2")
    job = jobctl.json("show", "j")
    assert job["limits"]["nice"] == 0 and job["limits"]["memory_max"] == 1 << 30
    assert job["max_running"] == 2
    jobctl("pause", "j")
    assert jobctl.json("show", "j")["paused_reason"] == "user"
    jobctl("resume", "j")
    assert jobctl.json("show", "j")["paused_reason"] is None
    with pytest.raises(UsageError, match="--max-running goes with --overlap allow"):
        jobctl("edit", "j", "--overlap", "forbid")
    with pytest.raises(UsageError, match="invalid --memory-max"):
        jobctl("add", "k", "--every", "1h", "--memory-max", "100", "--", "true")
    assert [j["name"] for j in jobctl.json("list")] == ["j"]


def test_db_copy_with_history_keeps_each_attempts_cost(jobctl, start_daemon, tmp_path):
    from conftest import Jobctl

    d = start_daemon()
    jobctl(
        "add",
        "burn",
        "--manual",
        "--retries",
        "0",
        "--",
        "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
    )
    run = _final(jobctl, jobctl.json("run", "burn")["id"])
    assert run["cpu"] > 0 and run["max_rss"] > 0
    assert d.terminate() == 0
    jobctl("db", "copy", "--to", str(tmp_path / "copy.db"), "--history")
    copy = Jobctl(tmp_path / "copy.db")
    try:
        [copied] = copy.json("runs", "burn")
        assert (copied["cpu"], copied["max_rss"]) == (run["cpu"], run["max_rss"])
        [attempt] = copy.json("inspect", str(copied["id"]))["attempts"]
        cost = ("cpu_user", "cpu_system", "max_rss")
        assert [attempt[k] for k in cost] == [run["attempts"][0][k] for k in cost]
    finally:
        copy.close()
