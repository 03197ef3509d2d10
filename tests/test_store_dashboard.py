"""The dashboard's reads in the store (README, The dashboard's pages), on both backends: what each returns, and
that no statement of theirs reads every run (each one goes through an index)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import BACKEND, Jobctl

from jobctl.models import JobSpec, JobState, RunState, Trigger, TriggerKind

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def manual(name: str, command: str = "true", description: str | None = None) -> JobSpec:
    return JobSpec(
        name=name,
        trigger=Trigger(TriggerKind.MANUAL, "UTC"),
        command=command,
        description=description,
        retries=0,
    )


def play(store: Any, name: str, start: datetime, seconds: float, exit_code: int) -> int:
    """One run of ``name`` enqueued at ``start``, claimed, ended ``seconds`` later."""
    run, _ = store.enqueue_run(name, start)
    [c], _ = store.claim("d1", "h1", start, 3600, limit=1)
    assert c.run.id == run.id
    store.finish(c.run, c.run.attempt, "d1", start + timedelta(seconds=seconds), exit_code)
    return int(run.id)


@pytest.fixture
def store(jobctl: Jobctl) -> Any:
    return jobctl.store()


def test_job_facts_search_state_and_last_run(store: Any) -> None:
    for spec in (
        manual("alpha", "echo 100% done"),
        manual("beta", "backup --to /srv", "nightly_backup"),
        manual("gamma"),
    ):
        store.add_job(spec, T0)
    play(store, "alpha", T0, 1, 3)  # dead
    play(store, "beta", T0, 1, 0)
    store.pause_job("gamma", T0)
    dash = store.handle.dashboard
    facts = {f.name: f for f in dash.job_facts(None, None, T0)}
    assert set(facts) == {"alpha", "beta", "gamma"}
    assert facts["alpha"].last_state is RunState.DEAD
    assert facts["beta"].last_state is RunState.SUCCEEDED
    assert facts["gamma"].last_state is None and facts["gamma"].state is JobState.PAUSED
    # the search ignores case, looks in the name, description and command, and takes
    # % and _ as they are
    assert [f.name for f in dash.job_facts("BACKUP", None, T0)] == ["beta"]
    assert [f.name for f in dash.job_facts("100%", None, T0)] == ["alpha"]
    assert [f.name for f in dash.job_facts("h_ly", None, T0)] == []
    assert [f.name for f in dash.job_facts("1%done", None, T0)] == []
    assert [f.name for f in dash.job_facts("ly_b", None, T0)] == ["beta"]
    assert [f.name for f in dash.job_facts(None, JobState.PAUSED, T0)] == ["gamma"]
    # a run waiting for its retry, and the oldest open run's due time
    store.add_job(
        JobSpec(name="flaky", trigger=Trigger(TriggerKind.MANUAL, "UTC"), command="x"), T0
    )
    store.enqueue_run("flaky", T0)
    [c], _ = store.claim("d1", "h1", T0, 3600, limit=1)
    store.finish(c.run, 1, "d1", T0 + timedelta(seconds=1), 1)
    flaky = next(f for f in dash.job_facts("flaky", None, T0))
    assert flaky.failing and flaky.oldest_open_due is not None and flaky.oldest_open_due > T0


def test_pages_of_runs_across_jobs_with_a_cursor(store: Any) -> None:
    store.add_job(manual("a"), T0)
    store.add_job(manual("b"), T0)
    for i in range(7):
        play(store, "a" if i % 2 else "b", T0 + timedelta(minutes=i), 1, i % 3 and 1)
    dash = store.handle.dashboard
    everything = [r.id for r in store.list_runs(limit=100)]
    first = dash.runs_page(None, None, None, None, 3)
    assert [r.id for r in first] == everything[:3]
    cursor = (first[-1].scheduled_for, first[-1].id)
    assert [r.id for r in dash.runs_page(None, None, None, cursor, 10)] == everything[3:]
    assert [r.id for r in dash.runs_page("a", None, None, None, 10)] == [
        r.id for r in store.list_runs("a", limit=100)
    ]
    dead = dash.runs_page(None, RunState.DEAD, None, None, 10)
    assert dead and all(r.state is RunState.DEAD for r in dead)
    since = dash.runs_page(None, None, T0 + timedelta(minutes=5), None, 10)
    assert [r.id for r in since] == everything[:2]
    from jobctl.errors import NotFound

    with pytest.raises(NotFound):
        dash.runs_page("nope", None, None, None, 10)
    # counts by state of the windows since a time, and the chart's runs
    counts = dash.run_counts_since(T0 + timedelta(minutes=2))
    assert sum(counts.values()) == 5 and set(counts) >= {s.value for s in RunState}
    a_id = store.get_job("a").id
    assert [r.id for r in dash.finished_runs(a_id, 2)] == [
        r.id for r in store.list_runs("a", limit=2)
    ]
    assert dash.last_runs([a_id])[a_id].id == store.list_runs("a", limit=1)[0].id
    # a strip: id, state and window of the newest runs, newest first
    assert [(r.id, r.state, r.scheduled_for) for r in dash.recent_runs([a_id], 2)[a_id]] == [
        (r.id, r.state, r.scheduled_for) for r in store.list_runs("a", limit=2)
    ]


def test_timeline_attempts_that_overlap_the_range(store: Any) -> None:
    store.add_job(manual("a"), T0)
    store.add_job(manual("b"), T0)
    old = play(store, "a", T0 - timedelta(hours=30), 60, 0)
    early = play(store, "a", T0 - timedelta(hours=2), 3600, 0)
    late = play(store, "b", T0 - timedelta(minutes=90), 3600, 1)
    ids = [store.get_job("a").id, store.get_job("b").id]
    bars = store.handle.dashboard.timeline(ids, T0 - timedelta(hours=24), T0)
    assert [(b.run_id, b.job_name, b.state) for b in bars] == [
        (early, "a", "succeeded"),
        (late, "b", "dead"),
    ]
    assert old not in [b.run_id for b in bars]
    assert bars[0].finished_at == T0 - timedelta(hours=1)
    assert store.handle.dashboard.timeline([ids[1]], T0 - timedelta(hours=24), T0)[0].run_id == late


def test_timeline_job_ids_are_the_jobs_with_a_bar(store: Any) -> None:
    for name in ("a", "b", "c", "d"):
        store.add_job(manual(name), T0 - timedelta(days=3))
    play(store, "a", T0 - timedelta(hours=30), 60, 0)  # before the range
    play(store, "b", T0 - timedelta(hours=2), 60, 1)
    play(store, "c", T0 - timedelta(hours=25), 3600 * 2, 0)  # ends inside it
    ids = {name: store.get_job(name).id for name in ("a", "b", "c", "d")}
    dash = store.handle.dashboard
    got = dash.timeline_job_ids(T0 - timedelta(hours=24), T0)
    assert got == {ids["b"], ids["c"]}
    bars = dash.timeline(list(ids.values()), T0 - timedelta(hours=24), T0)
    assert got == {b.job_id for b in bars}
    assert dash.timeline_job_ids(T0 + timedelta(hours=1), T0 + timedelta(hours=2)) == set()


def _plans(store: Any, sql: str, params: Any) -> str:
    if BACKEND == "postgresql":
        with store.write() as c:
            c.execute("SET LOCAL enable_seqscan = off")
            rows = c.execute("EXPLAIN " + sql.replace("%s", "?"), params).fetchall()
        return "\n".join(r[0] for r in rows)
    rows = store.conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    return "\n".join(str(r[3]) for r in rows)


def test_no_dashboard_statement_reads_every_run(store: Any) -> None:
    """Each statement over ``runs`` goes through an index (PostgreSQL: with sequential
    scans discouraged, so a small table does not hide a missing index)."""
    q = store.handle.db.q
    mark = "%s" if BACKEND == "postgresql" else "?"
    statements: list[tuple[str, Any]] = [
        (q.dash_job_facts.format(where=""), ()),
        (q.dash_open_runs, ()),
        (q.dash_last_runs.format(marks=mark), (1,)),
        (q.dash_strip_runs, (1, 20)),
        (q.dash_busy_workers, ()),
        (q.dash_finished_runs, (1, 100)),
        (q.dash_timeline.format(marks=mark), (1, 0, 0, 0, 0, 10)),
        (q.list_runs.format(where=f"WHERE runs.scheduled_for >= {mark}"), (0, 50)),
        (q.list_runs.format(where=f"WHERE runs.state = {mark}"), ("dead", 50)),
        (q.list_runs.format(where=f"WHERE runs.job_id = {mark}"), (1, 50)),
    ]
    counts = q.dash_run_counts_since
    statements.append((counts, {"since": 0}))
    for sql, params in statements:
        plan = _plans(store, sql, params)
        if BACKEND == "postgresql":
            assert "Seq Scan on runs" not in plan, (sql, plan)
            continue
        for line in plan.splitlines():
            assert not re.fullmatch(r"SCAN (runs|r|a)", line), (sql, plan)
            # a job's runs are found by its id, never among every run of a state
            if line.startswith("SEARCH r ") and "GROUP" not in sql:
                assert "job_id=" in line, (sql, plan)


def test_the_timeline_finds_attempts_by_their_run(store: Any) -> None:
    """The timeline's attempts are looked up run by run, never joined from every attempt
    (PostgreSQL hashed every attempt for some pages of jobs at a million runs): even with
    nested loops priced out, the plan searches the attempts by their run's id."""
    q = store.handle.db.q
    mark = "%s" if BACKEND == "postgresql" else "?"
    sql = q.dash_timeline.format(marks=mark)
    params = (1, 0, 0, 0, 0, 10)
    if BACKEND == "postgresql":
        with store.write() as c:
            c.execute("SET LOCAL enable_nestloop = off")
            rows = c.execute("EXPLAIN " + sql.replace("%s", "?"), params).fetchall()
        plan = "\n".join(r[0] for r in rows)
        assert "Seq Scan on attempts" not in plan, plan
        assert re.search(r"Index Cond: \(run_id = runs\.id\)", plan), plan
    else:
        plan = _plans(store, sql, params)
        assert re.search(r"SEARCH a USING .*\(run_id=", plan), plan
