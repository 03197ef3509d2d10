-- 0012: many hosts (jobctl(1), jobctl daemon --tag, jobctl add --on, jobctl pause --all).
-- A job's --on tags and a daemon's tags are JSON arrays of text, sorted; the claim takes a
-- run only for a daemon whose tags hold every one of its job's. A maintenance window is a
-- row: in force from since until until_at (NULL: until resume --all, which sets ended_at);
-- the rows stay, so a scheduler that starts after one ended still records the windows that
-- fell in it skipped ('maintenance') instead of catching them up.
-- The CHECK on skip_reason only widens (every row meets the new one), so its text is changed
-- in place, the way SQLite's documentation gives for it, instead of copying the runs.
ALTER TABLE jobs ADD COLUMN on_tags TEXT NOT NULL DEFAULT '[]';
ALTER TABLE daemons ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
CREATE TABLE maintenance (
    id INTEGER PRIMARY KEY,
    since INTEGER NOT NULL,
    until_at INTEGER,
    ended_at INTEGER,
    reason TEXT,
    who TEXT
);
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, '''missed'', ''overlap'', ''deadline''', '''missed'', ''overlap'', ''deadline'', ''maintenance''')
WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = RESET;
