"""The benchmarks' helpers: the bulk-built database is one the store reads as its own
(schema drift), and the durable dispatch floor does the work it is said to do."""

from __future__ import annotations

from datetime import UTC, datetime

from conftest import StoreView

from bench.jobctl_runs import build_scale_db
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
