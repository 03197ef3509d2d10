"""Next fire times of triggers: cron (vixie day rule, cron(8) DST rules), interval, once.

Pure functions: time always comes in as an argument (aware datetimes, any zone) and
results are aware UTC. A cron expression is evaluated in the trigger's zone:

- a *fixed-time* job (neither the minute nor the hour field starts with ``*``) whose wall
  time falls in a DST gap fires once, at the first instant after the change (several
  such times in one gap collapse into that instant); a wall time that occurs twice fires
  once, at its first occurrence;
- a *wildcard* job (minute or hour field starts with ``*``, ``*/15`` too) fires by real
  elapsed time: wall times that do not exist are not fired, wall times that occur twice
  fire at both instants.
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

from jobctl.clock import from_us, iso, to_us
from jobctl.durations import first_offset_change, format_duration, parse_zone, utc_offset
from jobctl.errors import UsageError
from jobctl.models import Trigger, TriggerKind

UTC = UTC

SEARCH_YEARS = 50
"""How far ahead (in years of wall time) a cron search looks before giving up."""

_PROBE = timedelta(days=7)
"""Step for looking for zone offset changes; no zone changes offset twice in a week."""

_REPEAT_LOOKBACK = timedelta(hours=3)
"""Longer than any repeated (fall-back) span, to spot that ``after`` lies in one."""

_MINUTE = timedelta(minutes=1)

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = {
    name: i
    for i, name in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
        start=1,
    )
}
_DOW_NAMES = {name: i for i, name in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    lo: int
    hi: int
    names: dict[str, int]
    star_hi: int


_FIELDS = (
    _FieldSpec("minute", 0, 59, {}, 59),
    _FieldSpec("hour", 0, 23, {}, 23),
    _FieldSpec("day-of-month", 1, 31, {}, 31),
    _FieldSpec("month", 1, 12, _MONTH_NAMES, 12),
    _FieldSpec("day-of-week", 0, 7, _DOW_NAMES, 6),
)

_ITEM_RE = re.compile(r"(\*|[0-9a-z]+)(?:-([0-9a-z]+))?(?:/([0-9]+))?")
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class CronSchedule:
    """A parsed 5-field cron expression.

    ``weekdays`` uses 0-6 with 0 = Sunday. ``dom_star``/``dow_star``: that field's text
    starts with ``*`` (unrestricted for the day rule). ``wildcard``: the minute or hour
    text starts with ``*`` (the job fires by elapsed time through DST changes).
    ``expr`` is the normalized 5-field text (macros expanded, names lower case).
    """

    expr: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    dom_star: bool
    dow_star: bool
    wildcard: bool
    _sorted: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _possible: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_sorted",
            tuple(sorted(s) for s in (self.minutes, self.hours, self.days, self.months)),
        )
        possible = any(d <= _MAX_DAYS[m] for m in self.months for d in self.days)
        object.__setattr__(self, "_possible", possible)

    @property
    def fixed(self) -> bool:
        """True for a fixed-time job (neither minute nor hour text starts with ``*``)."""
        return not self.wildcard

    @property
    def can_fire(self) -> bool:
        """False when no calendar date can ever match (e.g. ``0 0 31 2 *``)."""
        if not (self.dom_star or self.dow_star):
            return True  # either-rule: every month has every weekday
        return self._possible

    def matches_day(self, year: int, month: int, day: int) -> bool:
        """Whether the date matches month, day-of-month and day-of-week (vixie rule)."""
        if month not in self.months:
            return False
        wd = (date(year, month, day).weekday() + 1) % 7
        if self.dom_star or self.dow_star:
            return day in self.days and wd in self.weekdays
        return day in self.days or wd in self.weekdays

    def matches(self, wall: datetime) -> bool:
        """Whether a (naive, local) wall time matches every field; seconds are ignored."""
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and self.matches_day(wall.year, wall.month, wall.day)
        )

    def _days_of(self, year: int, month: int, first_day: int) -> Iterator[int]:
        ndays = calendar.monthrange(year, month)[1]
        wd1 = (date(year, month, 1).weekday() + 1) % 7
        days, weekdays = self.days, self.weekdays
        if self.dom_star or self.dow_star:
            all_weekdays = len(weekdays) == 7
            sorted_days = self._sorted[2]
            for day in sorted_days[bisect_left(sorted_days, first_day) :]:
                if day > ndays:
                    return
                if all_weekdays or (wd1 + day - 1) % 7 in weekdays:
                    yield day
        else:
            for day in range(first_day, ndays + 1):
                if day in days or (wd1 + day - 1) % 7 in weekdays:
                    yield day

    def walls_from(
        self, start: datetime, end_year: int, tzinfo: timezone | None = None
    ) -> Iterator[datetime]:
        """Matching wall times >= ``start`` (seconds ignored), increasing, up to end_year.

        ``start`` is naive; the results are naive, or carry ``tzinfo`` when given (a
        shortcut for callers that shift them by an offset into UTC).
        """
        minutes, hours, _, months = self._sorted
        y, mo, d, h, mi = start.year, start.month, start.day, start.hour, start.minute
        first = True  # still on the start's month/day/hour
        while y <= end_year:
            for month in months:
                if first:
                    if month < mo:
                        continue
                    if month > mo:
                        first = False
                for day in self._days_of(y, month, d if first else 1):
                    if first and day > d:
                        first = False
                    for hour in hours:
                        if first:
                            if hour < h:
                                continue
                            if hour > h:
                                first = False
                        for minute in minutes:
                            if first:
                                if minute < mi:
                                    continue
                                first = False
                            yield datetime(y, month, day, hour, minute, tzinfo=tzinfo)
                        first = False
                    first = False
                first = False
            first = False
            y += 1


def _cron_error(expr: str, problem: str) -> UsageError:
    return UsageError(f"invalid cron expression {expr!r}: {problem}")


def _parse_value(tok: str, spec: _FieldSpec, expr: str) -> int:
    if tok.isdigit():
        value = int(tok)
    elif tok in spec.names:
        return spec.names[tok]
    else:
        raise _cron_error(expr, f"unknown {spec.name} value {tok!r}")
    if not spec.lo <= value <= spec.hi:
        raise _cron_error(expr, f"{spec.name} value {value} out of range {spec.lo}-{spec.hi}")
    return value


def _parse_field(text: str, spec: _FieldSpec, expr: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        m = _ITEM_RE.fullmatch(item)
        if not item or m is None:
            raise _cron_error(expr, f"bad {spec.name} field {text!r}")
        start, end, step_text = m.groups()
        if start == "*":
            if end is not None:
                raise _cron_error(expr, f"bad {spec.name} field {text!r}")
            lo, hi = spec.lo, spec.star_hi
        else:
            lo = _parse_value(start, spec, expr)
            if end is None:
                if step_text is not None:
                    raise _cron_error(
                        expr,
                        f"{item!r} in {spec.name} field: a step needs a range "
                        f"(write {start}-{spec.hi}/{step_text} or */{step_text})",
                    )
                hi = lo
            else:
                hi = _parse_value(end, spec, expr)
                if lo > hi:
                    raise _cron_error(expr, f"wrapping range {item!r} in {spec.name} field")
        step = int(step_text) if step_text is not None else 1
        if step == 0:
            raise _cron_error(expr, f"zero step in {spec.name} field {text!r}")
        values.update(range(lo, hi + 1, step))
    if spec.name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


@lru_cache(maxsize=1024)
def parse_cron(expr: str) -> CronSchedule:
    """Parse a 5-field cron expression or a macro (``@daily``...) into a CronSchedule.

    Fields: minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or jan-dec, day-of-week
    0-7 or sun-sat (7 = Sunday); with ``*``, lists, ranges and steps (``*/15``,
    ``1-10/2``); names are case-insensitive.

    Raises UsageError ``invalid cron expression 'EXPR': ...`` for seconds/year fields,
    ``N/step`` without a range, wrapping ranges, zero steps, out-of-range values,
    ``@reboot`` (not a schedule), empty input or anything else unreadable.
    """
    if not isinstance(expr, str):
        raise _cron_error(str(expr), "not text")
    text = expr.strip().lower()
    if not text:
        raise _cron_error(expr, "empty expression")
    if text.startswith("@"):
        if text == "@reboot":
            raise _cron_error(expr, "@reboot is not a time schedule")
        if text not in MACROS:
            raise _cron_error(
                expr,
                "unknown macro (use @yearly @annually @monthly @weekly @daily @midnight @hourly)",
            )
        text = MACROS[text]
    parts = re.split(r"[ \t]+", text)
    if len(parts) != 5:
        raise _cron_error(
            expr,
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}",
        )
    minutes, hours, days, months, weekdays = (
        _parse_field(part, spec, expr) for part, spec in zip(parts, _FIELDS, strict=False)
    )
    return CronSchedule(
        expr=" ".join(parts),
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=weekdays,
        dom_star=parts[2].startswith("*"),
        dow_star=parts[4].startswith("*"),
        wildcard=parts[0].startswith("*") or parts[1].startswith("*"),
    )


def validate_cron_expr(expr: str) -> str | None:
    """The error message for an invalid cron expression, or None (``@reboot`` is valid)."""
    if isinstance(expr, str) and expr.strip().lower() == "@reboot":
        return None
    try:
        parse_cron(expr)
    except UsageError as exc:
        return str(exc)
    return None


def _naive(instant: datetime, off: timedelta) -> datetime:
    return (instant + off).replace(tzinfo=None)


def _cron_fires(
    sched: CronSchedule, zone: ZoneInfo, after: datetime, until: datetime | None = None
) -> Iterator[datetime]:
    """Every fire time of ``sched`` in ``zone`` in (after, until], increasing, aware UTC.

    Walks segments of constant UTC offset. Inside one, matching wall times map one-to-one
    to instants; at each offset change the fixed-job rules for gaps and repeats apply.
    """
    if not sched.can_fire:
        return
    fixed = sched.fixed
    start = after.astimezone(UTC)
    if until is None:
        until = datetime.max.replace(tzinfo=UTC)
    end_year = min(start.astimezone(zone).year + SEARCH_YEARS, datetime.max.year - 1)
    inclusive = False
    skip_below: datetime | None = None  # fixed jobs: walls below this already fired
    change: datetime | None
    if fixed:
        back = start - _REPEAT_LOOKBACK
        off_back = utc_offset(zone, back)
        if off_back > utc_offset(zone, start):
            change = first_offset_change(zone, back, start)
            skip_below = _naive(change, off_back)
    while True:
        off = utc_offset(zone, start)
        wall = _naive(start, off)
        floor = wall.replace(second=0, microsecond=0)
        first_wall = floor if inclusive and floor == wall else floor + _MINUTE
        if skip_below is not None and first_wall < skip_below:
            first_wall = skip_below
        horizon = start  # the offset is known to be `off` on [start, horizon]
        change = None
        for w in sched.walls_from(first_wall, end_year, UTC):
            instant = w - off
            if instant > horizon:
                while change is None and horizon < instant:
                    probe = horizon + _PROBE
                    if utc_offset(zone, probe) != off:
                        change = first_offset_change(zone, horizon, probe)
                    else:
                        horizon = probe
                if change is not None and instant >= change:
                    break
            if instant > until:
                return
            yield instant
        else:
            return
        off_new = utc_offset(zone, change)
        skip_below = None
        start, inclusive = change, True
        if fixed and off_new > off:
            gap_end = _naive(change, off_new)
            hit = next(sched.walls_from(_naive(change, off), end_year), None)
            if hit is not None and hit < gap_end:
                if change > until:
                    return
                yield change
                inclusive = False
        elif fixed and off_new < off:
            skip_below = _naive(change, off)


def _require_aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime")


def _interval_us(trigger: Trigger) -> int:
    if trigger.every_seconds is None or not trigger.every_seconds > 0:
        raise ValueError("an interval trigger needs every_seconds > 0")
    every_us = round(trigger.every_seconds * 1_000_000)
    if every_us <= 0:
        raise ValueError("an interval trigger needs every_seconds >= 1 microsecond")
    return every_us


def _anchor_us(trigger: Trigger) -> int:
    if trigger.anchor is None:
        raise ValueError("a fixed-rate interval trigger needs an anchor")
    return to_us(trigger.anchor)


def next_fire(trigger: Trigger, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (aware, any zone), as aware UTC.

    cron: read in zone ``trigger.tz`` with the DST rules in the module docstring; None
    when the expression can never match (``0 0 31 2 *``) or nothing matches within
    SEARCH_YEARS. interval (fixed rate): the first ``anchor + k*every`` (k >= 0) after
    ``after``, in exact integer microseconds. interval after completion: ``after + every``
    (pass the end of the previous run). once: ``at`` if later, else None. reboot and
    manual: None.

    Raises UsageError for a bad cron expression or zone, ValueError for a naive ``after``
    or an incomplete trigger.
    """
    _require_aware("after", after)
    kind = trigger.kind
    if kind == TriggerKind.CRON:
        return next(_cron_iter(trigger, after), None)
    if kind == TriggerKind.INTERVAL:
        every_us = _interval_us(trigger)
        after_us = to_us(after)
        if trigger.after_completion:
            return from_us(after_us + every_us)
        anchor_us = _anchor_us(trigger)
        if anchor_us > after_us:
            return from_us(anchor_us)
        k = (after_us - anchor_us) // every_us + 1
        return from_us(anchor_us + k * every_us)
    if kind == TriggerKind.ONCE:
        if trigger.at is None:
            raise ValueError("a once trigger needs at")
        return trigger.at.astimezone(UTC) if trigger.at > after else None
    return None


def _cron_iter(
    trigger: Trigger, after: datetime, until: datetime | None = None
) -> Iterator[datetime]:
    if trigger.expr is None:
        raise ValueError("a cron trigger needs expr")
    return _cron_fires(parse_cron(trigger.expr), parse_zone(trigger.tz), after, until)


def iter_fires(trigger: Trigger, after: datetime, until: datetime) -> Iterator[datetime]:
    """Every fire time in (after, until], increasing, as aware UTC.

    Agrees with repeated :func:`next_fire`. An after-completion interval yields at most
    the single next fire (later ones depend on when runs end). Raises as next_fire.
    """
    _require_aware("after", after)
    _require_aware("until", until)
    kind = trigger.kind
    if kind == TriggerKind.CRON:
        return _cron_iter(trigger, after, until)
    return _other_fires(trigger, after, until)


def _other_fires(trigger: Trigger, after: datetime, until: datetime) -> Iterator[datetime]:
    kind = trigger.kind
    if kind == TriggerKind.INTERVAL and not trigger.after_completion:
        every_us = _interval_us(trigger)
        anchor_us = _anchor_us(trigger)
        k, last = _interval_k_range(anchor_us, every_us, to_us(after), to_us(until))
        for j in range(k, last + 1):
            yield from_us(anchor_us + j * every_us)
    else:
        fire = next_fire(trigger, after)
        if fire is not None and fire <= until:
            yield fire


def _interval_k_range(
    anchor_us: int, every_us: int, after_us: int, until_us: int
) -> tuple[int, int]:
    """The k range [first, last] of windows ``anchor + k*every`` in (after, until], k >= 0."""
    first = max(0, (after_us - anchor_us) // every_us + 1)
    last = (until_us - anchor_us) // every_us
    return first, last


def count_fires(trigger: Trigger, after: datetime, until: datetime) -> int:
    """How many fire times lie in (after, until]; ``len(list(iter_fires(...)))``.

    O(1) for intervals. Raises as next_fire.
    """
    _require_aware("after", after)
    _require_aware("until", until)
    if trigger.kind == TriggerKind.INTERVAL and not trigger.after_completion:
        first, last = _interval_k_range(
            _anchor_us(trigger), _interval_us(trigger), to_us(after), to_us(until)
        )
        return max(0, last - first + 1)
    return sum(1 for _ in iter_fires(trigger, after, until))


def describe(trigger: Trigger) -> str:
    """Short human text for listings.

    ``30 2 * * * (Europe/Berlin)``, ``every 5m``, ``every 5m after completion``,
    ``at 2026-12-01T08:00:00Z``, ``@reboot``, ``manual``.
    """
    kind = trigger.kind
    if kind == TriggerKind.CRON:
        return f"{trigger.expr} ({trigger.tz})"
    if kind == TriggerKind.INTERVAL:
        text = f"every {format_duration(trigger.every_seconds or 0)}"
        return text + " after completion" if trigger.after_completion else text
    if kind == TriggerKind.ONCE:
        return f"at {iso(trigger.at)}"
    if kind == TriggerKind.REBOOT:
        return "@reboot"
    return "manual"
