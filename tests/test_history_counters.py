"""Counters kept apart from the rows (README, History: what is kept): what the tallies hold after runs end, are
retried, pruned and deleted, on both backends, and a database from before them upgraded.

The tallies are kept by the schema's triggers, so every statement that changes a run
counts, whichever command or daemon wrote it.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from conftest import StoreView

from jobctl.models import JobSpec, Trigger, TriggerKind
from jobctl.web.metrics import DURATION_BUCKETS_SECONDS

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def manual(name: str, retries: int = 0) -> JobSpec:
    return JobSpec(name, Trigger(TriggerKind.MANUAL, "UTC"), "true", retries=retries)


def run_tallies(store: StoreView, job_id: int) -> dict[str, tuple[int, int]]:
    rows = store.conn.execute(
        "SELECT state, SUM(ended), SUM(kept) FROM run_tallies WHERE job_id = ? GROUP BY state",
        (job_id,),
    ).fetchall()
    return {r[0]: (int(r[1]), int(r[2])) for r in rows if (r[1], r[2]) != (0, 0)}


def duration_tallies(store: StoreView, job_id: int) -> dict[int, tuple[int, int]]:
    rows = store.conn.execute(
        "SELECT bucket, SUM(n), SUM(us) FROM duration_tallies WHERE job_id = ? GROUP BY bucket",
        (job_id,),
    ).fetchall()
    return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}


def one_run(store: StoreView, name: str, at: datetime, seconds: float, code: int = 0) -> int:
    run, _ = store.enqueue_run(name, at)
    (claimed,), _ = store.claim("d1", "h1", at, 60)
    assert claimed.run.id == run.id
    store.finish(claimed.run, claimed.run.attempt, "d1", at + timedelta(seconds=seconds), code)
    return run.id


@pytest.fixture
def store(db):
    with StoreView(db) as view:
        yield view


def test_tallies_count_every_end_and_survive_prune_and_retry(store):
    job = store.add_job(manual("f1"), T0)
    one_run(store, "f1", T0, 2)
    one_run(store, "f1", T0 + timedelta(minutes=1), 3)
    dead = one_run(store, "f1", T0 + timedelta(minutes=2), 1, code=7)
    pending, _ = store.enqueue_run("f1", T0 + timedelta(minutes=3))
    store.cancel_runs([pending.id], T0 + timedelta(minutes=3))
    assert run_tallies(store, job.id) == {
        "succeeded": (2, 2),
        "dead": (1, 1),
        "cancelled": (1, 1),
    }
    assert sum(n for n, _ in duration_tallies(store, job.id).values()) == 3
    assert sum(us for _, us in duration_tallies(store, job.id).values()) == 6_000_000

    store.retry_dead(T0 + timedelta(minutes=4), run_ids=[dead])
    assert run_tallies(store, job.id)["dead"] == (1, 0)  # ended once; no dead row now

    assert store.prune(T0 + timedelta(days=1)) == 3
    assert run_tallies(store, job.id) == {"succeeded": (2, 0), "dead": (1, 0), "cancelled": (1, 0)}
    assert sum(n for n, _ in duration_tallies(store, job.id).values()) == 3


def test_a_skipped_window_is_kept_but_not_ended_as_a_finished_run(store):
    spec = JobSpec("c", Trigger(TriggerKind.CRON, "UTC", "* * * * *"), "true")
    job = store.add_job(spec, T0)
    with store.write() as c:
        c.execute(
            "INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, settings, "
            "created_at) VALUES (?, 1, 'skipped', 'missed', 'schedule', '{}', 1)",
            (job.id,),
        )
    assert run_tallies(store, job.id) == {"skipped": (1, 1)}


def test_each_duration_falls_in_the_bucket_of_the_metrics_bounds(store):
    job = store.add_job(manual("b"), T0)
    at = T0
    expected: dict[int, int] = {}
    for i, bound in enumerate(DURATION_BUCKETS_SECONDS):
        for seconds, bucket in ((bound, i), (bound + 1e-6, i + 1)):
            one_run(store, "b", at, seconds)
            expected[bucket] = expected.get(bucket, 0) + 1
            at += timedelta(hours=5)
    got = {b: n for b, (n, _) in duration_tallies(store, job.id).items()}
    assert got == expected


def test_deleting_a_job_deletes_its_tallies(store):
    job = store.add_job(manual("gone"), T0)
    one_run(store, "gone", T0, 1)
    store.delete_job("gone")
    assert run_tallies(store, job.id) == {}
    assert duration_tallies(store, job.id) == {}


@pytest.mark.sqlite_only
def test_an_older_sqlite_database_gets_the_default_retention_and_seeded_tallies(tmp_path):
    from jobctl.store.sqlite.schema import migrations, split_statements

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    for number, sql in migrations():
        if number > 3:
            break
        for stmt in split_statements(sql):
            conn.execute(stmt)
    conn.execute("PRAGMA user_version = 3")
    conn.execute(
        "INSERT INTO jobs (id, name, trigger_kind, trigger_tz, command, schedule_from, "
        "created_at, updated_at) VALUES (1, 'old', 'manual', 'UTC', 'true', 0, 0, 0)"
    )
    for run_id, state in ((1, "succeeded"), (2, "succeeded"), (3, "dead"), (4, "pending")):
        conn.execute(
            "INSERT INTO runs (id, job_id, scheduled_for, state, reason, settings, created_at) "
            "VALUES (?, 1, ?, ?, 'manual', '{}', 0)",
            (run_id, run_id, state),
        )
    conn.execute(
        "INSERT INTO attempts (run_id, attempt, started_at, finished_at) VALUES (1, 1, 0, 700000)"
    )
    conn.close()
    with StoreView(path) as store:
        assert _raw_keep(store) == 1000
        assert run_tallies(store, 1) == {"succeeded": (2, 2), "dead": (1, 1)}
        assert duration_tallies(store, 1) == {2: (1, 700000)}


def _raw_keep(store: StoreView) -> int:
    return int(store.conn.execute("SELECT keep_runs FROM jobs").fetchone()[0])


@pytest.mark.postgresql
def test_an_older_postgresql_database_gets_the_default_retention_and_seeded_tallies(
    pg_databases,
):
    import psycopg

    from jobctl.store.postgresql.schema import migrations

    url = pg_databases.new(migrated=False)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(migrations()[0][1])
        conn.execute("INSERT INTO jobctl.schema_version VALUES (1)")
        conn.execute(
            "INSERT INTO jobctl.jobs (name, trigger_kind, trigger_tz, command, schedule_from, "
            "created_at, updated_at) VALUES ('old', 'manual', 'UTC', 'true', 0, 0, 0)"
        )
        job_id = conn.execute("SELECT id FROM jobctl.jobs").fetchone()[0]
        for at, state in ((1, "succeeded"), (2, "dead"), (3, "leased")):
            conn.execute(
                "INSERT INTO jobctl.runs (job_id, scheduled_for, state, reason, settings, "
                "created_at) VALUES (%s, %s, %s, 'manual', '{}', 0)",
                (job_id, at, state),
            )
    with StoreView(url) as store:
        assert _raw_keep(store) == 1000
        assert run_tallies(store, job_id) == {"succeeded": (1, 1), "dead": (1, 1)}
