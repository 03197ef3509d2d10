-- 0011: schedule sets (issue 44): a job's trigger may be a set of cron expressions and
-- fixed rates (trigger_kind 'set', its members joined with ' | ' in trigger_expr), bounded
-- by an active range, with windows excluded by cron expressions and named calendars; an
-- excluded window is recorded skipped with skip_reason 'excluded'. except_dates is the
-- union of the job's calendars' dates, kept with the job when a calendar changes, so the
-- scheduler reads a job's exclusions with the job and never a calendar at a fire.
-- Both CHECKs only widen (every row meets the new one), so their text is changed in place
-- (the way SQLite's documentation gives for it) instead of copying jobs and runs; the ALTER
-- TABLEs in the same transaction change the schema cookie, so every connection reads it anew.
ALTER TABLE jobs ADD COLUMN active_from INTEGER;
ALTER TABLE jobs ADD COLUMN active_until INTEGER;
ALTER TABLE jobs ADD COLUMN excepts TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN except_calendars TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN except_dates TEXT NOT NULL DEFAULT '[]';
CREATE TABLE calendars (
    name TEXT PRIMARY KEY,
    -- ISO dates, sorted, as a JSON array
    dates TEXT NOT NULL DEFAULT '[]'
);
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, '''reboot'', ''manual'', ''after''))', '''reboot'', ''manual'', ''after'', ''set''))')
WHERE type = 'table' AND name = 'jobs';
UPDATE sqlite_master
SET sql = replace(sql, '''missed'', ''overlap'', ''deadline''))', '''missed'', ''overlap'', ''deadline'', ''excluded''))')
WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = RESET;
