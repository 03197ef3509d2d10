"""Issue 11's daemon-side defects, each with a real daemon: ids never reused, a dead local
daemon's lease taken at once, rm --force acting within 2 s, paused jobs holding runs."""

from __future__ import annotations

import random
import sqlite3
import time
from datetime import UTC, datetime, timedelta

from conftest import StoreView, pid_alive, wait_until

from jobctl import planner
from jobctl.models import RunState
from jobctl.outcomes import AttemptResult
from jobctl.store.sqlite import migrations, split_statements


def _state(jobctl, run_id):
    return jobctl.store().get_run(run_id).state


def test_a_deleted_runs_late_attempt_never_lands_on_a_new_run(jobctl, start_daemon, tmp_path):
    """The issue's sequence: run A, rm A --force, run B at once. B must get a new id, and
    A's exit must neither end B's run nor put A's output in B's log."""
    start_daemon("--workers", "4")
    jobctl("add", "A", "--manual", "--retries", "0", "--", "echo A-output; sleep 4; exit 7")
    jobctl("add", "B", "--manual", "--retries", "0", "--", "sleep 5; echo B-output")
    a = jobctl.json("run", "A")
    pid = wait_until(
        lambda: (att := jobctl.store().get_attempts(a["id"])) and att[0].pid, 5, what="A's pid"
    )
    t0 = time.monotonic()
    jobctl("rm", "A", "--force")
    b = jobctl.json("run", "B")
    assert b["id"] != a["id"]
    # rm --force acts like cancel: the running attempt is killed within 2 s
    wait_until(lambda: not pid_alive(pid), 3, what="A's process killed")
    assert time.monotonic() - t0 < 2.5
    wait_until(lambda: _state(jobctl, b["id"]) is RunState.SUCCEEDED, 15, what="B succeeded")
    log = jobctl("logs", str(b["id"])).stdout
    assert "B-output" in log and "A-output" not in log
    # and an id is never given again, even after the job and its runs are gone
    jobctl("add", "C", "--manual", "--", "true")
    c = jobctl.json("run", "C")
    assert c["id"] > b["id"] > a["id"]


def test_migration_keeps_data_and_ids_are_never_reused_after_it(tmp_path):
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    [(_number, v1)] = [m for m in migrations() if m[0] == 1]
    for stmt in split_statements(v1):
        conn.execute(stmt)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO jobs (id, name, trigger_kind, trigger_tz, command, schedule_from, "
        "created_at, updated_at, env) VALUES (1, 'old', 'manual', 'UTC', 'echo hi', 0, 0, 0, "
        '\'{"K": "V"}\')'
    )
    for run_id in (1, 2):  # a v1 run had no settings (NULL): the migration fills them in
        conn.execute(
            "INSERT INTO runs (id, job_id, scheduled_for, state, reason, created_at) "
            "VALUES (?, 1, ?, 'succeeded', 'manual', 0)",
            (run_id, run_id),
        )
    conn.commit()
    conn.close()
    with StoreView(path) as store:
        run = store.get_run(2)
        assert run.settings.command == "echo hi" and run.settings.env == {"K": "V"}
        now = datetime(2026, 1, 1, tzinfo=UTC)
        new, _ = store.enqueue_run("old", now)
        assert new.id == 3
        store.prune(now + timedelta(days=1))  # every finished run gone, the newest too
        store.commands.cancel_runs([new.id], now)
        assert store.prune(now + timedelta(days=1)) == 1
        again, _ = store.enqueue_run("old", now)
        assert again.id == 4  # not 3, not 1


def test_a_dead_local_daemons_lease_is_taken_at_once(jobctl, start_daemon):
    jobctl("add", "tick", "--every", "1s", "--", "true")
    first = start_daemon("--lease", "30s")
    first.wait_log("took the scheduler lease")
    first.kill()
    t0 = time.monotonic()
    second = start_daemon("--lease", "30s")
    second.wait_log("took the scheduler lease", timeout=15)
    assert time.monotonic() - t0 < 15  # not the 30 s the old lease had left
    assert "is gone: its leases are free" in second.log()
    daemons = jobctl.json("status")["daemons"]
    assert [d["pid"] for d in daemons] == [second.pid]


def test_a_paused_jobs_runs_wait_until_resume(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "digest", "--manual", "--", "true")
    jobctl("add", "other", "--manual", "--", "true")
    jobctl("pause", "digest")
    run = jobctl.json("run", "digest")
    later = jobctl.json("run", "other")  # enqueued after it: claimed only if it was passed over
    wait_until(lambda: _state(jobctl, later["id"]) is RunState.SUCCEEDED, 5, what="other run")
    assert _state(jobctl, run["id"]) is RunState.PENDING
    jobctl("resume", "digest")
    wait_until(lambda: _state(jobctl, run["id"]) is RunState.SUCCEEDED, 5, what="run after resume")


def test_retry_dead_starts_the_backoff_over(jobctl, tmp_path):
    """A fresh set of attempts waits backoff·2^(k-1) from its own first retry (k = 1),
    not from the absolute attempt number."""
    jobctl("add", "f", "--manual", "--retries", "1", "--backoff", "2s", "--", "false")
    now = datetime.now(UTC)
    with StoreView(jobctl.db) as store:
        run, _ = store.enqueue_run("f", now)
        for attempt in (1, 2):
            [c], _ = store.claim("d", "h", now + timedelta(hours=attempt), 30)
            store.finish(c.run, attempt, "d", now + timedelta(hours=attempt), exit_code=1)
        assert store.get_run(run.id).state is RunState.DEAD
        [back] = store.retry_dead(now, run_ids=[run.id])
        assert back.attempt_base == 2
        [c], _ = store.claim("d", "h", now + timedelta(hours=5), 30)
        assert c.run.attempt == 3
        result = AttemptResult(1)
        decision = planner.decide(c.run, 3, result, now, random.Random(1))
        assert decision is not None and decision.retry_at is not None
        delay = (decision.retry_at - now).total_seconds()
        assert 1.0 <= delay <= 2.0  # k = 1: [50 %, 100 %] of 2 s, not 2·2² = 8 s
