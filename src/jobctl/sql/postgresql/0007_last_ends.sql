-- 0007: each job's newest run (by window) among those now succeeded, dead or cancelled
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
        AND (OLD.state IN ('succeeded', 'dead', 'cancelled') OR NEW.state IN ('succeeded', 'dead', 'cancelled')))
    EXECUTE FUNCTION jobctl.keep_last_end();

CREATE TRIGGER runs_last_end_delete AFTER DELETE ON jobctl.runs
    FOR EACH ROW WHEN (OLD.state IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION jobctl.keep_last_end();

INSERT INTO jobctl.last_ends
SELECT r.job_id, r.id, r.scheduled_for, r.state FROM jobctl.jobs j JOIN jobctl.runs r ON r.id = (
    SELECT e.id FROM jobctl.runs e
    WHERE e.job_id = j.id AND e.state IN ('succeeded', 'dead', 'cancelled')
    ORDER BY e.scheduled_for DESC LIMIT 1);
