-- 0002: history that stays fast and bounded (see README, History: what is kept, what failed, what never ran).
-- Jobs gain retention (keep_runs, default 1000 for every existing job, keep_for_seconds);
-- runs may have reason 'backfill' (and 'after', skip_reason 'deadline', see README, Run policies and what a run costs);
-- indexes serve every listing without a scan of all runs; the counters move out of the
-- rows into tallies, seeded from the rows there are.

ALTER TABLE jobctl.jobs
    ADD COLUMN keep_runs BIGINT NOT NULL DEFAULT 1000 CHECK (keep_runs >= 0),
    ADD COLUMN keep_for_seconds DOUBLE PRECISION;

ALTER TABLE jobctl.runs DROP CONSTRAINT runs_skip_reason_check;
ALTER TABLE jobctl.runs ADD CONSTRAINT runs_skip_reason_check
    CHECK (skip_reason IN ('missed', 'overlap', 'deadline'));
ALTER TABLE jobctl.runs DROP CONSTRAINT runs_reason_check;
ALTER TABLE jobctl.runs ADD CONSTRAINT runs_reason_check
    CHECK (reason IN ('schedule', 'catchup', 'manual', 'backfill', 'after'));

DROP INDEX jobctl.runs_job_state;
CREATE INDEX runs_job_state ON jobctl.runs (job_id, state, scheduled_for);
-- the listings of see README, History: what is kept, what failed, what never ran (runs, runs --state, --since), newest window first
CREATE INDEX runs_window ON jobctl.runs (scheduled_for, id);
CREATE INDEX runs_state_window ON jobctl.runs (state, scheduled_for, id);

-- Counters kept apart from the rows (see README, History: what is kept, what failed, what never ran): retention and prune delete runs and
-- attempts, never these, so jobctl_runs_finished_total and jobctl_run_duration_seconds
-- never go down. The triggers below append one row of deltas per change (no row is
-- ever updated, so concurrent daemons never wait on each other for a counter); readers
-- sum them, and the scheduler-lease holder folds them together now and then.
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

INSERT INTO jobctl.run_tallies
SELECT job_id, state, COUNT(*), COUNT(*) FROM jobctl.runs WHERE state IN ('succeeded', 'dead', 'cancelled', 'skipped')
GROUP BY job_id, state;

INSERT INTO jobctl.duration_tallies
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
FROM jobctl.attempts a JOIN jobctl.runs ON runs.id = a.run_id
WHERE a.finished_at IS NOT NULL GROUP BY runs.job_id, bucket;

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
        AND (OLD.state IN ('succeeded', 'dead', 'cancelled', 'skipped') OR NEW.state IN ('succeeded', 'dead', 'cancelled', 'skipped')))
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
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION jobctl.tally_attempts();

CREATE FUNCTION jobctl.forget_tallies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM jobctl.run_tallies WHERE job_id = OLD.id;
    DELETE FROM jobctl.duration_tallies WHERE job_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_tally_delete AFTER DELETE ON jobctl.jobs
    FOR EACH ROW EXECUTE FUNCTION jobctl.forget_tallies();
