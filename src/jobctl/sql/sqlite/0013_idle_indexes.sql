-- 0013: what a daemon looks at periodically is found through an index, never by reading
-- every job (issue 41): the jobs that follow another (--after), asked at each renewal,
-- and the jobs with a --keep-for, which retention looks at in each pass.
CREATE INDEX jobs_after ON jobs (id) WHERE trigger_kind = 'after' AND state = 'active';
CREATE INDEX jobs_keep_for ON jobs (id) WHERE keep_for_seconds IS NOT NULL;
