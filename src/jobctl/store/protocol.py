"""What a store's callers may ask of it, one protocol per caller: the commands
(:class:`CommandStore`), a daemon (:class:`DaemonStore`), the dashboard
(:class:`DashboardReads`). Each is implemented once, above the backends
(:class:`~.commands.Commands`, :class:`~.daemon.Daemons`, :class:`~.dashboard.Dashboard`),
and each method's behaviour is stated there.

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
    from ..access import ApiToken, SecretInfo
    from ..checks import CheckFacts
    from ..clock import Clock
    from ..errors import NotFound
    from ..fleet import DaemonInfo, Maintenance
    from ..jobfile import ApplyPlan
    from ..models import Attempt, Job, JobSpec, JobState, Role, Run, RunState
    from ..notifications import Channel, Notification, NotificationState, Outcome, Outgoing
    from ..waits import WaitFacts
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


class CommandStore(Protocol):
    """What the CLI (and ``jobctl serve``) may do. Each method is one transaction (the rules
    of each: :class:`~.commands.Commands`)."""

    backend: str
    #: who this face's changes are made by (``USER@HOST``, ``api``) and from where
    #: (``cli``, ``api``), as their revisions name them (see jobctl(1), jobctl history)
    who: str
    source: str

    # jobs --------------------------------------------------------------------------
    def get_job(self, name: str) -> Job: ...
    def list_jobs(self) -> list[Job]: ...
    def job_names(self) -> list[str]: ...
    def last_runs(self, job_ids: Sequence[int] | None = None) -> dict[int, Run]: ...
    def add_job(
        self,
        spec: JobSpec,
        next_run_at: datetime | None,
        now: datetime,
        *,
        paused: bool = False,
        replace_existing: bool = False,
    ) -> Job: ...
    def add_jobs(
        self,
        items: Sequence[tuple[JobSpec, datetime | None]],
        now: datetime,
        *,
        delete: Sequence[str] = (),
        source: str = "import",
    ) -> list[tuple[Job, bool]]: ...
    def edit_job(
        self,
        name: str,
        changes: dict[str, Any],
        now: datetime,
        *,
        next_run_at: datetime | None = None,
        restart_schedule: bool = False,
        if_revision: Collection[int] | None = None,
    ) -> Job: ...
    def pause_job(self, name: str, now: datetime) -> Job: ...
    def resume_job(self, name: str, next_run_at: datetime | None, now: datetime) -> Job: ...
    def delete_job(self, name: str, *, force: bool = False) -> Job: ...
    def cancel_job(self, name: str, now: datetime) -> tuple[Job, list[int]]: ...

    # jobs as code (see jobctl(1), jobctl history)
    # every method above that changes a job writes its revision in its own transaction

    def apply_plan(
        self,
        plan: ApplyPlan,
        next_runs: Mapping[str, datetime | None],
        now: datetime,
        *,
        source: str = "apply",
    ) -> None: ...
    def history(self, name: str) -> list[Revision]: ...
    def rollback_job(self, name: str, revision: int, now: datetime) -> Job: ...

    # calendars (a job's --except-calendar) -----------------------------------------
    def calendar_add(self, name: str, days: Sequence[date]) -> None: ...
    def calendar_rm(self, name: str, days: Sequence[date]) -> None: ...
    def calendar_list(self, name: str | None = None) -> list[tuple[str, list[date], list[str]]]: ...

    # runs --------------------------------------------------------------------------
    def get_run(self, run_id: int) -> Run: ...
    def list_runs(
        self,
        job_name: str | None = None,
        state: RunState | None = None,
        limit: int = 20,
        *,
        since: datetime | None = None,
    ) -> list[Run]: ...
    def last_attempted_run(self, job_name: str) -> Run: ...
    def failing_jobs(self) -> set[int]: ...
    def recent_durations(self, job_ids: Sequence[int], per_job: int) -> dict[int, list[float]]: ...
    def window_runs(
        self, job_name: str, first: datetime, last: datetime
    ) -> dict[datetime, Run]: ...
    def backfill(
        self,
        job_name: str,
        windows: Sequence[datetime],
        now: datetime,
        plan: BackfillFn,
        *,
        dry_run: bool = False,
    ) -> Backfilled: ...
    def get_attempts(self, run_id: int) -> list[Attempt]: ...
    def get_output(self, run_id: int, attempt: int | None = None) -> tuple[Attempt, bytes]: ...
    def enqueue_run(
        self,
        name: str,
        now: datetime,
        *,
        key: str | None = None,
        env: dict[str, str] | None = None,
        locks: Sequence[str] = (),
        priority: int | None = None,
    ) -> tuple[Run, bool]: ...
    def cancel_runs(self, ids: Sequence[int], now: datetime) -> list[Run]: ...
    def retry_dead(
        self,
        now: datetime,
        *,
        job_name: str | None = None,
        run_ids: Sequence[int] = (),
        all_jobs: bool = False,
    ) -> list[Run]: ...
    def prune(self, cutoff: datetime) -> int: ...
    def waiting(self, run_id: int, now: datetime) -> WaitFacts | None: ...

    # the system --------------------------------------------------------------------
    def status(self, now: datetime) -> Status: ...
    def live_daemons(self, now: datetime) -> list[DaemonInfo]: ...
    def maintenance(self, now: datetime) -> Maintenance | None: ...
    def start_maintenance(
        self, until: datetime | None, reason: str | None, now: datetime
    ) -> Maintenance: ...
    def end_maintenance(self, now: datetime) -> Maintenance | None: ...
    def info(self) -> DbInfo: ...
    def load_copy(
        self,
        jobs: Sequence[CopiedJob],
        now: datetime,
        *,
        history: bool,
        secrets: Sequence[tuple[str, bytes, datetime]] = (),
        calendars: Mapping[str, Sequence[date]] | None = None,
    ) -> int: ...

    # secrets and tokens (README "Secrets", "Tokens") ------------------------------------
    def set_secret(self, name: str, value: bytes, now: datetime) -> bool: ...
    def list_secrets(self) -> list[SecretInfo]: ...
    def delete_secret(self, name: str) -> None: ...
    def secrets_for_copy(self) -> list[tuple[str, bytes, datetime]]: ...
    def add_token(self, name: str, role: Role, sha256: str, now: datetime) -> ApiToken: ...
    def list_tokens(self) -> list[ApiToken]: ...
    def delete_token(self, name: str) -> None: ...
    def token_for(self, sha256: str, now: datetime) -> ApiToken | None: ...

    # used by jobctl serve

    # notifications (see jobctl(1), jobctl notify)
    def add_channel(self, channel: Channel, now: datetime, *, replace: bool = False) -> Channel: ...
    def get_channel(self, name: str) -> Channel: ...
    def list_channels(self) -> list[Channel]: ...
    def delete_channel(self, name: str, now: datetime) -> int: ...
    def list_notifications(
        self,
        *,
        job: str | None = None,
        state: NotificationState | None = None,
        run_id: int | None = None,
        limit: int = 20,
    ) -> list[Notification]: ...
    def notification_counts(self) -> list[tuple[str, str, str, int]]: ...
    def ping(
        self,
        ping: Ping,
        now: datetime,
        *,
        key: str | None = None,
        name: str | None = None,
        host: str,
    ) -> int | None: ...
    def ping_many(
        self, pings: Sequence[tuple[Ping, str, str]], now: datetime
    ) -> list[int | NotFound | None]: ...
    def check_facts(
        self, now: datetime, late_seconds: float, since_seconds: float
    ) -> CheckFacts: ...
    def run_counters(self) -> list[tuple[str, int, str | None, int]]: ...
    def run_costs_by_job(self) -> list[tuple[str, float | None, int | None]]: ...
    def attempt_duration_histogram(
        self, bounds_seconds: Sequence[float]
    ) -> list[tuple[str, list[int], int, float]]: ...


class DaemonStore(Protocol):
    """What one daemon may do, opened for its :class:`~.values.DaemonIdentity` (given once,
    by :meth:`Store.open_daemon`: every write names that daemon). Leases are judged by
    ``now`` as passed in (the rules of each method: :class:`~.daemon.Daemons`)."""

    backend: str
    identity: DaemonIdentity

    def clock(self, base: Clock) -> Clock: ...
    def open_waker(self) -> Waker: ...
    def child_location(self) -> str: ...
    def register_daemon(self, now: datetime) -> None: ...
    def unregister_daemon(self) -> None: ...
    def local_daemons(self, now: datetime) -> list[tuple[str, int]]: ...
    def forget_daemons(self, daemon_ids: Sequence[str]) -> None: ...
    def heartbeat(
        self, now: datetime, *, want_leader: bool, held: Sequence[tuple[int, int]]
    ) -> Renewal: ...
    def leader_lease_expiry(self) -> datetime | None: ...
    def release_leader(self) -> None: ...

    # the scheduler ------------------------------------------------------------------
    def schedule_heads(self) -> Heads: ...
    def jobs_changed_since(self, since: datetime) -> list[tuple[int, int | None]]: ...
    def get_job_by_id(self, job_id: int) -> Job | None: ...
    def reboot_jobs(self) -> list[Job]: ...
    def fire(self, due: Sequence[tuple[int, int]], now: datetime, plan: PlanFn) -> list[Fired]: ...
    def record_reboot(self, job_id: int, now: datetime, boot_id: str) -> int | None: ...
    def idle_fixed_delay(self, job_ids: Sequence[int] | None) -> list[IdleFixedDelay]: ...
    def trim_history(
        self,
        now: datetime,
        *,
        after_job_id: int,
        max_rows: int,
        since: RetentionMarks | None = None,
    ) -> tuple[int, int | None]: ...
    def retention_marks(self, now: datetime) -> RetentionMarks: ...
    def fire_after(
        self, upstream_ids: Sequence[int] | None, now: datetime
    ) -> list[tuple[Job, int, int]]: ...
    def set_next_run(self, job_id: int, next_run_at: datetime, now: datetime) -> bool: ...

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
    ) -> TurnResult: ...
    def next_claim_at(self, now: datetime) -> datetime | None: ...
    def held_status(
        self, held: Sequence[tuple[int, int]]
    ) -> tuple[frozenset[int], frozenset[int]]: ...
    def save_output(self, outputs: Sequence[tuple[int, int, bytes, int]]) -> None: ...
    def secret_values(self, names: Sequence[str]) -> dict[str, bytes]: ...
    def record_hook(self, run_id: int, status: str) -> None: ...

    # notifications (see jobctl(1), jobctl notify)
    def exchange_notifications(
        self,
        now: datetime,
        outcomes: Sequence[Outcome],
        *,
        limit: int,
        lease_seconds: float,
    ) -> tuple[list[Outgoing], datetime | None]: ...
    def next_notification_at(self, now: datetime) -> datetime | None: ...
    def note_overdue(self, now: datetime) -> datetime | None: ...
    def settle_watched(self, now: datetime) -> datetime | None: ...
    def notification_context(
        self, job_id: int | None, run_id: int | None, attempt: int | None
    ) -> tuple[Job | None, Run | None, Run | None, Attempt | None, bytes]: ...
    def idle(self) -> None: ...
    def upkeep_pending(self) -> int: ...
    def get_run(self, run_id: int) -> Run: ...


class DashboardReads(Protocol):
    """What ``jobctl serve``'s dashboard reads (see jobctl(1), jobctl serve), each an indexed
    statement or a
    few: none reads every run. Times are aware UTC datetimes passed in."""

    def job_facts(
        self, query: str | None, state: JobState | None, failed_since: datetime
    ) -> list[JobFacts]: ...
    def job_names(self, query: str | None) -> list[tuple[int, str]]: ...
    def jobs_by_ids(self, ids: Sequence[int]) -> list[Job]: ...
    def last_runs(self, job_ids: Sequence[int]) -> dict[int, Run]: ...
    def recent_runs(self, job_ids: Sequence[int], per_job: int) -> dict[int, list[StripRun]]: ...
    def run_counts_since(self, since: datetime) -> dict[str, int]: ...
    def busy_workers(self) -> dict[str, int]: ...
    def runs_page(
        self,
        job_name: str | None,
        state: RunState | None,
        since: datetime | None,
        before: tuple[datetime, int] | None,
        limit: int,
    ) -> list[Run]: ...
    def finished_runs(self, job_id: int, limit: int) -> list[Run]: ...
    def timeline_job_ids(self, start: datetime, end: datetime) -> set[int]: ...
    def timeline(
        self, job_ids: Sequence[int], start: datetime, end: datetime
    ) -> list[TimelineBar]: ...


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
