"""Trigger arithmetic: cron parsing, the vixie day rule, cron(8) DST rules, intervals."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobctl.cronexpr import CronSchedule, parse_cron, validate_cron_expr
from jobctl.errors import UsageError
from jobctl.models import Trigger, TriggerKind
from jobctl.triggers import count_fires, describe, iter_fires, next_fire

UTC = UTC
MINUTE = timedelta(minutes=1)


def z(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


def cron(expr: str, tz: str = "UTC") -> Trigger:
    return Trigger(TriggerKind.CRON, tz, expr)


def fires(expr: str, tz: str, after: datetime, until: datetime) -> list[datetime]:
    return list(iter_fires(cron(expr, tz), after, until))


# --- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "field", "values"),
    [
        ("*/15 * * * *", "minutes", {0, 15, 30, 45}),
        ("1-10/2 * * * *", "minutes", {1, 3, 5, 7, 9}),
        ("0,30 * * * *", "minutes", {0, 30}),
        ("0 9-17 * * *", "hours", {9, 10, 11, 12, 13, 14, 15, 16, 17}),
        ("0 0 1,15 * *", "days", {1, 15}),
        ("0 0 * jan,JUL *", "months", {1, 7}),
        ("0 0 * Jan-Mar *", "months", {1, 2, 3}),
        ("0 0 * * mon-fri", "weekdays", {1, 2, 3, 4, 5}),
        ("0 0 * * 7", "weekdays", {0}),
        ("0 0 * * 5-7", "weekdays", {5, 6, 0}),
        ("0 0 * * SUN", "weekdays", {0}),
        ("0 0 * * *", "weekdays", set(range(7))),
        ("0\t0  * * *", "hours", {0}),
        ("0 */6 * * *", "hours", {0, 6, 12, 18}),
        ("*/100 * * * *", "minutes", {0}),
    ],
)
def test_parse_cron_fields(expr: str, field: str, values: set[int]) -> None:
    assert getattr(parse_cron(expr), field) == values


@pytest.mark.parametrize(
    ("macro", "expanded"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_macros_expand(macro: str, expanded: str) -> None:
    assert parse_cron(macro).expr == expanded
    assert validate_cron_expr(macro) is None


def test_flags() -> None:
    s = parse_cron("*/5 3 */2 * mon")
    assert s.wildcard and s.dom_star and not s.dow_star
    f = parse_cron("30 2 1 * *")
    assert not f.wildcard and not f.dom_star and f.dow_star
    assert parse_cron("0 * * * *").wildcard
    assert parse_cron("0 0 1 JAN Mon").expr == "0 0 1 jan mon"
    assert isinstance(f, CronSchedule)
    with pytest.raises(AttributeError):
        f.expr = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("* * * *", "expected 5 fields"),
        ("0 * * * * *", "expected 5 fields"),
        ("0 0 * * * * 2026", "expected 5 fields"),
        ("5/10 * * * *", "a step needs a range"),
        ("5-3 * * * *", "wrapping range"),
        ("* 22-2 * * *", "wrapping range"),
        ("*/0 * * * *", "zero step"),
        ("1-10/0 * * * *", "zero step"),
        ("60 * * * *", "out of range"),
        ("* 24 * * *", "out of range"),
        ("* * 0 * *", "out of range"),
        ("* * 32 * *", "out of range"),
        ("* * * 13 *", "out of range"),
        ("* * * 0 *", "out of range"),
        ("* * * * 8", "out of range"),
        ("@reboot", "@reboot"),
        ("@every 5m", "unknown macro"),
        ("@fortnightly", "unknown macro"),
        ("* * ? * *", "'?' in day-of-month field is not supported"),
        ("* * L,1 * *", "L stands alone"),
        ("* * 15W * *", "W (nearest weekday)"),
        ("* * LW * *", "W (nearest weekday)"),
        ("H * * * *", "needs the job's name"),
        ("* * * * 5L", "L in day-of-week"),
        ("* * * * 1#6", "N in D#N is 1-5"),
        ("* * * * 1#0", "N in D#N is 1-5"),
        ("* * * * 1-2#2", "bad day-of-week item"),
        ("* * 1#2 * *", "'#' goes in the day-of-week field"),
        ("0 0 * * * 2026", "seconds and year fields"),
        ("0 0 0 * * * *", "seconds and year fields"),
        ("5/15 * * * *", "a step needs a range"),
        ("0 0 5-3 * *", "wrapping range"),
        ("1,,2 * * * *", "bad minute"),
        ("a * * * *", "unknown minute"),
        ("* * * * jan", "unknown day-of-week"),
        ("* * * mon *", "unknown month"),
        ("*-5 * * * *", "bad minute"),
        ("\u0663 * * * *", "bad minute"),
        ("0 0 * * mon,", "bad day-of-week"),
    ],
)
def test_parse_cron_invalid(expr: str, problem: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_cron(expr)
    message = str(info.value)
    assert message.startswith(f"invalid cron expression {expr!r}: ")
    assert problem in message
    assert "\n" not in message
    assert validate_cron_expr(expr) == message or expr == "@reboot"


def test_validate_accepts_reboot() -> None:
    assert validate_cron_expr("@reboot") is None
    assert validate_cron_expr("*/5 * * * *") is None
    assert validate_cron_expr("5/10 * * * *") is not None


# --- day rule ----------------------------------------------------------------------------


def test_dom_and_dow_restricted_either_matches() -> None:
    got = fires("0 0 1 * mon", "UTC", z(2025, 8, 31), z(2025, 9, 30))
    days = [f.day for f in got]
    # 2025-09-01 is a Monday (matches both, fires once); then Mondays 8, 15, 22, 29
    assert days == [1, 8, 15, 22, 29]
    got = fires("0 0 1 * mon", "UTC", z(2025, 9, 30), z(2025, 10, 31))
    assert [f.day for f in got] == [1, 6, 13, 20, 27]  # Oct 1 is a Wednesday


def test_dom_star_step_means_and() -> None:
    got = fires("0 0 */2 * mon", "UTC", z(2025, 8, 31), z(2025, 10, 31))
    assert got and all(f.weekday() == 0 and f.day % 2 == 1 for f in got)
    assert [f.date().isoformat() for f in got] == [
        "2025-09-01",
        "2025-09-15",
        "2025-09-29",
        "2025-10-13",
        "2025-10-27",
    ]


def test_dow_star_means_and() -> None:
    got = fires("0 0 13 * *", "UTC", z(2025, 1, 1), z(2025, 12, 31))
    assert [f.month for f in got] == list(range(1, 13))


def test_names_fire_on_named_days() -> None:
    got = fires("0 9 * feb sat", "UTC", z(2026, 1, 1), z(2026, 12, 31))
    assert [f.day for f in got] == [7, 14, 21, 28]
    assert all(f.month == 2 and f.hour == 9 for f in got)


# --- DST: fixed-time jobs --------------------------------------------------------------


def test_berlin_spring_skip_fixed_time_fires_once_at_0300() -> None:
    t = cron("30 2 * * *", "Europe/Berlin")
    first = next_fire(t, z(2025, 3, 29, 12))
    assert first == z(2025, 3, 30, 1, 0)  # 03:00 CEST
    assert first.astimezone(ZoneInfo("Europe/Berlin")).hour == 3
    assert next_fire(t, first) == z(2025, 3, 31, 0, 30)


def test_berlin_spring_skip_several_fixed_times_collapse() -> None:
    got = fires("0,15,30,45 2 * * *", "Europe/Berlin", z(2025, 3, 29, 12), z(2025, 3, 30, 12))
    assert got == [z(2025, 3, 30, 1, 0)]
    got = fires("0,30 2,3 * * *", "Europe/Berlin", z(2025, 3, 29, 12), z(2025, 3, 30, 12))
    assert got == [z(2025, 3, 30, 1, 0), z(2025, 3, 30, 1, 30)]


def test_berlin_fall_repeat_fixed_fires_once() -> None:
    got = fires("30 2 * * *", "Europe/Berlin", z(2025, 10, 25, 12), z(2025, 10, 26, 12))
    assert got == [z(2025, 10, 26, 0, 30)]  # 02:30 CEST, not again at 02:30 CET
    assert next_fire(cron("30 2 * * *", "Europe/Berlin"), z(2025, 10, 26, 0, 45)) == z(
        2025, 10, 27, 1, 30
    )


def test_new_york_spring_skip_fixed() -> None:
    t = cron("30 2 * * *", "America/New_York")
    assert next_fire(t, z(2025, 3, 8, 12)) == z(2025, 3, 9, 7, 0)  # 03:00 EDT
    assert next_fire(t, z(2025, 3, 9, 7, 0)) == z(2025, 3, 10, 6, 30)


def test_new_york_fall_0130_fires_once_at_first_occurrence() -> None:
    t = cron("30 1 * * *", "America/New_York")
    got = list(iter_fires(t, z(2026, 10, 31, 12), z(2026, 11, 2, 12)))
    assert got == [z(2026, 11, 1, 5, 30), z(2026, 11, 2, 6, 30)]
    # asked from between the two occurrences: not again at 01:30 EST
    assert next_fire(t, z(2026, 11, 1, 5, 45)) == z(2026, 11, 2, 6, 30)


def test_fixed_job_asked_from_inside_the_repeated_hour() -> None:
    t = cron("45 1 * * *", "America/New_York")
    assert next_fire(t, z(2026, 11, 1, 6, 10)) == z(2026, 11, 2, 6, 45)  # from 01:10 EST
    assert next_fire(t, z(2026, 11, 1, 5, 10)) == z(2026, 11, 1, 5, 45)  # from 01:10 EDT


def test_lord_howe_half_hour_gap_fixed() -> None:
    # 2025-10-05 02:00 LHST (+10:30) -> 02:30 LHDT (+11) = 2025-10-04T15:30Z
    t = cron("15 2 * * *", "Australia/Lord_Howe")
    assert next_fire(t, z(2025, 10, 4, 0)) == z(2025, 10, 4, 15, 30)


# --- DST: wildcard jobs ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "day", "expected"),
    [
        ("America/New_York", (2026, 11, 1), 25),
        ("America/New_York", (2026, 3, 8), 23),
        ("Europe/Berlin", (2025, 10, 26), 25),
        ("Europe/Berlin", (2025, 3, 30), 23),
        ("Europe/Berlin", (2025, 6, 1), 24),
    ],
)
def test_hourly_wildcard_counts_real_hours(
    tz: str, day: tuple[int, int, int], expected: int
) -> None:
    zone = ZoneInfo(tz)
    midnight = datetime(*day, tzinfo=zone)
    start = midnight.astimezone(UTC)
    end = (midnight + timedelta(days=1)).astimezone(UTC)  # wall-clock day
    eps = timedelta(microseconds=1)
    t = cron("0 * * * *", tz)
    assert count_fires(t, start - eps, end - eps) == expected
    assert count_fires(cron("@hourly", tz), start - eps, end - eps) == expected


def test_new_york_fall_wildcard_fires_both_occurrences() -> None:
    got = fires("*/30 * * * *", "America/New_York", z(2026, 11, 1, 4, 50), z(2026, 11, 1, 7, 0))
    assert got == [
        z(2026, 11, 1, 5, 0),
        z(2026, 11, 1, 5, 30),
        z(2026, 11, 1, 6, 0),
        z(2026, 11, 1, 6, 30),
        z(2026, 11, 1, 7, 0),
    ]


def test_wildcard_after_in_first_occurrence_goes_back_in_wall_time() -> None:
    t = cron("15 * * * *", "America/New_York")
    assert next_fire(t, z(2026, 11, 1, 5, 20)) == z(2026, 11, 1, 6, 15)  # 01:15 EST


def test_berlin_spring_wildcard_skips_missing_wall_times() -> None:
    got = fires("*/30 * * * *", "Europe/Berlin", z(2025, 3, 30, 0, 10), z(2025, 3, 30, 1, 40))
    assert got == [z(2025, 3, 30, 0, 30), z(2025, 3, 30, 1, 0), z(2025, 3, 30, 1, 30)]


def test_berlin_fall_wildcard_step_hours_fire_twice_in_repeat() -> None:
    got = fires("0 */1 * * *", "Europe/Berlin", z(2025, 10, 25, 23, 30), z(2025, 10, 26, 2, 30))
    assert got == [z(2025, 10, 26, 0, 0), z(2025, 10, 26, 1, 0), z(2025, 10, 26, 2, 0)]


# --- never, leap days, bounds ----------------------------------------------------------


@pytest.mark.parametrize("expr", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 30 2 */2"])
def test_never_firing_returns_none_fast(expr: str) -> None:
    started = time.perf_counter()
    assert next_fire(cron(expr, "Europe/Berlin"), z(2025, 1, 1)) is None
    assert list(iter_fires(cron(expr), z(2025, 1, 1), z(2125, 1, 1))) == []
    assert time.perf_counter() - started < 0.05


def test_feb_29() -> None:
    t = cron("0 0 29 2 *")
    assert next_fire(t, z(2025, 1, 1)) == z(2028, 2, 29)
    assert next_fire(t, z(2096, 3, 1)) == z(2104, 2, 29)  # 2100 is not a leap year
    assert next_fire(cron("0 0 29 2 */7"), z(2025, 1, 1)) == z(2032, 2, 29)  # a Sunday


def test_rare_expression_found_far_ahead() -> None:
    assert next_fire(cron("0 0 13 * fri"), z(2025, 1, 1)) == z(2025, 1, 3)  # either: Fri 3rd
    # AND rule; */5 is {Sun, Fri}: the first 13th on either is Sunday 2025-04-13
    assert next_fire(cron("0 0 13 * */5"), z(2025, 1, 1)) == z(2025, 4, 13)
    assert next_fire(cron("0 0 13 * */5"), z(2025, 4, 13)) == z(2025, 6, 13)


def test_naive_after_is_rejected() -> None:
    with pytest.raises(ValueError):
        next_fire(cron("* * * * *"), datetime(2025, 1, 1))


def test_bad_expression_or_zone_raises_usage_error() -> None:
    with pytest.raises(UsageError):
        next_fire(cron("61 * * * *"), z(2025, 1, 1))
    with pytest.raises(UsageError):
        next_fire(cron("* * * * *", "Mars/Base"), z(2025, 1, 1))


def test_after_in_other_zone_and_seconds() -> None:
    after = datetime(2025, 5, 1, 12, 0, 30, tzinfo=ZoneInfo("Europe/Berlin"))
    assert next_fire(cron("* * * * *", "UTC"), after) == z(2025, 5, 1, 10, 1)


# --- speed -------------------------------------------------------------------------------


def test_per_minute_year_is_fast() -> None:
    t = cron("* * * * *", "Europe/Berlin")
    # the process's CPU time: on a loaded machine the wall clock measures the other
    # processes too (4 s of wall for 0.25 s of CPU at load 18)
    started = time.process_time()
    assert count_fires(t, z(2025, 1, 1), z(2026, 1, 1)) == 525_600
    assert time.process_time() - started < 3.0


def test_next_fire_is_quick() -> None:
    t = cron("*/15 9-17 * * mon-fri", "Europe/Berlin")
    after = z(2025, 5, 1, 10, 7)
    started = time.perf_counter()
    for _ in range(1000):
        next_fire(t, after)
    assert (time.perf_counter() - started) / 1000 < 500e-6  # generous for slow CI


# --- interval, once, reboot, manual ----------------------------------------------------


def test_interval_fixed_rate_anchor_arithmetic() -> None:
    anchor = z(2025, 1, 1, 0, 0)
    t = Trigger(TriggerKind.INTERVAL, "UTC", every_seconds=300, anchor=anchor)
    assert next_fire(t, z(2024, 12, 31)) == anchor
    assert next_fire(t, anchor) == anchor + timedelta(minutes=5)
    assert next_fire(t, anchor + timedelta(minutes=7)) == anchor + timedelta(minutes=10)
    assert next_fire(t, anchor + timedelta(minutes=10)) == anchor + timedelta(minutes=15)
    got = list(iter_fires(t, anchor - timedelta(seconds=1), anchor + timedelta(minutes=15)))
    assert got == [anchor + timedelta(minutes=5 * k) for k in range(4)]
    assert count_fires(t, anchor - timedelta(seconds=1), anchor + timedelta(minutes=15)) == 4
    assert count_fires(t, anchor + timedelta(minutes=1), anchor + timedelta(minutes=2)) == 0
    assert count_fires(t, z(2020, 1, 1), z(2020, 2, 1)) == 0


def test_interval_has_no_float_drift() -> None:
    anchor = datetime(2025, 1, 1, 0, 0, 0, 123_457, tzinfo=UTC)
    t = Trigger(TriggerKind.INTERVAL, "UTC", every_seconds=0.1, anchor=anchor)
    after = anchor + timedelta(microseconds=100_000 * 10_000_000)
    assert next_fire(t, after) == anchor + timedelta(microseconds=100_000 * 10_000_001)


def test_interval_one_second_over_a_day() -> None:
    anchor = z(2025, 1, 1)
    t = Trigger(TriggerKind.INTERVAL, "UTC", every_seconds=1, anchor=anchor)
    started = time.perf_counter()
    assert count_fires(t, anchor, anchor + timedelta(days=365)) == 365 * 86_400
    assert time.perf_counter() - started < 0.01
    got = list(iter_fires(t, anchor, anchor + timedelta(days=1)))
    assert len(got) == 86_400 and got[-1] == anchor + timedelta(days=1)


def test_interval_after_completion() -> None:
    t = Trigger(TriggerKind.INTERVAL, "UTC", every_seconds=90, after_completion=True)
    end = z(2025, 1, 1, 12, 0)
    assert next_fire(t, end) == end + timedelta(seconds=90)
    assert list(iter_fires(t, end, end + timedelta(days=1))) == [end + timedelta(seconds=90)]
    assert count_fires(t, end, end + timedelta(days=1)) == 1
    assert count_fires(t, end, end + timedelta(seconds=10)) == 0


def test_once() -> None:
    at = z(2026, 12, 1, 8)
    t = Trigger(TriggerKind.ONCE, "UTC", at=at)
    assert next_fire(t, at - timedelta(seconds=1)) == at
    assert next_fire(t, at) is None
    assert list(iter_fires(t, z(2026, 1, 1), z(2027, 1, 1))) == [at]
    assert count_fires(t, at, z(2027, 1, 1)) == 0


@pytest.mark.parametrize("kind", [TriggerKind.REBOOT, TriggerKind.MANUAL])
def test_reboot_and_manual_never_fire(kind: TriggerKind) -> None:
    t = Trigger(kind, "UTC", expr="@reboot" if kind == TriggerKind.REBOOT else None)
    assert next_fire(t, z(2025, 1, 1)) is None
    assert count_fires(t, z(2025, 1, 1), z(2026, 1, 1)) == 0


@pytest.mark.parametrize(
    ("trigger", "text"),
    [
        (cron("30 2 * * *", "Europe/Berlin"), "30 2 * * * (Europe/Berlin)"),
        (Trigger(TriggerKind.INTERVAL, "UTC", every_seconds=300, anchor=z(2025, 1, 1)), "every 5m"),
        (
            Trigger(TriggerKind.INTERVAL, "UTC", every_seconds=300, after_completion=True),
            "every 5m after completion",
        ),
        (Trigger(TriggerKind.ONCE, "UTC", at=z(2026, 12, 1, 8)), "at 2026-12-01T08:00:00Z"),
        (Trigger(TriggerKind.REBOOT, "UTC", expr="@reboot"), "@reboot"),
        (Trigger(TriggerKind.MANUAL, "UTC"), "manual"),
    ],
)
def test_describe(trigger: Trigger, text: str) -> None:
    assert describe(trigger) == text


# --- properties --------------------------------------------------------------------------

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC", "Asia/Kathmandu"]
# Offset changes in 2025, to start searches near them often.
CHANGES = [
    z(2025, 3, 30, 1),
    z(2025, 10, 26, 1),
    z(2025, 3, 9, 7),
    z(2025, 11, 2, 6),
    z(2025, 4, 5, 15),
    z(2025, 10, 4, 15, 30),
]


def _field(draw: st.DrawFn, lo: int, hi: int, names: list[str] | None = None) -> str:
    kind = draw(st.sampled_from(["star", "step", "value", "range", "rangestep", "list", "name"]))
    a = draw(st.integers(lo, hi))
    b = draw(st.integers(a, hi))
    k = draw(st.integers(1, max(1, (hi - lo) // 2)))
    if kind == "star":
        return "*"
    if kind == "step":
        return f"*/{k}"
    if kind == "value":
        return str(a)
    if kind == "range":
        return f"{a}-{b}"
    if kind == "rangestep":
        return f"{a}-{b}/{k}"
    if kind == "list":
        return f"{a},{b}"
    if names:
        return draw(st.sampled_from(names))
    return str(a)


@st.composite
def cron_exprs(draw: st.DrawFn) -> str:
    return " ".join(
        [
            _field(draw, 0, 59),
            _field(draw, 0, 23),
            _field(draw, 1, 31),
            _field(draw, 1, 12, ["jan", "Feb", "MAR", "oct", "nov"]),
            _field(draw, 0, 7, ["sun", "Mon", "SAT"]),
        ]
    )


starts = st.one_of(
    st.datetimes(min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31)).map(
        lambda d: d.replace(tzinfo=UTC)
    ),
    st.builds(
        lambda c, m, s: c + timedelta(minutes=m, seconds=s),
        st.sampled_from(CHANGES),
        st.integers(-36 * 60, 12 * 60),
        st.integers(0, 59),
    ),
)


def _oracle(expr: str, tz: str, after: datetime, until: datetime) -> list[datetime]:
    """Fires by brute force, minute by minute in UTC, straight from the cron(8) rules."""
    sched = parse_cron(expr)
    zone = ZoneInfo(tz)
    t = after.replace(second=0, microsecond=0) + MINUTE
    prev_off = (t - MINUTE).astimezone(zone).utcoffset()
    out = []
    while t <= until:
        local = t.astimezone(zone)
        off = local.utcoffset()
        wall = local.replace(tzinfo=None)
        hit = sched.matches(wall) and (sched.wildcard or local.fold == 0)
        if not sched.wildcard and off > prev_off:  # a gap just before t
            w = wall - (off - prev_off)
            while w < wall and not hit:
                hit = sched.matches(w)
                w += MINUTE
        if hit:
            out.append(t)
        prev_off = off
        t += MINUTE
    return out


@settings(max_examples=150, deadline=None)
@given(cron_exprs(), st.sampled_from(ZONES), starts)
def test_fires_match_brute_force(expr: str, tz: str, after: datetime) -> None:
    until = after + timedelta(hours=30)
    t = cron(expr, tz)
    expected = _oracle(expr, tz, after, until)
    assert list(iter_fires(t, after, until)) == expected
    assert count_fires(t, after, until) == len(expected)
    chained = []
    current = next_fire(t, after)
    while current is not None and current <= until:
        chained.append(current)
        current = next_fire(t, current)
    assert chained == expected


@settings(max_examples=150, deadline=None)
@given(cron_exprs(), st.sampled_from(ZONES), starts)
def test_next_fire_increases_and_matches_fields(expr: str, tz: str, after: datetime) -> None:
    t = cron(expr, tz)
    sched = parse_cron(expr)
    zone = ZoneInfo(tz)
    seen = []
    current = after
    for _ in range(12):
        nxt = next_fire(t, current)
        if nxt is None:
            assert not seen
            return
        assert nxt > current and nxt.tzinfo is UTC
        local = nxt.astimezone(zone)
        wall = local.replace(tzinfo=None)
        if not sched.matches(wall):
            # only the documented shift: a fixed job's gap time fires right after the change
            assert not sched.wildcard
            before = (nxt - timedelta(seconds=1)).astimezone(zone).utcoffset()
            assert before is not None and before < local.utcoffset()
        seen.append(nxt)
        current = nxt
    assert len(set(seen)) == len(seen)
    assert list(iter_fires(t, after, seen[-1])) == seen


# --- L and D#N -------------------------------------------------------------------------


def days_of(expr: str, after: datetime, until: datetime, tz: str = "UTC") -> list[str]:
    return [f.date().isoformat() for f in fires(expr, tz, after, until)]


def test_last_day_of_month_knows_leap_years() -> None:
    got = days_of("0 0 L * *", z(2024, 1, 1), z(2024, 5, 1))
    assert got == ["2024-01-31", "2024-02-29", "2024-03-31", "2024-04-30"]
    assert days_of("0 0 L 2 *", z(2025, 1, 1), z(2026, 1, 1)) == ["2025-02-28"]


def test_nth_weekday_of_month() -> None:
    assert days_of("0 0 * * 5#2", z(2025, 1, 1), z(2025, 4, 1)) == [
        "2025-01-10",
        "2025-02-14",
        "2025-03-14",
    ]
    # a 5th Monday exists only in some months; 7#1 is the first Sunday
    assert days_of("0 0 * * 1#5", z(2025, 1, 1), z(2025, 7, 1)) == ["2025-03-31", "2025-06-30"]
    assert days_of("0 0 * * 7#1", z(2025, 1, 1), z(2025, 3, 1)) == ["2025-01-05", "2025-02-02"]


def test_nth_weekday_stands_in_a_list_with_plain_weekdays() -> None:
    # the first Monday or any Friday
    assert days_of("0 0 * * 1#1,fri", z(2025, 1, 1), z(2025, 1, 20)) == [
        "2025-01-03",
        "2025-01-06",
        "2025-01-10",
        "2025-01-17",
    ]


def test_l_and_nth_count_as_restricted_for_the_day_rule() -> None:
    # both restricted: the 13th or the second Friday (croniter would AND them)
    assert days_of("0 0 13 * 5#2", z(2025, 1, 1), z(2025, 3, 1)) == [
        "2025-01-10",
        "2025-01-13",
        "2025-02-13",
        "2025-02-14",
    ]
    # the last day or any Sunday
    assert days_of("0 0 L * sun", z(2025, 1, 20), z(2025, 2, 10)) == [
        "2025-01-26",
        "2025-01-31",
        "2025-02-02",
        "2025-02-09",
    ]
    # a day-of-month starting with * ANDs: odd days that are a second Friday
    assert days_of("0 0 */2 * 5#2", z(2025, 1, 1), z(2025, 6, 1)) == ["2025-04-11", "2025-05-09"]


def test_l_follows_the_dst_rules() -> None:
    # 2025-03-30 (the fifth Sunday) 02:30 does not exist in Berlin: it fires right after
    got = fires("30 2 * * 0#5", "Europe/Berlin", z(2025, 3, 1), z(2025, 4, 1))
    assert got == [z(2025, 3, 30, 1, 0)]  # right after the change, once
    got = fires("30 2 L * *", "Europe/Berlin", z(2025, 10, 1), z(2025, 11, 1))
    assert got == [z(2025, 10, 31, 1, 30)]


def test_never_firing_expressions_are_known() -> None:
    assert not parse_cron("0 0 30 2 *").can_fire
    assert not parse_cron("0 0 31 4,6,9,11 *").can_fire
    assert parse_cron("0 0 */31 2,4 *").can_fire  # */31 is {1}
    assert parse_cron("0 0 29 2 *").can_fire
    assert parse_cron("0 0 * 2 1#5").can_fire  # a leap February that starts on a Monday
    assert not parse_cron("0 0 30-31 2 */7").can_fire  # */7 starts with *: ANDed
