"""The benchmarks' helpers: the scale database, filled through the store's API, reads back
as the jobs it was given, and the durable dispatch floor does the work it is said to do."""

from __future__ import annotations

import os
import stat
import time
from datetime import UTC, datetime

import pytest
from conftest import StoreView

from bench.jobctl_runs import DaemonProc, build_scale_db, dispatch_ms
from bench.machine import durable_loop_seconds


def test_bulk_built_jobs_read_back_through_the_store(tmp_path):
    db = tmp_path / "scale.db"
    build_scale_db(db, 25)
    with StoreView(db) as store:
        jobs = store.list_jobs()
        assert len(jobs) == 26 and {j.name for j in jobs} >= {"probe", "idle0", "idle24"}
        idle = store.get_job("idle3")
        assert idle.trigger.every_seconds == 86_400 and idle.next_run_at is not None
        assert idle.next_run_at > datetime.now(UTC)
        heads = store.daemon.schedule_heads()
        assert len(heads) == 25


def test_the_durable_dispatch_floor_claims_and_finishes_every_row():
    # it raises unless every row went pending -> leased -> succeeded with its exit code
    assert durable_loop_seconds(7, 3) > 0


def test_the_bench_daemon_log_is_read_from_its_file_with_the_time_each_line_was_seen(tmp_path):
    # the burst's harness reads the daemon's stderr only while it waits for a line: its
    # readiness line is found, timed after the start, and the tail is kept after stop()
    d = DaemonProc(tmp_path / "j.db", 1)
    try:
        # a file, not a pipe: no reader wakes at each of the daemon's writes
        assert stat.S_ISREG(os.stat(f"/proc/{d.pid}/fd/2").st_mode)
        t, m = d.wait_for(r"scheduling (\d+) jobs", 30)
        assert m.group(1) == "0" and d.t_start <= t <= time.time()
        with pytest.raises(RuntimeError, match="no line matching"):
            d.wait_for("never written", 0.05)
    finally:
        d.stop()
    assert any("stopped" in line for _, line in d.lines)


def test_the_dispatch_probe_runs_through_a_real_daemon(tmp_path):
    # the scale workload's dispatch figure: a probe run enqueued through the store (which
    # wakes the daemon itself) and started by a real daemon, timed from its row to its start
    db = tmp_path / "scale.db"
    build_scale_db(db, 5)
    d = DaemonProc(db, 1)
    try:
        d.wait_for(r"scheduling (\d+) jobs", 30)
        costs = dispatch_ms(db, 2)
    finally:
        d.stop()
    assert len(costs) == 2 and all(0 <= c < 5_000 for c in costs)
