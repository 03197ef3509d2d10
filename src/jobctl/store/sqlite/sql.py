"""The statements of the SQLite backend, by name: the commands' (:mod:`jobctl.store.queries`,
written once for both backends) with SQLite's fragments, and the daemon's own.

Named parameters (``:now``) where a statement takes more than two; times are integer
microseconds since the epoch.
"""

from __future__ import annotations

from ..queries import (
    JOB_FREE,
    LOCKS_FREE,
    NO_MAINTENANCE,
    RUN_DUE,
    RUN_OPEN,
    Fragments,
    queries,
)

QUERIES = queries(
    Fragments(lines_of=lambda column: f"group_concat({column}, char(10))", for_update="")
)


# ---------------------------------------------------------------------------- daemons

WAKE_ADDRESSES = "SELECT wake_address FROM daemons WHERE wake_address IS NOT NULL"
ENSURE_LEADER_ROW = (
    "INSERT INTO scheduler_lease (id, holder, expires_at) VALUES (1, NULL, 0) "
    "ON CONFLICT (id) DO NOTHING"
)
TAKE_LEADER = """
UPDATE scheduler_lease SET holder = :me, expires_at = :until
WHERE id = 1 AND (holder = :me OR holder IS NULL OR expires_at < :now)
"""
RENEW_RUN = """
UPDATE runs SET lease_until = ? WHERE id = ? AND attempt = ? AND state = 'leased'
AND leased_by = ? RETURNING cancel_requested
"""

# ---------------------------------------------------------------------------- scheduling

# in (next_run_at, id) order: the order of the jobs_next_run index, no sort
SCHEDULE_HEADS = (
    "SELECT next_run_at, id FROM jobs WHERE state = 'active' AND next_run_at IS NOT NULL "
    "ORDER BY next_run_at, id"
)
COUNT_SCHEDULED = "SELECT COUNT(*) FROM jobs WHERE state = 'active' AND next_run_at IS NOT NULL"
DATA_VERSION = "PRAGMA data_version"
JOBS_CHANGED_SINCE = (
    "SELECT id, CASE WHEN state = 'active' THEN next_run_at END FROM jobs WHERE updated_at >= ?"
)
# the due jobs of one firing chunk in one read, each with whether a run of it is leased;
# the caller keeps those whose next_run_at is still the due time (compare-and-set)
FIRE_JOBS = """
SELECT jobs.*, EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id
                       AND runs.state = 'leased') AS has_leased,
    jobs.overlap = 'queue' AND EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id
                       AND runs.state IN ('pending', 'failed')) AS has_waiting
FROM jobs WHERE state = 'active' AND id IN ({marks})
"""

# ---------------------------------------------------------------------------- claims

# our own leases are renewed (fenced) by the heartbeat, never taken back here
EXPIRED_LEASES = """
SELECT id, job_id, attempt, max_attempts, cancel_requested FROM runs
WHERE state = 'leased' AND lease_until < ? AND leased_by != ?
"""

#: --deadline (README, Run policies and what a run costs), decided where a run would
#: start: the runs not started by their deadline are skipped (``deadline``) by the claim,
#: in its transaction, before it picks. Through runs_deadline (only runs with a deadline):
#: the planner would otherwise walk every pending run on each claim (O(n²) in a burst)
SKIP_PAST_DEADLINE = """
UPDATE runs INDEXED BY runs_deadline
SET state = 'skipped', skip_reason = 'deadline', finished_at = :now, deadline_at = NULL
WHERE deadline_at IS NOT NULL AND deadline_at < :now AND state IN ('pending', 'failed')
RETURNING id, job_id, scheduled_for
"""
#: whether SKIP_PAST_DEADLINE has a row to skip: one read of runs_deadline, empty while no
#: run has a deadline (the UPDATE opens runs and each of its indexes to write, and builds
#: its RETURNING table, even when it changes nothing: at every claim)
ANY_PAST_DEADLINE = """
SELECT 1 FROM runs INDEXED BY runs_deadline
WHERE deadline_at IS NOT NULL AND deadline_at < :now AND state IN ('pending', 'failed')
LIMIT 1
"""
# The claim's rules are the pieces of jobctl.store.queries (shared with ``inspect``).
# the reserved-worker quota: runs of priority < :rp only while :low_ok (per daemon)
WITHIN_QUOTA = "(:low_ok OR runs.priority >= :rp)"

# --on: every tag of the run's job is among this daemon's (:tags, a JSON array)
TAGS_CARRIED = """NOT EXISTS (SELECT 1 FROM jobs jt, json_each(jt.on_tags) t
    WHERE jt.id = runs.job_id AND jt.on_tags <> '[]'
    AND t.value NOT IN (SELECT value FROM json_each(:tags)))"""

# Claim the single best claimable run: due, pending or failed, none of its locks held by a
# leased run, its job not paused, (forbid/replace) no other run of its job leased, its
# job's --on tags carried by this daemon, and no maintenance window in force.
CLAIMABLE = f"""
    {RUN_OPEN} AND {RUN_DUE} AND {WITHIN_QUOTA}
    AND {LOCKS_FREE}
    AND {JOB_FREE}
    AND {TAGS_CARRIED}
    AND {NO_MAINTENANCE}
"""

# walk the queue in order and stop at the first claimable run; without INDEXED BY the
# planner picks runs_claimable and sorts every due run on each claim (O(n²) in a burst).
# The subquery is evaluated once, inside the writer's transaction (BEGIN IMMEDIATE: no
# other writer), so the row it picks is still claimable when it is updated.
# It returns the claimed run whole, as RUN_BY_ID reads it once its attempt row (started
# :now on :host) is in, so nothing is read again; and what the previous attempt left
# behind if it was lost: its host (its attempt row is written at its claim, so the host
# is known even when its daemon died before recording the pid) and its pid, if recorded
CLAIM_ONE = f"""
UPDATE runs SET state = 'leased', leased_by = :me, lease_until = :until,
    attempt = attempt + 1, started_at = COALESCE(started_at, :now),
    lease_host = :host, deadline_at = NULL
WHERE id = (
    SELECT id FROM runs INDEXED BY runs_queue WHERE {CLAIMABLE}
    -- a watched job's run (reason 'watch') is started and ended by pings, never here
    AND runs.reason <> 'watch'
    ORDER BY priority DESC, scheduled_for ASC, id ASC LIMIT 1
)
RETURNING *, (SELECT name FROM jobs WHERE jobs.id = runs.job_id) AS job_name,
    (SELECT group_concat(name, char(10)) FROM run_locks
     WHERE run_locks.run_id = runs.id) AS lock_list,
    :now AS attempt_started_at, NULL AS attempt_finished_at, :host AS attempt_host,
    NULL AS attempt_cpu, NULL AS attempt_max_rss,
    -- a first attempt has no previous one: no lookup (CASE is evaluated lazily)
    CASE WHEN runs.attempt > 1 THEN (SELECT host FROM attempts prev
        WHERE prev.run_id = runs.id AND prev.attempt = runs.attempt - 1) END AS prev_host,
    CASE WHEN runs.attempt > 1 THEN (SELECT pid FROM attempts prev
        WHERE prev.run_id = runs.id AND prev.attempt = runs.attempt - 1
        AND (prev.error = 'lost' OR prev.finished_at IS NULL)) END AS prev_lost_pid
"""
INSERT_ATTEMPT = """
INSERT INTO attempts (run_id, attempt, started_at, daemon_id, host) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (run_id, attempt) DO UPDATE SET started_at = excluded.started_at,
    daemon_id = excluded.daemon_id, host = excluded.host, finished_at = NULL,
    exit_code = NULL, error = NULL, output = NULL, output_bytes = 0, pid = NULL,
    cpu_user = NULL, cpu_system = NULL, max_rss = NULL
"""
# fenced: the pid lands only while the attempt holds its lease
SET_ATTEMPT_PID = """
UPDATE attempts SET pid = ?1 WHERE run_id = ?2 AND attempt = ?3
AND EXISTS (SELECT 1 FROM runs WHERE id = ?2 AND attempt = ?3 AND state = 'leased'
            AND leased_by = ?4)
"""

# ---------------------------------------------------------------------------- finishes

# one UPDATE, fenced, with the cancel check inside: no read first
FINISH_RUN = """
UPDATE runs SET
    state = CASE WHEN cancel_requested = 1 AND :if_cancelled IS NOT NULL
                 THEN :if_cancelled ELSE :state END,
    last_error = CASE WHEN cancel_requested = 1 AND :if_cancelled IS NOT NULL
                      THEN 'cancelled' ELSE :error END,
    exit_code = :exit_code,
    max_attempts = max_attempts + :uncounted,
    not_before = CASE WHEN :state IN ('failed', 'pending') THEN :retry_at ELSE not_before END,
    finished_at = CASE WHEN :state IN ('failed', 'pending') AND NOT (cancel_requested = 1
                       AND :if_cancelled IS NOT NULL) THEN finished_at ELSE :now END,
    leased_by = NULL, lease_until = NULL
WHERE id = :run_id AND attempt = :attempt AND state = 'leased' AND leased_by = :me
"""
#: a finish whose state a cancel request may change says what it wrote
FINISH_RUN_RETURNING_STATE = FINISH_RUN + "RETURNING state\n"
#: the common end, a success that counts and that no cancel request changes: what
#: FINISH_RUN writes then, with the same fence, and a third of its parameters to bind
FINISH_SUCCEEDED = """
UPDATE runs SET state = 'succeeded', last_error = NULL, exit_code = :exit_code,
    finished_at = :now, leased_by = NULL, lease_until = NULL
WHERE id = :run_id AND attempt = :attempt AND state = 'leased' AND leased_by = :me
"""
FINISH_ATTEMPT = """
UPDATE attempts SET finished_at = :now, exit_code = :exit_code, error = :error,
    output = :output, output_bytes = :total, pid = COALESCE(:pid, pid),
    cpu_user = :cpu_user, cpu_system = :cpu_system, max_rss = :max_rss
WHERE run_id = :run_id AND attempt = :attempt
"""
