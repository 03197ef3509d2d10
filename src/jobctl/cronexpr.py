"""The 5-field cron expression: parse, match, and wall-clock iteration (README, Cron expressions).

Pure and zone-free: an expression is matched against naive wall times; the DST rules
that map wall times to instants live in :mod:`jobctl.triggers`.

Fields: minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or jan-dec, day-of-week
0-7 or sun-sat (0 and 7 are Sunday), with ``*``, lists, ranges and steps. Two
extensions: ``L`` alone in day-of-month is the month's last day; ``D#N`` in day-of-week
(N 1-5, it may stand in a list) is the Nth weekday D of the month. Both count as
restricted for the day rule: when neither day field's text starts with ``*``, a day
matches when either field matches; otherwise both must (vixie cron, cronie).
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from functools import lru_cache

from .errors import UsageError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The schedule macros and the 5 fields each stands for (``@reboot`` is not a schedule)."""

REBOOT = "@reboot"

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
_NTH_RE = re.compile(r"([0-9a-z]+)#([0-9]+)")
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_MONTH_LENGTHS = {m: (28, 29) if m == 2 else (n,) for m, n in enumerate(_DAYS_IN_MONTH, start=1)}


@dataclass(frozen=True)
class CronSchedule:
    """A parsed 5-field cron expression.

    ``weekdays`` uses 0-6 with 0 = Sunday. ``last_day``: day-of-month is ``L``.
    ``nth_weekdays``: the ``(weekday, n)`` pairs of ``D#N`` items. ``dom_star``/``dow_star``:
    that field's text starts with ``*`` (unrestricted for the day rule). ``wildcard``: the
    minute or hour text starts with ``*`` (the job fires by elapsed time through DST
    changes). ``expr`` is the normalized 5-field text (macros expanded, names lower case).
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
    last_day: bool = False
    nth_weekdays: frozenset[tuple[int, int]] = frozenset()
    _sorted: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _possible: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_sorted",
            tuple(sorted(s) for s in (self.minutes, self.hours, self.days, self.months)),
        )
        object.__setattr__(self, "_possible", self._any_date_matches())

    def _any_date_matches(self) -> bool:
        # Every month length starts on every weekday somewhere in the 400-year cycle, so
        # trying each (month, length, weekday of the 1st) decides it exactly.
        for month in self.months:
            for ndays in _MONTH_LENGTHS[month]:
                for wd1 in range(7):
                    if any(self._day_matches(d, ndays, wd1) for d in range(1, ndays + 1)):
                        return True
        return False

    @property
    def fixed(self) -> bool:
        """True for a fixed-time job (neither minute nor hour text starts with ``*``)."""
        return not self.wildcard

    @property
    def can_fire(self) -> bool:
        """False when no calendar date can ever match (``0 0 31 2 *``, ``0 0 30 2 *``)."""
        return self._possible

    def _day_matches(self, day: int, ndays: int, wd1: int) -> bool:
        """Day rule for ``day`` of a month of ``ndays`` days whose 1st is weekday ``wd1``."""
        dom = day in self.days or (self.last_day and day == ndays)
        wd = (wd1 + day - 1) % 7
        dow = wd in self.weekdays or (wd, (day - 1) // 7 + 1) in self.nth_weekdays
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow

    def matches_day(self, year: int, month: int, day: int) -> bool:
        """Whether the date matches month, day-of-month and day-of-week (vixie rule)."""
        if month not in self.months:
            return False
        wd1 = (date(year, month, 1).weekday() + 1) % 7
        return self._day_matches(day, calendar.monthrange(year, month)[1], wd1)

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
        if self.last_day or self.nth_weekdays:
            for day in range(first_day, ndays + 1):
                if self._day_matches(day, ndays, wd1):
                    yield day
            return
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
        if not self._possible:
            return
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


def _unsupported(text: str, spec: _FieldSpec, expr: str) -> None:
    """Name the cron dialects' extensions jobctl does not take, instead of 'bad field'."""
    if "?" in text:
        raise _cron_error(expr, f"'?' in {spec.name} field is not supported (use *)")
    if spec.name == "day-of-month" and re.search(r"[0-9l]w|w$", text):
        raise _cron_error(expr, "W (nearest weekday) is not supported")
    if spec.name == "day-of-month" and "l" in text:
        raise _cron_error(expr, "L stands alone in the day-of-month field")
    if spec.name == "day-of-week" and re.search(r"[0-7]l|^l$", text):
        raise _cron_error(expr, "L in day-of-week is not supported (use D#N)")
    if re.search(r"(^|[,/-])h($|[(,/-])", text):
        raise _cron_error(expr, f"H in the {spec.name} field needs the job's name to resolve")
    if "#" in text and spec.name != "day-of-week":
        raise _cron_error(expr, f"'#' goes in the day-of-week field, not {spec.name}")


def _parse_field(
    text: str, spec: _FieldSpec, expr: str
) -> tuple[frozenset[int], frozenset[tuple[int, int]]]:
    _unsupported(text, spec, expr)
    values: set[int] = set()
    nth: set[tuple[int, int]] = set()
    for item in text.split(","):
        if spec.name == "day-of-week" and "#" in item:
            m_nth = _NTH_RE.fullmatch(item)
            if m_nth is None:
                raise _cron_error(expr, f"bad day-of-week item {item!r}: use D#N, e.g. 5#2")
            weekday = _parse_value(m_nth.group(1), spec, expr) % 7
            n = int(m_nth.group(2))
            if not 1 <= n <= 5:
                raise _cron_error(expr, f"{item!r}: N in D#N is 1-5")
            nth.add((weekday, n))
            continue
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
    return frozenset(values), frozenset(nth)


_HASH_RE = re.compile(r"h(?:\(([0-9a-z]+)-([0-9a-z]+)\))?(?:/([0-9]+))?")
_HASH_RANGES = ((0, 59), (0, 23), (1, 28), (1, 12), (0, 6))
"""The range ``H`` picks from in each field: day-of-month stops at 28 so every month has the
day, day-of-week is 0-6 so Sunday is not counted twice."""


def hash_value(name: str, field_index: int) -> int:
    """The fixed number ``H`` draws from for field ``field_index`` (0 minute ... 4 day-of-week)
    of the job ``name``: the first 16 hex digits of SHA-256 of ``NAME:K``. The same on every
    host and version, so every daemon and ``jobctl next`` agree; renaming a job moves it."""
    import hashlib  # here: OpenSSL's libcrypto is some 3.4 MiB of every daemon's RSS

    return int(hashlib.sha256(f"{name}:{field_index}".encode()).hexdigest()[:16], 16)


_HAS_HASH_RE = re.compile(r"(?:^|[\s,])[hH](?:$|[\s(,/])")


def has_hash(expr: str) -> bool:
    """Whether a cron expression uses ``H`` in a field (macros never do)."""
    return _HAS_HASH_RE.search(expr) is not None


def _resolve_item(item: str, index: int, name: str, expr: str) -> str:
    m = _HASH_RE.fullmatch(item)
    if m is None:
        if "h" in item:
            spec = _FIELDS[index]
            raise _cron_error(expr, f"bad H item {item!r} in {spec.name} field")
        return item
    spec = _FIELDS[index]
    lo, hi = _HASH_RANGES[index]
    lo_text, hi_text, step_text = m.groups()
    if lo_text is not None and hi_text is not None:
        lo, hi = _parse_value(lo_text, spec, expr), _parse_value(hi_text, spec, expr)
        if lo > hi:
            raise _cron_error(expr, f"wrapping range {item!r} in {spec.name} field")
    h = hash_value(name, index)
    if step_text is None:
        return str(lo + h % (hi - lo + 1))
    step = int(step_text)
    if step == 0:
        raise _cron_error(expr, f"zero step in {spec.name} field {item!r}")
    start = lo + h % step
    if start > hi:
        # a step longer than the range: the one value the offset lands on within it
        return str(lo + h % (hi - lo + 1))
    return f"{start}-{hi}/{step}"


@lru_cache(maxsize=4096)
def resolve_hashes(expr: str, name: str) -> str:
    """``expr`` with every ``H`` form replaced by numbers chosen from the job ``name``.

    In a field, ``H`` is one value of the field's range, ``H(A-B)`` one value in A-B, ``H/N``
    every N from an offset ``lo + h % N``, ``H(A-B)/N`` the same within A-B, where ``h`` is
    :func:`hash_value` for that field and the range is minute 0-59, hour 0-23, day-of-month
    1-28, month 1-12, day-of-week 0-6. A resolved day field is a number, so it is restricted
    for the day rule. Text without ``H`` (and macros) comes back as given. Raises UsageError
    for malformed ``H`` items and for anything :func:`parse_cron` refuses in the result.
    """
    if not has_hash(expr):
        return expr
    parts = re.split(r"[ \t]+", expr.strip().lower())
    if len(parts) != 5:
        parse_cron(expr)  # raises the field-count error
    out = [
        ",".join(_resolve_item(item, i, name, expr) for item in part.split(","))
        for i, part in enumerate(parts)
    ]
    resolved = " ".join(out)
    try:
        parse_cron(resolved)
    except UsageError as exc:
        raise _cron_error(expr, str(exc).split(": ", 1)[-1]) from None
    return resolved


def expand_macro(expr: str) -> str:
    """The 5-field text a macro stands for (``@daily`` -> ``0 0 * * *``); other text as is.

    Raises UsageError for ``@reboot`` (not a time schedule) and unknown macros.
    """
    text = expr.strip().lower()
    if not text.startswith("@"):
        return text
    if text == REBOOT:
        raise _cron_error(expr, "@reboot is not a time schedule")
    if text not in MACROS:
        raise _cron_error(
            expr,
            "unknown macro (use @yearly @annually @monthly @weekly @daily @midnight @hourly)",
        )
    return MACROS[text]


@lru_cache(maxsize=1024)
def parse_cron(expr: str) -> CronSchedule:
    """Parse a 5-field cron expression or a macro (``@daily``...) into a CronSchedule.

    See the module docstring for the fields; names are case-insensitive.

    Raises UsageError ``invalid cron expression 'EXPR': ...`` for seconds/year fields,
    ``N/step`` without a range, wrapping ranges, zero steps, out-of-range values, ``?``,
    ``W``, ``H``, ``L`` in a list, ``#`` outside day-of-week or with N outside 1-5,
    ``@reboot`` (not a schedule), empty input or anything else unreadable.
    """
    if not isinstance(expr, str):
        raise _cron_error(str(expr), "not text")
    if not expr.strip():
        raise _cron_error(expr, "empty expression")
    text = expand_macro(expr)
    parts = re.split(r"[ \t]+", text)
    if len(parts) != 5:
        raise _cron_error(
            expr,
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)}"
            + (" (seconds and year fields are not supported)" if len(parts) in (6, 7) else ""),
        )
    last_day = parts[2] == "l"
    fields = [
        (frozenset[int](), frozenset[tuple[int, int]]())
        if i == 2 and last_day
        else _parse_field(part, spec, expr)
        for i, (part, spec) in enumerate(zip(parts, _FIELDS, strict=True))
    ]
    (minutes, _), (hours, _), (days, _), (months, _), (weekdays, nth) = fields
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
        last_day=last_day,
        nth_weekdays=nth,
    )


def validate_cron_expr(expr: str) -> str | None:
    """The error message for an invalid cron expression, or None (``@reboot`` is valid)."""
    if isinstance(expr, str) and expr.strip().lower() == REBOOT:
        return None
    try:
        parse_cron(expr)
    except UsageError as exc:
        return str(exc)
    return None
