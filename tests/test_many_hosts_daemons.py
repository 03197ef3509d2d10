"""Many hosts with real daemons: runs go only where their job's ``--on`` tags are carried,
and a maintenance window (``pause --all``) starts nothing and skips its windows.

On PostgreSQL, daemons in their own UTS namespaces (tests/test_multihost.py's HostDaemon)
play the hosts; on either backend two daemons on one machine differ by ``--tag``."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from conftest import wait_until

from jobctl.models import RunState


def _runs(jobctl, name: str) -> list[dict]:
    return jobctl.json("runs", name, "--limit", "1000")


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_run_waits_for_a_daemon_with_its_tags(jobctl, start_daemon, tmp_path: Path) -> None:
    out = tmp_path / "ran"
    jobctl("add", "render", "--manual", "--on", "gpu", "--", f"echo $JOBCTL_RUN_ID >> {out}")
    plain = start_daemon()
    run = jobctl.json("run", "render")
    waiting = wait_until(
        lambda: (w := jobctl.json("inspect", str(run["id"]))["waiting"]) and w, 10, what="waiting"
    )
    assert waiting["reason"] == "tags" and "gpu" in waiting["detail"]
    # the untagged daemon never takes it, however long it waits; check does not page for it
    time.sleep(1.5)
    assert not out.exists()
    check = jobctl("check", "--late", "1s", ok=False)
    assert "JOBCTL OK" in check.stdout, check.stdout
    gpu = start_daemon("--tag", "gpu")
    wait_until(
        lambda: out.exists() and out.read_text().strip(), 15, what="the run on the gpu daemon"
    )
    wait_until(
        lambda: jobctl.store().get_run(run["id"]).state is RunState.SUCCEEDED, 10, what="its end"
    )
    daemons = {d["pid"]: d for d in jobctl.json("status")["daemons"]}
    host = socket.gethostname()
    assert daemons[gpu.pid]["tags"] == sorted(["gpu", f"host:{host}"])
    assert daemons[plain.pid]["tags"] == [f"host:{host}"]
    who = (
        jobctl.store()
        .conn.execute("SELECT daemon_id FROM attempts WHERE run_id = ?", (run["id"],))
        .fetchall()
    )
    assert [r[0] for r in who] == [daemons[gpu.pid]["id"]]


def test_host_tag_pins_a_job_to_its_host(jobctl, start_daemon, tmp_path: Path) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    host = socket.gethostname()
    jobctl("add", "local", "--manual", "--on", f"host:{host}", "--", f"touch {here}")
    jobctl("add", "remote", "--manual", "--on", "host:no-such-host", "--", f"touch {elsewhere}")
    start_daemon()
    jobctl("run", "local", "--wait")
    assert here.exists()
    run = jobctl.json("run", "remote")
    wait_until(
        lambda: (jobctl.json("inspect", str(run["id"]))["waiting"] or {}).get("reason") == "tags",
        10,
        what="remote waiting for its host",
    )
    time.sleep(1)
    assert not elsewhere.exists()


def test_maintenance_starts_nothing_skips_its_windows_and_lets_running_attempts_end(
    jobctl, start_daemon, tmp_path: Path
) -> None:
    long_done = tmp_path / "long-done"
    jobctl("add", "tick", "--every", "1s", "--catchup", "all", "--", "true")
    jobctl("add", "long", "--manual", "--", f"sleep 3; touch {long_done}")
    jobctl("add", "adhoc", "--manual", "--", "true")
    start_daemon()
    wait_until(lambda: len(_runs(jobctl, "tick")) >= 2, 15, what="the first ticks")
    long_run = jobctl.json("run", "long")
    wait_until(
        lambda: jobctl.store().get_run(long_run["id"]).state is RunState.LEASED, 10, what="long"
    )
    jobctl("pause", "--all", "--reason", "patch night")
    since = jobctl.json("status")["maintenance"]["since"]
    adhoc = jobctl.json("run", "adhoc")
    # windows that fall in it are recorded skipped (maintenance); the manual run waits
    wait_until(
        lambda: any(r["skip_reason"] == "maintenance" for r in _runs(jobctl, "tick")),
        15,
        what="a tick window skipped for maintenance",
    )
    waiting = jobctl.json("inspect", str(adhoc["id"]))["waiting"]
    assert waiting["reason"] == "maintenance"
    # the attempt that was running goes on and ends
    wait_until(long_done.exists, 15, what="the running attempt to end")
    wait_until(lambda: jobctl.store().get_run(long_run["id"]).state is RunState.SUCCEEDED, 10)
    check = jobctl("check", "--late", "1s", ok=False)
    assert check.exit_code == 0 and "maintenance until resume --all" in check.stdout
    time.sleep(2)
    started_in = [
        r
        for r in _runs(jobctl, "tick")
        if _t(r["scheduled_for"]) >= _t(since) and r["state"] != "skipped"
    ]
    assert started_in == [], started_in
    assert jobctl.store().get_run(adhoc["id"]).state is RunState.PENDING
    jobctl("resume", "--all")
    ended = jobctl.json("status")
    assert ended["maintenance"] is None
    wait_until(
        lambda: jobctl.store().get_run(adhoc["id"]).state is RunState.SUCCEEDED,
        15,
        what="the manual run after resume",
    )
    wait_until(
        lambda: any(
            r["state"] == "succeeded" and _t(r["scheduled_for"]) > _t(since)
            for r in _runs(jobctl, "tick")
        ),
        15,
        what="ticks again",
    )
    # nothing of the window ran afterwards: every window in it stayed skipped
    held = [r for r in _runs(jobctl, "tick") if _t(since) <= _t(r["scheduled_for"])]
    skipped = [r for r in held if r["skip_reason"] == "maintenance"]
    assert skipped and all(r["state"] == "skipped" for r in skipped)
    assert all(r["reason"] != "catchup" for r in held), held


def test_a_daemon_started_after_a_window_ended_skips_what_fell_in_it(jobctl, start_daemon) -> None:
    jobctl(
        "add", "tick", "--every", "1s", "--catchup", "all", "--catchup-limit", "50", "--", "true"
    )
    jobctl("pause", "--all")
    since = jobctl.json("status")["maintenance"]["since"]
    time.sleep(2.5)
    ended = datetime.now(UTC) - timedelta(milliseconds=200)
    jobctl("resume", "--all")
    start_daemon()
    wait_until(
        lambda: any(r["state"] == "succeeded" for r in _runs(jobctl, "tick")), 15, what="a tick"
    )
    inside = [r for r in _runs(jobctl, "tick") if _t(since) <= _t(r["scheduled_for"]) < ended]
    assert len(inside) >= 2, inside
    assert all(r["state"] == "skipped" and r["skip_reason"] == "maintenance" for r in inside)
