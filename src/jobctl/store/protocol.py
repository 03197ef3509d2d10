"""What the commands and the daemons may ask of a store. Every backend implements both.

Rules that hold for every method of every backend:

- Times come in as aware UTC datetimes (``now`` is always passed in, never read) and are
  kept to the microsecond. Durations are float seconds.
- Each writing method is one transaction: it is applied whole or not at all, and raises
  :class:`~jobctl.errors.StoreError` when the database fails (nothing half-written).
- Lookups by name or id raise :class:`~jobctl.errors.NotFound`; a write that the state
  forbids raises :class:`~jobctl.errors.Conflict`.
- Ids are never reused: a job or run id, once given, is never given again in that database.
- Fencing: every write about an attempt names ``(run_id, attempt, daemon_id)`` and is
  applied only while that attempt still holds the run's lease; otherwise it is rejected
  (the method says so in its return value) and nothing is written.
- The store persists decisions; it does not make them. Next fire times, catch-up,
  overlap and retry outcomes come from :mod:`jobctl.planner` (passed in as values or as a
  pure function the store applies inside its transaction).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # names for the annotations only: a command's start imports none of them
    from ..checks import CheckFacts
    from ..errors import NotFound
    from ..jobfile import ApplyPlan
    from ..models import (
        ApiToken,
        Attempt,
        DaemonInfo,
        Job,
        JobSpec,
        JobState,
        Maintenance,
        Role,
        Run,
        RunState,
        SecretInfo,
        WaitFacts,
    )
    from ..notifications import Channel, Notification, NotificationState, Outcome, Outgoing
    from ..watching import Ping
    from .values import (
        Backfilled,
        BackfillFn,
        CopiedJob,
        DaemonIdentity,
        DbInfo,
        ExpiredFn,
        FinishItem,
        Fired,
        Heads,
        IdleFixedDelay,
        JobFacts,
        PlanFn,
        Renewal,
        RetentionMarks,
        Revision,
        Status,
        StripRun,
        TimelineBar,
        TurnResult,
        Waker,
    )


# ------------------------------------------------------------------------- protocols


class CommandStore(Protocol):
    """What the CLI (and ``jobctl serve``) may do. Each method is one transaction."""

    backend: str
    #: who this face's changes are made by (``USER@HOST``, ``api``) and from where
    #: (``cli``, ``api``), as their revisions name them (see jobctl(1), jobctl history)
    who: str
    source: str

    # jobs --------------------------------------------------------------------------
    def get_job(self, name: str) -> Job:
        """The job of that name. Raises NotFound."""
        ...

    def list_jobs(self) -> list[Job]:
        """Every job, ordered by name (byte order)."""
        ...

    def job_names(self) -> list[str]: ...

    def last_runs(self, job_ids: Sequence[int] | None = None) -> dict[int, Run]:
        """The most recent run that was not skipped, per job id."""
        ...

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
        ...

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
        ...

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
        """Change fields of a job's spec (JobSpec field names); with ``if_revision``, only
        while the job is at one of those revisions (else RevisionChanged). With ``restart_schedule``
        the schedule starts again at ``next_run_at`` (a one-shot that was done becomes
        active). Runs already created keep their settings, but for a window recorded ahead
        of its time that has not come yet: that one is taken back, and the job gets its
        window again (decided with the job as it is now). Raises NotFound, Conflict (a
        name taken, or a cancelled job: it is stopped for good)."""
        ...

    def pause_job(self, name: str, now: datetime) -> Job:
        """Stop firing; a window recorded ahead of its time that has not come yet is taken
        back (a paused job's windows are neither run nor recorded). Raises Conflict for a
        cancelled or done job."""
        ...

    def resume_job(self, name: str, next_run_at: datetime | None, now: datetime) -> Job:
        """Restart firing at ``next_run_at`` (missed windows are not run)."""
        ...

    def delete_job(self, name: str, *, force: bool = False) -> Job:
        """Delete a job and its history. Refused (Conflict) while a run is leased unless
        ``force``: the daemon holding it then finds its lease gone (fenced) and kills the
        attempt. The ids are never given again."""
        ...

    def cancel_job(self, name: str, now: datetime) -> tuple[Job, list[int]]:
        """Cancel a job's open runs and stop the job for good (a window recorded ahead of
        its time that has not come yet is taken back, not cancelled)."""
        ...

    # jobs as code (see jobctl(1), jobctl history)
    # every method above that changes a job writes its revision in its own transaction

    def apply_plan(
        self,
        plan: ApplyPlan,
        next_runs: Mapping[str, datetime | None],
        now: datetime,
        *,
        source: str = "apply",
    ) -> None:
        """Apply a job file's plan all or nothing: deletions as ``delete_job`` (Conflict
        while one has a leased run), changes as ``edit_job`` plus pause/resume, additions
        as ``add_job``; ``next_runs`` the first window of each added or changed job by
        name. A job that changed since the plan read it (another revision) is a Conflict."""
        ...

    def history(self, name: str) -> list[Revision]:
        """A job's revisions, oldest first. Raises NotFound."""
        ...

    def rollback_job(self, name: str, revision: int, now: datetime) -> Job:
        """The job as it was at ``revision``, as a new revision. Raises NotFound for an
        unknown revision, UsageError when that definition is no longer valid."""
        ...

    # calendars (a job's --except-calendar) -----------------------------------------
    def calendar_add(self, name: str, days: Sequence[date]) -> None:
        """Create calendar ``name`` with ``days`` or add them to it; the jobs that name it
        exclude them from their next window on."""
        ...

    def calendar_set(self, items: Mapping[str, Sequence[date]]) -> None:
        """Make each calendar hold exactly its dates (created when missing), as ``apply``
        does; one transaction for all."""
        ...

    def calendar_rm(self, name: str, days: Sequence[date]) -> None:
        """Remove ``days`` from calendar ``name`` or, with none, the calendar. NotFound for
        an unknown calendar; Conflict (naming them) while a job uses the calendar."""
        ...

    def calendar_list(self, name: str | None = None) -> list[tuple[str, list[date], list[str]]]:
        """(name, dates, names of the jobs that use it) of every calendar by name, or of
        the one named (NotFound when there is none). Reads only."""
        ...

    # runs --------------------------------------------------------------------------
    def get_run(self, run_id: int) -> Run: ...

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
        ...

    def last_attempted_run(self, job_name: str) -> Run:
        """``logs NAME``: the job's run of the newest window that has an attempt. Raises
        NotFound (no such job, or no attempt yet)."""
        ...

    def failing_jobs(self) -> set[int]:
        """``list --failing``: ids of jobs whose newest run among the succeeded and dead
        ones is dead, or that have a run whose last attempt failed (a retry scheduled or
        under way)."""
        ...

    def recent_durations(self, job_ids: Sequence[int], per_job: int) -> dict[int, list[float]]:
        """``plan``: per job among ``job_ids`` with any, the seconds its newest ``per_job``
        succeeded runs took (each run's last attempt), newest first."""
        ...

    def window_runs(self, job_name: str, first: datetime, last: datetime) -> dict[datetime, Run]:
        """``coverage``: the job's runs whose window is in ``[first, last]``, by window.
        Raises NotFound."""
        ...

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
        ...

    def get_attempts(self, run_id: int) -> list[Attempt]:
        """The attempts of a run, oldest first."""
        ...

    def get_output(self, run_id: int, attempt: int | None = None) -> tuple[Attempt, bytes]:
        """An attempt's stored output tail (default: the last attempt). Raises NotFound."""
        ...

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
        ...

    def cancel_runs(self, ids: Sequence[int], now: datetime) -> list[Run]:
        """Pending/failed runs become cancelled at once; leased ones get a cancel request
        that their daemon acts on. Raises NotFound (nothing written) for an unknown id."""
        ...

    def retry_dead(
        self,
        now: datetime,
        *,
        job_name: str | None = None,
        run_ids: Sequence[int] = (),
        all_jobs: bool = False,
    ) -> list[Run]:
        """Dead runs back to pending with a fresh set of attempts, numbered on."""
        ...

    def prune(self, cutoff: datetime) -> int:
        """Delete finished runs that ended before ``cutoff``; returns how many."""
        ...

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
        ...

    # the system --------------------------------------------------------------------
    def status(self, now: datetime) -> Status:
        """Live daemons, run counts by state, the earliest next window or due run."""
        ...

    def live_daemons(self, now: datetime) -> list[DaemonInfo]: ...

    def maintenance(self, now: datetime) -> Maintenance | None:
        """The maintenance window in force at ``now`` (``pause --all``), or None."""
        ...

    def start_maintenance(
        self, until: datetime | None, reason: str | None, now: datetime
    ) -> Maintenance:
        """``pause --all``: a maintenance window from ``now`` until ``until`` (None: until
        ``resume --all``); one already in force gets the new end and reason. Wakes every
        daemon. Returns the window in force."""
        ...

    def end_maintenance(self, now: datetime) -> Maintenance | None:
        """``resume --all``: end the window in force at ``now`` (None when there was none);
        the window's row stays, so the windows that fell in it stay skipped."""
        ...

    def info(self) -> DbInfo: ...

    def load_copy(
        self,
        jobs: Sequence[CopiedJob],
        now: datetime,
        *,
        history: bool,
        secrets: Sequence[tuple[str, bytes, datetime]] = (),
        calendars: Mapping[str, Sequence[date]] | None = None,
    ) -> int:
        """``db copy``: insert every copied job (with ``history`` its runs and attempts) with
        new ids, the ``secrets`` (name, value, when set) and the ``calendars`` (name,
        dates), all or nothing. Raises
        Conflict when this database holds any job."""
        ...

    # secrets and tokens (README "Secrets", "Tokens") ------------------------------------
    def set_secret(self, name: str, value: bytes, now: datetime) -> bool:
        """Create or replace a secret (UsageError past 64 KiB or with a NUL); True when it
        was created."""
        ...

    def list_secrets(self) -> list[SecretInfo]:
        """Every secret by name, with the jobs that use it; never a value."""
        ...

    def delete_secret(self, name: str) -> None:
        """Raises NotFound, or Conflict (naming the jobs) while a job uses it."""
        ...

    def secrets_for_copy(self) -> list[tuple[str, bytes, datetime]]:
        """Every secret with its value, for ``db copy`` alone."""
        ...

    def add_token(self, name: str, role: Role, sha256: str, now: datetime) -> ApiToken:
        """Keep the SHA-256 (hex) of a new token, never the token. Raises NameTaken."""
        ...

    def list_tokens(self) -> list[ApiToken]: ...

    def delete_token(self, name: str) -> None:
        """Raises NotFound."""
        ...

    def token_for(self, sha256: str, now: datetime) -> ApiToken | None:
        """The kept token of that SHA-256 (its ``last_used_at`` moved to ``now`` at most
        once a minute), else None."""
        ...

    # used by jobctl serve

    # notifications (see jobctl(1), jobctl notify)
    def add_channel(self, channel: Channel, now: datetime, *, replace: bool = False) -> Channel:
        """Create a channel (``replace``: overwrite one of that name). Conflict when the
        name is taken."""
        ...

    def get_channel(self, name: str) -> Channel:
        """Raises NotFound."""
        ...

    def list_channels(self) -> list[Channel]:
        """Every channel, by name."""
        ...

    def delete_channel(self, name: str, now: datetime) -> int:
        """Delete a channel; its undelivered notifications become ``dropped`` (returns how
        many). Conflict, naming them, while jobs name it; NotFound when there is none."""
        ...

    def list_notifications(
        self,
        *,
        job: str | None = None,
        state: NotificationState | None = None,
        run_id: int | None = None,
        limit: int = 20,
    ) -> list[Notification]:
        """Notifications, newest first. NotFound for an unknown job."""
        ...

    def notification_counts(self) -> list[tuple[str, str, str, int]]:
        """(channel, event, state, n) of every notification ever sent or failed: counters
        that retention never lowers."""
        ...

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
        ...

    def ping_many(
        self, pings: Sequence[tuple[Ping, str, str]], now: datetime
    ) -> list[int | NotFound | None]:
        """Record ``(ping, key, host)`` items in order, in one transaction; an unknown
        key is that item's NotFound (nothing written for it), the others are written."""
        ...

    def check_facts(self, now: datetime, late_seconds: float, since_seconds: float) -> CheckFacts:
        """What ``jobctl check`` judges: live daemons, the scheduler-lease holder's host,
        runs due and unclaimed longer than ``late_seconds`` (of jobs not paused), runs
        ended ``dead`` and notifications ``failed`` within ``since_seconds``."""
        ...

    def run_counters(self) -> list[tuple[str, int, str | None, int]]:
        """(job, its missed_total, finished state or None, runs that ever ended in it) for
        every job: counters that never go down (see README, History: what is kept, what failed,
        what never ran)."""
        ...

    def run_costs_by_job(self) -> list[tuple[str, float | None, int | None]]:
        """(job name, CPU seconds of every attempt that ever finished, the largest resident
        set in bytes of its last finished run's last attempt) for every job, by name (see
        README, Run policies and what a run costs); None where nothing was counted. One query."""
        ...

    def attempt_duration_histogram(
        self, bounds_seconds: Sequence[float]
    ) -> list[tuple[str, list[int], int, float]]:
        """Per job: (name, cumulative counts at each bound, count, sum of seconds) of its
        finished attempts ever, whatever was deleted since (see README, History: what is kept, what
        failed, what never ran)."""
        ...


class DaemonStore(Protocol):
    """What one daemon may do, opened for its :class:`~.values.DaemonIdentity` (given once,
    by :meth:`Store.open_daemon`: every write names that daemon). Leases are judged by
    ``now`` as passed in."""

    backend: str
    identity: DaemonIdentity

    @property
    def clock_offset_seconds(self) -> float:
        """The database server's clock minus this host's, re-measured at each heartbeat
        (0 on SQLite: one host's clock); what the daemon's clock adds to this host's."""
        ...

    def open_waker(self) -> Waker:
        """This daemon's wake-up source, published to the commands by :meth:`register_daemon`."""
        ...

    def child_location(self) -> str:
        """The database location handed to children as ``JOBCTL_DB`` (no password)."""
        ...

    def register_daemon(self, now: datetime) -> None:
        """Announce a daemon; rows of expired daemons are cleared. From here on the store
        may put off its upkeep until :meth:`idle`."""
        ...

    def unregister_daemon(self) -> None:
        """A clean stop: forget the daemon and hand the scheduler lease back at once."""
        ...

    def local_daemons(self, now: datetime) -> list[tuple[str, int]]:
        """(daemon id, pid) of the other live daemon rows on this host and boot: the
        caller checks whether each pid is still a jobctl daemon."""
        ...

    def forget_daemons(self, daemon_ids: Sequence[str]) -> None:
        """Drop the rows of daemons found dead on this host, and expire the scheduler
        lease and run leases they held, so they are taken at once."""
        ...

    def heartbeat(
        self, now: datetime, *, want_leader: bool, held: Sequence[tuple[int, int]]
    ) -> Renewal:
        """One renewal in one transaction: this daemon's row (re-inserted whole if it
        expired meanwhile), the scheduler lease when ``want_leader`` (taken when free or
        expired), and the lease of each held ``(run_id, attempt)``; a held run whose lease
        no longer names that attempt is reported lost (fencing)."""
        ...

    def leader_lease_expiry(self) -> datetime | None: ...

    def release_leader(self) -> None: ...

    # the scheduler ------------------------------------------------------------------
    def schedule_heads(self) -> Heads:
        """(next_run_at µs, job id) of every active job that has a next window, in
        ascending (next_run_at, id) order; ``len()`` is their count. May be read lazily
        when iterated (a cursor: a million jobs need no list): iterate it at once,
        before other calls."""
        ...

    def jobs_changed_since(self, since: datetime) -> list[tuple[int, int | None]]:
        """(job id, next_run_at µs or None when not active) of jobs changed at or after
        ``since``: the safety net for a lost wake-up.

        A backend may keep a watermark (SQLite does): when no other connection or process
        has committed to the database since this store's previous call of this method or
        of :meth:`schedule_heads` (which returns the whole schedule as current), it may
        return ``[]`` without reading (what it would return was already known). The caller
        treats every row as a hint to push again, so reporting a job twice is harmless;
        missing a change committed after the previous call is not allowed."""
        ...

    def get_job_by_id(self, job_id: int) -> Job | None: ...

    def reboot_jobs(self) -> list[Job]: ...

    def fire(self, due: Sequence[tuple[int, int]], now: datetime, plan: PlanFn) -> list[Fired]:
        """Record the windows of due jobs, ``(job id, due µs)`` pairs, in one transaction.

        For each job still active whose ``next_run_at`` is still the due time
        (compare-and-set), ``plan(job, has_leased_run)`` decides the rows; they are inserted
        (a window already present is ignored: one run per window, whatever races), the
        job's schedule moves to the plan's ``next_run_at``, and at most ``MAX_SKIPPED_ROWS``
        missed rows are kept. A plan with ``replace_open`` cancels the job's open scheduled
        runs and asks its leased ones to stop. Jobs that changed meanwhile are left out.
        """
        ...

    def record_reboot(self, job_id: int, now: datetime, boot_id: str) -> int | None:
        """One ``@reboot`` run for this boot (None when this boot already had one)."""
        ...

    def idle_fixed_delay(self, job_ids: Sequence[int] | None) -> list[IdleFixedDelay]:
        """Fixed-delay jobs (of ``job_ids``, or all) that are active, have no open run and
        no next window: each moves on from when its last run ended."""
        ...

    def trim_history(
        self,
        now: datetime,
        *,
        after_job_id: int,
        max_rows: int,
        since: RetentionMarks | None = None,
    ) -> tuple[int, int | None]:
        """One retention transaction (see README, History: what is kept, what failed, what never
        ran): for jobs with id > ``after_job_id``, in id
        order, delete finished runs (succeeded, dead, cancelled, skipped; never pending,
        leased or failed), with their attempts and delivered notifications, beyond the
        job's ``keep_runs`` most recent by window or whose window is older than
        ``keep_for`` before ``now``; at most ``max_rows`` runs. With ``since`` (the marks
        of the last pass's start) only the jobs that may have changed since are looked
        at: those with runs ended since, edited since, or with a ``keep_for``; without it,
        every job. Returns (runs deleted, the job id to start the next step after, or None
        when the pass over the jobs is done). The counters are not touched."""
        ...

    def retention_marks(self, now: datetime) -> RetentionMarks:
        """Where a retention pass starts: the newest run id and the open runs' ids (read
        through indexes: as many rows as runs are open), at ``now``."""
        ...

    def fire_after(
        self, upstream_ids: Sequence[int] | None, now: datetime
    ) -> list[tuple[Job, int, int]]:
        """see README, Run policies and what a run costs ``--after``: record the runs of the jobs
        that follow these jobs (None:
        any) for their upstream runs that ended since each one last looked (see
        :func:`jobctl.store.commands.fire_after`). Returns (job, run id, upstream run id)
        of the runs created."""
        ...

    def set_next_run(self, job_id: int, next_run_at: datetime, now: datetime) -> bool:
        """Give a fixed-delay job its next window, only if it still has none and no open
        run (compare-and-set). Returns whether it was applied."""
        ...

    # the executor -------------------------------------------------------------------
    def record_and_claim(
        self,
        now: datetime,
        *,
        finishes: Sequence[FinishItem],
        started: Sequence[tuple[int, int, int]],
        limit: int,
        low_limit: int | None,
        reserved_priority: int | None,
        on_expired: ExpiredFn,
    ) -> TurnResult:
        """What one loop turn learned, and its claims, in ONE transaction (all or nothing).

        In this order:

        1. The ``(run_id, attempt, pid)`` of children ``started`` (first, so an attempt that
           started and ended since the last turn keeps its pid). Fenced.
        2. Each of ``finishes``: the attempt's end and the planner's decision. Fenced: a run
           no longer leased by that attempt is not touched (``Finished(None)``); a cancel
           requested meanwhile applies ``decision.if_cancelled`` instead.
        3. Only when ``limit`` > 0: leases of other daemons that expired are settled
           (``on_expired`` decides each: retry now, dead, cancelled; the lost attempt is
           recorded ``lost``; those that ended are returned in ``ended``), then up to
           ``limit`` due runs are claimed, highest priority first, then oldest window, each
           a compare-and-set: still pending/failed and due, none of its locks held by a
           leased run, and with ``forbid``/``replace`` no other run of its job leased. Runs
           of priority < ``reserved_priority`` are claimed at most ``low_limit`` times. The
           workers, locks and overlap the finishes freed are claimable in the same call.

        ``limit`` 0 claims nothing and settles no lease. The ends are announced to the
        other daemons (``run``, and ``job:ID`` of each ended run's job) when it commits.
        """
        ...

    def next_claim_at(self, now: datetime) -> datetime | None:
        """The earliest future time a claim has something to do: a run may become
        claimable (a ``not_before`` or the expiry of another daemon's lease) or an open
        run's ``--deadline`` passes (the claim skips it); None when nothing waits."""
        ...

    def held_status(self, held: Sequence[tuple[int, int]]) -> tuple[frozenset[int], frozenset[int]]:
        """Of the held ``(run_id, attempt)``: those with a cancel request, and those this
        attempt no longer leases (taken over, deleted by ``rm --force``). Read only."""
        ...

    def save_output(self, outputs: Sequence[tuple[int, int, bytes, int]]) -> None:
        """Store ``(run_id, attempt, tail, total bytes)`` of running attempts. Fenced."""
        ...

    def secret_values(self, names: Sequence[str]) -> dict[str, bytes]:
        """The values of the named secrets that exist, read when an attempt starts (a
        rotated secret reaches the next attempt). Read only."""
        ...

    def record_hook(self, run_id: int, status: str) -> None:
        """How the run's ``--on-failure`` command ended (``exit 0``, ``signal 9``, ...)."""
        ...

    # notifications (see jobctl(1), jobctl notify)
    def exchange_notifications(
        self,
        now: datetime,
        outcomes: Sequence[Outcome],
        *,
        limit: int,
        lease_seconds: float,
    ) -> tuple[list[Outgoing], datetime | None]:
        """One transaction: record each delivery's outcome (fenced: only while this daemon
        leases it; sent and failed raise the counters), lease up to ``limit`` due
        notifications (pending, their try due, not leased by a live daemon: a dead
        daemon's lease is free at once), oldest first; and when the next is due."""
        ...

    def next_notification_at(self, now: datetime) -> datetime | None:
        """When a notification may next be leased (None: none pending). Read only."""
        ...

    def note_overdue(self, now: datetime) -> datetime | None:
        """For the scheduler-lease holder: write ``late`` (runs not started by window +
        grace) and ``long`` (attempts running past warn-after) notifications, each once,
        and drop undelivered ones older than 7 days. Returns when the next late or long
        falls due."""
        ...

    def settle_watched(self, now: datetime) -> datetime | None:
        """For the scheduler-lease holder: end ``dead`` (``no ping``) each watched run still
        without its end ping at window + grace + (``--timeout``, else the period to its
        next window), with its notifications. Returns when the next one falls due."""
        ...

    def notification_context(
        self, job_id: int | None, run_id: int | None, attempt: int | None
    ) -> tuple[Job | None, Run | None, Run | None, Attempt | None, bytes]:
        """What a notification's body shows: its job and the job's last run (its most
        recent window that was not skipped), its run and attempt (each None when gone) and
        the attempt's stored output tail."""
        ...

    def idle(self) -> None:
        """The daemon is about to sleep with nothing due soon: do the upkeep it put off
        while busy (SQLite: checkpoint the write-ahead log). Never blocks on others."""
        ...

    def get_run(self, run_id: int) -> Run: ...


class DashboardReads(Protocol):
    """What ``jobctl serve``'s dashboard reads (see jobctl(1), jobctl serve), each an indexed
    statement or a
    few: none reads every run. Times are aware UTC datetimes passed in."""

    def job_facts(
        self, query: str | None, state: JobState | None, failed_since: datetime
    ) -> list[JobFacts]:
        """Every job whose name, description or command holds ``query`` (ignoring case;
        every job when None) and, when given, whose state is ``state``, in no order;
        ``notifications_failed`` counts those that ended ``failed`` since ``failed_since``."""
        ...

    def job_names(self, query: str | None) -> list[tuple[int, str]]:
        """(id, name) of every job the search ``query`` finds (as :meth:`job_facts`)."""
        ...

    def jobs_by_ids(self, ids: Sequence[int]) -> list[Job]:
        """Those jobs, in the order of ``ids`` (ids of deleted jobs are left out)."""
        ...

    def last_runs(self, job_ids: Sequence[int]) -> dict[int, Run]:
        """Per job id, its most recent run by window that was not skipped."""
        ...

    def recent_runs(self, job_ids: Sequence[int], per_job: int) -> dict[int, list[StripRun]]:
        """The ``per_job`` most recent runs of each job (skipped too), newest first: their
        id, state and window, what the overview's strips show."""
        ...

    def run_counts_since(self, since: datetime) -> dict[str, int]:
        """Runs whose window is at or after ``since``, counted by state (every state)."""
        ...

    def busy_workers(self) -> dict[str, int]:
        """Leased runs per daemon id."""
        ...

    def runs_page(
        self,
        job_name: str | None,
        state: RunState | None,
        since: datetime | None,
        before: tuple[datetime, int] | None,
        limit: int,
    ) -> list[Run]:
        """Runs, newest window first (then newest id), of one job or all, of one state or
        all, whose window is at or after ``since``, and strictly before ``before``
        (window, id) when given: a page goes on after the last row of the one before.
        Raises NotFound for an unknown job."""
        ...

    def finished_runs(self, job_id: int, limit: int) -> list[Run]:
        """The ``limit`` most recent runs of a job (by window) whose last attempt has
        ended, newest first: what its duration chart draws."""
        ...

    def timeline_job_ids(self, start: datetime, end: datetime) -> set[int]:
        """The ids of the jobs that have an attempt :meth:`timeline` would show for
        ``[start, end)``."""
        ...

    def timeline(self, job_ids: Sequence[int], start: datetime, end: datetime) -> list[TimelineBar]:
        """The attempts of those jobs that overlap ``[start, end)`` (running ones too),
        by start, of runs whose window is at most a day before ``start``."""
        ...


class Store(Protocol):
    """An open database: both faces over one connection (or pool)."""

    backend: str
    location: str

    @property
    def commands(self) -> CommandStore: ...

    def open_daemon(self, identity: DaemonIdentity) -> DaemonStore:
        """The daemon's face of this database, for the daemon ``identity`` names."""
        ...

    @property
    def dashboard(self) -> DashboardReads: ...

    def check_safe(self) -> None:
        """Refuse (SecurityError) a database others could use to run commands as us."""
        ...

    def close(self) -> None: ...
