"""The retention role (README, History: what is kept): while this daemon holds the scheduler lease,
it deletes each job's finished runs beyond its ``--keep-runs`` most recent or older than its
``--keep-for``, paused jobs too.

The work is cut into steps of at most :data:`RETENTION_BATCH_ROWS` runs, one transaction
each, taken only when nothing else is due for :data:`RETENTION_SLACK_SECONDS`: a claim
never waits behind a long delete, and a daemon with a backlog of history works it off a
step a turn. A pass starts at most every :data:`RETENTION_PASS_SECONDS`: the first one after taking
the lease looks at every job; each later one only at the jobs that may have changed since
the last pass started (runs ended, edits, a ``--keep-for``), found through indexes, so an
idle daemon's passes cost nothing however many jobs there are.
A busy daemon gives it at most a fifth of its time (:data:`RETENTION_REST_FACTOR`).
Counters, ``missed_total`` and ids are not touched (the tallies are apart from the rows).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from .store import DaemonStore
from .store.values import RetentionMarks

#: the most runs one retention transaction deletes (their attempts go with them)
RETENTION_BATCH_ROWS = 500
#: a new pass over the jobs at most this often
RETENTION_PASS_SECONDS = 10.0
#: a step is taken only when nothing else is due sooner than this
RETENTION_SLACK_SECONDS = 0.05
#: after a step, the loop has this many times the step's duration to itself before the
#: next one: retention takes at most a fifth of a busy daemon's time
RETENTION_REST_FACTOR = 4.0


class Retention:
    """Told of the scheduler lease by :meth:`on_renewal`; the loop gives it a
    :meth:`turn` when nothing else is due soon, and asks :meth:`next_wake` when it next
    needs one."""

    def __init__(self, store: DaemonStore, *, log: Callable[[str], None]) -> None:
        self.store = store
        self.log = log
        self.leading = False
        self.next_pass = 0.0
        #: within a pass: the job id the next step starts after (None between passes)
        self.cursor: int | None = None
        self.deleted_in_pass = 0
        #: no step before this (monotonic seconds): the rest after the last one
        self.resume_at = 0.0
        #: where the last finished pass started (None: the next pass looks at every job),
        #: and where the pass under way started
        self.since: RetentionMarks | None = None
        self._started: RetentionMarks | None = None

    def on_renewal(self, leader: bool) -> None:
        """Whether this daemon holds the scheduler lease now; losing it ends the pass (the
        next holder starts its own)."""
        if leader and not self.leading:
            self.next_pass = 0.0
            self.since = None  # what changed while another daemon led is not known
        if not leader:
            self.cursor = None
            self.deleted_in_pass = 0
        self.leading = leader

    def next_wake(self, mono: float) -> float | None:
        """Seconds until it next wants a turn: none while a pass is under way, else until
        the next pass; None when this daemon does not lead."""
        if not self.leading:
            return None
        if self.cursor is not None:
            return max(self.resume_at - mono, 0.0)
        return max(self.next_pass - mono, 0.0)

    def turn(self, now: datetime, mono: float) -> int:
        """One step when it leads and a step is wanted (one transaction); how many runs it
        deleted."""
        if not self.leading or mono < self.resume_at:
            return 0
        if self.cursor is None and mono < self.next_pass:
            return 0
        if self.cursor is None:
            self._started = self.store.retention_marks(now)
        deleted, cursor = self.store.trim_history(
            now, after_job_id=self.cursor or 0, max_rows=RETENTION_BATCH_ROWS, since=self.since
        )
        self.deleted_in_pass += deleted
        self.cursor = cursor
        if cursor is None:
            if self.deleted_in_pass:
                self.log(f"retention: deleted {self.deleted_in_pass} finished runs")
            self.deleted_in_pass = 0
            self.next_pass = mono + RETENTION_PASS_SECONDS
            self.since = self._started
        return deleted

    def rest(self, started: float, ended: float) -> None:
        """A step ran from ``started`` to ``ended`` (monotonic seconds): the next one waits
        RETENTION_REST_FACTOR times as long, so the loop's own work comes first."""
        self.resume_at = ended + RETENTION_REST_FACTOR * max(ended - started, 0.0)

    def fail(self, mono: float) -> None:
        """A step failed (the database is away): a new pass later, not at once."""
        self.cursor = None
        self.deleted_in_pass = 0
        self.next_pass = mono + RETENTION_PASS_SECONDS
