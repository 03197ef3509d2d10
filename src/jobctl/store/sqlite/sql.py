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

# a run with its job's name, its locks, and its last attempt's start, end and host
RUN_SELECT = QUERIES.run_select
RUN_BY_ID = QUERIES.run_by_id
JOB_BY_ID = "SELECT * FROM jobs WHERE id = ?"
INSERT_RUN_LOCK = QUERIES.insert_run_lock

# ---------------------------------------------------------------------------- daemons

DELETE_EXPIRED_DAEMONS = "DELETE FROM daemons WHERE expires_at < ?"
UPSERT_DAEMON = """
INSERT INTO daemons (id, pid, host, boot_id, started_at, heartbeat_at, expires_at, wake_address,
    workers, reserved, reserved_priority, tags)
VALUES (:id, :pid, :host, :boot_id, :now, :now, :until, :wake, :workers, :reserved, :rp, :tags)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at,
    expires_at = excluded.expires_at
"""
DELETE_DAEMON = "DELETE FROM daemons WHERE id = ?"
WAKE_ADDRESSES = "SELECT wake_address FROM daemons WHERE wake_address IS NOT NULL"
LOCAL_DAEMONS = (
    "SELECT id, pid FROM daemons WHERE host = ? AND boot_id = ? AND expires_at >= ? AND id != ?"
)
EXPIRE_LEADER_OF = "UPDATE scheduler_lease SET expires_at = 0 WHERE holder = ?"
EXPIRE_LEASES_OF = "UPDATE runs SET lease_until = 0 WHERE state = 'leased' AND leased_by = ?"
RENEW_DAEMON = "UPDATE daemons SET heartbeat_at = ?, expires_at = ? WHERE id = ?"
ENSURE_LEADER_ROW = (
    "INSERT INTO scheduler_lease (id, holder, expires_at) VALUES (1, NULL, 0) "
    "ON CONFLICT (id) DO NOTHING"
)
TAKE_LEADER = """
UPDATE scheduler_lease SET holder = :me, expires_at = :until
WHERE id = 1 AND (holder = :me OR holder IS NULL OR expires_at < :now)
"""
RELEASE_LEADER = "UPDATE scheduler_lease SET holder = NULL, expires_at = 0 WHERE holder = ?"
LEADER_LEASE = "SELECT holder, expires_at FROM scheduler_lease WHERE id = 1"
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
REBOOT_JOBS = "SELECT * FROM jobs WHERE state = 'active' AND trigger_kind = 'reboot'"
DATA_VERSION = "PRAGMA data_version"
JOBS_CHANGED_SINCE = (
    "SELECT id, CASE WHEN state = 'active' THEN next_run_at END FROM jobs WHERE updated_at >= ?"
)
ACTIVE_JOB_AT = "SELECT * FROM jobs WHERE id = ? AND state = 'active' AND next_run_at = ?"
# the due jobs of one firing chunk in one read, each with whether a run of it is leased;
# the caller keeps those whose next_run_at is still the due time (compare-and-set)
FIRE_JOBS = """
SELECT jobs.*, EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id
                       AND runs.state = 'leased') AS has_leased,
    jobs.overlap = 'queue' AND EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id
                       AND runs.state IN ('pending', 'failed')) AS has_waiting
FROM jobs WHERE state = 'active' AND id IN ({marks})
"""
# the windows of one chunk in one statement: (job_id, scheduled_for) of those inserted
INSERT_RUNS = """
INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, catchup_from, attempt,
    max_attempts, not_before, priority, run_key, env, settings, created_at, finished_at,
    job_revision, deadline_at)
VALUES {values}
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id, job_id, scheduled_for
"""
INSERT_RUNS_ROW = "(?, ?, ?, ?, ?, ?, 0, ?, ?, ?, NULL, '{}', ?, ?, ?, ?, ?)"
INSERT_RUNS_ROW_PARAMS = 14
REPLACE_LEASED = "UPDATE runs SET cancel_requested = 1 WHERE job_id = ? AND state = 'leased'"
# keyed/manual runs and the rows this same turn inserts stay
REPLACE_WAITING = """
UPDATE runs SET state = 'cancelled', finished_at = :now, last_error = 'replaced'
WHERE job_id = :job_id AND state IN ('pending', 'failed') AND reason != 'manual'
AND created_at < :now
"""
TRIM_MISSED = """
DELETE FROM runs WHERE job_id = :job_id AND state = 'skipped' AND skip_reason = 'missed'
AND id NOT IN (SELECT id FROM runs WHERE job_id = :job_id AND state = 'skipped'
               AND skip_reason = 'missed' ORDER BY scheduled_for DESC LIMIT :keep)
"""
MOVE_SCHEDULE = """
UPDATE jobs SET next_run_at = :next, last_window_at = COALESCE(:last, last_window_at),
    missed_total = missed_total + :missed, state = :state,
    last_boot_id = COALESCE(:boot_id, last_boot_id)
WHERE id = :job_id
"""
IDLE_FIXED_DELAY = """
SELECT jobs.*, (SELECT MAX(COALESCE(finished_at, scheduled_for)) FROM runs
                WHERE runs.job_id = jobs.id) AS ended_at
FROM jobs
WHERE state = 'active' AND trigger_kind = 'interval' AND after_completion = 1
  AND next_run_at IS NULL {only}
  AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id
                  AND runs.state IN ('pending', 'leased', 'failed'))
"""
SET_NEXT_RUN = """
UPDATE jobs SET next_run_at = :next, updated_at = :now
WHERE id = :job_id AND state = 'active' AND next_run_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.job_id = jobs.id
                  AND runs.state IN ('pending', 'leased', 'failed'))
"""

# ---------------------------------------------------------------------------- claims

# the next run due, or the next open run past its --deadline (a claim skips it: 1 ms after
# the deadline, which is passed once it is behind); only open runs keep a deadline_at
NEXT_NOT_BEFORE = """
SELECT MIN(t) FROM (
    SELECT MIN(not_before) AS t FROM runs WHERE state IN ('pending', 'failed') AND not_before > ?1
    UNION ALL
    SELECT MIN(deadline_at) + 1000 FROM runs WHERE deadline_at IS NOT NULL AND deadline_at >= ?1
    UNION ALL
    -- a maintenance window that ends by itself (--until): the claim may start again then
    SELECT MIN(until_at) FROM maintenance WHERE ended_at IS NULL AND until_at > ?1
)"""
# the maintenance windows that hold windows from :since on (pause --all)
MAINTENANCE_SINCE = """
SELECT since, COALESCE(ended_at, until_at) AS ends FROM maintenance
WHERE since <= :now AND (COALESCE(ended_at, until_at) IS NULL
    OR COALESCE(ended_at, until_at) > :since) ORDER BY since
"""
NEXT_LEASE_EXPIRY = (
    "SELECT MIN(lease_until) FROM runs WHERE state = 'leased' AND leased_by != ? "
    "AND lease_until > ?"
)
HELD_BY = "SELECT id, attempt, cancel_requested FROM runs WHERE state = 'leased' AND leased_by = ?"
# our own leases are renewed (fenced) by the heartbeat, never taken back here
EXPIRED_LEASES = """
SELECT id, job_id, attempt, max_attempts, cancel_requested FROM runs
WHERE state = 'leased' AND lease_until < ? AND leased_by != ?
"""
ATTEMPT_LOST = """
UPDATE attempts SET finished_at = ?, error = 'lost'
WHERE run_id = ? AND attempt = ? AND finished_at IS NULL
"""
SETTLE_EXPIRED = """
UPDATE runs SET state = :state, last_error = :error, leased_by = NULL, lease_until = NULL,
    not_before = CASE WHEN :state = 'failed' THEN :now ELSE not_before END,
    finished_at = CASE WHEN :state IN ('dead', 'cancelled') THEN :now ELSE finished_at END
WHERE id = :run_id AND state = 'leased'
"""

#: SPEC §14 --deadline, decided where a run would start: the runs not started by their
#: deadline are skipped (``deadline``) by the claim, in its transaction, before it picks.
#: Through runs_deadline (only runs with a deadline): the planner would otherwise walk
#: every pending run on each claim (O(n²) in a burst)
SKIP_PAST_DEADLINE = """
UPDATE runs INDEXED BY runs_deadline
SET state = 'skipped', skip_reason = 'deadline', finished_at = :now, deadline_at = NULL
WHERE deadline_at IS NOT NULL AND deadline_at < :now AND state IN ('pending', 'failed')
RETURNING id, job_id, scheduled_for
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
SAVE_OUTPUT = """
UPDATE attempts SET output = :output, output_bytes = :total
WHERE run_id = :run_id AND attempt = :attempt AND finished_at IS NULL
  AND EXISTS (SELECT 1 FROM runs WHERE id = :run_id AND attempt = :attempt
              AND state = 'leased' AND leased_by = :me)
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
RECORD_HOOK = "UPDATE runs SET hook_status = ? WHERE id = ?"
