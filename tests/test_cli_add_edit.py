"""`jobctl add` and `jobctl edit` through the real error boundary, ``jobctl.cli.main(argv)``
(jobctl(1), jobctl add, jobctl edit, EXIT STATUS): triggers, policies, replace, and edits that keep or reset the schedule.

Every test uses a real SQLite file in ``tmp_path`` (the ``jobctl`` fixture, from clihelpers.py).
"""

from __future__ import annotations

import shlex
from datetime import timedelta
from pathlib import Path

import pytest
from clihelpers import (
    Jobctl,
    assert_one_error_line,
    check_job_json,
    cli_jobctl,
    now,
    parse_z,
)
from conftest import StoreView


@pytest.fixture
def jobctl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Jobctl:
    return cli_jobctl(tmp_path, capsys, monkeypatch)


# ---------------------------------------------------------------------- add


@pytest.mark.parametrize(
    ("args", "kind", "expr"),
    [
        (["--cron", "*/15 9-17 * jan-mar mon-fri"], "cron", "*/15 9-17 * jan-mar mon-fri"),
        (["--cron", "@daily"], "cron", "@daily"),
        (["--cron", "@hourly"], "cron", "@hourly"),
        (["--cron", "@yearly"], "cron", "@yearly"),
        (["--cron", "@reboot"], "reboot", "@reboot"),
        (["--every", "5m"], "interval", "5m"),
        (["--manual"], "manual", None),
    ],
)
def test_add_trigger_kinds(jobctl: Jobctl, args: list[str], kind: str, expr: str | None) -> None:
    r = jobctl.ok("add", "j", *args, "--tz", "Europe/Berlin", "--", "echo hi")
    assert r.out.startswith("added job j; next run:")
    job = jobctl.json("show", "j")
    check_job_json(job)
    assert job["trigger"]["kind"] == kind
    assert job["trigger"]["expr"] == expr
    assert job["trigger"]["tz"] == "Europe/Berlin"
    assert job["command"] == "echo hi"
    assert job["state"] == "active" and job["paused"] is False
    if kind in ("reboot", "manual"):
        assert job["next_run_at"] is None
    else:
        assert parse_z(job["next_run_at"]) > now()


def test_add_cron_next_run_is_in_its_zone(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--", "true")
    nxt = parse_z(jobctl.json("show", "j")["next_run_at"])
    assert (
        nxt.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin")).strftime("%H:%M")
        == "02:30"
    )


def test_add_every_without_start_anchors_at_add(jobctl: Jobctl) -> None:
    before = now()
    jobctl.ok("add", "j", "--every", "90m", "--", "true")
    after = now()
    job = jobctl.json("show", "j")
    assert job["trigger"]["after_completion"] is False
    nxt = parse_z(job["next_run_at"])
    assert before + timedelta(minutes=90) <= nxt <= after + timedelta(minutes=90)


def test_add_every_with_start(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--every", "1h", "--start", "2031-01-01T00:00Z", "--", "true")
    job = jobctl.json("show", "j")
    assert job["next_run_at"] == "2031-01-01T00:00:00Z"
    times = jobctl.json("next", "j", "-n", "3")
    assert times == ["2031-01-01T00:00:00Z", "2031-01-01T01:00:00Z", "2031-01-01T02:00:00Z"]


def test_add_every_after_completion(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--every", "10m", "--after-completion", "--", "true")
    job = jobctl.json("show", "j")
    assert job["trigger"]["kind"] == "interval"
    assert job["trigger"]["after_completion"] is True


def test_add_at_naive_is_read_in_tz(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--at", "2031-07-01T08:00", "--tz", "Europe/Berlin", "--", "true")
    job = jobctl.json("show", "j")
    assert job["trigger"]["kind"] == "once"
    assert job["next_run_at"] == "2031-07-01T06:00:00Z"


def test_add_in(jobctl: Jobctl) -> None:
    before = now()
    jobctl.ok("add", "j", "--in", "1h30m", "--", "true")
    job = jobctl.json("show", "j")
    assert job["trigger"]["kind"] == "once"
    nxt = parse_z(job["next_run_at"])
    assert before + timedelta(minutes=90) <= nxt <= now() + timedelta(minutes=90)


def test_add_policies(jobctl: Jobctl) -> None:
    jobctl.ok(
        "add",
        "j",
        "--manual",
        "--catchup",
        "all",
        "--catchup-limit",
        "3",
        "--overlap",
        "allow",
        "--timeout",
        "1h30m",
        "--retries",
        "5",
        "--backoff",
        "1m",
        "--priority",
        "7",
        "--jitter",
        "30s",
        "--env",
        "A=1",
        "--env",
        "B=x=y",
        "--cwd",
        "/tmp",
        "--shell",
        "/bin/bash",
        "--on-failure",
        "echo failed",
        "--stdin",
        "hello",
        "--description",
        "a note",
        "--paused",
        "--",
        "true",
    )
    job = jobctl.json("show", "j")
    check_job_json(job)
    assert job["catchup"] == "all" and job["catchup_limit"] == 3
    assert job["overlap"] == "allow"
    assert job["timeout"] == 5400
    assert job["retries"] == 5 and job["backoff"] == 60
    assert job["priority"] == 7 and job["jitter"] == 30
    assert job["env"] == {"A": "1", "B": "x=y"}
    assert job["cwd"] == "/tmp" and job["shell"] == "/bin/bash"
    assert job["on_failure"] == "echo failed" and job["stdin"] == "hello"
    assert job["description"] == "a note"
    assert job["paused"] is True and job["state"] == "paused" and job["next_run_at"] is None


def test_add_defaults(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--cron", "@daily", "--", "true")
    job = jobctl.json("show", "j")
    assert (job["catchup"], job["catchup_limit"], job["overlap"]) == ("once", 6, "forbid")
    assert (job["timeout"], job["retries"], job["backoff"]) == (None, 2, 10)
    assert (job["priority"], job["jitter"], job["on_failure"]) == (0, 0, None)
    assert job["shell"] == "/bin/sh" and job["env"] == {} and job["missed_total"] == 0


def test_add_duplicate_name_is_a_conflict(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "echo one")
    before = jobctl.json("list")
    r = jobctl("add", "j", "--cron", "@daily", "--", "echo two")
    assert r.code == 1
    assert_one_error_line(r)
    assert jobctl.json("list") == before


def test_add_replace(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "echo one")
    r = jobctl.ok("add", "j", "--cron", "@daily", "--replace", "--", "echo two")
    assert r.out.startswith("replaced job j")
    job = jobctl.json("show", "j")
    assert job["command"] == "echo two" and job["trigger"]["kind"] == "cron"
    assert len(jobctl.json("list")) == 1


def test_add_replace_creates_when_absent(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--replace", "--", "true")
    assert jobctl.json("show", "j")["name"] == "j"


def test_add_one_command_argument_is_a_shell_string(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "echo $HOME | tr a b > /dev/null")
    assert jobctl.json("show", "j")["command"] == "echo $HOME | tr a b > /dev/null"


def test_add_several_command_arguments_are_quoted_and_joined(jobctl: Jobctl) -> None:
    args = ["printf", "%s\\n", "a b", "it's", "$HOME", ";", ""]
    jobctl.ok("add", "j", "--manual", "--", *args)
    cmd = jobctl.json("show", "j")["command"]
    assert cmd == shlex.join(args)
    assert shlex.split(cmd) == args


def test_add_json(jobctl: Jobctl) -> None:
    job = jobctl.ok("add", "j", "--cron", "0 0 * * *", "--json", "--", "true").json()
    check_job_json(job)
    assert job["name"] == "j"


# ---------------------------------------------------------------------- edit


def test_edit_trigger_resets_next_run(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--at", "2031-01-01T00:00Z", "--", "true")
    assert jobctl.json("show", "j")["next_run_at"] == "2031-01-01T00:00:00Z"
    jobctl.ok("edit", "j", "--every", "1h", "--start", "2032-06-01T00:00Z")
    job = jobctl.json("show", "j")
    assert job["trigger"]["kind"] == "interval"
    assert job["next_run_at"] == "2032-06-01T00:00:00Z"
    jobctl.ok("edit", "j", "--cron", "0 3 * * *", "--tz", "UTC")
    nxt = parse_z(jobctl.json("show", "j")["next_run_at"])
    assert (nxt.hour, nxt.minute) == (3, 0) and now() < nxt <= now() + timedelta(days=1)


def test_edit_policy_keeps_schedule(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--cron", "@daily", "--", "true")
    before = jobctl.json("show", "j")
    jobctl.ok("edit", "j", "--retries", "9", "--overlap", "allow", "--description", "x")
    after = jobctl.json("show", "j")
    assert after["retries"] == 9 and after["overlap"] == "allow" and after["description"] == "x"
    assert after["next_run_at"] == before["next_run_at"]
    assert after["trigger"] == before["trigger"]


def test_edit_runs_already_created_keep_their_settings(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--retries", "1", "--priority", "3", "--", "echo old")
    run = jobctl.json("run", "j")
    jobctl.ok(
        "edit", "j", "--retries", "7", "--priority", "9", "--command", "echo new", "--env", "X=1"
    )
    after = jobctl.json("runs", "j")[0]
    assert after["id"] == run["id"]
    assert after["priority"] == 3
    with StoreView(jobctl.db) as store:
        r = store.get_run(run["id"])
    assert r.max_attempts == 2
    assert r.settings is not None and r.settings.command == "echo old"
    assert r.settings.env == {}
    new = jobctl.json("run", "j")
    assert new["priority"] == 9
    with StoreView(jobctl.db) as store:
        r2 = store.get_run(new["id"])
    assert r2.max_attempts == 8 and r2.settings is not None and r2.settings.command == "echo new"


def test_edit_nothing_is_usage_error(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    r = jobctl("edit", "j")
    assert r.code == 2
    assert_one_error_line(r)


def test_edit_rename(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    jobctl.ok("edit", "j", "--rename", "k")
    assert [j["name"] for j in jobctl.json("list")] == ["k"]


def test_edit_bad_input_changes_nothing(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--cron", "@daily", "--", "true")
    before = jobctl.json("list")
    for args in (
        ["--cron", "5-3 * * * *"],
        ["--retries", "-1"],
        ["--every", "0"],
        ["--tz", "Nowhere/Land"],
        ["--cron", "@reboot", "--every", "1h"],
        ["--rename", "-x"],
        ["--env", "=x"],
    ):
        r = jobctl("edit", "j", *args)
        assert r.code == 2, (args, r)
        assert_one_error_line(r)
    assert jobctl.json("list") == before
