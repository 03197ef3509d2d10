"""Charts drawn on the server as inline SVG (README, The dashboard's pages): a job's durations, and
the timeline.

No script draws them and no style attribute colours them (the CSP forbids inline styles):
each shape carries the class of its state (``s-succeeded``…), which the stylesheet fills.
Text comes in escaped. Coordinates are in a fixed ``viewBox`` that the page scales.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from markupsafe import Markup, escape

from ..clock import iso
from ..models import Run
from ..store.values import TimelineBar

CHART_WIDTH = 1000
CHART_HEIGHT = 180
_AXIS = 44  # room on the left for the scale's labels


def seconds_text(seconds: float) -> str:
    """``0.42s``, ``3.2s``, ``59s``, ``4m05s``, ``2h03m``: short enough for an axis."""
    if seconds < 1:
        return f"{seconds:.2f}s"
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        m, s = divmod(int(seconds), 60)
        return f"{m}m{s:02d}s"
    h, m = divmod(int(seconds) // 60, 60)
    return f"{h}h{m:02d}m"


def bytes_text(size: float) -> str:
    """``512B``, ``12.0K``, ``200.4M``, ``1.5G`` (powers of 1024, as ``--memory-max``)."""
    for unit, power in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << power:
            return f"{size / (1 << power):.1f}{unit}"
    return f"{int(size)}B"


@dataclass(frozen=True)
class Costs:
    """What the last runs of a job cost: CPU seconds (user + system) and peak memory
    (bytes), median and largest, over the runs that recorded them."""

    runs: int
    cpu_median: float | None
    cpu_max: float | None
    rss_median: float | None
    rss_max: int | None


def costs(runs: Sequence[Run]) -> Costs:
    cpu = [r.cpu for r in runs if r.cpu is not None]
    rss = [r.max_rss for r in runs if r.max_rss is not None]
    return Costs(
        runs=max(len(cpu), len(rss)),
        cpu_median=statistics.median(cpu) if cpu else None,
        cpu_max=max(cpu) if cpu else None,
        rss_median=statistics.median(rss) if rss else None,
        rss_max=max(rss) if rss else None,
    )


@dataclass(frozen=True)
class DurationChart:
    svg: Markup
    bars: int
    median_seconds: float | None


def duration_chart(runs: Sequence[Run]) -> DurationChart:
    """One bar per run (``runs`` newest first, drawn oldest on the left), its height the
    duration of the run's last attempt, its class the run's state; a dashed line at the
    median duration. Runs without an ended attempt are left out."""
    timed = [(r, r.duration_seconds) for r in reversed(runs) if r.duration_seconds is not None]
    if not timed:
        return DurationChart(Markup(""), 0, None)
    durations = [max(d or 0.0, 0.0) for _, d in timed]
    median = statistics.median(durations)
    top = max(max(durations), median, 0.001)
    plot_w = CHART_WIDTH - _AXIS
    plot_h = CHART_HEIGHT - 20
    slot = plot_w / len(timed)
    gap = min(2.0, slot * 0.2)
    parts = [
        f'<svg class="chart durations" viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" '
        f'role="img" aria-label="durations of the last {len(timed)} runs">',
        f'<line class="axis" x1="{_AXIS}" y1="{plot_h}" x2="{CHART_WIDTH}" y2="{plot_h}"/>',
        f'<text class="tick" x="{_AXIS - 4}" y="12" text-anchor="end">{seconds_text(top)}</text>',
        f'<text class="tick" x="{_AXIS - 4}" y="{plot_h}" text-anchor="end">0</text>',
    ]
    for i, (run, _) in enumerate(timed):
        d = durations[i]
        h = max(d / top * (plot_h - 4), 1.0)
        x = _AXIS + i * slot + gap / 2
        state = run.state.value
        parts.append(
            f'<a href="/runs/{run.id}"><rect class="bar s-{state}" data-run="{run.id}" '
            f'data-seconds="{d:.6f}" x="{x:.2f}" y="{plot_h - h:.2f}" '
            f'width="{max(slot - gap, 0.5):.2f}" height="{h:.2f}">'
            f"<title>run {run.id}: {state}, {seconds_text(d)}</title></rect></a>"
        )
    y = plot_h - median / top * (plot_h - 4)
    parts.append(
        f'<line class="median" data-seconds="{median:.6f}" x1="{_AXIS}" y1="{y:.2f}" '
        f'x2="{CHART_WIDTH}" y2="{y:.2f}"><title>median {seconds_text(median)}</title></line>'
    )
    parts.append(
        f'<text class="median-label" x="{CHART_WIDTH - 4}" y="{max(y - 4, 10):.2f}" '
        f'text-anchor="end">median {seconds_text(median)}</text>'
    )
    parts.append("</svg>")
    return DurationChart(Markup("".join(parts)), len(timed), median)


# ---------------------------------------------------------------------- the timeline

TIMELINE_WIDTH = 1200
_LABEL_W = 180
_ROW_H = 22
_TOP = 26


def hour_marks(start: datetime, end: datetime, zone: ZoneInfo) -> list[datetime]:
    """Every instant in ``(start, end]`` where a new hour begins on the clocks of ``zone``
    (so in a zone half an hour off UTC they fall at half past UTC hours), in UTC."""
    local = start.astimezone(zone)
    t = local.replace(minute=0, second=0, microsecond=0)
    marks: list[datetime] = []
    # step by UTC hours from a local hour's start, re-aligned at each step to the local hour
    # (a DST change moves the clock by a whole hour in nearly every zone)
    instant = t.astimezone(start.tzinfo)
    while instant <= end:
        if instant > start:
            marks.append(instant)
        instant = instant + timedelta(hours=1)
        loc = instant.astimezone(zone)
        if loc.minute or loc.second:
            instant = loc.replace(minute=0, second=0, microsecond=0).astimezone(start.tzinfo)
    return marks


def _utc_text(t: datetime) -> str:
    """:func:`~jobctl.clock.iso` of an aware datetime, not memoised."""
    if t.utcoffset():
        t = t.astimezone(UTC)
    return t.replace(tzinfo=None).isoformat() + "Z"


def timeline_svg(
    rows: Sequence[tuple[int, str]],
    bars: Sequence[TimelineBar],
    start: datetime,
    end: datetime,
    now: datetime,
    zone: ZoneInfo,
) -> Markup:
    """The attempts of ``rows`` (job id, name; one row a job, in this order) between
    ``start`` and ``end`` as bars, with a line and label at each hour of ``zone``. A running
    attempt's bar ends at ``now``. Each bar links to its run."""
    span = (end - start).total_seconds()
    plot_w = TIMELINE_WIDTH - _LABEL_W - 8
    height = _TOP + _ROW_H * max(len(rows), 1) + 4
    row_of = {job_id: i for i, (job_id, _) in enumerate(rows)}

    def x_of(t: datetime) -> float:
        s = min(max((t - start).total_seconds(), 0.0), span)
        return _LABEL_W + s / span * plot_w

    parts = [
        f'<svg class="chart timeline" viewBox="0 0 {TIMELINE_WIDTH} {height}" role="img" '
        f'aria-label="attempts from {iso(start)} to {iso(end)}" '
        f'data-start="{iso(start)}" data-end="{iso(end)}">'
    ]
    for i in range(len(rows)):
        if i % 2:
            parts.append(
                f'<rect class="band" x="0" y="{_TOP + i * _ROW_H}" '
                f'width="{TIMELINE_WIDTH}" height="{_ROW_H}"/>'
            )
    for mark in hour_marks(start, end, zone):
        x = x_of(mark)
        label = mark.astimezone(zone).strftime("%H:%M")
        major = mark.astimezone(zone).hour % 6 == 0
        parts.append(
            f'<line class="hour{" major" if major else ""}" data-at="{iso(mark)}" '
            f'x1="{x:.2f}" y1="{_TOP - 6}" x2="{x:.2f}" y2="{height}"/>'
            f'<text class="hour-label" x="{x:.2f}" y="{_TOP - 10}" '
            f'text-anchor="middle">{label}</text>'
        )
    for i, (_, name) in enumerate(rows):
        parts.append(
            f'<a href="/jobs/{escape(name)}"><text class="row-label" x="4" '
            f'y="{_TOP + i * _ROW_H + _ROW_H * 0.7:.1f}">{escape(name)}</text></a>'
        )
    # up to 5,000 bars a page: each name escaped once, each instant written without the
    # memo of clock.iso (every bar's instants differ)
    escaped: dict[str, str] = {}
    for b in bars:
        row = row_of.get(b.job_id)
        if row is None:
            continue
        x1 = x_of(b.started_at)
        x2 = x_of(b.finished_at or now)
        end_text = _utc_text(b.finished_at) if b.finished_at else "running"
        if b.job_name not in escaped:
            escaped[b.job_name] = str(escape(b.job_name))
        name = escaped[b.job_name]
        parts.append(
            f'<a href="/runs/{b.run_id}"><rect class="bar s-{b.state}" '
            f'data-job="{name}" '
            f'data-run="{b.run_id}" data-attempt="{b.attempt}" '
            f'data-x1="{x1:.3f}" data-x2="{x2:.3f}" x="{x1:.2f}" y="{_TOP + row * _ROW_H + 3}" '
            f'width="{max(x2 - x1, 1.5):.2f}" height="{_ROW_H - 6}">'
            f"<title>{name} run {b.run_id} attempt {b.attempt}: {b.state}, "
            f"{_utc_text(b.started_at)} to {end_text}</title></rect></a>"
        )
    parts.append(
        f'<line class="now" x1="{x_of(now):.2f}" y1="{_TOP - 6}" x2="{x_of(now):.2f}" '
        f'y2="{height}"/>'
    )
    parts.append("</svg>")
    return Markup("".join(parts))
