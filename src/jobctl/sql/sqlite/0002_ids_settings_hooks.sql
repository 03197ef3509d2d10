-- Version 2: ids are never reused (AUTOINCREMENT), a run always has its settings, the
-- current set of attempts has a base (retry-dead), the on-failure hook's result, and the
-- boot id of each daemon. SQLite cannot change a primary key in place: each table is
-- moved aside and copied into its new form. The runner turns foreign keys off around
-- this script (PRAGMA foreign_keys is a no-op inside a transaction) and checks them after.
PRAGMA legacy_alter_table = ON;
ALTER TABLE jobs RENAME TO jobs_v1;
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
    updated_at INTEGER NOT NULL
);
INSERT INTO jobs (id, name, description, trigger_kind, trigger_expr, trigger_tz, every_seconds, anchor_at, once_at, after_completion, command, stdin, env, cwd, shell, state, catchup, catchup_limit, overlap, timeout_seconds, retries, backoff_seconds, priority, jitter_seconds, on_failure, locks, schedule_from, next_run_at, last_window_at, missed_total, last_boot_id, created_at, updated_at)
SELECT id, name, description, trigger_kind, trigger_expr, trigger_tz, every_seconds, anchor_at, once_at, after_completion, command, stdin, env, cwd, shell, state, catchup, catchup_limit, overlap, timeout_seconds, retries, backoff_seconds, priority, jitter_seconds, on_failure, locks, schedule_from, next_run_at, last_window_at, missed_total, last_boot_id, created_at, updated_at FROM jobs_v1;
ALTER TABLE runs RENAME TO runs_v1;
DROP INDEX runs_job_key;
DROP INDEX runs_claimable;
DROP INDEX runs_queue;
DROP INDEX runs_job_state;
DROP INDEX runs_finished;
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    scheduled_for INTEGER NOT NULL,
    state TEXT NOT NULL
        CHECK (state IN ('pending', 'leased', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
    skip_reason TEXT CHECK (skip_reason IN ('missed', 'overlap')),
    reason TEXT NOT NULL CHECK (reason IN ('schedule', 'catchup', 'manual')),
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
SELECT id, job_id, scheduled_for, state, skip_reason, reason, catchup_from, attempt, max_attempts, not_before, priority, leased_by, lease_until, lease_host, pgid, cancel_requested, started_at, finished_at, exit_code, last_error, run_key, env, COALESCE(settings, (SELECT json_object('command', j.command, 'shell', j.shell, 'cwd', j.cwd, 'env', json(j.env), 'stdin', j.stdin, 'timeout_seconds', j.timeout_seconds, 'backoff_seconds', j.backoff_seconds, 'on_failure', j.on_failure) FROM jobs j WHERE j.id = runs_v1.job_id)), 0, NULL, created_at
FROM runs_v1;
ALTER TABLE run_locks RENAME TO run_locks_v1;
DROP INDEX run_locks_name;
CREATE TABLE run_locks (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
INSERT INTO run_locks (run_id, name)
SELECT run_id, name FROM run_locks_v1;
ALTER TABLE attempts RENAME TO attempts_v1;
CREATE TABLE attempts (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    finished_at INTEGER,
    exit_code INTEGER,
    error TEXT,
    output BLOB,
    output_bytes INTEGER NOT NULL DEFAULT 0,
    daemon_id TEXT,
    host TEXT,
    pid INTEGER,
    PRIMARY KEY (run_id, attempt)
);
INSERT INTO attempts (run_id, attempt, started_at, finished_at, exit_code, error, output, output_bytes, daemon_id, host, pid)
SELECT run_id, attempt, started_at, finished_at, exit_code, error, output, output_bytes, daemon_id, host, pid FROM attempts_v1;
DROP TABLE attempts_v1;
DROP TABLE run_locks_v1;
DROP TABLE runs_v1;
DROP TABLE jobs_v1;
CREATE INDEX jobs_next_run ON jobs (next_run_at) WHERE state = 'active';
CREATE INDEX jobs_updated ON jobs (updated_at);
CREATE UNIQUE INDEX runs_job_key ON runs (job_id, run_key) WHERE run_key IS NOT NULL;
CREATE INDEX runs_claimable ON runs (state, not_before);
CREATE INDEX runs_queue ON runs (priority DESC, scheduled_for, id)
    WHERE state IN ('pending', 'failed');
CREATE INDEX runs_job_state ON runs (job_id, state);
CREATE INDEX runs_finished ON runs (finished_at);
CREATE INDEX run_locks_name ON run_locks (name);
-- daemons re-register at their next renewal: the table starts empty in its new form
DROP TABLE daemons;
CREATE TABLE daemons (
    id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    wake_address TEXT,
    boot_id TEXT
);
PRAGMA legacy_alter_table = OFF;
