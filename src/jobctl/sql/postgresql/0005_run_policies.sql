-- 0005: run policies and what a run costs (see README, Run policies and what a run costs).
-- Jobs may follow another job (trigger_kind 'after') and queue one window (overlap
-- 'queue'), and gain --deadline, --pause-after-failures (with why a job is paused),
-- --max-running, --ok-exit, --no-retry-exit and the limits; a run keeps the instant its
-- deadline passes and, leased, the place it holds among its job's --max-running; an
-- attempt keeps what the kernel counted for it, and every job's CPU is tallied apart from
-- the rows.
ALTER TABLE jobctl.jobs DROP CONSTRAINT jobs_trigger_kind_check;
ALTER TABLE jobctl.jobs ADD CONSTRAINT jobs_trigger_kind_check
    CHECK (trigger_kind IN ('cron', 'interval', 'once', 'reboot', 'manual', 'after'));
ALTER TABLE jobctl.jobs DROP CONSTRAINT jobs_overlap_check;
ALTER TABLE jobctl.jobs ADD CONSTRAINT jobs_overlap_check
    CHECK (overlap IN ('forbid', 'allow', 'replace', 'queue'));
ALTER TABLE jobctl.jobs ADD COLUMN deadline_seconds DOUBLE PRECISION;
ALTER TABLE jobctl.jobs ADD COLUMN pause_after_failures BIGINT
    CHECK (pause_after_failures >= 1);
ALTER TABLE jobctl.jobs ADD COLUMN max_running BIGINT CHECK (max_running >= 1);
ALTER TABLE jobctl.jobs ADD COLUMN ok_exit TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobctl.jobs ADD COLUMN no_retry_exit TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobctl.jobs ADD COLUMN limits TEXT NOT NULL DEFAULT '{}';
ALTER TABLE jobctl.jobs ADD COLUMN paused_reason TEXT
    CHECK (paused_reason IN ('user', 'failures'));

ALTER TABLE jobctl.runs ADD COLUMN deadline_at BIGINT;
ALTER TABLE jobctl.runs ADD COLUMN slot INTEGER;
CREATE UNIQUE INDEX runs_one_leased_slot ON jobctl.runs (job_id, slot)
    WHERE state = 'leased' AND slot IS NOT NULL;
CREATE INDEX runs_deadline ON jobctl.runs (deadline_at) WHERE deadline_at IS NOT NULL;

ALTER TABLE jobctl.attempts ADD COLUMN cpu_user DOUBLE PRECISION;
ALTER TABLE jobctl.attempts ADD COLUMN cpu_system DOUBLE PRECISION;
ALTER TABLE jobctl.attempts ADD COLUMN max_rss BIGINT;

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
        AND NEW.cpu_user IS NOT NULL)
    EXECUTE FUNCTION jobctl.tally_cpu();

CREATE OR REPLACE FUNCTION jobctl.forget_tallies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM jobctl.run_tallies WHERE job_id = OLD.id;
    DELETE FROM jobctl.duration_tallies WHERE job_id = OLD.id;
    DELETE FROM jobctl.cpu_tallies WHERE job_id = OLD.id;
    RETURN NULL;
END
$$;
