"""What a new user and outside validators found wrong in how runs are kept, told about
and measured (issue 40): each case fails without its fix, on the suite's backend
(``JOBCTL_TEST_BACKEND``), with real daemons and real receivers where it needs them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from clihelpers import Jobctl
from conftest import wait_until


@pytest.fixture
def cli(db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Jobctl:
    """The real CLI through its error boundary, on the suite's backend."""
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    return Jobctl(db, capsys)


def _state(cli: Jobctl, run_id: int) -> str:
    return str(cli.json("inspect", str(run_id))["state"])


def _z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ---------------------------------------------------------------------- 6: status's next due


def test_status_next_due_is_never_a_paused_jobs_queued_run(cli: Jobctl) -> None:
    cli.ok("add", "held", "--manual", "--", "true")
    cli.ok("pause", "held")
    cli.ok("run", "held")  # queued, due now, but it waits for the resume
    assert cli.json("status")["next_due_at"] is None
    cli.ok("add", "later", "--at", "2031-01-01T00:00Z", "--", "true")
    assert cli.json("status")["next_due_at"] == "2031-01-01T00:00:00Z"
    # resumed, its run is due again: now, not in 2031
    cli.ok("resume", "held")
    due = _z(cli.json("status")["next_due_at"])
    assert due <= datetime.now(UTC) + timedelta(seconds=1)


# ---------------------------------------------------------------------- 3: check


def _check(cli: Jobctl, *args: str) -> tuple[int, str]:
    r = cli("check", "--late", "1s", *args)
    assert r.err == "", r.err
    return r.code, r.out.strip()


def _waited(cli: Jobctl, run_id: int, seconds: float) -> bool:
    run = cli.json("inspect", str(run_id))
    assert run["state"] == "pending", run
    return datetime.now(UTC) - _z(run["not_before"]) > timedelta(seconds=seconds)


def test_check_does_not_page_for_runs_held_back_by_their_own_rules(
    cli: Jobctl, start_daemon: Any
) -> None:
    start_daemon("--workers", "4")
    cli.ok("add", "a", "--manual", "--lock", "L", "--", "sleep 30")
    cli.ok("add", "b", "--manual", "--lock", "L", "--", "true")
    cli.ok("add", "mr", "--manual", "--overlap", "allow", "--max-running", "1", "--", "sleep 30")
    cli.ok("add", "solo", "--manual", "--overlap", "forbid", "--", "sleep 30")
    holders = [cli.json("run", name)["id"] for name in ("a", "mr", "solo")]
    wait_until(
        lambda: all(cli.json("inspect", str(i))["state"] == "leased" for i in holders),
        10,
        what="three runs leased",
    )
    waiters = [cli.json("run", name)["id"] for name in ("b", "mr", "solo")]
    reasons = [cli.json("inspect", str(i))["waiting"]["reason"] for i in waiters]
    assert reasons == ["lock", "max_running", "overlap"]
    wait_until(lambda: _waited(cli, waiters[-1], 1.5), 10, what="the runs waited past --late")
    code, line = _check(cli)
    assert code == 0 and line.startswith("JOBCTL OK - 1 daemon(s)") and " late=0;" in line
    # a run a daemon could take but does not (every worker busy) is still late
    cli.ok("add", "hog", "--manual", "--", "sleep 30")
    hog = cli.json("run", "hog")["id"]
    # (on PostgreSQL a claim with one free worker once stopped at a blocked run ahead)
    wait_until(lambda: cli.json("inspect", str(hog))["state"] == "leased", 10, what="all busy")
    cli.ok("add", "free", "--manual", "--", "true")
    free = cli.json("run", "free")["id"]
    assert cli.json("inspect", str(free))["waiting"]["reason"] == "workers"
    wait_until(lambda: _waited(cli, free, 1.5), 10, what="the free run waited past --late")
    code, line = _check(cli)
    assert code == 2 and line.startswith("JOBCTL CRITICAL - 1 due run(s) unclaimed"), line
    for i in (*holders, hog):
        cli.ok("cancel", str(i))


@pytest.mark.parametrize(
    "args,words",
    [
        (["--bogus"], "--bogus"),
        (["--late", "abc"], "invalid duration 'abc'"),
        (["--since", "0"], "invalid duration '0'"),
        (["--late"], "requires an argument"),
    ],
)
def test_bad_usage_of_check_is_unknown_on_stdout_exit_3(
    cli: Jobctl, args: list[str], words: str
) -> None:
    r = cli("check", *args)
    assert (r.code, r.err) == (3, "")
    [line] = r.out.splitlines()
    assert line.startswith("JOBCTL UNKNOWN - ") and words in line
    r = cli("check", "--json", *args)
    assert r.code == 3 and r.json()["state"] == "UNKNOWN" and words in r.json()["summary"]


# ---------------------------------------------------------------------- 4: long, manual run


def test_long_is_told_for_a_manual_run_when_nothing_else_wakes_the_scheduler(
    cli: Jobctl, start_daemon: Any
) -> None:
    from receivers import http_receiver

    with http_receiver() as rec:
        cli.ok("notify", "add", "hook", "--webhook", rec.url)
        cli.ok(
            "add", "slow", "--manual", "--warn-after", "1s", "--notify", "hook:long",
            "--", "sleep 6",
        )  # fmt: skip
        # a long lease: the next heartbeat (a third of it) is long after the warning is due
        start_daemon("--lease", "60s")
        run_id = cli.json("run", "slow")["id"]
        wait_until(lambda: rec.requests, 4.5, what="the long notification")
        [body] = rec.bodies()
        assert cli.json("inspect", str(run_id))["state"] == "leased"
    assert (body["event"], body["run"]["id"], body["attempt"]["attempt"]) == ("long", run_id, 1)
    assert body["detail"]["warn_after"] == 1.0


# ---------------------------------------------------------------------- 5: the deadline skip


def test_a_deadline_skip_is_recorded_at_its_deadline(cli: Jobctl, start_daemon: Any) -> None:
    # every 5 s, one at a time (queue), 1 s to start: the second window waits behind the
    # first run and is skipped at its window + 1 s, not at the next window or heartbeat
    start_daemon("--lease", "60s")
    cli.ok(
        "add", "q", "--every", "5s", "--overlap", "queue", "--deadline", "1s", "--", "sleep 30"
    )  # fmt: skip

    def skipped() -> Any:
        got = [r for r in cli.json("runs", "q") if r["skip_reason"] == "deadline"]
        return got and got[-1]

    run = wait_until(skipped, 20, what="a window skipped for its deadline")
    late = (_z(run["finished_at"]) - _z(run["scheduled_for"])).total_seconds()
    assert 1.0 <= late < 2.0, run
    cli.ok("cancel", "q")


# ---------------------------------------------------------------------- 7: no false stray


def test_cancelling_a_plain_sleep_kills_no_stray(cli: Jobctl, start_daemon: Any) -> None:
    d = start_daemon()
    cli.ok("add", "nap", "--manual", "--", "sleep 30")
    for _ in range(6):
        run_id = cli.json("run", "nap")["id"]
        wait_until(lambda i=run_id: _state(cli, i) == "leased", 10, what="leased")
        cli.ok("cancel", str(run_id))
        wait_until(lambda i=run_id: _state(cli, i) == "cancelled", 10, what="cancelled")
    # a run after them: their sweeps (a moment after each end) are done by its end
    cli.ok("add", "mark", "--manual", "--", "true")
    mark = cli.json("run", "mark")["id"]
    wait_until(lambda: cli.json("inspect", str(mark))["state"] == "succeeded", 10, what="mark")
    assert "stray" not in d.log(), d.log()


# ---------------------------------------------------------------------- 14: in order


def test_one_jobs_notifications_to_one_channel_arrive_in_the_order_written(
    cli: Jobctl, start_daemon: Any
) -> None:
    from receivers import http_receiver

    # the dead's first try fails: the paused it caused waits for it, though due at once
    with http_receiver(statuses=[500]) as rec:
        cli.ok("notify", "add", "hook", "--webhook", rec.url)
        cli.ok(
            "add", "flaky", "--manual", "--retries", "0", "--pause-after-failures", "1",
            "--notify", "hook:dead,paused", "--", "exit 3",
        )  # fmt: skip
        start_daemon("--notify-retry", "1s")
        cli.ok("run", "flaky")
        wait_until(lambda: len(rec.requests) >= 3, 20, what="three deliveries")
        events = [b["event"] for b in rec.bodies()]
    assert events == ["dead", "dead", "paused"]
    assert cli.json("show", "flaky")["paused_reason"] == "failures"
