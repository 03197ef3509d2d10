"""The store: schema and migrations, fencing, claims, windows."""

from __future__ import annotations

import random
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Daemons

from jobctl import planner
from jobctl.errors import Conflict, NotFound, StoreError
from jobctl.models import JobSpec, Overlap, RunReason, RunState, Trigger, TriggerKind
from jobctl.outcomes import AttemptResult, Window
from jobctl.store.sqlite import (
    SCHEMA_VERSION,
    SqliteStore,
    migrations,
    schema_sql,
    split_statements,
)
from jobctl.triggers import next_fire

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def manual(name: str, **kw) -> JobSpec:
    return JobSpec(name=name, trigger=Trigger(TriggerKind.MANUAL, tz="UTC"), command="true", **kw)


class S:
    """Both faces of one SQLite store, for tests that play command and daemon at once."""

    def __init__(self, path) -> None:
        self.handle = SqliteStore.open(path)
        self.c = self.handle.commands
        self.d = Daemons(self.handle)
        self.conn = self.handle.db.conn

    def add_job(self, spec: JobSpec, now: datetime, **kw):
        return self.c.add_job(spec, next_fire(spec.trigger, now), now, **kw)

    def __getattr__(self, name: str):
        return getattr(self.c, name)

    def close(self) -> None:
        self.handle.close()


@pytest.fixture
def store(tmp_path):
    s = S(tmp_path / "j.db")
    yield s
    s.close()


def _dump(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    return conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()


def _finish(store, run, attempt, daemon, now, code=0, rng=None):
    result = AttemptResult(
        code, output=b"hi" if code == 0 else b"", output_bytes=2 if code == 0 else 0
    )
    decision = planner.decide(run, attempt, result, now, rng or random.Random(0))
    from conftest import finish_one

    return finish_one(store.d, run.id, attempt, daemon, now, result, decision)


def _fire(store, job, now, has_leased_ok=True):
    due = [
        (
            job.id,
            int((job.next_run_at - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)),
        )
    ]

    def plan(j, has_leased, has_waiting, maintenance):
        return planner.plan_due(
            j,
            now,
            missed=False,
            rng=random.Random(0),
            has_leased_run=has_leased,
            has_waiting_run=has_waiting,
            maintenance=maintenance,
        )

    return store.d.fire(due, now, plan)


def test_migrations_reproduce_schema_sql(tmp_path):
    migrated = SqliteStore.open(tmp_path / "m.db")
    reference = sqlite3.connect(":memory:")
    for stmt in split_statements(schema_sql()):
        reference.execute(stmt)
    assert [tuple(r) for r in migrated.db.schema_dump()] == [tuple(r) for r in _dump(reference)]
    assert migrated.db.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert max(n for n, _ in migrations()) == SCHEMA_VERSION


def test_newer_schema_is_refused_untouched(tmp_path):
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="newer"):
        SqliteStore.open(path)
    assert path.read_bytes() == before


def test_garbage_file_is_a_store_error(tmp_path):
    path = tmp_path / "g.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError):
        SqliteStore.open(path)


def test_wal_mode_and_permissions(tmp_path):
    path = tmp_path / "sub" / "j.db"
    s = S(path)
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


def _expired(lease):
    return planner.decide_expired(lease.attempt, lease.max_attempts, lease.cancel_requested)


def _claim(store, daemon="d1", now=T0, lease=30.0, limit=10):
    res = store.d.record_and_claim(
        daemon,
        "host",
        now,
        lease,
        finishes=[],
        started=[],
        limit=limit,
        low_limit=None,
        reserved_priority=None,
        on_expired=_expired,
    )
    return [c.run for c in res.claimed], [r for r, _ in res.ended]


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
    done = _finish(store, got[0], 1, "d1", later)
    assert done.state is None
    renewal = store.d.heartbeat(
        "d1", later, 30, want_leader=False, held=[(run.id, 1)], host="h", pid=1, boot_id="b"
    )
    assert renewal.lost == {run.id}
    attempts = store.get_attempts(run.id)
    assert [(a.attempt, a.error) for a in attempts] == [(1, "lost"), (2, None)]
    done = _finish(store, taken[0], 2, "d2", later)
    assert done.state is RunState.SUCCEEDED
    assert store.get_run(run.id).state is RunState.SUCCEEDED


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
        with store.handle.db.write() as c:
            c.execute(
                "INSERT INTO runs (job_id, scheduled_for, state, reason, run_key, created_at, "
                "settings) VALUES (?, 1, 'pending', 'manual', 'u1:2026-01-01', 0, '{}')",
                (a.job_id,),
            )


def test_fire_unique_and_compare_and_set(store):
    spec = JobSpec(
        name="tick",
        trigger=Trigger(TriggerKind.INTERVAL, tz="UTC", every_seconds=60, anchor=T0),
        command="true",
    )
    job = store.add_job(spec, T0)
    assert job.next_run_at == T0 + timedelta(seconds=60)
    [fired] = _fire(store, job, job.next_run_at)
    assert len(fired.run_ids) == 1
    # a second writer with the old expectation is refused; nothing doubles
    assert _fire(store, job, job.next_run_at) == []
    assert len(store.list_runs("tick")) == 1


def test_a_window_is_never_recorded_twice(store):
    job = store.add_job(manual("m"), T0)
    w = Window(T0, RunState.PENDING, RunReason.SCHEDULE)
    with store.handle.db.write() as c:
        from jobctl.store.commands import insert_run

        assert insert_run(store.handle.db, c, job, w, T0) is not None
        assert insert_run(store.handle.db, c, job, w, T0) is None


def test_retry_dead_numbers_attempts_on(store):
    store.add_job(manual("a", retries=0), T0)
    run, _ = store.enqueue_run("a", T0)
    [got], _ = _claim(store)
    assert _finish(store, got, 1, "d1", T0, code=3).state is RunState.DEAD
    assert store.get_run(run.id).state is RunState.DEAD
    [back] = store.retry_dead(T0, job_name="a")
    assert back.state is RunState.PENDING and back.max_attempts == 2
    got, _ = _claim(store, now=T0 + timedelta(seconds=1))
    assert got[0].attempt == 2


def test_scheduler_lease_single_holder(store):
    def beat(daemon, now):
        return store.d.heartbeat(
            daemon, now, 10, want_leader=True, held=[], host="h", pid=1, boot_id="b"
        ).leader

    a = beat("d1", T0)
    b = beat("d2", T0)
    assert a and not b
    later = T0 + timedelta(seconds=11)
    b = beat("d2", later)
    a = beat("d1", later)
    assert b and not a


def _fixed_delay(store, name="fd"):
    spec = JobSpec(
        name=name,
        trigger=Trigger(TriggerKind.INTERVAL, tz="UTC", every_seconds=60, after_completion=True),
        command="true",
    )
    job = store.add_job(spec, T0)
    [fired] = _fire(store, job, job.next_run_at)
    [run_id] = fired.run_ids
    assert store.get_job(name).next_run_at is None  # waits for the run to end
    return job, run_id


def _scheduler(store):
    from jobctl.scheduler import Scheduler

    sched = Scheduler(
        store.d, log=lambda m, level=None: None, rng=random.Random(0), boot_id="b", lease_seconds=10
    )
    sched.leading = True
    return sched


def test_fixed_delay_job_moves_on_when_its_run_is_cancelled(store):
    job, run_id = _fixed_delay(store)
    later = T0 + timedelta(minutes=5)
    store.cancel_runs([run_id], later)
    _scheduler(store).on_runs_ended([job.id], later + timedelta(seconds=1))
    assert store.get_job("fd").next_run_at == later + timedelta(seconds=60)


def test_fixed_delay_job_moves_on_when_its_last_attempt_is_lost(store):
    job, run_id = _fixed_delay(store)
    with store.handle.db.write() as c:
        c.execute("UPDATE runs SET max_attempts = 1 WHERE id = ?", (run_id,))
    t = T0 + timedelta(minutes=2)
    _claim(store, "d1", now=t, lease=10)
    _, dead = _claim(store, "d2", now=t + timedelta(seconds=11))
    assert [r.id for r in dead] == [run_id]
    _scheduler(store).on_runs_ended([job.id], t + timedelta(seconds=12))
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
    _fire(store, job, job.next_run_at)
    assert store.get_run(keyed.id).state is RunState.PENDING
