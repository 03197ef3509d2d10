"""The PostgreSQL driver of the daemons' face (:class:`~jobctl.store.driver.DaemonDriver`):
the same results as the SQLite driver, safe with any number of daemons on any number of
hosts (README, Many hosts on PostgreSQL).

Claims (jobctl(1), THE DAEMON; jobctl add's --overlap, --lock and --max-running).
``FOR UPDATE SKIP LOCKED`` lets claimers pass each other's candidates without waiting, but
the overlap and lock rules span rows, which row locks at READ COMMITTED cannot protect: four
claimers racing broke them in every trial. So the cross-row decision is serialised per job
and per lock name with *non-blocking* transaction advisory locks
(``pg_try_advisory_xact_lock``: a claimer that cannot get one passes that run by, it never
waits), re-checked in a fresh statement once they are held,
and enforced by the database besides: the partial unique index ``runs_one_leased_exclusive``
allows one leased run of a forbid/replace job, and ``held_locks`` (primary key: the lock
name) one leased holder per lock, freed by a trigger when the run leaves its lease.

The scheduler lease is one row with a ``term`` that moves on each time it changes hands;
windows are inserted with ``ON CONFLICT (job_id, scheduled_for) DO NOTHING`` and the
job's row is locked for the compare-and-set, so even two leaders for a moment cannot
make two runs of one window.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ...clock import Clock, to_us
from ...errors import Conflict
from ...models import JobState, Overlap, Run, RunState
from ..daemon_sql import DaemonQueries
from ..dialect import pyformat
from ..driver import Ends, Finishes, Quota, Started
from ..outbox import ANY_CHANNEL
from ..retention import changed_jobs
from ..rows import finish_params, run_from_row
from ..values import Claimed, DaemonIdentity, RetentionMarks
from .db import PgDb
from .waker import Waker

DAEMON_QUERIES = DaemonQueries(for_update=" FOR UPDATE", translate=pyformat)

#: candidates read per round of a claim
CLAIM_BATCH = 32

# The next candidates in queue order, each locked for this claimer (others skip them).
# Read in the order of the index runs_queue, never sorted (see :data:`QUEUE_ORDER`), and
# returned in that order (the caller sorts them again, a few rows, in Python: a Sort node
# here would cost a disabled sort's cost, and that cost sets off JIT compiling).
# MATERIALIZED: the LIMIT and the row locks apply once, to exactly these rows. Each
# candidate's job is looked up by its key (LATERAL with a LIMIT: never flattened into a
# join the planner may hash, reading every job on each call, whatever the statistics),
# once, for both what the claim needs of it and its --on tags.
CANDIDATES = """
WITH cand AS MATERIALIZED (
    SELECT runs.id, runs.job_id, runs.priority, runs.pgid, runs.lease_host, runs.last_error,
           runs.scheduled_for, j.overlap, j.max_running, j.job_state
    FROM runs CROSS JOIN LATERAL (
        SELECT jobs.overlap, jobs.max_running, jobs.state AS job_state, jobs.on_tags FROM jobs
        WHERE jobs.id = runs.job_id LIMIT 1
    ) j
    WHERE runs.state IN ('pending', 'failed') AND runs.not_before <= %(now)s
      AND runs.reason <> 'watch'
      AND (%(low_ok)s OR runs.priority >= %(rp)s)
      AND runs.id <> ALL(%(tried)s::bigint[])
      AND NOT EXISTS (
          SELECT 1 FROM run_locks mine JOIN held_locks h ON h.name = mine.name
          WHERE mine.run_id = runs.id
      )
      -- --on: a run whose job asks for a tag this daemon lacks is never locked here
      AND (j.on_tags = '[]' OR %(tags)s::jsonb @> j.on_tags::jsonb)
      -- pause --all: nothing starts while a maintenance window is in force
      AND NOT EXISTS (
          SELECT 1 FROM maintenance m WHERE m.since <= %(now)s AND m.ended_at IS NULL
            AND (m.until_at IS NULL OR m.until_at > %(now)s)
      )
    ORDER BY runs.priority DESC, runs.scheduled_for ASC, runs.id ASC
    LIMIT %(n)s
    FOR UPDATE OF runs SKIP LOCKED
)
SELECT cand.*,
       ARRAY(SELECT l.name FROM run_locks l WHERE l.run_id = cand.id ORDER BY l.name) AS locks
FROM cand
"""

# The candidates are read with sorting off, so the planner walks runs_queue in its order
# and stops after LIMIT rows whatever its statistics say. A burst makes them stale (1,000
# runs queued on a table whose statistics counted none pending: an estimate of 2 rows),
# and with them the planner read every pending run, looked up each one's job and locks
# and sorted them all, for the first 16: 2.6 ms a read at 1,000 pending against 0.13 ms.
# Set for the candidate read only (transaction-local, back to the default after it).
QUEUE_ORDER = "SET LOCAL enable_sort = off"
QUEUE_ORDER_DONE = "SET LOCAL enable_sort TO DEFAULT"

# The compare-and-set of the claims of a turn, checked again once the advisory locks are
# held. The runs given share no job of one run at a time and no lock name (the caller's
# choice), so no two of them can be judged against each other within this one snapshot.
# The claim and the ends find their runs by primary key, and test their state as a
# filter (``(...) IS TRUE``: no index condition can be made of it). Left to the planner,
# with the statistics of a table that was analysed before a burst was queued, they went
# through runs_claimable by state instead: the claim read every pending run (494 rows in
# the bench for 2 ids), the ends every index entry of state 'leased', one for each run
# that passed through a lease since the last vacuum (510 for 2 ends), with a heap visit
# each (a bitmap scan never marks a dead entry). 0.3-0.4 ms a statement, not 0.1.
CLAIM_ONE = """
UPDATE runs SET state = 'leased', leased_by = %(me)s, lease_until = %(until)s,
    attempt = runs.attempt + 1, started_at = COALESCE(runs.started_at, %(now)s),
    exclusive = (jobs.overlap IN ('forbid', 'replace', 'queue')), lease_host = %(host)s,
    pgid = NULL, deadline_at = NULL,
    -- --max-running: the lowest of the job's N places no leased run holds (the unique
    -- index runs_one_leased_slot refuses a second holder, whatever the checks let through)
    slot = CASE WHEN jobs.max_running IS NULL THEN NULL ELSE (
        SELECT MIN(s) FROM generate_series(0, jobs.max_running - 1) AS s
        WHERE NOT EXISTS (SELECT 1 FROM runs o WHERE o.job_id = runs.job_id
                          AND o.state = 'leased' AND o.slot = s)) END
FROM jobs
WHERE runs.id = ANY(%(ids)s::bigint[]) AND jobs.id = runs.job_id AND jobs.state <> 'paused'
  -- a filter of the rows found by key, never the way to them (the note above)
  AND (runs.state IN ('pending', 'failed') AND runs.not_before <= %(now)s) IS TRUE
  -- a watched job's run (reason 'watch') is started and ended by pings, never here
  AND runs.reason <> 'watch'
  AND (jobs.on_tags = '[]' OR %(tags)s::jsonb @> jobs.on_tags::jsonb)
  AND NOT EXISTS (
      SELECT 1 FROM maintenance m WHERE m.since <= %(now)s AND m.ended_at IS NULL
        AND (m.until_at IS NULL OR m.until_at > %(now)s)
  )
  AND (runs.deadline_at IS NULL OR runs.deadline_at >= %(now)s)
  AND NOT EXISTS (
      SELECT 1 FROM run_locks mine JOIN held_locks h ON h.name = mine.name
      WHERE mine.run_id = runs.id
  )
  -- every advisory lock of the run's keys was got by TRY_KEYS (key_runs, key_names: pairs)
  AND NOT EXISTS (
      SELECT 1 FROM unnest(%(key_runs)s::bigint[], %(key_names)s::text[]) AS k(run_id, name)
      WHERE k.run_id = runs.id
        AND NOT COALESCE(NULLIF(current_setting('jobctl.claim_keys', true), ''), '[]')::jsonb
            ? k.name
  )
  AND NOT (jobs.overlap IN ('forbid', 'replace', 'queue') AND EXISTS (
      SELECT 1 FROM runs sib WHERE sib.job_id = runs.job_id AND sib.id <> runs.id
        AND sib.state = 'leased'
  ))
  AND NOT (jobs.max_running IS NOT NULL AND (
      SELECT COUNT(*) FROM runs sib WHERE sib.job_id = runs.job_id AND sib.state = 'leased'
  ) >= jobs.max_running)
RETURNING runs.*, jobs.name AS job_name
"""

# Other daemons' leases that ran out, locked for this claimer (others skip them).
EXPIRED = """
SELECT id, job_id, attempt, max_attempts, cancel_requested FROM runs
WHERE state = 'leased' AND lease_until < %s AND leased_by <> %s
ORDER BY id FOR UPDATE SKIP LOCKED
"""

# The claims with their held locks and attempt rows, one statement: a lock held twice or a
# second leased run of a one-at-a-time job fails it whole (the unique keys), and the
# caller then claims the same runs one by one. It returns the claimed runs as the commands
# read a run (QUERIES.run_select's columns): the rows as the UPDATE left them, and of the
# attempt just begun what the claim wrote (a statement reading the runs again by id was
# planned anew at each call, ids in an array: 230 us of the server's a turn).
CLAIM = f"""
WITH claimed AS ({CLAIM_ONE}),
held AS (
    INSERT INTO held_locks (name, run_id)
    SELECT l.name, l.run_id FROM run_locks l JOIN claimed ON claimed.id = l.run_id
),
began AS (
    INSERT INTO attempts (run_id, attempt, started_at, daemon_id, host)
    SELECT id, attempt, %(now)s, %(me)s, %(host)s FROM claimed
    ON CONFLICT (run_id, attempt) DO UPDATE SET started_at = EXCLUDED.started_at,
        daemon_id = EXCLUDED.daemon_id, host = EXCLUDED.host, finished_at = NULL,
        exit_code = NULL, error = NULL, output = NULL, output_bytes = 0, pid = NULL,
        cpu_user = NULL, cpu_system = NULL, max_rss = NULL
)
SELECT claimed.*,
       (SELECT string_agg(l.name, E'\\n' ORDER BY l.name) FROM run_locks l
        WHERE l.run_id = claimed.id) AS lock_list,
       %(now)s::bigint AS attempt_started_at, NULL::bigint AS attempt_finished_at,
       %(host)s::text AS attempt_host, NULL::float8 AS attempt_cpu,
       NULL::bigint AS attempt_max_rss
FROM claimed
"""

# The advisory locks of a round's claims, each tried once, never waited for; the keys got
# are noted for the rest of the transaction (jobctl.claim_keys, a JSON array), where the
# claim that follows in the same pipeline reads them: it claims a run only when every key
# of the run is noted, so the locks are held before its snapshot is taken, and the turn
# does not wait for this statement's answer.
TRY_KEYS = """
SELECT set_config('jobctl.claim_keys', COALESCE(json_agg(k), '[]')::text, true)
FROM unnest(%s::text[]) AS k WHERE pg_try_advisory_xact_lock(hashtextextended(k, 0))
"""

# The pids of children started, on their runs (fenced) and attempts, one statement.
SET_PIDS = """
WITH s AS (
    UPDATE runs SET pgid = p.pid
    FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(pids)s::int[]) AS p(id, attempt, pid)
    WHERE runs.id = p.id AND runs.attempt = p.attempt AND runs.state = 'leased'
      AND runs.leased_by = %(me)s
    RETURNING runs.id, runs.attempt, p.pid
)
UPDATE attempts SET pid = s.pid FROM s WHERE attempts.run_id = s.id AND attempts.attempt = s.attempt
"""

# see README, Run policies and what a run costs --deadline, decided where a run would start: the
# claim skips the runs not
# started by their deadline before it picks (rows another claimer holds are its to judge)
SKIP_PAST_DEADLINE = """
UPDATE runs SET state = 'skipped', skip_reason = 'deadline', finished_at = %(now)s,
    deadline_at = NULL
WHERE id IN (SELECT id FROM runs WHERE deadline_at IS NOT NULL AND deadline_at < %(now)s
             AND state IN ('pending', 'failed') FOR UPDATE SKIP LOCKED)
RETURNING id, job_id, scheduled_for
"""

# a host name is one machine's: held for the registration, then looked for in another's
LOCK_HOST = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
HOST_OF_ANOTHER_MACHINE = """
SELECT id, pid FROM daemons WHERE host = %s AND boot_id IS DISTINCT FROM %s AND id <> %s
ORDER BY started_at LIMIT 1
"""
# the scheduler lease; its term moves on when it changes hands
TAKE_LEADER = """
UPDATE scheduler_lease SET expires_at = %(until)s, holder = %(me)s,
    term = term + CASE WHEN holder IS DISTINCT FROM %(me)s THEN 1 ELSE 0 END
WHERE id = 1 AND (holder = %(me)s OR holder IS NULL OR expires_at < %(now)s) RETURNING term
"""
RENEW_RUNS = """
UPDATE runs SET lease_until = %s FROM unnest(%s::bigint[], %s::int[]) AS h(id, attempt)
WHERE runs.id = h.id AND runs.attempt = h.attempt AND runs.state = 'leased'
  AND runs.leased_by = %s
RETURNING runs.id, runs.cancel_requested
"""
SCHEDULE_HEADS = """
SELECT next_run_at, id FROM jobs WHERE state = 'active' AND next_run_at IS NOT NULL
ORDER BY next_run_at, id
"""
JOBS_CHANGED_SINCE = """
SELECT id, CASE WHEN state = 'active' THEN next_run_at END AS nxt FROM jobs
WHERE updated_at >= %s
"""
# a due job of a firing, locked (one at a time, in id order: one lock order for every
# leader), if its next run is still the one due; then, read after the lock, its runs
DUE_JOB = "SELECT * FROM jobs WHERE id = %s AND state = 'active' AND next_run_at = %s FOR UPDATE"
DUE_JOB_RUNS = """
SELECT EXISTS (SELECT 1 FROM runs WHERE job_id = %(id)s AND state = 'leased') AS has_leased,
    %(queue)s AND EXISTS (SELECT 1 FROM runs WHERE job_id = %(id)s
                          AND state IN ('pending', 'failed')) AS has_waiting
"""

# The ends of a turn, each fenced (its run still leased by this daemon, same attempt),
# with the cancel check inside, and the attempts of the ends that held: one statement.
# Their runs are found by key (the note above CLAIM_ONE). With them, what the row
# triggers do one end at a time (schema.sql, run_tallies and last_ends), set-wise: they
# stand aside while jobctl.ends_tallied is 'on' (ENDS_TALLIED). An attempt's duration
# and CPU are tallied once, when this statement gives it its end (``was``: the row as it
# was before). Kept under psycopg's 4,096 bytes (MAX_CACHED_STATEMENT_LENGTH): a longer
# statement's text is parsed for its parameters again at every call.
#: the upper bounds of the duration buckets in microseconds, as the trigger
#: tally_attempts has them (schema.sql; commands' DURATION_BUCKET_BOUNDS_SECONDS):
#: width_bucket of a duration less 1 is the number of the first bound at or above it
DURATION_BOUNDS_US = (
    100_000, 500_000, 1_000_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
    300_000_000, 900_000_000, 1_800_000_000, 3_600_000_000, 14_400_000_000,
)  # fmt: skip
FINISH_RUNS = """
WITH f AS (
    SELECT * FROM unnest(
        %(run_id)s::bigint[], %(attempt)s::int[], %(state)s::text[], %(if_cancelled)s::text[],
        %(error)s::text[], %(exit_code)s::int[], %(uncounted)s::int[], %(retry_at)s::bigint[],
        %(a_error)s::text[], %(output)s::bytea[], %(total)s::bigint[], %(pid)s::int[],
        %(cpu_user)s::float8[], %(cpu_system)s::float8[], %(max_rss)s::bigint[],
        %(ended)s::bigint[]
    ) AS f(run_id, attempt, state, if_cancelled, error, exit_code, uncounted, retry_at,
           a_error, output, total, pid, cpu_user, cpu_system, max_rss, ended)
),
ended AS (
    UPDATE runs SET
        state = CASE WHEN runs.cancel_requested = 1 AND f.if_cancelled IS NOT NULL
                     THEN f.if_cancelled ELSE f.state END,
        last_error = CASE WHEN runs.cancel_requested = 1 AND f.if_cancelled IS NOT NULL
                          THEN 'cancelled' ELSE f.error END,
        exit_code = f.exit_code,
        max_attempts = runs.max_attempts + f.uncounted,
        not_before = CASE WHEN f.state IN ('failed', 'pending') THEN f.retry_at
                          ELSE runs.not_before END,
        finished_at = CASE WHEN f.state IN ('failed', 'pending')
                                AND NOT (runs.cancel_requested = 1 AND f.if_cancelled IS NOT NULL)
                           THEN runs.finished_at ELSE f.ended END,
        leased_by = NULL, lease_until = NULL, pgid = NULL
    FROM f
    WHERE runs.id = ANY(%(run_id)s::bigint[]) AND runs.id = f.run_id
      AND runs.attempt = f.attempt
      AND (runs.state = 'leased' AND runs.leased_by = %(me)s) IS TRUE
    RETURNING runs.id, runs.attempt, runs.state, runs.job_id, runs.scheduled_for
),
recorded AS (
    UPDATE attempts SET finished_at = f.ended, exit_code = f.exit_code, error = f.a_error,
        output = f.output, output_bytes = f.total, pid = COALESCE(f.pid, attempts.pid),
        cpu_user = f.cpu_user, cpu_system = f.cpu_system, max_rss = f.max_rss
    FROM ended JOIN f ON f.run_id = ended.id
        JOIN attempts was ON was.run_id = f.run_id AND was.attempt = f.attempt
    WHERE attempts.run_id = f.run_id AND attempts.attempt = f.attempt
    RETURNING ended.job_id, attempts.finished_at - attempts.started_at AS us,
        attempts.cpu_user, attempts.cpu_system,
        was.finished_at IS NULL AND attempts.finished_at IS NOT NULL AS first_end
),
tallied AS (
    INSERT INTO run_tallies (job_id, state, ended, kept)
    SELECT job_id, state, COUNT(*), COUNT(*) FROM ended
    WHERE state IN ('succeeded', 'dead', 'cancelled', 'skipped') GROUP BY job_id, state
),
last_end AS (
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    SELECT DISTINCT ON (job_id) job_id, id, scheduled_for, state FROM ended
    WHERE state IN ('succeeded', 'dead', 'cancelled')
    ORDER BY job_id, scheduled_for DESC
    ON CONFLICT (job_id) DO UPDATE SET run_id = EXCLUDED.run_id,
        scheduled_for = EXCLUDED.scheduled_for, state = EXCLUDED.state
    WHERE last_ends.scheduled_for <= EXCLUDED.scheduled_for
),
freed AS (
    DELETE FROM held_locks WHERE run_id IN (SELECT id FROM ended)
),
timed AS (
    INSERT INTO duration_tallies (job_id, bucket, n, us)
    SELECT job_id, width_bucket(us - 1, '{BOUNDS}'::bigint[]), COUNT(*), SUM(us)
    FROM recorded WHERE first_end GROUP BY 1, 2
),
spent AS (
    INSERT INTO cpu_tallies (job_id, cpu_us)
    SELECT job_id, SUM(round((cpu_user + coalesce(cpu_system, 0)) * 1e6)::BIGINT)
    FROM recorded WHERE first_end AND cpu_user IS NOT NULL GROUP BY job_id
)
SELECT id, attempt, state, job_id FROM ended
""".replace("{BOUNDS}", "{" + ",".join(str(us) for us in DURATION_BOUNDS_US) + "}")

# FINISH_RUNS keeps its ends' tallies itself: the row triggers stand aside for it alone
ENDS_TALLIED = "SET LOCAL jobctl.ends_tallied = on"
ENDS_TALLIED_DONE = "SET LOCAL jobctl.ends_tallied = off"

#: FINISH_RUNS's arrays, one element an end (``a_error``: the attempt's error; ``ended``:
#: when it ended, its ``finished_at``)
FINISH_COLUMNS = (
    "run_id", "attempt", "state", "if_cancelled", "error", "exit_code", "uncounted",
    "retry_at", "a_error", "output", "total", "pid", "cpu_user", "cpu_system", "max_rss",
    "ended",
)  # fmt: skip

SERVER_NOW_US = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us"


#: the tallies' delta rows (one a change, appended by triggers) folded into one row a key,
#: rows of deleted jobs dropped; one statement, so one snapshot: a row committed meanwhile
#: is neither deleted nor summed, and is summed by the readers as it is
# {only}: nothing (every job: a full pass), or the jobs a pass looked at (each job's
# delta rows are folded where its runs ended; the rest are not rewritten)
COMPACT_RUN_TALLIES = """
WITH gone AS (DELETE FROM run_tallies {only} RETURNING *)
INSERT INTO run_tallies (job_id, state, ended, kept)
SELECT job_id, state, SUM(ended), SUM(kept) FROM gone
WHERE job_id IN (SELECT id FROM jobs) GROUP BY job_id, state
"""
COMPACT_CPU_TALLIES = """
WITH gone AS (DELETE FROM cpu_tallies {only} RETURNING *)
INSERT INTO cpu_tallies (job_id, cpu_us)
SELECT job_id, SUM(cpu_us) FROM gone WHERE job_id IN (SELECT id FROM jobs) GROUP BY job_id
"""
COMPACT_DURATION_TALLIES = """
WITH gone AS (DELETE FROM duration_tallies {only} RETURNING *)
INSERT INTO duration_tallies (job_id, bucket, n, us)
SELECT job_id, bucket, SUM(n), SUM(us) FROM gone
WHERE job_id IN (SELECT id FROM jobs) GROUP BY job_id, bucket
"""
COMPACT_ONLY = "WHERE job_id = ANY(%(ids)s)"


def finish_columns(me: str, now_us: int, finishes: Finishes) -> dict[str, Any]:
    """:data:`FINISH_RUNS`'s parameters: an array a column, one element an end."""
    cols: dict[str, Any] = {k: [] for k in FINISH_COLUMNS}
    for f in finishes:
        run_params, attempt_params = finish_params(f, now_us, me)
        for k in FINISH_COLUMNS:
            if k == "a_error":
                cols[k].append(attempt_params["error"])
            elif k == "ended":
                cols[k].append(attempt_params["now"])
            else:
                cols[k].append(run_params[k] if k in run_params else attempt_params[k])
    cols["me"] = me
    return cols


def _pid_params(daemon_id: str, started: Sequence[tuple[int, int, int]]) -> dict[str, Any]:
    return {
        "ids": [r for r, _, _ in started],
        "attempts": [a for _, a, _ in started],
        "pids": [p for _, _, p in started],
        "me": daemon_id,
    }


def _tags(me: DaemonIdentity) -> str:
    """The daemon's tags as the claim compares them with a job's ``--on`` (JSON)."""
    return json.dumps(list(me.tags))


def _send_candidates(conn: Any, params: dict[str, Any]) -> Any:
    """Send the candidate read (in the caller's pipeline) between :data:`QUEUE_ORDER`
    and its end; its cursor."""
    conn.cursor().execute(QUEUE_ORDER)
    cur = conn.cursor().execute(CANDIDATES, params)
    conn.cursor().execute(QUEUE_ORDER_DONE)
    return cur


def _in_queue_order(cur: Any) -> list[Any]:
    """The candidates' rows, highest priority first, then oldest window, then id."""
    return sorted(cur.fetchall(), key=lambda r: (-r["priority"], r["scheduled_for"], r["id"]))


def _claim_keys(cand: dict[str, Any]) -> list[str]:
    """The advisory locks a claim of ``cand`` takes: its job's when the job holds one run
    at a time (forbid, replace, queue) or counts its leased runs (``--max-running``: one
    claim of the job a turn, so the count is never judged within one snapshot twice), and
    one a lock name."""
    exclusive = (
        cand["overlap"] in (Overlap.FORBID.value, Overlap.REPLACE.value, Overlap.QUEUE.value)
        or cand["max_running"] is not None
    )
    return ([f"job:{cand['job_id']}"] if exclusive else []) + [
        f"lock:{name}" for name in cand["locks"]
    ]


class ServerClock:
    """This host's clock plus the offset to the database server's clock that the driver
    re-measures at each renewal: leases and due times are judged by the server's clock, so
    a host whose clock is wrong neither steals a lease nor fires early."""

    def __init__(self, db: PgDb, base: Clock) -> None:
        self.db = db
        self.base = base

    def now(self) -> datetime:
        return self.base.now() + timedelta(seconds=self.db.clock_offset_seconds)

    def monotonic(self) -> float:
        return self.base.monotonic()


class PgDriver:
    """The daemons' statements on one PostgreSQL connection."""

    backend = "postgresql"
    dq = DAEMON_QUERIES
    #: woken by the server (LISTEN/NOTIFY), not at an address of its own
    wake_address: str | None = None

    def __init__(self, db: PgDb) -> None:
        self.db = db
        #: the claim's first reads, sent by :meth:`finish` with the ends: (the turn's
        #: cursor, now, limit, their cursors), taken by :meth:`expired_and_skipped`
        self._ahead: tuple[Any, int, int, tuple[Any, Any, int, Any]] | None = None

    # ---------------------------------------------------------------- connection

    def clock(self, base: Clock) -> Clock:
        """The server's clock: ``base`` plus the offset :meth:`renewed` measures."""
        return ServerClock(self.db, base)

    def open_waker(self, identity: DaemonIdentity) -> Waker:
        """A LISTEN connection of its own (see :class:`~.waker.Waker`), deaf to what this
        store's connection announces."""
        return Waker(self.db.url, own_pid=lambda: self.db.backend_pid)

    def child_location(self) -> str:
        """The URL without its password (use ~/.pgpass or PGPASSWORD)."""
        return self.db.location

    def renewed(self, *, registered: bool) -> None:
        """Measure (server clock − this host's clock) and keep it.

        Leases and due times are judged by the server's clock (README "Many hosts on
        PostgreSQL"): a daemon reads its time as its own clock plus this offset
        (:class:`ServerClock`), re-measured at each renewal, so a
        host whose clock is wrong neither steals a live lease nor fires early or late. The
        round trip's midpoint stands for the moment of the server's reading."""
        before = time.time()
        server_us = self.db.scalar(SERVER_NOW_US)
        after = time.time()
        self.db.clock_offset_seconds = server_us / 1e6 - (before + after) / 2

    def idle(self) -> None:
        """Nothing put off: the server does its own upkeep."""

    def upkeep_pending(self) -> int:
        return 0

    def end_of_retention_pass(self, since: RetentionMarks | None) -> None:
        """The tallies' delta rows folded into one row a job and state (or bucket), in one
        statement each, so their readers sum a few rows however many runs ended: of the
        jobs a pass from ``since`` looked at, or of every job (None: a full pass)."""
        with self.db.write() as c:
            only, params = "", {}
            if since is not None:
                only, params = COMPACT_ONLY, {"ids": changed_jobs(self.db, c, since)}
            for statement in (COMPACT_RUN_TALLIES, COMPACT_DURATION_TALLIES, COMPACT_CPU_TALLIES):
                c.execute(statement.format(only=only), params)

    # ---------------------------------------------------------------- daemons

    def claim_host(self, c: Any, identity: DaemonIdentity, now_us: int) -> None:
        """Refused (Conflict, exit 1) when a live daemon with the same host name runs under
        another boot id: two machines share a name, and the leftovers of a lost attempt
        are killed by the daemon of the host named in its lease."""
        host = identity.host
        c.execute(LOCK_HOST, ("host:" + host,))
        other = c.execute(HOST_OF_ANOTHER_MACHINE, (host, identity.boot_id, identity.id))
        row = other.fetchone()
        if row is not None:
            raise Conflict(
                f"host name {host!r} is taken by a live daemon of another machine "
                f"(daemon {row['id']}, another boot id); give each host its own name"
            )

    def take_leader(self, c: Any, me: str, until_us: int, now_us: int) -> bool:
        row = c.execute(TAKE_LEADER, {"until": until_us, "me": me, "now": now_us}).fetchone()
        return row is not None

    def renew_runs(
        self, c: Any, me: str, until_us: int, held: Sequence[tuple[int, int]]
    ) -> list[tuple[int, bool]]:
        ids, attempts = [r for r, _ in held], [a for _, a in held]
        rows = c.execute(RENEW_RUNS, (until_us, ids, attempts, me)).fetchall()
        return [(r["id"], bool(r["cancel_requested"])) for r in rows]

    # ---------------------------------------------------------------- the scheduler

    def schedule_heads(self) -> list[tuple[int, int]]:
        return [(r["next_run_at"], r["id"]) for r in self.db.read(SCHEDULE_HEADS)]

    def jobs_changed_since(self, since: datetime) -> list[tuple[int, int | None]]:
        rows = self.db.read(JOBS_CHANGED_SINCE, (to_us(since),))
        return [(r["id"], r["nxt"]) for r in rows]

    def due_jobs(self, c: Any, due: Sequence[tuple[int, int]]) -> dict[int, Mapping[str, Any]]:
        out: dict[int, Mapping[str, Any]] = {}
        for job_id, due_us in sorted(due):  # one lock order
            row = c.execute(DUE_JOB, (job_id, due_us)).fetchone()
            if row is None:
                continue  # changed meanwhile (or fired by another leader)
            queue = row["overlap"] == Overlap.QUEUE.value
            flags = c.execute(DUE_JOB_RUNS, {"id": job_id, "queue": queue}).fetchone()
            out[job_id] = {**row, **flags}
        return out

    # ---------------------------------------------------------------- the executor

    @contextlib.contextmanager
    def turn(self) -> Iterator[Any]:
        """The turn in pipeline mode (:meth:`PgDb.batch`): its ``BEGIN`` travels with the
        first statement and its ``NOTIFY`` with the ``COMMIT``."""
        with self.db.batch(), self.db.write() as c:
            yield c

    def finish(
        self,
        c: Any,
        me: str,
        now: datetime,
        finishes: Finishes,
        started: Started,
        claim_next: tuple[DaemonIdentity, int] | None = None,
    ) -> Ends:
        """The pids of the children started (:data:`SET_PIDS`) and every end of the turn
        (:data:`FINISH_RUNS`), one statement each, sent together with whether any channel
        exists (a burst's usual answer: no); with ``claim_next``, the claim's first reads
        (:meth:`expired_and_skipped`) after them: the turn waits once for all of it."""
        if not finishes:
            if started:
                c.execute(SET_PIDS, _pid_params(me, started))
            return [], None
        now_us = to_us(now)
        cols = finish_columns(me, now_us, finishes)
        conn = c.connection
        if started:
            conn.cursor().execute(SET_PIDS, _pid_params(me, started))
        channel = conn.cursor().execute(ANY_CHANNEL)
        conn.cursor().execute(ENDS_TALLIED)
        ended = conn.cursor().execute(FINISH_RUNS, cols)
        conn.cursor().execute(ENDS_TALLIED_DONE)
        if claim_next is not None:
            claimer, limit = claim_next
            self._ahead = (c, now_us, limit, self._send_claim_reads(conn, claimer, now_us, limit))
        rows = ended.fetchall()
        any_channel = channel.fetchone() is not None
        held = {(r["id"], r["attempt"]): (RunState(r["state"]), r["job_id"]) for r in rows}
        return [held.get((f.run_id, f.attempt)) for f in finishes], any_channel

    def expired_and_skipped(
        self, c: Any, me: DaemonIdentity, now_us: int, limit: int
    ) -> tuple[list[Any], list[Any], Any]:
        """One round trip (none of its own when :meth:`finish` sent it with the ends): the
        expired leases, the runs past their deadline skipped, and the first candidates of
        the claim (read after the skips: a skipped run is none)."""
        sent, self._ahead = self._ahead, None
        if sent is not None and sent[:3] == (c, now_us, limit):
            expired, skips, n, ahead = sent[3]
        else:
            expired, skips, n, ahead = self._send_claim_reads(c.connection, me, now_us, limit)
        return expired.fetchall(), skips.fetchall(), (n, _in_queue_order(ahead))

    def _send_claim_reads(
        self, conn: Any, me: DaemonIdentity, now_us: int, limit: int
    ) -> tuple[Any, Any, int, Any]:
        """Send :meth:`expired_and_skipped`'s statements; their cursors, and the number of
        candidates asked for."""
        n = min(CLAIM_BATCH, limit * 4)
        first = {"now": now_us, "low_ok": True, "rp": 0, "tried": [], "n": n, "tags": _tags(me)}
        expired = conn.cursor().execute(EXPIRED, (now_us, me.id))
        skips = conn.cursor().execute(SKIP_PAST_DEADLINE, {"now": now_us})
        return expired, skips, n, _send_candidates(conn, first)

    def skip_past_deadline(self, c: Any, now_us: int) -> list[Any]:
        return list(c.execute(SKIP_PAST_DEADLINE, {"now": now_us}).fetchall())

    def claim(self, c: Any, me: DaemonIdentity, now: datetime, quota: Quota) -> list[Claimed]:
        """Correct with any number of claimers at once (module docstring); a claim never
        waits on another daemon's claim.

        A round reads the next candidates (locked for this claimer) and picks those this
        turn may take (reserved workers; among them at most one run of a job that holds
        one at a time and one holder of a lock name); it tries their advisory locks in
        one statement and claims the runs whose keys it got in another (:data:`CLAIM`,
        which returns them whole), both sent before the round waits once: a wait for the
        candidates (the first round's come with the turn's ends) and one for the claim a
        round, however many runs it claims."""
        limit, low_limit, reserved_priority = quota.limit, quota.low_limit, quota.reserved_priority
        ahead = quota.ahead
        now_us = to_us(now)
        until = to_us(now + timedelta(seconds=me.lease_seconds))
        claimed: list[Claimed] = []
        low_used = 0
        rp = reserved_priority if reserved_priority is not None else -(2**62)
        tried: list[int] = []
        taken: set[str] = set()  # the keys of this turn's claims
        while len(claimed) < limit:
            low_ok = reserved_priority is None or low_limit is None or low_used < low_limit
            n = min(CLAIM_BATCH, (limit - len(claimed)) * 4)
            if ahead is not None and low_ok and ahead[0] == n:
                cands, ahead = ahead[1], None  # read with the expired leases
            else:
                ahead = None
                params = {
                    "now": now_us,
                    "low_ok": low_ok,
                    "rp": rp,
                    "tried": tried,
                    "n": n,
                    "tags": _tags(me),
                }
                cands = _in_queue_order(_send_candidates(c.connection, params))
            picked: list[tuple[dict[str, Any], list[str], bool]] = []
            keys_now: set[str] = set()
            deferred = False
            cut = False  # candidates left unseen this round: the picked may fail
            for cand in cands:
                if len(claimed) + len(picked) >= limit:
                    cut = True
                    break
                keys = _claim_keys(cand)
                if keys_now.intersection(keys):
                    deferred = True  # judged after this round's claims, next round
                    continue
                tried.append(cand["id"])
                if cand["job_state"] == JobState.PAUSED.value or taken.intersection(keys):
                    continue
                low = reserved_priority is not None and cand["priority"] < reserved_priority
                low_picked = sum(1 for p in picked if p[2])
                if low and low_limit is not None and low_used + low_picked >= low_limit:
                    continue
                picked.append((cand, keys, low))
                keys_now.update(keys)
            got = self._claim_picked(c, picked, me, now_us, until)
            for cand, keys, low in picked:
                run = got.get(cand["id"])
                if run is None:
                    continue
                taken.update(keys)
                if low:
                    low_used += 1
                here = cand["lease_host"] == me.host
                stale = cand["pgid"] if (cand["pgid"] and here) else None
                claimed.append(Claimed(run, stale, here and cand["last_error"] == "lost"))
            if len(cands) < n and not deferred and not cut:
                break  # every candidate left was seen (or is another claimer's)
        if claimed:
            # the runs other claimers passed by while this one held them are decided
            self.db.announce("run")
        return claimed

    def _claim_picked(
        self,
        c: Any,
        picked: Sequence[tuple[dict[str, Any], list[str], bool]],
        me: DaemonIdentity,
        now_us: int,
        until: int,
    ) -> dict[int, Run]:
        """Claim the picked candidates whose advisory locks this transaction gets (none is
        waited for; :data:`TRY_KEYS` is sent with the claim, which takes only the runs
        whose keys it got); the claimed runs by id."""
        if not picked:
            return {}
        ids = [cand["id"] for cand, _, _ in picked]
        pairs = [(cand["id"], k) for cand, ks, _ in picked for k in ks]
        if pairs:
            c.connection.cursor().execute(TRY_KEYS, (sorted({k for _, k in pairs}),))
        params = {
            "me": me.id,
            "until": until,
            "now": now_us,
            "host": me.host,
            "ids": ids,
            "tags": _tags(me),
            "key_runs": [run_id for run_id, _ in pairs],
            "key_names": [k for _, k in pairs],
        }
        try:
            rows = self._claim_or_undo(c, params)
        except self.db.psycopg.errors.UniqueViolation:
            # the database's own rule caught what the checks let through (a holder that
            # committed as this statement's snapshot was taken): one by one, then
            rows = []
            for run_id in ids:
                with contextlib.suppress(self.db.psycopg.errors.UniqueViolation):
                    rows += self._claim_or_undo(c, {**params, "ids": [run_id]})
        return {r["id"]: run_from_row(r) for r in rows}

    def _claim_or_undo(self, c: Any, params: dict[str, Any]) -> list[Any]:
        """:data:`CLAIM` under a savepoint: a violation of a unique key undoes it alone
        (and is raised). The savepoint goes with the claim, its release with what
        follows it in the turn's pipeline: one round trip. (psycopg's nested
        ``transaction()`` syncs the pipeline as it enters and leaves: three more.)"""
        c.execute("SAVEPOINT claim")
        try:
            rows = list(c.execute(CLAIM, params).fetchall())
        except self.db.psycopg.errors.UniqueViolation:
            self.db.sync_past_error()
            c.execute("ROLLBACK TO SAVEPOINT claim")
            raise
        c.execute("RELEASE SAVEPOINT claim")
        return rows

    def read_later(self, c: Any, sql: str) -> Any:
        """Sent in the turn's pipeline: its answer comes with the ``COMMIT``."""
        return c.connection.cursor().execute(sql)


__all__ = ["CANDIDATES", "DAEMON_QUERIES", "QUEUE_ORDER", "PgDriver", "ServerClock"]
