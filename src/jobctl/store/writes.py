"""The writes both faces make inside their transactions, written once over a
:class:`~.dialect.Dialect`: one run row, a job's row and revision, the windows recorded
ahead taken back, ``--after`` followers fired, a job paused after failures, the notes of
runs skipped past their deadline. Each takes the open transaction's cursor ``c``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..clock import from_us, to_us
from ..errors import NotFound
from ..models import Job, Run, RunReason, RunState, after_parts
from .dialect import Dialect
from .rows import job_from_row, opt_us, run_from_row, settings_json

if TYPE_CHECKING:  # imported where used: a listing never needs them
    from .. import jobfile
    from ..outcomes import Window
    from . import outbox


def job_row(db: Dialect, c: Any, name: str, *, lock: bool = False) -> Any:
    """The job's row (``lock``: its row locked until the commit). Raises NotFound."""
    row = c.execute(db.q.job_by_name_locked if lock else db.q.job_by_name, (name,)).fetchone()
    if row is None:
        raise NotFound(f"no job named {name!r}")
    return row


def read_run(row: Any, run_id: int) -> Run:
    """The run of a row read by ``run_by_id``; NotFound when there was none."""
    if row is None:
        raise NotFound(f"no run with id {run_id}")
    return run_from_row(row)


def run_by_id(db: Dialect, c: Any, run_id: int) -> Run:
    return read_run(c.execute(db.q.run_by_id, (run_id,)).fetchone(), run_id)


def insert_run(
    db: Dialect,
    c: Any,
    job: Job,
    w: Window,
    now: datetime,
    *,
    key: str | None = None,
    env: dict[str, str] | None = None,
    extra_locks: Sequence[str] = (),
    priority: int | None = None,
) -> int | None:
    """Insert one run row; a window already present is left as it is (returns None)."""
    spec = job.spec
    row = c.execute(
        db.q.insert_run,
        {
            "job_id": job.id,
            "scheduled_for": to_us(w.scheduled_for),
            "state": w.state.value,
            "skip_reason": w.skip_reason.value if w.skip_reason else None,
            "reason": w.reason.value,
            "catchup_from": opt_us(w.catchup_from),
            "max_attempts": spec.retries + 1,
            "not_before": opt_us(w.not_before or w.scheduled_for),
            "priority": spec.priority if priority is None else priority,
            "run_key": key,
            "env": json.dumps(env or {}, sort_keys=True),
            "settings": settings_json(spec),
            "now": to_us(now),
            "finished_at": to_us(now) if w.state is RunState.SKIPPED else None,
            "job_revision": job.revision,
            "deadline_at": opt_us(w.deadline_at),
        },
    ).fetchone()
    if row is None:
        return None
    run_id = int(row["id"])
    if w.state is not RunState.SKIPPED:
        for lock in sorted(set(spec.locks) | set(extra_locks)):
            c.execute(db.q.insert_run_lock, (run_id, lock))
    return run_id


def withdraw_early(db: Dialect, c: Any, job_id: int, now: datetime) -> list[int]:
    """Delete the job's windows recorded ahead of their time that have not come yet (a
    pause, an edit or a cancel decides them again); their times (µs)."""
    rows = c.execute(db.q.withdraw_early_runs, (job_id, to_us(now))).fetchall()
    return [int(r["scheduled_for"]) for r in rows]


def write_revision(
    db: Dialect,
    c: Any,
    job_id: int,
    old: jobfile.Definition | None,
    new: jobfile.Definition,
    now: datetime,
    who: str,
    source: str,
    changes: Mapping[str, list[Any]] | None = None,
) -> int | None:
    """Inside a write: record a change to job ``job_id`` as its next revision (see jobctl(1),
    jobctl history),
    ``{KEY: [old, new]}`` from the two definitions (``old`` None: a new job) unless
    ``changes`` says it; nothing when nothing changed. Every change to a job calls this in
    its own transaction (a daemon's too: ``who`` and ``source`` ``daemon``). Returns the
    revision written."""
    from .. import jobfile

    diff = dict(changes) if changes is not None else jobfile.changes(old, new)
    if not diff:
        return None
    revision = int(c.execute(db.q.job_revision_number, (job_id,)).fetchone()["revision"]) + 1
    c.execute(db.q.set_job_revision, (revision, job_id))
    c.execute(
        db.q.insert_revision,
        (
            job_id,
            revision,
            to_us(now),
            who,
            source,
            json.dumps(diff, ensure_ascii=False),
            json.dumps(jobfile.stored_table(new), ensure_ascii=False),
        ),
    )
    return revision


#: how far before its cursor a downstream job looks again for upstream runs that ended: a
#: run whose end was stamped before another's may be committed after it (the window's
#: UNIQUE row keeps a second look from running it twice)
AFTER_LOOKBACK_US = 60_000_000


def fire_after_jobs(
    db: Dialect, upstream_ids: Sequence[int] | None, now: datetime
) -> list[tuple[Job, int, int]]:
    """:func:`fire_after` in a write of its own, after a look outside any write: most
    databases have no job that follows another, and a burst's ends ask often."""
    if not db.read(db.q.any_after_job):
        return []
    with db.write() as c:
        return fire_after(db, c, upstream_ids, now)


def fire_after(
    db: Dialect, c: Any, upstream_ids: Sequence[int] | None, now: datetime
) -> list[tuple[Job, int, int]]:
    """see README, Run policies and what a run costs ``--after``: for each active job that follows
    one of ``upstream_ids`` (None:
    any), a ``pending`` run (reason ``after``) for each run of its upstream that ended in
    one of its states since its cursor (``schedule_from``: when it was added, edited or
    resumed, then the last such end seen), with that run's window and
    ``JOBCTL_UPSTREAM_RUN_ID``; one run per upstream window, however often that window's
    run ends. Returns (job, new run id, upstream run id) of the runs created."""
    from ..outcomes import Window  # here: a listing fires nothing

    out: list[tuple[Job, int, int]] = []
    wanted = None if upstream_ids is None else set(upstream_ids)
    ids: dict[str, int | None] = {}
    from ..planner import after_fires  # here: a command's start loads no trigger arithmetic

    for row in c.execute(db.q.after_jobs).fetchall():
        job = job_from_row(row)
        upstream, _ = after_parts(job.trigger.expr or "")
        if upstream not in ids:
            found = c.execute(db.q.job_id_by_name, (upstream,)).fetchone()
            ids[upstream] = None if found is None else int(found["id"])
        up_id = ids[upstream]
        if up_id is None or (wanted is not None and up_id not in wanted):
            continue
        cursor = int(row["schedule_from"])
        last = cursor
        ended = c.execute(db.q.after_upstream_runs, (up_id, cursor - AFTER_LOOKBACK_US))
        for r in ended.fetchall():
            last = max(last, int(r["finished_at"]))
            if not after_fires(job, RunState(r["state"])):
                continue
            w = Window(
                from_us(r["scheduled_for"]), RunState.PENDING, RunReason.AFTER, not_before=now
            )
            env = {"JOBCTL_UPSTREAM_RUN_ID": str(r["id"])}
            run_id = insert_run(db, c, job, w, now, env=env)
            if run_id is not None:
                out.append((job, run_id, int(r["id"])))
        if last > cursor:
            c.execute(db.q.after_cursor, (last, job.id, last))
    if out:
        db.announce("run")
    return out


def pause_after_failures(
    db: Dialect, c: Any, q: outbox.Sql, job_id: int, now: datetime
) -> str | None:
    """A run of the job just ended ``dead``: pause the job when its last
    ``--pause-after-failures`` N finished runs all did (see README, Run policies and what a run
    costs), with its ``paused``
    notification, in the transaction of that end. Returns the job's name when it was
    paused now."""
    row = c.execute(db.q.job_pause_rule, (job_id,)).fetchone()
    n = None if row is None else row["pause_after_failures"]
    if not n:
        return None
    from ..planner import should_pause  # here: a command's start loads no trigger arithmetic

    rows = c.execute(db.q.recent_final_states, (job_id, n)).fetchall()
    if not should_pause([RunState(r["state"]) for r in rows], int(n)):
        return None
    paused = c.execute(db.q.pause_by_failures, (to_us(now), job_id)).fetchone()
    if paused is None:
        return None
    from .. import jobfile
    from . import outbox

    withdraw_early(db, c, job_id, now)
    name = str(paused["name"])
    job = job_from_row(job_row(db, c, name))
    was = jobfile.Definition(job.spec, paused=False)
    write_revision(db, c, job_id, was, jobfile.Definition.of(job), now, "daemon", "daemon")
    outbox.enqueue(c, q, [outbox.paused_note(job_id, name, int(n), now)], now)
    db.announce(f"job:{job_id}")
    return name


def note_deadline_skips(c: Any, q: outbox.Sql, rows: Sequence[Any], now: datetime) -> None:
    """The ``missed`` notification (reason ``deadline``) of the runs a claim just skipped
    past their ``--deadline`` (``SKIP_PAST_DEADLINE``'s rows), one per job, in the claim's
    transaction (see jobctl(1), jobctl notify; README, Run policies and what a run costs)."""
    if not rows:
        return  # (the common case: at every claim)
    from . import outbox

    windows: dict[int, list[int]] = {}
    for r in rows:
        windows.setdefault(int(r["job_id"]), []).append(int(r["scheduled_for"]))
    targets = outbox.Targets(c, q)
    notes = []
    for job_id, times in windows.items():
        job = targets.job(job_id)
        if job is None:
            continue
        first, last = from_us(min(times)), from_us(max(times))
        notes.append(outbox.missed_note(job_id, job[0], len(times), first, last, "deadline"))
    if notes:
        outbox.enqueue(c, q, notes, now, targets)
