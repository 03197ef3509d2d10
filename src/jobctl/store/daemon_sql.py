"""The statements of the daemons' face (:mod:`.daemon`), by name, written once for both
backends in SQLite's parameter style (``?``, ``:name``); a dialect that writes parameters
otherwise gives :class:`DaemonQueries` its translator (PostgreSQL's is
:func:`~.dialect.pyformat`). What truly differs between the backends (the claim, the
expired leases, the leader's term, the schedule's reads) is each driver's own. Times are
integer microseconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Callable


def _same(sql: str) -> str:
    return sql


class DaemonQueries:
    """Every statement the daemons' face runs itself, in one dialect. ``for_update``: what
    a read whose rows the transaction goes on to change appends ("" or " FOR UPDATE")."""

    def __init__(self, *, for_update: str, translate: Callable[[str], str] = _same) -> None:
        t = translate
        # daemons
        self.delete_expired_daemons = t("DELETE FROM daemons WHERE expires_at < ?")
        self.upsert_daemon = t(
            "INSERT INTO daemons (id, pid, host, boot_id, started_at, heartbeat_at, expires_at, "
            "wake_address, workers, reserved, reserved_priority, tags) VALUES (:id, :pid, :host, "
            ":boot_id, :now, :now, :until, :wake, :workers, :reserved, :rp, :tags) "
            "ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, "
            "expires_at = excluded.expires_at"
        )
        self.delete_daemon = t("DELETE FROM daemons WHERE id = ?")
        self.release_leader = t(
            "UPDATE scheduler_lease SET holder = NULL, expires_at = 0 WHERE holder = ?"
        )
        self.expire_leader_of = t("UPDATE scheduler_lease SET expires_at = 0 WHERE holder = ?")
        self.expire_leases_of = t(
            "UPDATE runs SET lease_until = 0 WHERE state = 'leased' AND leased_by = ?"
        )
        self.local_daemons = t(
            "SELECT id, pid FROM daemons WHERE host = ? AND boot_id = ? AND expires_at >= ? "
            "AND id <> ?"
        )
        self.leader_lease = t("SELECT holder, expires_at FROM scheduler_lease WHERE id = 1")
        # the scheduler
        self.job_by_id = t("SELECT * FROM jobs WHERE id = ?")
        self.job_by_id_locked = t("SELECT * FROM jobs WHERE id = ?" + for_update)
        self.reboot_jobs = t(
            "SELECT * FROM jobs WHERE state = 'active' AND trigger_kind = 'reboot'"
        )
        # the windows of one firing chunk in one statement ({values}: one row mark a
        # window): (id, job_id, scheduled_for) of those inserted
        self.insert_runs = t(
            "INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, catchup_from, "
            "attempt, max_attempts, not_before, priority, run_key, env, settings, created_at, "
            "finished_at, job_revision, deadline_at) VALUES {values} "
            "ON CONFLICT (job_id, scheduled_for) DO NOTHING RETURNING id, job_id, scheduled_for"
        )
        self.insert_runs_row = t("(?, ?, ?, ?, ?, ?, 0, ?, ?, ?, NULL, '{}', ?, ?, ?, ?, ?)")
        self.replace_leased = t(
            "UPDATE runs SET cancel_requested = 1 WHERE job_id = ? AND state = 'leased'"
        )
        # keyed/manual runs and the rows this same turn inserts stay
        self.replace_waiting = t(
            "UPDATE runs SET state = 'cancelled', finished_at = :now, last_error = 'replaced' "
            "WHERE job_id = :job_id AND state IN ('pending', 'failed') AND reason <> 'manual' "
            "AND created_at < :now"
        )
        self.trim_missed = t(
            "DELETE FROM runs WHERE job_id = :job_id AND state = 'skipped' "
            "AND skip_reason = 'missed' AND id NOT IN (SELECT id FROM runs "
            "WHERE job_id = :job_id AND state = 'skipped' AND skip_reason = 'missed' "
            "ORDER BY scheduled_for DESC LIMIT :keep)"
        )
        self.move_schedule = t(
            "UPDATE jobs SET next_run_at = :next, last_window_at = COALESCE(:last, "
            "last_window_at), missed_total = missed_total + :missed, state = :state, "
            "last_boot_id = COALESCE(:boot_id, last_boot_id) WHERE id = :job_id"
        )
        # {only}: "" or the ids asked about
        self.idle_fixed_delay = t(
            "SELECT jobs.*, (SELECT MAX(COALESCE(finished_at, scheduled_for)) FROM runs "
            "WHERE runs.job_id = jobs.id) AS ended_at FROM jobs "
            "WHERE state = 'active' AND trigger_kind = 'interval' AND after_completion = 1 "
            "AND next_run_at IS NULL {only} AND NOT EXISTS (SELECT 1 FROM runs "
            "WHERE runs.job_id = jobs.id AND runs.state IN ('pending', 'leased', 'failed'))"
        )
        self.lock_job = t("SELECT id FROM jobs WHERE id = ?" + for_update)
        self.set_next_run = t(
            "UPDATE jobs SET next_run_at = :next, updated_at = :now WHERE id = :job_id "
            "AND state = 'active' AND next_run_at IS NULL AND NOT EXISTS (SELECT 1 FROM runs "
            "WHERE runs.job_id = jobs.id AND runs.state IN ('pending', 'leased', 'failed'))"
        )
        # the executor
        # the next run due, the next open run past its --deadline (a claim skips it:
        # 1 ms after the deadline, which is passed once it is behind); only open runs keep
        # a deadline_at
        self.next_not_before = t(
            "SELECT MIN(t) AS at FROM (SELECT MIN(not_before) AS t FROM runs "
            "WHERE state IN ('pending', 'failed') AND not_before > :now UNION ALL "
            "SELECT MIN(deadline_at) + 1000 FROM runs WHERE deadline_at IS NOT NULL "
            "AND deadline_at >= :now UNION ALL "
            # a maintenance window that ends by itself (--until): claims start again then
            "SELECT MIN(until_at) FROM maintenance WHERE ended_at IS NULL AND until_at > :now"
            ") AS due"
        )
        # the maintenance windows (pause --all) that hold windows from :since on
        self.maintenance_since = t(
            "SELECT since, COALESCE(ended_at, until_at) AS ends FROM maintenance "
            "WHERE since <= :now AND (COALESCE(ended_at, until_at) IS NULL "
            "OR COALESCE(ended_at, until_at) > :since) ORDER BY since"
        )
        # a watched run open: the scheduler-lease holder settles those past their time
        self.any_watched_open = t(
            "SELECT 1 FROM runs WHERE reason = 'watch' AND state IN ('pending', 'leased') LIMIT 1"
        )
        self.next_lease_expiry = t(
            "SELECT MIN(lease_until) AS at FROM runs WHERE state = 'leased' AND leased_by <> ? "
            "AND lease_until > ?"
        )
        self.held_by = t(
            "SELECT id, attempt, cancel_requested FROM runs "
            "WHERE state = 'leased' AND leased_by = ?"
        )
        self.attempt_lost = t(
            "UPDATE attempts SET finished_at = ?, error = 'lost' "
            "WHERE run_id = ? AND attempt = ? AND finished_at IS NULL"
        )
        self.settle_expired = t(
            "UPDATE runs SET state = :state, last_error = :error, leased_by = NULL, "
            "lease_until = NULL, "
            "not_before = CASE WHEN :state = 'failed' THEN :now ELSE not_before END, "
            "finished_at = CASE WHEN :state IN ('dead', 'cancelled') THEN :now "
            "ELSE finished_at END WHERE id = :run_id AND state = 'leased'"
        )
        # fenced: the output lands only while the attempt holds its lease
        self.save_output = t(
            "UPDATE attempts SET output = :output, output_bytes = :total "
            "WHERE run_id = :run_id AND attempt = :attempt AND finished_at IS NULL "
            "AND EXISTS (SELECT 1 FROM runs WHERE id = :run_id AND attempt = :attempt "
            "AND state = 'leased' AND leased_by = :me)"
        )
        self.record_hook = t("UPDATE runs SET hook_status = ? WHERE id = ?")


#: the parameters of one row of :attr:`DaemonQueries.insert_runs_row`
INSERT_RUNS_ROW_PARAMS = 14
#: windows a statement of :attr:`DaemonQueries.insert_runs` (SQLite binds at most 32,766
#: parameters, PostgreSQL 65,535)
INSERT_RUNS_CHUNK = 500
