-- The whole current schema of a jobctl database on PostgreSQL (jobctl.schema_version 14).
-- The numbered migrations beside this file (NNNN_*.sql), applied in order to an empty
-- database, must give exactly this schema; tests/test_postgresql.py checks it.
-- Everything lives in the schema "jobctl". Times are BIGINT microseconds since the Unix
-- epoch, UTC; durations DOUBLE PRECISION seconds; ids BIGINT identities (never reused);
-- names that are listed in order use COLLATE "C" so they sort as on SQLite.

CREATE SCHEMA IF NOT EXISTS jobctl;

CREATE TABLE jobctl.schema_version (
    version INTEGER NOT NULL
);

CREATE UNIQUE INDEX schema_version_one_row ON jobctl.schema_version ((true));

CREATE TABLE jobctl.jobs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name TEXT COLLATE "C" NOT NULL UNIQUE,
    description TEXT,
    trigger_kind TEXT NOT NULL
        CHECK (trigger_kind IN ('cron', 'interval', 'once', 'reboot', 'manual', 'after', 'set')),
    trigger_expr TEXT,
    trigger_tz TEXT NOT NULL,
    every_seconds DOUBLE PRECISION,
    anchor_at BIGINT,
    once_at BIGINT,
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
    timeout_seconds DOUBLE PRECISION,
    retries INTEGER NOT NULL DEFAULT 2 CHECK (retries >= 0),
    backoff_seconds DOUBLE PRECISION NOT NULL DEFAULT 10,
    priority BIGINT NOT NULL DEFAULT 0,
    jitter_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    on_failure TEXT,
    locks TEXT NOT NULL DEFAULT '[]',
    schedule_from BIGINT NOT NULL,
    next_run_at BIGINT,
    last_window_at BIGINT,
    missed_total BIGINT NOT NULL DEFAULT 0,
    last_boot_id TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    -- retention (see README, History: what is kept, what failed, what never ran): finished runs kept, and for how long (NULL: no age limit)
    keep_runs BIGINT NOT NULL DEFAULT 1000 CHECK (keep_runs >= 0),
    keep_for_seconds DOUBLE PRECISION,
    -- notifications (see jobctl(1), jobctl notify): [{channel, events}], and when a run is late or long
    notify TEXT NOT NULL DEFAULT '[]',
    grace_seconds DOUBLE PRECISION,
    warn_after_seconds DOUBLE PRECISION,
    -- the number of its last revision (see jobctl(1), jobctl history)
    revision BIGINT NOT NULL DEFAULT 0,
    -- run policies (see README, Run policies and what a run costs) and limits (see README, Run policies and what a run costs, a JSON object of the set ones)
    deadline_seconds DOUBLE PRECISION,
    pause_after_failures BIGINT CHECK (pause_after_failures >= 1),
    max_running BIGINT CHECK (max_running >= 1),
    ok_exit TEXT NOT NULL DEFAULT '[]',
    no_retry_exit TEXT NOT NULL DEFAULT '[]',
    limits TEXT NOT NULL DEFAULT '{}',
    paused_reason TEXT CHECK (paused_reason IN ('user', 'failures')),
    -- secrets (issue 42): {ENV: secret name} and an environment file read at each attempt
    secrets TEXT NOT NULL DEFAULT '{}',
    env_file TEXT,
    -- schedule sets: the active range, exclusions, and the dates of the calendars named
    active_from BIGINT,
    active_until BIGINT,
    excepts TEXT NOT NULL DEFAULT '[]',
    except_calendars TEXT NOT NULL DEFAULT '[]',
    except_dates TEXT NOT NULL DEFAULT '[]',
    -- --on: the tags a daemon must carry to claim the job's runs (a sorted JSON array)
    on_tags TEXT NOT NULL DEFAULT '[]',
    -- a watched job's key (README "Watching jobs that jobctl does not run"); NULL for a
    -- job jobctl runs
    ping_key TEXT,
    -- 1 when a fixed rate's anchor is the instant it was set without --start: it only sets
    -- the phase and is no window
    anchor_phase_only INTEGER NOT NULL DEFAULT 0 CHECK (anchor_phase_only IN (0, 1))
);

CREATE INDEX jobs_next_run ON jobctl.jobs (next_run_at) WHERE state = 'active';
CREATE INDEX jobs_updated ON jobctl.jobs (updated_at);
-- periodic looks through an index (0011): --after jobs, and the jobs with a --keep-for
CREATE INDEX jobs_after ON jobctl.jobs (id) WHERE trigger_kind = 'after' AND state = 'active';
CREATE INDEX jobs_keep_for ON jobctl.jobs (id) WHERE keep_for_seconds IS NOT NULL;
CREATE UNIQUE INDEX jobs_ping_key ON jobctl.jobs (ping_key) WHERE ping_key IS NOT NULL;

CREATE TABLE jobctl.runs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id BIGINT NOT NULL REFERENCES jobctl.jobs (id) ON DELETE CASCADE,
    scheduled_for BIGINT NOT NULL,
    state TEXT NOT NULL
        CHECK (state IN ('pending', 'leased', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped')),
    skip_reason TEXT CHECK (skip_reason IN ('missed', 'overlap', 'deadline', 'excluded', 'maintenance')),
    reason TEXT NOT NULL
        CHECK (reason IN ('schedule', 'catchup', 'manual', 'backfill', 'after', 'watch')),
    catchup_from BIGINT,
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 3,
    not_before BIGINT,
    priority BIGINT NOT NULL DEFAULT 0,
    leased_by TEXT,
    lease_until BIGINT,
    lease_host TEXT,
    pgid INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    -- set by each claim from the job's overlap: the run excludes its siblings while leased
    exclusive BOOLEAN NOT NULL DEFAULT false,
    started_at BIGINT,
    finished_at BIGINT,
    exit_code INTEGER,
    last_error TEXT,
    run_key TEXT,
    env TEXT NOT NULL DEFAULT '{}',
    settings TEXT NOT NULL,
    -- the attempt number the current set of attempts counts from (retry-dead moves it)
    attempt_base INTEGER NOT NULL DEFAULT 0,
    -- how the --on-failure command ended
    hook_status TEXT,
    created_at BIGINT NOT NULL,
    -- the revision of its job when it was created (see jobctl(1), jobctl history)
    job_revision BIGINT,
    UNIQUE (job_id, scheduled_for),
    -- the instant after which a run that has not started is skipped (see README, Run policies and what a run costs --deadline;
    -- cleared by its first claim)
    deadline_at BIGINT,
    -- --max-running: which of the job's N places a leased run holds
    slot INTEGER
);

CREATE UNIQUE INDEX runs_job_key ON jobctl.runs (job_id, run_key) WHERE run_key IS NOT NULL;
CREATE INDEX runs_claimable ON jobctl.runs (state, not_before);
CREATE INDEX runs_queue ON jobctl.runs (priority DESC, scheduled_for, id)
    WHERE state IN ('pending', 'failed');
CREATE INDEX runs_job_state ON jobctl.runs (job_id, state, scheduled_for);
-- the listings of see README, History: what is kept, what failed, what never ran (runs, runs --state, --since), newest window first
CREATE INDEX runs_window ON jobctl.runs (scheduled_for, id);
CREATE INDEX runs_state_window ON jobctl.runs (state, scheduled_for, id);
CREATE INDEX runs_finished ON jobctl.runs (finished_at);
-- overlap forbid/replace, enforced by the database: one leased exclusive run per job
CREATE UNIQUE INDEX runs_one_leased_exclusive ON jobctl.runs (job_id)
    WHERE state = 'leased' AND exclusive;
-- --max-running N, enforced by the database: each leased run holds one of N places
CREATE UNIQUE INDEX runs_one_leased_slot ON jobctl.runs (job_id, slot)
    WHERE state = 'leased' AND slot IS NOT NULL;
CREATE INDEX runs_deadline ON jobctl.runs (deadline_at) WHERE deadline_at IS NOT NULL;

CREATE TABLE jobctl.run_locks (
    run_id BIGINT NOT NULL REFERENCES jobctl.runs (id) ON DELETE CASCADE,
    name TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, name)
);

CREATE INDEX run_locks_name ON jobctl.run_locks (name);

-- --lock, enforced by the database: a lock name is held by at most one leased run
CREATE TABLE jobctl.held_locks (
    name TEXT COLLATE "C" PRIMARY KEY,
    run_id BIGINT NOT NULL REFERENCES jobctl.runs (id) ON DELETE CASCADE
);

CREATE INDEX held_locks_run ON jobctl.held_locks (run_id);

CREATE FUNCTION jobctl.release_held_locks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM jobctl.held_locks WHERE run_id = OLD.id;
    RETURN NULL;
END
$$;

-- a run that leaves its lease (finished, lost, cancelled, retried) frees its locks with it
CREATE TRIGGER runs_release_locks AFTER UPDATE OF state, attempt ON jobctl.runs
    FOR EACH ROW WHEN (OLD.state = 'leased' AND (NEW.state <> 'leased' OR NEW.attempt <> OLD.attempt)
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.release_held_locks();

CREATE TABLE jobctl.attempts (
    run_id BIGINT NOT NULL REFERENCES jobctl.runs (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    started_at BIGINT NOT NULL,
    finished_at BIGINT,
    exit_code INTEGER,
    error TEXT,
    output BYTEA,
    output_bytes BIGINT NOT NULL DEFAULT 0,
    daemon_id TEXT,
    host TEXT,
    pid INTEGER,
    PRIMARY KEY (run_id, attempt),
    -- what the kernel counted for the attempt (see README, Run policies and what a run costs)
    cpu_user DOUBLE PRECISION,
    cpu_system DOUBLE PRECISION,
    max_rss BIGINT
);

CREATE TABLE jobctl.daemons (
    id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    boot_id TEXT,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    wake_address TEXT,
    workers INTEGER,
    reserved INTEGER NOT NULL DEFAULT 0,
    reserved_priority BIGINT,
    -- --tag and host:HOSTNAME (a sorted JSON array)
    tags TEXT NOT NULL DEFAULT '[]'
);

CREATE TABLE jobctl.scheduler_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT,
    expires_at BIGINT NOT NULL DEFAULT 0,
    -- counts the changes of holder: a leader knows it was replaced when the term moved on
    term BIGINT NOT NULL DEFAULT 0
);

-- Counters kept apart from the rows (see README, History: what is kept, what failed, what never ran): retention and prune delete runs and
-- attempts, never these, so jobctl_runs_finished_total and jobctl_run_duration_seconds
-- never go down. The triggers below append one row of deltas per change (no row is
-- ever updated, so concurrent daemons never wait on each other for a counter); readers
-- sum them, and the scheduler-lease holder folds them together now and then.
-- A daemon's turn records its ends in one statement that appends their tallies, moves
-- last_ends and frees their held locks itself (set-wise, store/postgresql/driver.py
-- FINISH_RUNS), with jobctl.ends_tallied 'on' for that statement: the row triggers that
-- do the same for every other writer stand aside while it is.
-- run_tallies: per job and finished state, the runs that entered it (ended) and the
-- rows in it now (kept: what the jobctl_runs gauge and status count).
CREATE TABLE jobctl.run_tallies (
    job_id BIGINT NOT NULL,
    state TEXT NOT NULL,
    ended BIGINT NOT NULL,
    kept BIGINT NOT NULL
);

CREATE INDEX run_tallies_job ON jobctl.run_tallies (job_id, state);

-- duration_tallies: per job, the finished attempts by histogram bucket (the first of
-- web/metrics.py's DURATION_BUCKETS_SECONDS at or above the duration; 12 is +Inf), and
-- the sum of their durations in microseconds.
CREATE TABLE jobctl.duration_tallies (
    job_id BIGINT NOT NULL,
    bucket INTEGER NOT NULL,
    n BIGINT NOT NULL,
    us BIGINT NOT NULL
);

CREATE INDEX duration_tallies_job ON jobctl.duration_tallies (job_id, bucket);

CREATE FUNCTION jobctl.tally_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND NOT EXISTS (SELECT 1 FROM jobctl.jobs WHERE id = OLD.job_id) THEN
        RETURN NULL;  -- the job itself is deleted: jobs_tally_delete forgets its tallies
    END IF;
    IF TG_OP <> 'INSERT' AND OLD.state IN ('succeeded', 'dead', 'cancelled', 'skipped') THEN
        INSERT INTO jobctl.run_tallies VALUES (OLD.job_id, OLD.state, 0, -1);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state IN ('succeeded', 'dead', 'cancelled', 'skipped') THEN
        INSERT INTO jobctl.run_tallies VALUES (NEW.job_id, NEW.state, 1, 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_tally_insert AFTER INSERT ON jobctl.runs
    FOR EACH ROW WHEN (NEW.state IN ('succeeded', 'dead', 'cancelled', 'skipped'))
    EXECUTE FUNCTION jobctl.tally_runs();

CREATE TRIGGER runs_tally_update AFTER UPDATE OF state ON jobctl.runs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
        AND (OLD.state IN ('succeeded', 'dead', 'cancelled', 'skipped') OR NEW.state IN ('succeeded', 'dead', 'cancelled', 'skipped'))
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.tally_runs();

CREATE TRIGGER runs_tally_delete AFTER DELETE ON jobctl.runs
    FOR EACH ROW WHEN (OLD.state IN ('succeeded', 'dead', 'cancelled', 'skipped'))
    EXECUTE FUNCTION jobctl.tally_runs();

CREATE FUNCTION jobctl.tally_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobctl.duration_tallies
    SELECT runs.job_id,
        CASE
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
            ELSE 12 END,
        1, NEW.finished_at - NEW.started_at
    FROM jobctl.runs WHERE runs.id = NEW.run_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER attempts_tally_insert AFTER INSERT ON jobctl.attempts
    FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION jobctl.tally_attempts();

CREATE TRIGGER attempts_tally_finish AFTER UPDATE OF finished_at ON jobctl.attempts
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.tally_attempts();

CREATE FUNCTION jobctl.forget_tallies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM jobctl.run_tallies WHERE job_id = OLD.id;
    DELETE FROM jobctl.duration_tallies WHERE job_id = OLD.id;
    DELETE FROM jobctl.cpu_tallies WHERE job_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_tally_delete AFTER DELETE ON jobctl.jobs
    FOR EACH ROW EXECUTE FUNCTION jobctl.forget_tallies();

-- cpu_tallies: per job, the CPU (user + system, microseconds) of finished attempts
-- (jobctl_run_cpu_seconds_total, see README, Run policies and what a run costs), one row of deltas per attempt as the other
-- tallies; readers sum them.
CREATE TABLE jobctl.cpu_tallies (
    job_id BIGINT NOT NULL,
    cpu_us BIGINT NOT NULL
);

CREATE INDEX cpu_tallies_job ON jobctl.cpu_tallies (job_id);

CREATE FUNCTION jobctl.tally_cpu() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO jobctl.cpu_tallies
    SELECT runs.job_id, round((NEW.cpu_user + coalesce(NEW.cpu_system, 0)) * 1e6)::BIGINT
    FROM jobctl.runs WHERE runs.id = NEW.run_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER attempts_cpu_finish AFTER UPDATE OF finished_at ON jobctl.attempts
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL
        AND NEW.cpu_user IS NOT NULL
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.tally_cpu();

-- notifications (see jobctl(1), jobctl notify): channels, the outbox, and the sent/failed counters
CREATE TABLE jobctl.channels (
    name TEXT COLLATE "C" PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('webhook', 'email', 'command')),
    target TEXT NOT NULL,
    headers TEXT NOT NULL DEFAULT '[]',
    smtp TEXT,
    default_events TEXT NOT NULL DEFAULT '',
    created_at BIGINT NOT NULL
);

CREATE TABLE jobctl.notifications (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    channel TEXT NOT NULL,
    cause TEXT NOT NULL,
    event TEXT NOT NULL CHECK (event IN ('failed', 'dead', 'succeeded', 'recovered', 'missed',
        'late', 'long', 'anomaly', 'paused')),
    job_id BIGINT,
    job_name TEXT,
    run_id BIGINT,
    attempt INTEGER,
    text TEXT NOT NULL,
    detail TEXT,
    state TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'sent', 'failed', 'dropped')),
    tries INTEGER NOT NULL DEFAULT 0,
    next_try_at BIGINT NOT NULL,
    leased_by TEXT,
    lease_until BIGINT,
    created_at BIGINT NOT NULL,
    sent_at BIGINT,
    ended_at BIGINT,
    last_error TEXT,
    UNIQUE (cause, channel)
);

CREATE INDEX notifications_due ON jobctl.notifications (next_try_at) WHERE state = 'pending';
CREATE INDEX notifications_run ON jobctl.notifications (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX notifications_job ON jobctl.notifications (job_id, id);
CREATE INDEX notifications_ended ON jobctl.notifications (state, ended_at);

CREATE TABLE jobctl.notification_counts (
    channel TEXT NOT NULL,
    event TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('sent', 'failed')),
    n BIGINT NOT NULL,
    PRIMARY KEY (channel, event, state)
);

-- Every change to a job (see jobctl(1), jobctl history): its number, when, who (USER@HOST, api, daemon), from
-- where, {KEY: [old, new]} and the job's table of the job file after it (JSON).
CREATE TABLE jobctl.job_revisions (
    job_id BIGINT NOT NULL REFERENCES jobctl.jobs (id) ON DELETE CASCADE,
    revision BIGINT NOT NULL,
    at BIGINT NOT NULL,
    who TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('cli', 'apply', 'import', 'api', 'daemon')),
    changes TEXT NOT NULL,
    definition TEXT NOT NULL,
    PRIMARY KEY (job_id, revision)
);

-- Each job's newest run (by window) among those now succeeded, dead or cancelled
-- (issue 35), kept by the trigger below in the transaction that changes a run, so the
-- dashboard's overview reads every job's last run state without a look at its runs.
-- One row a job, updated by the end of one of its runs: only runs of the same job wait on
-- each other for it.
CREATE TABLE jobctl.last_ends (
    job_id BIGINT PRIMARY KEY REFERENCES jobctl.jobs (id) ON DELETE CASCADE,
    run_id BIGINT NOT NULL,
    scheduled_for BIGINT NOT NULL,
    state TEXT NOT NULL
);

-- a run that enters those states takes the row when its window is the newest; when the
-- run kept there leaves them, or goes, the newest of the job's still in one takes its place
CREATE FUNCTION jobctl.keep_last_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.state IN ('succeeded', 'dead', 'cancelled') THEN
        DELETE FROM jobctl.last_ends WHERE job_id = OLD.job_id AND run_id = OLD.id;
        -- (no row when the job itself is deleted: its row goes with it)
        IF FOUND AND EXISTS (SELECT 1 FROM jobctl.jobs WHERE id = OLD.job_id) THEN
            INSERT INTO jobctl.last_ends
            SELECT r.job_id, r.id, r.scheduled_for, r.state FROM jobctl.runs r
            WHERE r.job_id = OLD.job_id AND r.state IN ('succeeded', 'dead', 'cancelled')
            ORDER BY r.scheduled_for DESC LIMIT 1
            ON CONFLICT (job_id) DO UPDATE SET run_id = EXCLUDED.run_id,
                scheduled_for = EXCLUDED.scheduled_for, state = EXCLUDED.state
            WHERE last_ends.scheduled_for <= EXCLUDED.scheduled_for;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state IN ('succeeded', 'dead', 'cancelled') THEN
        INSERT INTO jobctl.last_ends VALUES (NEW.job_id, NEW.id, NEW.scheduled_for, NEW.state)
        ON CONFLICT (job_id) DO UPDATE SET run_id = EXCLUDED.run_id,
            scheduled_for = EXCLUDED.scheduled_for, state = EXCLUDED.state
        WHERE last_ends.scheduled_for <= EXCLUDED.scheduled_for;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_last_end_insert AFTER INSERT ON jobctl.runs
    FOR EACH ROW WHEN (NEW.state IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION jobctl.keep_last_end();

CREATE TRIGGER runs_last_end_update AFTER UPDATE OF state ON jobctl.runs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
        AND (OLD.state IN ('succeeded', 'dead', 'cancelled') OR NEW.state IN ('succeeded', 'dead', 'cancelled'))
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.keep_last_end();

CREATE TRIGGER runs_last_end_delete AFTER DELETE ON jobctl.runs
    FOR EACH ROW WHEN (OLD.state IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION jobctl.keep_last_end();

-- Secrets (issue 42): a job's attempts get their values, read when each starts; no job,
-- run, revision or export holds a value.
CREATE TABLE jobctl.secrets (
    name TEXT PRIMARY KEY,
    value BYTEA NOT NULL,
    updated_at BIGINT NOT NULL
);

-- API tokens with roles (issue 42): the SHA-256 of a token's text, never the text.
CREATE TABLE jobctl.api_tokens (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL CHECK (role IN ('read', 'operate', 'admin')),
    sha256 TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT
);

-- named calendars of dates (schedule sets): a job's --except-calendar
CREATE TABLE jobctl.calendars (
    name TEXT COLLATE "C" PRIMARY KEY,
    -- ISO dates, sorted, as a JSON array
    dates TEXT NOT NULL DEFAULT '[]'
);

-- maintenance windows (jobctl pause --all): in force from since until until_at, or until
-- ended_at when resume --all ends it first
CREATE TABLE jobctl.maintenance (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    since BIGINT NOT NULL,
    until_at BIGINT,
    ended_at BIGINT,
    reason TEXT,
    who TEXT
);
