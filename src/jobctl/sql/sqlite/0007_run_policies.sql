-- 0007: run policies and what a run costs (see README, Run policies and what a run costs).
-- Jobs may follow another job (trigger_kind 'after') and queue one window (overlap
-- 'queue'), and gain --deadline, --pause-after-failures (with why a job is paused),
-- --max-running, --ok-exit, --no-retry-exit and the limits; a run keeps the instant its
-- deadline passes; an attempt keeps what the kernel counted for it, and every job's CPU
-- is tallied apart from the rows. SQLite cannot change a CHECK in place: jobs is copied
-- into its new form (the runner turns foreign keys off around this script and checks
-- them after); its trigger goes with the old table and is made again.
PRAGMA legacy_alter_table = ON;
ALTER TABLE jobs RENAME TO jobs_v6;
DROP INDEX jobs_next_run;
DROP INDEX jobs_updated;
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    description TEXT,
    trigger_kind TEXT NOT NULL
        CHECK (trigger_kind IN ('cron', 'interval', 'once', 'reboot', 'manual', 'after')),
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
);
INSERT INTO jobs (id, name, description, trigger_kind, trigger_expr, trigger_tz, every_seconds, anchor_at, once_at, after_completion, command, stdin, env, cwd, shell, state, catchup, catchup_limit, overlap, timeout_seconds, retries, backoff_seconds, priority, jitter_seconds, on_failure, locks, schedule_from, next_run_at, last_window_at, missed_total, last_boot_id, created_at, updated_at, keep_runs, keep_for_seconds, notify, grace_seconds, warn_after_seconds, revision)
SELECT id, name, description, trigger_kind, trigger_expr, trigger_tz, every_seconds, anchor_at, once_at, after_completion, command, stdin, env, cwd, shell, state, catchup, catchup_limit, overlap, timeout_seconds, retries, backoff_seconds, priority, jitter_seconds, on_failure, locks, schedule_from, next_run_at, last_window_at, missed_total, last_boot_id, created_at, updated_at, keep_runs, keep_for_seconds, notify, grace_seconds, warn_after_seconds, revision FROM jobs_v6;
DROP TABLE jobs_v6;
PRAGMA legacy_alter_table = OFF;

CREATE INDEX jobs_next_run ON jobs (next_run_at) WHERE state = 'active';
CREATE INDEX jobs_updated ON jobs (updated_at);

ALTER TABLE runs ADD COLUMN deadline_at INTEGER;
CREATE INDEX runs_deadline ON runs (deadline_at) WHERE deadline_at IS NOT NULL;

ALTER TABLE attempts ADD COLUMN cpu_user REAL;
ALTER TABLE attempts ADD COLUMN cpu_system REAL;
ALTER TABLE attempts ADD COLUMN max_rss INTEGER;

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

CREATE TRIGGER jobs_tally_delete AFTER DELETE ON jobs
BEGIN
    DELETE FROM run_tallies WHERE job_id = OLD.id;
    DELETE FROM duration_tallies WHERE job_id = OLD.id;
    DELETE FROM cpu_tallies WHERE job_id = OLD.id;
END;
