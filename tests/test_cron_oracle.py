"""jobctl's cron engine held against croniter, the independent oracle (README, Dependencies).

croniter is not jobctl's engine: it fires a fixed-time job twice in a repeated hour,
reads an ``a-a`` range as the whole field, and decides "wildcard" from a field's
expansion, so it gets DST wrong where cron(8) is the contract (see README). In UTC,
where DST plays no part, the two must agree on every expression both accept: the
differential test below draws thousands of random expressions mixing lists, ranges,
steps, names, both day fields and the ``L`` / ``D#N`` extensions, and compares the
next fire times. croniter is read with vixie cron's day rule (``day_or=True``,
``implement_cron_bug=True``) and an ``a-a`` range is rewritten to ``a`` for it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobctl.cronexpr import parse_cron
from jobctl.models import Trigger, TriggerKind
from jobctl.triggers import next_fires

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
FIRES = 8


def _value(
    draw: st.DrawFn, lo: int, hi: int, names: list[str] | None, offset: int
) -> tuple[int, str]:
    v = draw(st.integers(lo, hi))
    if names and v - offset < len(names) and draw(st.booleans()):
        text = names[v - offset]
        return v, text.upper() if draw(st.booleans()) else text
    return v, str(v)


Pair = tuple[str, str]
"""An expression (or field, item) as jobctl reads it, and as croniter is given it."""


@st.composite
def item(draw: st.DrawFn, lo: int, hi: int, names: list[str] | None, offset: int) -> Pair:
    kind = draw(st.sampled_from(["star", "star-step", "value", "range", "range-step"]))
    if kind == "star":
        return "*", "*"
    if kind == "star-step":
        text = f"*/{draw(st.integers(1, hi - lo + 1))}"
        return text, text
    a, a_text = _value(draw, lo, hi, names, offset)
    if kind == "value":
        return a_text, a_text
    b, b_text = _value(draw, a, hi, names, offset)
    step = f"/{draw(st.integers(1, hi - lo + 1))}" if kind == "range-step" else ""
    # croniter reads an a-a range (with a step too) as the whole field: give it a alone
    return f"{a_text}-{b_text}{step}", a_text if a == b else f"{a_text}-{b_text}{step}"


@st.composite
def field(
    draw: st.DrawFn,
    lo: int,
    hi: int,
    names: list[str] | None = None,
    offset: int = 0,
    day_field: bool = False,
) -> Pair:
    items = draw(st.lists(item(lo, hi, names, offset), min_size=1, max_size=3))
    if day_field:
        # cron reads a day field as unrestricted only when its text starts with "*";
        # croniter also when a later item does ("0,*"): keep "*" items first
        items = items[:1] + [i for i in items[1:] if not i[0].startswith("*")]
    return ",".join(i for i, _ in items), ",".join(c for _, c in items)


@st.composite
def nth_weekdays(draw: st.DrawFn) -> Pair:
    pairs = draw(st.lists(st.tuples(st.integers(0, 7), st.integers(1, 5)), min_size=1, max_size=3))
    text = ",".join(f"{d}#{n}" for d, n in pairs)
    return text, text


@st.composite
def expression(draw: st.DrawFn) -> Pair:
    minute = draw(field(0, 59))
    hour = draw(field(0, 23))
    month = draw(field(1, 12, MONTHS, 1))
    dom = draw(st.one_of(field(1, 31, day_field=True), st.just(("L", "L"))))
    if dom[0].startswith("*") and draw(st.integers(0, 3)) == 0:
        # croniter reads D#N only alone in its field and ANDed with an unrestricted
        # day-of-month; the other mixes are named cases in test_triggers
        dow = draw(nth_weekdays())
    else:
        dow = draw(field(0, 7, DAYS, 0, day_field=True))
    fields = [minute, hour, dom, month, dow]
    return " ".join(f for f, _ in fields), " ".join(c for _, c in fields)


def croniter_fires(expr: str, after: datetime, count: int) -> list[datetime]:
    it = croniter(expr, after, day_or=True, implement_cron_bug=True)
    return [it.get_next(datetime) for _ in range(count)]


@pytest.mark.long
@settings(
    max_examples=2000,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    expression(),
    st.datetimes(datetime(2000, 1, 1), datetime(2035, 1, 1)).map(
        lambda d: d.replace(second=0, microsecond=0, tzinfo=UTC)
    ),
)
def test_engine_agrees_with_croniter_in_utc(pair: Pair, after: datetime) -> None:
    expr, theirs = pair
    ours = next_fires(Trigger(TriggerKind.CRON, "UTC", expr), after, FIRES)
    if not parse_cron(expr).can_fire:
        assert ours == []
        return
    assert ours == croniter_fires(theirs, after, FIRES), (expr, theirs)


def test_oracle_sees_a_wrong_answer() -> None:
    """The comparison can fail: a day off is caught."""
    after = datetime(2025, 1, 1, tzinfo=UTC)
    theirs = croniter_fires("0 0 L * *", after, 3)
    assert theirs == next_fires(Trigger(TriggerKind.CRON, "UTC", "0 0 L * *"), after, 3)
    assert [t + timedelta(days=1) for t in theirs] != theirs
