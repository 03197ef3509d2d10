"""A backfill racing the scheduler on one window never makes two rows (jobctl(1), jobctl backfill): the
scheduler's fire and a backfill of the same window, from two connections released at
the same instant, many times, on both backends. Exactly one of them records the window;
the other reports it as not created."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import StoreView

from jobctl.clock import to_us
from jobctl.models import JobSpec, RunReason, RunState, Trigger, TriggerKind
from jobctl.outcomes import Plan, Window
from jobctl.planner import plan_backfill

T0 = datetime(2026, 1, 5, tzinfo=UTC)
ROUNDS = 15


def one_round(a: StoreView, b: StoreView, job_id: int, window: datetime) -> tuple[list, list]:
    """The scheduler (``a``) fires ``window`` while a backfill (``b``) asks for it."""
    now = window + timedelta(days=1)
    start = threading.Barrier(2)
    got: dict[str, Any] = {}

    def plan(_job: object, _leased: bool, _waiting: bool, _held: object) -> Plan:
        w = Window(window, RunState.PENDING, RunReason.SCHEDULE, not_before=window)
        return Plan([w], window + timedelta(minutes=1), window)

    def fire() -> None:
        start.wait()
        got["fired"] = a.daemon.fire([(job_id, to_us(window))], now, plan)

    def backfill() -> None:
        start.wait()
        got["backfilled"] = b.commands.backfill("r", [window], now, plan_backfill)

    threads = [threading.Thread(target=fire), threading.Thread(target=backfill)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    fired = got["fired"][0].run_ids if got["fired"] else []
    return fired, got["backfilled"].created


def test_a_backfill_and_the_scheduler_on_one_window_make_one_row(db) -> None:
    spec = JobSpec("r", Trigger(TriggerKind.CRON, "UTC", "* * * * *"), "true")
    with StoreView(db) as a, StoreView(db) as b:
        job = a.commands.add_job(spec, T0, T0)
        for k in range(ROUNDS):
            window = T0 + timedelta(minutes=k)
            with a.write() as c:  # the job's next window is this one, as the scheduler has it
                c.execute("UPDATE jobs SET next_run_at = ? WHERE id = ?", (to_us(window), job.id))
            fired, created = one_round(a, b, job.id, window)
            rows = [
                r for r in a.list_runs("r", limit=100, since=window) if r.scheduled_for == window
            ]
            assert len(rows) == 1, rows
            assert len(fired) + len(created) == 1, (fired, created)
            assert (fired or created) == [rows[0].id]
