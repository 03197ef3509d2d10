"""Many hosts: where runs go (``daemon --tag``, ``--on``) and one pause for everything
(``pause --all``): the commands, the pure rules and the API. The claim's side, with real
daemons, is in tests/test_many_hosts_daemons.py."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import Jobctl
from test_web_api import cli_error, server  # noqa: F401  (the serve fixture)
from webhelpers import Server

from jobctl.checks import CheckFacts, CheckState, judge
from jobctl.models import RunState, SkipReason
from jobctl.planner import plan_due, waiting_reason
from jobctl.waits import DaemonLoad, WaitFacts, WaitReason


def test_on_tags_are_sorted_shown_exported_and_cleared(jobctl: Jobctl, tmp_path: Path) -> None:
    jobctl("add", "gpu-job", "--every", "1h", "--on", "gpu", "--on", "host:db1", "--", "true")
    assert jobctl.json("show", "gpu-job")["on"] == ["gpu", "host:db1"]
    assert "on           gpu, host:db1" in jobctl("show", "gpu-job").stdout
    exported = jobctl("export").stdout
    assert 'on = [\n    "gpu",\n    "host:db1",\n]' in exported
    # onto an empty database, the tags come with the job
    other = tmp_path / "other.toml"
    other.write_text(exported)
    empty = Jobctl(tmp_path / "empty.db")
    empty("apply", str(other))
    assert empty.json("show", "gpu-job")["on"] == ["gpu", "host:db1"]
    empty.close()
    jobctl("edit", "gpu-job", "--on", "arm")
    assert jobctl.json("show", "gpu-job")["on"] == ["arm"]
    jobctl("edit", "gpu-job", "--anywhere")
    assert jobctl.json("show", "gpu-job")["on"] == []
    assert "on = " not in jobctl("export").stdout
    assert jobctl.json("show", "gpu-job")["trigger"]["kind"] == "interval"


def test_bad_tags_are_usage_errors(jobctl: Jobctl) -> None:
    assert "invalid --on" in cli_error(jobctl, "add", "j", "--every", "1h", "--on", ":x", "--", "t")
    assert "invalid --on" in cli_error(
        jobctl, "add", "j", "--every", "1h", "--on", "a b", "--", "t"
    )
    assert "not both" in cli_error(
        jobctl, "add", "j", "--every", "1h", "--on", "a", "--anywhere", "--", "t"
    )
    assert "not both" in cli_error(jobctl, "pause", "j", "--all")
    assert "--reason goes with --all" in cli_error(jobctl, "pause", "j", "--reason", "x")
    assert "not in the future" in cli_error(jobctl, "pause", "--all", "--until", "2001-01-01")
    assert jobctl.json("list") == []


def test_pause_all_and_resume_all_in_status(jobctl: Jobctl) -> None:
    assert jobctl.json("status")["maintenance"] is None
    out = jobctl("pause", "--all", "--until", "2099-01-01T00:00:00Z", "--reason", "patch night")
    assert "maintenance since" in out.stdout and "patch night" in out.stdout
    held = jobctl.json("status")["maintenance"]
    assert held["until"] == "2099-01-01T00:00:00Z" and held["reason"] == "patch night"
    assert held["who"] and held["since"]
    assert "maintenance since" in jobctl("status").stdout
    # a second pause --all moves the end of the one in force
    jobctl("pause", "--all", "--reason", "longer")
    again = jobctl.json("status")["maintenance"]
    assert again["since"] == held["since"] and again["until"] is None
    assert again["reason"] == "longer"
    assert "maintenance ended" in jobctl("resume", "--all").stdout
    assert jobctl.json("status")["maintenance"] is None
    assert "no maintenance window" in jobctl("resume", "--all").stdout


def test_maintenance_over_the_api(server: Server) -> None:  # noqa: F811  (the fixture)
    r = server.request("POST", "/v1/maintenance", {"until": "2099-01-01T00:00:00Z", "reason": "r"})
    assert r.status == 200, r.text
    assert r.json()["until"] == "2099-01-01T00:00:00Z" and r.json()["reason"] == "r"
    assert server.request("GET", "/v1/status").json()["maintenance"]["reason"] == "r"
    bad = server.request("POST", "/v1/maintenance", {"until": "2001-01-01T00:00:00Z"})
    assert bad.status == 422, bad.text
    assert server.request("POST", "/v1/maintenance", {"bogus": 1}).status == 422
    assert server.request("DELETE", "/v1/maintenance").status == 204
    assert server.request("GET", "/v1/status").json()["maintenance"] is None
    assert server.request("DELETE", "/v1/maintenance").status == 204


# ---------------------------------------------------------------------- the pure rules

T0 = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)


def _facts(**kw: object) -> WaitFacts:
    base: dict[str, object] = dict(
        run_id=1,
        job_name="j",
        state=RunState.PENDING,
        not_before=T0,
        due=True,
        paused=False,
        lock=None,
        overlap_run_id=None,
        claimable=True,
        live_daemons=1,
        leased_runs=4,
        daemons=(DaemonLoad(4, 0, None, 4, 0, ("host:a",)),),
    )
    base.update(kw)
    return WaitFacts(**base)  # type: ignore[arg-type]


def test_waiting_for_tags_and_for_maintenance() -> None:
    w = waiting_reason(_facts(on_tags=("gpu",)))
    assert w is not None and w.reason is WaitReason.TAGS and "gpu" in w.detail
    # the one daemon that carries the tag is busy: workers, not tags
    gpu = DaemonLoad(4, 0, None, 4, 0, ("gpu", "host:b"))
    idle = DaemonLoad(4, 0, None, 0, 0, ("host:a",))
    w = waiting_reason(_facts(on_tags=("gpu",), live_daemons=2, daemons=(idle, gpu)))
    assert w is not None and w.reason is WaitReason.WORKERS
    w = waiting_reason(_facts(maintenance=True, maintenance_until=T0))
    assert w is not None and w.reason is WaitReason.MAINTENANCE and w.until == T0
    w = waiting_reason(_facts(maintenance=True, live_daemons=0))
    assert w is not None and w.detail == "maintenance until resume --all"


def test_check_names_a_maintenance_window_without_judging_it() -> None:
    base = {"daemons": 1, "leader": "h", "late": 0, "dead": 0, "failed_notifications": 0}
    r = judge(
        CheckFacts(**base, maintenance_until="2027-03-01T13:00:00Z"),  # type: ignore[arg-type]
        late_text="5m",
        since_text="24h",
    )
    assert r.state is CheckState.OK
    assert r.line().startswith("JOBCTL OK - 1 daemon(s), leader on h; maintenance until 2027")
    r = judge(
        CheckFacts(**{**base, "dead": 1}, maintenance_until="resume --all"),  # type: ignore[arg-type]
        late_text="5m",
        since_text="24h",
    )
    assert r.state is CheckState.WARNING and "maintenance until resume --all" in r.line()


def test_windows_in_maintenance_are_skipped_and_not_caught_up(jobctl: Jobctl) -> None:
    jobctl("add", "m", "--cron", "*/10 * * * *", "--tz", "UTC", "--catchup", "all", "--", "t")
    job = jobctl.store().get_job("m")
    from dataclasses import replace

    job = replace(job, next_run_at=T0)
    now = T0 + timedelta(minutes=35)
    # 12:00 .. 12:30 missed; maintenance from 12:05 to 12:25 holds 12:10 and 12:20
    plan = plan_due(
        job,
        now,
        missed=True,
        rng=random.Random(0),
        maintenance=[(T0 + timedelta(minutes=5), T0 + timedelta(minutes=25))],
    )
    assert plan is not None
    by = {w.scheduled_for.minute: w for w in plan.windows}
    assert by[10].skip_reason is SkipReason.MAINTENANCE and by[20].state is RunState.SKIPPED
    assert by[0].state is RunState.PENDING and by[30].state is RunState.PENDING
    assert plan.missed_increment == 0
    # still in force: the window now is held too, whatever the policy
    plan = plan_due(
        replace(job, next_run_at=T0 + timedelta(minutes=30)),
        T0 + timedelta(minutes=30),
        missed=False,
        rng=random.Random(0),
        maintenance=[(T0, None)],
    )
    assert plan is not None
    assert [(w.state, w.skip_reason) for w in plan.windows] == [
        (RunState.SKIPPED, SkipReason.MAINTENANCE)
    ]
