"""The dashboard's pure parts (README, The dashboard's pages): natural order, which jobs need attention and in
which order, pages, the duration chart and the timeline's hour marks."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from jobctl.models import JobState, RunState, natural_key
from jobctl.store.values import JobFacts
from jobctl.web import charts, triage

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_natural_order() -> None:
    names = ["extra-10", "extra-1", "extra-11", "extra-2", "b", "a10", "a9", "a", "A", "job"]
    assert sorted(names, key=natural_key) == [
        "A", "a", "a9", "a10", "b", "extra-1", "extra-2", "extra-10", "extra-11", "job"
    ]  # fmt: skip


@given(st.lists(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,12}", fullmatch=True), max_size=30))
def test_natural_order_is_total_and_keeps_numbers_in_order(names: list[str]) -> None:
    ordered = sorted(names, key=natural_key)
    assert sorted(ordered, key=natural_key) == ordered
    assert len({natural_key(n) for n in names}) == len(set(names))  # distinct names, distinct keys
    for x, y in itertools.pairwise(ordered):
        mx, my = re.fullmatch(r"(\D*)(\d+)", x), re.fullmatch(r"(\D*)(\d+)", y)
        if mx and my and mx.group(1) == my.group(1):
            assert int(mx.group(2)) <= int(my.group(2))


def facts(name: str, **kw: object) -> JobFacts:
    base: dict[str, object] = {
        "id": abs(hash(name)) % 10**9,
        "name": name,
        "state": JobState.ACTIVE,
        "last_state": RunState.SUCCEEDED,
        "failing": False,
        "oldest_open_due": None,
    }
    base.update(kw)
    return JobFacts(**base)  # type: ignore[arg-type]


def test_attention_reasons() -> None:
    assert triage.attention(facts("ok"), NOW) == ()
    assert triage.attention(facts("d", last_state=RunState.DEAD), NOW) == ("dead",)
    assert triage.attention(facts("f", failing=True), NOW) == ("failing",)
    late = NOW - timedelta(minutes=6)
    assert triage.attention(facts("l", oldest_open_due=late), NOW) == ("late",)
    # due four minutes ago is not late yet; a paused job's waiting runs are not late
    assert triage.attention(facts("l", oldest_open_due=NOW - timedelta(minutes=4)), NOW) == ()
    paused = facts("p", state=JobState.PAUSED, oldest_open_due=late)
    assert triage.attention(paused, NOW) == ()
    assert triage.attention(facts("p", paused_reason="failures"), NOW) == ("paused by failures",)
    assert triage.attention(facts("n", notifications_failed=2), NOW) == ("notifications failing",)


def test_rank_puts_attention_first_then_natural_order_and_filters() -> None:
    all_facts = [facts(f"job-{i}") for i in (10, 2, 1)] + [
        facts("zz", last_state=RunState.DEAD),
        facts("never", last_state=None),
    ]
    ranked = triage.rank(all_facts, NOW)
    assert [r.facts.name for r in ranked] == ["zz", "job-1", "job-2", "job-10", "never"]
    assert [r.facts.name for r in triage.rank(all_facts, NOW, last_state="dead")] == ["zz"]
    assert [r.facts.name for r in triage.rank(all_facts, NOW, last_state="none")] == ["never"]
    assert [r.facts.name for r in triage.rank(all_facts, NOW, last_state="attention")] == ["zz"]


def test_pages() -> None:
    items = list(range(120))
    p = triage.page_of(items, 1)
    assert (p.items, p.number, p.pages, p.total, p.first_index) == (items[:50], 1, 3, 120, 1)
    p = triage.page_of(items, 3)
    assert p.items == items[100:] and p.first_index == 101
    assert triage.page_of(items, 99).number == 3  # past the end: the last page
    empty = triage.page_of([], 1)
    assert (empty.items, empty.pages, empty.first_index) == ([], 1, 0)


def test_hour_marks_in_a_zone_half_an_hour_off_utc_and_across_dst() -> None:
    start, end = NOW - timedelta(hours=24), NOW
    kolkata = charts.hour_marks(start, end, ZoneInfo("Asia/Kolkata"))
    assert len(kolkata) == 24 and all(m.minute == 30 for m in kolkata)
    utc = charts.hour_marks(start, end, ZoneInfo("UTC"))
    assert len(utc) == 24 and all(m.minute == 0 for m in utc) and utc[-1] == NOW
    # the day Berlin's clocks go back: 25 hours on the clock face, each mark a new hour
    day = datetime(2026, 10, 24, 22, 0, tzinfo=UTC)
    berlin = charts.hour_marks(day, day + timedelta(hours=25), ZoneInfo("Europe/Berlin"))
    assert len(berlin) == 25
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(berlin))


def test_seconds_text() -> None:
    assert [charts.seconds_text(s) for s in (0.42, 3.21, 59, 245, 7380)] == [
        "0.42s", "3.2s", "59s", "4m05s", "2h03m"
    ]  # fmt: skip


def test_duration_chart_without_runs_that_ended() -> None:
    chart = charts.duration_chart([])
    assert chart.bars == 0 and chart.median_seconds is None and str(chart.svg) == ""
