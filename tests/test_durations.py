"""Durations, zones and user-given times (README, Choices where the contract is silent)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobctl.durations import format_duration, parse_duration, parse_relative, parse_time
from jobctl.errors import UsageError
from jobctl.zones import local_zone_name, parse_zone, resolve_wall_time

UTC = UTC
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("5m", 300),
        ("1h30m", 5400),
        ("2d", 172_800),
        ("1w", 604_800),
        (" 5m\t", 300),
        ("1w2d3h4m5s", 604_800 + 2 * 86_400 + 3 * 3600 + 4 * 60 + 5),
        ("1d12h", 129_600),
    ],
)
def test_parse_duration_valid(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  ",
        "0",
        "0s",
        "0m0s",
        "-5",
        "-5m",
        "5x",
        "m",
        "1m1h",
        "1h1h",
        "5 m",
        "1.5.2",
        "abc",
        "5M",
        "1e3",
        "\u0663",
        "inf",
        "nan",
        "1h 30m",
        "h30m",
        "30m1h",
        ".5",
        "1.5h",
        "0.5",
        "0.5s",
        "0.000001",
        "-1",
        "1e3",
        "99999999999999999999999",
    ],
)
def test_parse_duration_invalid(text: str) -> None:
    with pytest.raises(UsageError, match="invalid duration .*: (use e.g. 90, 90s, 5m|at most)"):
        parse_duration(text)


def test_durations_are_whole_seconds_from_1s_to_100_years() -> None:
    assert parse_duration("1") == 1.0
    assert parse_duration("5214w") == 5214 * 604_800  # just under 100 years
    with pytest.raises(UsageError, match="at most 100 years"):
        parse_duration("5215w")
    with pytest.raises(UsageError):
        parse_duration("0")
    assert parse_duration("0", allow_zero=True) == 0.0  # --jitter 0
    assert parse_duration("0s", allow_zero=True) == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5400, "1h30m"),
        (45, "45s"),
        (172_800, "2d"),
        (0.5, "0.5s"),
        (90, "1m30s"),
        (604_800, "1w"),
        (3600.0, "1h"),
        (0, "0s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@settings(max_examples=200)
@given(st.integers(min_value=1, max_value=10**9))
def test_duration_round_trips(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@settings(max_examples=200)
@given(st.text(max_size=12))
def test_parse_duration_garbage_is_usage_error_or_positive(text: str) -> None:
    try:
        value = parse_duration(text)
    except UsageError:
        return
    assert value >= 1 and value == int(value)


@pytest.mark.parametrize(
    "name", ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]
)
def test_parse_zone_valid(name: str) -> None:
    assert str(parse_zone(name)) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "Nowhere/City",
        "../etc/passwd",
        "/etc/localtime",
        "Europe/",
        "Europe",
        "a\0b",
        "\udcff",
        " Europe/Berlin",
        "Europe/../Europe/Berlin",
        "zone.tab",
        "Europe\\Berlin",
    ],
)
def test_parse_zone_invalid(name: str) -> None:
    with pytest.raises(UsageError, match="unknown time zone"):
        parse_zone(name)


def test_local_zone_from_tz_env_strips_colon() -> None:
    assert local_zone_name({"TZ": ":Europe/Berlin"}) == "Europe/Berlin"
    assert local_zone_name({"TZ": "America/New_York"}) == "America/New_York"


def test_local_zone_falls_back_to_localtime_link_then_timezone_file(tmp_path) -> None:
    link = tmp_path / "localtime"
    os.symlink("/usr/share/zoneinfo/America/New_York", link)
    tzfile = tmp_path / "timezone"
    tzfile.write_text("Europe/Berlin\n")
    missing = str(tmp_path / "missing")
    env = {"TZ": "Bogus/Zone"}
    assert local_zone_name(env, localtime_path=str(link), timezone_path=str(tzfile)) == (
        "America/New_York"
    )
    assert local_zone_name(env, localtime_path=missing, timezone_path=str(tzfile)) == (
        "Europe/Berlin"
    )
    assert local_zone_name({}, localtime_path=missing, timezone_path=missing) == "UTC"


@pytest.mark.parametrize(
    ("text", "tz", "expected"),
    [
        ("2026-12-01T08:00", "Europe/Berlin", datetime(2026, 12, 1, 7, 0, tzinfo=UTC)),
        ("2026-12-01 08:00:00", "Europe/Berlin", datetime(2026, 12, 1, 7, 0, tzinfo=UTC)),
        ("2026-12-01T08:00Z", "Europe/Berlin", datetime(2026, 12, 1, 8, 0, tzinfo=UTC)),
        ("2026-12-01T08:00+02:00", "UTC", datetime(2026, 12, 1, 6, 0, tzinfo=UTC)),
        ("2026-12-01", "Europe/Berlin", datetime(2026, 11, 30, 23, 0, tzinfo=UTC)),
        ("now", "Europe/Berlin", NOW),
        # DST gap: moved forward to the first valid instant (03:00 CEST)
        ("2025-03-30T02:30", "Europe/Berlin", datetime(2025, 3, 30, 1, 0, tzinfo=UTC)),
        # repeated hour: first occurrence (EDT)
        ("2026-11-01T01:30", "America/New_York", datetime(2026, 11, 1, 5, 30, tzinfo=UTC)),
    ],
)
def test_parse_time_valid(text: str, tz: str, expected: datetime) -> None:
    got = parse_time(text, tz, NOW)
    assert got == expected
    assert got.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    ["", "tomorrow", "+5m", "5m", "2026-13-01", "2026-12-01T25:00", "12:00", "2026-12-01Tfoo"],
)
def test_parse_time_invalid(text: str) -> None:
    with pytest.raises(UsageError, match="invalid time .*: use ISO 8601, e.g. 2026-12-01T08:00"):
        parse_time(text, "UTC", NOW)


def test_parse_time_unknown_zone() -> None:
    with pytest.raises(UsageError, match="unknown time zone 'Mars/Base'"):
        parse_time("2026-12-01T08:00", "Mars/Base", NOW)


def test_resolve_wall_time_lord_howe_half_hour_gap() -> None:
    zone = parse_zone("Australia/Lord_Howe")
    # 2025-10-05 02:00 LHST (+10:30) jumps to 02:30 LHDT (+11) = 2025-10-04T15:30Z
    got = resolve_wall_time(datetime(2025, 10, 5, 2, 15), zone)
    assert got == datetime(2025, 10, 4, 15, 30, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [("5m", 300), ("+90", 90), (" 1h ", 3600)])
def test_parse_relative(text: str, seconds: int) -> None:
    assert parse_relative(text, NOW) == NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "soon", "-5m", "2026-12-01"])
def test_parse_relative_invalid(text: str) -> None:
    with pytest.raises(UsageError, match="invalid duration"):
        parse_relative(text, NOW)
