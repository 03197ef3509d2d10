-- 0003: runs_finished (runs.finished_at) goes. No query reads through it, and every
-- window inserted into it and every finish moved an entry in it: a page more in each
-- transaction of a busy daemon.
DROP INDEX IF EXISTS runs_finished;
