"""Small statistics and process helpers shared by the workloads (standard library only)."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence

CLK_TCK = os.sysconf("SC_CLK_TCK")


def median(values: Sequence[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) by linear interpolation, or NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (its own threads, not its children)."""
    return proc_cpu_split(pid)[0]


def proc_cpu_split(pid: int) -> tuple[float, float]:
    """(its own, its reaped children's) user + system CPU seconds of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime, stime, cutime and cstime are fields 14 to 17
    own = int(fields[11]) + int(fields[12])
    children = int(fields[13]) + int(fields[14])
    return own / CLK_TCK, children / CLK_TCK


def helpers_cpu(pid: int) -> float:
    """User + system CPU seconds of a jobctl daemon's live helpers (its children that are
    jobctl's own programs: the spawner that starts its attempts and the keeper): the
    daemon's own work, done in another process."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids = f.read().split()
        except OSError:
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                with open(f"/proc/{kid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if any(a.endswith((b"/jobctl/spawner.py", b"/jobctl/keeper.py")) for a in argv):
                total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def proc_memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a live process in MiB: resident now, and its peak."""
    rss = hwm = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return rss, hwm
