"""Forcing and managing runs through the real error boundary, ``jobctl.cli.main(argv)``
(jobctl(1), COMMANDS and EXIT STATUS): `run`, `cancel`, `pause`/`resume`, `rm`, `retry-dead`, `prune`.

Every test uses a real SQLite file in ``tmp_path`` (the ``jobctl`` fixture, from clihelpers.py).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from clihelpers import (
    Jobctl,
    assert_one_error_line,
    check_run_json,
    cli_jobctl,
    lease,
    make_dead,
    now,
    parse_z,
)
from conftest import StoreView


@pytest.fixture
def jobctl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Jobctl:
    return cli_jobctl(tmp_path, capsys, monkeypatch)


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
