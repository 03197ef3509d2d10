"""Which jobs need attention, in which order the overview lists them, and its pages
(README, The dashboard's pages). Pure functions of what the store read and of ``now``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from ..models import JobState, RunState, natural_key
from ..store.values import JobFacts

T = TypeVar("T")

#: jobs (or runs) to a page
PAGE_SIZE = 50
#: a run still unclaimed this long after it became due is late (``jobctl check``'s default)
LATE_SECONDS = 300.0


def attention(f: JobFacts, now: datetime, late_seconds: float = LATE_SECONDS) -> tuple[str, ...]:
    """Why a job needs someone to look at it, most serious first; () when it does not.

    ``dead``: its last run ended dead. ``failing``: a run waits for a retry. ``late``: a run
    of an active job has been due and unclaimed for more than ``late_seconds``.
    ``paused by failures``: ``--pause-after-failures`` paused it. ``notifications
    failing``: a notification about it could not be delivered."""
    reasons: list[str] = []
    if f.last_state is RunState.DEAD:
        reasons.append("dead")
    if f.failing:
        reasons.append("failing")
    if (
        f.state is JobState.ACTIVE
        and f.oldest_open_due is not None
        and f.oldest_open_due < now - timedelta(seconds=late_seconds)
    ):
        reasons.append("late")
    if f.paused_reason == "failures":
        reasons.append("paused by failures")
    if f.notifications_failed:
        reasons.append("notifications failing")
    return tuple(reasons)


@dataclass(frozen=True)
class Ranked:
    facts: JobFacts
    attention: tuple[str, ...]


def rank(
    facts: Sequence[JobFacts], now: datetime, *, last_state: str | None = None
) -> list[Ranked]:
    """The overview's order: the jobs that need attention, then the rest, each part by
    name in natural order (``job-2`` before ``job-10``). ``last_state`` keeps the jobs whose
    last run is in that state (``none``: jobs that never ran; ``attention``: only the jobs
    that need it)."""
    ranked = [Ranked(f, attention(f, now)) for f in facts]
    if last_state == "attention":
        ranked = [r for r in ranked if r.attention]
    elif last_state == "none":
        ranked = [r for r in ranked if r.facts.last_state is None]
    elif last_state is not None:
        ranked = [
            r
            for r in ranked
            if r.facts.last_state is not None and r.facts.last_state.value == last_state
        ]
    ranked.sort(key=lambda r: (not r.attention, natural_key(r.facts.name)))
    return ranked


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list: its items, its number (from 1), how many pages and items."""

    items: list[T]
    number: int
    pages: int
    total: int

    @property
    def first_index(self) -> int:
        """The 1-based position of the first item shown (0 when there are none)."""
        return (self.number - 1) * PAGE_SIZE + 1 if self.items else 0


def page_of(items: Sequence[T], number: int, size: int = PAGE_SIZE) -> Page[T]:
    """Page ``number`` (from 1; one past the last gives the last) of ``items``."""
    pages = max(1, math.ceil(len(items) / size))
    number = min(max(number, 1), pages)
    start = (number - 1) * size
    return Page(list(items[start : start + size]), number, pages, len(items))
