-- The whole current schema of a jobctl database (user_version 14).
-- Migrations in this folder (NNNN_*.sql) applied in order to an empty file must give
-- exactly this schema; tests/test_store.py checks it.
-- Times are INTEGER microseconds since the Unix epoch, UTC. Durations are REAL seconds.
-- runs.job_revision, added by ALTER TABLE, sits where SQLite
-- writes it, on the line of the column before it.

CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    description TEXT,
    trigger_kind TEXT NOT NULL
        CHECK (trigger_kind IN ('cron', 'interval', 'once', 'reboot', 'manual', 'after', 'set')),
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
    overlap TEXT NOT NULL DEFAULT 'forbid'
        CHECK (overlap IN ('forbid', 'allow', 'replace', 'queue')),
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
    keep_for_seconds REAL,
    -- notifications (see jobctl(1), jobctl notify): [{channel, events}], and when a run is late or long
    notify TEXT NOT NULL DEFAULT '[]',
    grace_seconds REAL,
    warn_after_seconds REAL,
    -- the number of its last revision (see jobctl(1), jobctl history)
    revision INTEGER NOT NULL DEFAULT 0,
    -- run policies (see README, Run policies and what a run costs) and limits (see README, Run policies and what a run costs, a JSON object of the set ones)
    deadline_seconds REAL,
    pause_after_failures INTEGER CHECK (pause_after_failures >= 1),
    max_running INTEGER CHECK (max_running >= 1),
    ok_exit TEXT NOT NULL DEFAULT '[]',
    no_retry_exit TEXT NOT NULL DEFAULT '[]',
    limits TEXT NOT NULL DEFAULT '{}',
    paused_reason TEXT CHECK (paused_reason IN ('user', 'failures'))
, secrets TEXT NOT NULL DEFAULT '{}', env_file TEXT, active_from INTEGER, active_until INTEGER, excepts TEXT NOT NULL DEFAULT '[]', except_calendars TEXT NOT NULL DEFAULT '[]', except_dates TEXT NOT NULL DEFAULT '[]', on_tags TEXT NOT NULL DEFAULT '[]', ping_key TEXT, anchor_phase_only INTEGER NOT NULL DEFAULT 0 CHECK (anchor_phase_only IN (0, 1)));
-- (secrets and env_file as ALTER TABLE ADD COLUMN leaves them, migration 0010: a job's
-- {ENV: secret name} and the environment file read at each attempt, issue 42; the
-- schedule sets' columns after them, migration 0011; on_tags, migration 0012: the tags a
-- daemon must carry to claim the job's runs; ping_key, migration 0014: a watched job's
-- key, README "Watching jobs that jobctl does not run", NULL for a job jobctl runs;
-- anchor_phase_only, migration 0015: 1 when a fixed rate's anchor is the instant it was set
-- without --start, which only sets the phase and is no window)

CREATE INDEX jobs_next_run ON jobs (next_run_at) WHERE state = 'active';
CREATE INDEX jobs_updated ON jobs (updated_at);
-- periodic looks through an index (0013): --after jobs, and the jobs with a --keep-for
CREATE INDEX jobs_after ON jobs (id) WHERE trigger_kind = 'after' AND state = 'active';
CREATE INDEX jobs_keep_for ON jobs (id) WHERE keep_for_seconds IS NOT NULL;
CREATE UNIQUE INDEX jobs_ping_key ON jobs (ping_key) WHERE ping_key IS NOT NULL;

CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    scheduled_for INTEGER NOT NULL,
    state TEXT NOT NULL
        CHECK (state = 'pending' OR state = 'leased' OR state = 'succeeded' OR state = 'failed'
            OR state = 'dead' OR state = 'cancelled' OR state = 'skipped'),
    skip_reason TEXT CHECK (skip_reason = 'missed' OR skip_reason = 'overlap'
        OR skip_reason = 'deadline' OR skip_reason = 'maintenance' OR skip_reason = 'excluded'),
    reason TEXT NOT NULL
        CHECK (reason = 'schedule' OR reason = 'catchup' OR reason = 'manual' OR reason = 'backfill'
            OR reason = 'after' OR reason = 'watch'),
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
    created_at INTEGER NOT NULL, job_revision INTEGER, deadline_at INTEGER,
    UNIQUE (job_id, scheduled_for)
);
-- (deadline_at as ALTER TABLE ADD COLUMN leaves it, migration 0007: the instant after which
-- a run that has not started is skipped, see README, Run policies and what a run costs --deadline; cleared by its first claim)

CREATE UNIQUE INDEX runs_job_key ON runs (job_id, run_key) WHERE run_key IS NOT NULL;
CREATE INDEX runs_claimable ON runs (state, not_before);
CREATE INDEX runs_queue ON runs (priority DESC, scheduled_for, id)
    WHERE state IN ('pending', 'failed');
CREATE INDEX runs_job_state ON runs (job_id, state, scheduled_for);
-- the listings of see README, History: what is kept, what failed, what never ran (runs, runs --state, --since), newest window first
CREATE INDEX runs_window ON runs (scheduled_for, id);
CREATE INDEX runs_state_window ON runs (state, scheduled_for, id);
CREATE INDEX runs_deadline ON runs (deadline_at) WHERE deadline_at IS NOT NULL;

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
    pid INTEGER, cpu_user REAL, cpu_system REAL, max_rss INTEGER,
    PRIMARY KEY (run_id, attempt)
);
-- (the last three as ALTER TABLE ADD COLUMN leaves them, migration 0007: what the kernel
-- counted for the attempt, see README, Run policies and what a run costs: CPU seconds in user and system mode, the largest
-- resident set in bytes)

CREATE TABLE daemons (
    id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    wake_address TEXT,
    boot_id TEXT
, workers INTEGER, reserved INTEGER NOT NULL DEFAULT 0, reserved_priority INTEGER, tags TEXT NOT NULL DEFAULT '[]');

CREATE TABLE scheduler_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT,
    expires_at INTEGER NOT NULL DEFAULT 0
);

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

CREATE TRIGGER runs_tally_insert AFTER INSERT ON runs
WHEN (NEW.state = 'succeeded' OR NEW.state = 'dead' OR NEW.state = 'cancelled' OR NEW.state = 'skipped')
BEGIN
    INSERT INTO run_tallies (job_id, state, ended, kept) VALUES (NEW.job_id, NEW.state, 1, 1)
    ON CONFLICT (job_id, state) DO UPDATE SET ended = ended + 1, kept = kept + 1;
END;

CREATE TRIGGER runs_tally_enter AFTER UPDATE OF state ON runs
WHEN (NEW.state = 'succeeded' OR NEW.state = 'dead' OR NEW.state = 'cancelled' OR NEW.state = 'skipped') AND NEW.state IS NOT OLD.state
BEGIN
    INSERT INTO run_tallies (job_id, state, ended, kept) VALUES (NEW.job_id, NEW.state, 1, 1)
    ON CONFLICT (job_id, state) DO UPDATE SET ended = ended + 1, kept = kept + 1;
END;

CREATE TRIGGER runs_tally_leave AFTER UPDATE OF state ON runs
WHEN (OLD.state = 'succeeded' OR OLD.state = 'dead' OR OLD.state = 'cancelled' OR OLD.state = 'skipped') AND NEW.state IS NOT OLD.state
BEGIN
    UPDATE run_tallies SET kept = kept - 1 WHERE job_id = OLD.job_id AND state = OLD.state;
END;

CREATE TRIGGER runs_tally_delete AFTER DELETE ON runs
WHEN (OLD.state = 'succeeded' OR OLD.state = 'dead' OR OLD.state = 'cancelled' OR OLD.state = 'skipped')
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
    DELETE FROM cpu_tallies WHERE job_id = OLD.id;
END;

-- cpu_tallies: per job, the CPU (user + system, microseconds) of every finished attempt
-- (jobctl_run_cpu_seconds_total, see README, Run policies and what a run costs), kept apart from the rows as the others are.
CREATE TABLE cpu_tallies (
    job_id INTEGER PRIMARY KEY,
    cpu_us INTEGER NOT NULL
);

CREATE TRIGGER attempts_cpu_finish AFTER UPDATE OF finished_at ON attempts
WHEN OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL AND NEW.cpu_user IS NOT NULL
BEGIN
    INSERT INTO cpu_tallies (job_id, cpu_us)
    SELECT runs.job_id, CAST(ROUND((NEW.cpu_user + COALESCE(NEW.cpu_system, 0)) * 1e6) AS INTEGER)
    FROM runs WHERE runs.id = NEW.run_id
    ON CONFLICT (job_id) DO UPDATE SET cpu_us = cpu_us + excluded.cpu_us;
END;

-- notifications (see jobctl(1), jobctl notify): channels, the outbox, and the sent/failed counters
CREATE TABLE channels (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('webhook', 'email', 'command')),
    target TEXT NOT NULL,
    headers TEXT NOT NULL DEFAULT '[]',
    smtp TEXT,
    default_events TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);

CREATE TABLE notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    channel TEXT NOT NULL,
    cause TEXT NOT NULL,
    event TEXT NOT NULL CHECK (event IN ('failed', 'dead', 'succeeded', 'recovered', 'missed',
        'late', 'long', 'anomaly', 'paused')),
    job_id INTEGER,
    job_name TEXT,
    run_id INTEGER,
    attempt INTEGER,
    text TEXT NOT NULL,
    detail TEXT,
    state TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'sent', 'failed', 'dropped')),
    tries INTEGER NOT NULL DEFAULT 0,
    next_try_at INTEGER NOT NULL,
    leased_by TEXT,
    lease_until INTEGER,
    created_at INTEGER NOT NULL,
    sent_at INTEGER,
    ended_at INTEGER,
    last_error TEXT,
    UNIQUE (cause, channel)
);

CREATE INDEX notifications_due ON notifications (next_try_at) WHERE state = 'pending';
CREATE INDEX notifications_run ON notifications (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX notifications_job ON notifications (job_id, id);
CREATE INDEX notifications_ended ON notifications (state, ended_at);

CREATE TABLE notification_counts (
    channel TEXT NOT NULL,
    event TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('sent', 'failed')),
    n INTEGER NOT NULL,
    PRIMARY KEY (channel, event, state)
);

-- Every change to a job (see jobctl(1), jobctl history): its number, when, who (USER@HOST, api, daemon), from
-- where, {KEY: [old, new]} and the job's table of the job file after it (JSON).
CREATE TABLE job_revisions (
    job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    revision INTEGER NOT NULL,
    at INTEGER NOT NULL,
    who TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('cli', 'apply', 'import', 'api', 'daemon')),
    changes TEXT NOT NULL,
    definition TEXT NOT NULL,
    PRIMARY KEY (job_id, revision)
);

-- Each job's newest run (by window) among those now succeeded, dead or cancelled
-- (issue 35), kept by the triggers below in the transaction that changes a run, so the
-- dashboard's overview reads every job's last run state without a look at its runs.
CREATE TABLE last_ends (
    job_id INTEGER PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    run_id INTEGER NOT NULL,
    scheduled_for INTEGER NOT NULL,
    state TEXT NOT NULL
);

CREATE TRIGGER runs_last_end_insert AFTER INSERT ON runs
WHEN (NEW.state = 'succeeded' OR NEW.state = 'dead' OR NEW.state = 'cancelled')
BEGIN
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    VALUES (NEW.job_id, NEW.id, NEW.scheduled_for, NEW.state)
    ON CONFLICT (job_id) DO UPDATE SET run_id = excluded.run_id,
        scheduled_for = excluded.scheduled_for, state = excluded.state
    WHERE excluded.scheduled_for >= last_ends.scheduled_for;
END;

CREATE TRIGGER runs_last_end_enter AFTER UPDATE OF state ON runs
WHEN (NEW.state = 'succeeded' OR NEW.state = 'dead' OR NEW.state = 'cancelled') AND NEW.state IS NOT OLD.state
BEGIN
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    VALUES (NEW.job_id, NEW.id, NEW.scheduled_for, NEW.state)
    ON CONFLICT (job_id) DO UPDATE SET run_id = excluded.run_id,
        scheduled_for = excluded.scheduled_for, state = excluded.state
    WHERE excluded.scheduled_for >= last_ends.scheduled_for;
END;

-- the run kept there left those states, or went: the newest of the job's that is still
-- in one takes its place (none: the row goes)
CREATE TRIGGER runs_last_end_leave AFTER UPDATE OF state ON runs
WHEN (OLD.state = 'succeeded' OR OLD.state = 'dead' OR OLD.state = 'cancelled') AND NEW.state IS NOT OLD.state
    AND OLD.id = (SELECT run_id FROM last_ends WHERE job_id = OLD.job_id)
BEGIN
    DELETE FROM last_ends WHERE job_id = OLD.job_id;
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    SELECT job_id, id, scheduled_for, state FROM runs
    WHERE job_id = OLD.job_id AND state IN ('succeeded', 'dead', 'cancelled')
        AND EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id)
    ORDER BY scheduled_for DESC LIMIT 1;
END;

CREATE TRIGGER runs_last_end_delete AFTER DELETE ON runs
WHEN (OLD.state = 'succeeded' OR OLD.state = 'dead' OR OLD.state = 'cancelled')
    AND OLD.id = (SELECT run_id FROM last_ends WHERE job_id = OLD.job_id)
BEGIN
    DELETE FROM last_ends WHERE job_id = OLD.job_id;
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    SELECT job_id, id, scheduled_for, state FROM runs
    WHERE job_id = OLD.job_id AND state IN ('succeeded', 'dead', 'cancelled')
        AND EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id)
    ORDER BY scheduled_for DESC LIMIT 1;
END;

-- Secrets (issue 42): a job's attempts get their values, read when each starts; no job,
-- run, revision or export holds a value.
CREATE TABLE secrets (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    updated_at INTEGER NOT NULL
);

-- API tokens with roles (issue 42): the SHA-256 of a token's text, never the text.
CREATE TABLE api_tokens (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL CHECK (role IN ('read', 'operate', 'admin')),
    sha256 TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    last_used_at INTEGER
);

-- named calendars of dates (schedule sets): a job's --except-calendar
CREATE TABLE calendars (
    name TEXT PRIMARY KEY,
    -- ISO dates, sorted, as a JSON array
    dates TEXT NOT NULL DEFAULT '[]'
);

-- maintenance windows (jobctl pause --all): in force from since until until_at, or until
-- ended_at when resume --all ends it first
CREATE TABLE maintenance (
    id INTEGER PRIMARY KEY,
    since INTEGER NOT NULL,
    until_at INTEGER,
    ended_at INTEGER,
    reason TEXT,
    who TEXT
);
