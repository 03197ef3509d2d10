"""Durations, time zones and user-given times (SPEC §3).

Durations are float seconds. Zones are IANA names read with :mod:`zoneinfo`. Every
function here is pure: the current time comes in as ``now``; nothing reads the clock.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from jobctl.errors import UsageError

UTC = UTC

_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_DURATION_RE = re.compile(
    rf"(?:(?P<w>{_NUMBER})w)?(?:(?P<d>{_NUMBER})d)?(?:(?P<h>{_NUMBER})h)?"
    rf"(?:(?P<m>{_NUMBER})m)?(?:(?P<s>{_NUMBER})s)?"
)
_BARE_RE = re.compile(_NUMBER)
_UNIT_SECONDS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}


def _bad_duration(text: object) -> UsageError:
    return UsageError(f"invalid duration {text!r}: use e.g. 90, 90s, 5m, 1h30m, 2d, 1w")


#: longer durations would overflow date arithmetic (a window past year 9999)
MAX_DURATION_SECONDS = 100 * 365 * 86400


def parse_duration(text: str) -> float:
    """Parse a DURATION (``90``, ``90s``, ``5m``, ``1h30m``, ``2d``, ``1w``) into seconds.

    Units are w d h m s, each at most once, in that order; a bare number (``0.5`` too) is
    seconds. Surrounding whitespace is ignored. The result is finite, > 0 and at most
    100 years.

    Raises UsageError for anything else.
    """
    if not isinstance(text, str):
        raise _bad_duration(text)
    s = text.strip()
    if _BARE_RE.fullmatch(s):
        seconds = float(s)
    else:
        m = _DURATION_RE.fullmatch(s)
        if not s or m is None or not any(m.groupdict().values()):
            raise _bad_duration(text)
        seconds = 0.0
        for unit, value in m.groupdict().items():
            if value is not None:
                part = float(value) * _UNIT_SECONDS[unit]
                seconds += part
    if not math.isfinite(seconds) or seconds <= 0:
        raise _bad_duration(text)
    if seconds > MAX_DURATION_SECONDS:
        raise UsageError(f"invalid duration {text!r}: at most 100 years")
    return seconds


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


def parse_zone(name: str) -> ZoneInfo:
    """The IANA zone called ``name`` (``Europe/Berlin``, ``UTC``).

    Raises UsageError ``unknown time zone 'X'`` for an unknown name, an empty one, a path
    (absolute or with ``..``), or one that cannot be read as a zone file.
    """
    error = UsageError(f"unknown time zone {name!r}")
    if not isinstance(name, str) or not name or name != name.strip():
        raise error
    if name.startswith("/") or "\\" in name or "\0" in name or ".." in name.split("/"):
        raise error
    try:
        return ZoneInfo(name)
    except Exception as exc:  # ValueError, ZoneInfoNotFoundError, OSError, UnicodeError...
        raise error from exc


def _valid_zone(name: str | None) -> str | None:
    if not name:
        return None
    try:
        parse_zone(name)
    except UsageError:
        return None
    return name


def local_zone_name(
    environ: Mapping[str, str] | None = None,
    *,
    localtime_path: str = "/etc/localtime",
    timezone_path: str = "/etc/timezone",
) -> str:
    """The machine's local IANA zone name, first valid answer wins.

    ``TZ`` from ``environ`` (default ``os.environ``; a leading ``:`` is dropped), then the
    part after ``zoneinfo/`` of the ``/etc/localtime`` symlink's target, then the content of
    ``/etc/timezone``, then ``"UTC"``. Never raises.
    """
    env = os.environ if environ is None else environ
    tz = env.get("TZ")
    if tz:
        found = _valid_zone(tz[1:] if tz.startswith(":") else tz)
        if found:
            return found
    marker = "zoneinfo/"
    for resolve in (os.readlink, os.path.realpath):
        try:
            target = resolve(localtime_path) if os.path.islink(localtime_path) else ""
        except OSError:
            target = ""
        if marker in target:
            found = _valid_zone(target.rsplit(marker, 1)[1])
            if found:
                return found
    try:
        with open(timezone_path, encoding="utf-8") as fh:
            found = _valid_zone(fh.read().strip())
    except (OSError, UnicodeError):
        found = None
    return found or "UTC"


def utc_offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    """The zone's UTC offset at an instant."""
    off = instant.astimezone(zone).utcoffset()
    assert off is not None
    return off


def first_offset_change(zone: ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The first instant in (lo, hi] whose UTC offset in ``zone`` differs from lo's.

    Both are aware; the offset must differ at ``hi``, and exactly one change is assumed in
    between. Found by bisection to the whole second (zone changes fall on whole seconds).
    Returns aware UTC.
    """
    base = utc_offset(zone, lo)
    lo_s = math.floor(lo.timestamp())
    hi_s = math.ceil(hi.timestamp())
    # invariant: offset at lo_s == base, offset at hi_s != base
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if utc_offset(zone, datetime.fromtimestamp(mid, UTC)) == base:
            lo_s = mid
        else:
            hi_s = mid
    return datetime.fromtimestamp(hi_s, UTC)


def resolve_wall_time(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant of the naive wall time ``wall`` in ``zone``, as aware UTC, the cron way.

    A wall time that occurs twice resolves to its first occurrence; one that does not
    exist (a DST gap) resolves to the first instant after the change.
    """
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first
    # In a gap fold=0 uses the offset before the change (an instant after it) and fold=1
    # the offset after (an instant before it); the change lies between the two.
    before = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    lo, hi = min(before, first), max(before, first)
    return first_offset_change(zone, lo, hi)


def _bad_time(text: object) -> UsageError:
    return UsageError(f"invalid time {text!r}: use ISO 8601, e.g. 2026-12-01T08:00")


def parse_time(text: str, tz: str, now: datetime) -> datetime:
    """Parse an absolute time for ``--at``/``--start`` and return it as aware UTC.

    Accepts ISO 8601 date-times (``2026-12-01T08:00``, ``2026-12-01 08:00:00``, with ``Z``
    or an offset), a date alone (midnight), and ``now`` (returns ``now``). A naive time is
    read in zone ``tz``: in a DST gap it moves forward to the first valid instant; when
    repeated it takes the first occurrence. Relative forms are not accepted here (see
    :func:`parse_relative`).

    Raises UsageError for an unreadable time or an unknown zone.
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
