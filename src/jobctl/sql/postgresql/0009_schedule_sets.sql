-- 0009: schedule sets (issue 44): a job's trigger may be a set of cron expressions and
-- fixed rates (trigger_kind 'set', its members joined with ' | ' in trigger_expr), bounded
-- by an active range, with windows excluded by cron expressions and named calendars; an
-- excluded window is recorded skipped with skip_reason 'excluded'. except_dates is the
-- union of the job's calendars' dates, kept with the job when a calendar changes, so the
-- scheduler reads a job's exclusions with the job and never a calendar at a fire.
ALTER TABLE jobctl.jobs DROP CONSTRAINT jobs_trigger_kind_check;
ALTER TABLE jobctl.jobs ADD CONSTRAINT jobs_trigger_kind_check
    CHECK (trigger_kind IN ('cron', 'interval', 'once', 'reboot', 'manual', 'after', 'set'));
ALTER TABLE jobctl.jobs ADD COLUMN active_from BIGINT;
ALTER TABLE jobctl.jobs ADD COLUMN active_until BIGINT;
ALTER TABLE jobctl.jobs ADD COLUMN excepts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobctl.jobs ADD COLUMN except_calendars TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobctl.jobs ADD COLUMN except_dates TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobctl.runs DROP CONSTRAINT runs_skip_reason_check;
ALTER TABLE jobctl.runs ADD CONSTRAINT runs_skip_reason_check
    CHECK (skip_reason IN ('missed', 'overlap', 'deadline', 'excluded'));

CREATE TABLE jobctl.calendars (
    name TEXT COLLATE "C" PRIMARY KEY,
    -- ISO dates, sorted, as a JSON array
    dates TEXT NOT NULL DEFAULT '[]'
);
