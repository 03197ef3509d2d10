-- The whole current schema of a jobctl database (user_version 2).
-- Migrations in this folder (NNNN_*.sql) applied in order to an empty file must give
-- exactly this schema; tests/test_store.py checks it.
-- Times are INTEGER microseconds since the Unix epoch, UTC. Durations are REAL seconds.

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

CREATE INDEX jobs_next_run ON jobs (next_run_at) WHERE state = 'active';
CREATE INDEX jobs_updated ON jobs (updated_at);

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

CREATE UNIQUE INDEX runs_job_key ON runs (job_id, run_key) WHERE run_key IS NOT NULL;
CREATE INDEX runs_claimable ON runs (state, not_before);
CREATE INDEX runs_queue ON runs (priority DESC, scheduled_for, id)
    WHERE state IN ('pending', 'failed');
CREATE INDEX runs_job_state ON runs (job_id, state);

CREATE TABLE run_locks (
    run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);

CREATE INDEX run_locks_name ON run_locks (name);

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

CREATE TABLE scheduler_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT,
    expires_at INTEGER NOT NULL DEFAULT 0
);
