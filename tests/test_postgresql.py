"""The PostgreSQL backend itself: schema and migrations, URLs and passwords, the driver as
an extra, and claims that stay correct with several claimers at once (README, Many
hosts on PostgreSQL)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobctl.errors import NotFound, StoreError
from jobctl.models import JobSpec, Overlap, RunState, Trigger, TriggerKind
from jobctl.paths import is_db_url
from jobctl.store.postgresql.url import insecure_reason, redact

pytestmark = pytest.mark.postgresql

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
JOBCTL = [sys.executable, "-m", "jobctl"]


def manual(name: str, **kw) -> JobSpec:
    return JobSpec(name=name, trigger=Trigger(TriggerKind.MANUAL, tz="UTC"), command="true", **kw)


def _open(url: str, **kw):
    from jobctl.store import open_store

    return open_store(url, **kw)


def _view(url: str):
    from conftest import StoreView

    return StoreView(url)


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
    with _view(pg_url) as s:
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
    with _view(pg_url) as s:
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
    with _view(pg_url) as s:
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
        assert s.handle.db.reconnects == 1


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
    assert is_db_url("postgresql://h/db")
    assert is_db_url("postgres://h/db")
    assert is_db_url("POSTGRESQL://h/db") and is_db_url("Postgres://h/db")
    assert not is_db_url("/home/me/jobctl.db")
    assert not is_db_url("postgresql.db")


def test_a_url_whose_scheme_is_in_capitals_opens_the_server(pg_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shouted = "POSTGRESQL" + pg_url[pg_url.index("://") :]
    s = _open(shouted, create=False)
    try:
        assert s.backend == "postgresql"
        assert s.commands.info().location.startswith("postgresql://")
    finally:
        s.close()
    assert list(tmp_path.iterdir()) == []


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
    s = _open(url)
    try:
        assert "s3cret" not in s.location
        from jobctl.store.values import DaemonIdentity

        face = s.open_daemon(DaemonIdentity("d", "h", 1, "b", 30.0))
        assert face.child_location() == s.location
        assert "s3cret" not in s.commands.info().location
    finally:
        s.close()


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
        "from jobctl.store import open_store\n"
        "from jobctl.errors import StoreError\n"
        "try:\n"
        "    open_store('postgresql://u@127.0.0.1:1/x')\n"
        "except StoreError as e:\n"
        "    print(e)\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "PostgreSQL support is not installed: pip install 'jobctl[postgresql]' (psycopg 3)"
    )


# ---------------------------------------------------------------- claims under concurrency


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node] + [n for child in node.get("Plans", []) for n in _plan_nodes(child)]


@pytest.mark.long
def test_a_claims_candidates_read_no_more_jobs_than_candidates(pg_url):
    """The candidates of a claim look up their own jobs by key: with 300 jobs a run each,
    a round of 16 reads 16 jobs, not every job (a plan that hashed all the jobs made each
    claim's cost grow with the number of jobs)."""
    from jobctl.clock import to_us
    from jobctl.store.postgresql.driver import CANDIDATES

    with _view(pg_url) as s:
        for i in range(300):
            s.add_job(manual(f"j{i}"), T0)
            s.enqueue_run(f"j{i}", T0)
    params = {"now": to_us(T0 + timedelta(hours=1)), "low_ok": True, "rp": -(2**62), "tags": "[]"}
    with _admin(pg_url) as conn:
        conn.execute("SET search_path TO jobctl")
        conn.execute("ANALYZE")
        with conn.transaction(force_rollback=True):
            sql = "EXPLAIN (ANALYZE, FORMAT JSON) " + CANDIDATES
            row = conn.execute(sql, {**params, "tried": [], "n": 16}).fetchone()
    assert row is not None
    nodes = _plan_nodes(row[0][0]["Plan"])
    jobs_read = [
        n["Actual Rows"] * n["Actual Loops"] for n in nodes if n.get("Relation Name") == "jobs"
    ]
    assert jobs_read and sum(jobs_read) <= 16, jobs_read


@pytest.mark.long
def test_a_claims_candidates_are_read_in_queue_order_whatever_the_statistics(pg_url):
    """A burst queued on a table whose statistics are stale (never analysed here: the
    planner guesses 2 pending runs) is read in runs_queue's order under QUEUE_ORDER: a
    round of 16 reads 16 runs, not all 300 pending (read, joined and sorted, that plan
    cost 2.6 ms a claim at 1,000 pending in the bench against 0.13 ms)."""
    from jobctl.clock import to_us
    from jobctl.store.postgresql.driver import CANDIDATES, QUEUE_ORDER

    with _admin(pg_url) as conn:
        # no analyse behind the test's back: the statistics stay those of an empty table
        conn.execute("ALTER TABLE jobctl.runs SET (autovacuum_enabled = off)")
    with _view(pg_url) as s:
        for i in range(300):
            s.add_job(manual(f"j{i}"), T0)
            s.enqueue_run(f"j{i}", T0)
    params = {"now": to_us(T0 + timedelta(hours=1)), "low_ok": True, "rp": -(2**62), "tags": "[]"}
    with _admin(pg_url) as conn:
        conn.execute("SET search_path TO jobctl")
        with conn.transaction(force_rollback=True):
            conn.execute(QUEUE_ORDER)
            sql = "EXPLAIN (ANALYZE, FORMAT JSON) " + CANDIDATES
            row = conn.execute(sql, {**params, "tried": [], "n": 16}).fetchone()
    assert row is not None
    nodes = _plan_nodes(row[0][0]["Plan"])
    runs_read = [
        n["Actual Rows"] * n["Actual Loops"] for n in nodes if n.get("Relation Name") == "runs"
    ]
    assert runs_read and sum(runs_read) <= 16, runs_read
    assert not [n for n in nodes if n["Node Type"] == "Sort"]


def test_a_claim_that_breaks_a_unique_key_is_undone_alone_then_taken_one_by_one(pg_url):
    """Two runs of a forbid job in one claim (what the advisory locks keep from happening,
    and the unique index refuses when they do not): the claim's savepoint is rolled back,
    the runs are claimed one by one, the first is taken and the second refused, and the
    turn's transaction goes on and commits with what came before and after the claim."""
    from jobctl.clock import to_us
    from jobctl.store.values import DaemonIdentity

    with _view(pg_url) as s:
        s.add_job(manual("solo", overlap=Overlap.FORBID), T0)
        s.add_job(manual("other"), T0)
        first = s.enqueue_run("solo", T0)[0].id
        second = s.enqueue_run("solo", T0 + timedelta(seconds=1))[0].id
        other = s.enqueue_run("other", T0)[0].id
    me = DaemonIdentity("d1", "h1", 1, "b1", 30.0)
    now = T0 + timedelta(minutes=1)
    store = _open(pg_url)
    try:
        driver = store.open_daemon(me).driver
        tries: list[list[int]] = []
        claim_or_undo = driver._claim_or_undo

        def spied(c: Any, params: dict[str, Any]) -> list[Any]:
            tries.append(list(params["ids"]))
            return claim_or_undo(c, params)

        driver._claim_or_undo = spied  # type: ignore[method-assign]
        with driver.turn() as c:
            c.execute("UPDATE runs SET priority = 7 WHERE id = %s", (other,))
            picked = [({"id": first}, [], False), ({"id": second}, [], False)]
            got = driver._claim_picked(c, picked, me, to_us(now), to_us(now) + 30_000_000)
            c.execute("UPDATE runs SET priority = 8 WHERE id = %s", (second,))
        assert tries == [[first, second], [first], [second]]  # the two, then one by one
        assert list(got) == [first]
        states = {
            r.id: (r.state, r.priority)
            for r in (store.commands.get_run(i) for i in (first, second, other))
        }
        assert states == {
            first: (RunState.LEASED, 0),
            second: (RunState.PENDING, 8),
            other: (RunState.PENDING, 7),
        }
        assert [a.attempt for a in store.commands.get_attempts(first)] == [1]
        assert store.commands.get_attempts(second) == []
    finally:
        store.close()


def test_a_turn_of_ends_and_claims_waits_on_the_server_three_times(pg_url, monkeypatch):
    """A turn that records two ends and claims the next two runs of those forbid jobs
    waits for the server three times: the ends with the claim's first reads, the claim
    with the advisory locks it needs, the commit. (psycopg's nested pipelines and
    transaction() made it thirteen: each wait is a wake-up of the daemon and of the
    server's process.)"""
    import random

    from jobctl import planner
    from jobctl.outcomes import AttemptResult
    from jobctl.store.values import DaemonIdentity, FinishItem

    with _view(pg_url) as s:
        for name in ("a", "b"):
            s.add_job(manual(name, overlap=Overlap.FORBID), T0)
            for i in range(2):
                s.enqueue_run(name, T0 + timedelta(seconds=i))
    me = DaemonIdentity("d1", "h1", 1, "b1", 30.0)
    store = _open(pg_url)
    try:
        face = store.open_daemon(me)
        now = T0 + timedelta(minutes=1)
        first = face.record_and_claim(
            now, finishes=[], started=[], limit=2, low_limit=None, reserved_priority=None,
            on_expired=lambda lease: None,
        )  # fmt: skip
        assert len(first.claimed) == 2
        later = now + timedelta(seconds=1)
        finishes = []
        for c in first.claimed:
            result = AttemptResult(0)
            decision = planner.decide(c.run, 1, result, later, random.Random(0))
            assert decision is not None
            finishes.append(FinishItem(c.run.id, 1, result, decision, job_id=c.run.job_id))
        # psycopg waits on the server where a pipeline asks for results now (a fetch
        # flushes) or syncs (a Sync, then every result up to it): each is counted once
        from psycopg._pipeline_base import BasePipeline

        waits = 0
        in_sync = False
        fetch_gen, sync_gen, exit_gen = (
            BasePipeline._fetch_gen, BasePipeline._sync_gen, BasePipeline._exit_gen
        )  # fmt: skip

        def fetching(self: Any, *, flush: bool) -> Any:
            nonlocal waits
            waits += bool(flush and self.result_queue and not in_sync)
            return fetch_gen(self, flush=flush)

        def syncing(original: Any) -> Any:
            def gen(self: Any) -> Any:
                nonlocal waits, in_sync
                waits += 1
                in_sync = True
                try:
                    return (yield from original(self))
                finally:
                    in_sync = False

            return gen

        monkeypatch.setattr(BasePipeline, "_fetch_gen", fetching)
        monkeypatch.setattr(BasePipeline, "_sync_gen", syncing(sync_gen))
        monkeypatch.setattr(BasePipeline, "_exit_gen", syncing(exit_gen))
        second = face.record_and_claim(
            later, finishes=finishes, started=[], limit=2, low_limit=None,
            reserved_priority=None, on_expired=lambda lease: None,
        )  # fmt: skip
        monkeypatch.undo()
        assert [f.state for f in second.finished] == [RunState.SUCCEEDED] * 2
        assert sorted(c.run.job_name for c in second.claimed) == ["a", "b"]
        assert waits == 3
    finally:
        store.close()


def test_a_turns_ends_keep_the_tallies_the_row_triggers_kept_without_calling_them(pg_url):
    """The ends of a turn append their run, duration and CPU tallies, move last_ends and
    free their held locks in the statement that records them, as the row triggers did one
    end at a time (which are not called for them: five PL/pgSQL calls an end); a change
    after it in the same transaction is kept by the triggers again."""
    import random

    from jobctl import planner
    from jobctl.clock import to_us
    from jobctl.outcomes import AttemptResult
    from jobctl.store.driver import Quota
    from jobctl.store.values import DaemonIdentity, FinishItem

    with _view(pg_url) as s:
        s.add_job(manual("a", overlap=Overlap.ALLOW), T0)
        s.add_job(manual("b", locks=("L",), retries=0), T0)
        s.add_job(manual("c"), T0)
        a1 = s.enqueue_run("a", T0)[0].id
        a2 = s.enqueue_run("a", T0 + timedelta(seconds=1))[0].id
        b1 = s.enqueue_run("b", T0)[0].id
    me = DaemonIdentity("d1", "h1", 1, "b1", 30.0)
    now = T0 + timedelta(minutes=1)
    store = _open(pg_url)
    try:
        driver = store.open_daemon(me).driver
        with driver.turn() as c:
            claimed = {x.run.id: x.run for x in driver.claim(c, me, now, Quota(10, None, None))}
        assert sorted(claimed) == sorted([a1, a2, b1])
        with _view(pg_url) as s:
            c1 = s.enqueue_run("c", T0)[0].id

        def end(run_id: int, seconds: float, code: int, cpu: tuple[Any, Any]) -> FinishItem:
            at = now + timedelta(seconds=seconds)
            result = AttemptResult(code, cpu_user=cpu[0], cpu_system=cpu[1])
            decision = planner.decide(claimed[run_id], 1, result, at, random.Random(0))
            assert decision is not None
            return FinishItem(run_id, 1, result, decision, ended_at=at)

        finishes = [
            end(a1, 0.1, 0, (0.01, 0.002)),  # on a bucket's bound: in it, as the trigger had it
            end(a2, 2, 0, (0.5, None)),
            end(b1, 0.2, 1, (None, None)),
        ]
        with driver.turn() as c:
            c.execute("SET LOCAL track_functions = 'pl'")
            ends, _ = driver.finish(c, me.id, now + timedelta(seconds=3), finishes, [])
            c.execute(
                "UPDATE runs SET state = 'cancelled', finished_at = %s WHERE id = %s",
                (to_us(now), c1),
            )
            stats = c.execute("SELECT funcname, calls FROM pg_stat_xact_user_functions")
            calls = {r["funcname"]: r["calls"] for r in stats.fetchall()}
        assert [e[0] if e else None for e in ends] == [
            RunState.SUCCEEDED, RunState.SUCCEEDED, RunState.DEAD,
        ]  # fmt: skip
        # the cancel after the ends: the two triggers its change calls, once each
        assert calls == {"tally_runs": 1, "keep_last_end": 1}
    finally:
        store.close()
    with _admin(pg_url) as conn:
        conn.execute("SET search_path TO jobctl")

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in conn.execute(sql).fetchall()]  # type: ignore[arg-type]

        by_name = "JOIN jobs ON jobs.id = t.job_id GROUP BY jobs.name"
        assert rows(
            f"SELECT jobs.name, t.state, SUM(t.ended)::int, SUM(t.kept)::int FROM run_tallies t "
            f"{by_name}, t.state ORDER BY 1"
        ) == [("a", "succeeded", 2, 2), ("b", "dead", 1, 1), ("c", "cancelled", 1, 1)]
        assert rows(
            f"SELECT jobs.name, t.bucket, SUM(t.n)::int, SUM(t.us)::bigint "
            f"FROM duration_tallies t {by_name}, t.bucket ORDER BY 1, 2"
        ) == [("a", 0, 1, 100_000), ("a", 3, 1, 2_000_000), ("b", 1, 1, 200_000)]
        assert rows(f"SELECT jobs.name, SUM(t.cpu_us)::bigint FROM cpu_tallies t {by_name}") == [
            ("a", 512_000)
        ]
        assert rows(
            "SELECT jobs.name, t.run_id, t.state FROM last_ends t "
            "JOIN jobs ON jobs.id = t.job_id ORDER BY 1"
        ) == [("a", a2, "succeeded"), ("b", b1, "dead"), ("c", c1, "cancelled")]
        assert rows("SELECT run_id FROM held_locks") == []


@pytest.mark.long
def test_the_claim_and_the_ends_find_their_runs_by_key_whatever_the_statistics(pg_url):
    """With 300 runs queued on a table never analysed and 200 of them already through a
    lease (an index entry of state 'leased' left by each), the claim of 2 runs and the
    end of 2 read those runs alone: by key, not every pending run or every entry of a
    lease (0.3-0.4 ms a statement in the bench's burst, not 0.1)."""
    import random

    from jobctl import planner
    from jobctl.clock import to_us
    from jobctl.outcomes import AttemptResult
    from jobctl.store.driver import Quota
    from jobctl.store.postgresql.driver import CLAIM, FINISH_RUNS, finish_columns
    from jobctl.store.values import DaemonIdentity, FinishItem

    with _admin(pg_url) as conn:
        conn.execute("ALTER TABLE jobctl.runs SET (autovacuum_enabled = off)")
    with _view(pg_url) as s:
        for i in range(300):
            s.add_job(manual(f"j{i}"), T0)
            s.enqueue_run(f"j{i}", T0)
    me = DaemonIdentity("d1", "h1", 1, "b1", 30.0)
    now = T0 + timedelta(minutes=1)
    store = _open(pg_url)
    try:
        driver = store.open_daemon(me).driver
        for _ in range(50):  # 200 runs through a lease, ended
            with driver.turn() as c:
                got = driver.claim(c, me, now, Quota(4, None, None))
            ends = []
            for x in got:
                result = AttemptResult(0)
                decision = planner.decide(x.run, 1, result, now, random.Random(0))
                assert decision is not None
                ends.append(FinishItem(x.run.id, 1, result, decision))
            with driver.turn() as c:
                driver.finish(c, me.id, now, ends, [])
        with driver.turn() as c:
            held = driver.claim(c, me, now, Quota(2, None, None))
        assert len(held) == 2
    finally:
        store.close()
    with _admin(pg_url) as conn:
        sql = "SELECT id FROM jobctl.runs WHERE state = 'pending' ORDER BY id DESC LIMIT 2"
        pending = [r[0] for r in conn.execute(sql).fetchall()]
    ends = []
    for x in held:
        result = AttemptResult(0)
        decision = planner.decide(x.run, 1, result, now, random.Random(0))
        assert decision is not None
        ends.append(FinishItem(x.run.id, 1, result, decision))
    claim = {
        "me": "d2", "until": to_us(now) + 30_000_000, "now": to_us(now), "host": "h2",
        "ids": pending, "tags": "[]", "key_runs": [], "key_names": [],
    }  # fmt: skip
    with _admin(pg_url) as conn:
        conn.execute("SET search_path TO jobctl")
        for sql, params in ((CLAIM, claim), (FINISH_RUNS, finish_columns("d1", to_us(now), ends))):
            with conn.transaction(force_rollback=True):
                row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
            assert row is not None
            nodes = _plan_nodes(row[0][0]["Plan"])
            read = [
                n["Actual Rows"] + n.get("Rows Removed by Filter", 0)
                for n in nodes
                if n.get("Relation Name") == "runs"
                and n.get("Alias") == "runs"
                and "Scan" in n["Node Type"]
            ]
            assert read and sum(read) <= 2, (sql[:40], read)


def test_a_turns_statements_are_short_enough_for_psycopgs_cache():
    """psycopg parses a statement's text for its parameters again at every call when it
    is longer than MAX_CACHED_STATEMENT_LENGTH (4,096 bytes): the ends' statement, at
    4,819 bytes with its tallies, was parsed at every turn (a third of the daemon's own
    time in the turn, py-spy)."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    from jobctl.store.postgresql import driver

    for name in ("FINISH_RUNS", "CLAIM", "CANDIDATES", "EXPIRED", "SKIP_PAST_DEADLINE"):
        assert len(getattr(driver, name).encode()) <= MAX_CACHED_STATEMENT_LENGTH, name


def test_the_ends_statement_buckets_durations_as_the_commands_read_them():
    """The ends' statement writes duration tallies with the bounds the commands read them
    by (and the trigger tally_attempts writes them by)."""
    from jobctl.store.commands import DURATION_BUCKET_BOUNDS_SECONDS
    from jobctl.store.postgresql.driver import DURATION_BOUNDS_US, FINISH_RUNS

    assert DURATION_BOUNDS_US == tuple(round(b * 1e6) for b in DURATION_BUCKET_BOUNDS_SECONDS)
    assert "'{" + ",".join(map(str, DURATION_BOUNDS_US)) + "}'::bigint[]" in FINISH_RUNS


def test_a_claim_passes_by_a_run_whose_advisory_lock_another_transaction_holds(pg_url):
    """The advisory locks are tried with the claim, not waited for: a run whose job's
    key another transaction holds is passed by (and claimed once the key is free), a run
    whose key this claim got is taken, in the same round."""
    from jobctl.store.driver import Quota
    from jobctl.store.values import DaemonIdentity

    with _view(pg_url) as s:
        s.add_job(manual("held", overlap=Overlap.FORBID), T0)
        s.add_job(manual("free", overlap=Overlap.FORBID), T0)
        held = s.enqueue_run("held", T0)[0]
        free = s.enqueue_run("free", T0)[0]
    me = DaemonIdentity("d1", "h1", 1, "b1", 30.0)
    store = _open(pg_url)
    try:
        driver = store.open_daemon(me).driver
        with _admin(pg_url) as other, other.transaction():
            other.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"job:{held.job_id}",)
            )
            with driver.turn() as c:
                first = driver.claim(c, me, T0 + timedelta(minutes=1), Quota(4, None, None))
        assert [x.run.id for x in first] == [free.id]
        with driver.turn() as c:
            then = driver.claim(c, me, T0 + timedelta(minutes=1), Quota(4, None, None))
        assert [x.run.id for x in then] == [held.id]
    finally:
        store.close()


def test_claimers_racing_keep_overlap_forbid_and_locks(pg_url):
    """Four claimers at once, each on its own connection, over runs of a forbid job and of
    jobs sharing a lock: never two leased runs of the forbid job, never two holders of a
    lock, and every run is claimed exactly once."""
    with _view(pg_url) as s:
        s.add_job(manual("solo", overlap=Overlap.FORBID), T0)
        s.add_job(manual("polite-a", overlap=Overlap.ALLOW, locks=("host:x",)), T0)
        s.add_job(manual("polite-b", overlap=Overlap.ALLOW, locks=("host:x",)), T0)
        s.add_job(manual("free", overlap=Overlap.ALLOW), T0)
        expected = set()
        for i in range(12):
            for name in ("solo", "polite-a", "polite-b", "free"):
                expected.add(s.enqueue_run(name, T0 + timedelta(microseconds=i))[0].id)

    holders: dict[str, set[int]] = {"solo": set(), "host:x": set()}
    violations: list[str] = []

    def held(claimed: list[Any]) -> None:
        for c in claimed:
            for key in _keys(c.run):
                holders[key].add(c.run.id)
                if len(holders[key]) > 1:
                    violations.append(f"{key}: {sorted(holders[key])}")

    def freed(c: Any) -> None:
        for key in _keys(c.run):
            holders[key].discard(c.run.id)

    done, ends, errors = _four_claimers(pg_url, held, freed)
    assert errors == []
    assert all(state is RunState.SUCCEEDED for state in ends)
    assert violations == []
    assert sorted(done) == sorted(expected)  # each run claimed once, none left behind


def _four_claimers(
    pg_url: str,
    held: Callable[[list[Any]], None],
    freed: Callable[[Any], None],
    tags: Sequence[tuple[str, ...]] = ((), (), (), ()),
) -> tuple[list[int], list[RunState], list[BaseException]]:
    """Four claimers at once, each on its own connection, claiming two runs at a time
    until 50 claims in a row find none. Under one lock, ``held(claimed)`` sees each claim
    as it returns and ``freed(claim)`` each run before the commit of its end that frees it.
    Claimer ``n`` carries ``tags[n]``. Returns the runs ended, their states, and what any claimer raised."""
    guard = threading.Lock()
    done: list[int] = []
    ends: list[RunState] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def claimer(n: int) -> None:
        me = f"d{n}"
        rnd = random.Random(n)
        try:
            with _view(pg_url) as st:
                barrier.wait()
                idle = 0
                while idle < 50:
                    claimed, _ = st.claim(
                        me, "h", T0 + timedelta(seconds=1), 60, limit=2, tags=tags[n]
                    )
                    if not claimed:
                        idle += 1
                        continue
                    idle = 0
                    with guard:
                        held(claimed)
                    if rnd.random() < 0.5:
                        threading.Event().wait(0.002)
                    for c in claimed:
                        with guard:  # let go before the commit that frees it
                            freed(c)
                            done.append(c.run.id)
                        ends.append(
                            st.finish(c.run, c.run.attempt, me, T0 + timedelta(seconds=1)).state
                        )
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return done, ends, errors


def test_claimers_racing_keep_max_running(pg_url):
    """--max-running 2 (jobctl(1), jobctl add) across claimers: four at once, each on its own connection,
    never three leased runs of the job, every run claimed exactly once; and the database
    itself refuses a third holder of the job's two places."""
    with _view(pg_url) as s:
        s.add_job(manual("pair", overlap=Overlap.ALLOW, max_running=2), T0)
        expected = {s.enqueue_run("pair", T0 + timedelta(microseconds=i))[0].id for i in range(24)}

    holding: set[int] = set()
    most = [0]

    def held(claimed: list[Any]) -> None:
        holding.update(c.run.id for c in claimed)
        most[0] = max(most[0], len(holding))

    done, _, errors = _four_claimers(pg_url, held, lambda c: holding.discard(c.run.id))
    assert errors == []
    assert 1 <= most[0] <= 2
    assert sorted(done) == sorted(expected)

    # the database's own rule: a third run written leased into a held place is refused
    with _view(pg_url) as s:
        ids = [s.enqueue_run("pair", T0 + timedelta(seconds=5 + i))[0].id for i in range(3)]
        got = []
        for _ in range(3):  # a turn claims one run of such a job at most
            claimed, _ = s.claim("d9", "h", T0 + timedelta(seconds=10), 60, limit=5)
            got += [c.run.id for c in claimed]
        assert sorted(got) == ids[:2]
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(pg_url) as conn:
        conn.execute("SET search_path TO jobctl")
        slot = conn.execute("SELECT slot FROM runs WHERE id = %s", (ids[0],)).fetchone()[0]
        assert slot in (0, 1)
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "UPDATE runs SET state = 'leased', leased_by = 'rogue', slot = %s WHERE id = %s",
                (slot, ids[2]),
            )


def _keys(run) -> list[str]:
    keys = ["solo"] if run.job_name == "solo" else []
    return keys + [lock for lock in run.locks if lock == "host:x"]


# ---------------------------------------------------------------- db info and db copy


def _strip_ids(value):
    if isinstance(value, dict):
        return {k: _strip_ids(v) for k, v in value.items() if k not in ("id", "run_id")}
    if isinstance(value, list):
        return [_strip_ids(v) for v in value]
    return value


def _views(jobctl_at, names):
    return {
        "list": _strip_ids(jobctl_at.json("list")),
        "runs": _strip_ids(jobctl_at.json("runs", "--limit", "100000")),
        "show": {n: _strip_ids(jobctl_at.json("show", n)) for n in names},
    }


def _history(location, n_jobs: int = 100) -> list[str]:
    """``n_jobs`` jobs with runs in every state, attempts with output, keys and locks."""
    from conftest import StoreView

    names = []
    with StoreView(location) as s:
        for i in range(n_jobs):
            name = f"job-{i:03d}"
            names.append(name)
            if i % 3 == 0:
                spec = JobSpec(
                    name=name,
                    trigger=Trigger(TriggerKind.CRON, tz="Europe/Paris", expr=f"{i % 60} * * * *"),
                    command=f"echo {i}",
                    env={"N": str(i)},
                    locks=("shared",) if i % 2 else (),
                )
            else:
                spec = manual(name, retries=i % 3, overlap=Overlap.ALLOW, priority=i % 5)
            s.add_job(spec, T0)
            for k in range(i % 4):
                s.enqueue_run(name, T0 + timedelta(seconds=k), key=f"k{k}" if k % 2 else None)
        for turn in range(40):
            now = T0 + timedelta(seconds=10 + turn)
            claimed, _ = s.claim("d1", "host-a", now, 30, limit=10)
            for c in claimed:
                s.finish(c.run, c.run.attempt, "d1", now, exit_code=(c.run.id % 3))
    return names


@pytest.mark.long
def test_db_copy_sqlite_to_postgresql_and_back_keeps_what_every_view_shows(
    tmp_path, pg_url, jobctl
):
    from conftest import Jobctl

    source = Jobctl(tmp_path / "source.db")
    back = Jobctl(tmp_path / "back.db")
    on_pg = Jobctl(pg_url)
    try:
        names = _history(source.db)
        before = _views(source, names)
        assert sum(1 for r in before["runs"] if r["state"] == "succeeded") > 10
        out = source("db", "copy", "--to", pg_url, "--history")
        assert out.stdout.startswith("copied 100 jobs and ")
        assert _views(on_pg, names) == before
        on_pg("db", "copy", "--to", str(back.db), "--history")
        assert _views(back, names) == before
        info = back.json("db", "info")
        assert (info["backend"], info["jobs"]) == ("sqlite", 100)
        assert info["runs"] == len(before["runs"])
    finally:
        for j in (source, back, on_pg):
            j.close()


def test_db_copy_without_history_and_onto_a_database_with_jobs(tmp_path, pg_url):
    from conftest import Jobctl

    source = Jobctl(tmp_path / "source.db")
    on_pg = Jobctl(pg_url)
    try:
        names = _history(source.db, n_jobs=6)
        source("db", "copy", "--to", pg_url)
        jobs = on_pg.json("list")
        assert [j["name"] for j in jobs] == names
        assert all(j["last_run"] is None and j["missed_total"] == 0 for j in jobs)
        assert on_pg.json("runs") == []
        before = on_pg.json("list")
        refused = subprocess.run(
            [*JOBCTL, "--db", str(source.db), "db", "copy", "--to", pg_url, "--history"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 1
        assert refused.stderr.startswith("Error: the target database holds 6 jobs")
        assert len(refused.stderr.splitlines()) == 1
        assert on_pg.json("list") == before and on_pg.json("runs") == []
    finally:
        source.close()
        on_pg.close()


@pytest.mark.parametrize("target", ["sqlite", "postgresql"])
def test_db_copy_never_gives_a_copied_run_an_id_used_before(tmp_path, pg_url, target):
    """Run ids are the idempotency key a command sees (JOBCTL_RUN_ID): a copy into a
    database whose jobs were deleted continues after the ids it gave, on either target."""
    from conftest import Jobctl

    source = Jobctl(tmp_path / "source.db")
    dest = Jobctl(tmp_path / "dest.db" if target == "sqlite" else pg_url)
    try:
        _history(source.db, n_jobs=8)
        dest("add", "old", "--manual", "--", "true")
        used = [dest.json("run", "old")["id"] for _ in range(3)]
        dest("rm", "old")
        assert dest.json("runs") == []
        source("db", "copy", "--to", str(dest.db) if target == "sqlite" else pg_url, "--history")
        ids = [r["id"] for r in dest.json("runs", "--limit", "100000")]
        assert ids and min(ids) > max(used)
        assert len(set(ids)) == len(ids) == len(source.json("runs", "--limit", "100000"))
        later = dest.json("run", dest.json("list")[0]["name"])["id"]
        assert later > max(ids)  # and the table's own counter went on past them
    finally:
        source.close()
        dest.close()


def test_db_info_on_postgresql_hides_the_password(pg_url):
    from conftest import Jobctl

    from jobctl.store.postgresql.schema import SCHEMA_VERSION

    url = pg_url.replace("postgres@", "postgres:s3cret@")
    j = Jobctl(url)
    try:
        j("add", "a", "--manual", "--", "true")
        info = j.json("db", "info")
        human = j("db", "info").stdout
    finally:
        j.close()
    assert info["backend"] == "postgresql"
    assert info["location"] == pg_url
    assert (info["schema_version"], info["jobs"], info["runs"]) == (SCHEMA_VERSION, 1, 0)
    assert info["size_bytes"] > 0
    assert "s3cret" not in human


def test_a_transaction_aborted_to_break_a_deadlock_is_run_again(pg_url):
    """The server aborts one of two deadlocked writers (SQLSTATE 40P01); the store runs that
    whole transaction again instead of failing the command. Here a trigger aborts the first
    two tries of an update the way the deadlock detector does (a sequence is not rolled back,
    so it counts the tries)."""
    with _view(pg_url) as s:
        s.add_job(manual("a"), T0)
        with _admin(pg_url) as admin:
            admin.execute("CREATE SEQUENCE jobctl.tries")
            admin.execute(
                "CREATE FUNCTION jobctl.abort_twice() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN IF nextval('jobctl.tries') <= 2 THEN "
                "RAISE EXCEPTION 'deadlock detected (test)' USING ERRCODE = '40P01'; END IF; "
                "RETURN NEW; END $$"
            )
            admin.execute(
                "CREATE TRIGGER abort_twice BEFORE UPDATE ON jobctl.jobs "
                "FOR EACH ROW EXECUTE FUNCTION jobctl.abort_twice()"
            )
            job = s.pause_job("a", T0)
            assert job.state.value == "paused"
            # two aborted tries, then the pause and its revision number (README, Jobs in git)
            assert admin.execute("SELECT last_value FROM jobctl.tries").fetchone()[0] == 4


# ---------------------------------------------------------------- wake-ups


def test_each_change_sends_one_notify(pg_url):
    """A command's change is announced by the store inside its own transaction: one
    NOTIFY a change, none from a second transaction afterwards (issue 28)."""
    import psycopg

    _open(pg_url).close()  # the schema exists before the listener starts
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute("LISTEN jobctl")

        def heard() -> list[str]:
            return [n.payload for n in listener.notifies(timeout=0.5, stop_after=None)]

        env = {**os.environ, "JOBCTL_DB": pg_url}

        def jobctl(*args: str) -> None:
            subprocess.run([*JOBCTL, *args], env=env, check=True, capture_output=True)

        heard()
        jobctl("add", "one", "--manual", "--", "true")
        added = heard()
        assert len(added) == 1 and added[0].startswith("job:"), added
        jobctl("run", "one")
        enqueued = heard()
        assert len(enqueued) == 1 and enqueued[0].startswith("run:"), enqueued
        jobctl("pause", "one")
        assert len(heard()) == 1


def test_claimers_racing_keep_on_tags_with_max_running(pg_url):
    """--on gpu with --max-running 2 across four claimers, two carrying gpu: a gpu run is
    only ever claimed by a gpu claimer, never three at once, and every run (the untagged
    ones by anyone) is claimed exactly once."""
    with _view(pg_url) as s:
        s.add_job(manual("render", overlap=Overlap.ALLOW, max_running=2, on_tags=("gpu",)), T0)
        s.add_job(manual("any", overlap=Overlap.ALLOW), T0)
        renders = {s.enqueue_run("render", T0 + timedelta(microseconds=i))[0].id for i in range(16)}
        others = {s.enqueue_run("any", T0 + timedelta(microseconds=i))[0].id for i in range(16)}

    holding: set[int] = set()
    most = [0]
    by: dict[int, list[str]] = {}

    def held(claimed: list[Any]) -> None:
        for c in claimed:
            by.setdefault(c.run.id, []).append(c.run.leased_by)
        holding.update(c.run.id for c in claimed if c.run.id in renders)
        most[0] = max(most[0], len(holding))

    tags = (("gpu", "host:h"), ("host:h",), ("gpu",), ())
    done, _, errors = _four_claimers(pg_url, held, lambda c: holding.discard(c.run.id), tags)
    assert errors == []
    assert 1 <= most[0] <= 2
    assert sorted(done) == sorted(renders | others)
    assert all(len(who) == 1 for who in by.values())
    assert {by[r][0] for r in renders} <= {"d0", "d2"}
