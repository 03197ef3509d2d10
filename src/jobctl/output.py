"""Rendering: JSON objects per SPEC §7 and human tables. The only rich user.

Nothing a user typed is interpreted: table cells are plain ``Text`` (no markup) and
control characters are shown escaped, so a command containing ``[bold]`` or an escape
sequence prints literally.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .clock import iso
from .models import Attempt, DaemonInfo, Job, Run, RunState, TriggerKind

# ---------------------------------------------------------------------- JSON


def trigger_json(job: Job) -> dict[str, Any]:
    t = job.trigger
    out: dict[str, Any] = {
        "kind": t.kind.value,
        "expr": t.expr,
        "tz": t.tz,
        "after_completion": t.after_completion,
    }
    if t.kind is TriggerKind.INTERVAL:
        out["every"] = t.every_seconds
        out["start"] = iso(t.anchor)
    if t.kind is TriggerKind.ONCE:
        out["expr"] = iso(t.at)
        out["at"] = iso(t.at)
    return out


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "job": run.job_name,
        "scheduled_for": iso(run.scheduled_for),
        "state": run.state.value,
        "skip_reason": run.skip_reason.value if run.skip_reason else None,
        "attempt": run.attempt,
        "max_attempts": run.max_attempts,
        "not_before": iso(run.not_before)
        if run.state in (RunState.PENDING, RunState.FAILED)
        else None,
        "leased_by": run.leased_by,
        "lease_until": iso(run.lease_until),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "exit_code": run.exit_code,
        "last_error": run.last_error,
        "reason": run.reason.value,
        "catchup_from": iso(run.catchup_from),
        "priority": run.priority,
        "run_key": run.run_key,
        "env": run.env,
        "locks": list(run.locks),
        "cancel_requested": run.cancel_requested,
    }


def job_json(job: Job, last_run: Run | None) -> dict[str, Any]:
    s = job.spec
    return {
        "id": job.id,
        "name": job.name,
        "description": s.description,
        "trigger": trigger_json(job),
        "command": s.command,
        "stdin": s.stdin,
        "env": s.env,
        "cwd": s.cwd,
        "shell": s.shell,
        "paused": job.state.value == "paused",
        "state": job.state.value,
        "catchup": s.catchup.value,
        "catchup_limit": s.catchup_limit,
        "overlap": s.overlap.value,
        "timeout": s.timeout_seconds,
        "retries": s.retries,
        "backoff": s.backoff_seconds,
        "priority": s.priority,
        "jitter": s.jitter_seconds,
        "on_failure": s.on_failure,
        "locks": list(s.locks),
        "next_run_at": iso(job.next_run_at),
        "missed_total": job.missed_total,
        "last_run": run_json(last_run) if last_run else None,
        "created_at": iso(job.created_at),
    }


def attempt_json(a: Attempt) -> dict[str, Any]:
    return {
        "run_id": a.run_id,
        "attempt": a.attempt,
        "started_at": iso(a.started_at),
        "finished_at": iso(a.finished_at),
        "exit_code": a.exit_code,
        "error": a.error,
        "output_bytes": a.output_bytes,
    }


def daemon_json(d: DaemonInfo) -> dict[str, Any]:
    return {
        "id": d.id,
        "pid": d.pid,
        "host": d.host,
        "leader": d.leader,
        "started_at": iso(d.started_at),
        "heartbeat_at": iso(d.heartbeat_at),
    }


def print_json(obj: Any) -> None:
    """An object indented; an array one element per line (``list --json`` of 1,000 jobs).

    ``indent`` makes ``json`` fall back to its pure-Python encoder, several times slower
    than the C one; arrays can be long, so each element is encoded compactly on its line.
    """
    if isinstance(obj, list):
        if not obj:
            sys.stdout.write("[]\n")
            return
        dumps = json.JSONEncoder(ensure_ascii=False).encode
        sys.stdout.write("[\n  " + ",\n  ".join(dumps(x) for x in obj) + "\n]\n")
    else:
        sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------- human


def safe(text: str | None) -> str:
    """Show control characters (escape sequences, newlines) escaped, never interpreted."""
    if text is None:
        return ""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def local_time(dt: datetime | None, zone: str | None = None) -> str:
    """A time for people: ``2026-12-01 08:00:00 CET``, to the second, in the machine's
    local zone or in ``zone``; ``-`` for None. (JSON has ISO UTC with ``Z`` instead.)"""
    if dt is None:
        return "-"
    if zone is not None:
        from zoneinfo import ZoneInfo

        return dt.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")
    return dt.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, markup=False, emoji=False, soft_wrap=False)


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A table as lines for a pipe or a file: one line a row, columns padded to their
    widest cell and two spaces apart, never wrapped, no trailing spaces."""
    cells = [list(columns), *([safe(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """On a terminal a table that fits its width; elsewhere :func:`plain_table`."""
    if not sys.stdout.isatty():
        sys.stdout.write("".join(line + "\n" for line in plain_table(columns, rows)))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold")
    for c in columns:
        table.add_column(c, overflow="fold")
    for row in rows:
        table.add_row(*(Text(safe(cell)) for cell in row))
    _console().print(table)


def schedule_text(job: Job) -> str:
    from . import triggers

    return triggers.describe(job.trigger)


def print_jobs(jobs: Sequence[Job], last_runs: dict[int, Run]) -> None:
    if not jobs:
        sys.stdout.write("no jobs\n")
        return
    rows = []
    for j in jobs:
        lr = last_runs.get(j.id)
        rows.append(
            [
                j.name,
                schedule_text(j),
                local_time(j.next_run_at) if j.state.value == "active" else "-",
                lr.state.value if lr else "-",
                j.state.value,
            ]
        )
    _table(["NAME", "SCHEDULE", "NEXT RUN", "LAST RUN", "STATE"], rows)


def print_runs(runs: Sequence[Run]) -> None:
    if not runs:
        sys.stdout.write("no runs\n")
        return
    rows = []
    for r in runs:
        state = r.state.value
        if r.skip_reason:
            state += f" ({r.skip_reason.value})"
        rows.append(
            [
                str(r.id),
                r.job_name,
                local_time(r.scheduled_for),
                state,
                str(r.attempt),
                r.reason.value,
                r.last_error or "",
            ]
        )
    _table(["ID", "JOB", "SCHEDULED FOR", "STATE", "ATTEMPT", "REASON", "LAST ERROR"], rows)


def print_job(job: Job, runs: Sequence[Run]) -> None:
    s = job.spec
    from rich.text import Text

    fields = [
        ("name", job.name),
        ("description", s.description or "-"),
        ("schedule", schedule_text(job)),
        ("command", s.command),
        ("state", job.state.value),
        ("next run", local_time(job.next_run_at)),
        ("catch-up", f"{s.catchup.value} (limit {s.catchup_limit})"),
        ("overlap", s.overlap.value),
        ("retries", f"{s.retries}, backoff {s.backoff_seconds:g}s"),
        ("timeout", f"{s.timeout_seconds:g}s" if s.timeout_seconds else "-"),
        ("priority", str(s.priority)),
        ("jitter", f"{s.jitter_seconds:g}s" if s.jitter_seconds else "-"),
        ("env", " ".join(f"{k}={v}" for k, v in sorted(s.env.items())) or "-"),
        ("cwd", s.cwd or "$HOME"),
        ("shell", s.shell),
        ("stdin", s.stdin if s.stdin is not None else "-"),
        ("on failure", s.on_failure or "-"),
        ("locks", ", ".join(s.locks) or "-"),
        ("missed", str(job.missed_total)),
    ]
    width = max(len(k) for k, _ in fields)
    lines = [f"{k:<{width}}  {safe(v)}".rstrip() for k, v in fields]
    if sys.stdout.isatty():
        console = _console()
        for line in lines:
            console.print(Text(line))
        console.print(Text(""))
    else:
        sys.stdout.write("".join(line + "\n" for line in lines) + "\n")
    print_runs(runs)


def print_status(
    daemons: Sequence[DaemonInfo], counts: dict[str, int], next_due: datetime | None
) -> None:
    if daemons:
        _table(
            ["DAEMON", "PID", "HOST", "LEADER", "HEARTBEAT"],
            [
                [d.id, str(d.pid), d.host, "yes" if d.leader else "", local_time(d.heartbeat_at)]
                for d in daemons
            ],
        )
    else:
        sys.stdout.write("no daemon is running\n")
    sys.stdout.write(
        "runs: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v) + "\n"
        if any(counts.values())
        else "runs: none\n"
    )
    sys.stdout.write(f"next due: {local_time(next_due)}\n")


def print_lines(lines: Sequence[str]) -> None:
    for line in lines:
        sys.stdout.write(safe(line) + "\n")


def print_output(data: bytes, *, tty: bool) -> None:
    """A command's captured output: raw bytes into a pipe or file; on a terminal, escape
    sequences and other control characters are shown escaped, never interpreted."""
    sys.stdout.flush()
    if not tty:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    text = data.decode("utf-8", "replace")
    shown = "".join(ch if ch.isprintable() or ch in "\n\t" else repr(ch)[1:-1] for ch in text)
    sys.stdout.write(shown)
    sys.stdout.flush()
