"""The statements of the commands' side, by name, written once for both backends.

They are written in SQLite's parameter style (``?`` and ``:name``); the PostgreSQL dialect
turns them into psycopg's (``%s``, ``%(name)s``) once, when it is opened. The few pieces
whose SQL differs between the two (how a run's lock names are joined into one text, and
whether a read that decides a write locks its rows) are :class:`Fragments` the dialect
gives. Fields in braces (``{where}``) are filled in per call. Times are integer
microseconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class Fragments(NamedTuple):
    """What one dialect writes its own way."""

    #: an aggregate joining the text of column ``name`` with newlines (the run's locks)
    lines_of: Callable[[str], str]
    #: appended to a read whose rows the transaction goes on to change ("" or " FOR UPDATE")
    for_update: str
    #: after an INSERT's column names when the rows bring ids of their own ("" or
    #: " OVERRIDING SYSTEM VALUE" for an identity column)
    given_ids: str = ""
    #: after ``FROM runs``: each run's attempts as ``a`` (run_id, attempt, started_at,
    #: finished_at), looked up by the run, so no plan reads every attempt to join them
    attempts_of_each_run: str = "JOIN attempts a ON a.run_id = runs.id"
    #: whether the JSON array of text ``have`` holds every element of ``need`` (a daemon's
    #: tags against a job's ``--on``)
    tags_within: Callable[[str, str], str] = lambda need, have: (
        f"NOT EXISTS (SELECT 1 FROM json_each({need}) t "
        f"WHERE t.value NOT IN (SELECT value FROM json_each({have})))"
    )


#: no maintenance window in force (``pause --all``): while one is, nothing starts
NO_MAINTENANCE = """NOT EXISTS (SELECT 1 FROM maintenance m WHERE m.since <= :now
    AND m.ended_at IS NULL AND (m.until_at IS NULL OR m.until_at > :now))"""

# The claim's rules (see jobctl(1), THE DAEMON; README, Two workloads: the daily digest and the
# polite crawler), one named piece each, over the row ``runs`` (and, in the
# job pieces, its job ``j``). ``inspect`` (WAITING) and the SQLite claim are both built
# from these, so ``inspect`` never says a run is free while the claim passes it by.
RUN_OPEN = "runs.state IN ('pending', 'failed')"
RUN_DUE = "runs.not_before <= :now"
#: another leased run sharing one of this run's lock names
LOCK_HOLDERS = """
    FROM run_locks mine
    JOIN run_locks other ON other.name = mine.name AND other.run_id <> mine.run_id
    JOIN runs holder ON holder.id = other.run_id
    WHERE mine.run_id = runs.id AND holder.state = 'leased'
"""
LOCKS_FREE = f"NOT EXISTS (SELECT 1 {LOCK_HOLDERS})"
JOB_PAUSED = "j.state = 'paused'"
#: forbid, replace and queue keep one run of the job leased; allow does not (said as one
#: comparison: SQLite evaluates a list of three constants through a temporary b-tree that
#: it builds at each claim)
OVERLAP_GUARDED = "j.overlap <> 'allow'"
#: another leased run of the same job
OVERLAP_HOLDERS = """
    FROM runs sib WHERE sib.job_id = runs.job_id AND sib.id <> runs.id AND sib.state = 'leased'
"""
FINISHED = "('succeeded', 'dead', 'cancelled', 'skipped')"
#: --max-running N: N runs of the job leased already
JOB_FULL = f"(j.max_running IS NOT NULL AND (SELECT COUNT(*) {OVERLAP_HOLDERS}) >= j.max_running)"
JOB_FREE = f"""NOT EXISTS (
        SELECT 1 FROM jobs j WHERE j.id = runs.job_id AND (
            {JOB_PAUSED}
            OR ({OVERLAP_GUARDED} AND EXISTS (SELECT 1 {OVERLAP_HOLDERS}))
            OR {JOB_FULL})
    )"""


_NOT_SKIPPED = "r.state <> 'skipped'"
_RUN_STATES = ("pending", "leased", "succeeded", "failed", "dead", "cancelled", "skipped")


class Queries(NamedTuple):
    """Every statement of :class:`~jobctl.store.commands.Commands`, in one dialect.

    An immutable tuple of named texts, never compared nor shown: a class of ~100 fields
    that each command which opens a store creates when it imports this module, cheap as a
    named tuple (a frozen dataclass of them generated and compiled ``__init__``,
    ``__setattr__`` and ``__delattr__``: 2 ms of every such start)."""

    # reads
    run_select: str
    run_by_id: str
    job_by_name: str
    job_by_name_locked: str
    job_id_by_name: str
    jobs_all: str
    job_names: str
    job_ids: str
    last_run_ids: str
    runs_by_ids: str
    list_runs: str
    list_runs_of_job: str
    attempts_of_run: str
    last_attempt: str
    one_attempt: str
    run_state_locked: str
    run_by_key: str
    window_taken: str
    leased_of_job: str
    open_run_ids_of_job: str
    dead_ids_of_job: str
    dead_ids: str
    open_counts: str
    kept_counts: str
    next_window: str
    next_due_run: str
    check_late: str
    count_jobs: str
    count_runs: str
    live_daemons: str
    waiting: str
    daemon_loads: str
    run_costs_by_job: str
    run_counters: str
    duration_tallies: str
    failing_jobs: str
    maintenance_now: str
    maintenance_insert: str
    maintenance_update: str
    maintenance_end: str
    withdraw_all_early_runs: str
    rewind_next_run: str
    recent_durations: str
    last_attempted_run: str
    window_runs: str
    window_states: str
    # jobs
    insert_job: str
    update_job: str
    pause_job: str
    resume_job: str
    cancel_job: str
    delete_job: str
    # revisions (see jobctl(1), jobctl history)
    job_revision_number: str
    set_job_revision: str
    insert_revision: str
    revisions_of_job: str
    # runs
    insert_run: str
    insert_run_lock: str
    withdraw_early_runs: str
    cancel_waiting_run: str
    request_cancel: str
    retry_dead: str
    requeue_backfill: str
    insert_run_lock_once: str
    prune: str
    # retention (the scheduler-lease holder's, written once for both backends)
    retention_job: str
    retention_changed_new: str
    retention_changed_open: str
    retention_keep_for: str
    retention_edited: str
    retention_max_run: str
    retention_open_runs: str
    retention_candidates: str
    nth_finished: str
    trim_ids: str
    trim_notifications: str
    trim_runs: str
    recent_final_states: str
    after_jobs: str
    any_after_job: str
    all_after_jobs: str
    after_upstream_runs: str
    after_cursor: str
    job_pause_rule: str
    pause_by_failures: str
    # db copy
    insert_row: str
    insert_row_with_id: str
    set_last_window: str
    # the dashboard (see jobctl(1), jobctl serve): jobctl.store.dashboard
    dash_job_facts: str
    dash_open_runs: str
    dash_job_names: str
    dash_job_names_by_ids: str
    dash_failed_notifications: str
    dash_jobs_by_ids: str
    dash_last_runs: str
    dash_run_counts_since: str
    dash_busy_workers: str
    dash_strip_runs: str
    dash_finished_runs: str
    dash_timeline: str
    dash_timeline_jobs: str

    def translated(self, fn: Callable[[str], str]) -> Queries:
        """The same statements with ``fn`` applied to each (another parameter style)."""
        return Queries._make(map(fn, self))


def queries(d: Fragments) -> Queries:
    """The statements, with the dialect's fragments in place (parameters still SQLite's)."""
    # a run with its job's name, its locks, and its last attempt's start, end and host
    run_select = f"""
SELECT runs.*, jobs.name AS job_name,
       (SELECT {d.lines_of("l.name")} FROM run_locks l WHERE l.run_id = runs.id) AS lock_list,
       la.started_at AS attempt_started_at, la.finished_at AS attempt_finished_at,
       la.host AS attempt_host, la.cpu_user + la.cpu_system AS attempt_cpu,
       la.max_rss AS attempt_max_rss
FROM runs JOIN jobs ON jobs.id = runs.job_id
LEFT JOIN attempts la ON la.run_id = runs.id AND la.attempt = runs.attempt
"""
    return Queries(
        run_select=run_select,
        run_by_id=run_select + " WHERE runs.id = ?",
        job_by_name="SELECT * FROM jobs WHERE name = ?",
        job_by_name_locked="SELECT * FROM jobs WHERE name = ?" + d.for_update,
        job_id_by_name="SELECT id FROM jobs WHERE name = ?",
        jobs_all="SELECT * FROM jobs ORDER BY name",
        job_names="SELECT name FROM jobs ORDER BY name",
        job_ids="SELECT id FROM jobs ORDER BY id",
        # {only}: "WHERE jobs.id IN (...)" or nothing. Per job, the newest window that
        # was not skipped, walked down the UNIQUE (job_id, scheduled_for) index: a few
        # rows a job, however long its history; then those runs by id ({marks}), a
        # batch at a time (an IN over a subquery of runs would be joined by a scan)
        last_run_ids="""
SELECT (SELECT r.id FROM runs r WHERE r.job_id = jobs.id AND r.state <> 'skipped'
        ORDER BY r.scheduled_for DESC LIMIT 1) AS id
FROM jobs {only}""",
        runs_by_ids=run_select + " WHERE runs.id IN ({marks})",
        list_runs=run_select + " {where} ORDER BY runs.scheduled_for DESC, runs.id DESC LIMIT ?",
        # one job's: its windows are unique, so the (job_id, ...) indexes give the order
        list_runs_of_job=run_select + " {where} ORDER BY runs.scheduled_for DESC LIMIT ?",
        attempts_of_run="SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt",
        last_attempt="SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt DESC LIMIT 1",
        one_attempt="SELECT * FROM attempts WHERE run_id = ? AND attempt = ?",
        run_state_locked="SELECT state, reason FROM runs WHERE id = ?" + d.for_update,
        run_by_key="SELECT id FROM runs WHERE job_id = ? AND run_key = ?",
        window_taken="SELECT 1 FROM runs WHERE job_id = ? AND scheduled_for = ?",
        leased_of_job="SELECT COUNT(*) AS n FROM runs WHERE job_id = ? AND state = 'leased'",
        open_run_ids_of_job="SELECT id FROM runs WHERE job_id = ? "
        "AND state IN ('pending', 'failed', 'leased') ORDER BY id",
        dead_ids_of_job="SELECT id FROM runs WHERE job_id = ? AND state = 'dead' ORDER BY id"
        + d.for_update,
        # retry-dead --all: a watched run (reason 'watch') is ended by pings, never retried
        dead_ids="SELECT id FROM runs WHERE state = 'dead' AND reason <> 'watch' ORDER BY id"
        + d.for_update,
        # status's counts: the open runs off the (state, ...) indexes, the finished ones
        # from the tallies (see README, History: what is kept, what failed, what never ran: no read
        # counts every run)
        open_counts="SELECT state, COUNT(*) AS n FROM runs "
        "WHERE state IN ('pending', 'leased', 'failed') GROUP BY state",
        kept_counts="SELECT t.state, SUM(t.kept) AS n FROM run_tallies t "
        "JOIN jobs ON jobs.id = t.job_id GROUP BY t.state",
        next_window="SELECT MIN(next_run_at) AS t FROM jobs WHERE state = 'active'",
        # a paused job's queued runs wait for its resume: none of them is due
        next_due_run="""
SELECT MIN(runs.not_before) AS t FROM runs JOIN jobs ON jobs.id = runs.job_id
WHERE runs.state IN ('pending', 'failed') AND jobs.state <> 'paused'
    AND runs.reason <> 'watch'""",
        # jobctl check: due before the cutoff and free by the claim's own rules (a run held
        # back by a lock, its job's overlap or --max-running, or a paused job, waits as it
        # should and is not late)
        # a run of a job --on tags no live daemon carries waits for one: not late for check;
        # a watched job's run waits for its pings, not for a daemon
        check_late=f"""
SELECT COUNT(*) AS n FROM runs
WHERE {RUN_OPEN} AND runs.not_before < :cutoff AND {LOCKS_FREE} AND {JOB_FREE}
    AND runs.reason <> 'watch'
    AND NOT EXISTS (SELECT 1 FROM jobs jt WHERE jt.id = runs.job_id AND jt.on_tags <> '[]'
        AND NOT EXISTS (SELECT 1 FROM daemons d WHERE d.expires_at >= :now
            AND {d.tags_within("jt.on_tags", "d.tags")}))""",
        count_jobs="SELECT COUNT(*) AS n FROM jobs",
        count_runs="SELECT COUNT(*) AS n FROM runs",
        live_daemons="""
SELECT d.*, (SELECT holder FROM scheduler_lease WHERE id = 1 AND expires_at >= :now) AS leader
FROM daemons d WHERE d.expires_at >= :now ORDER BY d.started_at, d.id
""",
        # Why one run waits: each piece of the claim's condition on its own, the condition
        # whole (without the per-daemon quota), and what blocks it (the first lock by name
        # and its holder, the lowest leased sibling), with the live daemons and leased runs.
        waiting=f"""
SELECT runs.state, runs.not_before, runs.priority, j.name AS job_name,
    runs.reason = 'watch' AS watched,
    {RUN_DUE} AS due,
    {JOB_PAUSED} AS paused,
    (SELECT other.name {LOCK_HOLDERS} ORDER BY other.name, holder.id LIMIT 1) AS lock_name,
    (SELECT holder.id {LOCK_HOLDERS} ORDER BY other.name, holder.id LIMIT 1) AS lock_holder,
    CASE WHEN {OVERLAP_GUARDED}
         THEN (SELECT sib.id {OVERLAP_HOLDERS} ORDER BY sib.id LIMIT 1) END AS overlap_run,
    j.max_running, j.on_tags,
    CASE WHEN j.max_running IS NOT NULL THEN (SELECT COUNT(*) {OVERLAP_HOLDERS}) END
        AS job_leased,
    ({RUN_OPEN} AND {RUN_DUE} AND {LOCKS_FREE} AND {JOB_FREE}) AS claimable,
    (SELECT COUNT(*) FROM daemons WHERE expires_at >= :now) AS live_daemons,
    (SELECT COUNT(*) FROM runs r2 WHERE r2.state = 'leased') AS leased_runs
FROM runs JOIN jobs j ON j.id = runs.job_id
WHERE runs.id = :run_id
""",
        # each live daemon's workers and the runs it holds, all and below its quota's
        # priority (few rows: leased runs only)
        daemon_loads="""
SELECT d.workers, d.reserved, d.reserved_priority, d.tags,
    (SELECT COUNT(*) FROM runs r WHERE r.state = 'leased' AND r.leased_by = d.id) AS leased,
    (SELECT COUNT(*) FROM runs r WHERE r.state = 'leased' AND r.leased_by = d.id
        AND r.priority < d.reserved_priority) AS low_leased
FROM daemons d WHERE d.expires_at >= :now ORDER BY d.started_at, d.id
""",
        # the CPU tallied apart from the rows (retention never lowers it), and the peak
        # memory of each job's last finished run, off the (job_id, state, scheduled_for)
        # index: no scan of a job's history
        # the peak memory of each job's newest run that succeeded or died: the newest run
        # ended (last_ends, one row a job) when that is one; only behind a newer cancelled
        # run is it looked for among the job's runs
        run_costs_by_job="""
SELECT jobs.name,
    (SELECT SUM(t.cpu_us) FROM cpu_tallies t WHERE t.job_id = jobs.id) AS cpu_us,
    (SELECT a.max_rss FROM attempts a WHERE a.run_id = COALESCE(
        (SELECT le.run_id FROM last_ends le
         WHERE le.job_id = jobs.id AND le.state IN ('succeeded', 'dead')),
        (SELECT r.id FROM runs r WHERE r.job_id = jobs.id AND r.state IN ('succeeded', 'dead')
         ORDER BY r.scheduled_for DESC LIMIT 1))
     ORDER BY a.attempt DESC LIMIT 1) AS max_rss
FROM jobs ORDER BY jobs.name
""",
        run_counters="SELECT jobs.name, jobs.missed_total, t.state, "
        "COALESCE(SUM(t.ended), 0) AS ended FROM jobs LEFT JOIN run_tallies t "
        "ON t.job_id = jobs.id GROUP BY jobs.id, jobs.name, jobs.missed_total, t.state "
        "ORDER BY jobs.name, t.state",
        duration_tallies="SELECT jobs.name, t.bucket, SUM(t.n) AS n, SUM(t.us) AS us "
        "FROM duration_tallies t JOIN jobs ON jobs.id = t.job_id "
        "GROUP BY jobs.id, jobs.name, t.bucket ORDER BY jobs.name, t.bucket",
        # list --failing: the newest of succeeded/dead is dead, or a retry is under way
        failing_jobs="""
SELECT jobs.id FROM jobs WHERE
    COALESCE((SELECT MAX(r.scheduled_for) FROM runs r
              WHERE r.job_id = jobs.id AND r.state = 'dead'), -1)
    > COALESCE((SELECT MAX(r.scheduled_for) FROM runs r
                WHERE r.job_id = jobs.id AND r.state = 'succeeded'), -1)
    OR EXISTS (SELECT 1 FROM runs r WHERE r.job_id = jobs.id AND r.state = 'failed')
    OR EXISTS (SELECT 1 FROM runs r WHERE r.job_id = jobs.id AND r.state = 'leased'
               AND r.attempt > r.attempt_base + 1)
""",
        # the maintenance window in force at :now (pause --all), the newest if two overlap
        maintenance_now="""
SELECT * FROM maintenance WHERE since <= :now AND ended_at IS NULL
    AND (until_at IS NULL OR until_at > :now)
ORDER BY id DESC LIMIT 1
""",
        maintenance_insert="INSERT INTO maintenance (since, until_at, reason, who) "
        "VALUES (:now, :until, :reason, :who)",
        maintenance_update="UPDATE maintenance SET until_at = :until, reason = :reason, "
        "who = :who WHERE id = :id",
        maintenance_end="UPDATE maintenance SET ended_at = :now WHERE id = :id",
        # pause --all: every window recorded ahead of its time is decided again, in it
        withdraw_all_early_runs="""
DELETE FROM runs WHERE state = 'pending' AND attempt = 0 AND reason = 'schedule'
    AND scheduled_for > :now
RETURNING job_id, scheduled_for
""",
        rewind_next_run="UPDATE jobs SET next_run_at = :t, updated_at = :now "
        "WHERE id = :id AND state = 'active' AND (next_run_at IS NULL OR next_run_at > :t)",
        # plan: how long a job's newest succeeded runs took (their last attempt)
        recent_durations="""
SELECT a.finished_at - a.started_at AS us FROM runs
JOIN attempts a ON a.run_id = runs.id AND a.attempt = runs.attempt
WHERE runs.job_id = ? AND runs.state = 'succeeded' AND a.finished_at IS NOT NULL
ORDER BY runs.scheduled_for DESC LIMIT ?
""",
        # logs NAME: the newest window of the job that has an attempt
        last_attempted_run=run_select
        + """
WHERE runs.id = (SELECT r.id FROM runs r WHERE r.job_id = ? AND r.attempt > 0
                 ORDER BY r.scheduled_for DESC LIMIT 1)""",
        # coverage and backfill: a job's runs of the windows in [first, last]
        window_runs=run_select
        + " WHERE runs.job_id = ? AND runs.scheduled_for >= ? AND runs.scheduled_for <= ?",
        window_states="SELECT id, scheduled_for, state FROM runs "
        "WHERE job_id = ? AND scheduled_for >= ? AND scheduled_for <= ?" + d.for_update,
        insert_job="INSERT INTO jobs ({names}) VALUES ({marks}) RETURNING id",
        update_job="UPDATE jobs SET {sets} WHERE id = ?",
        pause_job="UPDATE jobs SET state = 'paused', paused_reason = 'user', next_run_at = NULL, "
        "updated_at = ? WHERE id = ?",
        resume_job="UPDATE jobs SET state = 'active', paused_reason = NULL, schedule_from = ?, "
        "next_run_at = ?, updated_at = ? WHERE id = ?",
        cancel_job="UPDATE jobs SET state = 'cancelled', next_run_at = NULL, updated_at = ? "
        "WHERE id = ?",
        delete_job="DELETE FROM jobs WHERE id = ?",
        job_revision_number="SELECT revision FROM jobs WHERE id = ?",
        set_job_revision="UPDATE jobs SET revision = ? WHERE id = ?",
        insert_revision="INSERT INTO job_revisions "
        "(job_id, revision, at, who, source, changes, definition) VALUES (?, ?, ?, ?, ?, ?, ?)",
        revisions_of_job="SELECT * FROM job_revisions WHERE job_id = ? ORDER BY revision",
        insert_run="""
INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, catchup_from, attempt,
    max_attempts, not_before, priority, run_key, env, settings, created_at, finished_at,
    job_revision, deadline_at)
VALUES (:job_id, :scheduled_for, :state, :skip_reason, :reason, :catchup_from, 0,
    :max_attempts, :not_before, :priority, :run_key, :env, :settings, :now, :finished_at,
    :job_revision, :deadline_at)
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING id
""",
        insert_run_lock="INSERT INTO run_locks (run_id, name) VALUES (?, ?)",
        # windows the scheduler recorded ahead of their time (scheduler.FIRE_AHEAD_SECONDS)
        # that have not come yet: a pause, an edit or a cancel of their job takes them back
        withdraw_early_runs="""
DELETE FROM runs WHERE job_id = ? AND state = 'pending' AND attempt = 0
    AND reason = 'schedule' AND scheduled_for > ?
RETURNING scheduled_for
""",
        cancel_waiting_run="""
UPDATE runs SET state = 'cancelled', finished_at = ?, last_error = COALESCE(last_error, 'cancelled')
WHERE id = ? AND state IN ('pending', 'failed')
""",
        request_cancel="UPDATE runs SET cancel_requested = 1 WHERE id = ? AND state = 'leased'",
        retry_dead="""
UPDATE runs SET state = 'pending', attempt_base = attempt,
    max_attempts = attempt + (SELECT retries + 1 FROM jobs WHERE jobs.id = runs.job_id),
    not_before = ?, finished_at = NULL, leased_by = NULL, lease_until = NULL,
    cancel_requested = 0, hook_status = NULL
WHERE id = ?
""",
        # backfill: a skipped or dead window's run pending again, attempts numbered on
        requeue_backfill="""
UPDATE runs SET state = 'pending', reason = 'backfill', skip_reason = NULL,
    attempt_base = attempt, max_attempts = attempt + ?, not_before = ?, finished_at = NULL,
    leased_by = NULL, lease_until = NULL, cancel_requested = 0, hook_status = NULL
WHERE id = ? AND state IN ('skipped', 'dead')
""",
        insert_run_lock_once="INSERT INTO run_locks (run_id, name) VALUES (?, ?) "
        "ON CONFLICT (run_id, name) DO NOTHING",
        prune="""
DELETE FROM runs WHERE state IN ('succeeded', 'dead', 'cancelled', 'skipped')
AND COALESCE(finished_at, scheduled_for) < ?
""",
        # jobs with finished runs beyond --keep-runs (by their tallies) or a --keep-for
        # one job of a pass that looks only at what changed (retention_changed_*)
        retention_job="""
SELECT jobs.id, jobs.keep_runs, jobs.keep_for_seconds,
    (SELECT COALESCE(SUM(t.kept), 0) FROM run_tallies t WHERE t.job_id = jobs.id) AS kept
FROM jobs WHERE jobs.id = ?
""",
        # what changed since a pass's marks, each through an index: finished runs newer
        # than the marks' newest (the primary key), those open then ({marks}: their ids),
        # the jobs with a --keep-for (jobs_keep_for) and the jobs edited (jobs_updated)
        retention_changed_new="SELECT DISTINCT job_id FROM runs WHERE id > ? "
        f"AND state IN {FINISHED}",
        retention_changed_open="SELECT DISTINCT job_id FROM runs WHERE id IN ({marks}) "
        f"AND state IN {FINISHED}",
        retention_keep_for="SELECT id FROM jobs WHERE keep_for_seconds IS NOT NULL",
        # (an edit matters only to a job with more kept than --keep-runs, or a --keep-for:
        # right after an import every job is edited and none has a run)
        retention_edited="""
SELECT jobs.id FROM jobs WHERE jobs.updated_at >= ? AND (jobs.keep_for_seconds IS NOT NULL
    OR (SELECT COALESCE(SUM(t.kept), 0) FROM run_tallies t WHERE t.job_id = jobs.id)
    > jobs.keep_runs)
""",
        retention_max_run="SELECT COALESCE(MAX(id), 0) AS n FROM runs",
        retention_open_runs="SELECT id FROM runs WHERE state IN ('pending', 'leased', 'failed')",
        retention_candidates="""
SELECT jobs.id, jobs.keep_runs, jobs.keep_for_seconds,
    (SELECT COALESCE(SUM(t.kept), 0) FROM run_tallies t WHERE t.job_id = jobs.id) AS kept
FROM jobs WHERE jobs.id > ? AND (jobs.keep_for_seconds IS NOT NULL OR
    (SELECT COALESCE(SUM(t.kept), 0) FROM run_tallies t WHERE t.job_id = jobs.id)
    > jobs.keep_runs)
ORDER BY jobs.id LIMIT ?
""",
        # the newest finished window beyond the N kept
        nth_finished=f"SELECT scheduled_for FROM runs WHERE job_id = ? AND state IN {FINISHED} "
        "ORDER BY scheduled_for DESC LIMIT 1 OFFSET ?",
        trim_ids=f"SELECT id FROM runs WHERE job_id = ? AND state IN {FINISHED} "
        "AND scheduled_for <= ? ORDER BY scheduled_for LIMIT ?",
        # {marks}: the run ids; a notification still to deliver is kept
        trim_notifications="DELETE FROM notifications WHERE run_id IN ({marks}) "
        "AND state <> 'pending'",
        trim_runs=f"DELETE FROM runs WHERE id IN ({{marks}}) AND state IN {FINISHED}",
        # see README, Run policies and what a run costs --after: the jobs that follow another, and
        # the runs of an upstream job
        # that ended since a cursor (its window is the downstream run's)
        after_jobs="SELECT * FROM jobs WHERE trigger_kind = 'after' AND state = 'active' "
        "ORDER BY id",
        any_after_job="SELECT 1 FROM jobs WHERE trigger_kind = 'after' AND state = 'active' "
        "LIMIT 1",
        # every job that follows another, whatever its state (an export holds them all)
        all_after_jobs="SELECT name, trigger_expr FROM jobs WHERE trigger_kind = 'after' "
        "ORDER BY name",
        after_upstream_runs="SELECT id, scheduled_for, state, finished_at FROM runs "
        "WHERE job_id = ? AND state IN ('succeeded', 'dead', 'cancelled') AND finished_at > ? "
        "ORDER BY finished_at, id",
        after_cursor="UPDATE jobs SET schedule_from = ? WHERE id = ? AND schedule_from < ?",
        # see README, Run policies and what a run costs --pause-after-failures: the job's most
        # recent runs that ended succeeded
        # or dead, off the (job_id, state, scheduled_for) index
        job_pause_rule="SELECT pause_after_failures FROM jobs WHERE id = ?",
        recent_final_states="SELECT state FROM runs WHERE job_id = ? "
        "AND state IN ('succeeded', 'dead') ORDER BY scheduled_for DESC LIMIT ?",
        pause_by_failures="UPDATE jobs SET state = 'paused', paused_reason = 'failures', "
        "next_run_at = NULL, updated_at = ? WHERE id = ? AND state = 'active' RETURNING name",
        # {table}, {names}, {named}: a row of a copied database, by column name
        insert_row="INSERT INTO {table} ({names}) VALUES ({named})",
        set_last_window="UPDATE jobs SET last_window_at = ? WHERE id = ?",
        insert_row_with_id=(
            f"INSERT INTO {{table}} (id, {{names}}){d.given_ids} VALUES (:id, {{named}})"
        ),
        # {where}: the search and the job state. Each job's newest run that ended (not
        # skipped) is kept in last_ends by triggers; its newest open run, if newer, is the
        # last (dash_open_runs, read apart, once): no run of the history is looked at
        dash_job_facts="""
SELECT j.id, j.name, j.state, j.paused_reason, e.state AS end_state,
    e.scheduled_for AS end_window
FROM jobs j LEFT JOIN last_ends e ON e.job_id = j.id {where}
""",
        dash_job_names="SELECT j.id, j.name FROM jobs j {where}",
        dash_job_names_by_ids="SELECT id, name FROM jobs WHERE id IN ({marks})",
        # the runs waiting to start, running or waiting to be retried, by job and state:
        # few, off (state, not_before); the earliest due, the newest window
        dash_open_runs="SELECT job_id, state, MIN(not_before) AS due, "
        "MAX(scheduled_for) AS newest FROM runs "
        "WHERE state IN ('pending', 'leased', 'failed') GROUP BY job_id, state",
        dash_failed_notifications="SELECT job_id, COUNT(*) AS n FROM notifications "
        "WHERE state = 'failed' AND ended_at >= ? AND job_id IS NOT NULL GROUP BY job_id",
        # {marks}: one per id
        dash_jobs_by_ids="SELECT * FROM jobs WHERE id IN ({marks})",
        dash_last_runs=run_select
        + f"""
WHERE runs.id IN (
    SELECT (SELECT r.id FROM runs r WHERE r.job_id = j.id AND {_NOT_SKIPPED}
            ORDER BY r.scheduled_for DESC LIMIT 1)
    FROM jobs j WHERE j.id IN ({{marks}})
)""",
        # one count a state, each off the index on (state, scheduled_for, id) alone
        dash_run_counts_since=" UNION ALL ".join(
            f"SELECT '{state}' AS state, COUNT(*) AS n FROM runs "
            f"WHERE state = '{state}' AND scheduled_for >= :since"
            for state in _RUN_STATES
        ),
        dash_busy_workers="SELECT leased_by, COUNT(*) AS n FROM runs "
        "WHERE state = 'leased' AND leased_by IS NOT NULL GROUP BY leased_by",
        # a job's newest runs for its strip: id, state and window alone, off the UNIQUE
        # (job_id, scheduled_for) index
        dash_strip_runs="SELECT id, state, scheduled_for FROM runs WHERE job_id = ? "
        "ORDER BY scheduled_for DESC LIMIT ?",
        dash_finished_runs=run_select + " WHERE runs.job_id = ? AND la.finished_at IS NOT NULL"
        " ORDER BY runs.scheduled_for DESC LIMIT ?",
        # {marks}: one per job id; then the oldest window, the end, the end, the start, the
        # most bars. The newest first, so the limit keeps the latest. The runs off the
        # UNIQUE (job_id, scheduled_for) index, their attempts by run (the job's names
        # are read apart: dash_job_names_by_ids)
        dash_timeline=f"""
SELECT a.run_id, a.attempt, a.started_at, a.finished_at, runs.job_id,
    runs.state, runs.attempt AS run_attempt
FROM runs {d.attempts_of_each_run}
WHERE runs.job_id IN ({{marks}}) AND runs.scheduled_for >= ? AND runs.scheduled_for < ?
    AND a.started_at < ? AND (a.finished_at IS NULL OR a.finished_at >= ?)
ORDER BY a.started_at DESC, a.run_id DESC, a.attempt DESC
LIMIT ?
""",
        # the jobs that have an attempt on the timeline (as dash_timeline, of every job):
        # the oldest window, the end, the end, the start; off the runs_window index
        dash_timeline_jobs=f"""
SELECT DISTINCT runs.job_id FROM runs {d.attempts_of_each_run}
WHERE runs.scheduled_for >= ? AND runs.scheduled_for < ?
    AND a.started_at < ? AND (a.finished_at IS NULL OR a.finished_at >= ?)
""",
    )
