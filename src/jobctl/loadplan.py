"""The load plan: how many runs start and run in each minute (or hour) of a range, and
which cron jobs to move to ``H`` so fewer start together (``jobctl plan``).

Pure: the jobs, their median durations and the range come in; nothing is read or written.
A window is counted in the slot it falls in; a run is counted as running in every slot from
its window's to the one its median duration ends in (a job with no succeeded run yet counts
as running in its window's slot only).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from .clock import from_us, to_us
from .cronexpr import expand_macro, has_hash
from .models import Job, JobState, TriggerKind
from .triggers import excluded, is_fixed_delay, iter_fires, named

SLOT_SECONDS = {"minute": 60, "hour": 3600}
#: how many succeeded runs a job's median duration is taken from
DURATION_RUNS = 20
_PLAIN_MINUTE = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Slot:
    """One minute (or hour) of the plan: the windows that start in it (``jobs``, by name,
    once per window) and how many runs are expected to be running in it."""

    at: datetime
    starts: int
    running: int
    jobs: tuple[str, ...]


def median_durations(durations: Mapping[int, Sequence[float]]) -> dict[int, float]:
    """Each job's median of the durations given (its newest succeeded runs)."""
    return {job_id: statistics.median(d) for job_id, d in durations.items() if d}


def _windows(job: Job, after: datetime, until: datetime) -> list[datetime]:
    trigger = job.trigger
    if trigger.kind in (TriggerKind.MANUAL, TriggerKind.AFTER, TriggerKind.REBOOT):
        return []
    if is_fixed_delay(trigger):
        nxt = job.next_run_at
        return [nxt] if nxt is not None and after < nxt <= until else []
    fires = iter_fires(trigger, after, until)
    spec = job.spec
    if not spec.excepts and not job.except_dates:
        return list(fires)
    # an excluded window never runs (README, Schedule sets)
    return [w for w in fires if not excluded(spec.excepts, job.except_dates, trigger.tz, w)]


def plan_slots(
    jobs: Sequence[Job],
    medians: Mapping[int, float],
    start: datetime,
    hours: float,
    slot_seconds: int,
) -> list[Slot]:
    """Every slot of ``[start, start + hours)`` with a start or a running run, in order.

    Slots are aligned to whole minutes (or hours) of UTC; only active jobs count. Runs of
    windows before ``start`` that are still expected to be running are counted as running.
    """
    slot_us = slot_seconds * 1_000_000
    first = to_us(start) // slot_us
    end = start + timedelta(hours=hours)
    last = (to_us(end) - 1) // slot_us
    if last < first:
        return []
    n = last - first + 1
    starts: list[list[str]] = [[] for _ in range(n)]
    delta = [0] * (n + 1)
    longest = max(medians.values(), default=0.0)
    lookback = timedelta(seconds=longest)
    begin = from_us(first * slot_us) - timedelta(microseconds=1)
    for job in jobs:
        if job.state is not JobState.ACTIVE:
            continue
        duration_us = int(medians.get(job.id, 0.0) * 1_000_000)
        for window in _windows(job, begin - lookback, end - timedelta(microseconds=1)):
            w = to_us(window)
            s0 = w // slot_us - first
            s1 = (w + duration_us - 1) // slot_us - first if duration_us > 0 else s0
            if 0 <= s0 < n:
                starts[s0].append(job.name)
            lo, hi = max(s0, 0), min(s1, n - 1)
            if lo <= hi:
                delta[lo] += 1
                delta[hi + 1] -= 1
    out = []
    running = 0
    for i in range(n):
        running += delta[i]
        if starts[i] or running:
            out.append(
                Slot(
                    from_us((first + i) * slot_us).astimezone(UTC),
                    len(starts[i]),
                    running,
                    tuple(starts[i]),
                )
            )
    return out


def busiest(slots: Sequence[Slot], count: int = 10) -> list[Slot]:
    """The ``count`` slots with the most starts (then the most running), in time order."""
    top = sorted(slots, key=lambda s: (-s.starts, -s.running, s.at))[:count]
    return sorted(top, key=lambda s: s.at)


def chart(
    slots: Sequence[Slot], start: datetime, hours: float, slot_seconds: int, width: int = 60
) -> tuple[str, int, int]:
    """A one-line chart of starts over the range: ``width`` marks (fewer for a short range),
    each the most starts of any slot it covers, scaled to the busiest. Returns the line, the
    slots a mark covers and the most starts in one slot."""
    marks = " ▁▂▃▄▅▆▇█"
    total = max(1, int(hours * 3600) // slot_seconds)
    per_mark = max(1, -(-total // width))
    cells = [0] * (-(-total // per_mark))
    base = to_us(start) // (slot_seconds * 1_000_000)
    for s in slots:
        i = (to_us(s.at) // (slot_seconds * 1_000_000) - base) // per_mark
        if 0 <= i < len(cells):
            cells[i] = max(cells[i], s.starts)
    top = max(cells, default=0)
    if top == 0:
        return " " * len(cells), per_mark, 0
    line = "".join(marks[0 if c == 0 else max(1, round(c / top * 8))] for c in cells)
    return line, per_mark, top


def suggest_spread(jobs: Sequence[Job], slots: Sequence[Slot], max_starts: int) -> list[Job]:
    """The cron jobs to move to ``H`` in the minute field: every one whose minute is a plain
    number and whose windows share a slot with more than ``max_starts`` starts. Each comes
    back with its new trigger (the other fields kept; a macro is written out first), in
    name order."""
    crowded = {name for s in slots if s.starts > max_starts for name in s.jobs}
    out = []
    for job in sorted(jobs, key=lambda j: j.name):
        trigger = job.trigger
        if job.name not in crowded or trigger.kind is not TriggerKind.CRON or not trigger.expr:
            continue
        if has_hash(trigger.expr):
            continue
        fields = expand_macro(trigger.expr).split()
        if len(fields) != 5 or not _PLAIN_MINUTE.fullmatch(fields[0]):
            continue
        moved = named(replace(trigger, expr=" ".join(["H", *fields[1:]])), job.name)
        out.append(replace(job, spec=replace(job.spec, trigger=moved)))
    return out
