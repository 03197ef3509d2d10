-- 0016: the same rules, said without IN lists of three or more constants. SQLite evaluates
-- such a list through a temporary b-tree it builds and frees at each execution: the CHECK
-- on runs.state ran one at every claim and every finish, and the WHEN of each run trigger
-- one at every firing (with the heap's pages given back and faulted in again, some 20 a
-- transaction). As comparisons they cost next to nothing. The CHECKs only change form
-- (every row meets both), so their text is changed in place as 0011 and 0014 did; the
-- triggers are made again.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(replace(replace(sql,
    'CHECK (state IN (''pending'', ''leased'', ''succeeded'', ''failed'', ''dead'', ''cancelled'', ''skipped''))',
    'CHECK (state = ''pending'' OR state = ''leased'' OR state = ''succeeded'' OR state = ''failed''
            OR state = ''dead'' OR state = ''cancelled'' OR state = ''skipped'')'),
    'CHECK (skip_reason IN (''missed'', ''overlap'', ''deadline'', ''maintenance'', ''excluded''))',
    'CHECK (skip_reason = ''missed'' OR skip_reason = ''overlap''
        OR skip_reason = ''deadline'' OR skip_reason = ''maintenance'' OR skip_reason = ''excluded'')'),
    'CHECK (reason IN (''schedule'', ''catchup'', ''manual'', ''backfill'', ''after'', ''watch''))',
    'CHECK (reason = ''schedule'' OR reason = ''catchup'' OR reason = ''manual'' OR reason = ''backfill''
            OR reason = ''after'' OR reason = ''watch'')')
WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = RESET;
DROP TRIGGER runs_tally_insert;
CREATE TRIGGER runs_tally_insert AFTER INSERT ON runs
WHEN (NEW.state = 'succeeded' OR NEW.state = 'dead' OR NEW.state = 'cancelled' OR NEW.state = 'skipped')
BEGIN
    INSERT INTO run_tallies (job_id, state, ended, kept) VALUES (NEW.job_id, NEW.state, 1, 1)
    ON CONFLICT (job_id, state) DO UPDATE SET ended = ended + 1, kept = kept + 1;
END;
DROP TRIGGER runs_tally_enter;
CREATE TRIGGER runs_tally_enter AFTER UPDATE OF state ON runs
WHEN (NEW.state = 'succeeded' OR NEW.state = 'dead' OR NEW.state = 'cancelled' OR NEW.state = 'skipped') AND NEW.state IS NOT OLD.state
BEGIN
    INSERT INTO run_tallies (job_id, state, ended, kept) VALUES (NEW.job_id, NEW.state, 1, 1)
    ON CONFLICT (job_id, state) DO UPDATE SET ended = ended + 1, kept = kept + 1;
END;
DROP TRIGGER runs_tally_leave;
CREATE TRIGGER runs_tally_leave AFTER UPDATE OF state ON runs
WHEN (OLD.state = 'succeeded' OR OLD.state = 'dead' OR OLD.state = 'cancelled' OR OLD.state = 'skipped') AND NEW.state IS NOT OLD.state
BEGIN
    UPDATE run_tallies SET kept = kept - 1 WHERE job_id = OLD.job_id AND state = OLD.state;
END;
DROP TRIGGER runs_tally_delete;
CREATE TRIGGER runs_tally_delete AFTER DELETE ON runs
WHEN (OLD.state = 'succeeded' OR OLD.state = 'dead' OR OLD.state = 'cancelled' OR OLD.state = 'skipped')
BEGIN
    UPDATE run_tallies SET kept = kept - 1 WHERE job_id = OLD.job_id AND state = OLD.state;
END;
DROP TRIGGER runs_last_end_insert;
CREATE TRIGGER runs_last_end_insert AFTER INSERT ON runs
WHEN (NEW.state = 'succeeded' OR NEW.state = 'dead' OR NEW.state = 'cancelled')
BEGIN
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    VALUES (NEW.job_id, NEW.id, NEW.scheduled_for, NEW.state)
    ON CONFLICT (job_id) DO UPDATE SET run_id = excluded.run_id,
        scheduled_for = excluded.scheduled_for, state = excluded.state
    WHERE excluded.scheduled_for >= last_ends.scheduled_for;
END;
DROP TRIGGER runs_last_end_enter;
CREATE TRIGGER runs_last_end_enter AFTER UPDATE OF state ON runs
WHEN (NEW.state = 'succeeded' OR NEW.state = 'dead' OR NEW.state = 'cancelled') AND NEW.state IS NOT OLD.state
BEGIN
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    VALUES (NEW.job_id, NEW.id, NEW.scheduled_for, NEW.state)
    ON CONFLICT (job_id) DO UPDATE SET run_id = excluded.run_id,
        scheduled_for = excluded.scheduled_for, state = excluded.state
    WHERE excluded.scheduled_for >= last_ends.scheduled_for;
END;
DROP TRIGGER runs_last_end_leave;
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
DROP TRIGGER runs_last_end_delete;
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
