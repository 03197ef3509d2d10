-- 0014: a daemon's turn keeps the tallies of its ends itself. The statement that records
-- a turn's ends (store/postgresql/driver.py, FINISH_RUNS) appends the run, duration and CPU
-- tallies, moves last_ends and frees the held locks of all its ends in a few set-wise
-- inserts, with jobctl.ends_tallied set to 'on' for that statement alone; the row
-- triggers that do the same one end at a time (five PL/pgSQL calls an end, about 100 us
-- of the server's a run) stand aside while it is on, and keep every other writer's
-- changes as before.
DROP TRIGGER runs_release_locks ON jobctl.runs;
CREATE TRIGGER runs_release_locks AFTER UPDATE OF state, attempt ON jobctl.runs
    FOR EACH ROW WHEN (OLD.state = 'leased' AND (NEW.state <> 'leased' OR NEW.attempt <> OLD.attempt)
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.release_held_locks();

DROP TRIGGER runs_tally_update ON jobctl.runs;
CREATE TRIGGER runs_tally_update AFTER UPDATE OF state ON jobctl.runs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
        AND (OLD.state IN ('succeeded', 'dead', 'cancelled', 'skipped') OR NEW.state IN ('succeeded', 'dead', 'cancelled', 'skipped'))
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.tally_runs();

DROP TRIGGER attempts_tally_finish ON jobctl.attempts;
CREATE TRIGGER attempts_tally_finish AFTER UPDATE OF finished_at ON jobctl.attempts
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.tally_attempts();

DROP TRIGGER attempts_cpu_finish ON jobctl.attempts;
CREATE TRIGGER attempts_cpu_finish AFTER UPDATE OF finished_at ON jobctl.attempts
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL
        AND NEW.cpu_user IS NOT NULL
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.tally_cpu();

DROP TRIGGER runs_last_end_update ON jobctl.runs;
CREATE TRIGGER runs_last_end_update AFTER UPDATE OF state ON jobctl.runs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
        AND (OLD.state IN ('succeeded', 'dead', 'cancelled') OR NEW.state IN ('succeeded', 'dead', 'cancelled'))
        AND current_setting('jobctl.ends_tallied', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION jobctl.keep_last_end();
