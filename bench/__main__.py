"""``python -m bench``: run the workloads and print one table (see ``--help``)."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import jobctl_runs, machine, peer, postgresql
from .stats import median, proc_cpu_split

WORKLOADS = ("machine", "burst", "limits", "precision", "scale", "cli", "peer")
# not in the default set: needs PostgreSQL's binaries and the postgresql and bench extras
OPT_IN = ("postgresql",)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        epilog="python -m bench guard: the guard's figures against their bounds (bench/guard.py)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a short smoke run: fewer repetitions, 10 s precision, 5 s idle, "
        "sizes 1,000 and 100,000",
    )
    p.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"comma-separated workloads (default all: {','.join(WORKLOADS)}; also "
        "postgresql: jobctl daemons beside procrastinate's workers on a scratch server)",
    )
    p.add_argument(
        "--pg-runs", type=int, default=1000, help="runs per throughput measure (postgresql)"
    )
    p.add_argument("--pg-samples", type=int, default=100, help="claim latency samples (postgresql)")
    p.add_argument(
        "--pg-daemons",
        default="1,2,4",
        help="comma-separated daemon (and procrastinate worker) counts of the throughput "
        "measures (postgresql; default 1,2,4)",
    )
    p.add_argument(
        "--sizes",
        default=None,
        help="job counts for the scale workload (default 1000,100000,1000000)",
    )
    p.add_argument(
        "--peer-size",
        type=int,
        default=100_000,
        help="job count for APScheduler's scale workload (default 100000)",
    )
    p.add_argument(
        "--reps",
        type=int,
        default=None,
        help="repetitions of each measurement (default 3, --quick 2)",
    )
    p.add_argument("--burst-jobs", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--precision-seconds", type=float, default=None)
    p.add_argument("--idle-seconds", type=float, default=None)
    p.add_argument("--json", type=Path, default=None, help="also write the raw figures here")
    a = p.parse_args(argv)
    a.only = [w.strip() for w in a.only.split(",") if w.strip()]
    for w in a.only:
        if w not in WORKLOADS + OPT_IN:
            p.error(f"unknown workload {w!r}")
    a.reps = a.reps or (2 if a.quick else 3)
    try:
        a.pg_daemons = tuple(int(n) for n in a.pg_daemons.split(",") if n.strip())
    except ValueError:
        p.error(f"--pg-daemons: not a list of counts: {a.pg_daemons!r}")
    if not a.pg_daemons or min(a.pg_daemons) < 1:
        p.error("--pg-daemons: give counts of 1 or more")
    a.precision_seconds = a.precision_seconds or (10.0 if a.quick else 30.0)
    a.idle_seconds = a.idle_seconds or (5.0 if a.quick else 30.0)
    default_sizes = "1000,100000" if a.quick else "1000,100000,1000000"
    a.sizes = [int(s) for s in (a.sizes or default_sizes).split(",")]
    return a


def machine_line() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {platform.node()}: "
        f"nproc {os.cpu_count()}, {mem_gib:.1f} GiB, {platform.system()} "
        f"{platform.release()}; Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}"
    )


def _med(runs: list[dict], key: str) -> float:
    return median([r[key] for r in runs if key in r and not math.isnan(r[key])])


def _bound_s(cpu_ms: float, children_cpu_ms: float, a: argparse.Namespace) -> float:
    """Seconds a burst takes at least on this machine: the CPU a run of it and of its
    child (ms), for every run, spread over every core."""
    return float((cpu_ms + children_cpu_ms) * a.burst_jobs / 1000 / (os.cpu_count() or 1))


def _cpu_bound_s(burst: dict[str, float], a: argparse.Namespace) -> float:
    """:func:`_bound_s` of a scheduler's burst."""
    return _bound_s(burst["cpu_ms"], burst["children_cpu_ms"], a)


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def limits_bursts(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The burst with ``--nice 5 --memory-max 1G`` on every job beside the same burst
    without limits, back to back in each rep (docs/benchmarks.md, Limits: within 1.15×)."""
    from jobctl.models import Limits

    limited = Limits(nice=5, memory_max=1 << 30)
    plain_s, limited_s, ratios = [], [], []
    for _ in range(a.reps):
        p = jobctl_runs.burst(tmp, a.burst_jobs, a.workers, lead_seconds=8.0)["seconds"]
        q = jobctl_runs.burst(tmp, a.burst_jobs, a.workers, 8.0, limits=limited)["seconds"]
        plain_s.append(p)
        limited_s.append(q)
        ratios.append(q / p)
    return {
        "plain_s": median(plain_s),
        "limited_s": median(limited_s),
        "ratio": median(ratios),
        "reps": [list(r) for r in zip(plain_s, limited_s, strict=True)],
    }


def run(a: argparse.Namespace, tmp: Path) -> dict:
    res: dict = {}
    if "limits" in a.only:
        _progress(f"limits x{a.reps}: the burst with --nice 5 --memory-max 1G, and without")
        res["limits"] = limits_bursts(a, tmp)
    if "machine" in a.only or "burst" in a.only:
        _progress("machine limits")
        res["commits_per_s"] = median([machine.sqlite_commits_per_second() for _ in range(a.reps)])
        timers = [machine.sleep_lateness_ms() for _ in range(a.reps)]
        res["timer_p50_ms"] = median([t[0] for t in timers])
        res["timer_p99_ms"] = median([t[1] for t in timers])
        # side by side: each rep runs the raw spawn, the durable floor, jobctl's burst and
        # (with the peer) APScheduler's back to back, and each ratio is the median of the
        # reps' own ratios, so the machine's drift over minutes does not enter a ratio
        with_burst = "burst" in a.only
        with_peer = with_burst and "peer" in a.only
        what = ", jobctl's burst" if with_burst else ""
        what += ", APScheduler's burst" if with_peer else ""
        _progress(
            f"side by side x{a.reps}: raw spawn, durable floor{what} "
            f"({a.burst_jobs} runs, {a.workers} at a time)"
        )
        reps: list[dict[str, Any]] = []
        for _ in range(a.reps):
            spawn_s, spawner_cpu, children_cpu = machine.spawn_seconds(a.burst_jobs, a.workers)
            own0, kids0 = proc_cpu_split(os.getpid())
            durable_s = machine.durable_loop_seconds(a.burst_jobs, a.workers)
            own1, kids1 = proc_cpu_split(os.getpid())
            rep: dict[str, Any] = {
                "spawn_s": spawn_s,
                "spawn_cpu_ms": 1000 * spawner_cpu / a.burst_jobs,
                "spawn_children_cpu_ms": 1000 * children_cpu / a.burst_jobs,
                "durable_s": durable_s,
                # with its set-up (the file, the rows): a little above the loop's own
                "durable_cpu_ms": 1000 * (own1 - own0) / a.burst_jobs,
                "durable_children_cpu_ms": 1000 * (kids1 - kids0) / a.burst_jobs,
            }
            if with_burst:
                rep["burst"] = jobctl_runs.burst(tmp, a.burst_jobs, a.workers)
            if with_peer:
                rep["peer_burst"] = peer.run(
                    "burst", tmp / "aps-burst.db", jobs=a.burst_jobs, lead=4
                )
            reps.append(rep)
        res["side_by_side"] = reps  # each rep's own figures, in the --json file
        res["spawn_s"] = median([r["spawn_s"] for r in reps])
        res["spawn_cpu_ms"] = median([r["spawn_cpu_ms"] for r in reps])
        res["spawn_children_cpu_ms"] = median([r["spawn_children_cpu_ms"] for r in reps])
        res["durable_s"] = median([r["durable_s"] for r in reps])
        res["durable_cpu_ms"] = median([r["durable_cpu_ms"] for r in reps])
        res["durable_children_cpu_ms"] = median([r["durable_children_cpu_ms"] for r in reps])
        res["durable_vs_raw"] = median([r["durable_s"] / r["spawn_s"] for r in reps])
        # each one's time over the least it can take: the rest is cores left idle
        res["spawn_over_bound"] = median(
            [
                r["spawn_s"] / _bound_s(r["spawn_cpu_ms"], r["spawn_children_cpu_ms"], a)
                for r in reps
            ]
        )
        res["durable_over_bound"] = median(
            [
                r["durable_s"] / _bound_s(r["durable_cpu_ms"], r["durable_children_cpu_ms"], a)
                for r in reps
            ]
        )
        if with_burst:
            res["burst"] = {k: _med([r["burst"] for r in reps], k) for k in reps[0]["burst"]}
            res["burst_vs_raw"] = median([r["burst"]["seconds"] / r["spawn_s"] for r in reps])
            res["burst_vs_floor"] = median([r["burst"]["seconds"] / r["durable_s"] for r in reps])
            # the least the burst can take if both it and its children kept every core busy
            res["burst_cpu_bound_s"] = median([_cpu_bound_s(r["burst"], a) for r in reps])
            res["burst_over_bound"] = median(
                [r["burst"]["seconds"] / _cpu_bound_s(r["burst"], a) for r in reps]
            )
        if with_peer:
            res["peer_burst"] = {
                k: _med([r["peer_burst"] for r in reps], k) for k in reps[0]["peer_burst"]
            }
            res["peer_vs_burst"] = median(
                [r["peer_burst"]["seconds"] / r["burst"]["seconds"] for r in reps]
            )
            res["peer_cpu_vs_burst"] = median(
                [r["peer_burst"]["cpu_ms"] / r["burst"]["cpu_ms"] for r in reps]
            )
            res["peer_cpu_bound_s"] = median([_cpu_bound_s(r["peer_burst"], a) for r in reps])
            res["peer_over_bound"] = median(
                [r["peer_burst"]["seconds"] / _cpu_bound_s(r["peer_burst"], a) for r in reps]
            )
            # what even the floor, which keeps no attempts, output or log, is ahead of it
            res["peer_vs_floor"] = median(
                [r["peer_burst"]["seconds"] / r["durable_s"] for r in reps]
            )
    if "precision" in a.only:
        _progress(f"precision: 10 jobs every 1 s for {a.precision_seconds:g} s, x{a.reps}")
        runs = [jobctl_runs.precision(tmp, 10, a.precision_seconds) for _ in range(a.reps)]
        res["precision"] = {k: _med(runs, k) for k in runs[0]}
        _progress(f"precision with 10 workers (one per job), x{a.reps}")
        runs = [
            jobctl_runs.precision(tmp, 10, a.precision_seconds, workers=10) for _ in range(a.reps)
        ]
        res["precision_w10"] = {k: _med(runs, k) for k in runs[0]}
    if "scale" in a.only:
        res["scale"] = {}
        for n in a.sizes:
            _progress(f"scale: {n} jobs")
            res["scale"][n] = jobctl_runs.scale(tmp, n, a.reps, a.idle_seconds, 7)
        secs = 20.0 if a.quick else 60.0
        _progress(f"idle right after an import: 100000 jobs, first {secs:g} s")
        res["import_idle"] = jobctl_runs.idle_after_import(tmp, 100_000, secs)
    if "cli" in a.only:
        _progress("cli")
        res["cli"] = jobctl_runs.cli(tmp, 5 if a.quick else 10)
    if "peer" in a.only:
        if "precision" in a.only:
            _progress(f"apscheduler precision x{a.reps}")
            runs = [
                peer.run(
                    "precision", tmp / "aps-prec.db", jobs=10, seconds=a.precision_seconds, lead=2
                )
                for _ in range(a.reps)
            ]
            res["peer_precision"] = {k: _med(runs, k) for k in runs[0]}
        if "scale" in a.only:
            _progress(f"apscheduler scale: {a.peer_size} jobs")
            res["peer_scale"] = peer.run(
                "scale", tmp / "aps-scale.db", jobs=a.peer_size, idle=a.idle_seconds, dispatches=7
            )
    if "postgresql" in a.only:
        counts = ", ".join(str(n) for n in a.pg_daemons)
        _progress(
            f"postgresql: {a.pg_runs} runs with {counts} jobctl daemons and procrastinate "
            f"workers; {a.pg_samples} claims one at a time; cli"
        )
        res["postgresql"] = postgresql.run(
            a.pg_runs, a.pg_samples, 5 if a.quick else 10, reps=a.reps, counts=a.pg_daemons
        )
    return res


def _fmt(v: float | None, unit: str = "", digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if abs(v) >= 100:
        s = f"{v:,.0f}"
    else:
        s = f"{v:.{digits}f}"
    return f"{s} {unit}".strip()


def _ratio(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.2f}×"


def rows(res: dict, a: argparse.Namespace) -> list[tuple[str, str, str, str, str, str]]:
    """(measure, jobctl, reference, ratio, target, verdict) for each line of the table."""
    out: list[tuple[str, str, str, str, str, str]] = []

    def row(measure, mine="-", ref="-", ratio="-", target="", ok: bool | None = None):
        verdict = "" if ok is None else ("holds" if ok else "MISSED")
        out.append((measure, mine, ref, ratio, target, verdict))

    if "spawn_s" in res:
        row(
            f"machine: spawn {a.burst_jobs}× sh -c true, {a.workers} at a time",
            ref=_fmt(res["spawn_s"], "s"),
        )
        row(
            "machine: CPU a run of that spawn, the spawning loop's / the child's",
            ref=f"{_fmt(res['spawn_cpu_ms'], 'ms')} / {_fmt(res['spawn_children_cpu_ms'], 'ms')}",
        )
        if "durable_s" in res:
            row(
                f"machine: durable dispatch floor, the same {a.burst_jobs} children, each "
                "claimed and finished in SQLite",
                ref=_fmt(res["durable_s"], "s"),
                ratio=_ratio(res["durable_vs_raw"]) + " raw spawn",
            )
            row(
                "machine: CPU a run of that floor, its loop's (with its set-up) / the child's",
                ref=f"{_fmt(res['durable_cpu_ms'], 'ms')} / "
                f"{_fmt(res['durable_children_cpu_ms'], 'ms')}",
            )
        row(
            "machine: 1-row BEGIN IMMEDIATE commits (WAL, project pragmas)",
            ref=_fmt(res["commits_per_s"], "/s"),
        )
        row(
            "machine: 5 ms sleep lateness p50 / p99",
            ref=f"{_fmt(res['timer_p50_ms'], 'ms')} / {_fmt(res['timer_p99_ms'], 'ms')}",
        )
    lim = res.get("limits")
    if lim:
        row(
            f"limits: {a.burst_jobs} due at once, --nice 5 --memory-max 1G on every job",
            _fmt(lim["limited_s"], "s"),
            _fmt(lim["plain_s"], "s") + " (no limits)",
            _ratio(lim["ratio"]),
            "≤ 1.15×",
            lim["ratio"] <= 1.15,
        )
    b, pb = res.get("burst"), res.get("peer_burst")
    if b:
        row(
            f"burst: {a.burst_jobs} due at once, instant → last finished",
            _fmt(b["seconds"], "s"),
            _fmt(res["spawn_s"], "s") + " (raw spawn)",
            _ratio(res["burst_vs_raw"]),
            "≤ 2× raw spawn",
            res["burst_vs_raw"] <= 2,
        )
        if pb:
            r = res["peer_vs_burst"]
            row(
                "burst: vs APScheduler",
                _fmt(b["seconds"], "s"),
                _fmt(pb["seconds"], "s") + " (APScheduler)",
                _ratio(r),
                "APScheduler ≥ 1.5× slower",
                r >= 1.5,
            )
        if "durable_s" in res:
            row(
                "burst: vs the durable dispatch floor (what is above it is jobctl's own work)",
                _fmt(b["seconds"], "s"),
                _fmt(res["durable_s"], "s") + " (floor)",
                _ratio(res["burst_vs_floor"]),
            )
        row(
            "burst: CPU a run from the instant, own (its spawner's in it) / child's "
            "(+ jobctl's before it)",
            f"{_fmt(b['cpu_ms'], 'ms')} ({_fmt(b.get('helpers_cpu_ms'), 'ms')}) / "
            f"{_fmt(b['children_cpu_ms'], 'ms')} (+ {_fmt(b['cpu_ahead_ms'], 'ms')})",
            f"{_fmt(pb['cpu_ms'], 'ms')} / {_fmt(pb['children_cpu_ms'], 'ms')} (APScheduler)"
            if pb
            else "-",
            _ratio(res["peer_cpu_vs_burst"]) if pb else "-",
        )
        row(
            f"burst: least it can take, all CPU used spread over {os.cpu_count()} cores",
            _fmt(res["burst_cpu_bound_s"], "s"),
            _fmt(res["peer_cpu_bound_s"], "s") + " (APScheduler)" if pb else "-",
        )
        if "durable_s" in res:
            others = [
                f"floor {_ratio(res['durable_over_bound'])}",
                f"raw {_ratio(res['spawn_over_bound'])}",
            ]
            if pb:
                others.append(f"APScheduler {_ratio(res['peer_over_bound'])}")
            row(
                "burst: time over the least it can take (the rest is cores left idle)",
                _ratio(res["burst_over_bound"]),
                ", ".join(others),
            )
        if pb and "durable_s" in res:
            row(
                "burst: APScheduler vs the durable floor (the most a durable dispatcher in "
                "Python is ahead of it on this machine)",
                "-",
                f"{_fmt(pb['seconds'], 's')} (APScheduler) / {_fmt(res['durable_s'], 's')} (floor)",
                _ratio(res["peer_vs_floor"]),
            )
        row(
            "burst: start lateness p50 / p99",
            f"{_fmt(b['p50_ms'], 'ms')} / {_fmt(b['p99_ms'], 'ms')}",
            f"{_fmt(pb['p50_ms'], 'ms')} / {_fmt(pb['p99_ms'], 'ms')} (APScheduler)" if pb else "-",
            "-",
            "p50 ≤ 500 ms",
            b["p50_ms"] <= 500,
        )
    p, pp = res.get("precision"), res.get("peer_precision")
    if p:
        row(
            f"precision: 10 jobs every 1 s, {a.precision_seconds:g} s, 4 workers: lateness p50 / "
            f"max",
            f"{_fmt(p['p50_ms'], 'ms')} / {_fmt(p['max_ms'], 'ms')}",
            f"{_fmt(pp['p50_ms'], 'ms')} / {_fmt(pp['max_ms'], 'ms')} (APScheduler)" if pp else "-",
        )
        row(
            "precision: lateness p99",
            _fmt(p["p99_ms"], "ms"),
            _fmt(res.get("timer_p99_ms"), "ms") + " (5 ms sleep p99)"
            if "timer_p99_ms" in res
            else "-",
            "-",
            "≤ 10 ms",
            p["p99_ms"] <= 10,
        )
        p10 = res.get("precision_w10")
        if p10:
            row(
                "precision: same, daemon --workers 10: lateness p50 / p99 / max",
                f"{_fmt(p10['p50_ms'], 'ms')} / {_fmt(p10['p99_ms'], 'ms')} / "
                f"{_fmt(p10['max_ms'], 'ms')}",
                "-",
                "-",
                "p99 ≤ 5 ms",
                p10["p99_ms"] <= 5,
            )
        if pp:
            r = pp["p99_ms"] / p["p99_ms"]
            row(
                "precision: p99 vs APScheduler",
                _fmt(p["p99_ms"], "ms"),
                _fmt(pp["p99_ms"], "ms") + " (APScheduler)",
                _ratio(r),
                "ahead of APScheduler (> 1×)",
                r > 1,
            )
    sc, ps = res.get("scale"), res.get("peer_scale")
    if sc:
        sizes = sorted(sc)
        for n in sizes:
            s = sc[n]
            peer_here = ps if ps and ps["jobs"] == n else None
            ready_target, ready_ok = (
                ("≤ 10 s", s["ready_s"] <= 10) if n >= 1_000_000 else ("", None)
            )
            row(
                f"scale {n:,}: start-up until ready",
                _fmt(s["ready_s"], "s"),
                _fmt(peer_here["ready_s"], "s") + " (APScheduler)" if peer_here else "-",
                "-",
                ready_target,
                ready_ok,
            )
            mem_target, mem_ok = (
                ("≤ 200 MiB", s["peak_mib"] <= 200) if n >= 1_000_000 else ("", None)
            )
            row(
                f"scale {n:,}: RSS at ready / peak",
                f"{_fmt(s['rss_mib'], 'MiB')} / {_fmt(s['peak_mib'], 'MiB')}",
                f"{_fmt(peer_here['rss_mib'], 'MiB')} (APScheduler)" if peer_here else "-",
                "-",
                mem_target,
                mem_ok,
            )
            idle_target, idle_ok = (
                ("≤ 0.05 % of a core", s["idle_core_pct"] <= 0.05) if n == 100_000 else ("", None)
            )
            row(
                f"scale {n:,}: CPU idle over {a.idle_seconds:g} s",
                _fmt(s["idle_core_pct"], "% core", 3),
                _fmt(peer_here["idle_core_pct"], "% core", 3) + " (APScheduler)"
                if peer_here
                else "-",
                "-",
                idle_target,
                idle_ok,
            )
            base = sc[sizes[0]]["dispatch_ms"]
            flat = s["dispatch_ms"] / base
            row(
                f"scale {n:,}: one dispatch (run row → attempt start)",
                _fmt(s["dispatch_ms"], "ms"),
                _fmt(peer_here["dispatch_ms"], "ms") + " (APScheduler, in-process add_job)"
                if peer_here
                else f"{_fmt(base, 'ms')} (at {sizes[0]:,})",
                _ratio(flat),
                "flat (≤ 1.5× the smallest)" if n != sizes[0] else "",
                flat <= 1.5 if n != sizes[0] else None,
            )
    imp = res.get("import_idle")
    if imp:
        row(
            f"scale {imp['jobs']:,} right after an import: CPU over the first {imp['seconds']:g} s",
            _fmt(imp["idle_core_pct"], "% core", 3),
            "-",
            "-",
            "≤ 0.05 % of a core",
            imp["idle_core_pct"] <= 0.05,
        )
    c = res.get("cli")
    if c:
        row("cli: python3 -c 'import click'", ref=_fmt(c["click_ms"], "ms"))
        row(
            "cli: jobctl --version",
            _fmt(c["version_ms"], "ms"),
            _fmt(c["click_ms"], "ms"),
            _ratio(c["version_ratio"]),
            "≤ 1.5× import click",
            c["version_ratio"] <= 1.5,
        )
        row(
            "cli: jobctl add (1,000 jobs in the file)",
            _fmt(c["add_ms"], "ms"),
            _fmt(c["click_ms"], "ms"),
            _ratio(c["add_ratio"]),
        )
        row(
            "cli: jobctl list --json, 1,000 jobs",
            _fmt(c["list_ms"], "ms"),
            _fmt(c["click_ms"], "ms"),
            _ratio(c["list_ratio"]),
            "≤ 3× import click",
            c["list_ratio"] <= 3,
        )
    pg = res.get("postgresql")
    if pg:
        for n, t in sorted(pg["throughput"].items()):
            mine, ref = t["jobctl"], t["procrastinate"]
            row(
                f"postgresql: {pg['runs']:,} × true, {n} daemon(s) × 4 workers: runs/s "
                f"(median of {pg['reps']})",
                _fmt(mine["runs_per_s"], "/s"),
                _fmt(ref["runs_per_s"], "/s") + f" (procrastinate, {n} × concurrency 4)",
                _ratio(mine["runs_per_s"] / ref["runs_per_s"]),
                "≥ 2×, ≥ 800 /s" if n == 1 else "≥ 2×",
                mine["runs_per_s"] >= 2 * ref["runs_per_s"]
                and (n != 1 or mine["runs_per_s"] >= 800),
            )
            if "cpu_ms" in mine and "cpu_ms" in ref:

                def cpu(c: dict[str, float]) -> str:
                    return " / ".join(_fmt(c[k], "ms") for k in ("daemon", "children", "server"))

                row(
                    f"postgresql: CPU a run, {n} daemon(s): own (its spawner's and keeper's "
                    "in it) / children / server",
                    cpu(mine["cpu_ms"]) + f" ({_fmt(mine['cpu_ms'].get('helpers'), 'ms')} theirs)",
                    cpu(ref["cpu_ms"]) + " (procrastinate)",
                )
        lat, plat = pg["latency"]["jobctl"], pg["latency"]["procrastinate"]
        row(
            f"postgresql: claim latency, one at a time ({pg['samples']}): p50 / p99",
            f"{_fmt(lat['p50_ms'], 'ms')} / {_fmt(lat['p99_ms'], 'ms')}",
            f"{_fmt(plat['p50_ms'], 'ms')} / {_fmt(plat['p99_ms'], 'ms')} (procrastinate)",
        )
        c = pg["cli"]
        row(
            "postgresql: cli: jobctl --db postgresql://… list --json, 1,000 jobs",
            _fmt(c["list_ms"], "ms"),
            _fmt(c["version_ms"], "ms") + " (jobctl --version)",
            _ratio(c["ratio"]),
        )
        if "sqlite_list_ms" in c:
            row(
                "postgresql: cli: the same against SQLite's, in pairs",
                _fmt(c["list_ms"], "ms"),
                _fmt(c["sqlite_list_ms"], "ms") + " (SQLite)",
                _ratio(c["vs_sqlite"]),
                "≤ 1.5×",
                c["vs_sqlite"] <= 1.5,
            )
            row(
                "postgresql: cli: importing psycopg in a new process",
                _fmt(c["driver_import_ms"], "ms"),
            )
    return out


def table(lines: list[tuple[str, ...]]) -> str:
    head = ("measure", "jobctl", "reference (limit or peer)", "ratio", "target", "verdict")
    allr = [head, *lines]
    widths = [max(len(r[i]) for r in allr) for i in range(len(head))]
    fmt = "| " + " | ".join(f"{{:{w}}}" for w in widths) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([fmt.format(*head), sep, *(fmt.format(*r) for r in lines)])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["guard"]:  # python -m bench guard: the bounds that slipped once
        from . import guard

        return guard.main(args[1:])
    a = parse_args(argv)
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="jobctl-bench-") as tmp:
        res = run(a, Path(tmp))
    print(f"medians of {a.reps} runs (cli: of {5 if a.quick else 10} pairs)")
    print(table(rows(res, a)))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
