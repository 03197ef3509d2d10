"""The drivers under the daemons' face (store/driver.py): the same cases against both, each
a member called directly and judged by what it leaves in a real database (a SQLite file,
a database on the suite's PostgreSQL server), whatever JOBCTL_TEST_BACKEND says."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobctl import planner
from jobctl.clock import to_us
from jobctl.errors import Conflict
from jobctl.models import JobSpec, Overlap, RunState, Trigger, TriggerKind
from jobctl.notifications import Channel, ChannelKind
from jobctl.outcomes import AttemptResult
from jobctl.store import open_store
from jobctl.store.dialect import Retryable
from jobctl.store.driver import Quota
from jobctl.store.values import DaemonIdentity, FinishItem

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ME = DaemonIdentity("d1", "h1", 1, "b1", 30.0)
OTHER = DaemonIdentity("d2", "h2", 2, "b2", 30.0)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    location = tmp_path / "j.db" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = open_store(location)
    yield s
    s.close()


def manual(name: str, **kw: Any) -> JobSpec:
    return JobSpec(name, Trigger(TriggerKind.MANUAL, "UTC"), "true", retries=0, **kw)


def _claim(store: Any, identity: DaemonIdentity, now: datetime, limit: int) -> list[Any]:
    driver = store.open_daemon(identity).driver
    with driver.turn() as c:
        return list(driver.claim(c, identity, now, Quota(limit, None, None)))


def test_the_scheduler_lease_has_one_holder_until_it_runs_out(store):
    mine, other = store.open_daemon(ME).driver, store.open_daemon(OTHER).driver
    until = to_us(T0 + timedelta(seconds=30))
    with mine.db.write() as c:
        assert mine.take_leader(c, "d1", until, to_us(T0))
        assert not other.take_leader(c, "d2", until, to_us(T0 + timedelta(seconds=10)))
        assert mine.take_leader(c, "d1", until + 1, to_us(T0 + timedelta(seconds=10)))
        assert other.take_leader(c, "d2", until + 2, until + 2)  # run out: taken over


def test_a_claim_takes_one_run_of_a_forbid_job_and_every_run_of_an_allow_job(store):
    store.commands.add_job(manual("solo", overlap=Overlap.FORBID), None, T0)
    store.commands.add_job(manual("many", overlap=Overlap.ALLOW), None, T0)
    for i in range(2):
        store.commands.enqueue_run("solo", T0 + timedelta(seconds=i))
        store.commands.enqueue_run("many", T0 + timedelta(seconds=i))
    claimed = _claim(store, ME, T0 + timedelta(minutes=1), limit=10)
    names = sorted(c.run.job_name for c in claimed)
    assert names == ["many", "many", "solo"]
    assert all(c.run.state is RunState.LEASED and c.run.attempt == 1 for c in claimed)
    assert _claim(store, OTHER, T0 + timedelta(minutes=1), limit=10) == []


def test_a_claimed_run_is_the_run_the_commands_read_after_the_claim(store):
    """What a claim returns of each run (its locks, its lease, its new attempt's start
    and host) is what reading it back gives: the daemon starts the attempt from it."""
    store.commands.add_job(manual("locked", locks=("b", "a")), None, T0)
    store.commands.add_job(manual("plain"), None, T0)
    store.commands.enqueue_run("locked", T0)
    store.commands.enqueue_run("plain", T0 + timedelta(seconds=1))
    now = T0 + timedelta(minutes=1)
    claimed = _claim(store, ME, now, limit=10)
    assert len(claimed) == 2
    for c in claimed:
        assert c.run == store.commands.get_run(c.run.id)
        assert c.run.host == ME.host and c.run.attempt_started_at == now
    assert [c.run.locks for c in claimed] == [("a", "b"), ()]


def test_a_lease_is_renewed_only_for_the_attempt_holding_it(store):
    store.commands.add_job(manual("j"), None, T0)
    run, _ = store.commands.enqueue_run("j", T0)
    assert len(_claim(store, ME, T0, limit=1)) == 1
    driver = store.open_daemon(ME).driver
    until = to_us(T0 + timedelta(minutes=5))
    with driver.db.write() as c:
        assert driver.renew_runs(c, "d1", until, [(run.id, 1), (run.id, 2)]) == [(run.id, False)]
        assert driver.renew_runs(c, "d2", until, [(run.id, 1)]) == []
    store.commands.cancel_runs([run.id], T0)
    with driver.db.write() as c:
        assert driver.renew_runs(c, "d1", until, [(run.id, 1)]) == [(run.id, True)]
    assert store.commands.get_run(run.id).state is RunState.LEASED


def test_an_end_is_written_only_by_the_attempt_holding_the_lease(store):
    job = store.commands.add_job(manual("j"), None, T0)
    store.commands.enqueue_run("j", T0)
    (claimed,) = _claim(store, ME, T0, limit=1)
    now = T0 + timedelta(seconds=3)
    result = AttemptResult(0)
    decision = planner.decide(claimed.run, 1, result, now, random.Random(0))
    assert decision is not None
    stale = FinishItem(claimed.run.id, 2, result, decision, job_id=job.id)
    held = FinishItem(claimed.run.id, 1, result, decision, job_id=job.id)
    driver = store.open_daemon(ME).driver
    with driver.turn() as c:
        ends, _ = driver.finish(c, "d1", now, [stale, held], [])
    assert ends == [None, (RunState.SUCCEEDED, job.id)]
    assert store.commands.get_run(claimed.run.id).state is RunState.SUCCEEDED


def test_due_jobs_say_whether_a_run_of_theirs_is_leased(store):
    hourly = JobSpec("h", Trigger(TriggerKind.CRON, "UTC", "0 * * * *"), "true")
    job = store.commands.add_job(hourly, T0, T0)
    driver = store.open_daemon(ME).driver
    assert list(driver.schedule_heads()) == [(to_us(T0), job.id)]
    with driver.db.write() as c:
        (row,) = driver.due_jobs(c, [(job.id, to_us(T0))]).values()
    assert row["id"] == job.id and not row["has_leased"]
    store.commands.enqueue_run("h", T0)
    _claim(store, ME, T0, limit=1)
    with driver.db.write() as c:
        (row,) = driver.due_jobs(c, [(job.id, to_us(T0))]).values()
    assert row["has_leased"]


def test_a_write_of_the_outbox_is_retried_like_every_write(store, monkeypatch):
    # a PostgreSQL deadlock aborts a transaction whole (Retryable): the face runs it again,
    # the outbox's writes as much as its own
    from jobctl.store import outbox

    failures = {"add_channel": 1, "claim_due": 1}

    def once(name: str) -> Any:
        real = getattr(outbox, name)

        def flaky(*args: Any, **kwargs: Any) -> Any:
            if failures[name]:
                failures[name] -= 1
                raise Retryable("database error: deadlock detected")
            return real(*args, **kwargs)

        return flaky

    for name in failures:
        monkeypatch.setattr(outbox, name, once(name))
    ch = Channel("ops", ChannelKind.WEBHOOK, "http://127.0.0.1:9/hook")
    store.commands.add_channel(ch, T0)
    assert store.commands.get_channel("ops").target == ch.target
    face = store.open_daemon(ME)
    face.register_daemon(T0)
    assert face.exchange_notifications(T0, [], limit=5, lease_seconds=30) == ([], None)
    assert failures == {"add_channel": 0, "claim_due": 0}
    with pytest.raises(Conflict):
        store.commands.add_channel(ch, T0)  # a Conflict is not retried: it is the answer
