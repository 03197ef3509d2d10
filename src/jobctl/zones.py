"""Time zones, UTC offsets and DST changes (jobctl(1), CATCH-UP AND DST).

Zones are IANA names read with :mod:`zoneinfo`. Pure functions: instants come in as
arguments; nothing reads the clock.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from .errors import UsageError


def zone_error(name: object) -> UsageError:
    """The one message for a zone name that is not an IANA zone this machine knows."""
    return UsageError(f"unknown time zone {name!r}")


def parse_zone(name: str) -> ZoneInfo:
    """The IANA zone called ``name`` (``Europe/Berlin``, ``UTC``).

    Raises UsageError ``unknown time zone 'X'`` for an unknown name, an empty one, a path
    (absolute or with ``..``), or one that cannot be read as a zone file.
    """
    error = zone_error(name)
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


def zone_exists(name: str) -> bool:
    """True when ``name`` is an IANA zone this machine knows (see :func:`parse_zone`)."""
    return _valid_zone(name) is not None
