-- 0004: jobs as code (see jobctl(1), jobctl history). Every change to a job writes a revision in the same
-- transaction: its number (1, 2, ... per job, the job's `revision`), who and from where,
-- `changes` ({KEY: [old, new]}, keys of the job file) and `definition` (the job's table
-- of the job file after the change, what `rollback` goes back to). A run keeps the
-- revision its job had when the run was created.
ALTER TABLE jobctl.jobs ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobctl.runs ADD COLUMN job_revision BIGINT;
CREATE TABLE jobctl.job_revisions (
    job_id BIGINT NOT NULL REFERENCES jobctl.jobs (id) ON DELETE CASCADE,
    revision BIGINT NOT NULL,
    at BIGINT NOT NULL,
    who TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ('cli', 'apply', 'import', 'api', 'daemon')),
    changes TEXT NOT NULL,
    definition TEXT NOT NULL,
    PRIMARY KEY (job_id, revision)
);
