"""``python -m bench guard``: the figures that slipped once, each against its bound, in
about a minute; exits 1 when one is broken (run it before a stop; docs/benchmarks.md).
``python -m bench guard cli`` (or ``burst``, ``idle``) measures and judges those parts only.

- **burst**: 1,000 ``--every 1h`` jobs due at one instant, ``jobctl daemon --workers 4``,
  against the raw spawn of the same 1,000 children 4 at a time, back to back in each of
  three reps; the median of the reps' ratios.
- **idle**: a daemon on 20,000 far-future jobs: its CPU over ``IDLE_SECONDS`` (every
  thread's, from ``/proc/PID/task/*/schedstat``, in ns: two renewals and two retention
  passes fall in it), and its RSS.
- **cli**: ``jobctl --version`` and ``jobctl list --json`` on 1,000 jobs, each paired
  with ``python -c "import click"`` run just before it; the median of the pairs' ratios.

The bounds are written once, in :data:`BOUNDS`; :func:`judge` compares, :func:`report`
prints. Wall-clock ratios move with a shared machine: a broken bound on a busy hour is
measured again before it is believed (the load average is printed with the figures).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: far-future jobs of the idle measure
IDLE_JOBS = 20_000
#: the idle measure's window (renewals come every 10 s, retention passes as often)
IDLE_SECONDS = 20.0
#: reps of the burst pair, and pairs of each CLI ratio
BURST_REPS = 3
CLI_PAIRS = 7
#: the burst's instant this far after its jobs are added (a daemon's start on a busy
#: machine can take 3 s)
BURST_LEAD_SECONDS = 5.0


@dataclass(frozen=True)
class Bound:
    """One figure's bound: the figure is at most ``limit`` (in ``unit``)."""

    key: str
    what: str
    limit: float
    unit: str


#: every bound of the guard, once (docs/benchmarks.md says what bounds each ratio)
BOUNDS: tuple[Bound, ...] = (
    Bound("burst_vs_raw", "burst: 1,000 due runs, 4 workers, against the raw spawn", 1.5, "×"),
    Bound("idle_core_pct", f"idle: CPU of a daemon on {IDLE_JOBS:,} far-future jobs", 0.05, "%"),
    Bound("idle_rss_mib", f"idle: RSS of that daemon on {IDLE_JOBS:,} jobs", 40.0, "MiB"),
    Bound("version_vs_click", "cli: jobctl --version against import click", 1.5, "×"),
    Bound("list_vs_click", "cli: jobctl list --json, 1,000 jobs, against import click", 3.0, "×"),
)


#: the guard's parts, each its figures' keys: ``python -m bench guard cli`` measures and
#: judges only the CLI ratios (seconds, where the whole guard loads the machine a minute)
PARTS: dict[str, tuple[str, ...]] = {
    "burst": ("burst_vs_raw",),
    "idle": ("idle_core_pct", "idle_rss_mib"),
    "cli": ("version_vs_click", "list_vs_click"),
}


def bounds_of(parts: Sequence[str]) -> list[Bound]:
    """The bounds of ``parts`` (every part when none is named), in :data:`BOUNDS`' order.
    Raises ValueError naming a part that is not one of :data:`PARTS`."""
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"no part {unknown[0]!r} (parts: {', '.join(PARTS)})")
    keys = {k for p in (parts or PARTS) for k in PARTS[p]}
    return [b for b in BOUNDS if b.key in keys]


@dataclass(frozen=True)
class Verdict:
    bound: Bound
    value: float | None

    @property
    def holds(self) -> bool:
        """Within its bound; a figure that could not be taken holds nothing."""
        return self.value is not None and self.value <= self.bound.limit


def judge(figures: Mapping[str, float | None], bounds: Sequence[Bound] = BOUNDS) -> list[Verdict]:
    """Each bound with its figure (None when it is missing)."""
    return [Verdict(b, figures.get(b.key)) for b in bounds]


def exit_code(verdicts: Sequence[Verdict]) -> int:
    """0 when every bound holds, else 1."""
    return 0 if all(v.holds for v in verdicts) else 1


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    digits = 3 if unit == "%" else 2
    sep = "" if unit == "×" else " "
    return f"{value:.{digits}f}{sep}{unit}"


def report(verdicts: Sequence[Verdict], extra: Mapping[str, str] | None = None) -> str:
    """One line a figure: what, the figure, its bound, holds or BROKEN."""
    width = max(len(v.bound.what) for v in verdicts)
    lines = []
    for v in verdicts:
        b = v.bound
        verdict = "holds" if v.holds else "BROKEN"
        lines.append(
            f"{b.what:<{width}}  {_fmt(v.value, b.unit):>10}  "
            f"≤ {_fmt(b.limit, b.unit):<9} {verdict}"
        )
        if extra and b.key in extra:
            lines.append(f"{'':<{width}}  ({extra[b.key]})")
    return "\n".join(lines)


# ---------------------------------------------------------------------- the measures


def proc_cpu_ns(pid: int) -> int:
    """CPU time (ns) of every thread of a live process, from its tasks' schedstat."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total


def burst_pairs(tmp: Path, reps: int) -> tuple[float, list[float]]:
    """(median ratio, each rep's ratio) of the burst against the raw spawn."""
    from . import jobctl_runs, machine
    from .stats import median

    ratios = []
    for _ in range(reps):
        raw, _, _ = machine.spawn_seconds(1000, 4)
        burst = jobctl_runs.burst(tmp, 1000, 4, lead_seconds=BURST_LEAD_SECONDS)
        ratios.append(burst["seconds"] / raw)
    return median(ratios), ratios


def idle(tmp: Path, jobs: int, seconds: float) -> tuple[float, float]:
    """(% of a core over ``seconds``, RSS in MiB) of a daemon on ``jobs`` far-future jobs,
    from two seconds after it is ready (its first retention pass looks at every job)."""
    from .jobctl_runs import DaemonProc, build_scale_db
    from .stats import proc_memory_mib

    db = tmp / "guard-idle.db"
    build_scale_db(db, jobs)
    d = DaemonProc(db, 4)
    try:
        d.wait_for(r"scheduling \d+ jobs", 120)
        time.sleep(2.0)
        c0, t0 = proc_cpu_ns(d.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = proc_cpu_ns(d.pid), time.monotonic()
        rss = proc_memory_mib(d.pid)[0]
    finally:
        d.stop()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return 100 * (c1 - c0) / 1e9 / (t1 - t0), rss


def measure(
    tmp: Path, parts: Sequence[str] = tuple(PARTS)
) -> tuple[dict[str, float | None], dict[str, str]]:
    """Every figure of ``parts`` (all of :data:`BOUNDS` by default), and a note for some."""
    from . import jobctl_runs

    figures: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    if "burst" in parts:
        burst_figures(tmp, figures, notes)
    if "idle" in parts:
        idle_figures(tmp, figures, notes)
    if "cli" in parts:
        cli = jobctl_runs.cli(tmp, CLI_PAIRS)
        figures["version_vs_click"] = cli["version_ratio"]
        figures["list_vs_click"] = cli["list_ratio"]
        notes["version_vs_click"] = f"{cli['version_ms']:.0f} against {cli['click_ms']:.0f} ms"
        notes["list_vs_click"] = f"{cli['list_ms']:.0f} against {cli['click_ms']:.0f} ms"
    return figures, notes


def burst_figures(tmp: Path, figures: dict[str, float | None], notes: dict[str, str]) -> None:
    try:
        ratio, reps = burst_pairs(tmp, BURST_REPS)
        figures["burst_vs_raw"] = ratio
        notes["burst_vs_raw"] = "reps " + ", ".join(f"{r:.2f}×" for r in reps)
    except RuntimeError as e:  # a figure not taken breaks the guard, with its reason
        notes["burst_vs_raw"] = str(e)


def idle_figures(tmp: Path, figures: dict[str, float | None], notes: dict[str, str]) -> None:
    try:
        pct, rss = idle(tmp, IDLE_JOBS, IDLE_SECONDS)
        figures["idle_core_pct"] = pct
        figures["idle_rss_mib"] = rss
        notes["idle_core_pct"] = f"over {IDLE_SECONDS:g} s"
    except RuntimeError as e:
        notes["idle_core_pct"] = str(e)


def main(argv: Sequence[str] = ()) -> int:
    try:
        bounds = bounds_of(argv)
    except ValueError as e:
        print(
            f"usage: python -m bench guard [{'|'.join(PARTS)}]... (the bounds are fixed): {e}",
            file=sys.stderr,
        )
        return 2
    from .__main__ import machine_line

    t0 = time.monotonic()
    print(machine_line())
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="jobctl-guard-") as tmp:
        figures, notes = measure(Path(tmp), [p for p in PARTS if not argv or p in argv])
    verdicts = judge(figures, bounds)
    print(report(verdicts, notes))
    print(
        f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"{time.monotonic() - t0:.0f} s"
    )
    code = exit_code(verdicts)
    if code:
        print("a bound is broken (measure again on a quiet machine before believing it)")
    return code
