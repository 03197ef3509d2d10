"""The only module that reads real time.

Everything else takes ``now`` as an argument. Times are aware UTC datetimes; the store
keeps them as integer microseconds since the epoch (see :func:`to_us` / :func:`from_us`).
"""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(dt: datetime) -> int:
    """Aware datetime -> integer microseconds since the Unix epoch (UTC)."""
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@functools.lru_cache(maxsize=4096)
def from_us(us: int) -> datetime:
    """Integer microseconds since the epoch -> aware UTC datetime. Memoised: the rows of
    a burst share their instants (the window, the claim time), and a datetime is
    immutable."""
    return _EPOCH + timedelta(0, 0, us)


@functools.lru_cache(maxsize=4096)
def iso(dt: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z`` suffix (jobctl(1), DESCRIPTION: ``--json``), or None. Memoised
    like :func:`from_us` (each child's ``JOBCTL_SCHEDULED_FOR`` of a burst is the same text;
    equal instants in other zones give the same UTC text)."""
    if dt is None:
        return None
    if dt.utcoffset():
        dt = dt.astimezone(UTC)
    return dt.replace(tzinfo=None).isoformat() + "Z"


class Clock(Protocol):
    """Where the daemon reads time: ``now`` decides what is due, ``monotonic`` how long
    to sleep (it never goes back)."""

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """Wall-clock time for deciding *what* is due, monotonic time for *how long* to sleep."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that only moves when told to. For the pure scheduling logic's tests."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._mono = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set(self, when: datetime) -> None:
        """Jump the wall clock (a suspend, an NTP step); monotonic time moves on only
        forward, by as much as the wall clock did when it moved forward."""
        self._mono += max((when - self._now).total_seconds(), 0.0)
        self._now = when
