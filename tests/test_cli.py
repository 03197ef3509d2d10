"""The command line through its real error boundary, ``jobctl.cli.main(argv)`` (SPEC §2-§5, §7).

Every test uses a real SQLite file in ``tmp_path``. ``main`` always ends in ``sys.exit``;
the ``jobctl`` fixture catches it and returns (exit code, stdout, stderr).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import StoreView

from jobctl.cli import main
from jobctl.models import RunState

UTC = UTC

JOB_FIELDS = {
    "id",
    "name",
    "description",
    "trigger",
    "command",
    "stdin",
    "env",
    "cwd",
    "shell",
    "paused",
    "state",
    "catchup",
    "catchup_limit",
    "overlap",
    "timeout",
    "retries",
    "backoff",
    "priority",
    "jitter",
    "on_failure",
    "next_run_at",
    "missed_total",
    "last_run",
}
TRIGGER_FIELDS = {"kind", "expr", "tz", "after_completion"}
RUN_FIELDS = {
    "id",
    "job",
    "scheduled_for",
    "state",
    "skip_reason",
    "attempt",
    "not_before",
    "leased_by",
    "lease_until",
    "started_at",
    "finished_at",
    "exit_code",
    "last_error",
    "reason",
    "catchup_from",
    "priority",
    "run_key",
    "env",
    "locks",
}
ATTEMPT_FIELDS = {
    "run_id",
    "attempt",
    "started_at",
    "finished_at",
    "exit_code",
    "error",
    "output_bytes",
}
DAEMON_FIELDS = {"id", "pid", "host", "leader", "started_at", "heartbeat_at"}
JOB_TIME_FIELDS = ("next_run_at",)
RUN_TIME_FIELDS = (
    "scheduled_for",
    "not_before",
    "lease_until",
    "started_at",
    "finished_at",
    "catchup_from",
)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Jobctl:
    def __init__(self, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.db = db
        self.capsys = capsys

    def __call__(self, *args: str, db: bool = True) -> Result:
        argv = (["--db", str(self.db)] if db else []) + list(args)
        self.capsys.readouterr()
        code: int | str | None = 0
        try:
            main(argv)
        except SystemExit as e:
            code = e.code
        else:  # pragma: no cover - main always exits
            pytest.fail("main() returned instead of exiting")
        out, err = self.capsys.readouterr()
        return Result(0 if code is None else int(code), out, err)

    def ok(self, *args: str) -> Result:
        r = self(*args)
        assert r.code == 0, (args, r)
        assert r.err == "" or "Error" not in r.err, r.err
        return r

    def json(self, *args: str) -> Any:
        return self.ok(*args, "--json").json()

    def store(self) -> StoreView:
        return StoreView(self.db)


@pytest.fixture
def jobctl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Jobctl:
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    return Jobctl(tmp_path / "jobctl.db", capsys)


def now() -> datetime:
    return datetime.now(UTC)


def parse_z(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text[:-1] + "+00:00")


def check_job_json(job: dict[str, Any]) -> None:
    assert JOB_FIELDS <= set(job), JOB_FIELDS - set(job)
    assert TRIGGER_FIELDS <= set(job["trigger"])
    for k in JOB_TIME_FIELDS:
        assert job[k] is None or job[k].endswith("Z")
    for k in ("timeout", "backoff", "jitter"):
        assert job[k] is None or (isinstance(job[k], (int, float)) and not isinstance(job[k], bool))
    assert isinstance(job["paused"], bool)
    assert job["state"] in {"active", "paused", "cancelled", "done"}
    assert job["trigger"]["kind"] in {"cron", "interval", "once", "reboot", "manual"}
    if job["last_run"] is not None:
        check_run_json(job["last_run"])


def check_run_json(run: dict[str, Any]) -> None:
    assert RUN_FIELDS <= set(run), RUN_FIELDS - set(run)
    for k in RUN_TIME_FIELDS:
        assert run[k] is None or run[k].endswith("Z"), (k, run[k])
    assert isinstance(run["id"], int)
    assert run["skip_reason"] in (None, "missed", "overlap")
    assert run["reason"] in ("schedule", "catchup", "manual")
    assert run["state"] in {s.value for s in RunState}


def lease(db: Path, limit: int = 10) -> list[Any]:
    """Make due runs ``leased`` the way a daemon would (a claim through the store)."""
    with StoreView(db) as store:
        claimed, _dead = store.claim(
            "test-daemon", "test-host", now() + timedelta(seconds=1), 30, limit=limit
        )
    return [c.run for c in claimed]


def make_dead(db: Path, *run_ids: int) -> None:
    """Claim the runs and finish their attempt ``dead``, as a daemon does after the last try."""
    with StoreView(db) as store:
        claimed, _ = store.claim(
            "test-daemon", "test-host", now() + timedelta(seconds=1), 30, limit=50
        )
        attempts = {c.run.id: c.run.attempt for c in claimed}
        assert set(run_ids) <= set(attempts), "a run could not be claimed"
        from jobctl.models import AttemptResult, Decision

        for run_id in run_ids:
            done = store.daemon.finish_attempt(
                run_id,
                attempts[run_id],
                "test-daemon",
                now() + timedelta(seconds=1),
                AttemptResult(3, output=b"boom\n", output_bytes=5),
                Decision(RunState.DEAD, "exit 3"),
            )
            assert done.state is RunState.DEAD


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
        ["--cron", "@daily", "--every", "1h"],
        ["--rename", "-x"],
        ["--env", "=x"],
    ):
        r = jobctl("edit", "j", *args)
        assert r.code == 2, (args, r)
        assert_one_error_line(r)
    assert jobctl.json("list") == before


# ---------------------------------------------------------------------- list / show / runs / logs / status


def test_list_human_and_json(jobctl: Jobctl) -> None:
    r = jobctl.ok("list")
    assert r.out == "no jobs\n"
    assert jobctl.json("list") == []
    jobctl.ok("add", "alpha", "--cron", "0 2 * * *", "--tz", "Europe/Berlin", "--", "true")
    jobctl.ok("add", "beta", "--every", "5m", "--paused", "--", "true")
    jobctl.ok("run", "beta")
    r = jobctl.ok("list")
    lines = r.out.splitlines()
    assert lines[0].split() == ["NAME", "SCHEDULE", "NEXT", "RUN", "LAST", "RUN", "STATE"]
    assert "alpha" in r.out and "0 2 * * * (Europe/Berlin)" in r.out and "paused" in r.out
    jobs = jobctl.json("list")
    assert [j["name"] for j in jobs] == ["alpha", "beta"]
    for j in jobs:
        check_job_json(j)
    assert jobs[0]["last_run"] is None
    assert jobs[1]["last_run"]["state"] == "pending"


def test_show_human_and_json(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--description", "my job", "--", "echo hi")
    ids = [int(jobctl.ok("run", "j").out) for _ in range(3)]
    r = jobctl.ok("show", "j")
    assert "my job" in r.out and "echo hi" in r.out and "manual" in r.out
    data = jobctl.json("show", "j")
    check_job_json(data)
    assert [x["id"] for x in data["runs"]] == ids[::-1]
    for x in data["runs"]:
        check_run_json(x)
    assert data["last_run"]["id"] == ids[-1]
    assert len(jobctl.json("show", "j", "--limit", "2")["runs"]) == 2


def test_show_prints_user_text_literally(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--description", "[bold]x[/bold] \x1b[31m", "--", "true")
    r = jobctl.ok("show", "j")
    assert "[bold]x[/bold]" in r.out
    assert "\x1b[31m" not in r.out


def test_runs_human_json_filters(jobctl: Jobctl) -> None:
    assert jobctl.ok("runs").out == "no runs\n"
    jobctl.ok("add", "a", "--manual", "--", "true")
    jobctl.ok("add", "b", "--manual", "--", "true")
    ra = int(jobctl.ok("run", "a").out)
    rb = int(jobctl.ok("run", "b").out)
    jobctl.ok("cancel", str(ra))
    runs = jobctl.json("runs")
    assert [r["id"] for r in runs] == [rb, ra]
    for r in runs:
        check_run_json(r)
        assert r["reason"] == "manual" and r["attempt"] == 0
    assert [r["id"] for r in jobctl.json("runs", "a")] == [ra]
    assert [r["id"] for r in jobctl.json("runs", "--state", "cancelled")] == [ra]
    assert len(jobctl.json("runs", "--limit", "1")) == 1
    human = jobctl.ok("runs").out
    assert "cancelled" in human and "pending" in human
    r = jobctl("runs", "nope")
    assert r.code == 1
    assert_one_error_line(r)


def test_logs(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--retries", "0", "--", "false")
    run_id = int(jobctl.ok("run", "j").out)
    r = jobctl("logs", str(run_id))
    assert r.code == 1
    assert_one_error_line(r)
    make_dead(jobctl.db, run_id)
    assert jobctl.ok("logs", str(run_id)).out == "boom\n"
    data = jobctl.json("logs", str(run_id))
    assert ATTEMPT_FIELDS <= set(data)
    assert data["run_id"] == run_id and data["attempt"] == 1 and data["output_bytes"] == 5
    assert data["exit_code"] == 3 and data["error"] == "exit 3"
    assert data["started_at"].endswith("Z") and data["finished_at"].endswith("Z")
    r = jobctl("logs", str(run_id), "--attempt", "2")
    assert r.code == 1
    assert_one_error_line(r)


def test_status(jobctl: Jobctl) -> None:
    r = jobctl.ok("status")
    assert "no daemon is running" in r.out
    jobctl.ok("add", "j", "--at", "2031-01-01T00:00Z", "--", "true")
    data = jobctl.json("status")
    assert set(data) >= {"daemons", "counts", "next_due_at"}
    assert data["daemons"] == []
    assert data["next_due_at"] == "2031-01-01T00:00:00Z"
    assert all(isinstance(v, int) for v in data["counts"].values())
    assert set(data["counts"]) >= {s.value for s in RunState}
    jobctl.ok("add", "m", "--manual", "--", "true")
    jobctl.ok("run", "m")
    data = jobctl.json("status")
    assert data["counts"]["pending"] == 1
    assert parse_z(data["next_due_at"]) <= now()


def test_status_lists_live_daemons(jobctl: Jobctl) -> None:
    with StoreView(jobctl.db) as store:
        store.register_daemon("d1", 4242, "hostx", "boot", now(), 60)
        store.heartbeat(
            "d1", now(), 60, want_leader=True, held=[], host="hostx", pid=4242, boot_id="boot"
        )
    data = jobctl.json("status")
    assert len(data["daemons"]) == 1
    d = data["daemons"][0]
    assert DAEMON_FIELDS <= set(d)
    assert d["pid"] == 4242 and d["host"] == "hostx" and d["leader"] is True
    assert d["heartbeat_at"].endswith("Z")
    assert "hostx" in jobctl.ok("status").out


# ---------------------------------------------------------------------- next


def test_next_dst_spring_skip_hour(jobctl: Jobctl) -> None:
    got = jobctl.json(
        "next",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2025-03-29T12:00",
        "-n",
        "2",
    )
    assert got == ["2025-03-30T01:00:00Z", "2025-03-31T00:30:00Z"]


def test_next_dst_fall_repeated_hour_fires_once(jobctl: Jobctl) -> None:
    got = jobctl.json(
        "next",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2025-10-25T12:00",
        "-n",
        "2",
    )
    assert got == ["2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"]


def test_next_every_and_count(jobctl: Jobctl) -> None:
    got = jobctl.json("next", "--every", "90m", "--from", "2025-01-01T00:00Z", "-n", "3")
    assert got == ["2025-01-01T01:30:00Z", "2025-01-01T03:00:00Z", "2025-01-01T04:30:00Z"]


def test_next_default_count_and_human(jobctl: Jobctl) -> None:
    got = jobctl.json("next", "--cron", "0 * * * *", "--tz", "UTC", "--from", "2025-01-01T00:00Z")
    assert got == [f"2025-01-01T0{h}:00:00Z" for h in range(1, 6)]
    r = jobctl.ok(
        "next",
        "--cron",
        "0 12 * * *",
        "--tz",
        "Europe/Berlin",
        "--from",
        "2025-01-01T00:00Z",
        "-n",
        "1",
    )
    assert r.out == "2025-01-01 12:00:00 CET\n"  # people get one local style; --json ISO UTC


def test_next_strictly_after_from(jobctl: Jobctl) -> None:
    got = jobctl.json(
        "next", "--cron", "0 0 * * *", "--tz", "UTC", "--from", "2025-01-01T00:00Z", "-n", "1"
    )
    assert got == ["2025-01-02T00:00:00Z"]


def test_next_for_a_job(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--cron", "0 6 * * mon", "--tz", "America/New_York", "--", "true")
    got = jobctl.json("next", "j", "--from", "2025-03-01T00:00", "-n", "3")
    # 2025-03-09 is the US spring-forward day: EST then EDT
    assert got == ["2025-03-03T11:00:00Z", "2025-03-10T10:00:00Z", "2025-03-17T10:00:00Z"]


def test_next_manual_job_has_none(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    assert jobctl.json("next", "j") == []


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["j", "--cron", "* * * * *"],
        ["--cron", "* * * * *", "--every", "5m"],
        ["--cron", "* * * * * *"],
        ["--every", "0"],
        ["--cron", "* * * * *", "--tz", "Nope/Nope"],
        ["--cron", "* * * * *", "--from", "yesterday-ish"],
        ["--cron", "* * * * *", "-n", "0"],
    ],
)
def test_next_bad_usage(jobctl: Jobctl, args: list[str]) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    r = jobctl("next", *args)
    assert r.code == 2, r
    assert_one_error_line(r)


# ---------------------------------------------------------------------- run


def test_run_prints_id(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--cron", "@daily", "--", "true")
    out = jobctl.ok("run", "j").out
    assert out.strip().isdigit()
    run = jobctl.json("runs", "j")[0]
    assert run["id"] == int(out) and run["reason"] == "manual" and run["state"] == "pending"
    assert abs((parse_z(run["scheduled_for"]) - now()).total_seconds()) < 60


def test_run_json_key_env_lock(jobctl: Jobctl) -> None:
    jobctl.ok("add", "digest", "--manual", "--lock", "job-lock", "--", "true")
    first = jobctl.json(
        "run",
        "digest",
        "--key",
        "u1:2025-01-01",
        "--env",
        "USER_ID=u1",
        "--lock",
        "host:example.org",
        "--priority",
        "5",
    )
    check_run_json(first)
    assert first["created"] is True
    assert first["run_key"] == "u1:2025-01-01"
    assert first["env"] == {"USER_ID": "u1"}
    assert set(first["locks"]) == {"host:example.org", "job-lock"}
    assert first["priority"] == 5
    second = jobctl.json("run", "digest", "--key", "u1:2025-01-01", "--env", "USER_ID=other")
    assert second["created"] is False
    assert second["id"] == first["id"] and second["env"] == {"USER_ID": "u1"}
    assert len(jobctl.json("runs", "digest")) == 1
    third = jobctl.json("run", "digest", "--key", "u2:2025-01-01")
    assert third["created"] is True and third["id"] != first["id"]
    plain = jobctl.json("run", "digest")
    assert plain["created"] is True and plain["run_key"] is None and plain["env"] == {}


def test_run_twice_without_key_makes_two_runs(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    a = jobctl.ok("run", "j").out
    b = jobctl.ok("run", "j").out
    assert a != b
    runs = jobctl.json("runs", "j")
    assert len({r["scheduled_for"] for r in runs}) == 2


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["nope"], 1),
        (["j", "--env", "BAD"], 2),
        (["j", "--env", "1X=y"], 2),
        (["j", "--key", ""], 2),
        (["j", "--lock", ""], 2),
        (["j", "--priority", "x"], 2),
    ],
)
def test_run_bad_input(jobctl: Jobctl, args: list[str], code: int) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    r = jobctl("run", *args)
    assert r.code == code, r
    assert_one_error_line(r)
    assert jobctl.json("runs") == []


def test_run_of_cancelled_job_is_a_conflict(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    jobctl.ok("cancel", "j")
    r = jobctl("run", "j")
    assert r.code == 1
    assert_one_error_line(r)


# ---------------------------------------------------------------------- cancel


def test_cancel_run_ids(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    a = jobctl.ok("run", "j").out.strip()
    b = jobctl.ok("run", "j").out.strip()
    r = jobctl.ok("cancel", a, b)
    assert r.out == f"run {a}: cancelled\nrun {b}: cancelled\n"
    states = {str(x["id"]): x["state"] for x in jobctl.json("runs", "j")}
    assert states == {a: "cancelled", b: "cancelled"}
    assert jobctl.json("show", "j")["state"] == "active"


def test_cancel_leased_run_is_a_request(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    rid = jobctl.ok("run", "j").out.strip()
    lease(jobctl.db)
    out = jobctl.json("cancel", rid)
    assert out[0]["state"] == "leased" and out[0]["cancel_requested"] is True
    assert jobctl.ok("cancel", rid).out == f"run {rid}: cancelling\n"


def test_cancel_unknown_run_changes_nothing(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    rid = jobctl.ok("run", "j").out.strip()
    before = jobctl.json("runs")
    r = jobctl("cancel", rid, "999")
    assert r.code == 1
    assert_one_error_line(r)
    assert jobctl.json("runs") == before


def test_cancel_job_by_name(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--cron", "@daily", "--", "true")
    jobctl.ok("add", "other", "--manual", "--", "true")
    a = int(jobctl.ok("run", "j").out)
    o = int(jobctl.ok("run", "other").out)
    r = jobctl.ok("cancel", "j")
    assert r.out == "job j cancelled (1 open runs cancelled)\n"
    job = jobctl.json("show", "j")
    assert job["state"] == "cancelled" and job["next_run_at"] is None
    assert {x["id"]: x["state"] for x in jobctl.json("runs")} == {a: "cancelled", o: "pending"}
    assert [j["name"] for j in jobctl.json("list")] == ["j", "other"]
    r = jobctl("pause", "j")
    assert r.code == 1
    assert_one_error_line(r)


def test_cancel_bad_targets(jobctl: Jobctl) -> None:
    for args, code in ((["a", "b"], 2), (["nope"], 1), (["-x"], 2)):
        r = jobctl("cancel", *args)
        assert r.code == code, (args, r)
        assert_one_error_line(r)


# ---------------------------------------------------------------------- pause / resume


def test_pause_and_resume(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--every", "1h", "--start", "2020-01-01T00:00Z", "--", "true")
    assert jobctl.ok("pause", "j").out == "paused j\n"
    job = jobctl.json("show", "j")
    assert job["state"] == "paused" and job["paused"] is True and job["next_run_at"] is None
    r = jobctl.ok("resume", "j")
    assert r.out.startswith("resumed j; next run:")
    job = jobctl.json("show", "j")
    assert job["state"] == "active" and job["paused"] is False
    nxt = parse_z(job["next_run_at"])
    assert now() < nxt <= now() + timedelta(hours=1)
    assert nxt.minute == 0 and nxt.second == 0  # still on the anchor's grid
    jobctl.ok("resume", "j")  # resuming an active job is harmless
    assert jobctl.json("show", "j")["next_run_at"] == job["next_run_at"]


def test_pause_resume_unknown(jobctl: Jobctl) -> None:
    for cmd in ("pause", "resume"):
        r = jobctl(cmd, "nope")
        assert r.code == 1
        assert_one_error_line(r)


# ---------------------------------------------------------------------- rm


def test_rm(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    jobctl.ok("run", "j")
    assert jobctl.ok("rm", "j").out == "removed j\n"
    assert jobctl.json("list") == [] and jobctl.json("runs") == []


def test_rm_refused_while_leased_unless_force(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    jobctl.ok("run", "j")
    assert len(lease(jobctl.db)) == 1
    before = jobctl.json("list")
    r = jobctl("rm", "j")
    assert r.code == 1
    assert_one_error_line(r)
    assert jobctl.json("list") == before
    jobctl.ok("rm", "j", "--force")
    assert jobctl.json("list") == [] and jobctl.json("runs") == []


# ---------------------------------------------------------------------- retry-dead


def test_retry_dead_by_run_id(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--retries", "1", "--", "false")
    rid = int(jobctl.ok("run", "j").out)
    make_dead(jobctl.db, rid)
    assert jobctl.json("runs", "--state", "dead")[0]["id"] == rid
    out = jobctl.json("retry-dead", str(rid))
    assert [r["id"] for r in out] == [rid]
    run = jobctl.json("runs", "j")[0]
    assert run["state"] == "pending" and run["attempt"] == 1
    assert run["finished_at"] is None and run["leased_by"] is None
    # the next claim is attempt 2: numbered on, the old attempt's history kept
    claimed = lease(jobctl.db)
    assert [r.attempt for r in claimed] == [2]
    assert jobctl.json("logs", str(rid), "--attempt", "1")["exit_code"] == 3
    with StoreView(jobctl.db) as store:
        assert [a.attempt for a in store.get_attempts(rid)] == [1, 2]
        assert store.get_run(rid).max_attempts == 1 + 2


def test_retry_dead_by_name_and_all(jobctl: Jobctl) -> None:
    jobctl.ok("add", "a", "--manual", "--", "false")
    jobctl.ok("add", "b", "--manual", "--", "false")
    ra = int(jobctl.ok("run", "a").out)
    rb = int(jobctl.ok("run", "b").out)
    make_dead(jobctl.db, ra, rb)
    assert jobctl.ok("retry-dead", "a").out == "1 dead run back to pending\n"
    assert {r["id"] for r in jobctl.json("runs", "--state", "dead")} == {rb}
    assert [r["id"] for r in jobctl.json("retry-dead", "--all")] == [rb]
    assert jobctl.json("runs", "--state", "dead") == []


def test_retry_dead_refuses_a_live_run_and_bad_usage(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    rid = jobctl.ok("run", "j").out.strip()
    before = jobctl.json("runs")
    for args, code in (([rid], 1), (["999"], 1), ([], 2), (["--all", "j"], 2), (["nope"], 1)):
        r = jobctl("retry-dead", *args)
        assert r.code == code, (args, r)
        assert_one_error_line(r)
    assert jobctl.json("runs") == before


# ---------------------------------------------------------------------- prune


def test_prune(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    old = int(jobctl.ok("run", "j").out)
    live = int(jobctl.ok("run", "j").out)
    jobctl.ok("cancel", str(old))
    assert jobctl.ok("prune", "--older-than", "1h").out == "pruned 0 runs\n"
    with StoreView(jobctl.db) as store:
        n = store.prune(now() + timedelta(seconds=5))
    assert n == 1
    assert [r["id"] for r in jobctl.json("runs")] == [live]


def test_prune_cli_deletes_finished_runs_only(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    done = int(jobctl.ok("run", "j").out)
    jobctl.ok("run", "j")
    jobctl.ok("cancel", str(done))
    with StoreView(jobctl.db) as store:  # age the cancelled run by two days
        store.conn.execute(
            "UPDATE runs SET finished_at = finished_at - 172800000000, "
            "scheduled_for = scheduled_for - 172800000000 WHERE id = ?",
            (done,),
        )
    assert jobctl.ok("prune", "--older-than", "1d").out == "pruned 1 runs\n"
    assert [r["state"] for r in jobctl.json("runs")] == ["pending"]


def test_prune_needs_a_valid_duration(jobctl: Jobctl) -> None:
    for args in ([], ["--older-than", "soon"], ["--older-than", "0"]):
        r = jobctl("prune", *args)
        assert r.code == 2, (args, r)
        assert_one_error_line(r)


# ---------------------------------------------------------------------- completion / help / version


@pytest.mark.parametrize(
    ("shell", "marker"), [("bash", "complete"), ("zsh", "compdef"), ("fish", "complete")]
)
def test_completion(jobctl: Jobctl, shell: str, marker: str) -> None:
    r = jobctl.ok("completion", shell)
    assert marker in r.out and "_JOBCTL_COMPLETE" in r.out
    assert r.out.endswith("\n")


def test_completion_bad_shell(jobctl: Jobctl) -> None:
    r = jobctl("completion", "tcsh")
    assert r.code == 2
    assert_one_error_line(r)


def test_version_and_help(jobctl: Jobctl) -> None:
    r = jobctl("--version", db=False)
    assert r.code == 0 and r.out.startswith("jobctl ")
    r = jobctl("--help", db=False)
    assert r.code == 0
    for cmd in (
        "add",
        "edit",
        "list",
        "show",
        "next",
        "runs",
        "logs",
        "run",
        "cancel",
        "pause",
        "resume",
        "rm",
        "retry-dead",
        "prune",
        "status",
        "daemon",
        "completion",
    ):
        assert cmd in r.out


def test_every_command_has_help(jobctl: Jobctl) -> None:
    from jobctl.cli import cli

    for name, cmd in cli.commands.items():
        assert cmd.help, name
        r = jobctl(name, "--help", db=False)
        assert r.code == 0 and "Usage:" in r.out, name


# ---------------------------------------------------------------------- bad input


def assert_one_error_line(r: Result) -> None:
    lines = r.err.splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("Error: "), r.err
    assert "Traceback" not in r.err


BAD_ADD = [
    (["bad name", "--manual"], 2),
    (["-leading", "--manual"], 2),
    (["x" * 65, "--manual"], 2),
    (["ok", "--cron", "* * * * * *"], 2),
    (["ok", "--cron", "5/10 * * * *"], 2),
    (["ok", "--cron", "5-3 * * * *"], 2),
    (["ok", "--cron", "*/0 * * * *"], 2),
    (["ok", "--cron", "61 * * * *"], 2),
    (["ok", "--cron", "@fortnightly"], 2),
    (["ok", "--every", "5q"], 2),
    (["ok", "--every", "0"], 2),
    (["ok", "--every", "-5m"], 2),
    (["ok", "--in", "soon"], 2),
    (["ok", "--at", "tomorrow-ish"], 2),
    (["ok", "--cron", "@daily", "--tz", "Mars/Olympus"], 2),
    (["ok", "--manual", "--env", "NOEQUALS"], 2),
    (["ok", "--manual", "--env", "1A=x"], 2),
    (["ok", "--manual", "--env", "A-B=x"], 2),
    (["ok", "--cron", "@daily", "--every", "5m"], 2),
    (["ok", "--manual", "--at", "2031-01-01"], 2),
    (["ok"], 2),
    (["ok", "--cron", "@daily", "--after-completion"], 2),
    (["ok", "--cron", "@daily", "--start", "2031-01-01"], 2),
    (["ok", "--manual", "--catchup", "sometimes"], 2),
    (["ok", "--manual", "--overlap", "maybe"], 2),
    (["ok", "--manual", "--retries", "-1"], 2),
    (["ok", "--manual", "--retries", "two"], 2),
    (["ok", "--manual", "--catchup-limit", "0"], 2),
    (["ok", "--manual", "--timeout", "forever"], 2),
    (["ok", "--manual", "--backoff", "0"], 2),
    (["ok", "--manual", "--unknown-flag"], 2),
    (["ok", "--manual", "--cwd", "bad\udcff"], 2),
    (["ok", "--manual", "--cwd", ""], 2),
    (["ok", "--manual", "--shell", ""], 2),
    (["ok", "--at", "2020-01-01T00:00Z"], 2),
    (["ok\udcff", "--manual"], 2),
    (["ok", "--manual", "--description", "caf\udce9"], 2),
    (["dup", "--manual"], 1),
]


@pytest.mark.parametrize(("args", "code"), BAD_ADD)
def test_add_bad_input(jobctl: Jobctl, args: list[str], code: int) -> None:
    jobctl.ok("add", "dup", "--cron", "@daily", "--", "true")
    before = jobctl.json("list")
    r = jobctl("add", *args, "--", "true")
    assert r.code == code, (args, r)
    assert_one_error_line(r)
    assert r.out == ""
    assert jobctl.json("list") == before


@pytest.mark.parametrize("command", [["caf\udce9"], ["echo", "\udcff"], [""], ["   "]])
def test_add_bad_command(jobctl: Jobctl, command: list[str]) -> None:
    r = jobctl("add", "ok", "--manual", "--", *command)
    assert r.code == 2, r
    assert_one_error_line(r)
    assert jobctl.json("list") == []


def test_add_without_command(jobctl: Jobctl) -> None:
    r = jobctl("add", "ok", "--manual")
    assert r.code == 2
    assert_one_error_line(r)


@pytest.mark.parametrize(
    "args",
    [
        ["show", "nope"],
        ["edit", "nope", "--retries", "1"],
        ["rm", "nope"],
        ["pause", "nope"],
        ["resume", "nope"],
        ["run", "nope"],
        ["next", "nope"],
        ["runs", "nope"],
        ["logs", "999"],
        ["cancel", "999"],
        ["retry-dead", "999"],
        ["cancel", "nope"],
    ],
)
def test_not_found_is_exit_1(jobctl: Jobctl, args: list[str]) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    before = (jobctl.json("list"), jobctl.json("runs"))
    r = jobctl(*args)
    assert r.code == 1, r
    assert_one_error_line(r)
    assert (jobctl.json("list"), jobctl.json("runs")) == before


@pytest.mark.parametrize(
    "args",
    [
        ["logs", "abc"],
        ["logs", "1", "--attempt", "x"],
        ["runs", "--state", "bogus"],
        ["runs", "--limit", "0"],
        ["show", "j", "--limit", "0"],
        ["nosuchcommand"],
        ["list", "--bogus"],
        ["completion"],
    ],
)
def test_usage_errors_are_exit_2(jobctl: Jobctl, args: list[str]) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    before = jobctl.json("list")
    r = jobctl(*args)
    assert r.code == 2, r
    assert_one_error_line(r)
    assert jobctl.json("list") == before


def test_non_utf8_argument_anywhere(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    before = jobctl.json("list")
    for args in (
        ["show", "\udcff"],
        ["run", "j", "--key", "k\udcff"],
        ["edit", "j", "--description", "\udcff"],
        ["next", "--cron", "\udcff"],
    ):
        r = jobctl(*args)
        assert r.code == 2, (args, r)
        assert_one_error_line(r)
    assert jobctl.json("list") == before


def test_no_arguments_prints_help(jobctl: Jobctl) -> None:
    r = jobctl(db=False)
    assert "Usage:" in r.out
    assert r.code in (0, 2)


# ---------------------------------------------------------------------- the installed entry point


def _run_jobctl(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    exe = Path(sys.executable).with_name("jobctl")
    full_env = {**os.environ, "TZ": "UTC", **(env or {})}
    full_env.pop("JOBCTL_DEBUG", None)
    return subprocess.run(
        [str(exe), "--db", str(db), *args],
        capture_output=True,
        env=full_env,
        timeout=30,
        check=False,
    )


def test_entry_point_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    p = _run_jobctl(db, "add", "j", "--cron", "@hourly", "--", "echo", "a b")
    assert p.returncode == 0, p.stderr
    p = _run_jobctl(db, "list", "--json")
    assert p.returncode == 0
    jobs = json.loads(p.stdout)
    assert jobs[0]["command"] == "echo 'a b'"


def test_entry_point_errors(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    p = _run_jobctl(db, "add", "j", "--cron", "5-3 * * * *", "--", "true")
    assert p.returncode == 2
    assert p.stderr.decode().startswith("Error: ") and len(p.stderr.splitlines()) == 1
    assert _run_jobctl(db, "add", "j", "--manual", "--", "true").returncode == 0
    p = _run_jobctl(db, "show", "nope")
    assert p.returncode == 1 and p.stderr.startswith(b"Error: ")


def test_entry_point_non_utf8_bytes(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    exe = Path(sys.executable).with_name("jobctl")
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    p = subprocess.run(
        [
            os.fsencode(str(exe)),
            b"--db",
            os.fsencode(str(db)),
            b"add",
            b"j\xff",
            b"--manual",
            b"--",
            b"true",
        ],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert p.returncode == 2, p
    assert p.stderr.startswith(b"Error: ") and len(p.stderr.splitlines()) == 1
    assert b"Traceback" not in p.stderr


def test_entry_point_broken_pipe(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    exe = Path(sys.executable).with_name("jobctl")
    p = subprocess.run(
        f"{shlex.quote(str(exe))} --help | head -c 1 >/dev/null",
        shell=True,
        capture_output=True,
        timeout=30,
        check=False,
        env={**os.environ, "JOBCTL_DB": str(db)},
    )
    assert b"Traceback" not in p.stderr


def test_logs_on_a_terminal_escapes_control_sequences(capsys):
    from jobctl import output

    output.print_output(b"ok\n\x1b[31mred\x1b[0m\tx\n", tty=True)
    assert capsys.readouterr().out == "ok\n\\x1b[31mred\\x1b[0m\tx\n"
    output.print_output(b"raw\x1b[0m", tty=False)
    assert capsys.readouterr().out == "raw\x1b[0m"


def test_absurd_duration_is_bad_input_not_an_internal_error(tmp_path, capsys):
    from jobctl.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--db", str(tmp_path / "j.db"), "add", "big", "--every", "600000w", "--", "true"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: invalid duration") and "internal" not in err
