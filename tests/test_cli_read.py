"""The reading commands through the real error boundary, ``jobctl.cli.main(argv)`` (jobctl(1), COMMANDS):
`list`, `show`, `runs`, `logs`, `status` and `next` (DST included), human and JSON.

Every test uses a real SQLite file in ``tmp_path`` (the ``jobctl`` fixture, from clihelpers.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from clihelpers import (
    ATTEMPT_FIELDS,
    DAEMON_FIELDS,
    Jobctl,
    assert_one_error_line,
    check_job_json,
    check_run_json,
    cli_jobctl,
    make_dead,
    now,
    parse_z,
)
from conftest import StoreView

from jobctl.models import RunState


@pytest.fixture
def jobctl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Jobctl:
    return cli_jobctl(tmp_path, capsys, monkeypatch)


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
        ["--cron", "* * * * *", "--every", "5m", "--every", "0"],
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
