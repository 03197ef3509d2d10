"""What a backend gives the daemons' face (:mod:`.daemon`), written once above it: each
member is one statement, or the one algorithm that truly differs between the backends (the
claim: ``SKIP LOCKED`` and advisory keys on PostgreSQL, the single writer's
compare-and-set on SQLite).

Every member that takes ``c`` runs inside the caller's write transaction (a cursor of
:meth:`~.dialect.Dialect.write`, or of :meth:`DaemonDriver.turn`); the others are reads or
upkeep of their own. Times are integer microseconds since the epoch unless a ``datetime``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ..clock import Clock
from ..models import RunState
from .daemon_sql import DaemonQueries
from .dialect import Dialect
from .values import Claimed, DaemonIdentity, FinishItem, Heads, RetentionMarks, Waker

#: an end of a turn that held: the state written, and its run's job (None: not known)
Ended = tuple[RunState, int | None]
#: the ends a turn records, and the (run id, attempt, pid) of the children it started
Finishes = Sequence[FinishItem]
Started = Sequence[tuple[int, int, int]]
#: what each end wrote (None: fenced off), and whether a notification channel exists
Ends = tuple[list[Ended | None], bool | None]


@dataclass(frozen=True)
class Quota:
    """What one turn may claim: ``limit`` runs, of which at most ``low_limit`` of priority
    below ``reserved_priority`` (None: no reserve); ``ahead``: the candidates
    :meth:`DaemonDriver.expired_and_skipped` read ahead, or None."""

    limit: int
    low_limit: int | None
    reserved_priority: int | None
    ahead: Any = None


class Pending(Protocol):
    """A statement's answer, read when wanted (after the commit it travelled with)."""

    def fetchone(self) -> Any: ...


class DaemonDriver(Protocol):
    """One backend's connection as the daemons' face uses it."""

    backend: str
    #: the face's statements in this dialect
    dq: DaemonQueries
    #: where this daemon is woken (published in its ``daemons`` row), None: by the server
    wake_address: str | None

    @property
    def db(self) -> Dialect:
        """The connection (transactions, reads, announcements)."""
        ...

    # ---------------------------------------------------------------- connection

    def open_waker(self, identity: DaemonIdentity) -> Waker:
        """This daemon's end of the wake-ups (and its address, :attr:`wake_address`)."""
        ...

    def child_location(self) -> str:
        """The database as a child process is told it (never a password)."""
        ...

    def clock(self, base: Clock) -> Clock:
        """The clock the daemon reads, from this host's ``base``."""
        ...

    def renewed(self, *, registered: bool) -> None:
        """After a registration or heartbeat committed: what the backend re-reads then
        (the other daemons' wake addresses; the server's clock offset)."""
        ...

    def idle(self) -> None:
        """The daemon has nothing to do: deferred upkeep (a WAL checkpoint) may run."""
        ...

    def upkeep_pending(self) -> int:
        """The commits whose upkeep :meth:`idle` has yet to do (0: none). The daemon gives
        it a turn once this number has not moved for a while."""
        ...

    def end_of_retention_pass(self, since: RetentionMarks | None) -> None:
        """A retention pass ended: fold what the backend keeps as delta rows, of the jobs
        a pass from ``since`` looked at (None: of every job)."""
        ...

    # ---------------------------------------------------------------- daemons

    def claim_host(self, c: Any, identity: DaemonIdentity, now_us: int) -> None:
        """Inside the registration: refuse (Conflict) a host name a live daemon of another
        machine holds, where several machines share the database."""
        ...

    def take_leader(self, c: Any, me: str, until_us: int, now_us: int) -> bool:
        """The scheduler lease for ``me`` until ``until_us`` when free, expired or its own;
        whether it holds it now."""
        ...

    def renew_runs(
        self, c: Any, me: str, until_us: int, held: Sequence[tuple[int, int]]
    ) -> list[tuple[int, bool]]:
        """Extend the leases of ``held`` (run id, attempt) still this daemon's (fenced):
        (run id, cancel requested) of each renewed."""
        ...

    # ---------------------------------------------------------------- the scheduler

    def schedule_heads(self) -> Heads:
        """(next_run_at, id) of every active job with a next run, in that order."""
        ...

    def jobs_changed_since(self, since: datetime) -> list[tuple[int, int | None]]:
        """(id, next_run_at if active) of the jobs changed at or after ``since``."""
        ...

    def due_jobs(self, c: Any, due: Sequence[tuple[int, int]]) -> dict[int, Mapping[str, Any]]:
        """The active jobs of ``due`` (id, next_run_at) by id, each row locked for this
        transaction where other writers run at once, with ``has_leased`` (a run of it is
        leased) and ``has_waiting`` (a queue job with a run waiting). Rows whose next run
        moved meanwhile may be left out or returned; the caller compares."""
        ...

    # ---------------------------------------------------------------- the executor

    def turn(self) -> AbstractContextManager[Any]:
        """The one write transaction of an executor's turn (its cursor)."""
        ...

    def finish(
        self,
        c: Any,
        me: str,
        now: datetime,
        finishes: Finishes,
        started: Started,
        claim_next: tuple[DaemonIdentity, int] | None = None,
    ) -> Ends:
        """Record the pids of ``started`` (run id, attempt, pid) and every end of
        ``finishes``, each fenced (its run still leased by ``me``, same attempt; a cancel
        requested meanwhile applies its ``if_cancelled``). What each end wrote, in the
        order of ``finishes`` (None: fenced off), and whether any notification channel
        exists when that was read with them (None: not read). ``claim_next`` (the
        claimer and the claim's limit): :meth:`expired_and_skipped` follows in this
        transaction, and a driver may send its reads after the ends, with them."""
        ...

    def expired_and_skipped(
        self, c: Any, me: DaemonIdentity, now_us: int, limit: int
    ) -> tuple[list[Any], list[Any], Any]:
        """Other daemons' leases that ran out (``id, job_id, attempt, max_attempts,
        cancel_requested``, each locked for this claimer), the waiting runs past their
        ``--deadline`` skipped now (``id, job_id, scheduled_for``), and what a claim of up
        to ``limit`` runs may read ahead with them (None: nothing)."""
        ...

    def skip_past_deadline(self, c: Any, now_us: int) -> list[Any]:
        """Skip the waiting runs past their ``--deadline`` (rows as above)."""
        ...

    def claim(self, c: Any, me: DaemonIdentity, now: datetime, quota: Quota) -> list[Claimed]:
        """Claim up to ``quota.limit`` due runs, best first, each a compare-and-set of the
        overlap, lock and ``--max-running`` rules (see :meth:`~.daemon.Daemons.
        record_and_claim`)."""
        ...

    def read_later(self, c: Any, sql: str) -> Pending:
        """Run a read in the transaction; its answer is read after the commit."""
        ...


__all__ = ["DaemonDriver", "Ended", "Ends", "Finishes", "Pending", "Quota", "Started"]
