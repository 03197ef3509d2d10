"""The run policies (README, Run policies and what a run costs) through a real daemon and real children, on both backends:
--deadline, --overlap queue, --max-running, --pause-after-failures, --after."""

from __future__ import annotations

import itertools
import time

import pytest
from conftest import wait_until

from jobctl.errors import UsageError


def _runs(jobctl, name):
    return jobctl.json("runs", name, "--limit", "1000")


def test_a_deadline_shorter_than_the_wait_behind_a_busy_worker_skips_the_run(jobctl, start_daemon):
    start_daemon("--workers", "1")
    jobctl("notify", "add", "ops", "--command", "true", "--default", "missed")
    jobctl("add", "busy", "--manual", "--", "sleep 8")
    busy = jobctl.json("run", "busy")["id"]
    wait_until(lambda: jobctl.json("inspect", str(busy))["state"] == "leased", 10)
    jobctl("add", "late", "--in", "1s", "--deadline", "1s", "--", "true")
    jobctl("add", "patient", "--in", "1s", "--", "true")
    wait_until(lambda: jobctl.json("inspect", str(busy))["state"] == "succeeded", 20)
    wait_until(lambda: _runs(jobctl, "patient")[0]["state"] == "succeeded", 10)
    [late] = _runs(jobctl, "late")
    assert (late["state"], late["skip_reason"], late["attempt"]) == ("skipped", "deadline", 0)
    assert jobctl.json("inspect", str(late["id"]))["attempts"] == []
    # one missed notification for it, none for the others
    notes = jobctl.json("notifications", "--limit", "100")
    assert [(n["event"], n["job"]) for n in notes] == [("missed", "late")]


def test_a_deadline_does_not_touch_a_run_that_starts_in_time(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "prompt", "--in", "1s", "--deadline", "30s", "--", "true")
    wait_until(lambda: [r["state"] for r in _runs(jobctl, "prompt")] == ["succeeded"], 15)


def test_queue_keeps_one_window_waiting_and_skips_the_rest(jobctl, start_daemon):
    start_daemon("--workers", "4")
    jobctl("add", "slow", "--every", "1s", "--overlap", "queue", "--", "sleep 3")
    seen_leased = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        runs = _runs(jobctl, "slow")
        states = [r["state"] for r in runs]
        waiting = sum(s in ("pending", "failed") for s in states)
        seen_leased = max(seen_leased, states.count("leased"))
        assert states.count("leased") <= 1, states
        assert waiting <= 1, states
        skipped = [r for r in runs if r["state"] == "skipped"]
        if len(skipped) >= 3 and states.count("succeeded") >= 1 and waiting == 1:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"no queued window and skips seen: {states}")
    assert seen_leased == 1
    assert {r["skip_reason"] for r in skipped} == {"overlap"}
    # the queued window ran after the one before it: no two runs overlapped in time
    done = sorted(
        (r for r in _runs(jobctl, "slow") if r["state"] == "succeeded"),
        key=lambda r: r["started_at"],
    )
    for a, b in itertools.pairwise(done):
        assert a["finished_at"] <= b["started_at"]


def test_max_running_2_with_5_due_runs_never_has_3_leased(jobctl, start_daemon):
    start_daemon("--workers", "5")
    jobctl("add", "par", "--manual", "--overlap", "allow", "--max-running", "2", "--", "sleep 1")
    ids = [jobctl.json("run", "par")["id"] for _ in range(5)]
    most = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = [r["state"] for r in _runs(jobctl, "par")]
        most = max(most, states.count("leased"))
        assert states.count("leased") <= 2, states
        if states == ["succeeded"] * 5:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"runs did not end: {states}")
    assert most == 2
    waiting = jobctl.json("runs", "par")
    assert sorted(r["id"] for r in waiting) == sorted(ids)


def test_three_dead_runs_in_a_row_pause_the_job_and_resume_clears_it(jobctl, start_daemon):
    start_daemon()
    jobctl("notify", "add", "ops", "--command", "true", "--default", "paused")
    jobctl(
        "add", "fragile", "--manual", "--retries", "0", "--pause-after-failures", "3",
        "--", "exit 1",
    )  # fmt: skip
    jobctl("add", "steady", "--manual", "--retries", "0", "--", "exit 1")
    for n in range(1, 4):
        run_id = jobctl.json("run", "fragile")["id"]
        jobctl("run", "steady")
        wait_until(lambda r=run_id: jobctl.json("inspect", str(r))["state"] == "dead", 15)
        job = jobctl.json("show", "fragile")
        if n < 3:
            assert (job["state"], job["paused_reason"]) == ("active", None)
    wait_until(lambda: jobctl.json("show", "fragile")["state"] == "paused", 10)
    job = jobctl.json("show", "fragile")
    assert (job["paused"], job["paused_reason"]) == (True, "failures")
    assert "(by failures)" in jobctl("show", "fragile").stdout
    # the daemon's pause is a revision of the job (README, Jobs in git)
    last = jobctl.json("history", "fragile")[-1]
    assert (last["who"], last["source"], last["changes"]) == (
        "daemon",
        "daemon",
        {"paused": [False, True]},
    )
    notes = jobctl.json("notifications", "--limit", "100")
    assert [(n["event"], n["job"]) for n in notes] == [("paused", "fragile")]
    # a job without the policy is never paused by its failures
    wait_until(lambda: len(_runs(jobctl, "steady")) == 3, 10)
    wait_until(lambda: {r["state"] for r in _runs(jobctl, "steady")} == {"dead"}, 10)
    assert jobctl.json("show", "steady")["state"] == "active"
    jobctl("resume", "fragile")
    job = jobctl.json("show", "fragile")
    assert (job["state"], job["paused_reason"]) == ("active", None)


def test_a_success_between_failures_starts_the_count_again(jobctl, start_daemon):
    start_daemon()
    jobctl(
        "add", "flaky", "--manual", "--retries", "0", "--pause-after-failures", "2",
        "--", 'test -e "$MARK"',
    )  # fmt: skip
    for env in ("MARK=/nonexistent", "MARK=/", "MARK=/nonexistent"):
        run_id = jobctl.json("run", "flaky", "--env", env)["id"]
        wait_until(
            lambda r=run_id: jobctl.json("inspect", str(r))["state"] in ("dead", "succeeded"), 15
        )
    assert jobctl.json("show", "flaky")["state"] == "active"


def test_after_fires_once_per_upstream_window_through_a_retry(jobctl, start_daemon, tmp_path):
    start_daemon()
    mark = tmp_path / "second-try"
    # the first attempt fails and makes the mark; the retry succeeds
    jobctl(
        "add", "up", "--manual", "--retries", "2", "--backoff", "1s",
        "--", f"test -e {mark} || {{ touch {mark}; exit 1; }}",
    )  # fmt: skip
    jobctl("add", "down", "--after", "up", "--", 'echo "from $JOBCTL_UPSTREAM_RUN_ID"')
    assert "follows up" in jobctl("next", "down").stdout
    up = jobctl.json("run", "up")
    wait_until(lambda: jobctl.json("inspect", str(up["id"]))["state"] == "succeeded", 20)
    wait_until(lambda: [r["state"] for r in _runs(jobctl, "down")] == ["succeeded"], 15)
    [down] = _runs(jobctl, "down")
    assert down["reason"] == "after" and down["scheduled_for"] == up["scheduled_for"]
    assert down["env"] == {"JOBCTL_UPSTREAM_RUN_ID": str(up["id"])}
    assert jobctl("logs", str(down["id"])).stdout.strip() == f"from {up['id']}"
    assert len(jobctl.json("inspect", str(up["id"]))["attempts"]) == 2
    # the failed first attempt fired nothing, and nothing more comes
    jobctl("add", "marker", "--manual", "--", "true")
    m = jobctl.json("run", "marker")["id"]
    wait_until(lambda: jobctl.json("inspect", str(m))["state"] == "succeeded", 10)
    assert len(_runs(jobctl, "down")) == 1


def test_a_chain_of_three_and_the_states_it_follows(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "a", "--manual", "--retries", "0", "--", 'exit "$CODE"')
    jobctl("add", "b", "--after", "a:dead", "--", "true")
    jobctl("add", "c", "--after", "b", "--", "true")
    jobctl("add", "ok-only", "--after", "a", "--", "true")
    run = jobctl.json("run", "a", "--env", "CODE=3")
    wait_until(lambda: [r["state"] for r in _runs(jobctl, "c")] == ["succeeded"], 20)
    assert [r["scheduled_for"] for r in _runs(jobctl, "b")] == [run["scheduled_for"]]
    assert [r["scheduled_for"] for r in _runs(jobctl, "c")] == [run["scheduled_for"]]
    assert _runs(jobctl, "ok-only") == []
    # a cycle is refused, nothing changes
    with pytest.raises(UsageError, match="cycle"):
        jobctl("edit", "a", "--after", "c")
    assert jobctl.json("show", "a")["trigger"]["kind"] == "manual"
    trigger = jobctl.json("show", "c")["trigger"]
    assert (trigger["kind"], trigger["expr"]) == ("after", "b")


def test_an_upstream_run_that_ended_while_no_daemon_ran_fires_at_start(jobctl, start_daemon):
    jobctl("add", "up", "--manual", "--", "true")
    jobctl("add", "cleanup", "--after", "up:cancelled", "--", "true")
    up = jobctl.json("run", "up")
    jobctl("cancel", str(up["id"]))
    assert jobctl.json("inspect", str(up["id"]))["state"] == "cancelled"
    assert _runs(jobctl, "cleanup") == []
    start_daemon()
    wait_until(lambda: [r["state"] for r in _runs(jobctl, "cleanup")] == ["succeeded"], 15)
    [run] = _runs(jobctl, "cleanup")
    assert run["scheduled_for"] == up["scheduled_for"] and run["reason"] == "after"
