"""What a new user got wrong from jobctl (issue 29): each case fails without its fix.

The cases that touch the store run on the suite's backend (``JOBCTL_TEST_BACKEND``); the
daemon's keeper has its own file (test_keeper.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from clihelpers import Jobctl
from conftest import wait_until
from webhelpers import Server, token_file

from jobctl import planner
from jobctl.errors import StoreError
from jobctl.models import RunState
from jobctl.waits import DaemonLoad, WaitFacts, WaitReason

HUGE = "99999999999999999999"
#: what one exec argument may hold on Linux, its NUL included (128 KiB; README, Run policies and what a run costs)
MAX_ARG_BYTES = 128 * 1024
TRIGGER_KEYS = {"kind", "expr", "tz", "after_completion"}


@pytest.fixture
def cli(db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Jobctl:
    """The real CLI through its error boundary, on the suite's backend."""
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    return Jobctl(db, capsys)


def one_error(err: str, *words: str) -> None:
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], (word, err)


# ---------------------------------------------------------------------- 4: worker counts


@pytest.mark.parametrize(
    "args",
    [
        ["--workers", HUGE],
        ["--workers", "4097"],
        ["--workers", "0"],
        ["--workers", "4", "--reserved", HUGE, "--reserved-priority", "1"],
    ],
)
def test_a_worker_count_the_machine_cannot_run_is_invalid_input(db: Path, args: list[str]) -> None:
    # a process of its own: without the check the daemon would start and run
    try:
        r = subprocess.run(
            [sys.executable, "-m", "jobctl", "--db", str(db), "daemon", *args],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"daemon {' '.join(args)} started")
    assert r.returncode == 2, r
    one_error(r.stderr, "--")


@pytest.fixture
def server(db: Path, tmp_path: Path) -> Iterator[Server]:
    s = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path))
    try:
        yield s.wait_ready()
    finally:
        s.close()


# ---------------------------------------------------------------------- 1: a job keeps its zone


def test_edit_of_the_trigger_keeps_the_jobs_zone(cli: Jobctl) -> None:
    cli.ok("add", "tzkeep", "--cron", "0 9 * * *", "--tz", "Europe/Berlin", "--", "true")
    cli.ok("edit", "tzkeep", "--cron", "30 9 * * *")
    job = cli.json("show", "tzkeep")
    assert job["trigger"]["expr"] == "30 9 * * *"
    assert job["trigger"]["tz"] == "Europe/Berlin"
    assert "30 9 * * * (Europe/Berlin)" in cli.ok("show", "tzkeep").out
    # 09:30 in Berlin, never 09:30 UTC
    next_at = datetime.fromisoformat(job["next_run_at"].replace("Z", "+00:00"))
    assert next_at.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M") == "09:30"
    # another kind of trigger keeps it too; --tz given is what changes it
    cli.ok("edit", "tzkeep", "--every", "1h")
    assert cli.json("show", "tzkeep")["trigger"]["tz"] == "Europe/Berlin"
    cli.ok("edit", "tzkeep", "--cron", "0 9 * * *", "--tz", "Asia/Tokyo")
    assert cli.json("show", "tzkeep")["trigger"]["tz"] == "Asia/Tokyo"


def test_patch_of_the_trigger_keeps_the_jobs_zone(server: Server, cli: Jobctl) -> None:
    cli.ok("add", "tzkeep", "--cron", "0 9 * * *", "--tz", "Europe/Berlin", "--", "true")
    r = server.request(
        "PATCH", "/v1/jobs/tzkeep", {"trigger": {"kind": "cron", "expr": "0 * * * *"}}
    )
    assert r.status == 200, r.text
    assert r.json()["trigger"] == {
        "kind": "cron",
        "expr": "0 * * * *",
        "tz": "Europe/Berlin",
        "after_completion": False,
    } | {k: v for k, v in r.json()["trigger"].items() if k not in TRIGGER_KEYS}
    r = server.request(
        "PATCH",
        "/v1/jobs/tzkeep",
        {"trigger": {"kind": "cron", "expr": "0 * * * *", "tz": "Asia/Tokyo"}},
    )
    assert r.status == 200 and r.json()["trigger"]["tz"] == "Asia/Tokyo", r.text


# ---------------------------------------------------------------------- 6: a command too long


@pytest.mark.parametrize(
    "args",
    [
        ["add", "big", "--manual", "--", "echo " + "x" * MAX_ARG_BYTES],
        ["add", "big", "--manual", "--", "echo", "x" * (MAX_ARG_BYTES // 2), "y" * 70000],
        ["edit", "small", "--command", "echo " + "é" * (MAX_ARG_BYTES // 2)],
        ["add", "big", "--manual", "--on-failure", "x" * MAX_ARG_BYTES, "--", "true"],
    ],
    ids=["add", "add-joined", "edit-utf8", "on-failure"],
)
def test_a_command_too_long_to_start_is_invalid_input(cli: Jobctl, args: list[str]) -> None:
    cli.ok("add", "small", "--manual", "--", "true")
    r = cli(*args)
    assert r.code == 2, r.err
    one_error(r.err, "bytes")
    assert [j["name"] for j in cli.json("list")] == ["small"]
    assert cli.json("show", "small")["command"] == "true"


def test_the_longest_command_the_system_starts_is_accepted_and_runs(
    cli: Jobctl, start_daemon: Any
) -> None:
    # MAX_ARG_BYTES - 1 bytes is the most one exec argument holds: it must start
    command = "exit 0 #" + "x" * (MAX_ARG_BYTES - 1 - len("exit 0 #"))
    cli.ok("add", "edge", "--manual", "--retries", "0", "--", command)
    start_daemon()
    run = cli.json("run", "edge", "--wait")
    assert run["state"] == "succeeded", run


def test_the_api_refuses_a_command_too_long_to_start(server: Server, cli: Jobctl) -> None:
    body = {"name": "big", "trigger": {"kind": "manual"}, "command": "x" * MAX_ARG_BYTES}
    r = server.request("POST", "/v1/jobs", body)
    assert r.status == 422 and "bytes" in r.json()["error"], r.text
    cli.ok("add", "small", "--manual", "--", "true")
    r = server.request("PATCH", "/v1/jobs/small", {"command": "x" * MAX_ARG_BYTES})
    assert r.status == 422 and "bytes" in r.json()["error"], r.text
    assert cli.json("show", "small")["command"] == "true"


# ---------------------------------------------------------------------- 9: words


@pytest.mark.parametrize(
    ("flag", "what"),
    [("--cron", "cron expression"), ("--every", "interval"), ("--at", "time"), ("--in", "delay")],
)
def test_an_empty_trigger_value_says_it_is_empty(cli: Jobctl, flag: str, what: str) -> None:
    r = cli("add", "j", flag, "", "--", "true")
    assert r.code == 2
    one_error(r.err, f"the {what} is empty")


# ---------------------------------------------------------------------- 3: the end time


FAULT_SQLITE = [
    "CREATE TABLE fault (down INTEGER)",
    "INSERT INTO fault VALUES (1)",
    "CREATE TRIGGER fault_finish BEFORE UPDATE OF finished_at ON attempts "
    "WHEN NEW.finished_at IS NOT NULL AND (SELECT down FROM fault) = 1 "
    "BEGIN SELECT RAISE(ABORT, 'the disk is on fire'); END",
]
FAULT_POSTGRESQL = [
    "CREATE TABLE fault (down INTEGER)",
    "INSERT INTO fault VALUES (1)",
    "CREATE FUNCTION fault_finish() RETURNS trigger AS $$ BEGIN "
    "IF NEW.finished_at IS NOT NULL AND (SELECT down FROM fault) = 1 THEN "
    "RAISE EXCEPTION 'the disk is on fire'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
    "CREATE TRIGGER fault_finish BEFORE UPDATE ON attempts FOR EACH ROW "
    "EXECUTE FUNCTION fault_finish()",
]


def test_an_attempt_ends_when_its_process_exits_not_when_the_end_is_written(
    cli: Jobctl, start_daemon: Any
) -> None:
    """Every write of an attempt's end fails for a while (a real error from the database:
    a trigger that raises while ``fault.down`` is 1, the daemon's writes as a server that
    is down makes them fail); the end recorded once the write succeeds is still the
    time the process exited."""
    cli.ok("add", "short", "--manual", "--retries", "0", "--", "sleep 1")
    with cli.store() as store, store.write() as c:
        sqlite = store.handle.backend == "sqlite"
        for statement in FAULT_SQLITE if sqlite else FAULT_POSTGRESQL:
            c.execute(statement)
    d = start_daemon()
    run_id = cli.json("run", "short")["id"]
    d.wait_log("the disk is on fire", timeout=10)  # it ended; its end cannot be written
    time.sleep(3)  # the database stays unwritable
    with cli.store() as store, store.write() as c:
        c.execute("UPDATE fault SET down = 0")
    mended = datetime.now(UTC)
    wait_until(lambda: cli.json("inspect", str(run_id))["state"] == "succeeded", 10)
    data = cli.json("inspect", str(run_id))
    [attempt] = data["attempts"]
    assert 0.9 <= attempt["duration"] < 2.5, attempt  # about the second it slept
    finished = datetime.fromisoformat(attempt["finished_at"].replace("Z", "+00:00"))
    assert finished < mended - timedelta(seconds=2), (finished, mended)
    assert data["finished_at"] == attempt["finished_at"]


# ---------------------------------------------------------------------- 10: the daemon's log


LOG_JOBS = [
    ("ok", "true"),
    ("flaky", '[ "$JOBCTL_ATTEMPT" = 1 ] && exit 3; true'),
    ("broken", "exit 7"),
]


def _log_runs(cli: Jobctl, start_daemon: Any, *args: str, env: dict[str, str] | None = None):
    for name, command in LOG_JOBS:
        cli.ok("add", name, "--manual", "--retries", "1", "--backoff", "1s", "--", command)
    d = start_daemon(*args, env=env, ready=False)  # "started" is not a warning
    wait_until(lambda: cli.json("status")["daemons"], 10, what="the daemon registered")
    runs = [cli.json("run", name)["id"] for name, _ in LOG_JOBS for _ in range(2)]
    final = {"succeeded", "dead"}
    wait_until(lambda: all(cli.json("inspect", str(r))["state"] in final for r in runs), 20)
    assert d.terminate() == 0
    return d.log().splitlines()


def test_the_default_log_has_no_line_for_a_run_that_succeeded(cli, start_daemon):
    lines = _log_runs(cli, start_daemon)
    text = "\n".join(lines)
    assert not [line for line in lines if "of ok:" in line], text  # 2 runs, no line
    assert "attempt 1 started" not in text and "succeeded" not in text
    # a failed attempt and a dead run say so, with their level
    assert sum("of flaky: attempt 1 failed (exit 3); retry in" in line for line in lines) == 2
    assert all("warning: run " in line for line in lines if "of flaky:" in line), text
    dead = [line for line in lines if "of broken: attempt 2 failed (exit 7); dead" in line]
    assert len(dead) == 2 and all("error: run " in line for line in dead), text
    # start, lease and stop are info: no level word
    assert any(" took the scheduler lease" in line for line in lines), text
    assert "stopped" in lines[-1] and "warning" not in lines[-1]
    assert len(lines) <= 12, text


def test_debug_logs_every_attempt_and_warning_only_faults(cli, start_daemon, tmp_path):
    lines = _log_runs(cli, start_daemon, "--log-level", "debug")
    assert sum("of ok: attempt 1 started" in line for line in lines) == 2
    assert (
        sum("debug: run " in line and "of ok: attempt 1 succeeded" in line for line in lines) == 2
    )


def test_warning_level_keeps_only_faults(cli, start_daemon):
    lines = _log_runs(cli, start_daemon, "--log-level", "warning")
    assert lines and all(" warning: " in line or " error: " in line for line in lines), lines
    assert len(lines) == 6  # four retries, two dead runs


def test_under_systemd_each_line_starts_with_its_syslog_priority(cli, start_daemon):
    lines = _log_runs(cli, start_daemon, "--log-level", "debug", env={"JOURNAL_STREAM": "8:1"})
    assert all(re.match(r"<[3467]>\S", line) for line in lines), lines
    by_priority = {
        "<7>": "of ok: attempt 1 succeeded",
        "<6>": "took the scheduler lease",
        "<4>": "of flaky: attempt 1 failed",
        "<3>": "of broken: attempt 2 failed (exit 7); dead",
    }
    for prefix, text in by_priority.items():
        assert any(line.startswith(prefix) and text in line for line in lines), (prefix, lines)
    assert not any(re.match(r"<\d>\d{4}-", line) for line in lines)  # no timestamp


def test_a_log_level_outside_the_three_is_invalid_input(cli):
    r = cli("daemon", "--log-level", "chatty")
    assert r.code == 2
    one_error(r.err, "--log-level")


def test_a_name_taken_says_how_to_replace_it_in_the_callers_own_terms(cli: Jobctl) -> None:
    cli.ok("add", "dup", "--manual", "--", "true")
    r = cli("add", "dup", "--manual", "--", "true")
    assert (r.code, r.err) == (1, "Error: a job named 'dup' already exists (use --replace)\n")
    # the API's 409 names the API's way (test_web_api.py: test_conflicts_are_409)


def test_show_prints_long_durations_as_durations(cli: Jobctl) -> None:
    cli.ok(
        "add", "slow", "--manual", "--timeout", "5200w", "--backoff", "2w3d", "--jitter", "1h1s",
        "--", "true",
    )  # fmt: skip
    out = cli.ok("show", "slow").out
    assert re.search(r"^timeout +5200w$", out, re.M), out
    assert re.search(r"^retries +2, backoff 2w3d$", out, re.M), out
    assert re.search(r"^jitter +1h1s$", out, re.M), out
    assert "e+" not in out


def test_an_unreachable_server_is_said_once_with_when_it_is_tried_again(cli: Jobctl) -> None:
    with cli.store() as store:
        if store.handle.backend != "postgresql":
            pytest.skip("the connection back-off is PostgreSQL's")
        db = store.handle.db
        db.conn.close()  # as a server that went away leaves it
        db._retry_at = time.monotonic() + 5
        with pytest.raises(StoreError) as e:
            store.get_job("none")
    assert "retrying" not in str(e.value) and "next connection in" in str(e.value), e.value


# ---------------------------------------------------------------------- 7: a cancelled job


def test_edit_of_a_cancelled_job_says_it_is_stopped_and_changes_nothing(cli: Jobctl) -> None:
    cli.ok("add", "gone", "--cron", "0 9 * * *", "--retries", "2", "--", "true")
    cli.ok("cancel", "gone")
    before = cli.json("show", "gone")
    r = cli("edit", "gone", "--retries", "5")
    assert r.code == 1
    one_error(r.err, "cancelled", "stopped for good")
    after = cli.json("show", "gone")
    assert after["retries"] == 2 and after["state"] == "cancelled"
    assert after == before


def test_patch_of_a_cancelled_job_is_409(server: Server, cli: Jobctl) -> None:
    cli.ok("add", "gone", "--manual", "--", "true")
    cli.ok("cancel", "gone")
    r = server.request("PATCH", "/v1/jobs/gone", {"retries": 5})
    assert r.status == 409 and "cancelled" in r.json()["error"], r.text
    assert cli.json("show", "gone")["retries"] == 2


# ---------------------------------------------------------------------- 8: db copy --history


def test_db_copy_with_history_is_refused_while_a_daemon_holds_the_source(
    cli: Jobctl, start_daemon: Any, tmp_path: Path
) -> None:
    cli.ok("add", "long", "--manual", "--", "sleep 30")
    d = start_daemon()
    run_id = cli.json("run", "long")["id"]
    wait_until(lambda: cli.json("inspect", str(run_id))["state"] == "leased", 10)
    target = tmp_path / "copy.db"
    r = cli("db", "copy", "--to", str(target), "--history")
    assert r.code == 1
    one_error(r.err, "daemon", f"pid {d.pid}", "--force")
    assert not target.exists()  # nothing written, not even an empty file
    # jobs alone are no snapshot of running work: they copy
    cli.ok("db", "copy", "--to", str(tmp_path / "jobs.db"))
    # --force copies what there is, leased run included
    out = cli.ok("db", "copy", "--to", str(target), "--history", "--force").out
    assert "1 jobs and 1 runs" in out
    copied = Jobctl(target, cli.capsys).json("inspect", str(run_id))
    assert copied["state"] == "leased"
    # once the daemon is gone, a copy with history needs no --force
    assert d.terminate() == 0
    cli.ok("db", "copy", "--to", str(tmp_path / "after.db"), "--history")


# ---------------------------------------------------------------------- 5: the reserved quota


def test_inspect_names_the_reserved_quota_when_it_is_what_blocks(
    cli: Jobctl, start_daemon: Any
) -> None:
    cli.ok("add", "background", "--manual", "--", "sleep 30")
    start_daemon("--workers", "2", "--reserved", "1", "--reserved-priority", "10")
    first = cli.json("run", "background")["id"]
    wait_until(lambda: cli.json("inspect", str(first))["state"] == "leased", 10)
    second = cli.json("run", "background")["id"]
    waiting = wait_until(lambda: cli.json("inspect", str(second)).get("waiting"), 5)
    assert waiting["reason"] == "workers", waiting
    detail = waiting["detail"]
    assert "every worker is busy" not in detail, detail
    assert "1 reserved worker is only for priority >= 10" in detail, detail
    assert "reserved worker is only for priority >= 10" in cli.ok("inspect", str(second)).out
    # an urgent run takes the reserved worker: then every worker is busy, and says so
    urgent = cli.json("run", "background", "--priority", "10")["id"]
    wait_until(lambda: cli.json("inspect", str(urgent))["state"] == "leased", 10)
    waiting = cli.json("inspect", str(second))["waiting"]
    assert (
        waiting["reason"] == "workers"
        and "every worker is busy (2 runs running)" in (waiting["detail"])
    ), waiting


def _facts(priority: int, *loads: DaemonLoad) -> WaitFacts:
    return WaitFacts(
        run_id=1,
        job_name="j",
        state=RunState.PENDING,
        not_before=None,
        due=True,
        paused=False,
        lock=None,
        overlap_run_id=None,
        claimable=True,
        live_daemons=len(loads),
        leased_runs=sum(d.leased for d in loads),
        priority=priority,
        daemons=loads,
    )


@pytest.mark.parametrize(
    ("priority", "loads", "words"),
    [
        # the daemon: 2 workers, 1 reserved for >= 10, one background run going
        (0, [DaemonLoad(2, 1, 10, 1, 1)], "the 1 reserved worker is only for priority >= 10"),
        (10, [DaemonLoad(2, 1, 10, 2, 1)], "every worker is busy (2 runs running)"),
        # another daemon with a free worker and no quota: not the quota's doing
        (0, [DaemonLoad(2, 1, 10, 1, 1), DaemonLoad(4, 0, None, 3, 0)], "every worker is busy"),
        (0, [DaemonLoad(3, 2, 5, 1, 1)], "the 2 reserved workers are only for priority >= 5"),
        (0, [DaemonLoad(None, 0, None, 1, 0)], "every worker is busy (1 run running)"),
    ],
)
def test_the_waiting_reason_of_a_claimable_run(priority, loads, words):
    waiting = planner.waiting_reason(_facts(priority, *loads))
    assert waiting is not None and waiting.reason is WaitReason.WORKERS
    assert words in waiting.detail, waiting.detail
