-- 0014: watched jobs (README "Watching jobs that jobctl does not run"): a job may have a
-- ping_key instead of a command run here (unique, NULL for a job jobctl runs), and its
-- windows are runs of reason 'watch', which the claim never takes.
-- The CHECK on reason only widens (every row meets the new one), so its text is changed
-- in place, the way SQLite's documentation gives for it, instead of copying the runs.
ALTER TABLE jobs ADD COLUMN ping_key TEXT;
CREATE UNIQUE INDEX jobs_ping_key ON jobs (ping_key) WHERE ping_key IS NOT NULL;
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, '''backfill'', ''after'')', '''backfill'', ''after'', ''watch'')')
WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = RESET;
