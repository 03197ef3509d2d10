"""DURATION text <-> seconds, and the times a user gives (``--at``, ``--in``, ``--from``).

Durations are whole seconds (README, Choices where the contract is silent). Every function here is
pure: the current time comes in as ``now``; nothing reads the clock. Zones live in
:mod:`jobctl.zones`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from .errors import UsageError
from .zones import parse_zone, resolve_wall_time

_NUMBER = r"[0-9]+"
_DURATION_RE = re.compile(
    rf"(?:(?P<w>{_NUMBER})w)?(?:(?P<d>{_NUMBER})d)?(?:(?P<h>{_NUMBER})h)?"
    rf"(?:(?P<m>{_NUMBER})m)?(?:(?P<s>{_NUMBER})s)?"
)
_BARE_RE = re.compile(_NUMBER)
_UNIT_SECONDS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}

MAX_DURATION_SECONDS = 100 * 365 * 86400
"""100 years: longer durations would overflow date arithmetic (a window past year 9999)."""


def _bad_duration(text: object) -> UsageError:
    return UsageError(
        f"invalid duration {text!r}: use e.g. 90, 90s, 5m, 1h30m, 2d, 1w "
        "(whole numbers, at least 1s)"
    )


def parse_duration(text: str, *, allow_zero: bool = False) -> float:
    """Parse a DURATION (``90``, ``90s``, ``5m``, ``1h30m``, ``2d``, ``1w``) into seconds.

    Whole numbers only, with units w d h m s, each at most once, largest first; a bare
    whole number is seconds. Surrounding whitespace is ignored. The result is a whole
    number of seconds from 1 (0 too with ``allow_zero``, as ``--jitter`` takes) to 100
    years. ``1.5h``, ``0.5``, ``-1``, ``1e3`` are invalid.

    Raises UsageError for anything else.
    """
    if not isinstance(text, str):
        raise _bad_duration(text)
    s = text.strip()
    if _BARE_RE.fullmatch(s):
        seconds = int(s)
    else:
        m = _DURATION_RE.fullmatch(s)
        if not s or m is None or not any(m.groupdict().values()):
            raise _bad_duration(text)
        seconds = sum(
            int(value) * _UNIT_SECONDS[unit]
            for unit, value in m.groupdict().items()
            if value is not None
        )
    if seconds == 0 and allow_zero:
        return 0.0
    if seconds < 1:
        raise _bad_duration(text)
    if seconds > MAX_DURATION_SECONDS:
        raise UsageError(f"invalid duration {text!r}: at most 100 years")
    return float(seconds)


def format_duration(seconds: float) -> str:
    """The canonical compact form of a number of seconds: ``1h30m``, ``45s``, ``2d``, ``0.5s``.

    Whole seconds are split into w d h m s; a fractional amount is written in seconds with
    at most microsecond precision. ``parse_duration(format_duration(x)) == x`` for positive
    integers. Zero is ``0s``; a negative amount gets a leading ``-``.
    """
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == 0:
        return "0s"
    if seconds != int(seconds):
        text = format(seconds, ".6f").rstrip("0").rstrip(".")
        return (text if text != "0" else "0.000001") + "s"
    rest = int(seconds)
    parts = []
    for unit, size in _UNIT_SECONDS.items():
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


MAX_YEAR = 9899
"""The last year a time may fall in: 100 years (the longest duration) short of the
calendar's end, so no window computed from it overflows."""


def _bad_time(text: object) -> UsageError:
    return UsageError(f"invalid time {text!r}: use ISO 8601, e.g. 2026-12-01T08:00")


def parse_time(text: str, tz: str, now: datetime) -> datetime:
    """Parse an absolute time for ``--at``/``--start`` and return it as aware UTC.

    Accepts ISO 8601 date-times (``2026-12-01T08:00``, ``2026-12-01 08:00:00``, with ``Z``
    or an offset), a date alone (midnight), and ``now`` (returns ``now``). A naive time is
    read in zone ``tz``: in a DST gap it moves forward to the first valid instant; when
    repeated it takes the first occurrence. Relative forms are not accepted here (see
    :func:`parse_relative`).

    Raises UsageError for an unreadable time, a year after MAX_YEAR or an unknown zone.
    """
    if not isinstance(text, str):
        raise _bad_time(text)
    s = text.strip()
    if s.lower() == "now":
        return now.astimezone(UTC)
    if not s or not s[:4].isascii() or not s[:4].isdigit():
        raise _bad_time(text)
    try:
        parsed = datetime.fromisoformat(s)
    except ValueError as exc:
        raise _bad_time(text) from exc
    if parsed.year > MAX_YEAR:
        raise UsageError(f"invalid time {text!r}: at most the year {MAX_YEAR}")
    if parsed.tzinfo is not None:
        return parsed.astimezone(UTC)
    return resolve_wall_time(parsed, parse_zone(tz))


def parse_relative(text: str, now: datetime) -> datetime:
    """``now`` plus a DURATION (``--in 5m``; a leading ``+`` is allowed), as aware UTC.

    Raises UsageError for an invalid duration.
    """
    s = text.strip() if isinstance(text, str) else text
    if isinstance(s, str) and s.startswith("+"):
        s = s[1:]
    return (now + timedelta(seconds=parse_duration(s))).astimezone(UTC)


def parse_since(text: str, tz: str, now: datetime) -> datetime:
    """``--since D|TIME`` (and the API's ``since``): a DURATION back from ``now``
    (``2h``: two hours ago) or an absolute time as :func:`parse_time` reads it (naive in
    zone ``tz``), as aware UTC. Raises UsageError naming both forms."""
    s = text.strip() if isinstance(text, str) else ""
    if s and s[0].isdigit() and not (len(s) >= 5 and s[:4].isdigit() and s[4] == "-"):
        try:
            return now.astimezone(UTC) - timedelta(seconds=parse_duration(s))
        except UsageError:
            pass
    try:
        return parse_time(s, tz, now)
    except UsageError:
        raise UsageError(
            f"invalid --since {text!r}: use a DURATION (2h, 3d) or a time (2026-12-01T08:00)"
        ) from None
