"""``python -m bench.diagnostics.schedtrace``: where one burst's wall time goes, from the
kernel's scheduler events.

The burst of ``python -m bench`` (1,000 runs of ``true`` due at one instant, 4 workers)
runs once under ``perf sched record``; the events say, for the whole burst:

- the cores' time: idle, the daemon's, its children's, other processes';
- the daemon's own time line: running, blocked in a spawn (its ``vfork`` child has not
  yet exec'd), queued (woken, waiting for a core), asleep; and how many cores sat idle
  meanwhile;
- each spawn: whether the new child was placed on the daemon's core or the other one,
  how long the daemon was blocked, and how long it then waited for a core.

It needs Linux's ``perf`` and the right to record scheduler tracepoints (root, or a low
``kernel.perf_event_paranoid``). It is a diagnostic, not a workload of ``python -m
bench``: the recording itself costs the machine some time.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..stats import median

_LINE = re.compile(r"\s*\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)")
_FIELD = re.compile(r"(\w+)=(\S+)")
#: ``prev_state`` of a task that left its core for good
_EXITED = ("X", "Z")


@dataclass(frozen=True)
class Event:
    cpu: int
    time: float
    name: str  # the tracepoint without its ``sched:`` prefix
    fields: dict[str, str]


def parse(lines: Iterable[str]) -> list[Event]:
    """The events of ``perf script -F cpu,time,event,trace`` output (other lines are
    skipped)."""
    out = []
    for line in lines:
        m = _LINE.match(line)
        if m:
            name = m[3].rstrip(":").removeprefix("sched:")
            out.append(Event(int(m[1]), float(m[2]), name, dict(_FIELD.findall(m[4]))))
    return out


def daemon_pid(events: list[Event]) -> str:
    """The process that started the most children: the daemon, in a burst."""
    forks = Counter(e.fields["pid"] for e in events if e.name == "sched_process_fork")
    if not forks:
        raise ValueError("no fork in the trace")
    return forks.most_common(1)[0][0]


def _nonzero(c: Counter[str]) -> dict[str, float]:
    return {k: v for k, v in c.most_common() if v > 1e-9}


@dataclass
class _Spawn:
    """One spawn of the daemon, from its fork until the daemon runs again."""

    at: float
    cpu: int  # the daemon's core at the fork
    child: str
    child_cpu: int = -1  # where the child was placed
    released: float | None = None  # when the child's exec let the daemon go

    @property
    def side(self) -> str:
        return "same core" if self.child_cpu == self.cpu else "other core"


def analyse(events: list[Event], daemon: str) -> dict[str, object]:
    """Seconds of each kind over the burst: from the daemon's first spawn to the exit of
    its last child (see the module docstring for what is counted)."""
    forks = [e for e in events if e.name == "sched_process_fork" and e.fields["pid"] == daemon]
    if not forks:
        raise ValueError(f"process {daemon} started no child in the trace")
    kids = {e.fields["child_pid"] for e in forks}
    t0 = min(e.time for e in forks)
    t1 = max(
        e.time
        for e in events
        if e.name == "sched_switch"
        and e.fields["prev_pid"] in kids
        and e.fields["prev_state"] in _EXITED
    )
    on_cpu: dict[int, str] = {}  # cpu -> pid running there ("0": idle)
    state = "running"  # the daemon's: running, spawn, queued, asleep, blocked
    last = t0
    cores: Counter[str] = Counter()
    timeline: Counter[str] = Counter()
    idle_by_state: Counter[str] = Counter()
    spawns: dict[str, list[tuple[float, float]]] = defaultdict(list)
    unmatched: Counter[str] = Counter()
    missing = 0
    since = t0  # when the daemon's state last changed
    spawn: _Spawn | None = None  # the daemon's spawn under way

    def who(pid: str) -> str:
        if pid == "0":
            return "idle"
        if pid == daemon:
            return "daemon"
        return "children" if pid in kids else "other"

    for e in events:
        span = min(e.time, t1) - max(last, t0)
        last = e.time
        if span > 0:  # the state as it was since the previous event
            timeline[state] += span
            idle = 0
            for pid in on_cpu.values():
                cores[who(pid)] += span
                idle += pid == "0"
            idle_by_state[state] += span * idle
        f = e.fields
        if state != "running" and (
            (e.name == "sched_switch" and f["prev_pid"] == daemon)
            or (e.name == "sched_process_fork" and f["pid"] == daemon)
            or (e.name == "sched_stat_runtime" and f["pid"] == daemon)
        ):
            # the daemon is running here, but the switch to it is not in the trace (seen
            # after a migration to an idle core): it ran for the runtime this event reports
            # (0 for the others), taken back from the state it was thought to be in
            missing += 1
            ran = float(f.get("runtime", "0")) / 1e9
            back = max(0.0, min(ran, min(e.time, t1) - max(since, t0)))
            timeline[state] -= back
            timeline["running"] += back
            if e.cpu in on_cpu:
                cores[who(on_cpu[e.cpu])] -= back
                cores["daemon"] += back
            state, since = "running", e.time
            on_cpu[e.cpu] = daemon
            if spawn is not None and spawn.released is not None:  # its wait is not known
                unmatched[spawn.side] += 1
                spawn = None
        before = state
        if e.name == "sched_switch":
            on_cpu[e.cpu] = f["next_pid"]
            if f["prev_pid"] == daemon:
                ps = f["prev_state"]
                if ps.startswith("R"):
                    state = "queued"
                elif ps == "S":
                    state = "asleep"
                else:
                    state = "spawn" if spawn is not None else "blocked"
            if f["next_pid"] == daemon:
                state = "running"
                if spawn is not None and spawn.released is not None:
                    released = spawn.released
                    spawns[spawn.side].append((released - spawn.at, e.time - released))
                    spawn = None
        elif e.name == "sched_process_fork" and f["pid"] == daemon:
            if spawn is not None:  # the switch back to the daemon is not in the trace
                unmatched[spawn.side] += 1
            spawn = _Spawn(e.time, e.cpu, f["child_pid"])
        elif e.name == "sched_wakeup_new" and spawn is not None and f["pid"] == spawn.child:
            spawn.child_cpu = int(f["target_cpu"])
        elif e.name == "sched_waking" and f.get("pid") == daemon:
            if spawn is not None and spawn.released is None:
                spawn.released = e.time
            if state != "running":
                state = "queued"
        if state != before:
            since = e.time
    per_spawn = {
        side: {
            "spawns": len(v),
            "unmatched": unmatched[side],
            "blocked_median_us": median([b for b, _ in v]) * 1e6,
            "then_waited_median_us": median([w for _, w in v]) * 1e6,
            "then_waited_total_s": sum(w for _, w in v),
        }
        for side in sorted(set(spawns) | set(unmatched))
        for v in [spawns[side]]
    }
    return {
        "window_s": t1 - t0,
        "children": len(kids),
        "core_s": _nonzero(cores),
        "daemon_s": _nonzero(timeline),
        "idle_core_s_by_daemon_state": _nonzero(idle_by_state),
        "spawns": per_spawn,
        "switches_missing": missing,
    }


def report(res: dict[str, object]) -> str:
    lines = [f"burst window {res['window_s']:.3f} s, {res['children']} children"]
    for title, key in (
        ("cores' time (core-seconds)", "core_s"),
        ("the daemon's time line (seconds)", "daemon_s"),
        ("idle core time while the daemon was ... (core-seconds)", "idle_core_s_by_daemon_state"),
    ):
        values = res[key]
        assert isinstance(values, dict)
        lines.append(f"{title}:")
        lines += [f"  {k:10s} {v:7.3f}" for k, v in values.items()]
    spawns = res["spawns"]
    assert isinstance(spawns, dict)
    lines.append(
        f"switches to the daemon missing from the trace: {res['switches_missing']} "
        "(the daemon is taken as running from its next event)"
    )
    lines.append("spawns, by where the new child was placed:")
    for side, s in spawns.items():
        lines.append(
            f"  {side:10s} {s['spawns']:5d} spawns: blocked {s['blocked_median_us']:.0f} us "
            f"(median), then waited for a core {s['then_waited_median_us']:.0f} us "
            f"(median), {s['then_waited_total_s']:.3f} s in all; {s['unmatched']} more "
            "whose switch back is missing"
        )
    return "\n".join(lines)


def record_burst(jobs: int, workers: int) -> list[Event]:
    """One burst of ``python -m bench`` under ``perf sched record``."""
    from .. import jobctl_runs

    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("Error: perf is not installed (Debian: linux-perf)")
    with tempfile.TemporaryDirectory(prefix="jobctl-schedtrace-") as d:
        data = Path(d) / "sched.data"
        rec = subprocess.Popen(
            # a large buffer (16 MiB a core): fewer events lost in a burst
            [perf, "sched", "record", "-a", "-m", "4096", "-o", str(data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # perf's set-up, before the burst's daemon starts
        try:
            if rec.poll() is not None:
                err = rec.stderr.read().decode(errors="replace") if rec.stderr else ""
                raise SystemExit(f"Error: perf sched record failed: {err.strip()[:300]}")
            jobctl_runs.burst(Path(d), jobs, workers)
        finally:
            rec.send_signal(signal.SIGINT)
            rec.wait(60)
        text = subprocess.run(
            [perf, "script", "-i", str(data), "-F", "cpu,time,event,trace"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return parse(text.splitlines())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.diagnostics.schedtrace", description=__doc__)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = p.parse_args(argv)
    events = record_burst(a.jobs, a.workers)
    res = analyse(events, daemon_pid(events))
    print(report(res))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
