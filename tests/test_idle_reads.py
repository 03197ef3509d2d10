"""What an idle daemon reads periodically is proportional to what changed, never to what
exists (docs/benchmarks.md: idle CPU): each renewal's look for ``--after`` jobs and each
retention pass after the first are searched through indexes, on both backends. SQLite's
``EXPLAIN QUERY PLAN`` of every statement the store sends (captured as it runs);
PostgreSQL's ``EXPLAIN`` of the same statements with sequential scans priced out.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import StoreView

from jobctl.models import JobSpec, Trigger, TriggerKind

T0 = datetime(2026, 1, 5, tzinfo=UTC)
#: partial indexes whose every entry is wanted (a walk of them reads only such jobs)
PARTIAL = ("jobs_after", "jobs_keep_for")


def interval(name: str, **kw: Any) -> JobSpec:
    trig = Trigger(
        TriggerKind.INTERVAL, "UTC", "1d", every_seconds=86400.0, anchor=T0 + timedelta(days=999)
    )
    return JobSpec(name, trig, "true", **kw)


@pytest.fixture
def store(db):
    with StoreView(db) as view:
        for i in range(20):
            view.add_job(interval(f"far{i}"), T0)
        view.add_job(interval("aged", keep_for_seconds=3600.0), T0)
        yield view


def idle_work(store: StoreView) -> None:
    """A renewal's safety net and a retention pass after the first, as an idle leader
    runs them."""
    now = T0 + timedelta(hours=1)
    marks = store.daemon.retention_marks(now)
    store.daemon.fire_after(None, now)
    store.daemon.trim_history(now, after_job_id=0, max_rows=500, since=marks)


def sqlite_scans(store: StoreView) -> list[str]:
    conn = store.handle.db.conn
    sent: list[str] = []
    conn.set_trace_callback(sent.append)
    try:
        idle_work(store)
    finally:
        conn.set_trace_callback(None)
    statements = [s for s in sent if re.match(r"\s*(SELECT|UPDATE|DELETE|WITH)", s, re.I)]
    assert statements, "the trace saw no statement"
    scans = []
    for sql in statements:
        for row in conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall():
            detail = row[3]
            m = re.match(r"SCAN (jobs|runs)\b", detail)
            if m and not any(f"INDEX {p}" in detail for p in PARTIAL):
                scans.append(f"{detail}: {sql.strip()}")
    return scans


def pg_scans(store: StoreView) -> list[str]:
    from psycopg.rows import tuple_row

    q = store.handle.db.q
    marks = f"{q.retention_changed_open.format(marks='%s, %s')}"
    statements = [
        (q.any_after_job, ()),
        (q.after_jobs, ()),
        (q.retention_max_run, ()),
        (q.retention_open_runs, ()),
        (q.retention_changed_new, (5,)),
        (marks, (1, 2)),
        (q.retention_keep_for, ()),
        (q.retention_edited, (0,)),
        (q.retention_job, (1,)),
    ]
    conn = store.handle.db.conn
    scans = []
    with conn.transaction():
        cur = conn.cursor(row_factory=tuple_row)
        cur.execute("SET LOCAL enable_seqscan = off")
        for sql, params in statements:
            plan = [r[0].strip() for r in cur.execute("EXPLAIN " + sql, params).fetchall()]
            for i, line in enumerate(plan):
                node = line.removeprefix("->").strip()
                own = []
                for rest in plan[i + 1 :]:
                    if rest.startswith("->"):
                        break
                    own.append(rest)
                if re.match(r"Seq Scan on (jobs|runs)\b", node):
                    scans.append(f"{node}: {sql.strip()}")
                m = re.match(r"Index (Only )?Scan (Backward )?using (\w+) on (jobs|runs)\b", node)
                if m and m.group(3) not in PARTIAL and not any("Cond" in x for x in own):
                    scans.append(f"{node}: {sql.strip()}")
    return scans


def test_an_idle_daemons_periodic_reads_search_indexes(store: StoreView) -> None:
    check = pg_scans if store.handle.backend == "postgresql" else sqlite_scans
    assert check(store) == []


def test_the_check_catches_a_scan(store: StoreView) -> None:
    """The rule is not vacuous: the look for --after jobs without its index scans jobs."""
    with store.write() as c:
        c.execute(
            "DROP INDEX jobs_after"
            if store.handle.backend == "sqlite"
            else "DROP INDEX jobctl.jobs_after"
        )
    check = pg_scans if store.handle.backend == "postgresql" else sqlite_scans
    assert any("trigger_kind = 'after'" in s for s in check(store))
