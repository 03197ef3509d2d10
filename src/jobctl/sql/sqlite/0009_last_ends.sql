-- 0009: each job's newest run (by window) among those now succeeded, dead or cancelled
-- (issue 35), kept by the triggers below in the transaction that changes a run, so the
-- dashboard's overview reads every job's last run state without a look at its runs.
CREATE TABLE last_ends (
    job_id INTEGER PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    run_id INTEGER NOT NULL,
    scheduled_for INTEGER NOT NULL,
    state TEXT NOT NULL
);

CREATE TRIGGER runs_last_end_insert AFTER INSERT ON runs
WHEN NEW.state IN ('succeeded', 'dead', 'cancelled')
BEGIN
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    VALUES (NEW.job_id, NEW.id, NEW.scheduled_for, NEW.state)
    ON CONFLICT (job_id) DO UPDATE SET run_id = excluded.run_id,
        scheduled_for = excluded.scheduled_for, state = excluded.state
    WHERE excluded.scheduled_for >= last_ends.scheduled_for;
END;

CREATE TRIGGER runs_last_end_enter AFTER UPDATE OF state ON runs
WHEN NEW.state IN ('succeeded', 'dead', 'cancelled') AND NEW.state IS NOT OLD.state
BEGIN
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    VALUES (NEW.job_id, NEW.id, NEW.scheduled_for, NEW.state)
    ON CONFLICT (job_id) DO UPDATE SET run_id = excluded.run_id,
        scheduled_for = excluded.scheduled_for, state = excluded.state
    WHERE excluded.scheduled_for >= last_ends.scheduled_for;
END;

-- the run kept there left those states, or went: the newest of the job's that is still
-- in one takes its place (none: the row goes)
CREATE TRIGGER runs_last_end_leave AFTER UPDATE OF state ON runs
WHEN OLD.state IN ('succeeded', 'dead', 'cancelled') AND NEW.state IS NOT OLD.state
    AND OLD.id = (SELECT run_id FROM last_ends WHERE job_id = OLD.job_id)
BEGIN
    DELETE FROM last_ends WHERE job_id = OLD.job_id;
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    SELECT job_id, id, scheduled_for, state FROM runs
    WHERE job_id = OLD.job_id AND state IN ('succeeded', 'dead', 'cancelled')
        AND EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id)
    ORDER BY scheduled_for DESC LIMIT 1;
END;

CREATE TRIGGER runs_last_end_delete AFTER DELETE ON runs
WHEN OLD.state IN ('succeeded', 'dead', 'cancelled')
    AND OLD.id = (SELECT run_id FROM last_ends WHERE job_id = OLD.job_id)
BEGIN
    DELETE FROM last_ends WHERE job_id = OLD.job_id;
    INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
    SELECT job_id, id, scheduled_for, state FROM runs
    WHERE job_id = OLD.job_id AND state IN ('succeeded', 'dead', 'cancelled')
        AND EXISTS (SELECT 1 FROM jobs WHERE id = OLD.job_id)
    ORDER BY scheduled_for DESC LIMIT 1;
END;

INSERT INTO last_ends (job_id, run_id, scheduled_for, state)
SELECT r.job_id, r.id, r.scheduled_for, r.state FROM jobs j JOIN runs r ON r.id = (
    SELECT e.id FROM runs e WHERE e.job_id = j.id AND e.state IN ('succeeded', 'dead', 'cancelled')
    ORDER BY e.scheduled_for DESC LIMIT 1);
