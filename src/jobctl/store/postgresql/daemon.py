"""The daemons' face of the PostgreSQL store (:class:`~jobctl.store.protocol.DaemonStore`):
the same results as :mod:`jobctl.store.sqlite.daemon`, safe with any number of daemons on
any number of hosts.

Claims (SPEC §5, §9, §10). ``FOR UPDATE SKIP LOCKED`` lets claimers pass each other's
candidates without waiting, but the overlap and lock rules span rows, which row locks at
READ COMMITTED cannot protect: four claimers racing broke them in every trial. So the
cross-row decision is serialised per job and per lock name with *non-blocking*
transaction advisory locks (``pg_try_advisory_xact_lock``: a claimer that cannot get one
passes that run by, it never waits), re-checked in a fresh statement once they are held,
and enforced by the database besides: the partial unique index ``runs_one_leased_exclusive``
allows one leased run of a forbid/replace job, and ``held_locks`` (primary key: the lock
name) one leased holder per lock, freed by a trigger when the run leaves its lease.

The scheduler lease is one row with a ``term`` that moves on each time it changes hands;
windows are inserted with ``ON CONFLICT (job_id, scheduled_for) DO NOTHING`` and the
job's row is locked for the compare-and-set, so even two leaders for a moment cannot
make two runs of one window.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ...clock import from_us, to_us
from ...errors import Conflict, NotFound
from ...models import (
    MAX_SKIPPED_ROWS,
    Attempt,
    Decision,
    Job,
    JobState,
    Overlap,
    Run,
    RunReason,
    RunState,
    Window,
)
from .. import outbox, secrets
from ..commands import (
    fire_after_jobs,
    insert_run,
    note_deadline_skips,
    pause_after_failures,
    run_by_id,
)
from ..dialect import retrying
from ..rows import (
    attempt_from_row,
    finish_params,
    job_from_row,
    next_claim_time,
    opt_us,
    output_params,
    run_from_row,
)
from ..values import (
    Claimed,
    DaemonIdentity,
    ExpiredFn,
    ExpiredLease,
    Finished,
    FinishItem,
    Fired,
    IdleFixedDelay,
    PlanFn,
    Renewal,
    RetentionMarks,
    TurnResult,
)
from ..watch import WatchDaemon
from .db import PgDb
from .sql import QUERIES
from .waker import Waker

#: candidates read per round of a claim
CLAIM_BATCH = 32

# The next candidates in queue order, each locked for this claimer (others skip them).
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
ORDER BY cand.priority DESC, cand.scheduled_for ASC, cand.id ASC
"""

# The compare-and-set of the claims of a turn, checked again once the advisory locks are
# held. The runs given share no job of one run at a time and no lock name (the caller's
# choice), so no two of them can be judged against each other within this one snapshot.
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
  AND runs.state IN ('pending', 'failed') AND runs.not_before <= %(now)s
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
  AND NOT (jobs.overlap IN ('forbid', 'replace', 'queue') AND EXISTS (
      SELECT 1 FROM runs sib WHERE sib.job_id = runs.job_id AND sib.id <> runs.id
        AND sib.state = 'leased'
  ))
  AND NOT (jobs.max_running IS NOT NULL AND (
      SELECT COUNT(*) FROM runs sib WHERE sib.job_id = runs.job_id AND sib.state = 'leased'
  ) >= jobs.max_running)
RETURNING runs.id, runs.attempt
"""

# Other daemons' leases that ran out, locked for this claimer (others skip them).
EXPIRED = """
SELECT id, job_id, attempt, max_attempts, cancel_requested FROM runs
WHERE state = 'leased' AND lease_until < %s AND leased_by <> %s
ORDER BY id FOR UPDATE SKIP LOCKED
"""

# The claims with their held locks and attempt rows, one statement: a lock held twice or a
# second leased run of a one-at-a-time job fails it whole (the unique keys), and the
# caller then claims the same runs one by one.
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
SELECT id FROM claimed
"""

# The advisory locks of a turn's claims, each tried once, never waited for.
TRY_KEYS = """
SELECT k, pg_try_advisory_xact_lock(hashtextextended(k, 0)) AS ok
FROM unnest(%s::text[]) AS k
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

# SPEC §14 --deadline, decided where a run would start: the claim skips the runs not
# started by their deadline before it picks (rows another claimer holds are its to judge)
SKIP_PAST_DEADLINE = """
UPDATE runs SET state = 'skipped', skip_reason = 'deadline', finished_at = %(now)s,
    deadline_at = NULL
WHERE id IN (SELECT id FROM runs WHERE deadline_at IS NOT NULL AND deadline_at < %(now)s
             AND state IN ('pending', 'failed') FOR UPDATE SKIP LOCKED)
RETURNING id, job_id, scheduled_for
"""

UPSERT_DAEMON = """
INSERT INTO daemons (id, pid, host, boot_id, started_at, heartbeat_at, expires_at, wake_address,
    workers, reserved, reserved_priority, tags)
VALUES (%(id)s, %(pid)s, %(host)s, %(boot_id)s, %(now)s, %(now)s, %(until)s, NULL,
    %(workers)s, %(reserved)s, %(rp)s, %(tags)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at,
    expires_at = EXCLUDED.expires_at
"""

# The ends of a turn, each fenced (its run still leased by this daemon, same attempt),
# with the cancel check inside, and the attempts of the ends that held: one statement.
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
    WHERE runs.id = f.run_id AND runs.attempt = f.attempt AND runs.state = 'leased'
      AND runs.leased_by = %(me)s
    RETURNING runs.id, runs.state, runs.job_id
),
recorded AS (
    UPDATE attempts SET finished_at = f.ended, exit_code = f.exit_code, error = f.a_error,
        output = f.output, output_bytes = f.total, pid = COALESCE(f.pid, attempts.pid),
        cpu_user = f.cpu_user, cpu_system = f.cpu_system, max_rss = f.max_rss
    FROM ended JOIN f ON f.run_id = ended.id
    WHERE attempts.run_id = f.run_id AND attempts.attempt = f.attempt
)
SELECT id, state, job_id FROM ended
"""

#: FINISH_RUNS's arrays, one element an end (``a_error``: the attempt's error; ``ended``:
#: when it ended, its ``finished_at``)
FINISH_COLUMNS = (
    "run_id", "attempt", "state", "if_cancelled", "error", "exit_code", "uncounted",
    "retry_at", "a_error", "output", "total", "pid", "cpu_user", "cpu_system", "max_rss",
    "ended",
)  # fmt: skip

# The claimed runs as the commands read a run, by id.
RUNS_BY_IDS = QUERIES.run_by_id.replace("WHERE runs.id = %s", "WHERE runs.id = ANY(%s::bigint[])")
assert RUNS_BY_IDS != QUERIES.run_by_id

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


def _pid_params(daemon_id: str, started: Sequence[tuple[int, int, int]]) -> dict[str, Any]:
    return {
        "ids": [r for r, _, _ in started],
        "attempts": [a for _, a, _ in started],
        "pids": [p for _, _, p in started],
        "me": daemon_id,
    }


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


@retrying
class PgDaemonStore(outbox.OutboxDaemon, WatchDaemon):
    """See :class:`~jobctl.store.protocol.DaemonStore` for the rules of every method."""

    backend = "postgresql"

    def __init__(self, db: PgDb, identity: DaemonIdentity) -> None:
        self.db = db
        self.identity = identity
        self._q = outbox.Sql(psycopg=True)

    # ------------------------------------------------------------------ the server's clock

    @property
    def clock_offset_seconds(self) -> float:
        """Server clock minus this host's clock, as measured at the last heartbeat."""
        return self.db.clock_offset_seconds

    def measure_clock_offset(self) -> float:
        """Measure (server clock − this host's clock) in seconds, keep and return it.

        Leases and due times are judged by the server's clock (SPEC §10): a daemon reads
        its time as its own clock plus this offset (:class:`~jobctl.store.postgresql.
        ServerClock`), re-measured at each renewal, so a host whose clock is wrong neither
        steals a live lease nor fires early or late. The round trip's midpoint stands for
        the moment of the server's reading.
        """
        before = time.time()
        server_us = self.db.scalar(SERVER_NOW_US)
        after = time.time()
        self.db.clock_offset_seconds = server_us / 1e6 - (before + after) / 2
        return self.db.clock_offset_seconds

    # ------------------------------------------------------------------ daemons

    def open_waker(self) -> Waker:
        """A LISTEN connection of its own (see :class:`~.waker.Waker`), deaf to what this
        store's connection announces."""
        return Waker(self.db.url, own_pid=lambda: self.db.backend_pid)

    def child_location(self) -> str:
        """The URL without its password (SPEC §10: use ~/.pgpass or PGPASSWORD)."""
        return self.db.location

    def register_daemon(self, now: datetime) -> None:
        """As on SQLite, and refused (Conflict, exit 1) when a live daemon with the same
        host name runs under another boot id: two machines share a name, and the leftovers
        of a lost attempt are killed by the daemon of the host named in its lease."""
        now_us = to_us(now)
        me = self.identity
        host = me.host
        with self.db.write() as c:
            c.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("host:" + host,))
            c.execute("DELETE FROM daemons WHERE expires_at < %s", (now_us,))
            other = c.execute(
                "SELECT id, pid FROM daemons WHERE host = %s AND boot_id IS DISTINCT FROM %s "
                "AND id <> %s ORDER BY started_at LIMIT 1",
                (host, me.boot_id, me.id),
            ).fetchone()
            if other is not None:
                raise Conflict(
                    f"host name {host!r} is taken by a live daemon of another machine "
                    f"(daemon {other['id']}, another boot id); give each host its own name"
                )
            self._upsert(c, now)
        self.measure_clock_offset()

    def _upsert(self, c: Any, now: datetime) -> None:
        me = self.identity
        c.execute(
            UPSERT_DAEMON,
            {
                "id": me.id,
                "pid": me.pid,
                "host": me.host,
                "boot_id": me.boot_id,
                "now": to_us(now),
                "until": to_us(now + timedelta(seconds=me.lease_seconds)),
                "workers": me.workers,
                "reserved": me.reserved,
                "rp": me.reserved_priority,
                "tags": json.dumps(list(me.tags)),
            },
        )

    def unregister_daemon(self) -> None:
        with self.db.write() as c:
            c.execute("DELETE FROM daemons WHERE id = %s", (self.identity.id,))
            c.execute(
                "UPDATE scheduler_lease SET holder = NULL, expires_at = 0 WHERE holder = %s",
                (self.identity.id,),
            )
            self.db.announce("all")

    def local_daemons(self, now: datetime) -> list[tuple[str, int]]:
        me = self.identity
        rows = self.db.read(
            "SELECT id, pid FROM daemons WHERE host = %s AND boot_id = %s AND expires_at >= %s "
            "AND id <> %s",
            (me.host, me.boot_id, to_us(now), me.id),
        )
        return [(r["id"], r["pid"]) for r in rows]

    def forget_daemons(self, daemon_ids: Sequence[str]) -> None:
        if not daemon_ids:
            return
        ids = list(daemon_ids)
        with self.db.write() as c:
            c.execute("DELETE FROM daemons WHERE id = ANY(%s)", (ids,))
            c.execute("UPDATE scheduler_lease SET expires_at = 0 WHERE holder = ANY(%s)", (ids,))
            c.execute(
                "UPDATE runs SET lease_until = 0 WHERE state = 'leased' AND leased_by = ANY(%s)",
                (ids,),
            )
            self.db.announce("run")

    def heartbeat(
        self, now: datetime, *, want_leader: bool, held: Sequence[tuple[int, int]]
    ) -> Renewal:
        """As on SQLite, in one transaction; taking the scheduler lease from another holder
        (or from nobody) moves its ``term`` on. The clock offset is measured after it."""
        daemon_id = self.identity.id
        until = to_us(now + timedelta(seconds=self.identity.lease_seconds))
        lost: frozenset[int] = frozenset()
        cancel: frozenset[int] = frozenset()
        leader = False
        with self.db.write() as c:
            self._upsert(c, now)
            if want_leader:
                row = c.execute(
                    "UPDATE scheduler_lease SET expires_at = %(until)s, holder = %(me)s, "
                    "term = term + CASE WHEN holder IS DISTINCT FROM %(me)s THEN 1 ELSE 0 END "
                    "WHERE id = 1 AND (holder = %(me)s OR holder IS NULL "
                    "OR expires_at < %(now)s) RETURNING term",
                    {"until": until, "me": daemon_id, "now": to_us(now)},
                ).fetchone()
                leader = row is not None
            if held:
                rows = c.execute(
                    "UPDATE runs SET lease_until = %s "
                    "FROM unnest(%s::bigint[], %s::int[]) AS h(id, attempt) "
                    "WHERE runs.id = h.id AND runs.attempt = h.attempt "
                    "AND runs.state = 'leased' AND runs.leased_by = %s "
                    "RETURNING runs.id, runs.cancel_requested",
                    (until, [r for r, _ in held], [a for _, a in held], daemon_id),
                ).fetchall()
                renewed = {r["id"] for r in rows}
                lost = frozenset(run_id for run_id, _ in held if run_id not in renewed)
                cancel = frozenset(r["id"] for r in rows if r["cancel_requested"])
        self.measure_clock_offset()
        return Renewal(leader, lost, cancel)

    def leader_lease_expiry(self) -> datetime | None:
        rows = self.db.read("SELECT holder, expires_at FROM scheduler_lease WHERE id = 1")
        if not rows or rows[0]["holder"] is None:
            return None
        return from_us(rows[0]["expires_at"])

    def leader_term(self) -> int:
        """How many times the scheduler lease changed hands."""
        return int(self.db.scalar("SELECT term FROM scheduler_lease WHERE id = 1") or 0)

    def release_leader(self) -> None:
        with self.db.write() as c:
            c.execute(
                "UPDATE scheduler_lease SET holder = NULL, expires_at = 0 WHERE holder = %s",
                (self.identity.id,),
            )

    # ------------------------------------------------------------------ the scheduler

    def schedule_heads(self) -> list[tuple[int, int]]:
        rows = self.db.read(
            "SELECT next_run_at, id FROM jobs WHERE state = 'active' AND next_run_at IS NOT NULL "
            "ORDER BY next_run_at, id"
        )
        return [(r["next_run_at"], r["id"]) for r in rows]

    def jobs_changed_since(self, since: datetime) -> list[tuple[int, int | None]]:
        rows = self.db.read(
            "SELECT id, CASE WHEN state = 'active' THEN next_run_at END AS nxt FROM jobs "
            "WHERE updated_at >= %s",
            (to_us(since),),
        )
        return [(r["id"], r["nxt"]) for r in rows]

    def get_job_by_id(self, job_id: int) -> Job | None:
        rows = self.db.read("SELECT * FROM jobs WHERE id = %s", (job_id,))
        return job_from_row(rows[0]) if rows else None

    def reboot_jobs(self) -> list[Job]:
        rows = self.db.read("SELECT * FROM jobs WHERE state = 'active' AND trigger_kind = 'reboot'")
        return [job_from_row(r) for r in rows]

    def _move_schedule(self, c: Any, job_id: int, **values: Any) -> None:
        c.execute(
            "UPDATE jobs SET next_run_at = %(next)s, "
            "last_window_at = COALESCE(%(last)s, last_window_at), "
            "missed_total = missed_total + %(missed)s, state = %(state)s, "
            "last_boot_id = COALESCE(%(boot_id)s, last_boot_id) WHERE id = %(job_id)s",
            {**values, "job_id": job_id},
        )

    def fire(self, due: Sequence[tuple[int, int]], now: datetime, plan: PlanFn) -> list[Fired]:
        out: list[Fired] = []
        now_us = to_us(now)
        with self.db.write() as c:
            # the maintenance windows (pause --all) that may hold the windows fired now
            held = [
                (from_us(r["since"]), None if r["ends"] is None else from_us(r["ends"]))
                for r in c.execute(
                    "SELECT since, COALESCE(ended_at, until_at) AS ends FROM maintenance "
                    "WHERE since <= %(now)s AND (COALESCE(ended_at, until_at) IS NULL "
                    "OR COALESCE(ended_at, until_at) > %(since)s) ORDER BY since",
                    {"now": now_us, "since": min(d for _, d in due) if due else now_us},
                ).fetchall()
            ]
            for job_id, due_us in sorted(due, key=lambda d: d[0]):  # one lock order
                row = c.execute(
                    "SELECT * FROM jobs WHERE id = %s AND state = 'active' AND next_run_at = %s "
                    "FOR UPDATE",
                    (job_id, due_us),
                ).fetchone()
                if row is None:
                    continue  # changed meanwhile (or fired by another leader): re-read
                job = job_from_row(row)
                flags = c.execute(
                    "SELECT EXISTS (SELECT 1 FROM runs WHERE job_id = %(id)s "
                    "AND state = 'leased') AS leased, %(queue)s AND EXISTS (SELECT 1 FROM runs "
                    "WHERE job_id = %(id)s AND state IN ('pending', 'failed')) AS waiting",
                    {"id": job_id, "queue": job.spec.overlap is Overlap.QUEUE},
                ).fetchone()
                p = plan(job, bool(flags["leased"]), bool(flags["waiting"]), held)
                if p is None:
                    continue
                if p.replace_open:
                    c.execute(
                        "UPDATE runs SET cancel_requested = 1 WHERE job_id = %s "
                        "AND state = 'leased'",
                        (job_id,),
                    )
                    c.execute(
                        "UPDATE runs SET state = 'cancelled', finished_at = %(now)s, "
                        "last_error = 'replaced' WHERE job_id = %(job_id)s "
                        "AND state IN ('pending', 'failed') AND reason <> 'manual' "
                        "AND created_at < %(now)s",
                        {"now": now_us, "job_id": job_id},
                    )
                ids = [
                    i for w in p.windows if (i := insert_run(self.db, c, job, w, now)) is not None
                ]
                c.execute(
                    "DELETE FROM runs WHERE job_id = %(job_id)s AND state = 'skipped' "
                    "AND skip_reason = 'missed' AND id NOT IN (SELECT id FROM runs "
                    "WHERE job_id = %(job_id)s AND state = 'skipped' AND skip_reason = 'missed' "
                    "ORDER BY scheduled_for DESC LIMIT %(keep)s)",
                    {"job_id": job_id, "keep": MAX_SKIPPED_ROWS},
                )
                self._move_schedule(
                    c,
                    job_id,
                    next=opt_us(p.next_run_at),
                    last=opt_us(p.last_window_at),
                    missed=p.missed_increment,
                    state=(JobState.DONE if p.done else JobState.ACTIVE).value,
                    boot_id=None,
                )
                if ids:
                    self.db.announce("run")
                missed = outbox.missed_of(job, p)
                if missed is not None:
                    outbox.enqueue(c, self._q, [missed], now)
                out.append(Fired(job.moved_to(p.next_run_at), p, ids))
        return out

    def record_reboot(self, job_id: int, now: datetime, boot_id: str) -> int | None:
        with self.db.write() as c:
            row = c.execute("SELECT * FROM jobs WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
            if row is None or row["state"] != "active" or row["last_boot_id"] == boot_id:
                return None
            job = job_from_row(row)
            run_id = insert_run(
                self.db,
                c,
                job,
                Window(now, RunState.PENDING, RunReason.SCHEDULE, not_before=now),
                now,
            )
            self._move_schedule(
                c,
                job_id,
                next=None,
                last=to_us(now),
                missed=0,
                state=JobState.ACTIVE.value,
                boot_id=boot_id,
            )
            if run_id is not None:
                self.db.announce("run")
            return run_id

    def idle_fixed_delay(self, job_ids: Sequence[int] | None) -> list[IdleFixedDelay]:
        ids = None if job_ids is None else sorted(set(job_ids))
        if ids == []:
            return []
        only = "" if ids is None else "AND id = ANY(%s::bigint[])"
        rows = self.db.read(
            "SELECT jobs.*, (SELECT MAX(COALESCE(finished_at, scheduled_for)) FROM runs "
            "WHERE runs.job_id = jobs.id) AS ended_at FROM jobs "
            "WHERE state = 'active' AND trigger_kind = 'interval' AND after_completion = 1 "
            f"AND next_run_at IS NULL {only} "
            "AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id "
            "AND runs.state IN ('pending', 'leased', 'failed'))",
            () if ids is None else (ids,),
        )
        out = []
        for r in rows:
            ended = r["ended_at"] if r["ended_at"] is not None else r["schedule_from"]
            out.append(IdleFixedDelay(job_from_row(r), from_us(ended)))
        return out

    def fire_after(
        self, upstream_ids: Sequence[int] | None, now: datetime
    ) -> list[tuple[Job, int, int]]:
        return fire_after_jobs(self.db, upstream_ids, now)

    def set_next_run(self, job_id: int, next_run_at: datetime, now: datetime) -> bool:
        with self.db.write() as c:
            c.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
            cur = c.execute(
                "UPDATE jobs SET next_run_at = %(next)s, updated_at = %(now)s "
                "WHERE id = %(job_id)s AND state = 'active' AND next_run_at IS NULL "
                "AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id "
                "AND runs.state IN ('pending', 'leased', 'failed'))",
                {"next": to_us(next_run_at), "now": to_us(now), "job_id": job_id},
            )
            if cur.rowcount == 1:
                self.db.announce(f"job:{job_id}")
            return bool(cur.rowcount == 1)

    # ------------------------------------------------------------------ the executor

    def _settle_expired(
        self, c: Any, expired: Sequence[Any], now_us: int, on_expired: ExpiredFn
    ) -> list[tuple[Run, Decision]]:
        """Settle the expired leases of other daemons read (and locked) with
        :data:`EXPIRED`."""
        ended: list[tuple[Run, Decision]] = []
        for r in expired:
            lease = ExpiredLease(
                r["id"], r["job_id"], r["attempt"], r["max_attempts"], bool(r["cancel_requested"])
            )
            decision = on_expired(lease)
            c.execute(
                "UPDATE attempts SET finished_at = %s, error = 'lost' "
                "WHERE run_id = %s AND attempt = %s AND finished_at IS NULL",
                (now_us, lease.run_id, lease.attempt),
            )
            c.execute(
                "UPDATE runs SET state = %(state)s, last_error = %(error)s, leased_by = NULL, "
                "lease_until = NULL, "
                "not_before = CASE WHEN %(state)s = 'failed' THEN %(now)s ELSE not_before END, "
                "finished_at = CASE WHEN %(state)s IN ('dead', 'cancelled') THEN %(now)s "
                "ELSE finished_at END WHERE id = %(run_id)s AND state = 'leased'",
                {
                    "state": decision.state.value,
                    "error": decision.error,
                    "now": now_us,
                    "run_id": lease.run_id,
                },
            )
            if decision.state in (RunState.DEAD, RunState.CANCELLED):
                ended.append((run_by_id(self.db, c, lease.run_id), decision))
            outbox.note_finish(
                c,
                self._q,
                lease.run_id,
                lease.attempt,
                decision.state is RunState.FAILED,
                from_us(now_us),
                outbox.Targets(c, self._q),
            )
            if decision.state is RunState.DEAD:
                pause_after_failures(self.db, c, self._q, lease.job_id, from_us(now_us))
        return ended

    def _claim_runs(
        self,
        daemon_id: str,
        host: str,
        now: datetime,
        lease_seconds: float,
        *,
        limit: int,
        low_limit: int | None,
        reserved_priority: int | None,
        on_expired: ExpiredFn,
    ) -> tuple[list[Claimed], list[tuple[Run, Decision]]]:
        """As on SQLite, correct with any number of claimers at once (module docstring);
        a claim never waits on another daemon's claim.

        A round reads the next candidates (locked for this claimer) and picks those this
        turn may take (reserved workers; among them at most one run of a job that holds
        one at a time and one holder of a lock name); it tries their advisory locks in
        one statement and claims the runs whose keys it got in another (:data:`CLAIM`),
        then reads them: four statements a round, however many runs it claims."""
        now_us = to_us(now)
        until = to_us(now + timedelta(seconds=lease_seconds))
        claimed: list[Claimed] = []
        low_used = 0
        rp = reserved_priority if reserved_priority is not None else -(2**62)
        tried: list[int] = []
        taken: set[str] = set()  # the keys of this turn's claims
        with self.db.write() as c:
            conn = c.connection
            n = min(CLAIM_BATCH, limit * 4)
            tags = json.dumps(list(self.identity.tags))
            first = {"now": now_us, "low_ok": True, "rp": rp, "tried": [], "n": n, "tags": tags}
            # one sync: the expired leases, the runs past their deadline skipped, and the
            # first candidates (read after the skips: a skipped run is none)
            with conn.pipeline():
                expired = conn.cursor().execute(EXPIRED, (now_us, daemon_id))
                skips = conn.cursor().execute(SKIP_PAST_DEADLINE, {"now": now_us})
                ahead = conn.cursor().execute(CANDIDATES, first)
                expired_rows = expired.fetchall()
                skipped = skips.fetchall()
                ahead_rows = ahead.fetchall()
            ended = self._settle_expired(c, expired_rows, now_us, on_expired)
            if expired_rows:  # a settled run may be past its deadline too
                skipped += c.execute(SKIP_PAST_DEADLINE, {"now": now_us}).fetchall()
            for r in skipped:
                self.db.announce(f"job:{r['job_id']}")
            note_deadline_skips(c, self._q, skipped, now)
            while len(claimed) < limit:
                low_ok = reserved_priority is None or low_limit is None or low_used < low_limit
                n = min(CLAIM_BATCH, (limit - len(claimed)) * 4)
                if ahead_rows is not None and not expired_rows and low_ok:
                    cands, ahead_rows = ahead_rows, None  # read with the expired leases
                else:
                    # (a settled lease may be a candidate now: read again)
                    ahead_rows = None
                    cands = c.execute(
                        CANDIDATES,
                        {
                            "now": now_us,
                            "low_ok": low_ok,
                            "rp": rp,
                            "tried": tried,
                            "n": n,
                            "tags": tags,
                        },
                    ).fetchall()
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
                got = self._claim_picked(c, picked, daemon_id, host, now_us, until)
                for cand, keys, low in picked:
                    run = got.get(cand["id"])
                    if run is None:
                        continue
                    taken.update(keys)
                    if low:
                        low_used += 1
                    here = cand["lease_host"] == host
                    stale = cand["pgid"] if (cand["pgid"] and here) else None
                    claimed.append(Claimed(run, stale, here and cand["last_error"] == "lost"))
                if len(cands) < n and not deferred and not cut:
                    break  # every candidate left was seen (or is another claimer's)
            if claimed:
                self.db.announce("run")
        return claimed, ended

    def _claim_picked(
        self,
        c: Any,
        picked: Sequence[tuple[dict[str, Any], list[str], bool]],
        daemon_id: str,
        host: str,
        now_us: int,
        until: int,
    ) -> dict[int, Run]:
        """Claim the picked candidates whose advisory locks this transaction gets (none is
        waited for); the claimed runs by id."""
        keys = sorted({k for _, ks, _ in picked for k in ks})
        if keys:
            got = {r["k"] for r in c.execute(TRY_KEYS, (keys,)).fetchall() if r["ok"]}
            ids = [cand["id"] for cand, ks, _ in picked if got.issuperset(ks)]
        else:
            ids = [cand["id"] for cand, _, _ in picked]
        if not ids:
            return {}
        params = {
            "me": daemon_id,
            "until": until,
            "now": now_us,
            "host": host,
            "ids": ids,
            "tags": json.dumps(list(self.identity.tags)),
        }
        violation = self.db.psycopg.errors.UniqueViolation
        # pipelined: the savepoint goes with the claim, its release with the read after
        with c.connection.pipeline():
            try:
                with c.connection.transaction():  # a savepoint: a violation undoes these only
                    won = [r["id"] for r in c.execute(CLAIM, params).fetchall()]
            except violation:
                # the database's own rule caught what the checks let through (a holder
                # that committed as this statement's snapshot was taken): one by one, then
                won = []
                for run_id in ids:
                    try:
                        with c.connection.transaction():
                            one = c.execute(CLAIM, {**params, "ids": [run_id]}).fetchall()
                            won += [r["id"] for r in one]
                    except violation:
                        continue
            if not won:
                return {}
            rows = c.execute(RUNS_BY_IDS, (won,)).fetchall()
        return {r["id"]: run_from_row(r) for r in rows}

    def next_claim_at(self, now: datetime) -> datetime | None:
        now_us = to_us(now)
        # the next run due, the next open run past its --deadline, or the end of a
        # maintenance window that ends by itself (see SQLite's)
        a = self.db.scalar(
            "SELECT LEAST((SELECT MIN(not_before) FROM runs WHERE state IN ('pending', 'failed') "
            "AND not_before > %(now)s), (SELECT MIN(deadline_at) + 1000 FROM runs "
            "WHERE deadline_at IS NOT NULL AND deadline_at >= %(now)s), (SELECT MIN(until_at) "
            "FROM maintenance WHERE ended_at IS NULL AND until_at > %(now)s))",
            {"now": now_us},
        )
        b = self.db.scalar(
            "SELECT MIN(lease_until) FROM runs WHERE state = 'leased' AND leased_by <> %s "
            "AND lease_until > %s",
            (self.identity.id, now_us),
        )
        return next_claim_time(a, b)

    def held_status(self, held: Sequence[tuple[int, int]]) -> tuple[frozenset[int], frozenset[int]]:
        rows = self.db.read(
            "SELECT id, attempt, cancel_requested FROM runs "
            "WHERE state = 'leased' AND leased_by = %s",
            (self.identity.id,),
        )
        leased = {(r["id"], r["attempt"]): bool(r["cancel_requested"]) for r in rows}
        cancel = frozenset(run_id for run_id, a in held if leased.get((run_id, a)))
        lost = frozenset(run_id for run_id, a in held if (run_id, a) not in leased)
        return cancel, lost

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
        """As the protocol says: the pids, the finishes and the claims in one transaction
        (each method's own transaction joins :meth:`PgDb.batch`). The notifications' next
        due time is read last and travels with the ``COMMIT``: no wait of its own."""
        me = self.identity
        daemon_id = me.id
        claimed: list[Claimed] = []
        ended: list[tuple[Run, Decision]] = []
        with self.db.batch():
            finished = self._finish_all(daemon_id, now, finishes, started)
            if limit > 0:
                claimed, ended = self._claim_runs(
                    daemon_id,
                    me.host,
                    now,
                    me.lease_seconds,
                    limit=limit,
                    low_limit=low_limit,
                    reserved_priority=reserved_priority,
                    on_expired=on_expired,
                )
            with self.db.write() as c:
                due = c.connection.cursor().execute(self._q(outbox.NEXT_DUE))
        return TurnResult(finished, claimed, ended, outbox.due_of(due.fetchone()))

    def save_output(self, outputs: Sequence[tuple[int, int, bytes, int]]) -> None:
        if not outputs:
            return
        with self.db.write() as c:
            c.executemany(
                "UPDATE attempts SET output = %(output)s, output_bytes = %(total)s "
                "WHERE run_id = %(run_id)s AND attempt = %(attempt)s AND finished_at IS NULL "
                "AND EXISTS (SELECT 1 FROM runs WHERE id = %(run_id)s "
                "AND attempt = %(attempt)s AND state = 'leased' AND leased_by = %(me)s)",
                output_params(self.identity.id, outputs),
            )

    def secret_values(self, names: Sequence[str]) -> dict[str, bytes]:
        return secrets.secret_values(self.db, self._q, names)

    def _finish_all(
        self,
        daemon_id: str,
        now: datetime,
        finishes: Sequence[FinishItem],
        started: Sequence[tuple[int, int, int]],
    ) -> list[Finished]:
        """Record the pids of the children started (:data:`SET_PIDS`) and every end of the
        turn (:data:`FINISH_RUNS`), one statement each, sent together; an end whose run
        this daemon no longer holds (fenced) is ``Finished(None)``."""
        if not finishes:
            if started:
                with self.db.write() as c:
                    c.execute(SET_PIDS, _pid_params(daemon_id, started))
            return []
        now_us = to_us(now)
        cols: dict[str, list[Any]] = {k: [] for k in FINISH_COLUMNS}
        for f in finishes:
            run_params, attempt_params = finish_params(f, now_us, daemon_id)
            for k in FINISH_COLUMNS:
                if k == "a_error":
                    cols[k].append(attempt_params["error"])
                elif k == "ended":
                    cols[k].append(attempt_params["now"])
                else:
                    cols[k].append(run_params[k] if k in run_params else attempt_params[k])
        with self.db.write() as c:
            with c.connection.pipeline():
                if started:
                    c.connection.cursor().execute(SET_PIDS, _pid_params(daemon_id, started))
                channel = c.connection.cursor().execute(self._q(outbox.ANY_CHANNEL))
                rows = c.execute(FINISH_RUNS, {**cols, "me": daemon_id}).fetchall()
                # whether anyone is told, sent with the ends (a burst's usual answer: no)
                any_channel = channel.fetchone() is not None
            for row in rows:
                self.db.announce(f"job:{row['job_id']}")
            if rows:
                self.db.announce("run")
            states = {r["id"]: RunState(r["state"]) for r in rows}
            targets = outbox.Targets(c, self._q, any_channel=any_channel)
            for f in finishes:
                state = states.get(f.run_id)
                if state is None:
                    continue
                retry = state is RunState.FAILED and f.decision.retry_at is not None
                outbox.note_finish(c, self._q, f.run_id, f.attempt, retry, now, targets)
            for row in rows:
                if row["state"] == RunState.DEAD.value:
                    pause_after_failures(self.db, c, self._q, row["job_id"], now)
        return [Finished(states.get(f.run_id)) for f in finishes]

    def _attempt_of(self, row: Any) -> Attempt:
        return attempt_from_row(row)

    def record_hook(self, run_id: int, status: str) -> None:
        with self.db.write() as c:
            c.execute("UPDATE runs SET hook_status = %s WHERE id = %s", (status, run_id))

    def idle(self) -> None:
        """Nothing put off: the server does its own upkeep."""

    def trim_history(
        self,
        now: datetime,
        *,
        after_job_id: int,
        max_rows: int,
        since: RetentionMarks | None = None,
    ) -> tuple[int, int | None]:
        """Retention's step (written once, :mod:`..retention`); at the end of a pass the
        tallies' delta rows are folded into one row a job and state (or bucket), in one
        statement each, so their readers sum a few rows however many runs ended."""
        from ..retention import trim_history

        done = trim_history(self.db, now, after_job_id=after_job_id, max_rows=max_rows, since=since)
        if done[1] is None:
            from ..retention import changed_jobs

            with self.db.write() as c:
                only, params = "", {}
                if since is not None:
                    only, params = COMPACT_ONLY, {"ids": changed_jobs(self.db, c, since)}
                for statement in (
                    COMPACT_RUN_TALLIES,
                    COMPACT_DURATION_TALLIES,
                    COMPACT_CPU_TALLIES,
                ):
                    c.execute(statement.format(only=only), params)
        return done

    def retention_marks(self, now: datetime) -> RetentionMarks:
        from ..retention import retention_marks

        return retention_marks(self.db, now)

    def get_run(self, run_id: int) -> Run:
        rows = self.db.read(self.db.q.run_by_id, (run_id,))
        if not rows:
            raise NotFound(f"no run with id {run_id}")
        return run_from_row(rows[0])


__all__ = ["PgDaemonStore"]
