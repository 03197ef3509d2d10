"""The daemon's roles, each driven turn by turn against a real SQLite file and a fake clock:
no daemon process, no patched loop. The executor's children are real ``sh`` processes whose
descriptors the test waits on in its own selector."""

from __future__ import annotations

import random
import selectors
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from conftest import StoreView

from jobctl.clock import FakeClock
from jobctl.executor import Executor, ExecutorConfig, Ready
from jobctl.models import JobSpec, RunState, Trigger, TriggerKind
from jobctl.scheduler import FIRE_AHEAD_SECONDS, Scheduler

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def _every(name: str, seconds: int, **kw) -> JobSpec:
    trig = Trigger(TriggerKind.INTERVAL, tz="UTC", every_seconds=seconds, anchor=T0)
    return JobSpec(name=name, trigger=trig, command="true", **kw)


def _scheduler(store: StoreView, logs: list[str]) -> Scheduler:
    return Scheduler(
        store.daemon,
        log=lambda line, level=None: logs.append(line),
        rng=random.Random(0),
        boot_id="boot",
        lease_seconds=30,
    )


def _manual_run(store: StoreView, name: str, command: str, now: datetime, **kw):
    """A ``--manual`` job ``name`` running ``command``, and one run of it enqueued now."""
    store.add_job(JobSpec(name, Trigger(TriggerKind.MANUAL, tz="UTC"), command, **kw), now)
    run, _ = store.enqueue_run(name, now)
    return run


def _daemon(store: StoreView, clock: FakeClock):
    """A Daemon on ``store`` and a fake clock, one worker, no stray reaping, no log."""
    from jobctl.daemon import Daemon, DaemonConfig

    return Daemon(
        store.handle,
        DaemonConfig(workers=1, lease_seconds=30, reap_strays=False),
        clock=clock,
        log=lambda line, level=None: None,
    )


def test_scheduler_fires_on_time_and_catches_up_by_policy(tmp_path):
    store = StoreView(tmp_path / "s.db")
    clock = FakeClock(T0)
    from jobctl.models import Catchup

    store.add_job(_every("on-time", 10), clock.now())
    logs: list[str] = []
    sched = _scheduler(store, logs)
    assert sched.take_lease(clock.now()) is False  # nothing has passed yet
    ahead = timedelta(seconds=FIRE_AHEAD_SECONDS)  # a window is recorded that early
    assert sched.next_due() == T0 + timedelta(seconds=10) - ahead
    for _ in range(3):
        clock.advance(10)
        assert sched.fire_due(clock.now())
    runs = store.list_runs("on-time")
    assert [(r.state, r.reason.value) for r in runs] == [(RunState.PENDING, "schedule")] * 3
    assert sched.next_due() == T0 + timedelta(seconds=40) - ahead
    on_time_logs = list(logs)

    # a new leader after an hour of no scheduler: the windows were missed
    store.add_job(_every("once", 60, catchup=Catchup.ONCE), clock.now())
    clock.advance(3600)
    successor = _scheduler(store, logs)
    successor.take_lease(clock.now())
    while successor.fire_due(clock.now()):
        pass
    once = Counter((r.state, r.reason.value) for r in store.list_runs("once", limit=500))
    assert once[(RunState.PENDING, "catchup")] == 1
    assert once[(RunState.SKIPPED, "schedule")] == 59
    assert store.get_job("once").missed_total == 59
    assert successor.next_due() is not None and successor.next_due() > clock.now()
    # a window on time is said by its run's own lines; missed ones are logged
    assert not any("job on-time:" in line for line in on_time_logs)
    assert any(line.startswith("job once: missed windows up to") for line in logs)
    store.close()


def test_scheduler_does_nothing_without_the_lease(tmp_path):
    store = StoreView(tmp_path / "s.db")
    store.add_job(_every("j", 10), T0)
    sched = _scheduler(store, [])
    assert sched.next_due() is None
    assert sched.fire_due(T0 + timedelta(hours=1)) is False
    assert store.list_runs("j") == []
    store.close()


class Loop:
    """The test's own wait: a real selector over the executor's descriptors."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()

    def watch(self, fd: int, callback: Ready) -> None:
        self.selector.register(fd, selectors.EVENT_READ, callback)

    def unwatch(self, fd: int) -> None:
        self.selector.unregister(fd)

    def turn(self, clock: FakeClock, timeout: float = 0.1) -> None:
        for key, _ in self.selector.select(timeout):
            if self.selector.get_map().get(key.fd) is key:
                key.data(clock.now(), clock.monotonic())


def _executor(store: StoreView, loop: Loop, logs: list[str], workers: int = 2) -> Executor:
    return Executor(
        store.daemon.face("d1", "test-host"),
        ExecutorConfig(workers=workers, lease_seconds=30),
        environ={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "JOBCTL_DB": str(store.handle.location)},
        log=lambda line, level=None: logs.append(line),
        rng=random.Random(0),
        watch=loop.watch,
        unwatch=loop.unwatch,
    )


def test_executor_runs_retries_and_records_outcomes(tmp_path):
    store = StoreView(tmp_path / "e.db")
    clock = FakeClock(datetime.now(UTC))
    ok = _manual_run(store, "ok", "echo out-$JOBCTL_ATTEMPT", clock.now())
    bad = _manual_run(store, "bad", "exit 3", clock.now(), retries=1, backoff_seconds=5)
    logs: list[str] = []
    loop = Loop()
    ex = _executor(store, loop, logs)

    ex.claim(clock.now(), clock.monotonic())
    assert {h.run.id for h in ex.held.values()} == {ok.id, bad.id}
    deadline = time.monotonic() + 10
    while ex.busy and time.monotonic() < deadline:
        loop.turn(clock)
    assert not ex.busy
    assert store.get_run(ok.id).state is RunState.SUCCEEDED
    assert store.get_output(ok.id)[1] == b"out-1\n"
    failed = store.get_run(bad.id)
    assert failed.state is RunState.FAILED and failed.last_error == "exit 3"
    assert sorted(ex.take_ended()) == sorted([ok.job_id, bad.job_id])

    # the retry is not due until its backoff passed, on the clock passed in
    ex.claim(clock.now(), clock.monotonic())
    assert not ex.busy and ex.next_claim_wall is not None
    clock.advance(6)
    ex.claim(clock.now(), clock.monotonic())
    assert [h.attempt for h in ex.held.values()] == [2]
    deadline = time.monotonic() + 10
    while ex.busy and time.monotonic() < deadline:
        loop.turn(clock)
    dead = store.get_run(bad.id)
    assert dead.state is RunState.DEAD and dead.attempt == 2
    assert any("dead" in line for line in logs)
    store.close()


def test_executor_stores_a_running_attempts_output_once_a_second(tmp_path):
    store = StoreView(tmp_path / "o.db")
    clock = FakeClock(datetime.now(UTC))
    run = _manual_run(store, "talk", "echo first; exec sleep 30", clock.now())
    loop = Loop()
    ex = _executor(store, loop, [])
    ex.claim(clock.now(), clock.monotonic())
    [held] = ex.held.values()
    deadline = time.monotonic() + 5
    while held.child.tail.total == 0 and time.monotonic() < deadline:
        loop.turn(clock)
    ex.tick(clock.now(), clock.monotonic())
    assert store.get_output(run.id)[1] == b""  # nothing is written in its first second
    clock.advance(1.0)
    ex.tick(clock.now(), clock.monotonic())
    assert store.get_output(run.id)[1] == b"first\n"
    ex.fence()  # and a fenced attempt is killed, its end not written as a failure
    deadline = time.monotonic() + 5
    while ex.busy and time.monotonic() < deadline:
        loop.turn(clock)
    assert store.get_run(run.id).state is RunState.LEASED  # left to expire and be retried
    store.close()


def test_ends_are_passed_to_the_leading_scheduler_in_one_batch(tmp_path):
    # the scheduler passes the jobs whose runs ended on every 50 ms, and says when (its
    # next_wake); if the lease went meanwhile, nothing is passed here: the store told the
    # leader, wherever it is, when it recorded the ends
    # (test_a_recorded_end_wakes_the_other_daemons)
    from jobctl.scheduler import PASS_ON_SECONDS

    store = StoreView(tmp_path / "p.db")
    clock = FakeClock(T0)
    d = _daemon(store, clock)
    s = d.scheduler
    ended: list[list[int] | None] = []
    s.on_runs_ended = lambda ids, now: ended.append(ids)  # type: ignore[method-assign]
    try:
        s.leading = True
        s.runs_ended([7], 0.0)
        s.turn(clock.now(), 0.0, firing=False)
        assert ended == []  # buffered
        assert s.next_wake(clock.now(), 0.0, firing=False) == pytest.approx(PASS_ON_SECONDS)
        s.runs_ended([8], 0.01)
        s.turn(clock.now(), PASS_ON_SECONDS, firing=False)
        assert ended == [[7, 8]]  # one pass for both
        assert s.next_wake(clock.now(), PASS_ON_SECONDS, firing=False) is None
        s.runs_ended([9], 1.0)
        s.lose_lease()  # the lease went
        s.turn(clock.now(), 1.0 + PASS_ON_SECONDS, firing=False)
        assert ended == [[7, 8]]
    finally:
        d.waker.close()
        d.selector.close()
        store.close()


def test_a_recorded_end_wakes_the_other_daemons(tmp_path):
    # the store announces its own commits: an attempt's end wakes the other daemons with
    # "run" (what it held is free) and "job:ID" (the leader moves a fixed-delay job on)
    from conftest import finish_one

    from jobctl.models import RunState
    from jobctl.outcomes import AttemptResult, Decision

    store = StoreView(tmp_path / "p.db")
    other = store.daemon.open_waker("other")
    try:
        store.daemon.register_daemon("other", 1, "host", "boot", T0, 30.0)
        me = StoreView(tmp_path / "p.db")
        try:
            me.daemon.register_daemon("me", 1, "host", "boot", T0, 30.0)
            job = me.add_job(JobSpec("j", Trigger(TriggerKind.MANUAL, tz="UTC"), "true"), T0)
            me.enqueue_run("j", T0)
            (claimed,), _ = me.claim("me", "host", T0, 30.0)
            other.drain()
            done = finish_one(
                me.daemon,
                claimed.run.id,
                claimed.run.attempt,
                "me",
                T0,
                AttemptResult(0),
                Decision(RunState.SUCCEEDED, None),
                job_id=job.id,
            )
            assert done.state is RunState.SUCCEEDED
            assert sorted(other.drain()) == sorted([f"job:{job.id}", "run"])
        finally:
            me.close()
    finally:
        other.close()
        store.close()


def test_a_short_attempts_pid_is_written_with_its_end_a_long_ones_on_its_own(tmp_path):
    # a child that ends within PID_FLUSH_SECONDS of its start has its pid written by the
    # attempt's end (no write of its own); one that runs on has it written after that wait
    from jobctl.executor import PID_FLUSH_SECONDS

    store = StoreView(tmp_path / "p.db")
    clock = FakeClock(datetime.now(UTC))
    quick = _manual_run(store, "quick", "true", clock.now())
    slow = _manual_run(store, "slow", "exec sleep 30", clock.now())
    loop = Loop()
    ex = _executor(store, loop, [])
    sent: list[int] = []
    inner = ex.store.record_and_claim

    def spy(*args, **kw):
        sent.extend(run_id for run_id, _, _ in kw["started"])
        return inner(*args, **kw)

    ex.store.record_and_claim = spy  # type: ignore[method-assign]

    def turn(claim: bool = True) -> None:  # as the loop does: a wake-up's one transaction
        ex.begin_batch()
        loop.turn(clock)
        ex.end_batch(clock.now(), clock.monotonic(), claim=claim)

    ex.claim(clock.now(), clock.monotonic())
    pids = {h.run.job_name: h.child.pid for h in ex.held.values()}
    deadline = time.monotonic() + 10
    while quick.id in ex.held and time.monotonic() < deadline:
        turn()
    assert store.get_run(quick.id).state is RunState.SUCCEEDED
    assert store.get_attempts(quick.id)[0].pid == pids["quick"]
    assert sent == []  # the quick one's pid came with its end; the slow one's waits
    assert store.get_attempts(slow.id)[0].pid is None
    clock.advance(PID_FLUSH_SECONDS)
    assert ex.next_deadline(clock.monotonic()) == clock.monotonic()
    ex.tick(clock.now(), clock.monotonic())
    assert sent == [slow.id]
    assert store.get_attempts(slow.id)[0].pid == pids["slow"]
    ex.interrupt_all()  # as a shutdown does: no new claims
    deadline = time.monotonic() + 10
    while ex.busy and time.monotonic() < deadline:
        turn(claim=False)
    assert store.get_run(slow.id).state is RunState.PENDING
    assert sent == [slow.id]
    store.close()


def _sleeping_daemon(tmp_path, clock: FakeClock, events_after: dict[int, float]):
    """A daemon whose sleeps are recorded on a fake clock: the ``select`` call numbered
    ``n`` in ``events_after`` returns an event that many seconds in (when that is within
    its timeout), the others sleep their timeout out. Its store counts commits awaiting
    upkeep in ``commits[0]`` (the test moves it); the upkeep takes 0.3 s and is counted in
    ``upkeeps``."""
    store = StoreView(tmp_path / "w.db")
    d = _daemon(store, clock)
    waits: list[float] = []
    upkeeps: list[float] = []
    commits = [1]
    fd = d.waker.fileno()

    def select(timeout: float) -> list[tuple[int, list[Ready]]]:
        waits.append(timeout)
        after = events_after.get(len(waits))
        if after is not None and after < timeout:
            clock.advance(after)
            return [(fd, [lambda now, mono: None])]
        clock.advance(timeout)
        return []

    def idle() -> None:
        upkeeps.append(clock.monotonic())
        commits[0] = 0
        clock.advance(0.3)

    d.selector.select = select  # type: ignore[method-assign]
    d.selector.holds = lambda fd, reg: True  # type: ignore[method-assign]
    d.store.upkeep_pending = lambda: commits[0]  # type: ignore[method-assign]
    d.store.idle = idle  # type: ignore[method-assign]
    d.executor.claim_needed = False
    return store, d, waits, upkeeps, commits


def _close(store: StoreView, d) -> None:
    d.waker.close()
    d.selector.close()
    store.close()


def _wait_for_heartbeat(d, clock: FakeClock, seconds: float) -> None:
    mono = clock.monotonic()
    d.next_heartbeat = mono + seconds  # the only timer
    d._wait(clock.now(), mono)


def test_upkeep_waits_for_a_quiet_store_and_its_time_comes_off_the_sleep(tmp_path):
    # the loop reckons its sleep at the start of a turn; the store's put-off upkeep (a
    # WAL checkpoint fsyncs) runs once nothing was committed for IDLE_SECONDS, and its
    # time comes off the rest of the sleep, or every window after an idle stretch would
    # start that much late
    from jobctl.daemon import IDLE_SECONDS

    clock = FakeClock(T0)
    store, d, waits, upkeeps, _ = _sleeping_daemon(tmp_path, clock, {})
    try:
        mono = clock.monotonic()
        _wait_for_heartbeat(d, clock, 1.0)
        assert upkeeps == [pytest.approx(mono + IDLE_SECONDS)]
        assert waits == [pytest.approx(IDLE_SECONDS), pytest.approx(1.0 - IDLE_SECONDS - 0.3)]
        assert clock.monotonic() == pytest.approx(mono + 1.0)
        _wait_for_heartbeat(d, clock, 1.0)  # nothing committed since: one plain sleep
        assert len(upkeeps) == 1 and waits[-1] == pytest.approx(1.0)
    finally:
        _close(store, d)


def test_a_burst_puts_the_upkeep_off_and_a_chatty_command_does_not(tmp_path):
    # a burst: the next timer is far (children's exits are events), an exit comes a
    # millisecond into each sleep and each turn commits; a checkpoint there would stall
    # every worker behind its fsyncs (README, Guarantees: "never in the middle of a burst")
    clock = FakeClock(T0)
    store, d, _waits, upkeeps, commits = _sleeping_daemon(
        tmp_path, clock, {n: 0.001 for n in range(1, 100)} | {n: 0.05 for n in range(6, 100)}
    )
    try:
        for _ in range(5):
            _wait_for_heartbeat(d, clock, 10.0)
            commits[0] += 1
        assert upkeeps == []
        # a command's output wakes the loop every 0.05 s and nothing is committed: the
        # upkeep comes 0.2 s after the last commit all the same
        quiet_from = clock.monotonic()
        for _ in range(3):
            _wait_for_heartbeat(d, clock, 10.0)
        assert upkeeps == []
        for _ in range(2):
            _wait_for_heartbeat(d, clock, 10.0)
        assert upkeeps == [pytest.approx(quiet_from + 0.2)]
        # a sleep shorter than what is left of the quiet does no upkeep
        commits[0] = 7
        _wait_for_heartbeat(d, clock, 0.15)
        assert len(upkeeps) == 1
    finally:
        _close(store, d)


def test_a_store_without_upkeep_sleeps_in_one_wait(tmp_path):
    clock = FakeClock(T0)
    store, d, waits, upkeeps, commits = _sleeping_daemon(tmp_path, clock, {})
    commits[0] = 0
    try:
        _wait_for_heartbeat(d, clock, 1.0)
        assert waits == [pytest.approx(1.0)] and upkeeps == []
    finally:
        _close(store, d)


# ---------------------------------------------------------------------- windows ahead of time


def test_a_window_is_recorded_ahead_of_its_time_and_claimed_only_at_it(db):
    store = StoreView(db)
    clock = FakeClock(T0)
    store.add_job(_every("j", 10, jitter_seconds=0), clock.now())
    sched = _scheduler(store, [])
    sched.take_lease(clock.now())
    window = T0 + timedelta(seconds=10)
    ahead = timedelta(seconds=FIRE_AHEAD_SECONDS)
    assert sched.next_due() == window - ahead
    clock.advance(10 - FIRE_AHEAD_SECONDS - 0.01)
    assert sched.fire_due(clock.now()) is False  # not yet within the lead
    clock.advance(0.02)
    assert sched.fire_due(clock.now()) is True
    (run,) = store.list_runs("j")
    # decided as at its time: the window's own instant, not when it was written
    assert (run.state, run.scheduled_for, run.not_before) == (RunState.PENDING, window, window)
    assert store.get_job("j").next_run_at == window + timedelta(seconds=10)
    assert sched.next_due() == window + timedelta(seconds=10) - ahead
    # it waits for its time: no claim before it, one at it (the executor wakes right then)
    assert store.claim("d1", "h", clock.now(), 30) == ([], [])
    assert store.daemon.next_claim_at("d1", clock.now()) == window
    claimed, _ = store.claim("d1", "h", window, 30)
    assert [c.run.id for c in claimed] == [run.id]
    store.close()


def test_a_window_whose_job_has_a_run_going_or_replaces_is_decided_at_its_time(db):
    from jobctl.models import Overlap

    store = StoreView(db)
    clock = FakeClock(T0)
    store.add_job(_every("busy", 10), clock.now())
    store.add_job(_every("replaces", 10, overlap=Overlap.REPLACE), clock.now())
    sched = _scheduler(store, [])
    sched.take_lease(clock.now())
    clock.advance(10)
    assert sched.fire_due(clock.now())
    claimed, _ = store.claim("d1", "h", clock.now(), 30)
    assert len(claimed) == 2  # both jobs' first runs now run
    window = T0 + timedelta(seconds=20)
    clock.set(window - timedelta(seconds=FIRE_AHEAD_SECONDS / 2))
    # within the lead, but whether these windows run depends on their time
    assert sched.fire_due(clock.now()) is False
    assert len(store.list_runs("busy")) == len(store.list_runs("replaces")) == 1
    assert sched.next_due() == window
    clock.set(window)
    assert sched.fire_due(clock.now())
    busy = sorted(store.list_runs("busy"), key=lambda r: r.scheduled_for)
    assert [(r.state, r.skip_reason and r.skip_reason.value) for r in busy] == [
        (RunState.LEASED, None),
        (RunState.SKIPPED, "overlap"),
    ]
    replaces = sorted(store.list_runs("replaces"), key=lambda r: r.scheduled_for)
    assert [r.state for r in replaces] == [RunState.LEASED, RunState.PENDING]
    assert replaces[0].cancel_requested  # made way at the window's time, not before
    store.close()


def test_pause_edit_and_cancel_take_back_a_window_recorded_ahead_of_its_time(db):
    store = StoreView(db)
    clock = FakeClock(T0)
    for name in ("paused", "edited", "cancelled", "kept"):
        store.add_job(_every(name, 10), clock.now())
    sched = _scheduler(store, [])
    sched.take_lease(clock.now())
    window = T0 + timedelta(seconds=10)
    clock.set(window - timedelta(seconds=FIRE_AHEAD_SECONDS / 2))
    assert sched.fire_due(clock.now())
    assert all(len(store.list_runs(n)) == 1 for n in ("paused", "edited", "cancelled", "kept"))
    old_id = store.list_runs("edited")[0].id

    # a paused job's windows are neither run nor recorded: the early one goes
    store.pause_job("paused", clock.now())
    assert store.list_runs("paused") == []
    # a cancelled job's window that has not come is taken back, not cancelled
    store.cancel_job("cancelled", clock.now())
    assert store.list_runs("cancelled") == []
    # an edit: the window comes again, with the job as it is now
    store.edit_job("edited", {"command": "echo new"}, clock.now())
    assert store.list_runs("edited") == []
    assert store.get_job("edited").next_run_at == window
    sched.reload_job(store.get_job("edited").id)  # the edit's wake-up
    assert sched.fire_due(clock.now())
    (again,) = store.list_runs("edited")
    assert again.id != old_id and again.scheduled_for == window
    assert again.settings.command == "echo new"
    # a window whose time came is a run like any other: nothing takes it back
    clock.set(window)
    store.pause_job("kept", clock.now())
    assert [r.state for r in store.list_runs("kept")] == [RunState.PENDING]
    store.close()
