"""No read the README names (History: what is kept) scans every run: each statement the store runs for ``runs``
(all jobs or one, by state, since a time), ``show``, ``inspect``, ``list`` (and
``--failing``), ``status``, ``logs NAME``, ``coverage``, the API's lists and ``/metrics``
is captured as it is sent, and its plan asked of the database: SQLite's ``EXPLAIN QUERY
PLAN``, PostgreSQL's ``EXPLAIN`` with sequential scans priced out (so a plan that still
has one, or that reads a whole index, has no index to search instead).

A plan may walk ``runs_window`` in order under a LIMIT (the newest runs of all jobs);
anything else that reads the history tables must search them through an index, and no
statement may sort runs by their window (it must walk an index in that order). Small
sorts of what is bounded by the open runs (a run's lock holders, a job's leased
siblings, for ``inspect``) are allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import StoreView

from jobctl.models import JobSpec, RunState, Trigger, TriggerKind
from jobctl.web.metrics import DURATION_BUCKETS_SECONDS

T0 = datetime(2026, 1, 5, tzinfo=UTC)
#: a statement that orders runs by their window: it must walk an index in that order
_BY_WINDOW = re.compile(r"ORDER BY\s+\w*\.?scheduled_for", re.I)
_FROM = re.compile(
    r"\b(?:FROM|JOIN)\s+(runs|attempts|run_locks)\b(?:\s+(?:AS\s+)?(?!ON\b|WHERE\b|JOIN\b|LEFT\b"
    r"|ORDER\b|GROUP\b|LIMIT\b|INDEXED\b)(\w+))?",
    re.I,
)


class Recorder:
    """Every read the store sends, with its parameters, while installed."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.original = db.read
        self.seen: list[tuple[str, Any]] = []

    def __enter__(self) -> Recorder:
        def read(sql: str, params: Any = ()) -> Any:
            self.seen.append((sql, params))
            return self.original(sql, params)

        self.db.read = read
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.read = self.original


def aliases(sql: str) -> set[str]:
    out = set()
    for m in _FROM.finditer(sql):
        out.add(m.group(1).lower())
        if m.group(2):
            out.add(m.group(2).lower())
    return out


def sqlite_problems(store: StoreView, sql: str, params: Any) -> list[str]:
    names = aliases(sql)
    rows = store.handle.db.conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    problems = []
    for row in rows:
        detail = row[3]
        m = re.match(r"SCAN (\w+)", detail)
        if m and m.group(1).lower() in names:
            ordered_walk = "INDEX runs_window" in detail and "LIMIT" in sql.upper()
            if not ordered_walk:
                problems.append(detail)
        if "TEMP B-TREE FOR ORDER BY" in detail and _BY_WINDOW.search(sql):
            problems.append(detail)
    return problems


def pg_problems(store: StoreView, sql: str, params: Any) -> list[str]:
    from psycopg.rows import tuple_row

    conn = store.handle.db.conn
    with conn.transaction():
        cur = conn.cursor(row_factory=tuple_row)
        cur.execute("SET LOCAL enable_seqscan = off")
        plan = [r[0].strip() for r in cur.execute("EXPLAIN " + sql, params).fetchall()]
    problems = []
    for i, line in enumerate(plan):
        node = line.removeprefix("->").strip()
        # the node's own lines, up to the next node
        own = []
        for rest in plan[i + 1 :]:
            if rest.startswith("->"):
                break
            own.append(rest)
        if re.match(r"Seq Scan on (runs|attempts|run_locks)\b", node):
            problems.append(node)
        scan = re.match(
            r"Index (Only )?Scan (Backward )?using (\w+) on (runs|attempts|run_locks)\b", node
        )
        if scan and not any(x.startswith("Index Cond") for x in own):
            ordered_walk = scan.group(3) == "runs_window" and "LIMIT" in sql.upper()
            if not ordered_walk:
                problems.append(node)  # every entry of the index: a scan all the same
        if re.match(r"(Incremental )?Sort\s+\(", node):
            key = next((x for x in own if x.startswith("Sort Key")), "")
            if "scheduled_for" in key:
                problems.append(f"{node} {key}")
    return problems


def manual(name: str) -> JobSpec:
    return JobSpec(name, Trigger(TriggerKind.MANUAL, "UTC"), "true", retries=0)


@pytest.fixture
def store(db):
    with StoreView(db) as view:
        view.add_job(manual("a"), T0)
        view.add_job(JobSpec("b", Trigger(TriggerKind.CRON, "UTC", "0 * * * *"), "true"), T0)
        for i in range(6):
            at = T0 + timedelta(hours=i)
            view.enqueue_run("a", at)
            (claimed,), _ = view.claim("d", "h", at, 60, limit=1)
            view.finish(claimed.run, claimed.run.attempt, "d", at + timedelta(seconds=1), i % 3)
        view.enqueue_run("a", T0 + timedelta(days=1))
        yield view


READS: dict[str, Callable[[StoreView], Any]] = {
    "runs": lambda s: s.list_runs(limit=20),
    "runs NAME": lambda s: s.list_runs("a", limit=20),
    "runs --state S": lambda s: s.list_runs(state=RunState.DEAD, limit=20),
    "runs NAME --state S": lambda s: s.list_runs("a", RunState.SUCCEEDED, 20),
    "runs --since": lambda s: s.list_runs(limit=20, since=T0 + timedelta(hours=2)),
    "runs NAME --since": lambda s: s.list_runs("a", limit=20, since=T0),
    "show": lambda s: (s.get_job("a"), s.list_runs("a", limit=10), s.last_runs([1])),
    "inspect": lambda s: (s.get_run(1), s.get_attempts(1), s.waiting(1, T0)),
    "list": lambda s: (s.list_jobs(), s.last_runs()),
    "list --failing": lambda s: s.failing_jobs(),
    "status": lambda s: s.status(T0),
    "logs NAME": lambda s: s.last_attempted_run("a"),
    "logs RUN_ID": lambda s: s.get_output(1),
    "coverage": lambda s: s.window_runs("b", T0, T0 + timedelta(days=1)),
    "metrics": lambda s: (
        s.run_counters(),
        s.attempt_duration_histogram(DURATION_BUCKETS_SECONDS),
        s.status(T0),
    ),
}


@pytest.mark.parametrize("read", sorted(READS))
def test_no_listing_scans_or_sorts_every_run(store: StoreView, read: str) -> None:
    with Recorder(store.handle.db) as rec:
        READS[read](store)
    on_history = [(sql, p) for sql, p in rec.seen if aliases(sql)]
    assert on_history, "the read touched no history table: the recorder missed it"
    check = pg_problems if store.handle.backend == "postgresql" else sqlite_problems
    for sql, params in on_history:
        problems = check(store, sql, params)
        assert not problems, f"{read}: {problems}\n{sql}"


def test_the_check_catches_a_scan(store: StoreView) -> None:
    """The rule is not vacuous: counting every run by state is what it refuses."""
    check = pg_problems if store.handle.backend == "postgresql" else sqlite_problems
    assert check(store, "SELECT state, COUNT(*) FROM runs GROUP BY job_id, state", ())
    # a sort of one job's runs by window, as a LIMIT over a (job_id, state) search would
    assert check(store, "SELECT id FROM runs WHERE job_id = 1 ORDER BY scheduled_for + 0", ())
