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

import bisect
import functools
import heapq
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from .clock import from_us, iso, to_us
from .cronexpr import CronSchedule, has_hash, hash_value, parse_cron, resolve_hashes
from .durations import format_duration, parse_duration
from .errors import UsageError
from .models import Job, JobState, Trigger, TriggerKind
from .zones import first_offset_change, parse_zone, utc_offset

SEARCH_YEARS = 50
"""How far ahead (in years of wall time) a cron search looks before giving up."""

_PROBE = timedelta(days=7)
"""Step for looking for zone offset changes; no zone changes offset twice in a week."""

_REPEAT_LOOKBACK = timedelta(hours=3)
"""Longer than any repeated (fall-back) span, to spot that ``after`` lies in one."""

_MINUTE = timedelta(minutes=1)


def is_fixed_rate(trigger: Trigger) -> bool:
    """An interval trigger whose windows sit on ``anchor + k*every`` (not after completion)."""
    return trigger.kind is TriggerKind.INTERVAL and not trigger.after_completion


def is_fixed_delay(trigger: Trigger) -> bool:
    """An interval trigger whose next window is ``every`` after the previous run ends."""
    return trigger.kind is TriggerKind.INTERVAL and trigger.after_completion


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
    """The first window of a fixed rate, in microseconds: its anchor, or one interval
    after it when the anchor only sets the phase (``Trigger.phase_only``); every window
    is that plus ``k*every``, k >= 0."""
    if trigger.anchor is None:
        raise ValueError("a fixed-rate interval trigger needs an anchor")
    if trigger.phase_only:
        return to_us(trigger.anchor) + _interval_us(trigger)
    return to_us(trigger.anchor)


def first_window(trigger: Trigger) -> datetime:
    """A fixed rate's first window: its anchor, or one interval later when the anchor only
    sets the phase. Raises ValueError for another trigger."""
    return from_us(_anchor_us(trigger))


def next_fire(trigger: Trigger, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (aware, any zone), as aware UTC.

    A set: the least of its members' next fire times. Outside the trigger's active range
    nothing fires (None once ``active_until`` is passed).

    cron: read in zone ``trigger.tz`` with the DST rules in the module docstring; None
    when the expression can never match (``0 0 31 2 *``) or nothing matches within
    SEARCH_YEARS. interval (fixed rate): the first ``anchor + k*every`` (k >= 0; k >= 1
    when the anchor only sets the phase) after ``after``, in exact integer microseconds.
    interval after completion: ``after + every`` (pass the end of the previous run).
    once: ``at`` if later, else None. reboot and manual: None.

    Raises UsageError for a bad cron expression or zone, ValueError for a naive ``after``
    or an incomplete trigger.
    """
    _require_aware("after", after)
    if trigger.active_from is None and trigger.active_until is None:
        return _next_fire(trigger, after)
    return next(_iter_all(trigger, after), None)


def _next_fire(trigger: Trigger, after: datetime) -> datetime | None:
    kind = trigger.kind
    if kind == TriggerKind.CRON:
        return next(_cron_iter(trigger, after), None)
    if kind == TriggerKind.SET:
        fires = [f for m in members(trigger) if (f := _next_fire(m, after)) is not None]
        return min(fires) if fires else None
    if kind == TriggerKind.INTERVAL:
        every_us = _interval_us(trigger)
        after_us = to_us(after)
        if is_fixed_delay(trigger):
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


def next_fires(trigger: Trigger, after: datetime, count: int) -> list[datetime]:
    """The first ``count`` fire times strictly after ``after``, increasing, as aware UTC.

    What ``next`` prints: exactly the windows the daemon fires. A fixed-delay interval
    gives at most its single next window (later ones follow when each run ends). Raises
    as next_fire.
    """
    _require_aware("after", after)
    if has_windows(trigger) or trigger.active_from or trigger.active_until:
        fires = _iter_all(trigger, after)
        out = [fire for fire, _ in zip(fires, range(count), strict=False)]
        return out[:1] if is_fixed_delay(trigger) else out
    out = []
    t = after
    while len(out) < count:
        nt = next_fire(trigger, t)
        if nt is None:
            break
        out.append(nt)
        if is_fixed_delay(trigger):
            break
        t = nt
    return out


#: how many excluded windows in a row ``upcoming`` passes over before it stops looking
MAX_EXCLUDED_RUN = 100_000


def upcoming(
    job: Job, after: datetime, count: int, *, with_excluded: bool = False
) -> list[tuple[datetime, bool]]:
    """The next ``count`` windows of a stored job after ``after`` (``next NAME``), each
    with whether it is excluded (``--except``, a calendar's date).

    With ``with_excluded`` the excluded windows are listed (and counted) among the others;
    without, they are passed over (at most :data:`MAX_EXCLUDED_RUN` in a row). A
    cancelled or done job has none; a paused one has those it would fire if resumed now.
    An active fixed-delay job has only its stored next window, since each later one is
    ``every`` after the run before it ends.
    """
    if job.state in (JobState.CANCELLED, JobState.DONE) or count <= 0:
        return []
    spec = job.spec
    if is_fixed_delay(job.trigger) and job.state is JobState.ACTIVE:
        nxt = job.next_run_at
        fires: Iterator[datetime] = iter([nxt] if nxt is not None and nxt > after else [])
    elif has_windows(job.trigger):
        fires = _iter_all(job.trigger, after)
    else:
        fires = iter(next_fires(job.trigger, after, count))
    if not spec.excepts and not job.except_dates:
        return [(f, False) for f, _ in zip(fires, range(count), strict=False)]
    out: list[tuple[datetime, bool]] = []
    passed = 0
    tz = job.trigger.tz
    for fire in fires:
        out_of = excluded(spec.excepts, job.except_dates, tz, fire)
        if out_of and not with_excluded:
            passed += 1
            if passed > MAX_EXCLUDED_RUN:
                break
            continue
        passed = 0
        out.append((fire, out_of))
        if len(out) >= count:
            break
    return out


def named(trigger: Trigger, name: str) -> Trigger:
    """``trigger`` as the job ``name`` fires it: a cron expression's ``H`` (or that of each
    cron member of a set) resolved from the name (``resolved``). Triggers without ``H``
    come back as they are."""
    expr = trigger.expr
    if trigger.kind not in (TriggerKind.CRON, TriggerKind.SET) or not expr or not has_hash(expr):
        return trigger
    if trigger.kind is TriggerKind.SET:
        resolved = SET_SEPARATOR.join(
            t if t.startswith(EVERY_PREFIX) else resolve_hashes(t, name) for t in split_set(expr)
        )
    else:
        resolved = resolve_hashes(expr, name)
    return trigger if trigger.resolved == resolved else replace(trigger, resolved=resolved)


def cron_text(trigger: Trigger) -> str:
    """The cron expression a cron trigger is evaluated with: ``resolved`` when it has ``H``."""
    expr = trigger.expr
    if expr is None:
        raise ValueError("a cron trigger needs expr")
    if trigger.resolved is not None:
        return trigger.resolved
    if has_hash(expr):
        raise ValueError(f"cron expression {expr!r} has H but no job name resolved it")
    return expr


def hashed_phase(name: str, every_seconds: float) -> datetime:
    """The anchor of ``--every D --start H``: ``h % D`` seconds after 1970-01-01T00:00Z,
    where ``h`` is the job's hash value for field 0 (so every host agrees)."""
    period = max(1, int(every_seconds))
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=hash_value(name, 0) % period)


def _cron_iter(
    trigger: Trigger, after: datetime, until: datetime | None = None
) -> Iterator[datetime]:
    return _cron_fires(parse_cron(cron_text(trigger)), parse_zone(trigger.tz), after, until)


def iter_fires(trigger: Trigger, after: datetime, until: datetime) -> Iterator[datetime]:
    """Every fire time in (after, until], increasing, as aware UTC.

    Agrees with repeated :func:`next_fire`. An after-completion interval yields at most
    the single next fire (later ones depend on when runs end). Raises as next_fire.
    """
    _require_aware("after", after)
    _require_aware("until", until)
    return _iter_all(trigger, after, until)


def _iter_all(
    trigger: Trigger, after: datetime, until: datetime | None = None
) -> Iterator[datetime]:
    """Every fire time in (after, until] (no end: None) within the active range."""
    lo, hi = trigger.active_from, trigger.active_until
    if lo is not None and after < lo:
        after = lo - _US
    if hi is not None and (until is None or until > hi):
        until = hi
    if until is not None and until <= after:
        return iter(())
    return _fires(trigger, after, until)


def _fires(trigger: Trigger, after: datetime, until: datetime | None) -> Iterator[datetime]:
    kind = trigger.kind
    if kind == TriggerKind.CRON:
        return _cron_iter(trigger, after, until)
    if kind == TriggerKind.SET:
        return _set_fires(trigger, after, until)
    if until is None:
        if is_fixed_rate(trigger):
            return _rate_fires(trigger, after)
        until = datetime.max.replace(tzinfo=UTC)
    return _other_fires(trigger, after, until)


def _rate_fires(trigger: Trigger, after: datetime) -> Iterator[datetime]:
    every_us = _interval_us(trigger)
    anchor_us = _anchor_us(trigger)
    k = max(0, (to_us(after) - anchor_us) // every_us + 1)
    while True:
        yield from_us(anchor_us + k * every_us)
        k += 1


def _set_fires(trigger: Trigger, after: datetime, until: datetime | None) -> Iterator[datetime]:
    """The members' fire times merged; two members firing at one instant make one."""
    last: datetime | None = None
    for fire in heapq.merge(*(_fires(m, after, until) for m in members(trigger))):
        if fire != last:
            last = fire
            yield fire


@functools.lru_cache(maxsize=1024)
def members(trigger: Trigger) -> tuple[Trigger, ...]:
    """The triggers of a set, in the order given (a single trigger: itself). A member is
    a cron expression or a fixed rate anchored at the set's anchor, in the set's zone;
    neither carries the set's active range (the set applies it)."""
    if trigger.kind is not TriggerKind.SET:
        return (trigger,)
    out: list[Trigger] = []
    texts = split_set(trigger.expr or "")
    # a set with H in a cron member: each member keeps its text and is fired resolved
    numbers = split_set(trigger.resolved) if trigger.resolved else texts
    for text, resolved in zip(texts, numbers, strict=True):
        if text.startswith(EVERY_PREFIX):
            seconds = parse_duration(text[len(EVERY_PREFIX) :])
            out.append(
                Trigger(
                    TriggerKind.INTERVAL,
                    tz=trigger.tz,
                    expr=format_duration(seconds),
                    every_seconds=seconds,
                    anchor=trigger.anchor,
                    phase_only=trigger.phase_only,
                )
            )
        else:
            out.append(
                Trigger(
                    TriggerKind.CRON,
                    tz=trigger.tz,
                    expr=text,
                    resolved=resolved if resolved != text else None,
                )
            )
    return tuple(out)


SET_SEPARATOR = " | "
"""How a set's members are joined in its ``expr`` (and in job JSON's ``trigger.expr``)."""

EVERY_PREFIX = "every "


def split_set(expr: str) -> list[str]:
    """A set's ``expr`` as its members' texts."""
    return [t.strip() for t in expr.split("|") if t.strip()]


def member_text(trigger: Trigger) -> str:
    """A cron or fixed-rate trigger as a set writes it: the expression, or
    ``every DURATION``."""
    if trigger.kind is TriggerKind.INTERVAL:
        return EVERY_PREFIX + format_duration(trigger.every_seconds or 0)
    return trigger.expr or ""


def named_by(ref: Mapping[str, Any] | None, window: datetime) -> str | None:
    """``JOBCTL_TRIGGER`` of a run: the text of the trigger that made ``window``, from
    what the run keeps of its job's trigger (see ``RunSettings.trigger``); None when it
    keeps none."""
    if not ref:
        return None
    if "text" in ref:
        return str(ref["text"])
    anchor = ref.get("anchor")
    resolved = ref.get("resolved")
    trigger = Trigger(
        TriggerKind.SET,
        tz=str(ref.get("tz") or "UTC"),
        expr=str(ref.get("set") or ""),
        anchor=None if anchor is None else datetime.fromisoformat(anchor),
        resolved=None if resolved is None else str(resolved),
    )
    return made_by(trigger, window)


def made_by(trigger: Trigger, window: datetime) -> str | None:
    """The text of the trigger that makes ``window`` (the first member given, when several
    do); None when none does (a manual run's window)."""
    before = window - _US
    for m in members(trigger):
        if _next_fire(m, before) == window:
            return member_text(m)
    return None


def _other_fires(trigger: Trigger, after: datetime, until: datetime) -> Iterator[datetime]:
    if is_fixed_rate(trigger):
        every_us = _interval_us(trigger)
        anchor_us = _anchor_us(trigger)
        k, last = _interval_k_range(anchor_us, every_us, to_us(after), to_us(until))
        for j in range(k, last + 1):
            yield from_us(anchor_us + j * every_us)
    else:
        fire = _next_fire(trigger, after)
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
    lo, hi = trigger.active_from, trigger.active_until
    if lo is not None and after < lo:
        after = lo - _US
    if hi is not None and until > hi:
        until = hi
    if until <= after:
        return 0
    if is_fixed_rate(trigger):
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
    if kind == TriggerKind.SET:
        return f"{trigger.expr} ({trigger.tz})"
    if kind == TriggerKind.INTERVAL:
        text = f"every {format_duration(trigger.every_seconds or 0)}"
        return text + " after completion" if is_fixed_delay(trigger) else text
    if kind == TriggerKind.ONCE:
        return f"at {iso(trigger.at.replace(microsecond=0) if trigger.at else None)}"
    if kind == TriggerKind.REBOOT:
        return "@reboot"
    if kind == TriggerKind.AFTER:
        return f"after {trigger.expr}"
    return "manual"


# ---------------------------------------------------------------------- windows of a range

COUNT_CAP = 1_000_000
"""How far a range's windows are counted before a refusal says "more than" instead."""

_US = timedelta(microseconds=1)


def has_windows(trigger: Trigger) -> bool:
    """Whether the trigger's windows can be listed for a range (``backfill``, ``coverage``):
    a cron expression, a fixed rate or a set of them. Windows that depend on runs (after
    completion), a one-shot, ``@reboot`` and manual jobs have none to list."""
    return trigger.kind in (TriggerKind.CRON, TriggerKind.SET) or is_fixed_rate(trigger)


def _check_listable(trigger: Trigger, what: str) -> None:
    if not has_windows(trigger):
        raise UsageError(
            f"{what} needs a cron or fixed-rate job; this one runs {describe(trigger)}"
        )


def windows_between(
    trigger: Trigger, start: datetime, end: datetime, limit: int, what: str = "backfill"
) -> list[datetime]:
    """Every window of a cron or fixed-rate trigger in ``[start, end)``, oldest first, as
    aware UTC. A fixed rate starts at its anchor (windows before it do not exist); a cron
    expression has windows before the job was added.

    Raises UsageError (naming ``what``) for another kind of trigger, for ``start`` after
    ``end``, and for more than ``limit`` windows, with their count (counted up to
    :data:`COUNT_CAP`, beyond which it says "more than").
    """
    _require_aware("start", start)
    _require_aware("end", end)
    _check_listable(trigger, what)
    if start > end:
        raise UsageError(f"{what}: --from {iso(start)} is after --to {iso(end)}")
    if start == end:
        return []
    after, until = start - _US, end - _US
    out: list[datetime] = []
    fires = iter_fires(trigger, after, until)
    for fire in fires:
        out.append(fire)
        if len(out) > limit:
            if is_fixed_rate(trigger):
                total = str(count_fires(trigger, after, until))
            else:
                total = _count_on(len(out), fires)
            raise UsageError(
                f"{what}: {total} windows from {iso(start)} to {iso(end)}; "
                f"at most {limit} a call (give a shorter range)"
            )
    return out


def _count_on(counted: int, fires: Iterator[datetime]) -> str:
    for _ in fires:
        counted += 1
        if counted > COUNT_CAP:
            return f"more than {COUNT_CAP}"
    return str(counted)


def windows_before(trigger: Trigger, end: datetime, count: int) -> list[datetime]:
    """The last ``count`` windows of a cron or fixed-rate trigger before ``end`` (strictly),
    oldest first, as aware UTC; fewer when the trigger has fewer (a fixed rate's anchor,
    or nothing within :data:`SEARCH_YEARS` of a cron expression). Raises UsageError for
    another kind of trigger."""
    _require_aware("end", end)
    _check_listable(trigger, "coverage")
    if count <= 0:
        return []
    until = end - _US
    if trigger.active_until is not None and until > trigger.active_until:
        until = trigger.active_until
    if is_fixed_rate(trigger):
        every_us = _interval_us(trigger)
        anchor_us = _anchor_us(trigger)
        last = (to_us(until) - anchor_us) // every_us
        first = max(0, last - count + 1)
        if trigger.active_from is not None:
            first = max(first, -(-(to_us(trigger.active_from) - anchor_us) // every_us))
        return [from_us(anchor_us + k * every_us) for k in range(first, last + 1)]
    span = timedelta(minutes=count)  # a cron window is at least a minute after the last
    horizon = timedelta(days=366 * SEARCH_YEARS)
    while True:
        found = list(iter_fires(trigger, until - span, until))
        if len(found) >= count or span >= horizon:
            return found[-count:]
        span = min(span * 4, horizon)


# ---------------------------------------------------------------------- exclusions


def excluded(excepts: tuple[str, ...], dates: frozenset[date], tz: str, window: datetime) -> bool:
    """Whether ``window`` (aware) is excluded (README, "Schedule sets"): its date in zone
    ``tz`` is one of ``dates``, or its minute there matches one of the cron expressions
    ``excepts``. The dates are looked up as spans of real time, computed once per set of
    dates and zone, so a check is a bisection: no calendar is read, no date converted."""
    if dates:
        starts, ends = _day_spans(dates, tz)
        us = to_us(window)
        k = bisect.bisect_right(starts, us) - 1
        if k >= 0 and us < ends[k]:
            return True
    if not excepts:
        return False
    wall = window.astimezone(parse_zone(tz)).replace(tzinfo=None)
    return any(parse_cron(e).matches(wall) for e in excepts)


@functools.lru_cache(maxsize=256)
def _day_spans(dates: frozenset[date], tz: str) -> tuple[list[int], list[int]]:
    """Each date's span of real time in zone ``tz``, [its first instant, the next day's),
    as sorted µs lists. A midnight that a DST change skips starts the day at the change."""
    zone = parse_zone(tz)
    starts, ends = [], []
    for day in sorted(dates):
        start = datetime(day.year, day.month, day.day, tzinfo=zone)
        nxt = day + timedelta(days=1)
        starts.append(to_us(start))
        ends.append(to_us(datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone)))
    return starts, ends
