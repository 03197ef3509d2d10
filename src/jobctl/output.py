"""Rendering: JSON objects (jobctl(1), DESCRIPTION) and human tables. The only rich user.

Nothing a user typed is interpreted: table cells are plain ``Text`` (no markup) and
control characters are shown escaped, so a command containing ``[bold]`` or an escape
sequence prints literally.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .clock import iso
from .models import Attempt, Job, Limits, NotifyRule, Run, RunState, Trigger, TriggerKind

if TYPE_CHECKING:  # for the annotations: the listing commands' start imports none of them
    from .access import ApiToken, SecretInfo
    from .fleet import DaemonInfo, Maintenance
    from .notifications import Channel, Notification
    from .outcomes import Coverage
    from .waits import Waiting

# ---------------------------------------------------------------------- JSON


def trigger_json(job: Job) -> dict[str, Any]:
    """The job's ``trigger``: a set is ``{kind: "set", expr: its members' texts joined with
    " | ", tz}`` (its fixed rates' ``start``, as :func:`start_of` gives it)."""
    t = job.trigger
    out = _trigger_obj(t)
    if t.kind is TriggerKind.SET and t.anchor is not None:
        from .triggers import is_fixed_rate, members  # a set's parser, for sets only

        rates = [m for m in members(t) if is_fixed_rate(m)]
        # several rates share an anchor no start stands for: it is given as it is
        out["start"] = iso(start_of(rates[0]) if len(rates) == 1 else t.anchor)
    return out


def start_of(t: Trigger) -> datetime | None:
    """A fixed rate's ``start`` in job JSON: the ``--start`` given, or, when the anchor only
    sets the phase (the instant of add without ``--start``, no window), the first window,
    one interval later, as ``export`` writes it: posted back to the API it gives the same
    windows."""
    if t.anchor is None or not t.phase_only or t.every_seconds is None:
        return t.anchor
    return _first_window(t.anchor, t.every_seconds)


def _first_window(anchor: datetime, every_seconds: float) -> datetime:
    # as jobctl.triggers counts it, in whole microseconds (a listing never loads triggers)
    return anchor + timedelta(microseconds=round(every_seconds * 1_000_000))


def triggers_json(job: Job) -> list[dict[str, Any]]:
    """The job's ``triggers``: each trigger of its set, or its one trigger."""
    if job.trigger.kind is not TriggerKind.SET:
        return [_trigger_obj(job.trigger)]
    from .triggers import members  # a set's parser: a listing of plain jobs never loads it

    return [_trigger_obj(t) for t in members(job.trigger)]


def _trigger_obj(t: Trigger) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": t.kind.value,
        "expr": t.expr,
        "tz": t.tz,
        "after_completion": t.after_completion,
    }
    if t.kind is TriggerKind.CRON:
        # the expression with each H replaced by this job's numbers (jobctl(1), --cron)
        out["resolved"] = t.resolved or t.expr
    elif t.kind is TriggerKind.SET and t.resolved:
        out["resolved"] = t.resolved
    if t.kind is TriggerKind.INTERVAL:
        out["every"] = t.every_seconds
        out["start"] = iso(start_of(t))
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
        "duration": run.duration_seconds,
        "host": run.host,
        "hook_status": run.hook_status,
        "cpu": run.cpu,
        "max_rss": run.max_rss,
        "job_revision": run.job_revision,
    }


def job_json(job: Job, last_run: Run | None) -> dict[str, Any]:
    s = job.spec
    triggers = triggers_json(job)
    # a job of one trigger: ``trigger`` is the same object as its ``triggers`` (made once)
    one = job.trigger.kind is not TriggerKind.SET
    return {
        "id": job.id,
        "name": job.name,
        "description": s.description,
        "trigger": dict(triggers[0]) if one else trigger_json(job),
        "triggers": triggers,
        "except": list(s.excepts),
        "except_calendars": list(s.except_calendars),
        "active_from": iso(job.trigger.active_from),
        "active_until": iso(job.trigger.active_until),
        "command": None if s.watched else s.command,
        "watch": s.watched,
        "ping_key": s.ping_key,
        "stdin": s.stdin,
        "env": s.env,
        "secrets": s.secrets,
        "env_file": s.env_file,
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
        "on": list(s.on_tags),
        "paused_reason": _paused_reason(job),
        "deadline": s.deadline_seconds,
        "pause_after_failures": s.pause_after_failures,
        "max_running": s.max_running,
        "ok_exit": list(s.ok_exit),
        "no_retry_exit": list(s.no_retry_exit),
        "limits": s.limits.to_dict(),
        "keep_runs": s.keep_runs,
        "keep_for": s.keep_for_seconds,
        "notify": [r.to_json() for r in s.notify],
        "grace": s.grace_seconds,
        "warn_after": s.warn_after_seconds,
        "next_run_at": iso(job.next_run_at),
        "missed_total": job.missed_total,
        "last_run": run_json(last_run) if last_run else None,
        "created_at": iso(job.created_at),
        "revision": job.revision,
    }


def attempt_json(a: Attempt) -> dict[str, Any]:
    return {
        "run_id": a.run_id,
        "attempt": a.attempt,
        "started_at": iso(a.started_at),
        "finished_at": iso(a.finished_at),
        "exit_code": a.exit_code,
        "duration": a.duration_seconds,
        "error": a.error,
        "output_bytes": a.output_bytes,
        "host": a.host,
        "pid": a.pid,
        "cpu_user": a.cpu_user,
        "cpu_system": a.cpu_system,
        "max_rss": a.max_rss,
    }


def _paused_reason(job: Job) -> str | None:
    """``user`` or ``failures`` for a paused job (``user`` when the store kept none), else
    None."""
    if job.state.value != "paused":
        return None
    return job.paused_reason.value if job.paused_reason is not None else "user"


def waiting_json(w: Waiting | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {
        "reason": w.reason.value,
        "detail": w.detail,
        "until": iso(w.until),
        "lock": w.lock,
        "run_id": w.run_id,
    }


def inspect_json(
    run: Run,
    attempts: Sequence[Attempt],
    waiting: Waiting | None,
    notifications: Sequence[Notification] = (),
) -> dict[str, Any]:
    """``inspect --json``: the run object plus ``attempts`` (oldest first), ``waiting`` and
    ``notifications`` (the run's, newest first)."""
    data = run_json(run)
    data["attempts"] = [attempt_json(a) for a in attempts]
    data["waiting"] = waiting_json(waiting)
    data["notifications"] = [notification_json(n) for n in notifications]
    return data


def daemon_json(d: DaemonInfo) -> dict[str, Any]:
    return {
        "id": d.id,
        "pid": d.pid,
        "host": d.host,
        "leader": d.leader,
        "started_at": iso(d.started_at),
        "heartbeat_at": iso(d.heartbeat_at),
        "tags": list(d.tags),
    }


def maintenance_json(m: Maintenance | None) -> dict[str, Any] | None:
    """``status --json``'s ``maintenance``: the window in force, or null."""
    if m is None:
        return None
    return {"since": iso(m.since), "until": iso(m.until), "reason": m.reason, "who": m.who}


def maintenance_line(m: Maintenance) -> str:
    """One line for the window in force: ``maintenance since …, until …: reason (who)``."""
    until = f"until {local_time(m.until)}" if m.until else "until resume --all"
    why = f": {m.reason}" if m.reason else ""
    who = f" ({m.who})" if m.who else ""
    return f"maintenance since {local_time(m.since)}, {until}{why}{who}"


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


def human_duration(seconds: float | None) -> str:
    """``0.4s``, ``3.2s``, ``59s``, ``4m05s``, ``2h03m``, ``3d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


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
    columns = ["NAME", "SCHEDULE", "NEXT RUN", "LAST RUN", "STATE"]
    if any(j.missed_total for j in jobs):
        # windows that passed while no scheduler ran and were not run (jobctl(1), CATCH-UP AND DST)
        columns.append("MISSED")
        for row, j in zip(rows, jobs, strict=True):
            row.append(str(j.missed_total) if j.missed_total else "")
    _table(columns, rows)


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
                human_duration(r.duration_seconds) if r.duration_seconds is not None else "",
                r.reason.value,
                r.last_error or "",
            ]
        )
    _table(
        ["ID", "JOB", "SCHEDULED FOR", "STATE", "ATTEMPT", "DURATION", "REASON", "LAST ERROR"],
        rows,
    )


def _active_text(job: Job) -> str | None:
    t = job.trigger
    if t.active_from is None and t.active_until is None:
        return None
    lo = local_time(t.active_from, t.tz) if t.active_from else "-"
    hi = local_time(t.active_until, t.tz) if t.active_until else "-"
    return f"from {lo} until {hi}"


def print_job(job: Job, runs: Sequence[Run]) -> None:
    from .durations import format_duration

    s = job.spec
    from rich.text import Text

    fields = [
        ("name", job.name),
        ("description", s.description or "-"),
        ("schedule", schedule_text(job)),
        *([("resolved", job.trigger.resolved)] if job.trigger.resolved else []),
        ("command", s.command),
        ("state", job.state.value),
        ("next run", local_time(job.next_run_at)),
        ("catch-up", f"{s.catchup.value} (limit {s.catchup_limit})"),
        ("overlap", s.overlap.value),
        ("retries", f"{s.retries}, backoff {format_duration(s.backoff_seconds)}"),
        ("timeout", format_duration(s.timeout_seconds) if s.timeout_seconds else "-"),
        ("priority", str(s.priority)),
        ("jitter", format_duration(s.jitter_seconds) if s.jitter_seconds else "-"),
        ("env", " ".join(f"{k}={v}" for k, v in sorted(s.env.items())) or "-"),
        ("cwd", s.cwd or "$HOME"),
        ("shell", s.shell),
        ("stdin", s.stdin if s.stdin is not None else "-"),
        ("on failure", s.on_failure or "-"),
        ("notify", notify_text(s.notify) or "- (channels with --default)"),
        ("grace", format_duration(s.grace_seconds) if s.grace_seconds is not None else "-"),
        (
            "warn after",
            format_duration(s.warn_after_seconds) if s.warn_after_seconds is not None else "-",
        ),
        ("locks", ", ".join(s.locks) or "-"),
        ("on", ", ".join(s.on_tags) or "any daemon"),
        ("keeps", keep_text(s.keep_runs, s.keep_for_seconds)),
        ("missed", str(job.missed_total)),
    ]
    fields = [
        ("state", job.state.value + _paused_by(job)) if k == "state" else (k, v) for k, v in fields
    ]
    if s.ping_key is not None:
        # watched (README "Watching jobs that jobctl does not run"): no command runs here
        fields = [("ping", f"/ping/{s.ping_key}") if k == "command" else (k, v) for k, v in fields]
        starting = {"catch-up", "overlap", "retries", "priority", "jitter", "env", "cwd"}
        starting |= {"shell", "stdin", "on failure", "locks"}
        fields = [(k, v) for k, v in fields if k not in starting]
    policies = [
        ("deadline", format_duration(s.deadline_seconds) if s.deadline_seconds else None),
        ("pause after", f"{s.pause_after_failures} dead runs" if s.pause_after_failures else None),
        ("max running", str(s.max_running) if s.max_running else None),
        ("ok exit", ",".join(map(str, s.ok_exit)) or None),
        ("no-retry exit", ",".join(map(str, s.no_retry_exit)) or None),
        ("limits", limits_text(s.limits) or None),
        # the names of its secrets, never a value
        ("secrets", " ".join(f"{k}={v}" for k, v in sorted(s.secrets.items())) or None),
        ("env file", s.env_file),
        # schedule sets: what is excluded, and when the job is active
        ("except", " | ".join(s.excepts) or None),
        ("calendars", ", ".join(s.except_calendars) or None),
        ("active", _active_text(job)),
    ]
    fields[-1:-1] = [(k, v) for k, v in policies if v is not None]
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


def _paused_by(job: Job) -> str:
    reason = _paused_reason(job)
    return " (by failures)" if reason == "failures" else ""


def notify_text(rules: Sequence[NotifyRule]) -> str:
    """``ops:dead,recovered; mail:dead``: a job's channels with their events, as
    ``--notify`` takes them."""
    return "; ".join(f"{r.channel}:{','.join(e.value for e in r.events)}" for r in rules)


def limits_text(limits: Limits) -> str:
    """``nice 5, io idle, memory 1G, cpu 1m, files 64`` (only those set)."""
    from .durations import format_duration
    from .specs import format_size

    parts = []
    if limits.nice is not None:
        parts.append(f"nice {limits.nice}")
    if limits.io_class is not None:
        parts.append(f"io {limits.io_class.value}")
    if limits.memory_max is not None:
        parts.append(f"memory {format_size(limits.memory_max)}")
    if limits.cpu_max_seconds is not None:
        parts.append(f"cpu {format_duration(limits.cpu_max_seconds)}")
    if limits.files_max is not None:
        parts.append(f"files {limits.files_max}")
    return ", ".join(parts)


def keep_text(keep_runs: int, keep_for_seconds: float | None) -> str:
    """``1000 finished runs``, ``100 finished runs, at most 7d``."""
    from .durations import format_duration

    text = f"{keep_runs} finished run{'' if keep_runs == 1 else 's'}"
    return text + (f", at most {format_duration(keep_for_seconds)}" if keep_for_seconds else "")


def backfill_json(created: Sequence[int], requeued: Sequence[int], left: int) -> dict[str, Any]:
    """``backfill --json``: the ids of the runs created and requeued, and how many windows
    were left alone."""
    return {"created": list(created), "requeued": list(requeued), "left": left, "dry_run": False}


def backfill_dry_run_json(
    windows: Sequence[datetime], requeued: Sequence[int], left: int
) -> dict[str, Any]:
    """``backfill --dry-run --json``: the windows that would get a new run (no run has an
    id yet), the ids of the runs that would be made pending, how many would be left."""
    return {
        "windows": [iso(w) for w in windows],
        "requeued": list(requeued),
        "left": left,
        "dry_run": True,
    }


def backfill_line(name: str, created: int, requeued: int, left: int) -> str:
    return f"backfill {name}: {created} created, {requeued} requeued, {left} left alone"


def coverage_json(entries: Sequence[Coverage]) -> list[dict[str, Any]]:
    return [
        {
            "scheduled_for": iso(e.scheduled_for),
            "state": e.state.value if e.state is not None else "none",
            "run_id": e.run_id,
            "skip_reason": e.skip_reason.value if e.skip_reason is not None else None,
        }
        for e in entries
    ]


def coverage_summary(entries: Sequence[Coverage]) -> str:
    """``24 windows: 22 succeeded, 1 dead, 1 none``: states in their usual order, none last."""
    counts: dict[str, int] = {}
    for e in entries:
        key = e.state.value if e.state is not None else "none"
        counts[key] = counts.get(key, 0) + 1
    order = [s.value for s in RunState] + ["none"]
    parts = [f"{counts[k]} {k}" for k in order if k in counts]
    n = len(entries)
    return f"{n} window{'' if n == 1 else 's'}" + (": " + ", ".join(parts) if parts else "")


def print_coverage(entries: Sequence[Coverage], zone: str) -> None:
    """One line a window (its time in the job's zone, the state, the run), then the summary."""
    rows = []
    for e in entries:
        state = e.state.value if e.state is not None else "none"
        if e.skip_reason is not None:
            state += f" ({e.skip_reason.value})"
        run = f"run {e.run_id}" if e.run_id is not None else "-"
        rows.append((local_time(e.scheduled_for, zone), state, run))
    if rows:
        _table(["WINDOW", "STATE", "RUN"], rows)
    print_lines([coverage_summary(entries)])


def print_status(
    daemons: Sequence[DaemonInfo],
    counts: dict[str, int],
    next_due: datetime | None,
    maintenance: Maintenance | None = None,
) -> None:
    if maintenance is not None:
        sys.stdout.write(maintenance_line(maintenance) + "\n")
    if daemons:
        _table(
            ["DAEMON", "PID", "HOST", "LEADER", "HEARTBEAT", "TAGS"],
            [
                [
                    d.id,
                    str(d.pid),
                    d.host,
                    "yes" if d.leader else "",
                    local_time(d.heartbeat_at),
                    ", ".join(d.tags) or "-",
                ]
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


def _shown(text: str) -> str:
    """Output text for a terminal: newlines and tabs kept, other control characters escaped."""
    return "".join(ch if ch.isprintable() or ch in "\n\t" else repr(ch)[1:-1] for ch in text)


def print_output(data: bytes, *, tty: bool) -> None:
    """A command's captured output: raw bytes into a pipe or file; on a terminal, escape
    sequences and other control characters are shown escaped, never interpreted."""
    sys.stdout.flush()
    if not tty:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    sys.stdout.write(_shown(data.decode("utf-8", "replace")))
    sys.stdout.flush()


class OutputStream:
    """Followed output (``logs --follow``) written as it comes, in chunks: raw bytes into a
    pipe or file; on a terminal decoded incrementally (a character split between two chunks
    is shown whole, bytes that are not UTF-8 as U+FFFD) and shown as :func:`print_output`
    does."""

    def __init__(self, *, tty: bool) -> None:
        import codecs

        self.tty = tty
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self.tty:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        sys.stdout.write(_shown(self._decoder.decode(data)))
        sys.stdout.flush()

    def end(self) -> None:
        """The attempt ended: show what an unfinished character left (as U+FFFD)."""
        if self.tty:
            sys.stdout.write(_shown(self._decoder.decode(b"", final=True)))
            sys.stdout.flush()
            self._decoder.reset()


def waiting_text(w: Waiting | None) -> str:
    """``backoff: retry at 2026-12-01 12:00:05 UTC`` (local time for people), or ``-``."""
    if w is None:
        return "-"
    if w.until is not None:
        head = "retry at" if w.reason.value == "backoff" else "due at"
        return f"{w.reason.value}: {head} {local_time(w.until)}"
    return f"{w.reason.value}: {w.detail}"


def hook_text(run: Run) -> str:
    """The ``--on-failure`` command's result for a dead run (``-`` when none applies)."""
    if not run.settings.on_failure or run.state is not RunState.DEAD:
        return "-"
    return run.hook_status or "not finished yet"


def print_inspect(
    run: Run, attempts: Sequence[Attempt], waiting: Waiting | None, now: datetime
) -> None:
    """``inspect``: the run's fields, why it waits, then one row per attempt."""
    state = run.state.value
    if run.cancel_requested and run.state is RunState.LEASED:
        state += " (cancel requested)"
    current = run.attempt - run.attempt_base
    total = run.max_attempts - run.attempt_base
    fields = [
        ("run", str(run.id)),
        ("job", run.job_name),
        ("state", state),
        ("window", local_time(run.scheduled_for)),
        ("reason", run.reason.value),
        ("attempt", f"{run.attempt} ({current} of {total} in this set)" if run.attempt else "0"),
        ("priority", str(run.priority)),
        ("key", run.run_key or "-"),
        ("locks", ", ".join(run.locks) or "-"),
        ("env", " ".join(f"{k}={v}" for k, v in sorted(run.env.items())) or "-"),
        ("host", run.host or "-"),
        ("last error", run.last_error or "-"),
        ("on failure", hook_text(run)),
        ("waiting", waiting_text(waiting)),
    ]
    if run.state is RunState.LEASED:
        fields.insert(3, ("lease", f"{run.leased_by} until {local_time(run.lease_until)}"))
    width = max(len(k) for k, _ in fields)
    lines = [f"{k:<{width}}  {safe(v)}".rstrip() for k, v in fields]
    sys.stdout.write("".join(line + "\n" for line in lines) + "\n")
    if not attempts:
        sys.stdout.write("no attempts\n")
        return
    rows = []
    for a in attempts:
        if a.finished_at is None:
            duration = f"{human_duration((now - a.started_at).total_seconds())} so far"
        else:
            duration = human_duration(a.duration_seconds)
        rows.append(
            [
                str(a.attempt),
                local_time(a.started_at),
                local_time(a.finished_at),
                duration,
                "-" if a.exit_code is None else str(a.exit_code),
                a.error or ("running" if a.finished_at is None else ""),
                str(a.output_bytes),
                a.host or "-",
                "-" if a.pid is None else str(a.pid),
                "-" if a.cpu_user is None else f"{a.cpu_user + (a.cpu_system or 0):.2f}s",
                "-" if a.max_rss is None else f"{a.max_rss / (1 << 20):.1f}M",
            ]
        )
    _table(
        [
            "ATTEMPT",
            "STARTED",
            "ENDED",
            "DURATION",
            "EXIT",
            "ERROR",
            "OUTPUT",
            "HOST",
            "PID",
            "CPU",
            "MAXRSS",
        ],
        rows,
    )


def outcome_line(run: Run) -> str:
    """The line ``run --wait`` ends with: ``run 42 succeeded in 3.2s``, ``run 42 dead after
    3 attempts: exit 7``, ``run 42 cancelled``."""
    n = run.attempt - run.attempt_base
    attempts = f"{n} attempt{'' if n == 1 else 's'}"
    if run.state is RunState.SUCCEEDED:
        line = f"run {run.id} succeeded in {human_duration(run.duration_seconds)}"
        return line + (f" (attempt {n})" if n > 1 else "")
    if run.state is RunState.DEAD:
        return f"run {run.id} dead after {attempts}: {run.last_error or 'failed'}"
    if run.state is RunState.CANCELLED:
        return f"run {run.id} cancelled" + (f" after {attempts}" if n else "")
    return f"run {run.id} {run.state.value}"


class StatusLine:
    """One live line on stderr (a terminal), redrawn in place; gone once stopped."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        self._text = Text
        console = Console(stderr=True, highlight=False, markup=False, emoji=False)
        self._live = Live(Text(""), console=console, transient=True, refresh_per_second=8)
        self._live.start()

    def update(self, text: str) -> None:
        self._live.update(self._text(safe(text)))

    def stop(self) -> None:
        self._live.stop()


# ------------------------------------------------------ revisions (jobctl(1), jobctl history)


def revision_json(rev: Any) -> dict[str, Any]:
    """``history --json``: ``{revision, at, who, source, changes}``."""
    return {
        "revision": rev.revision,
        "at": iso(rev.at),
        "who": rev.who,
        "source": rev.source,
        "changes": rev.changes,
    }


def print_history(revisions: Sequence[Any]) -> None:
    """A table, a row a revision, under a header: number, time, who, source, and the
    changes as ``KEY OLD -> NEW; ...``."""
    from .jobfile import describe_changes

    if not revisions:
        print_lines(["no revisions"])
        return
    _table(
        ["REV", "AT", "WHO", "SOURCE", "CHANGES"],
        [
            [str(r.revision), local_time(r.at), r.who, r.source, describe_changes(r.changes)]
            for r in revisions
        ],
    )


# ---------------------------------------------------------------------- notifications


def channel_json(ch: Channel) -> dict[str, Any]:
    """``notify list --json``: a webhook's URL as its scheme and host only."""
    return {
        "name": ch.name,
        "kind": ch.kind.value,
        "target": ch.shown_target,
        "default_events": [e.value for e in ch.default_events],
    }


def notification_json(n: Notification) -> dict[str, Any]:
    return {
        "id": n.id,
        "key": n.key,
        "channel": n.channel,
        "event": n.event.value,
        "job": n.job,
        "run_id": n.run_id,
        "attempt": n.attempt,
        "state": n.state.value,
        "tries": n.tries,
        "created_at": iso(n.created_at),
        "sent_at": iso(n.sent_at),
        "last_error": n.last_error,
        "text": n.text,
        "detail": n.detail,
    }


def print_channels(channels: Sequence[Channel]) -> None:
    if not channels:
        sys.stdout.write("no channels\n")
        return
    _table(
        ["NAME", "KIND", "TARGET", "DEFAULT EVENTS"],
        [
            [c.name, c.kind.value, c.shown_target, ",".join(e.value for e in c.default_events)]
            for c in channels
        ],
    )


def calendars_json(rows: Sequence[tuple[str, Sequence[date], Sequence[str]]]) -> list[Any]:
    """``calendar list --json``: ``[{name, dates, used_by}]``."""
    return [
        {"name": n, "dates": [d.isoformat() for d in days], "used_by": list(users)}
        for n, days, users in rows
    ]


def print_calendars(rows: Sequence[tuple[str, Sequence[date], Sequence[str]]]) -> None:
    if not rows:
        sys.stdout.write("no calendars\n")
        return
    _table(
        ["NAME", "DATES", "USED BY"],
        [
            [n, " ".join(d.isoformat() for d in days) or "-", ", ".join(users) or "-"]
            for n, days, users in rows
        ],
    )


def print_notifications(items: Sequence[Notification]) -> None:
    if not items:
        sys.stdout.write("no notifications\n")
        return
    _table(
        ["ID", "CHANNEL", "EVENT", "JOB", "RUN", "STATE", "TRIES", "CREATED", "ERROR"],
        [
            [
                str(n.id),
                n.channel,
                n.event.value,
                n.job or "-",
                "-" if n.run_id is None else str(n.run_id),
                n.state.value,
                str(n.tries),
                local_time(n.created_at),
                n.last_error or "",
            ]
            for n in items
        ],
    )


def plan_json(slots: Sequence[Any]) -> dict[str, Any]:
    """``plan --json``: every slot with a start or a running run."""
    return {
        "slots": [
            {"at": iso(s.at), "starts": s.starts, "running": s.running, "jobs": list(s.jobs)}
            for s in slots
        ]
    }


def print_plan(
    top: Sequence[Any], line: str, per_mark: int, most: int, by: str, start: datetime, hours: float
) -> None:
    """``plan``: the busiest slots as a table, then the one-line chart of starts."""
    if not top:
        print_lines([f"no windows in the {hours:g} hours from {local_time(start)}"])
        return
    rows = []
    for s in top:
        names = ", ".join(s.jobs[:5]) + (f", … (+{len(s.jobs) - 5})" if len(s.jobs) > 5 else "")
        rows.append((local_time(s.at), str(s.starts), str(s.running), names or "-"))
    _table(["SLOT", "STARTS", "RUNNING", "STARTING"], rows)
    unit = f"{per_mark} {by}{'s' if per_mark != 1 else ''}"
    print_lines([f"starts |{line}| a mark is {unit}, the tallest {most}"])


def secret_json(info: SecretInfo) -> dict[str, Any]:
    """A secret as ``secret list --json`` and the API show it: never its value."""
    return {"name": info.name, "updated_at": iso(info.updated_at), "used_by": list(info.used_by)}


def print_secrets(items: Sequence[SecretInfo]) -> None:
    if not items:
        sys.stdout.write("no secrets\n")
        return
    _table(
        ["NAME", "UPDATED", "USED BY"],
        [[s.name, local_time(s.updated_at), ", ".join(s.used_by) or "-"] for s in items],
    )


def token_json(t: ApiToken) -> dict[str, Any]:
    """An API token as ``token list --json`` shows it (never the token)."""
    return {
        "name": t.name,
        "role": t.role.value,
        "created_at": iso(t.created_at),
        "last_used_at": iso(t.last_used_at),
    }


def print_tokens(items: Sequence[ApiToken]) -> None:
    if not items:
        sys.stdout.write("no tokens\n")
        return
    _table(
        ["NAME", "ROLE", "CREATED", "LAST USED"],
        [
            [t.name, t.role.value, local_time(t.created_at), local_time(t.last_used_at)]
            for t in items
        ],
    )
