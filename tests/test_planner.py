"""Pure scheduling logic with time passed in: catch-up policies, backoff, the heap."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from jobctl.clock import FakeClock, to_us
from jobctl.models import (
    Catchup,
    Job,
    JobSpec,
    JobState,
    RunReason,
    RunState,
    SkipReason,
    Trigger,
    TriggerKind,
)
from jobctl.planner import FireHeap, plan_due, retry_delay_seconds

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def every_job(seconds: float, catchup: Catchup, limit: int = 6, next_run=None) -> Job:
    trig = Trigger(TriggerKind.INTERVAL, tz="UTC", every_seconds=seconds, anchor=T0)
    spec = JobSpec(name="j", trigger=trig, command="true", catchup=catchup, catchup_limit=limit)
    return Job(
        id=1,
        spec=spec,
        state=JobState.ACTIVE,
        created_at=T0,
        next_run_at=next_run or T0 + timedelta(seconds=seconds),
        missed_total=0,
        last_boot_id=None,
    )


def cron_job(expr: str, catchup: Catchup, next_run: datetime, tz: str = "UTC") -> Job:
    spec = JobSpec(
        name="c",
        trigger=Trigger(TriggerKind.CRON, tz=tz, expr=expr),
        command="true",
        catchup=catchup,
    )
    return Job(1, spec, JobState.ACTIVE, T0, next_run, 0, None)


def states(plan):
    return [(w.state, w.reason, w.skip_reason) for w in plan.windows]


def test_nothing_due_before_next_run():
    clock = FakeClock(T0)
    assert (
        plan_due(every_job(2, Catchup.ONCE), clock.now(), missed=False, rng=random.Random(1))
        is None
    )


def test_on_time_window_runs_and_moves_on():
    clock = FakeClock(T0)
    clock.advance(2)
    plan = plan_due(every_job(2, Catchup.ONCE), clock.now(), missed=False, rng=random.Random(1))
    assert states(plan) == [(RunState.PENDING, RunReason.SCHEDULE, None)]
    assert plan.next_run_at == T0 + timedelta(seconds=4)


def test_downtime_skip_records_every_window_skipped():
    now = T0 + timedelta(seconds=9)  # windows 2,4,6,8 missed
    plan = plan_due(every_job(2, Catchup.SKIP), now, missed=True, rng=random.Random(1))
    assert [w.scheduled_for for w in plan.windows] == [
        T0 + timedelta(seconds=s) for s in (2, 4, 6, 8)
    ]
    assert all(
        w.state is RunState.SKIPPED and w.skip_reason is SkipReason.MISSED for w in plan.windows
    )
    assert plan.missed_increment == 4
    assert plan.next_run_at == T0 + timedelta(seconds=10)


def test_skipped_missed_windows_keep_reason_schedule():
    now = T0 + timedelta(seconds=9)
    for catchup in (Catchup.SKIP, Catchup.ONCE, Catchup.ALL):
        plan = plan_due(every_job(2, catchup, limit=1), now, missed=True, rng=random.Random(1))
        skipped = [w for w in plan.windows if w.state is RunState.SKIPPED]
        ran = [w for w in plan.windows if w.state is RunState.PENDING]
        assert skipped and all(w.reason is RunReason.SCHEDULE for w in skipped), catchup
        assert all(w.reason is RunReason.CATCHUP for w in ran), catchup


def test_downtime_once_runs_latest_with_catchup_from_earliest():
    now = T0 + timedelta(seconds=9)
    plan = plan_due(every_job(2, Catchup.ONCE), now, missed=True, rng=random.Random(1))
    pending = [w for w in plan.windows if w.state is RunState.PENDING]
    assert len(pending) == 1
    assert pending[0].scheduled_for == T0 + timedelta(seconds=8)
    assert pending[0].catchup_from == T0 + timedelta(seconds=2)
    assert pending[0].reason is RunReason.CATCHUP
    assert plan.missed_increment == 3


def test_downtime_all_with_limit_runs_latest_n_oldest_first():
    now = T0 + timedelta(seconds=9)
    plan = plan_due(every_job(2, Catchup.ALL, limit=2), now, missed=True, rng=random.Random(1))
    pending = [w.scheduled_for for w in plan.windows if w.state is RunState.PENDING]
    assert pending == [T0 + timedelta(seconds=6), T0 + timedelta(seconds=8)]
    assert len([w for w in plan.windows if w.state is RunState.SKIPPED]) == 2


def test_long_downtime_writes_at_most_100_skipped_rows_and_counts_the_rest():
    now = T0 + timedelta(days=30)  # 30 days of a 1-second job: 2.6 million windows
    plan = plan_due(every_job(1, Catchup.SKIP), now, missed=True, rng=random.Random(1))
    assert len(plan.windows) == 100
    assert plan.missed_increment == 30 * 86400
    assert plan.windows[-1].scheduled_for == now


def test_cron_missed_over_a_week_once():
    first = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    now = first + timedelta(days=6, hours=1)
    plan = plan_due(
        cron_job("0 8 * * *", Catchup.ONCE, first), now, missed=True, rng=random.Random(1)
    )
    pending = [w for w in plan.windows if w.state is RunState.PENDING]
    assert pending[0].scheduled_for == first + timedelta(days=6)
    assert pending[0].catchup_from == first
    assert plan.missed_increment == 6
    assert plan.next_run_at == first + timedelta(days=7)


def test_jitter_delays_not_before_within_bound():
    trig = Trigger(TriggerKind.INTERVAL, tz="UTC", every_seconds=60, anchor=T0)
    spec = JobSpec(name="j", trigger=trig, command="true", jitter_seconds=30)
    job = Job(1, spec, JobState.ACTIVE, T0, T0 + timedelta(seconds=60), 0, None)
    for seed in range(20):
        plan = plan_due(job, T0 + timedelta(seconds=60), missed=False, rng=random.Random(seed))
        nb = plan.windows[0].not_before
        assert T0 + timedelta(seconds=60) <= nb < T0 + timedelta(seconds=90)


@given(st.integers(1, 20), st.floats(0.5, 600), st.integers(0, 2**32))
def test_backoff_is_exponential_capped_and_jittered(k, backoff, seed):
    d = retry_delay_seconds(k, backoff, random.Random(seed))
    base = min(backoff * 2 ** (k - 1), 3600)
    assert 0.5 * base <= d <= base


def test_heap_orders_replaces_and_drops_stale():
    h = FireHeap()
    h.load([(30, 1), (10, 2), (20, 3)])
    h.push(2, 40)  # moved later: the old entry is stale
    h.remove(3)
    assert h.peek() == 30
    assert h.pop_due(35) == [(30, 1)]
    assert h.pop_due(100) == [(40, 2)]
    assert h.peek() is None and len(h) == 0


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 50)), max_size=200))
def test_heap_pops_each_job_once_at_its_latest_time(ops):
    h = FireHeap()
    latest = {}
    for due, job in ops:
        h.push(job, due)
        latest[job] = due
    popped = h.pop_due(10**7)
    assert sorted(popped) == sorted((d, j) for j, d in latest.items())
    assert [d for d, _ in popped] == sorted(d for d, _ in popped)


def test_fake_clock_only_moves_when_told():
    c = FakeClock(T0)
    assert c.now() == T0
    c.advance(5)
    assert to_us(c.now()) - to_us(T0) == 5_000_000


def test_last_day_and_nth_weekday_jobs_fire_through_the_planner():
    """The daemon's path (planner -> triggers) takes the L and # extensions."""
    jan31 = datetime(2025, 1, 31, tzinfo=UTC)
    plan = plan_due(
        cron_job("0 0 L * *", Catchup.ONCE, jan31), jan31, missed=False, rng=random.Random(1)
    )
    assert [w.scheduled_for for w in plan.windows] == [jan31]
    assert plan.next_run_at == datetime(2025, 2, 28, tzinfo=UTC)
    second_friday = datetime(2025, 1, 10, 9, tzinfo=UTC)
    job = cron_job("0 9 * * 5#2", Catchup.ONCE, second_friday)
    plan = plan_due(job, second_friday, missed=False, rng=random.Random(1))
    assert plan.next_run_at == datetime(2025, 2, 14, 9, tzinfo=UTC)
