-- 0015: a fixed rate's anchor that only sets the phase (README "History: what is kept, what
-- failed, what never ran"): the instant of add, edit or apply without --start is no window,
-- its first window is one interval later; a --start given is a window. It was told by the
-- anchor being the job's created_at to the microsecond, which an edit's anchor and a job
-- applied from another database are not. Existing anchors set without --start are the
-- instant of the job's add (created_at) or of the revision that set them.
ALTER TABLE jobs ADD COLUMN anchor_phase_only INTEGER NOT NULL DEFAULT 0 CHECK (anchor_phase_only IN (0, 1));
UPDATE jobs SET anchor_phase_only = 1
WHERE anchor_at IS NOT NULL AND trigger_kind IN ('interval', 'set')
    AND (anchor_at = created_at OR EXISTS (
        SELECT 1 FROM job_revisions
        WHERE job_revisions.job_id = jobs.id AND job_revisions.at = jobs.anchor_at
    ));
