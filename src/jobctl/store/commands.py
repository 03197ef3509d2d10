"""The commands' face of the store (:class:`~jobctl.store.protocol.CommandStore`), written
once over a :class:`~.dialect.Dialect`.

Each method is one transaction of its dialect. Every change that a daemon should act on
is announced inside it (:meth:`~.dialect.Dialect.announce`), and the dialect wakes the
daemons when it commits: callers never poke. The helpers at the top (one run row, a
cancel, the windows recorded ahead) are the ones the daemons' halves share.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from ..clock import from_us, iso, to_us
from ..errors import Conflict, NameTaken, NotFound, RevisionChanged, StoreError, UsageError
from ..models import (
    Attempt,
    Job,
    JobSpec,
    JobState,
    Role,
    Run,
    RunReason,
    RunState,
    TriggerKind,
    after_parts,
)
from . import calendars
from .dialect import Dialect, retrying
from .rows import (
    attempt_from_row,
    job_from_row,
    opt_dt,
    opt_us,
    run_from_row,
    spec_columns,
)
from .writes import (
    insert_run,
    job_row,
    read_run,
    run_by_id,
    withdraw_early,
    write_revision,
)

#: why retry-dead refuses a watched run (README "Watching jobs that jobctl does not run")
_NOT_RETRIED = (
    "watched: its work runs elsewhere and only its pings start and end it, so it is not "
    "retried (a success ping still ends a run dead with 'no ping' succeeded)"
)

if TYPE_CHECKING:  # imported where used: a listing never needs them
    from .. import jobfile
    from ..access import ApiToken, SecretInfo
    from ..checks import CheckFacts
    from ..fleet import DaemonInfo, Maintenance
    from ..notifications import Channel, Notification, NotificationState
    from ..waits import WaitFacts
    from ..watching import Ping
    from .outbox import Outbox, Sql
    from .secrets import Secrets
    from .values import Backfilled, BackfillFn, CopiedJob, DbInfo, Revision, Status
    from .watch import Watch

#: the upper bounds (seconds) of the duration histogram's buckets, fixed by the schema's
#: duration_tallies (bucket i counts attempts at most bound i, and above the one before)
#: runs read by id in one statement for ``last_runs``
LAST_RUNS_BATCH = 500
DURATION_BUCKET_BOUNDS_SECONDS = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 14400)

# ------------------------------------------------------------------ helpers


def cancel_runs_tx(db: Dialect, c: Any, ids: Sequence[int], now: datetime) -> None:
    """Waiting runs end cancelled; leased ones get a cancel request for their daemon."""
    for run_id in ids:
        c.execute(db.q.cancel_waiting_run, (to_us(now), run_id))
        c.execute(db.q.request_cancel, (run_id,))


def _fresh_state(spec: JobSpec, next_run_at: datetime | None, now: datetime) -> JobState:
    """The state of a job whose schedule starts now: ``done`` when its active range
    (``--active-until``) has passed and no window is left, as the scheduler makes it
    after the range's last window; else active."""
    until = spec.trigger.active_until
    if next_run_at is None and until is not None and until <= now:
        return JobState.DONE
    return JobState.ACTIVE


def default_who() -> str:
    """``USER@HOST``: who a command's revisions name."""
    import getpass
    import socket  # here: a listing, which names no one, never loads either

    try:
        user = getpass.getuser()
    except Exception:  # no name for this uid (a container): its number
        import os

        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def daemon_info(r: Any) -> DaemonInfo:
    from ..fleet import DaemonInfo  # here: a listing shows no daemon

    return DaemonInfo(
        id=r["id"],
        pid=r["pid"],
        host=r["host"],
        leader=r["leader"] == r["id"],
        started_at=from_us(r["started_at"]),
        heartbeat_at=from_us(r["heartbeat_at"]),
        wake_address=r["wake_address"],
        boot_id=r["boot_id"],
        tags=tuple(json.loads(r["tags"])) if r["tags"] != "[]" else (),
    )


def maintenance_of(r: Any) -> Maintenance:
    """A ``maintenance`` row as the window in force: until its end (``ended_at`` when
    ``resume --all`` ended it first, else ``until_at``)."""
    from ..fleet import Maintenance  # here: a listing shows no maintenance window

    end = r["ended_at"] if r["ended_at"] is not None else r["until_at"]
    return Maintenance(
        since=from_us(r["since"]),
        until=None if end is None else from_us(end),
        reason=r["reason"],
        who=r["who"],
    )


# ------------------------------------------------------------------ the face


@retrying
class Commands:
    """See :class:`~jobctl.store.protocol.CommandStore` for the rules of every method."""

    def __init__(self, db: Dialect) -> None:
        self.db = db
        self.q = db.q
        self.backend = db.backend
        #: from where this face's changes are made, as revisions name it
        self.source = "cli"
        self._who: str | None = None

    @property
    def who(self) -> str:
        """Who this face's changes are made by, as revisions name it: ``USER@HOST`` (read
        on the first change: a listing names no one), or what was set (``jobctl serve``
        sets ``api`` or a token's principal)."""
        if self._who is None:
            self._who = default_who()
        return self._who

    @who.setter
    def who(self, value: str) -> None:
        self._who = value

    # the collaborators, each made when a command first needs it: a listing loads none
    # of their modules (the outbox's brings the notifications')

    @functools.cached_property
    def outbox(self) -> Outbox:
        from .outbox import Outbox

        return Outbox(self.db)

    @functools.cached_property
    def _q(self) -> Sql:
        return self.outbox.q

    @functools.cached_property
    def secrets(self) -> Secrets:
        from .secrets import Secrets

        return Secrets(self.db, self._q)

    @functools.cached_property
    def watch(self) -> Watch:
        from .watch import Watch

        return Watch(self.db, self._q)

    def _revise(
        self,
        c: Any,
        job_id: int,
        old: Job | None,
        new: Job,
        now: datetime,
        *,
        source: str | None = None,
        changes: Mapping[str, list[Any]] | None = None,
    ) -> Job:
        """Write the revision of a change from ``old`` to ``new``; ``new`` with its
        revision number."""
        from .. import jobfile

        revision = write_revision(
            self.db,
            c,
            job_id,
            None if old is None else jobfile.Definition.of(old),
            jobfile.Definition.of(new),
            now,
            self.who,
            source or self.source,
            changes,
        )
        return new if revision is None else replace(new, revision=revision)

    # ------------------------------------------------------------------ jobs

    def get_job(self, name: str) -> Job:
        """The job of that name. Raises NotFound."""
        rows = self.db.read(self.q.job_by_name, (name,))
        if not rows:
            raise NotFound(f"no job named {name!r}")
        return job_from_row(rows[0])

    def list_jobs(self) -> list[Job]:
        """Every job, ordered by name (byte order)."""
        return [job_from_row(r) for r in self.db.read(self.q.jobs_all)]

    def job_names(self) -> list[str]:
        return [r["name"] for r in self.db.read(self.q.job_names)]

    def last_runs(self, job_ids: Sequence[int] | None = None) -> dict[int, Run]:
        """The most recent run that was not skipped, per job id."""
        ids = None if job_ids is None else sorted(set(job_ids))
        if ids == []:
            return {}
        only = "" if ids is None else f"WHERE jobs.id IN ({self.db.marks(len(ids))})"
        run_ids = [
            int(r["id"])
            for r in self.db.read(self.q.last_run_ids.format(only=only), ids or ())
            if r["id"] is not None
        ]
        out = {}
        for k in range(0, len(run_ids), LAST_RUNS_BATCH):
            batch = run_ids[k : k + LAST_RUNS_BATCH]
            sql = self.q.runs_by_ids.format(marks=self.db.marks(len(batch)))
            for r in self.db.read(sql, batch):
                run = run_from_row(r)
                out[run.job_id] = run
        return out

    def _upsert(
        self,
        c: Any,
        spec: JobSpec,
        next_run_at: datetime | None,
        now: datetime,
        job_id: int | None,
        paused: bool,
    ) -> int:
        cols = spec_columns(spec)
        cols["except_dates"] = calendars.job_dates(c, self._q, spec.except_calendars, spec.name)
        cols.update(
            state=(JobState.PAUSED if paused else _fresh_state(spec, next_run_at, now)).value,
            paused_reason="user" if paused else None,
            schedule_from=to_us(now),
            next_run_at=None if paused else opt_us(next_run_at),
            updated_at=to_us(now),
        )
        if job_id is None:
            cols["created_at"] = to_us(now)
            sql = self.q.insert_job.format(names=", ".join(cols), marks=self.db.marks(len(cols)))
            job_id = int(c.execute(sql, list(cols.values())).fetchone()["id"])
        else:
            self._update(c, job_id, cols)
        self.db.announce(f"job:{job_id}")
        return job_id

    def _update(self, c: Any, job_id: int, cols: dict[str, Any]) -> None:
        mark = self.db.marks(1)
        sets = ", ".join(f"{k} = {mark}" for k in cols)
        c.execute(self.q.update_job.format(sets=sets), [*cols.values(), job_id])

    def add_job(
        self,
        spec: JobSpec,
        next_run_at: datetime | None,
        now: datetime,
        *,
        paused: bool = False,
        replace_existing: bool = False,
    ) -> Job:
        """Create a job whose first window is ``next_run_at`` (or overwrite the one of that
        name with ``replace_existing``). Raises Conflict when the name is taken."""
        from . import outbox  # the checks of notify rules and secrets: a listing loads neither
        from .secrets import check_secrets

        with self.db.write() as c:
            self.db.lock_name(c, spec.name)
            existing = c.execute(self.q.job_id_by_name, (spec.name,)).fetchone()
            if existing is not None and not replace_existing:
                raise NameTaken(f"a job named {spec.name!r} already exists")
            job_id = None if existing is None else existing["id"]
            before = None if existing is None else job_from_row(job_row(self.db, c, spec.name))
            outbox.check_rules(c, self._q, spec.notify, spec.name)
            check_secrets(c, self._q, spec.secrets, spec.name)
            job_id = self._upsert(c, spec, next_run_at, now, job_id, paused)
            new = job_from_row(job_row(self.db, c, spec.name))
            return self._revise(c, job_id, before, new, now)

    def add_jobs(
        self,
        items: Sequence[tuple[JobSpec, datetime | None]],
        now: datetime,
        *,
        delete: Sequence[str] = (),
        source: str = "import",
    ) -> list[tuple[Job, bool]]:
        """Create or overwrite several jobs at once (import), deleting the jobs named in
        ``delete`` first (Conflict while one has a leased run). Returns (job, changed): a
        job identical to the stored one is left untouched, so a second import changes
        nothing. Each change is a revision from ``source``."""
        from . import outbox  # the checks of notify rules and secrets: a listing loads neither
        from .secrets import check_secrets

        out = []
        with self.db.write() as c:
            for name in delete:
                row = job_row(self.db, c, name, lock=True)
                if c.execute(self.q.leased_of_job, (row["id"],)).fetchone()["n"]:
                    raise Conflict(f"job {name!r} has a running run; not deleting it")
                c.execute(self.q.delete_job, (row["id"],))
                self.db.announce(f"job:{row['id']}")
            for spec, next_run_at in items:
                self.db.lock_name(c, spec.name)
                row = c.execute(self.q.job_by_name, (spec.name,)).fetchone()
                cols = spec_columns(spec)
                if row is not None and all(row[k] == v for k, v in cols.items()):
                    out.append((job_from_row(row), False))
                    continue
                before = None if row is None else job_from_row(row)
                outbox.check_rules(c, self._q, spec.notify, spec.name)
                check_secrets(c, self._q, spec.secrets, spec.name)
                job_id = self._upsert(
                    c, spec, next_run_at, now, None if row is None else row["id"], False
                )
                job = job_from_row(job_row(self.db, c, spec.name))
                out.append((self._revise(c, job_id, before, job, now, source=source), True))
        return out

    def edit_job(
        self,
        name: str,
        changes: dict[str, Any],
        now: datetime,
        *,
        next_run_at: datetime | None = None,
        restart_schedule: bool = False,
        if_revision: Collection[int] | None = None,
    ) -> Job:
        """Change fields of a job's spec (JobSpec field names). With ``restart_schedule``
        the schedule starts again at ``next_run_at`` (a one-shot that was done becomes
        active). Runs already created keep their settings, but for a window recorded ahead
        of its time that has not come yet: that one is taken back, and the job gets its
        window again (decided with the job as it is now). Raises NotFound, Conflict (a
        name taken, or a cancelled job: it is stopped for good)."""
        with self.db.write() as c:
            job = job_from_row(job_row(self.db, c, name, lock=True))
            if if_revision is not None and job.revision not in if_revision:
                wanted = " or ".join(str(r) for r in sorted(if_revision)) or "none given"
                raise RevisionChanged(
                    f"job {name!r} is at revision {job.revision}, not {wanted}: it changed "
                    "since it was read; nothing was changed"
                )
            if job.state is JobState.CANCELLED:  # stopped for good (see jobctl(1), COMMANDS)
                raise Conflict(f"job {name!r} is cancelled: it is stopped for good")
            new = self._edit_tx(c, job, changes, now, next_run_at, restart_schedule)
            return self._revise(c, job.id, job, new, now)

    def _edit_tx(
        self,
        c: Any,
        job: Job,
        changes: dict[str, Any],
        now: datetime,
        next_run_at: datetime | None,
        restart_schedule: bool,
    ) -> Job:
        from . import outbox  # the checks of notify rules and secrets: a listing loads neither
        from .secrets import check_secrets

        new_spec = replace(job.spec, **changes)
        if "notify" in changes:
            outbox.check_rules(c, self._q, new_spec.notify, new_spec.name)
        if "secrets" in changes:
            check_secrets(c, self._q, new_spec.secrets, new_spec.name)
        if new_spec.name != job.name:
            self.db.lock_name(c, new_spec.name)
            if c.execute(self.q.job_id_by_name, (new_spec.name,)).fetchone():
                raise Conflict(f"a job named {new_spec.name!r} already exists")
        cols = spec_columns(new_spec)
        cols["updated_at"] = to_us(now)
        if "except_calendars" in changes:
            cols["except_dates"] = calendars.job_dates(
                c, self._q, new_spec.except_calendars, new_spec.name
            )
        early = withdraw_early(self.db, c, job.id, now)
        if restart_schedule and job.state in (JobState.ACTIVE, JobState.DONE):
            # a new trigger starts from now; a one-shot that was done becomes active
            cols["state"] = _fresh_state(new_spec, next_run_at, now).value
            cols["schedule_from"] = to_us(now)
            cols["next_run_at"] = opt_us(next_run_at)
        elif early:
            # the window comes again, decided with the job as it is now
            cols["state"] = JobState.ACTIVE.value
            cols["next_run_at"] = min(early)
        self._update(c, job.id, cols)
        self.db.announce(f"job:{job.id}")
        return job_from_row(job_row(self.db, c, new_spec.name))

    def pause_job(self, name: str, now: datetime) -> Job:
        """Stop firing; a window recorded ahead of its time that has not come yet is taken
        back (a paused job's windows are neither run nor recorded). Raises Conflict for a
        cancelled or done job."""
        with self.db.write() as c:
            row = job_row(self.db, c, name, lock=True)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be paused")
            withdraw_early(self.db, c, row["id"], now)
            c.execute(self.q.pause_job, (to_us(now), row["id"]))
            self.db.announce(f"job:{row['id']}")
            job = job_from_row(job_row(self.db, c, name))
            return self._revise(c, job.id, job_from_row(row), job, now)

    def resume_job(self, name: str, next_run_at: datetime | None, now: datetime) -> Job:
        """Restart firing at ``next_run_at`` (missed windows are not run)."""
        with self.db.write() as c:
            row = job_row(self.db, c, name, lock=True)
            if row["state"] in (JobState.CANCELLED.value, JobState.DONE.value):
                raise Conflict(f"job {name!r} is {row['state']} and cannot be resumed")
            if row["state"] == JobState.ACTIVE.value:
                return job_from_row(row)
            c.execute(self.q.resume_job, (to_us(now), opt_us(next_run_at), to_us(now), row["id"]))
            self.db.announce(f"job:{row['id']}")
            job = job_from_row(job_row(self.db, c, name))
            return self._revise(c, job.id, job_from_row(row), job, now)

    def delete_job(self, name: str, *, force: bool = False) -> Job:
        """Delete a job and its history. Refused (Conflict) while a run is leased unless
        ``force``: the daemon holding it then finds its lease gone (fenced) and kills the
        attempt. The ids are never given again."""
        with self.db.write() as c:
            row = job_row(self.db, c, name, lock=True)
            if not force and c.execute(self.q.leased_of_job, (row["id"],)).fetchone()["n"]:
                raise Conflict(f"job {name!r} has a running run; cancel it first or use --force")
            c.execute(self.q.delete_job, (row["id"],))
            left = [f for f, _ in self._followers(c, {name})]
            if left:
                them = "them" if len(left) > 1 else "it"
                raise Conflict(
                    f"job {name!r} is followed by {', '.join(left)} (--after): delete {them} "
                    f"first, or give {them} another trigger"
                )
            self.db.announce(f"job:{row['id']}")
            return job_from_row(row)

    def _followers(self, c: Any, removed: set[str]) -> list[tuple[str, str]]:
        """(job, the job it follows) of each job left following one of ``removed`` with
        ``--after`` (README, Run policies): a deletion that leaves one is refused, so an
        export always applies to an empty database."""
        out = []
        for r in c.execute(self.q.all_after_jobs).fetchall():
            upstream = after_parts(r["trigger_expr"] or "")[0]
            if r["name"] not in removed and upstream in removed:
                out.append((str(r["name"]), upstream))
        return out

    def cancel_job(self, name: str, now: datetime) -> tuple[Job, list[int]]:
        """Cancel a job's open runs and stop the job for good (a window recorded ahead of
        its time that has not come yet is taken back, not cancelled)."""
        with self.db.write() as c:
            row = job_row(self.db, c, name, lock=True)
            withdraw_early(self.db, c, row["id"], now)
            ids = [r["id"] for r in c.execute(self.q.open_run_ids_of_job, (row["id"],))]
            cancel_runs_tx(self.db, c, ids, now)
            c.execute(self.q.cancel_job, (to_us(now), row["id"]))
            self.db.announce(f"job:{row['id']}")
            self.db.announce("run")
            job = job_from_row(job_row(self.db, c, name))
            if row["state"] != JobState.CANCELLED.value:
                changes = {"state": [row["state"], JobState.CANCELLED.value]}
                job = self._revise(c, job.id, job, job, now, changes=changes)
            return job, ids

    # ------------------------------------------------------------------ jobs as code

    def apply_plan(
        self,
        plan: jobfile.ApplyPlan,
        next_runs: Mapping[str, datetime | None],
        now: datetime,
        *,
        source: str = "apply",
    ) -> None:
        """Make the jobs as ``plan`` says, all or nothing (see jobctl(1), jobctl history): deleted
        as ``rm``
        deletes (Conflict while one has a leased run), changed as ``edit`` changes (runs
        already created keep their settings; ``paused`` pauses or resumes), added as
        ``add`` adds. ``next_runs`` holds the first window of each added or changed job
        (by name). A job changed by someone else since the plan read it is a Conflict, and
        so is a job left following a deleted one (``--after``): nothing is applied."""
        from .secrets import check_secrets

        with self.db.write() as c:
            for name, (_, days) in plan.calendars.items():
                self._calendar_changed(calendars.set_dates(c, self._q, name, days))
            for job in plan.removed:
                row = self._unchanged_row(c, job)
                if c.execute(self.q.leased_of_job, (row["id"],)).fetchone()["n"]:
                    raise Conflict(
                        f"job {job.name!r} has a running run; nothing was applied (cancel it "
                        "first, or keep the job in the file)"
                    )
                c.execute(self.q.delete_job, (row["id"],))
                self.db.announce(f"job:{row['id']}")
            for change in plan.changed:
                old = job_from_row(self._unchanged_row(c, change.job))
                spec_changes = change.spec_changes()
                restart = "trigger" in spec_changes
                new = old
                if spec_changes:
                    new = self._edit_tx(
                        c, old, spec_changes, now, next_runs.get(change.job.name), restart
                    )
                if change.new.paused and new.state is JobState.ACTIVE:
                    withdraw_early(self.db, c, new.id, now)
                    c.execute(self.q.pause_job, (to_us(now), new.id))
                elif not change.new.paused and new.state is JobState.PAUSED:
                    nxt = opt_us(next_runs.get(new.name))
                    c.execute(self.q.resume_job, (to_us(now), nxt, to_us(now), new.id))
                self.db.announce(f"job:{new.id}")
                new = job_from_row(job_row(self.db, c, new.name))
                self._revise(c, new.id, old, new, now, source=source)
            for d in plan.added:
                self.db.lock_name(c, d.spec.name)
                if c.execute(self.q.job_id_by_name, (d.spec.name,)).fetchone() is not None:
                    raise Conflict(f"job {d.spec.name!r} was added meanwhile; nothing was applied")
                check_secrets(c, self._q, d.spec.secrets, d.spec.name)
                job_id = self._upsert(c, d.spec, next_runs.get(d.spec.name), now, None, d.paused)
                new = job_from_row(job_row(self.db, c, d.spec.name))
                self._revise(c, job_id, None, new, now, source=source)
            left = self._followers(c, {j.name for j in plan.removed}) if plan.removed else []
            if left:
                said = ", ".join(f"{f} follows {u}" for f, u in left)
                them = "them" if len(left) > 1 else "it"
                raise Conflict(
                    f"a deleted job is followed with --after ({said}); nothing was applied: "
                    f"delete {them} in the same change, or give {them} another trigger"
                )

    # ------------------------------------------------------------------ calendars

    def calendar_add(self, name: str, days: Sequence[date]) -> None:
        """Create calendar ``name`` with ``days`` or add them to it; the jobs that name it
        exclude them from their next window on."""
        with self.db.write() as c:
            self._calendar_changed(calendars.add_dates(c, self._q, name, days))

    def calendar_rm(self, name: str, days: Sequence[date]) -> None:
        """Remove ``days`` from calendar ``name`` or, with none, the calendar. NotFound for
        an unknown calendar; Conflict (naming them) while a job uses the calendar."""
        with self.db.write() as c:
            self._calendar_changed(calendars.remove(c, self._q, name, days))

    def calendar_list(self, name: str | None = None) -> list[tuple[str, list[date], list[str]]]:
        """(name, dates, names of the jobs that use it) of every calendar by name, or of
        the one named (NotFound when there is none). Reads only."""
        return calendars.listing(self.db.read, self._q, name)

    def _calendar_changed(self, job_ids: Sequence[int]) -> None:
        # the scheduler reads these jobs again: their next window may now be excluded
        for job_id in job_ids:
            self.db.announce(f"job:{job_id}")

    def _unchanged_row(self, c: Any, job: Job) -> Any:
        """The job's row, locked, when it is still at the revision ``job`` was read at."""
        row = c.execute(self.q.job_by_name_locked, (job.name,)).fetchone()
        if row is None or row["id"] != job.id or row["revision"] != job.revision:
            raise Conflict(f"job {job.name!r} changed meanwhile; nothing was applied: run again")
        return row

    def history(self, name: str) -> list[Revision]:
        """The revisions of a job, oldest first. Raises NotFound."""
        from .values import Revision

        job = self.get_job(name)
        return [
            Revision(
                revision=int(r["revision"]),
                at=from_us(r["at"]),
                who=r["who"],
                source=r["source"],
                changes=json.loads(r["changes"]),
                definition=json.loads(r["definition"]),
            )
            for r in self.db.read(self.q.revisions_of_job, (job.id,))
        ]

    def rollback_job(self, name: str, revision: int, now: datetime) -> Job:
        """Make the job as it was at ``revision`` (itself a new revision; nothing when it
        is already so). Raises NotFound for an unknown job or revision, UsageError when
        that definition is no longer valid (a one-shot time now past)."""
        from .. import jobfile
        from ..triggers import next_fire

        job = self.get_job(name)
        revisions = self.history(name)
        found = [r for r in revisions if r.revision == revision]
        if not found:
            raise NotFound(f"job {name!r} has no revision {revision}")
        wanted = jobfile.definition_from_table(name, found[0].definition, now, job)
        wanted = _phase_only_by_revisions(wanted, revisions)
        key = wanted.spec.ping_key
        if key is not None and key != job.spec.ping_key:
            # a watched revision whose key another job holds since (pings go to one job)
            holder = [j.name for j in self.list_jobs() if j.spec.ping_key == key]
            if holder:
                raise Conflict(
                    f"revision {revision} of job {name} pings at /ping/{key}, which is job "
                    f"{holder[0]}'s now: nothing was changed"
                )
        plan = jobfile.plan_apply({name: wanted}, [job])
        if plan.empty():
            return job
        self.apply_plan(plan, {name: next_fire(wanted.spec.trigger, now)}, now, source=self.source)
        return self.get_job(name)

    # ------------------------------------------------------------------ runs

    def get_run(self, run_id: int) -> Run:
        rows = self.db.read(self.q.run_by_id, (run_id,))
        return read_run(rows[0] if rows else None, run_id)

    def list_runs(
        self,
        job_name: str | None = None,
        state: RunState | None = None,
        limit: int = 20,
        *,
        since: datetime | None = None,
    ) -> list[Run]:
        """Runs, newest window first (then newest id); with ``since``, only windows at or
        after it. Served by an index whatever the history's length (see README, History: what is
        kept, what failed, what never ran)."""
        mark = self.db.marks(1)
        where: list[str] = []
        params: list[Any] = []
        if job_name is not None:
            where.append(f"runs.job_id = {mark}")
            params.append(self.get_job(job_name).id)
        if state is not None:
            where.append(f"runs.state = {mark}")
            params.append(state.value)
        if since is not None:
            where.append(f"runs.scheduled_for >= {mark}")
            params.append(to_us(since))
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        params.append(limit)
        sql = self.q.list_runs if job_name is None else self.q.list_runs_of_job
        rows = self.db.read(sql.format(where=clause), params)
        return [run_from_row(r) for r in rows]

    def get_attempts(self, run_id: int) -> list[Attempt]:
        """The attempts of a run, oldest first."""
        return [attempt_from_row(r) for r in self.db.read(self.q.attempts_of_run, (run_id,))]

    def get_output(self, run_id: int, attempt: int | None = None) -> tuple[Attempt, bytes]:
        """An attempt's stored output tail (default: the last attempt). Raises NotFound."""
        self.get_run(run_id)
        if attempt is None:
            rows = self.db.read(self.q.last_attempt, (run_id,))
        else:
            rows = self.db.read(self.q.one_attempt, (run_id, attempt))
        if not rows:
            which = "attempts yet" if attempt is None else f"attempt {attempt}"
            raise NotFound(f"run {run_id} has no {which}")
        return attempt_from_row(rows[0]), bytes(rows[0]["output"] or b"")

    def waiting(self, run_id: int, now: datetime) -> WaitFacts | None:
        """What keeps run ``run_id`` from being claimed at ``now``, read in one statement (or
        one read transaction) from the very predicates the claim uses; None when the run is
        not ``pending``/``failed``. Raises NotFound for an unknown id.

        - ``due``: ``not_before <= now``.
        - ``paused``: its job's state is ``paused``.
        - ``lock``: ``(name, run id)`` of a leased run (another run) holding one of this
          run's locks; the smallest name, then the smallest holder id; else None.
        - ``overlap_run_id``: when its job's overlap is ``forbid`` or ``replace``, the
          smallest id of another leased run of the same job; else None.
        - ``claimable``: the claim's whole condition (open, due, locks free, job neither
          paused nor overlap-blocked), without the per-daemon reserved-worker quota.
        - ``live_daemons``: daemons whose row has not expired at ``now``; ``leased_runs``:
          runs in state ``leased``.

        :func:`jobctl.planner.waiting_reason` turns these facts into one reason.
        """
        from ..waits import DaemonLoad, WaitFacts  # here: only inspect asks

        rows = self.db.read(self.q.waiting, {"run_id": run_id, "now": to_us(now)})
        if not rows:
            raise NotFound(f"no run with id {run_id}")
        r = rows[0]
        state = RunState(r["state"])
        if state not in (RunState.PENDING, RunState.FAILED):
            return None
        claimable = bool(r["claimable"])
        on_tags = tuple(json.loads(r["on_tags"])) if r["on_tags"] != "[]" else ()
        loads = (
            tuple(
                DaemonLoad(
                    d["workers"],
                    d["reserved"],
                    d["reserved_priority"],
                    d["leased"],
                    d["low_leased"],
                    tuple(json.loads(d["tags"])),
                )
                for d in self.db.read(self.q.daemon_loads, {"now": to_us(now)})
            )
            if claimable or on_tags
            else ()
        )
        held = self.maintenance(now)
        return WaitFacts(
            run_id=run_id,
            job_name=r["job_name"],
            state=state,
            not_before=opt_dt(r["not_before"]),
            due=bool(r["due"]),
            paused=bool(r["paused"]),
            lock=None if r["lock_name"] is None else (r["lock_name"], r["lock_holder"]),
            overlap_run_id=r["overlap_run"],
            claimable=bool(r["claimable"]),
            live_daemons=r["live_daemons"],
            leased_runs=r["leased_runs"],
            priority=r["priority"],
            daemons=loads,
            max_running=r["max_running"],
            job_leased=int(r["job_leased"] or 0),
            on_tags=on_tags,
            maintenance=held is not None,
            maintenance_until=held.until if held is not None else None,
            watched=bool(r["watched"]),
        )

    def enqueue_run(
        self,
        name: str,
        now: datetime,
        *,
        key: str | None = None,
        env: dict[str, str] | None = None,
        locks: Sequence[str] = (),
        priority: int | None = None,
    ) -> tuple[Run, bool]:
        """A manual run with window ``now`` (moved on by 1 µs while taken). With ``key``
        at most one run per (job, key): an existing one is returned (created False)."""
        from ..outcomes import Window  # here: a listing records no window

        with self.db.write() as c:
            # the job's row lock serialises the enqueues of one job: keys and windows stay
            # unique without a retry
            job = job_from_row(job_row(self.db, c, name, lock=True))
            if job.state is JobState.CANCELLED:
                raise Conflict(f"job {name!r} is cancelled")
            if job.spec.watched:
                raise Conflict(f"job {name!r} is watched: its work runs elsewhere and pings")
            if key is not None:
                found = c.execute(self.q.run_by_key, (job.id, key)).fetchone()
                if found is not None:
                    return run_by_id(self.db, c, found["id"]), False
            window = to_us(now)
            while c.execute(self.q.window_taken, (job.id, window)).fetchone():
                window += 1
            run_id = insert_run(
                self.db,
                c,
                job,
                Window(from_us(window), RunState.PENDING, RunReason.MANUAL, not_before=now),
                now,
                key=key,
                env=env or {},
                extra_locks=locks,
                priority=priority,
            )
            if run_id is None:  # the window was checked free under the job's lock
                raise StoreError(f"database error: window of job {name!r} taken")
            self.db.announce(f"run:{run_id}")
            return run_by_id(self.db, c, run_id), True

    def cancel_runs(self, ids: Sequence[int], now: datetime) -> list[Run]:
        """Pending/failed runs become cancelled at once; leased ones get a cancel request
        that their daemon acts on. Raises NotFound (nothing written) for an unknown id."""
        with self.db.write() as c:
            runs = [run_by_id(self.db, c, run_id) for run_id in ids]
            cancel_runs_tx(self.db, c, ids, now)
            self.db.announce("run:cancel")
            for job_id in sorted({r.job_id for r in runs}):
                self.db.announce(f"job:{job_id}")  # a fixed-delay job moves on
            return [run_by_id(self.db, c, i) for i in ids]

    def retry_dead(
        self,
        now: datetime,
        *,
        job_name: str | None = None,
        run_ids: Sequence[int] = (),
        all_jobs: bool = False,
    ) -> list[Run]:
        """Dead runs back to pending with a fresh set of attempts, numbered on."""
        with self.db.write() as c:
            if run_ids:
                ids = []
                for run_id in run_ids:
                    row = c.execute(self.q.run_state_locked, (run_id,)).fetchone()
                    if row is None:
                        raise NotFound(f"no run with id {run_id}")
                    if row["state"] != "dead":
                        raise Conflict(f"run {run_id} is {row['state']}, not dead")
                    if row["reason"] == RunReason.WATCH.value:
                        raise Conflict(f"run {run_id} is {_NOT_RETRIED}")
                    ids.append(run_id)
            elif job_name is not None:
                job = job_row(self.db, c, job_name)
                if job["ping_key"] is not None:
                    raise Conflict(
                        f"job {job_name!r} is watched: each of its runs is {_NOT_RETRIED}"
                    )
                job_id = job["id"]
                ids = [r["id"] for r in c.execute(self.q.dead_ids_of_job, (job_id,))]
            elif all_jobs:
                ids = [r["id"] for r in c.execute(self.q.dead_ids)]
            else:
                raise UsageError("name a job, run ids, or --all")
            for run_id in ids:
                c.execute(self.q.retry_dead, (to_us(now), run_id))
            if ids:
                self.db.announce("run:retry")
            return [run_by_id(self.db, c, i) for i in ids]

    def last_attempted_run(self, job_name: str) -> Run:
        """``logs NAME``: the job's run of the newest window that has an attempt. Raises
        NotFound (no such job, or no attempt yet)."""
        job_id = self.get_job(job_name).id
        rows = self.db.read(self.q.last_attempted_run, (job_id,))
        if not rows:
            raise NotFound(f"job {job_name!r} has no run with an attempt yet")
        return run_from_row(rows[0])

    def failing_jobs(self) -> set[int]:
        """``list --failing``: ids of jobs whose newest run among the succeeded and dead
        ones is dead, or that have a run whose last attempt failed (a retry scheduled or
        under way)."""
        return {int(r["id"]) for r in self.db.read(self.q.failing_jobs)}

    def recent_durations(self, job_ids: Sequence[int], per_job: int) -> dict[int, list[float]]:
        """``plan``: per job among ``job_ids`` with any, the seconds its newest ``per_job``
        succeeded runs took (each run's last attempt), newest first."""
        out: dict[int, list[float]] = {}
        for job_id in job_ids:
            rows = self.db.read(self.q.recent_durations, (job_id, per_job))
            if rows:
                out[job_id] = [int(r["us"]) / 1e6 for r in rows]
        return out

    def window_runs(self, job_name: str, first: datetime, last: datetime) -> dict[datetime, Run]:
        """``coverage``: the job's runs whose window is in ``[first, last]``, by window.
        Raises NotFound."""
        job_id = self.get_job(job_name).id
        rows = self.db.read(self.q.window_runs, (job_id, to_us(first), to_us(last)))
        return {run.scheduled_for: run for run in map(run_from_row, rows)}

    def backfill(
        self,
        job_name: str,
        windows: Sequence[datetime],
        now: datetime,
        plan: BackfillFn,
        *,
        dry_run: bool = False,
    ) -> Backfilled:
        """``backfill``: in one transaction, read the job's runs of ``windows`` (oldest
        first), let ``plan`` decide, then insert a ``pending`` run (reason ``backfill``,
        the job's settings, locks and priority) for each window to create and make each
        run to requeue ``pending`` again with attempts numbered on. A window the
        scheduler records at the same moment keeps one row (the insert yields to it).
        ``dry_run`` writes nothing. Raises NotFound."""
        from ..outcomes import Window  # here: a listing records no window
        from .values import Backfilled

        with self.db.write() as c:
            row = job_row(self.db, c, job_name, lock=True)
            job = job_from_row(row)
            runs: dict[datetime, tuple[int, RunState]] = {}
            if windows:
                span = (job.id, to_us(windows[0]), to_us(windows[-1]))
                for r in c.execute(self.q.window_states, span).fetchall():
                    runs[from_us(r["scheduled_for"])] = (int(r["id"]), RunState(r["state"]))
            decided = plan(windows, runs)
            if dry_run:
                return Backfilled(decided, [], list(decided.requeue))
            created: list[int] = []
            for window in decided.create:
                w = Window(window, RunState.PENDING, RunReason.BACKFILL, not_before=window)
                run_id = insert_run(self.db, c, job, w, now)
                if run_id is not None:  # else the scheduler recorded it meanwhile
                    created.append(run_id)
            requeued: list[int] = []
            for run_id in decided.requeue:
                attempts = job.spec.retries + 1
                done = c.execute(self.q.requeue_backfill, (attempts, to_us(now), run_id))
                if done.rowcount:
                    requeued.append(run_id)
                    for lock in job.spec.locks:  # a skipped row was recorded without them
                        c.execute(self.q.insert_run_lock_once, (run_id, lock))
            if created or requeued:
                self.db.announce("run")
            return Backfilled(decided, created, requeued)

    def prune(self, cutoff: datetime) -> int:
        """Delete finished runs that ended before ``cutoff``; returns how many."""
        with self.db.write() as c:
            return int(c.execute(self.q.prune, (to_us(cutoff),)).rowcount)

    # ------------------------------------------------------------------ the system

    def check_facts(self, now: datetime, late_seconds: float, since_seconds: float) -> CheckFacts:
        """What ``jobctl check`` judges: live daemons, the scheduler-lease holder's host,
        runs due and unclaimed longer than ``late_seconds`` (of jobs not paused), runs
        ended ``dead`` and notifications ``failed`` within ``since_seconds``."""
        from . import outbox

        facts = outbox.check_counts(
            outbox.ReadCursor(self.db.read),
            self._q,
            now,
            late_seconds,
            since_seconds,
            self.q.check_late,
        )
        held = self.maintenance(now)
        if held is None:
            return facts
        # a maintenance window holds every run that waits: none of them is late
        until = iso(held.until) if held.until is not None else "resume --all"
        return replace(facts, late=0, maintenance_until=until)

    def status(self, now: datetime) -> Status:
        """Live daemons, run counts by state, the earliest next window or due run."""
        from .values import Status

        daemons = self.live_daemons(now)
        counts = {s.value: 0 for s in RunState}
        for r in self.db.read(self.q.open_counts) + self.db.read(self.q.kept_counts):
            counts[r["state"]] = int(r["n"] or 0)
        times = [
            self.db.read(self.q.next_window)[0]["t"],
            self.db.read(self.q.next_due_run)[0]["t"],
        ]
        vals = [v for v in times if v is not None]
        return Status(daemons, counts, from_us(min(vals)) if vals else None, self.maintenance(now))

    def maintenance(self, now: datetime) -> Maintenance | None:
        """The maintenance window in force at ``now`` (``pause --all``), or None."""
        rows = self.db.read(self.q.maintenance_now, {"now": to_us(now)})
        return maintenance_of(rows[0]) if rows else None

    def start_maintenance(
        self, until: datetime | None, reason: str | None, now: datetime
    ) -> Maintenance:
        """``pause --all``: a maintenance window from ``now`` until ``until`` (None: until
        ``resume --all``); one already in force gets the new end and reason. Wakes every
        daemon. Returns the window in force."""
        now_us = to_us(now)
        with self.db.write() as c:
            held = c.execute(self.q.maintenance_now, {"now": now_us}).fetchone()
            values = {"until": opt_us(until), "reason": reason, "who": self.who, "now": now_us}
            if held is not None:
                # a second pause --all moves the end of the one in force (and its reason)
                c.execute(self.q.maintenance_update, {**values, "id": held["id"]})
            else:
                c.execute(self.q.maintenance_insert, values)
                # windows recorded ahead of their time come again, to be skipped in it
                early: dict[int, int] = {}
                for r in c.execute(self.q.withdraw_all_early_runs, {"now": now_us}).fetchall():
                    job_id, t = int(r["job_id"]), int(r["scheduled_for"])
                    early[job_id] = min(t, early.get(job_id, t))
                for job_id, t in early.items():
                    c.execute(self.q.rewind_next_run, {"t": t, "now": now_us, "id": job_id})
            self.db.announce("all")
            row = c.execute(self.q.maintenance_now, {"now": now_us}).fetchone()
        return maintenance_of(row)

    def end_maintenance(self, now: datetime) -> Maintenance | None:
        """``resume --all``: end the window in force at ``now`` (None when there was none);
        the window's row stays, so the windows that fell in it stay skipped."""
        now_us = to_us(now)
        with self.db.write() as c:
            held = c.execute(self.q.maintenance_now, {"now": now_us}).fetchone()
            if held is None:
                return None
            c.execute(self.q.maintenance_end, {"now": now_us, "id": held["id"]})
            self.db.announce("all")
        return replace(maintenance_of(held), until=now)

    def live_daemons(self, now: datetime) -> list[DaemonInfo]:
        return [daemon_info(r) for r in self.db.read(self.q.live_daemons, {"now": to_us(now)})]

    def info(self) -> DbInfo:
        from .values import DbInfo

        jobs = int(self.db.read(self.q.count_jobs)[0]["n"])
        runs = int(self.db.read(self.q.count_runs)[0]["n"])
        return DbInfo(
            self.backend,
            self.db.location,
            self.db.schema_version(),
            jobs,
            runs,
            self.db.size_bytes(),
        )

    def load_copy(
        self,
        jobs: Sequence[CopiedJob],
        now: datetime,
        *,
        history: bool,
        secrets: Sequence[tuple[str, bytes, datetime]] = (),
        calendars: Mapping[str, Sequence[date]] | None = None,
    ) -> int:
        """``db copy`` into this database (see :func:`.transfer.load_copy`), with the
        source's secrets and calendars."""
        from .transfer import load_copy

        return load_copy(
            self.db,
            jobs,
            now,
            history=history,
            secrets=secrets,
            calendars=calendars,
            q=self._q,
        )

    # ---------------------------------------------------------------- used by jobctl serve
    # the dashboard's run strips and the /metrics scrape

    def run_counters(self) -> list[tuple[str, int, str | None, int]]:
        """(job name, its missed_total, a finished state or None, runs that ever ended in
        that state) for every job: the tallies kept apart from the rows (see README, History: what
        is kept, what failed, what never ran), which
        neither retention nor ``prune`` lowers. One query."""
        rows = self.db.read(self.q.run_counters)
        return [(r["name"], int(r["missed_total"]), r["state"], int(r["ended"])) for r in rows]

    def run_costs_by_job(self) -> list[tuple[str, float | None, int | None]]:
        """(job name, CPU seconds of every attempt that ever finished, the largest resident
        set in bytes of its last finished run's last attempt) for every job, by name (see
        README, Run policies and what a run costs); None where nothing was counted. One query."""
        rows = self.db.read(self.q.run_costs_by_job)
        return [
            (r["name"], None if r["cpu_us"] is None else int(r["cpu_us"]) / 1e6, r["max_rss"])
            for r in rows
        ]

    def attempt_duration_histogram(
        self, bounds_seconds: Sequence[float]
    ) -> list[tuple[str, list[int], int, float]]:
        """Per job with finished attempts: (job name, how many lasted at most each bound
        (cumulative), how many in all, the sum of their seconds), from the tallies kept
        apart from the rows. ``bounds_seconds`` must be the schema's buckets
        (:data:`DURATION_BUCKET_BOUNDS_SECONDS`); raises ValueError otherwise."""
        if tuple(bounds_seconds) != DURATION_BUCKET_BOUNDS_SECONDS:
            raise ValueError("the duration buckets are fixed by the schema")
        n = len(bounds_seconds)
        per_job: dict[str, tuple[list[int], int, int]] = {}
        for r in self.db.read(self.q.duration_tallies):
            counts, total, us = per_job.setdefault(r["name"], ([0] * (n + 1), 0, 0))
            counts[int(r["bucket"])] += int(r["n"])
            per_job[r["name"]] = (counts, total + int(r["n"]), us + int(r["us"]))
        out = []
        for name, (counts, total, us) in per_job.items():
            cumulative, running = [], 0
            for c in counts[:n]:
                running += c
                cumulative.append(running)
            out.append((name, cumulative, total, us / 1e6))
        return out

    # ------------------------------------------------------------------ notifications

    def add_channel(self, channel: Channel, now: datetime, *, replace: bool = False) -> Channel:
        """Create a channel (``replace``: overwrite one of that name). Conflict when the
        name is taken."""
        return self.outbox.add_channel(channel, now, replace=replace)

    def get_channel(self, name: str) -> Channel:
        """Raises NotFound."""
        return self.outbox.get_channel(name)

    def list_channels(self) -> list[Channel]:
        """Every channel, by name."""
        return self.outbox.list_channels()

    def delete_channel(self, name: str, now: datetime) -> int:
        """Delete a channel; its undelivered notifications become ``dropped`` (returns how
        many). Conflict, naming them, while jobs name it; NotFound when there is none."""
        return self.outbox.delete_channel(name, now)

    def list_notifications(
        self,
        *,
        job: str | None = None,
        state: NotificationState | None = None,
        run_id: int | None = None,
        limit: int = 20,
    ) -> list[Notification]:
        """Notifications, newest first. NotFound for an unknown job."""
        return self.outbox.list_notifications(job=job, state=state, run_id=run_id, limit=limit)

    def notification_counts(self) -> list[tuple[str, str, str, int]]:
        """(channel, event, state, n) of every notification ever sent or failed: counters
        that retention never lowers."""
        return self.outbox.counts()

    # ------------------------------------------------------------------ secrets and tokens

    def set_secret(self, name: str, value: bytes, now: datetime) -> bool:
        """Create or replace a secret (UsageError past 64 KiB or with a NUL); True when it
        was created."""
        return self.secrets.set_secret(name, value, now)

    def list_secrets(self) -> list[SecretInfo]:
        """Every secret by name, with the jobs that use it; never a value."""
        return self.secrets.list_secrets()

    def delete_secret(self, name: str) -> None:
        """Raises NotFound, or Conflict (naming the jobs) while a job uses it."""
        self.secrets.delete_secret(name)

    def add_token(self, name: str, role: Role, token: str, now: datetime) -> ApiToken:
        """Keep the SHA-256 of a new token. Raises NameTaken."""
        return self.secrets.add_token(name, role, token, now)

    def list_tokens(self) -> list[ApiToken]:
        return self.secrets.list_tokens()

    def delete_token(self, name: str) -> None:
        """Raises NotFound."""
        self.secrets.delete_token(name)

    def token_for(self, token: str, now: datetime) -> ApiToken | None:
        """The kept token whose text this is (its ``last_used_at`` set to ``now``)."""
        return self.secrets.token_for(token, now)

    def secrets_for_copy(self) -> list[tuple[str, bytes, datetime]]:
        """Every secret with its value, for ``db copy`` alone."""
        return self.secrets.secrets_for_copy()

    # ------------------------------------------------------------------ watched jobs

    def ping_many(
        self, pings: Sequence[tuple[Ping, str, str]], now: datetime
    ) -> list[int | NotFound | None]:
        """Record ``(ping, key, host)`` items in order, in one transaction; an unknown
        key is that item's NotFound (nothing written for it), the others are written."""
        return self.watch.ping_many(pings, now)

    def ping(
        self,
        ping: Ping,
        now: datetime,
        *,
        key: str | None = None,
        name: str | None = None,
        host: str,
    ) -> int | None:
        """Record one ping of the watched job of ``key`` (else of ``name``), in one
        transaction: the run it starts, ends or adds output to, and the notifications an
        end causes (see :func:`jobctl.store.watch.record_ping`). Returns the run's id
        (None: a ``log`` with no attempt to add to). Raises NotFound for an unknown key
        or a job that is not watched."""
        return self.watch.ping(ping, now, key=key, name=name, host=host)


__all__ = ["Commands", "cancel_runs_tx", "daemon_info"]


def _phase_only_by_revisions(
    d: jobfile.Definition, revisions: Sequence[Revision]
) -> jobfile.Definition:
    """A fixed rate as a revision written before its anchor was told apart (migration 0015)
    keeps it: a ``start`` that is the instant of a revision that set it (an add or edit
    without ``--start``) only sets the phase, as the migration judges the jobs' own."""
    t = d.spec.trigger
    if t.anchor is None or t.phase_only or t.kind not in (TriggerKind.INTERVAL, TriggerKind.SET):
        return d
    if not any(r.at == t.anchor and "start" in r.changes for r in revisions):
        return d
    return replace(d, spec=replace(d.spec, trigger=replace(t, phase_only=True)))
