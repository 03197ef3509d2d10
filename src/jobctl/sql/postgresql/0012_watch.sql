-- 0012: watched jobs (README "Watching jobs that jobctl does not run"): a job may have a
-- ping_key instead of a command run here, and its windows are runs of reason 'watch'.
ALTER TABLE jobctl.jobs ADD COLUMN ping_key TEXT;
CREATE UNIQUE INDEX jobs_ping_key ON jobctl.jobs (ping_key) WHERE ping_key IS NOT NULL;
ALTER TABLE jobctl.runs DROP CONSTRAINT runs_reason_check;
ALTER TABLE jobctl.runs ADD CONSTRAINT runs_reason_check
    CHECK (reason IN ('schedule', 'catchup', 'manual', 'backfill', 'after', 'watch'));
