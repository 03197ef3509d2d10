"""Retention (README, History: what is kept): the scheduler-lease holder deletes each job's finished runs beyond
``--keep-runs`` or older than ``--keep-for``, a bounded number a transaction, never a
pending, failed or leased run, with their attempts and delivered notifications, and
never a counter; on both backends, through the store and under a real daemon.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from conftest import StoreView, wait_until

from jobctl.clock import to_us
from jobctl.models import JobSpec, Overlap, RunState, Trigger, TriggerKind

T0 = datetime(2026, 1, 5, tzinfo=UTC)
NOW = T0 + timedelta(days=30)
H = timedelta(hours=1)


@pytest.fixture
def store(db):
    with StoreView(db) as view:
        yield view


def manual(name: str, **kw) -> JobSpec:
    return JobSpec(name, Trigger(TriggerKind.MANUAL, "UTC"), "true", retries=0, **kw)


def ended(store: StoreView, name: str, at: datetime, code: int = 0) -> int:
    run, _ = store.enqueue_run(name, at)
    (claimed,), _ = store.claim("d", "h", at, 60)
    assert claimed.run.id == run.id
    store.finish(claimed.run, claimed.run.attempt, "d", at + timedelta(seconds=1), code)
    return run.id


def states(store: StoreView, name: str) -> dict[int, str]:
    return {r.id: r.state.value for r in store.list_runs(name, limit=10_000)}


def trim_all(store: StoreView, now: datetime = NOW, max_rows: int = 500) -> list[int]:
    """Steps until the pass is done; each step's count."""
    counts, cursor = [], 0
    while True:
        deleted, nxt = store.daemon.trim_history(now, after_job_id=cursor, max_rows=max_rows)
        counts.append(deleted)
        assert deleted <= max_rows
        if nxt is None:
            return counts
        cursor = nxt


def finished_totals(store: StoreView, job_id: int) -> dict[str, int]:
    rows = store.conn.execute(
        "SELECT state, SUM(ended) FROM run_tallies WHERE job_id = ? GROUP BY state", (job_id,)
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def test_keep_runs_deletes_the_oldest_finished_and_never_an_open_run(store) -> None:
    job = store.add_job(manual("k", keep_runs=3, overlap=Overlap.ALLOW), T0)
    old = [ended(store, "k", T0 + i * H, code=7 if i == 1 else 0) for i in range(1, 4)]
    cancelled, _ = store.enqueue_run("k", T0 + 4 * H)
    store.cancel_runs([cancelled.id], T0 + 4 * H)
    kept = [ended(store, "k", T0 + i * H) for i in range(5, 8)]
    leased, _ = store.enqueue_run("k", T0 + 8 * H)
    store.claim("d", "h", T0 + 8 * H, 60)
    pending, _ = store.enqueue_run("k", T0)  # the oldest window of all, still waiting
    totals = finished_totals(store, job.id)

    assert sum(trim_all(store)) == 4
    left = states(store, "k")
    assert set(left) == {pending.id, leased.id, *kept}
    assert left[pending.id] == "pending" and left[leased.id] == "leased"
    assert all(store.get_attempts(i) == [] for i in old)
    assert finished_totals(store, job.id) == totals  # counters untouched
    assert sum(trim_all(store)) == 0  # nothing more: the job keeps 3


def test_keep_for_deletes_finished_windows_older_than_that(store) -> None:
    store.add_job(manual("age", keep_for_seconds=86400.0), T0)
    old = ended(store, "age", NOW - timedelta(days=3))
    edge = ended(store, "age", NOW - timedelta(seconds=86400))  # exactly keep_for old: kept
    new = ended(store, "age", NOW - H)
    failed_id = store.enqueue_run("age", NOW - timedelta(days=5))[0].id
    assert sum(trim_all(store)) == 1
    assert set(states(store, "age")) == {edge, new, failed_id}
    assert old not in states(store, "age")


def test_each_transaction_deletes_at_most_its_budget(store) -> None:
    store.add_job(manual("big", keep_runs=5), T0)
    store.add_job(manual("small", keep_runs=1), T0)
    for i in range(40):
        ended(store, "big", T0 + i * H)
    for i in range(4):
        ended(store, "small", T0 + i * H)
    counts = trim_all(store, max_rows=10)
    assert sum(counts) == 35 + 3
    assert max(counts) == 10 and len(counts) >= 4
    assert len(states(store, "big")) == 5 and len(states(store, "small")) == 1


def test_paused_jobs_and_skipped_windows_are_trimmed_too(store) -> None:
    store.add_job(manual("p", keep_runs=1), T0)
    for i in range(3):
        ended(store, "p", T0 + i * H)
    store.pause_job("p", NOW)
    job = store.get_job("p")
    with store.write() as c:
        c.execute(
            "INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, settings, "
            "created_at) VALUES (?, ?, 'skipped', 'missed', 'schedule', '{}', 0)",
            (job.id, to_us(T0 - H)),
        )
    assert sum(trim_all(store)) == 3
    assert [r.scheduled_for for r in store.list_runs("p")] == [T0 + 2 * H]


def test_delivered_notifications_go_with_their_run_and_undelivered_stay(store) -> None:
    job = store.add_job(manual("n", keep_runs=0), T0)
    run_id = ended(store, "n", T0)
    with store.write() as c:
        for state in ("sent", "failed", "pending"):
            c.execute(
                "INSERT INTO notifications (key, channel, cause, event, job_id, job_name, "
                "run_id, text, state, next_try_at, created_at) "
                "VALUES (?, 'ch', ?, 'dead', ?, 'n', ?, 't', ?, 0, 0)",
                (f"k-{state}", f"c-{state}", job.id, run_id, state),
            )
    assert sum(trim_all(store)) == 1
    left = store.conn.execute("SELECT state FROM notifications WHERE run_id = ?", (run_id,))
    assert [r[0] for r in left.fetchall()] == ["pending"]


def test_existing_and_new_jobs_get_the_default_of_1000(store) -> None:
    store.add_job(manual("d"), T0)
    assert store.get_job("d").spec.keep_runs == 1000
    assert store.get_job("d").spec.keep_for_seconds is None
    edited = store.edit_job("d", {"keep_runs": 4}, NOW)
    assert edited.spec == replace(store.get_job("d").spec, keep_runs=4)


def test_a_daemon_holding_the_lease_trims_history(db, store, start_daemon) -> None:
    store.add_job(manual("live", keep_runs=2), T0)
    ids = [ended(store, "live", T0 + i * H) for i in range(6)]
    still_open = store.enqueue_run("live", T0 - H)[0].id
    store.pause_job("live", NOW)  # the daemon runs nothing of it: only retention acts
    daemon = start_daemon()
    wait_until(lambda: len(states(store, "live")) == 3, 20, what="retention to trim")
    assert set(states(store, "live")) == {still_open, ids[4], ids[5]}
    assert states(store, "live")[still_open] == RunState.PENDING.value
    daemon.wait_log("retention: deleted 4 finished runs")


# ---------------------------------------------------------------------- a pass after the first


def trim_since(store: StoreView, since, now: datetime = NOW) -> int:
    """A whole pass that looks only at what changed since ``since`` (the last pass's marks)."""
    total, cursor = 0, 0
    while True:
        deleted, nxt = store.daemon.trim_history(
            now, after_job_id=cursor, max_rows=500, since=since
        )
        total += deleted
        if nxt is None:
            return total
        cursor = nxt


def test_a_later_pass_looks_only_at_the_jobs_that_changed_since_the_last(store) -> None:
    """Issue 41: an idle daemon's passes read no job; what changed since the last pass's
    start is found through indexes: runs ended since (new ones, and those open then),
    edits, and the jobs with a --keep-for."""
    for name in ("quiet", "ended", "open", "edited"):
        store.add_job(manual(name, keep_runs=5, overlap=Overlap.ALLOW), T0)
    store.add_job(manual("aged", keep_for_seconds=86400.0), T0)
    for i in range(3):
        for name in ("quiet", "ended", "open", "edited"):
            ended(store, name, T0 + i * H)
    store.enqueue_run("open", T0 + 3 * H)
    (held,), _ = store.claim("d", "h", T0 + 3 * H, 60)
    marks = store.daemon.retention_marks(T0 + 4 * H)
    assert held.run.id in marks.open_run_ids

    # nothing changed: the pass deletes nothing (and looks at no job but the aged one)
    assert trim_since(store, marks, T0 + 4 * H) == 0
    # quiet goes over its limit without a run ending (an edit of the database behind the
    # store's back): a pass from the marks does not look at it, a full pass does
    with store.write() as c:
        c.execute("UPDATE jobs SET keep_runs = 1 WHERE name = 'quiet'")
    assert trim_since(store, marks) == 0
    assert len(states(store, "quiet")) == 3
    # a run ended since (a new one), the run open at the marks ended, an edit
    with store.write() as c:
        c.execute("UPDATE jobs SET keep_runs = 1 WHERE name IN ('ended', 'open')")
    ended(store, "ended", T0 + 5 * H)
    store.finish(held.run, held.run.attempt, "d", T0 + 5 * H)
    store.edit_job("edited", {"keep_runs": 1}, T0 + 5 * H)
    ended(store, "aged", NOW - timedelta(days=3))
    assert trim_since(store, marks) == 3 + 3 + 2 + 1
    assert [len(states(store, n)) for n in ("ended", "open", "edited", "aged")] == [1, 1, 1, 0]
    assert len(states(store, "quiet")) == 3  # untouched: nothing of it changed
    assert sum(trim_all(store)) == 2  # a full pass (a new lease holder's first) sees all


def test_a_pass_finds_the_changed_jobs_once_and_never_an_edited_job_with_nothing_kept(
    store, monkeypatch
) -> None:
    """Right after an import every job is edited: a pass from the marks finds the jobs
    to look at once (at its first step, not again at each step: that made a pass over
    100,000 edited jobs quadratic, a daemon's whole core for minutes), and an edited job
    with no more kept than its --keep-runs is not among them."""
    from jobctl.store import retention

    for i in range(120):
        store.add_job(manual(f"kept{i}", keep_runs=1, overlap=Overlap.ALLOW), T0)
        for k in range(2):
            ended(store, f"kept{i}", T0 + k * H)
    marks = store.daemon.retention_marks(T0 + 3 * H)
    for i in range(200):  # an import: edited since the marks, no run kept
        store.add_job(manual(f"fresh{i}", keep_runs=1), T0 + 4 * H)
    for i in range(120):  # edits that matter: more kept than --keep-runs
        store.edit_job(f"kept{i}", {"description": "x"}, T0 + 4 * H)
    calls = []
    real = retention.changed_jobs

    def counted(db, c, since):
        ids = real(db, c, since)
        calls.append(len(ids))
        return ids

    monkeypatch.setattr(retention, "changed_jobs", counted)
    assert trim_since(store, marks, T0 + 5 * H) == 120  # two steps of at most 100 jobs
    assert calls == [120]
