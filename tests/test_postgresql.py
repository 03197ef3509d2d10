"""The PostgreSQL backend itself: schema and migrations, URLs and passwords, the driver as
an extra, and claims that stay correct with several claimers at once (SPEC §10)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobctl.errors import NotFound, StoreError
from jobctl.models import JobSpec, Overlap, RunState, Trigger, TriggerKind
from jobctl.store.postgresql.url import insecure_reason, is_postgresql_url, redact

pytestmark = pytest.mark.postgresql

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def manual(name: str, **kw) -> JobSpec:
    return JobSpec(name=name, trigger=Trigger(TriggerKind.MANUAL, tz="UTC"), command="true", **kw)


def _open(url: str, **kw):
    from jobctl.store.postgresql import PostgresStore

    return PostgresStore.open(url, **kw)


def _admin(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


# ---------------------------------------------------------------- schema and migrations


def test_migrations_reproduce_schema_sql(pg_databases):
    from jobctl.store.postgresql.schema import SCHEMA_VERSION, migrations, schema_dump, schema_sql

    migrated_url = pg_databases.new(migrated=False)
    reference_url = pg_databases.new(migrated=False)
    _open(migrated_url).close()
    with _admin(reference_url) as conn:
        conn.execute(schema_sql())
    with _admin(migrated_url) as a, _admin(reference_url) as b:
        dump = schema_dump(a)
        assert dump == schema_dump(b)
        assert any(r[0] == "index" and r[2] == "runs_one_leased_exclusive" for r in dump)
        assert a.execute("SELECT version FROM jobctl.schema_version").fetchall() == [
            (SCHEMA_VERSION,)
        ]
    assert max(n for n, _ in migrations()) == SCHEMA_VERSION


def test_names_sort_in_byte_order_as_on_sqlite(pg_url):
    with _open(pg_url) as s:
        for name in ("b", "B", "a", "_x", "A-1", "a.b"):
            s.add_job(manual(name), T0)
        assert [j.spec.name for j in s.list_jobs()] == sorted(["b", "B", "a", "_x", "A-1", "a.b"])


def test_newer_schema_is_refused_untouched(pg_databases):
    from jobctl.store.postgresql.schema import schema_dump

    url = pg_databases.new()
    with _admin(url) as conn:
        conn.execute("UPDATE jobctl.schema_version SET version = 99")
        before = schema_dump(conn)
    with pytest.raises(StoreError, match="newer"):
        _open(url)
    with _admin(url) as conn:
        assert schema_dump(conn) == before
        assert conn.execute("SELECT version FROM jobctl.schema_version").fetchone() == (99,)


def test_first_starts_at_once_do_not_race(pg_databases):
    url = pg_databases.new(migrated=False)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def first_start() -> None:
        try:
            barrier.wait()
            _open(url).close()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=first_start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with _admin(url) as conn:
        assert conn.execute("SELECT count(*) FROM jobctl.schema_version").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM jobctl.scheduler_lease").fetchone() == (1,)


def test_a_database_without_the_schema_is_not_created_by_a_read(pg_databases):
    url = pg_databases.new(migrated=False)
    with pytest.raises(NotFound):
        _open(url, create=False)
    with _admin(url) as conn:
        assert conn.execute("SELECT to_regnamespace('jobctl')").fetchone() == (None,)


def test_ids_are_never_reused(pg_url):
    with _open(pg_url) as s:
        first = s.add_job(manual("a"), T0)
        run, _ = s.enqueue_run("a", T0)
        s.delete_job("a")
        again = s.add_job(manual("a"), T0)
        run2, _ = s.enqueue_run("a", T0)
        assert again.id > first.id
        assert run2.id > run.id


def test_unreachable_server_is_one_store_error():
    with pytest.raises(StoreError) as e:
        _open("postgresql://nobody:secret@127.0.0.1:1/none")
    assert "\n" not in str(e.value)
    assert "secret" not in str(e.value)


def test_a_lost_connection_comes_back(pg_url, pg_databases):
    with _open(pg_url) as s:
        s.add_job(manual("a"), T0)
        with _admin(pg_databases.admin_url) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (pg_url.rsplit("/", 1)[1],),
            )
        with pytest.raises(StoreError, match="unreachable"):
            s.list_jobs()
        assert [j.spec.name for j in s.list_jobs()] == ["a"]
        assert s.reconnects == 1


# ---------------------------------------------------------------- URLs and passwords


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://jobctl:s3cret@db.internal/jobs", "postgresql://jobctl@db.internal/jobs"),
        ("postgres://:s3cret@db:5433/jobs", "postgres://db:5433/jobs"),
        (
            "postgresql:///jobs?host=/run/postgresql&password=s3cret",
            "postgresql:///jobs?host=/run/postgresql",
        ),
        ("postgresql://u@h/db?sslmode=require", "postgresql://u@h/db?sslmode=require"),
    ],
)
def test_the_password_is_removed(url, shown):
    assert redact(url) == shown
    assert "s3cret" not in redact(url)


def test_which_locations_are_urls():
    assert is_postgresql_url("postgresql://h/db")
    assert is_postgresql_url("postgres://h/db")
    assert not is_postgresql_url("/home/me/jobctl.db")
    assert not is_postgresql_url("postgresql.db")


@pytest.mark.parametrize(
    ("url", "insecure"),
    [
        ("postgresql:///jobs?host=/run/postgresql", False),
        ("postgresql://u@localhost/jobs", False),
        ("postgresql://u@127.0.0.1:5432/jobs", False),
        ("postgresql://u@[::1]:5432/jobs", False),
        ("postgresql://u@db.internal/jobs", True),
        ("postgresql://u@db.internal/jobs?sslmode=prefer", True),
        ("postgresql://u@db.internal/jobs?sslmode=require", False),
        ("postgresql://u@db.internal/jobs?sslmode=verify-full", False),
        ("postgresql:///jobs?host=10.0.0.5", True),
    ],
)
def test_a_remote_host_without_tls_is_warned_about(url, insecure):
    assert (insecure_reason(url) is not None) is insecure


def test_the_store_shows_its_location_without_the_password(pg_url):
    url = pg_url.replace("postgres@", "postgres:s3cret@")
    with _open(url) as s:
        assert "s3cret" not in s.location
        assert s.path == s.location


# ---------------------------------------------------------------- the driver is an extra


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


@pytest.mark.parametrize("args", [["--version"], ["list"], ["add", "a", "--manual", "--", "true"]])
def test_sqlite_commands_never_load_the_driver(tmp_path: Path, args):
    code = (
        "import sys\n"
        "from jobctl.cli import main\n"
        "try:\n"
        f"    main({['--db', str(tmp_path / 'j.db'), *args]!r})\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.startswith('psycopg')))\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_without_the_extra_a_url_is_one_error_naming_it():
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None  # as if the extra were not installed\n"
        "from jobctl.store.postgresql import PostgresStore\n"
        "from jobctl.errors import StoreError\n"
        "try:\n"
        "    PostgresStore.open('postgresql://u@127.0.0.1:1/x')\n"
        "except StoreError as e:\n"
        "    print(e)\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "PostgreSQL support is not installed: pip install 'jobctl[postgresql]' (psycopg 3)"
    )


# ---------------------------------------------------------------- claims under concurrency


def test_claimers_racing_keep_overlap_forbid_and_locks(pg_url):
    """Four claimers at once, each on its own connection, over runs of a forbid job and of
    jobs sharing a lock: never two leased runs of the forbid job, never two holders of a
    lock, and every run is claimed exactly once."""
    with _open(pg_url) as s:
        s.add_job(manual("solo", overlap=Overlap.FORBID), T0)
        s.add_job(manual("polite-a", overlap=Overlap.ALLOW, locks=("host:x",)), T0)
        s.add_job(manual("polite-b", overlap=Overlap.ALLOW, locks=("host:x",)), T0)
        s.add_job(manual("free", overlap=Overlap.ALLOW), T0)
        expected = set()
        for i in range(12):
            for name in ("solo", "polite-a", "polite-b", "free"):
                expected.add(s.enqueue_run(name, T0 + timedelta(microseconds=i))[0].id)

    holders: dict[str, set[int]] = {"solo": set(), "host:x": set()}
    guard = threading.Lock()
    violations: list[str] = []
    done: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def claimer(n: int) -> None:
        me = f"d{n}"
        rnd = random.Random(n)
        try:
            with _open(pg_url) as st:
                barrier.wait()
                idle = 0
                while idle < 50:
                    claimed, _ = st.claim_runs(me, "h", T0 + timedelta(seconds=1), 60, limit=2)
                    if not claimed:
                        idle += 1
                        continue
                    idle = 0
                    with guard:
                        for c in claimed:
                            for key in _keys(c.run):
                                holders[key].add(c.run.id)
                                if len(holders[key]) > 1:
                                    violations.append(f"{key}: {sorted(holders[key])}")
                    if rnd.random() < 0.5:
                        threading.Event().wait(0.002)
                    for c in claimed:
                        with guard:  # let go before the commit that frees it
                            for key in _keys(c.run):
                                holders[key].discard(c.run.id)
                            done.append(c.run.id)
                        ok, _ = st.finish_attempt(
                            c.run.id,
                            c.run.attempt,
                            me,
                            T0 + timedelta(seconds=1),
                            exit_code=0,
                            error=None,
                            output=b"",
                            output_bytes=0,
                            outcome=RunState.SUCCEEDED,
                        )
                        assert ok
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert violations == []
    assert sorted(done) == sorted(expected)  # each run claimed once, none left behind


def _keys(run) -> list[str]:
    keys = ["solo"] if run.job_name == "solo" else []
    return keys + [lock for lock in run.locks if lock == "host:x"]
