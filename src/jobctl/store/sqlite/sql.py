"""Every SQL statement of the SQLite store, by name. Nothing else in jobctl holds SQL text.

Named parameters (``:now``) where a statement takes more than two; times are integer
microseconds since the epoch.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------- reads

# a run with its job's name, its locks, and its last attempt's start, end and host
RUN_SELECT = """
SELECT runs.*, jobs.name AS job_name,
       (SELECT group_concat(name, char(10)) FROM run_locks
        WHERE run_locks.run_id = runs.id) AS lock_list,
       la.started_at AS attempt_started_at, la.finished_at AS attempt_finished_at,
       la.host AS attempt_host
FROM runs JOIN jobs ON jobs.id = runs.job_id
LEFT JOIN attempts la ON la.run_id = runs.id AND la.attempt = runs.attempt
"""
RUN_BY_ID = RUN_SELECT + " WHERE runs.id = ?"

JOB_BY_NAME = "SELECT * FROM jobs WHERE name = ?"
JOB_BY_ID = "SELECT * FROM jobs WHERE id = ?"
JOB_ID_BY_NAME = "SELECT id FROM jobs WHERE name = ?"
JOBS_ALL = "SELECT * FROM jobs ORDER BY name"
JOB_NAMES = "SELECT name FROM jobs ORDER BY name"
LAST_RUNS = (
    RUN_SELECT
    + """
WHERE runs.id IN (
    SELECT MAX(id) FROM runs WHERE state != 'skipped' {only} GROUP BY job_id
)"""
)
LIST_RUNS = RUN_SELECT + " {where} ORDER BY runs.scheduled_for DESC, runs.id DESC LIMIT ?"
ATTEMPTS_OF_RUN = "SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt"
LAST_ATTEMPT = "SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt DESC LIMIT 1"
ONE_ATTEMPT = "SELECT * FROM attempts WHERE run_id = ? AND attempt = ?"
RUN_EXISTS = "SELECT state FROM runs WHERE id = ?"
RUN_BY_KEY = "SELECT id FROM runs WHERE job_id = ? AND run_key = ?"
WINDOW_TAKEN = "SELECT 1 FROM runs WHERE job_id = ? AND scheduled_for = ?"
LEASED_OF_JOB = "SELECT COUNT(*) FROM runs WHERE job_id = ? AND state = 'leased'"
OPEN_RUN_IDS_OF_JOB = (
    "SELECT id FROM runs WHERE job_id = ? AND state IN ('pending', 'failed', 'leased')"
)
# windows the scheduler recorded ahead of their time (scheduler.FIRE_AHEAD_SECONDS) that
# have not come yet: a pause, an edit or a cancel of their job takes them back
WITHDRAW_EARLY_RUNS = """
DELETE FROM runs WHERE job_id = ? AND state = 'pending' AND attempt = 0
    AND reason = 'schedule' AND scheduled_for > ?
RETURNING scheduled_for
"""
DEAD_IDS_OF_JOB = "SELECT id FROM runs WHERE job_id = ? AND state = 'dead'"
DEAD_IDS = "SELECT id FROM runs WHERE state = 'dead'"
COUNTS_BY_STATE = "SELECT state, COUNT(*) FROM runs GROUP BY state"
NEXT_WINDOW = "SELECT MIN(next_run_at) FROM jobs WHERE state = 'active'"
NEXT_DUE_RUN = "SELECT MIN(not_before) FROM runs WHERE state IN ('pending', 'failed')"
COUNT_JOBS = "SELECT COUNT(*) FROM jobs"
COUNT_RUNS = "SELECT COUNT(*) FROM runs"

# ---------------------------------------------------------------------------- jobs

INSERT_JOB = "INSERT INTO jobs ({names}) VALUES ({marks})"
UPDATE_JOB = "UPDATE jobs SET {sets} WHERE id = ?"
PAUSE_JOB = "UPDATE jobs SET state = 'paused', next_run_at = NULL, updated_at = ? WHERE id = ?"
RESUME_JOB = (
    "UPDATE jobs SET state = 'active', schedule_from = ?, next_run_at = ?, updated_at = ? "
    "WHERE id = ?"
)
CANCEL_JOB = "UPDATE jobs SET state = 'cancelled', next_run_at = NULL, updated_at = ? WHERE id = ?"
DELETE_JOB = "DELETE FROM jobs WHERE id = ?"

# ---------------------------------------------------------------------------- runs

INSERT_RUN = """
INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, catchup_from, attempt,
    max_attempts, not_before, priority, run_key, env, settings, created_at, finished_at)
VALUES (:job_id, :scheduled_for, :state, :skip_reason, :reason, :catchup_from, 0,
    :max_attempts, :not_before, :priority, :run_key, :env, :settings, :now, :finished_at)
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id
"""
INSERT_RUN_LOCK = "INSERT INTO run_locks (run_id, name) VALUES (?, ?)"
CANCEL_WAITING_RUN = """
UPDATE runs SET state = 'cancelled', finished_at = ?, last_error = COALESCE(last_error, 'cancelled')
WHERE id = ? AND state IN ('pending', 'failed')
"""
REQUEST_CANCEL = "UPDATE runs SET cancel_requested = 1 WHERE id = ? AND state = 'leased'"
RETRY_DEAD = """
UPDATE runs SET state = 'pending', attempt_base = attempt,
    max_attempts = attempt + (SELECT retries + 1 FROM jobs WHERE jobs.id = runs.job_id),
    not_before = ?, finished_at = NULL, leased_by = NULL, lease_until = NULL,
    cancel_requested = 0, hook_status = NULL
WHERE id = ?
"""
PRUNE = """
DELETE FROM runs WHERE state IN ('succeeded', 'dead', 'cancelled', 'skipped')
AND COALESCE(finished_at, scheduled_for) < ?
"""

# ---------------------------------------------------------------------------- daemons

DELETE_EXPIRED_DAEMONS = "DELETE FROM daemons WHERE expires_at < ?"
UPSERT_DAEMON = """
INSERT INTO daemons (id, pid, host, boot_id, started_at, heartbeat_at, expires_at, wake_address)
VALUES (:id, :pid, :host, :boot_id, :now, :now, :until, :wake)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at,
    expires_at = excluded.expires_at
"""
DELETE_DAEMON = "DELETE FROM daemons WHERE id = ?"
LIVE_DAEMONS = """
SELECT d.*, (SELECT holder FROM scheduler_lease WHERE id = 1 AND expires_at >= :now) AS leader
FROM daemons d WHERE d.expires_at >= :now ORDER BY d.started_at
"""
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
                       AND runs.state = 'leased') AS has_leased
FROM jobs WHERE state = 'active' AND id IN ({marks})
"""
# the windows of one chunk in one statement: (job_id, scheduled_for) of those inserted
INSERT_RUNS = """
INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, catchup_from, attempt,
    max_attempts, not_before, priority, run_key, env, settings, created_at, finished_at)
VALUES {values}
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id, job_id, scheduled_for
"""
INSERT_RUNS_ROW = "(?, ?, ?, ?, ?, ?, 0, ?, ?, ?, NULL, '{}', ?, ?, ?)"
INSERT_RUNS_ROW_PARAMS = 12
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

NEXT_NOT_BEFORE = (
    "SELECT MIN(not_before) FROM runs WHERE state IN ('pending', 'failed') AND not_before > ?"
)
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

# The claim's rules (SPEC §5, §9), one named piece each, over the row ``runs`` (and, in
# the job pieces, its job ``j``). CLAIMABLE and WAITING are both built from these, so
# ``inspect`` can never say a run is free while the claim passes it by, nor the reverse.
RUN_OPEN = "runs.state IN ('pending', 'failed')"
RUN_DUE = "runs.not_before <= :now"
# another run holding one of this run's locks: leased, and sharing a lock name
LOCK_HOLDERS = """
    FROM run_locks mine
    JOIN run_locks other ON other.name = mine.name AND other.run_id != mine.run_id
    JOIN runs holder ON holder.id = other.run_id
    WHERE mine.run_id = runs.id AND holder.state = 'leased'
"""
LOCKS_FREE = f"NOT EXISTS (SELECT 1 {LOCK_HOLDERS})"
JOB_PAUSED = "j.state = 'paused'"
OVERLAP_GUARDED = "j.overlap IN ('forbid', 'replace')"
# another leased run of the same job
OVERLAP_HOLDERS = """
    FROM runs sib WHERE sib.job_id = runs.job_id AND sib.id != runs.id AND sib.state = 'leased'
"""
JOB_FREE = f"""NOT EXISTS (
        SELECT 1 FROM jobs j WHERE j.id = runs.job_id AND (
            {JOB_PAUSED}
            OR ({OVERLAP_GUARDED} AND EXISTS (SELECT 1 {OVERLAP_HOLDERS})))
    )"""
# the reserved-worker quota: runs of priority < :rp only while :low_ok (per daemon)
WITHIN_QUOTA = "(:low_ok OR runs.priority >= :rp)"

# Claim the single best claimable run: due, pending or failed, none of its locks held by a
# leased run, its job not paused, and (forbid/replace) no other run of its job leased.
CLAIMABLE = f"""
    {RUN_OPEN} AND {RUN_DUE} AND {WITHIN_QUOTA}
    AND {LOCKS_FREE}
    AND {JOB_FREE}
"""

# Why one run waits: each piece of the claim's condition on its own, the condition whole
# (without the per-daemon quota), and what blocks it (the first lock by name and its
# holder, the lowest leased sibling), with the live daemons and leased runs.
WAITING = f"""
SELECT runs.state, runs.not_before, j.name AS job_name,
    {RUN_DUE} AS due,
    {JOB_PAUSED} AS paused,
    (SELECT other.name {LOCK_HOLDERS} ORDER BY other.name, holder.id LIMIT 1) AS lock_name,
    (SELECT holder.id {LOCK_HOLDERS} ORDER BY other.name, holder.id LIMIT 1) AS lock_holder,
    CASE WHEN {OVERLAP_GUARDED}
         THEN (SELECT sib.id {OVERLAP_HOLDERS} ORDER BY sib.id LIMIT 1) END AS overlap_run,
    ({RUN_OPEN} AND {RUN_DUE} AND {LOCKS_FREE} AND {JOB_FREE}) AS claimable,
    (SELECT COUNT(*) FROM daemons WHERE expires_at >= :now) AS live_daemons,
    (SELECT COUNT(*) FROM runs r2 WHERE r2.state = 'leased') AS leased_runs
FROM runs JOIN jobs j ON j.id = runs.job_id
WHERE runs.id = :run_id
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
    lease_host = :host
WHERE id = (
    SELECT id FROM runs INDEXED BY runs_queue WHERE {CLAIMABLE}
    ORDER BY priority DESC, scheduled_for ASC, id ASC LIMIT 1
)
RETURNING *, (SELECT name FROM jobs WHERE jobs.id = runs.job_id) AS job_name,
    (SELECT group_concat(name, char(10)) FROM run_locks
     WHERE run_locks.run_id = runs.id) AS lock_list,
    :now AS attempt_started_at, NULL AS attempt_finished_at, :host AS attempt_host,
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
    exit_code = NULL, error = NULL, output = NULL, output_bytes = 0, pid = NULL
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
    output = :output, output_bytes = :total, pid = COALESCE(:pid, pid)
WHERE run_id = :run_id AND attempt = :attempt
"""
RECORD_HOOK = "UPDATE runs SET hook_status = ? WHERE id = ?"


# ---------------------------------------------------------------------- used by jobctl serve
# used by jobctl serve: the dashboard's run strips and the /metrics scrape

JOB_IDS = "SELECT id FROM jobs ORDER BY id"
#: one job's newest runs, off the UNIQUE (job_id, scheduled_for) index
RECENT_RUNS_OF_JOB = RUN_SELECT + " WHERE runs.job_id = ? ORDER BY runs.scheduled_for DESC LIMIT ?"
RUN_COUNTS_BY_JOB = (
    "SELECT jobs.name, jobs.missed_total, c.state, COALESCE(c.n, 0) FROM jobs "
    "LEFT JOIN (SELECT job_id, state, COUNT(*) AS n FROM runs GROUP BY job_id, state) c "
    "ON c.job_id = jobs.id ORDER BY jobs.name, c.state"
)
#: {buckets}: one ``SUM(a.finished_at - a.started_at <= US),`` per upper bound
ATTEMPT_DURATION_HISTOGRAM = (
    "SELECT jobs.name, {buckets} COUNT(*), SUM(a.finished_at - a.started_at) FROM attempts a "
    "JOIN runs ON runs.id = a.run_id JOIN jobs ON jobs.id = runs.job_id "
    "WHERE a.finished_at IS NOT NULL GROUP BY jobs.id ORDER BY jobs.name"
)
