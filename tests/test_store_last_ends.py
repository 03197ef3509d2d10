"""Each job's last run state as the overview reads it (README, The dashboard's pages; issue 35), on both
backends: the newest run (by window) among those that ended is kept in ``last_ends`` by
triggers, in the transaction that changes a run; the newest open run is read live. After
every kind of change (an end, a retry, retry-dead, a cancel, retention, prune, a run or a
job deleted, ``db copy``, the migration over an existing database) the overview's
``last_state`` must be what a look at every run would say."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import BACKEND, StoreView

from jobctl.clock import to_us
from jobctl.models import JobSpec, Overlap, Trigger, TriggerKind

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)


def manual(name: str, retries: int = 0, **kw: Any) -> JobSpec:
    return JobSpec(
        name,
        Trigger(TriggerKind.MANUAL, "UTC"),
        "true",
        retries=retries,
        backoff_seconds=1,
        overlap=Overlap.ALLOW,
        **kw,
    )


@pytest.fixture
def store(db: Any) -> Any:
    with StoreView(db) as view:
        yield view


def play(store: StoreView, name: str, window: datetime, code: int) -> int:
    """A run of ``name`` in ``window``, claimed and ended with ``code``."""
    run, _ = store.enqueue_run(name, window)
    claimed, _ = store.claim("d", "h", window, 60, limit=100)
    mine = next(c for c in claimed if c.run.id == run.id)
    store.finish(mine.run, mine.run.attempt, "d", window + timedelta(seconds=1), code)
    return int(run.id)


def looked_at(store: StoreView) -> dict[str, str | None]:
    """Per job, the state of its newest run by window that was not skipped: every run
    looked at (what the overview said before ``last_ends``)."""
    rows = store.conn.execute(
        "SELECT j.name, (SELECT r.state FROM runs r WHERE r.job_id = j.id "
        "AND r.state <> 'skipped' ORDER BY r.scheduled_for DESC LIMIT 1) FROM jobs j"
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def kept_rows(store: StoreView) -> dict[int, tuple[int, str]]:
    rows = store.conn.execute("SELECT job_id, run_id, state FROM last_ends").fetchall()
    return {int(r[0]): (int(r[1]), r[2]) for r in rows}


def newest_ended(store: StoreView) -> dict[int, tuple[int, str]]:
    """What ``last_ends`` must hold: per job, its newest run by window that is now
    succeeded, dead or cancelled."""
    rows = store.conn.execute(
        "SELECT r.job_id, r.id, r.state FROM runs r WHERE r.state IN "
        "('succeeded', 'dead', 'cancelled') AND NOT EXISTS (SELECT 1 FROM runs n "
        "WHERE n.job_id = r.job_id AND n.state IN ('succeeded', 'dead', 'cancelled') "
        "AND n.scheduled_for > r.scheduled_for)"
    ).fetchall()
    return {int(r[0]): (int(r[1]), r[2]) for r in rows}


def overview(store: StoreView) -> dict[str, str | None]:
    facts = store.handle.dashboard.job_facts(None, None, T0)
    return {f.name: (f.last_state.value if f.last_state else None) for f in facts}


def check(store: StoreView) -> dict[str, str | None]:
    assert kept_rows(store) == newest_ended(store)
    seen = overview(store)
    assert seen == looked_at(store)
    return seen


def test_the_last_state_follows_ends_retries_and_cancels(store: StoreView) -> None:
    store.add_job(manual("j"), T0)
    store.add_job(manual("flaky", retries=1), T0)
    assert check(store) == {"j": None, "flaky": None}

    first = play(store, "j", T0 + H, 0)
    assert check(store)["j"] == "succeeded"
    # an open run of a newer window is the last, whatever ended before it
    pending, _ = store.enqueue_run("j", T0 + 2 * H)
    assert check(store)["j"] == "pending"
    [c], _ = store.claim("d", "h", T0 + 2 * H, 60)
    assert check(store)["j"] == "leased"
    store.finish(c.run, c.run.attempt, "d", T0 + 2 * H, 3)
    assert check(store)["j"] == "dead"
    # retry-dead puts the dead run back: the row goes back to the run before it
    store.retry_dead(T0 + 3 * H, job_name="j")
    assert check(store)["j"] == "pending"
    assert kept_rows(store)[store.get_job("j").id] == (first, "succeeded")
    [c], _ = store.claim("d", "h", T0 + 3 * H, 60)
    store.finish(c.run, c.run.attempt, "d", T0 + 3 * H, 0)
    assert check(store)["j"] == "succeeded"
    assert kept_rows(store)[store.get_job("j").id] == (pending.id, "succeeded")
    # an older window that ends later does not take the place of the newest
    play(store, "j", T0 - H, 3)
    assert check(store)["j"] == "succeeded"
    cancelled, _ = store.enqueue_run("j", T0 + 4 * H)
    store.cancel_runs([cancelled.id], T0 + 4 * H)
    assert check(store)["j"] == "cancelled"

    # a failed attempt waiting for its retry is the last, then its end
    store.enqueue_run("flaky", T0)
    [c], _ = store.claim("d", "h", T0, 60)
    store.finish(c.run, c.run.attempt, "d", T0, 1)
    assert check(store)["flaky"] == "failed"
    [c], _ = store.claim("d", "h", T0 + H, 60)
    store.finish(c.run, c.run.attempt, "d", T0 + H, 1)
    assert check(store)["flaky"] == "dead"

    # a skipped window is never the last
    job = store.get_job("flaky")
    with store.write() as w:
        w.execute(
            "INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, settings, "
            "created_at) VALUES (?, ?, 'skipped', 'missed', 'schedule', '{}', 0)",
            (job.id, to_us(T0 + 5 * H)),
        )
    assert check(store)["flaky"] == "dead"


def trim_all(store: StoreView, now: datetime) -> int:
    deleted, cursor = 0, 0
    while True:
        n, nxt = store.daemon.trim_history(now, after_job_id=cursor, max_rows=3)
        deleted += n
        if nxt is None:
            return deleted
        cursor = nxt


def test_retention_prune_and_deletes_leave_the_last_state_right(store: StoreView) -> None:
    store.add_job(manual("none-kept", keep_runs=0), T0)
    store.add_job(manual("one-kept", keep_runs=1), T0)
    store.add_job(manual("pruned"), T0)
    store.add_job(manual("gone"), T0)
    for i in range(4):
        play(store, "none-kept", T0 + i * H, 3 if i == 3 else 0)
        play(store, "one-kept", T0 + i * H, 0 if i == 3 else 3)
        play(store, "gone", T0 + i * H, 0)
    play(store, "pruned", T0, 3)
    newest = play(store, "pruned", T0 + 10 * H, 0)
    assert check(store) == {
        "none-kept": "dead",
        "one-kept": "succeeded",
        "pruned": "succeeded",
        "gone": "succeeded",
    }
    # retention: every finished run of none-kept goes (its last state with them), the
    # newest of one-kept stays
    assert trim_all(store, T0 + 20 * H) == 4 + 3
    assert check(store)["none-kept"] is None
    assert check(store)["one-kept"] == "succeeded"
    # prune deletes the older run of "pruned" first; then a delete of its newest run
    # brings the row back to none, and a newer ended run takes it
    assert store.prune(T0 + 5 * H) >= 1
    assert check(store)["pruned"] == "succeeded"
    with store.write() as w:
        w.execute("DELETE FROM runs WHERE id = ?", (newest,))
    assert check(store)["pruned"] is None
    play(store, "pruned", T0 + 11 * H, 3)
    assert check(store)["pruned"] == "dead"
    # a job deleted with its runs takes its row with it
    gone = store.get_job("gone").id
    store.delete_job("gone", force=True)
    assert gone not in kept_rows(store)
    check(store)


def test_a_random_history_keeps_the_row_right(store: StoreView) -> None:
    """Ends, retries, cancels, retry-dead, deletes and prunes in a random order: after
    each, ``last_ends`` is the newest ended run of every job."""
    rng = random.Random(35)
    names = [f"r{i}" for i in range(4)]
    for name in names:
        store.add_job(manual(name, retries=rng.choice([0, 1])), T0)
    windows = list(range(40))
    rng.shuffle(windows)
    now = T0 + 100 * H
    for step, w in enumerate(windows):
        name = rng.choice(names)
        op = rng.random()
        window = T0 + w * H
        if op < 0.5:
            play(store, name, window, rng.choice([0, 0, 3]))
        elif op < 0.6:
            run, _ = store.enqueue_run(name, window)
            store.cancel_runs([run.id], now)
        elif op < 0.7:
            store.enqueue_run(name, window)
        elif op < 0.8:
            store.retry_dead(now, job_name=name)
        elif op < 0.9:
            ids = [r.id for r in store.list_runs(name, limit=100)]
            if ids:
                with store.write() as c:
                    c.execute("DELETE FROM runs WHERE id = ?", (rng.choice(ids),))
        else:
            store.prune(T0 + rng.randrange(40) * H)
        check(store)
        now += timedelta(minutes=1) * (step + 1)


@pytest.fixture
def other_db(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    if BACKEND == "postgresql":
        dbs = request.getfixturevalue("pg_databases")
        url = dbs.new()
        yield url
        dbs.drop(url)
    else:
        yield tmp_path / "copy.db"


def test_db_copy_with_history_fills_the_row(store: StoreView, other_db: Any) -> None:
    from jobctl.store.transfer import read_all

    store.add_job(manual("a"), T0)
    store.add_job(manual("b"), T0)
    store.add_job(manual("never"), T0)
    play(store, "a", T0, 0)
    play(store, "a", T0 + H, 3)
    play(store, "b", T0 + H, 0)
    cancelled, _ = store.enqueue_run("b", T0 + 2 * H)
    store.cancel_runs([cancelled.id], T0 + 2 * H)
    want = check(store)
    with StoreView(other_db) as target:
        target.commands.load_copy(read_all(store.commands, history=True), T0, history=True)
        assert check(target) == want == {"a": "dead", "b": "cancelled", "never": None}


def _downgrade(store: StoreView) -> None:
    """The database as a jobctl before ``last_ends`` left it (the rows stay)."""
    with store.write() as c:
        if BACKEND == "postgresql":
            c.execute("DROP TABLE jobctl.last_ends")
            c.execute("DROP FUNCTION jobctl.keep_last_end() CASCADE")
        else:
            for name in ("insert", "enter", "leave", "delete"):
                c.execute(f"DROP TRIGGER runs_last_end_{name}")
            c.execute("DROP TABLE last_ends")


def _migrate_last_ends(store: StoreView) -> None:
    """The ``last_ends`` migration, as the store applies it to an older database (the
    later migrations are there already: only this one runs again)."""
    if BACKEND == "postgresql":
        from jobctl.store.postgresql.schema import migrations

        (sql,) = [sql for number, sql in migrations() if "last_ends" in sql and number == 7]
        with store.handle.db.conn.transaction():
            store.handle.db.conn.execute(sql)
    else:
        from jobctl.store.sqlite.schema import migrations, split_statements

        (sql,) = [sql for number, sql in migrations() if number == 9]
        with store.write() as c:
            for statement in split_statements(sql):
                c.execute(statement)


def test_the_migration_fills_the_row_of_an_existing_database(db: Any) -> None:
    with StoreView(db) as store:
        store.add_job(manual("a"), T0)
        store.add_job(manual("b"), T0)
        store.add_job(manual("never"), T0)
        play(store, "a", T0 + H, 3)
        play(store, "a", T0, 0)
        play(store, "b", T0, 0)
        store.enqueue_run("b", T0 + H)
        want = check(store)
        _downgrade(store)
        _migrate_last_ends(store)
    with StoreView(db) as store:
        assert check(store) == want == {"a": "dead", "b": "pending", "never": None}


def test_the_peak_memory_gauge_is_the_newest_succeeded_or_dead_runs(store: StoreView) -> None:
    """jobctl_run_max_rss_bytes (README, Run policies and what a run costs) reads the newest ended run off ``last_ends``;
    behind a newer cancelled run it is still the newest that succeeded or died."""
    store.add_job(manual("m"), T0)

    def peak(run_id: int, rss: int) -> None:
        with store.write() as c:
            c.execute(f"UPDATE attempts SET max_rss = {rss} WHERE run_id = {run_id}")

    def gauge() -> int | None:
        return {name: rss for name, _, rss in store.run_costs_by_job()}["m"]

    assert gauge() is None
    peak(play(store, "m", T0, 0), 111)
    peak(play(store, "m", T0 + H, 0), 222)
    assert gauge() == 222
    older = play(store, "m", T0 - H, 0)  # an older window ending later changes nothing
    peak(older, 999)
    assert gauge() == 222
    cancelled, _ = store.enqueue_run("m", T0 + 2 * H)
    store.cancel_runs([cancelled.id], T0 + 2 * H)
    assert kept_rows(store)[store.get_job("m").id] == (cancelled.id, "cancelled")
    assert gauge() == 222
    peak(play(store, "m", T0 + 3 * H, 3), 333)  # dead
    assert gauge() == 333
