-- 0008: what each daemon can run (issue 29): its --workers, --reserved and
-- --reserved-priority, so that `inspect` can say when the reserved-worker quota, not a
-- busy worker, is what keeps a run waiting. NULL workers: a daemon of an older jobctl.
ALTER TABLE daemons ADD COLUMN workers INTEGER;
ALTER TABLE daemons ADD COLUMN reserved INTEGER NOT NULL DEFAULT 0;
ALTER TABLE daemons ADD COLUMN reserved_priority INTEGER;
