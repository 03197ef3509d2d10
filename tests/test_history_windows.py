"""The pure side of history (jobctl(1), jobctl backfill and jobctl coverage): the windows of a range for ``backfill`` and
``coverage``, what a backfill does to each window, and the retention age cutoff.

Time is passed in: no clock, no database.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobctl.errors import UsageError
from jobctl.models import RunState, SkipReason, Trigger, TriggerKind
from jobctl.outcomes import Coverage
from jobctl.planner import history_cutoff, plan_backfill, plan_coverage
from jobctl.triggers import iter_fires, windows_before, windows_between

HOUR = timedelta(hours=1)
US = timedelta(microseconds=1)


def z(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


def cron(expr: str, tz: str = "UTC") -> Trigger:
    return Trigger(TriggerKind.CRON, tz, expr)


def every(seconds: float, anchor: datetime) -> Trigger:
    return Trigger(TriggerKind.INTERVAL, "UTC", "x", every_seconds=seconds, anchor=anchor)


# --- windows of [from, to) ----------------------------------------------------------------


def test_a_range_is_half_open_and_oldest_first():
    got = windows_between(cron("0 * * * *"), z(2026, 3, 1, 10), z(2026, 3, 1, 13), 100)
    assert got == [z(2026, 3, 1, 10), z(2026, 3, 1, 11), z(2026, 3, 1, 12)]


def test_an_empty_range_has_no_windows_and_a_reversed_one_is_refused():
    assert windows_between(cron("0 * * * *"), z(2026, 3, 1, 10), z(2026, 3, 1, 10), 5) == []
    with pytest.raises(UsageError, match="is after --to"):
        windows_between(cron("0 * * * *"), z(2026, 3, 1, 11), z(2026, 3, 1, 10), 5)


def test_a_cron_range_reads_the_zone_and_its_daylight_saving_rules():
    # 02:30 Berlin does not exist on 2026-03-29: a fixed-time job fires once, at 03:00 CEST
    got = windows_between(cron("30 2 * * *", "Europe/Berlin"), z(2026, 3, 27), z(2026, 3, 31), 10)
    assert got == [
        z(2026, 3, 27, 1, 30),
        z(2026, 3, 28, 1, 30),
        z(2026, 3, 29, 1),
        z(2026, 3, 30, 0, 30),
    ]


def test_a_fixed_rate_starts_at_its_anchor():
    anchor = z(2026, 3, 1, 12)
    got = windows_between(every(3600, anchor), z(2026, 3, 1), z(2026, 3, 1, 15), 100)
    assert got == [z(2026, 3, 1, 12), z(2026, 3, 1, 13), z(2026, 3, 1, 14)]


def test_more_windows_than_the_cap_are_refused_with_their_count():
    with pytest.raises(UsageError, match=r"backfill: 10081 windows .* at most 10000"):
        windows_between(cron("* * * * *"), z(2026, 3, 1), z(2026, 3, 8, 0, 1), 10_000)
    with pytest.raises(UsageError, match=r"coverage: 604801 windows"):
        windows_between(
            every(1, z(2026, 3, 1)), z(2026, 3, 1), z(2026, 3, 8, 0, 0) + US, 10_000, "coverage"
        )
    assert (
        len(windows_between(cron("* * * * *"), z(2026, 3, 1), z(2026, 3, 7, 22, 40), 10_000))
        == 10_000
    )


def test_a_huge_cron_range_is_counted_up_to_a_cap():
    with pytest.raises(UsageError, match="more than 1000000 windows"):
        windows_between(cron("* * * * *"), z(2020, 1, 1), z(2026, 1, 1), 10_000)


@pytest.mark.parametrize(
    "trigger",
    [
        Trigger(TriggerKind.MANUAL, "UTC"),
        Trigger(TriggerKind.REBOOT, "UTC", "@reboot"),
        Trigger(TriggerKind.ONCE, "UTC", at=z(2026, 1, 1)),
        Trigger(TriggerKind.INTERVAL, "UTC", "1h", every_seconds=3600, after_completion=True),
    ],
)
def test_triggers_without_listable_windows_are_refused(trigger):
    with pytest.raises(UsageError, match="needs a cron or fixed-rate job"):
        windows_between(trigger, z(2026, 1, 1), z(2026, 1, 2), 10)
    with pytest.raises(UsageError, match="needs a cron or fixed-rate job"):
        windows_before(trigger, z(2026, 1, 2), 24)


@settings(max_examples=60, deadline=None)
@given(
    start=st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2027, 1, 1)),
    hours=st.integers(min_value=0, max_value=200),
    expr=st.sampled_from(["*/7 * * * *", "0 */3 * * *", "15 2 * * *", "0 0 * * mon"]),
    tz=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]),
)
def test_a_range_is_what_the_daemon_fires_in_it(start, hours, expr, tz):
    start = start.replace(tzinfo=UTC)
    end = start + timedelta(hours=hours)
    trigger = cron(expr, tz)
    expected = list(iter_fires(trigger, start - US, end - US))
    assert windows_between(trigger, start, end, 100_000) == expected


# --- the last windows before a time ---------------------------------------------------------


def test_the_last_windows_before_a_time_are_strictly_before_it():
    got = windows_before(cron("0 * * * *"), z(2026, 3, 1, 12), 3)
    assert got == [z(2026, 3, 1, 9), z(2026, 3, 1, 10), z(2026, 3, 1, 11)]


def test_the_last_windows_of_a_sparse_cron_reach_back_years():
    got = windows_before(cron("0 0 29 2 *"), z(2026, 12, 1), 3)
    assert got == [z(2016, 2, 29), z(2020, 2, 29), z(2024, 2, 29)]


def test_the_last_windows_of_a_fixed_rate_stop_at_its_anchor():
    anchor = z(2026, 3, 1, 10)
    assert windows_before(every(3600, anchor), z(2026, 3, 1, 12, 30), 24) == [
        anchor,
        anchor + HOUR,
        anchor + 2 * HOUR,
    ]
    assert windows_before(every(3600, anchor), z(2026, 3, 1, 9), 24) == []


@settings(max_examples=40, deadline=None)
@given(
    end=st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2027, 1, 1)),
    count=st.integers(min_value=1, max_value=30),
    expr=st.sampled_from(["*/7 * * * *", "0 */3 * * *", "15 2 * * *", "0 0 1 * *"]),
)
def test_the_last_windows_are_the_tail_of_a_range(end, count, expr):
    end = end.replace(tzinfo=UTC)
    trigger = cron(expr, "Europe/Berlin")
    got = windows_before(trigger, end, count)
    assert len(got) == count
    assert got == windows_between(trigger, got[0], end, 100_000)


# --- what backfill does to each window ---------------------------------------------------------


def test_backfill_creates_missing_requeues_skipped_and_dead_and_leaves_the_rest():
    w = [z(2026, 3, 1, h) for h in range(7)]
    runs = {
        w[1]: (11, RunState.SKIPPED),
        w[2]: (12, RunState.DEAD),
        w[3]: (13, RunState.SUCCEEDED),
        w[4]: (14, RunState.LEASED),
        w[5]: (15, RunState.PENDING),
    }
    plan = plan_backfill(w, runs)
    assert plan.create == [w[0], w[6]]
    assert plan.requeue == [11, 12]
    assert plan.left == 3


def test_a_second_backfill_over_the_same_range_does_nothing():
    w = [z(2026, 3, 1, h) for h in range(5)]
    first = plan_backfill(w, {w[2]: (3, RunState.DEAD)})
    # what the first call wrote: new pending runs, the dead one pending again
    after = {x: (100 + i, RunState.PENDING) for i, x in enumerate(first.create)}
    after[w[2]] = (3, RunState.PENDING)
    second = plan_backfill(w, after)
    assert (second.create, second.requeue, second.left) == ([], [], 5)


def test_coverage_shows_none_where_no_row_is_kept():
    w = [z(2026, 3, 1, h) for h in range(3)]

    class R:
        def __init__(self, id_: int, state: RunState, skip: SkipReason | None = None):
            self.id, self.state, self.skip_reason = id_, state, skip

    got = plan_coverage(
        w, {w[0]: R(7, RunState.SKIPPED, SkipReason.MISSED), w[2]: R(9, RunState.DEAD)}
    )  # type: ignore[dict-item]
    assert got == [
        Coverage(w[0], RunState.SKIPPED, 7, SkipReason.MISSED),
        Coverage(w[1]),
        Coverage(w[2], RunState.DEAD, 9),
    ]


def test_the_age_cutoff_is_keep_for_before_now():
    now = z(2026, 3, 8)
    assert history_cutoff(None, now) is None
    # at or before the cut is deleted: a run whose window is exactly --keep-for old stays
    assert history_cutoff(7 * 86400, now) == z(2026, 3, 1) - timedelta(microseconds=1)
    # --keep-runs' cut and --keep-for's: the later wins
    late, early = z(2026, 3, 5), z(2026, 2, 1)
    assert history_cutoff(7 * 86400, now, beyond_kept=late) == late
    assert history_cutoff(7 * 86400, now, beyond_kept=early) == z(2026, 3, 1) - timedelta(
        microseconds=1
    )
    assert history_cutoff(None, now, beyond_kept=early) == early
