-- 0004: history that stays fast and bounded (see README, History: what is kept, what failed, what never ran).
-- Jobs gain retention (keep_runs, default 1000 for every existing job, keep_for_seconds);
-- runs may have reason 'backfill' (and 'after', skip_reason 'deadline', see README, Run policies and what a run costs, so
-- that issue needs no second copy of the table); indexes serve every listing without a
-- scan of all runs; the counters move out of the rows into tallies, seeded from the rows
-- there are. SQLite cannot change a CHECK in place: jobs and runs are copied into their
-- new form (the runner turns foreign keys off around this script and checks them after).
PRAGMA legacy_alter_table = ON;
ALTER TABLE jobs RENAME TO jobs_v3;
DROP INDEX jobs_next_run;
DROP INDEX jobs_updated;
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    description TEXT,
    trigger_kind TEXT NOT NULL
        CHECK (trigger_kind IN ('cron', 'interval', 'once', 'reboot', 'manual')),
    trigger_expr TEXT,
    trigger_tz TEXT NOT NULL,
    every_seconds REAL,
    anchor_at INTEGER,
    once_at INTEGER,
    after_completion INTEGER NOT NULL DEFAULT 0 CHECK (after_completion IN (0, 1)),
    command TEXT NOT NULL,
    stdin TEXT,
    env TEXT NOT NULL DEFAULT '{}',
    cwd TEXT,
    shell TEXT NOT NULL DEFAULT '/bin/sh',
    state TEXT NOT NULL DEFAULT 'active'
        CHECK (state IN ('active', 'paused', 'cancelled', 'done')),
    catchup TEXT NOT NULL DEFAULT 'once' CHECK (catchup IN ('skip', 'once', 'all')),
    catchup_limit INTEGER NOT NULL DEFAULT 6 CHECK (catchup_limit >= 1),
    overlap TEXT NOT NULL DEFAULT 'forbid' CHECK (overlap IN ('forbid', 'allow', 'replace')),
    timeout_seconds REAL,
    retries INTEGER NOT NULL DEFAULT 2 CHECK (retries >= 0),
    backoff_seconds REAL NOT NULL DEFAULT 10,
    priority INTEGER NOT NULL DEFAULT 0,
    jitter_seconds REAL NOT NULL DEFAULT 0,
    on_failure TEXT,
    locks TEXT NOT NULL DEFAULT '[]',
    schedule_from INTEGER NOT NULL,
    next_run_at INTEGER,
    last_window_at INTEGER,
    missed_total INTEGER NOT NULL DEFAULT 0,
    last_boot_id TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    -- retention (see README, History: what is kept, what failed, what never ran): finished runs kept, and for how long (NULL: no age limit)
    keep_runs INTEGER NOT NULL DEFAULT 1000 CHECK (keep_runs >= 0),
    keep_for_seconds REAL
);
INSERT INTO jobs (id, name, description, trigger_kind, trigger_expr, trigger_tz, every_seconds, anchor_at, once_at, after_completion, command, stdin, env, cwd, shell, state, catchup, catchup_limit, overlap, timeout_seconds, retries, backoff_seconds, priority, jitter_seconds, on_failure, locks, schedule_from, next_run_at, last_window_at, missed_total, last_boot_id, created_at, updated_at)
SELECT id, name, description, trigger_kind, trigger_expr, trigger_tz, every_seconds, anchor_at, once_at, after_completion, command, stdin, env, cwd, shell, state, catchup, catchup_limit, overlap, timeout_seconds, retries, backoff_seconds, priority, jitter_seconds, on_failure, locks, schedule_from, next_run_at, last_window_at, missed_total, last_boot_id, created_at, updated_at FROM jobs_v3;
ALTER TABLE runs RENAME TO runs_v3;
DROP INDEX runs_job_key;
DROP INDEX runs_claimable;
DROP INDEX runs_queue;
DROP INDEX runs_job_state;
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    scheduled_for INTEGER NOT NULL,
    state TEXT NOT NULL
        CHECK (state IN ('pending', 'leased', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
    skip_reason TEXT CHECK (skip_reason IN ('missed', 'overlap', 'deadline')),
    reason TEXT NOT NULL
        CHECK (reason IN ('schedule', 'catchup', 'manual', 'backfill', 'after')),
    catchup_from INTEGER,
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 3,
    not_before INTEGER,
    priority INTEGER NOT NULL DEFAULT 0,
    leased_by TEXT,
    lease_until INTEGER,
    lease_host TEXT,
    pgid INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    started_at INTEGER,
    finished_at INTEGER,
    exit_code INTEGER,
    last_error TEXT,
    run_key TEXT,
    env TEXT NOT NULL DEFAULT '{}',
    settings TEXT NOT NULL,
    attempt_base INTEGER NOT NULL DEFAULT 0,
    hook_status TEXT,
    created_at INTEGER NOT NULL,
    UNIQUE (job_id, scheduled_for)
);
INSERT INTO runs (id, job_id, scheduled_for, state, skip_reason, reason, catchup_from, attempt, max_attempts, not_before, priority, leased_by, lease_until, lease_host, pgid, cancel_requested, started_at, finished_at, exit_code, last_error, run_key, env, settings, attempt_base, hook_status, created_at)
SELECT id, job_id, scheduled_for, state, skip_reason, reason, catchup_from, attempt, max_attempts, not_before, priority, leased_by, lease_until, lease_host, pgid, cancel_requested, started_at, finished_at, exit_code, last_error, run_key, env, settings, attempt_base, hook_status, created_at FROM runs_v3;
DROP TABLE runs_v3;
DROP TABLE jobs_v3;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX jobs_next_run ON jobs (next_run_at) WHERE state = 'active';
CREATE INDEX jobs_updated ON jobs (updated_at);
CREATE UNIQUE INDEX runs_job_key ON runs (job_id, run_key) WHERE run_key IS NOT NULL;
CREATE INDEX runs_claimable ON runs (state, not_before);
CREATE INDEX runs_queue ON runs (priority DESC, scheduled_for, id)
    WHERE state IN ('pending', 'failed');
CREATE INDEX runs_job_state ON runs (job_id, state, scheduled_for);
-- the listings of see README, History: what is kept, what failed, what never ran (runs, runs --state, --since), newest window first
CREATE INDEX runs_window ON runs (scheduled_for, id);
CREATE INDEX runs_state_window ON runs (state, scheduled_for, id);
-- Counters kept apart from the rows (see README, History: what is kept, what failed, what never ran): retention and prune delete runs and
-- attempts, never these, so jobctl_runs_finished_total and jobctl_run_duration_seconds
-- never go down. Kept by the triggers below, whatever statement changes a run.
-- run_tallies: per job and finished state, the runs that ever entered it (ended) and
-- the rows in it now (kept: what the jobctl_runs gauge and status count).
CREATE TABLE run_tallies (
    job_id INTEGER NOT NULL,
    state TEXT NOT NULL,
    ended INTEGER NOT NULL,
    kept INTEGER NOT NULL,
    PRIMARY KEY (job_id, state)
) WITHOUT ROWID;

-- duration_tallies: per job, the finished attempts by histogram bucket (the first of
-- web/metrics.py's DURATION_BUCKETS_SECONDS at or above the duration; 12 is +Inf), and
-- the sum of their durations in microseconds.
CREATE TABLE duration_tallies (
    job_id INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    n INTEGER NOT NULL,
    us INTEGER NOT NULL,
    PRIMARY KEY (job_id, bucket)
) WITHOUT ROWID;

INSERT INTO run_tallies (job_id, state, ended, kept)
SELECT job_id, state, COUNT(*), COUNT(*) FROM runs WHERE state IN ('succeeded', 'dead', 'cancelled', 'skipped') GROUP BY job_id, state;
INSERT INTO duration_tallies (job_id, bucket, n, us)
SELECT runs.job_id, CASE
        WHEN a.finished_at - a.started_at <= 100000 THEN 0
        WHEN a.finished_at - a.started_at <= 500000 THEN 1
        WHEN a.finished_at - a.started_at <= 1000000 THEN 2
        WHEN a.finished_at - a.started_at <= 5000000 THEN 3
        WHEN a.finished_at - a.started_at <= 10000000 THEN 4
        WHEN a.finished_at - a.started_at <= 30000000 THEN 5
        WHEN a.finished_at - a.started_at <= 60000000 THEN 6
        WHEN a.finished_at - a.started_at <= 300000000 THEN 7
        WHEN a.finished_at - a.started_at <= 900000000 THEN 8
        WHEN a.finished_at - a.started_at <= 1800000000 THEN 9
        WHEN a.finished_at - a.started_at <= 3600000000 THEN 10
        WHEN a.finished_at - a.started_at <= 14400000000 THEN 11
        ELSE 12 END AS bucket,
    COUNT(*), SUM(a.finished_at - a.started_at)
FROM attempts a JOIN runs ON runs.id = a.run_id
WHERE a.finished_at IS NOT NULL GROUP BY runs.job_id, bucket;

CREATE TRIGGER runs_tally_insert AFTER INSERT ON runs
WHEN NEW.state IN ('succeeded', 'dead', 'cancelled', 'skipped')
BEGIN
    INSERT INTO run_tallies (job_id, state, ended, kept) VALUES (NEW.job_id, NEW.state, 1, 1)
    ON CONFLICT (job_id, state) DO UPDATE SET ended = ended + 1, kept = kept + 1;
END;

CREATE TRIGGER runs_tally_enter AFTER UPDATE OF state ON runs
WHEN NEW.state IN ('succeeded', 'dead', 'cancelled', 'skipped') AND NEW.state IS NOT OLD.state
BEGIN
    INSERT INTO run_tallies (job_id, state, ended, kept) VALUES (NEW.job_id, NEW.state, 1, 1)
    ON CONFLICT (job_id, state) DO UPDATE SET ended = ended + 1, kept = kept + 1;
END;

CREATE TRIGGER runs_tally_leave AFTER UPDATE OF state ON runs
WHEN OLD.state IN ('succeeded', 'dead', 'cancelled', 'skipped') AND NEW.state IS NOT OLD.state
BEGIN
    UPDATE run_tallies SET kept = kept - 1 WHERE job_id = OLD.job_id AND state = OLD.state;
END;

CREATE TRIGGER runs_tally_delete AFTER DELETE ON runs
WHEN OLD.state IN ('succeeded', 'dead', 'cancelled', 'skipped')
BEGIN
    UPDATE run_tallies SET kept = kept - 1 WHERE job_id = OLD.job_id AND state = OLD.state;
END;

CREATE TRIGGER attempts_tally_finish AFTER UPDATE OF finished_at ON attempts
WHEN OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL
BEGIN
    INSERT INTO duration_tallies (job_id, bucket, n, us)
    SELECT runs.job_id, CASE
        WHEN NEW.finished_at - NEW.started_at <= 100000 THEN 0
        WHEN NEW.finished_at - NEW.started_at <= 500000 THEN 1
        WHEN NEW.finished_at - NEW.started_at <= 1000000 THEN 2
        WHEN NEW.finished_at - NEW.started_at <= 5000000 THEN 3
        WHEN NEW.finished_at - NEW.started_at <= 10000000 THEN 4
        WHEN NEW.finished_at - NEW.started_at <= 30000000 THEN 5
        WHEN NEW.finished_at - NEW.started_at <= 60000000 THEN 6
        WHEN NEW.finished_at - NEW.started_at <= 300000000 THEN 7
        WHEN NEW.finished_at - NEW.started_at <= 900000000 THEN 8
        WHEN NEW.finished_at - NEW.started_at <= 1800000000 THEN 9
        WHEN NEW.finished_at - NEW.started_at <= 3600000000 THEN 10
        WHEN NEW.finished_at - NEW.started_at <= 14400000000 THEN 11
        ELSE 12 END, 1,
        NEW.finished_at - NEW.started_at
    FROM runs WHERE runs.id = NEW.run_id
    ON CONFLICT (job_id, bucket) DO UPDATE SET n = n + 1, us = us + excluded.us;
END;

CREATE TRIGGER attempts_tally_insert AFTER INSERT ON attempts
WHEN NEW.finished_at IS NOT NULL
BEGIN
    INSERT INTO duration_tallies (job_id, bucket, n, us)
    SELECT runs.job_id, CASE
        WHEN NEW.finished_at - NEW.started_at <= 100000 THEN 0
        WHEN NEW.finished_at - NEW.started_at <= 500000 THEN 1
        WHEN NEW.finished_at - NEW.started_at <= 1000000 THEN 2
        WHEN NEW.finished_at - NEW.started_at <= 5000000 THEN 3
        WHEN NEW.finished_at - NEW.started_at <= 10000000 THEN 4
        WHEN NEW.finished_at - NEW.started_at <= 30000000 THEN 5
        WHEN NEW.finished_at - NEW.started_at <= 60000000 THEN 6
        WHEN NEW.finished_at - NEW.started_at <= 300000000 THEN 7
        WHEN NEW.finished_at - NEW.started_at <= 900000000 THEN 8
        WHEN NEW.finished_at - NEW.started_at <= 1800000000 THEN 9
        WHEN NEW.finished_at - NEW.started_at <= 3600000000 THEN 10
        WHEN NEW.finished_at - NEW.started_at <= 14400000000 THEN 11
        ELSE 12 END, 1,
        NEW.finished_at - NEW.started_at
    FROM runs WHERE runs.id = NEW.run_id
    ON CONFLICT (job_id, bucket) DO UPDATE SET n = n + 1, us = us + excluded.us;
END;

CREATE TRIGGER jobs_tally_delete AFTER DELETE ON jobs
BEGIN
    DELETE FROM run_tallies WHERE job_id = OLD.id;
    DELETE FROM duration_tallies WHERE job_id = OLD.id;
END;
