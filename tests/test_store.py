"""The store: schema and migrations, fencing, claims, windows."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from jobctl.errors import Conflict, NotFound, StoreError
from jobctl.models import JobSpec, Overlap, RunReason, RunState, Trigger, TriggerKind
from jobctl.store import SCHEMA_VERSION, Store, WindowRow, _migrations, schema_sql, split_statements

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def manual(name: str, **kw) -> JobSpec:
    return JobSpec(name=name, trigger=Trigger(TriggerKind.MANUAL, tz="UTC"), command="true", **kw)


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "j.db")
    yield s
    s.close()


def _dump(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    return conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()


def test_migrations_reproduce_schema_sql(tmp_path):
    migrated = Store.open(tmp_path / "m.db")
    reference = sqlite3.connect(":memory:")
    for stmt in split_statements(schema_sql()):
        reference.execute(stmt)
    assert [tuple(r) for r in migrated.schema_dump()] == [tuple(r) for r in _dump(reference)]
    assert migrated.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert max(n for n, _ in _migrations()) == SCHEMA_VERSION


def test_newer_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="newer"):
        Store.open(path)
    assert path.read_bytes() == before


def test_garbage_file_is_a_store_error(tmp_path):
    path = tmp_path / "g.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError):
        Store.open(path)


def test_wal_mode_and_permissions(tmp_path):
    path = tmp_path / "sub" / "j.db"
    s = Store.open(path)
    s.add_job(manual("a"), T0)
    assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert (path.stat().st_mode & 0o777) == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    for extra in ("-wal", "-shm"):
        p = path.with_name(path.name + extra)
        assert (p.stat().st_mode & 0o777) == 0o600
    s.close()


def test_add_conflict_and_replace(store):
    store.add_job(manual("a"), T0)
    with pytest.raises(Conflict):
        store.add_job(manual("a"), T0)
    job = store.add_job(manual("a", description="x"), T0, replace_existing=True)
    assert job.spec.description == "x"
    with pytest.raises(NotFound):
        store.get_job("nope")


def _claim(store, daemon="d1", now=T0, lease=30.0, limit=10):
    claimed, dead = store.claim_runs(daemon, "host", now, lease, limit=limit)
    return [c.run for c in claimed], dead


def test_claim_is_exclusive_and_fenced(store):
    store.add_job(manual("a"), T0)
    run, created = store.enqueue_run("a", T0)
    assert created
    got, _ = _claim(store, "d1")
    assert [r.id for r in got] == [run.id] and got[0].attempt == 1
    again, _ = _claim(store, "d2")
    assert again == []
    # the lease expires: d2 takes the run over as attempt 2; d1's late writes are rejected
    later = T0 + timedelta(seconds=31)
    taken, _ = _claim(store, "d2", now=later)
    assert taken[0].attempt == 2
    ok, _ = store.finish_attempt(
        run.id,
        1,
        "d1",
        later,
        exit_code=0,
        error=None,
        output=b"",
        output_bytes=0,
        outcome=RunState.SUCCEEDED,
    )
    assert not ok
    _leader, lost, _ = store.heartbeat("d1", later, 30, want_leader=False, held=[(run.id, 1)])
    assert lost == {run.id}
    attempts = store.get_attempts(run.id)
    assert [(a.attempt, a.error) for a in attempts] == [(1, "lost"), (2, None)]
    ok, _ = store.finish_attempt(
        run.id,
        2,
        "d2",
        later,
        exit_code=0,
        error=None,
        output=b"hi",
        output_bytes=2,
        outcome=RunState.SUCCEEDED,
    )
    assert ok and store.get_run(run.id).state is RunState.SUCCEEDED


def test_claim_priority_order(store):
    store.add_job(manual("lo", overlap=Overlap.ALLOW), T0)
    store.add_job(manual("hi", priority=5), T0)
    a, _ = store.enqueue_run("lo", T0)
    b, _ = store.enqueue_run("lo", T0 + timedelta(seconds=1))
    c, _ = store.enqueue_run("hi", T0 + timedelta(seconds=2))
    got, _ = _claim(store, now=T0 + timedelta(seconds=3), limit=3)
    assert [r.id for r in got] == [c.id, a.id, b.id]


def test_overlap_forbid_claims_one_at_a_time(store):
    store.add_job(manual("a"), T0)
    store.enqueue_run("a", T0)
    store.enqueue_run("a", T0)
    got, _ = _claim(store, limit=5)
    assert len(got) == 1


def test_lock_held_blocks_other_runs_but_not_others(store):
    store.add_job(manual("fetch", overlap=Overlap.ALLOW), T0)
    r1, _ = store.enqueue_run("fetch", T0, key="u1", locks=["host:a"])
    r2, _ = store.enqueue_run("fetch", T0, key="u2", locks=["host:a"])
    r3, _ = store.enqueue_run("fetch", T0, key="u3", locks=["host:b"])
    got, _ = _claim(store, limit=5)
    assert {r.id for r in got} == {r1.id, r3.id}
    assert r2.id not in {r.id for r in _claim(store, "d2")[0]}


def test_keyed_run_is_unique(store):
    store.add_job(manual("digest"), T0)
    a, created_a = store.enqueue_run("digest", T0, key="u1:2026-01-01", env={"USER_ID": "1"})
    b, created_b = store.enqueue_run("digest", T0 + timedelta(seconds=5), key="u1:2026-01-01")
    assert created_a and not created_b and a.id == b.id
    assert b.env == {"USER_ID": "1"}
    with pytest.raises(StoreError, match="UNIQUE"):  # a constraint, not a check in Python
        with store.write() as c:
            c.execute(
                "INSERT INTO runs (job_id, scheduled_for, state, reason, run_key, created_at) "
                "VALUES (?, 1, 'pending', 'manual', 'u1:2026-01-01', 0)",
                (a.job_id,),
            )


def test_record_windows_unique_and_compare_and_set(store):
    spec = JobSpec(
        name="tick",
        trigger=Trigger(TriggerKind.INTERVAL, tz="UTC", every_seconds=60, anchor=T0),
        command="true",
    )
    job = store.add_job(spec, T0)
    assert job.next_run_at == T0 + timedelta(seconds=60)
    w = WindowRow(job.next_run_at, RunState.PENDING, RunReason.SCHEDULE)
    ids = store.record_windows(
        job.id,
        job.next_run_at,
        [w],
        next_run_at=job.next_run_at + timedelta(seconds=60),
        last_window_at=job.next_run_at,
        missed_increment=0,
        now=job.next_run_at,
    )
    assert ids and len(ids) == 1
    # a second writer with the old expectation is refused; nothing doubles
    again = store.record_windows(
        job.id,
        job.next_run_at,
        [w],
        next_run_at=job.next_run_at + timedelta(seconds=60),
        last_window_at=job.next_run_at,
        missed_increment=0,
        now=job.next_run_at,
    )
    assert again is None
    assert len(store.list_runs("tick")) == 1


def test_retry_dead_numbers_attempts_on(store):
    store.add_job(manual("a", retries=0), T0)
    run, _ = store.enqueue_run("a", T0)
    _claim(store)
    store.finish_attempt(
        run.id,
        1,
        "d1",
        T0,
        exit_code=3,
        error="exit 3",
        output=b"",
        output_bytes=0,
        outcome=RunState.DEAD,
    )
    assert store.get_run(run.id).state is RunState.DEAD
    [back] = store.retry_dead(T0, job_name="a")
    assert back.state is RunState.PENDING and back.max_attempts == 2
    got, _ = _claim(store, now=T0 + timedelta(seconds=1))
    assert got[0].attempt == 2


def test_scheduler_lease_single_holder(store):
    a, _, _ = store.heartbeat("d1", T0, 10, want_leader=True, held=[])
    b, _, _ = store.heartbeat("d2", T0, 10, want_leader=True, held=[])
    assert a and not b
    later = T0 + timedelta(seconds=11)
    b, _, _ = store.heartbeat("d2", later, 10, want_leader=True, held=[])
    a, _, _ = store.heartbeat("d1", later, 10, want_leader=True, held=[])
    assert b and not a


def _fixed_delay(store, name="fd"):
    spec = JobSpec(
        name=name,
        trigger=Trigger(TriggerKind.INTERVAL, tz="UTC", every_seconds=60, after_completion=True),
        command="true",
    )
    job = store.add_job(spec, T0)
    w = WindowRow(job.next_run_at, RunState.PENDING, RunReason.SCHEDULE)
    [run_id] = store.record_windows(
        job.id, job.next_run_at, [w], next_run_at=None, last_window_at=job.next_run_at,
        missed_increment=0, now=job.next_run_at,
    )
    assert store.get_job(name).next_run_at is None  # waits for the run to end
    return job, run_id


def test_fixed_delay_job_moves_on_when_its_run_is_cancelled(store):
    job, run_id = _fixed_delay(store)
    later = T0 + timedelta(minutes=5)
    store.cancel_runs([run_id], later)
    assert store.get_job("fd").next_run_at == later + timedelta(seconds=60)


def test_fixed_delay_job_moves_on_when_its_last_attempt_is_lost(store):
    job, run_id = _fixed_delay(store)
    with store.write() as c:
        c.execute("UPDATE runs SET max_attempts = 1 WHERE id = ?", (run_id,))
    t = T0 + timedelta(minutes=2)
    _claim(store, "d1", now=t, lease=10)
    _, dead = _claim(store, "d2", now=t + timedelta(seconds=11))
    assert [r.id for r in dead] == [run_id]
    assert store.get_job("fd").next_run_at == t + timedelta(seconds=71)


def test_a_daemon_never_takes_back_its_own_expired_lease(store):
    store.add_job(manual("a"), T0)
    run, _ = store.enqueue_run("a", T0)
    _claim(store, "d1", lease=10)
    again, _ = _claim(store, "d1", now=T0 + timedelta(seconds=60))
    assert again == [] and store.get_run(run.id).attempt == 1  # its heartbeat decides
    other, _ = _claim(store, "d2", now=T0 + timedelta(seconds=60))
    assert [r.attempt for r in other] == [2]


def test_replace_keeps_keyed_runs(store):
    spec = JobSpec(
        name="r",
        trigger=Trigger(TriggerKind.INTERVAL, tz="UTC", every_seconds=60, anchor=T0),
        command="true",
        overlap=Overlap.REPLACE,
    )
    job = store.add_job(spec, T0)
    keyed, _ = store.enqueue_run("r", T0, key="k1")
    w = WindowRow(job.next_run_at, RunState.PENDING, RunReason.SCHEDULE)
    store.record_windows(
        job.id, job.next_run_at, [w], next_run_at=job.next_run_at + timedelta(seconds=60),
        last_window_at=job.next_run_at, missed_increment=0, now=job.next_run_at,
    )
    assert store.get_run(keyed.id).state is RunState.PENDING
