"""Why a run waits (jobctl(1), WATCHING A RUN): one test per ``waiting.reason``, each set up for real with a
daemon, and the claim and ``waiting`` agreeing because they share one definition."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from conftest import StoreView, wait_until

from jobctl import planner
from jobctl.clock import iso
from jobctl.models import JobSpec, Overlap, RunState, Trigger, TriggerKind
from jobctl.output import OutputStream
from jobctl.waits import WaitFacts, WaitReason


def _inspect(jobctl, run_id: int):
    return jobctl.json("inspect", str(run_id))


def _waiting(jobctl, run_id: int):
    return _inspect(jobctl, run_id)["waiting"]


def _leased(jobctl, run_id: int) -> bool:
    return _inspect(jobctl, run_id)["state"] == "leased"


# ------------------------------------------------------------------ each reason, for real


def test_waiting_no_daemon(jobctl):
    jobctl("add", "m", "--manual", "--", "true")
    run_id = jobctl.json("run", "m")["id"]
    w = _waiting(jobctl, run_id)
    assert w["reason"] == "no_daemon" and "jobctl daemon" in w["detail"]
    assert "no_daemon: no daemon is running" in jobctl("inspect", str(run_id)).stdout


def test_waiting_paused_until_resume(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "p", "--manual", "--", "true")
    jobctl("add", "other", "--manual", "--", "true")
    jobctl("pause", "p")
    run_id = jobctl.json("run", "p")["id"]
    # the daemon claims a run enqueued after it, and still passes the paused one by
    other = jobctl.json("run", "other")["id"]
    wait_until(lambda: _inspect(jobctl, other)["state"] == "succeeded", 10, what="other run")
    assert _inspect(jobctl, run_id)["state"] == "pending"
    w = _waiting(jobctl, run_id)
    assert w["reason"] == "paused" and "job p is paused" in w["detail"]
    jobctl("resume", "p")
    wait_until(lambda: _inspect(jobctl, run_id)["state"] == "succeeded", 10, what="resumed run")
    assert _waiting(jobctl, run_id) is None


def test_waiting_not_due_with_jitter(jobctl, start_daemon):
    start_daemon()
    # a one-shot due in 1 s, started a random delay of up to a week later
    jobctl("add", "late", "--in", "1s", "--jitter", "1w", "--", "true")
    runs = wait_until(lambda: jobctl.json("runs", "late"), 10, what="the window recorded")
    run = runs[0]
    assert run["state"] == "pending"
    w = _waiting(jobctl, run["id"])
    assert w["reason"] == "not_due"
    assert w["until"] == run["not_before"] and run["not_before"] in w["detail"]


def test_waiting_backoff_after_a_failure(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "flaky", "--manual", "--retries", "1", "--backoff", "1h", "--", "exit 2")
    run_id = jobctl.json("run", "flaky")["id"]
    wait_until(lambda: _inspect(jobctl, run_id)["state"] == "failed", 10, what="a failure")
    data = _inspect(jobctl, run_id)
    w = data["waiting"]
    assert w["reason"] == "backoff" and w["until"] == data["not_before"]
    until = datetime.fromisoformat(w["until"].replace("Z", "+00:00"))
    assert until - datetime.now(UTC) > timedelta(minutes=25)  # 1h × [0.5, 1]
    assert "backoff: retry at" in jobctl("inspect", str(run_id)).stdout


def test_waiting_lock_names_the_lock_and_its_holder(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "holder", "--manual", "--lock", "host:a", "--", "sleep 30")
    jobctl("add", "waiter", "--manual", "--", "true")
    holder = jobctl.json("run", "holder")["id"]
    wait_until(lambda: _leased(jobctl, holder), 10, what="holder leased")
    waiter = jobctl.json("run", "waiter", "--lock", "host:a")["id"]
    w = _waiting(jobctl, waiter)
    assert w["reason"] == "lock" and w["lock"] == "host:a" and w["run_id"] == holder
    assert "host:a" in w["detail"] and str(holder) in w["detail"]
    jobctl("cancel", str(holder))
    wait_until(lambda: _inspect(jobctl, waiter)["state"] == "succeeded", 10, what="lock freed")


def test_waiting_overlap_names_the_leased_run(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "solo", "--manual", "--overlap", "forbid", "--", "sleep 30")
    first = jobctl.json("run", "solo")["id"]
    wait_until(lambda: _leased(jobctl, first), 10, what="first run leased")
    second = jobctl.json("run", "solo")["id"]
    w = _waiting(jobctl, second)
    assert w["reason"] == "overlap" and w["run_id"] == first
    assert _waiting(jobctl, first) is None  # leased: not waiting
    jobctl("cancel", "solo")


def test_waiting_workers_when_every_worker_is_busy(jobctl, start_daemon):
    start_daemon("--workers", "1")
    jobctl("add", "busy", "--manual", "--", "sleep 30")
    jobctl("add", "quick", "--manual", "--", "true")
    busy = jobctl.json("run", "busy")["id"]
    wait_until(lambda: _leased(jobctl, busy), 10, what="the worker busy")
    quick = jobctl.json("run", "quick")["id"]
    w = _waiting(jobctl, quick)
    assert w["reason"] == "workers" and "1 run running" in w["detail"]
    jobctl("cancel", str(busy))
    wait_until(lambda: _inspect(jobctl, quick)["state"] == "succeeded", 10, what="worker free")


def test_waiting_max_running_is_not_blamed_on_the_workers(jobctl, start_daemon):
    start_daemon("--workers", "4")
    jobctl("add", "mr", "--manual", "--overlap", "allow", "--max-running", "2", "--", "sleep 30")
    ids = [jobctl.json("run", "mr")["id"] for _ in range(3)]
    wait_until(lambda: sum(_leased(jobctl, i) for i in ids) == 2, 10, what="two runs of mr leased")
    [third] = [i for i in ids if not _leased(jobctl, i)]
    w = _waiting(jobctl, third)
    assert (w["reason"], w["detail"]) == ("max_running", "2 of 2 runs of mr running")
    assert "max_running: 2 of 2 runs of mr running" in jobctl("inspect", str(third)).stdout
    jobctl("cancel", "mr")


# ------------------------------------------------------------------ one definition


def _spec(name: str, overlap: Overlap, locks: tuple[str, ...] = ()) -> JobSpec:
    return JobSpec(
        name=name,
        trigger=Trigger(TriggerKind.MANUAL, "UTC"),
        command="true",
        overlap=overlap,
        locks=locks,
    )


@pytest.mark.parametrize(
    "paused,due,lock_held,sibling_leased,overlap",
    [
        (p, d, lk, s, o)
        for p, d, lk, s, o in itertools.product(
            (False, True), (False, True), (False, True), (False, True), list(Overlap)
        )
    ],
)
def test_claim_takes_a_run_exactly_when_waiting_says_it_is_free(
    tmp_path, paused, due, lock_held, sibling_leased, overlap
):
    """Every combination of the claim's conditions: the claim takes the run iff the
    waiting facts call it claimable, and a blocked run gets the blocker as its reason."""
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    with StoreView(tmp_path / "w.db") as st:
        st.add_job(_spec("j", overlap), now)
        st.add_job(_spec("holder", Overlap.ALLOW, ("L",)), now)
        st.register_daemon("d1", 1, "h", "b", now, 30.0)
        if sibling_leased:
            st.enqueue_run("j", now - timedelta(seconds=2))
        if lock_held:
            st.enqueue_run("holder", now - timedelta(seconds=2))
        claimed, _ = st.claim("d1", "h", now, 30.0)
        assert len(claimed) == int(sibling_leased) + int(lock_held)
        run, _ = st.enqueue_run("j", now, locks=["L"])
        if not due:
            with st.write() as c:
                c.execute(
                    "UPDATE runs SET not_before = ? WHERE id = ?",
                    (int((now + timedelta(hours=1)).timestamp() * 1e6), run.id),
                )
        if paused:
            st.pause_job("j", now)
        facts = st.waiting(run.id, now)
        assert isinstance(facts, WaitFacts)
        expected_free = (
            due
            and not paused
            and not lock_held
            and not (sibling_leased and overlap is not Overlap.ALLOW)
        )
        assert facts.claimable is expected_free
        reason = planner.waiting_reason(facts)
        assert reason is not None
        claimed, _ = st.claim("d1", "h", now, 30.0)
        assert [c.run.id for c in claimed] == ([run.id] if facts.claimable else [])
        if facts.claimable:
            assert reason.reason is WaitReason.WORKERS
            assert st.waiting(run.id, now) is None  # leased now
        elif paused:
            assert reason.reason is WaitReason.PAUSED
        elif not due:
            assert reason.reason is WaitReason.NOT_DUE
        elif lock_held:
            assert reason.reason is WaitReason.LOCK and reason.lock == "L"
        else:
            assert reason.reason is WaitReason.OVERLAP


# ------------------------------------------------------------------ the pure ordering


def _facts(**kw) -> WaitFacts:
    base = dict(
        run_id=7,
        job_name="j",
        state=RunState.PENDING,
        not_before=datetime(2026, 12, 1, 12, 0, tzinfo=UTC),
        due=True,
        paused=False,
        lock=None,
        overlap_run_id=None,
        claimable=True,
        live_daemons=1,
        leased_runs=4,
    )
    base.update(kw)
    return WaitFacts(**base)


def test_waiting_reason_order():
    blocked = dict(claimable=False)
    assert planner.waiting_reason(None) is None
    assert planner.waiting_reason(_facts(state=RunState.LEASED)) is None
    assert planner.waiting_reason(_facts(state=RunState.SUCCEEDED)) is None
    every = _facts(
        paused=True, live_daemons=0, due=False, lock=("L", 3), overlap_run_id=4, **blocked
    )
    assert planner.waiting_reason(every).reason is WaitReason.PAUSED
    no_daemon = _facts(live_daemons=0, due=False, lock=("L", 3), **blocked)
    assert planner.waiting_reason(no_daemon).reason is WaitReason.NO_DAEMON
    w = planner.waiting_reason(_facts(due=False, lock=("L", 3), **blocked))
    assert w.reason is WaitReason.NOT_DUE and w.until == _facts().not_before
    assert iso(w.until) in w.detail
    w = planner.waiting_reason(_facts(state=RunState.FAILED, due=False, **blocked))
    assert w.reason is WaitReason.BACKOFF
    w = planner.waiting_reason(_facts(lock=("L", 3), overlap_run_id=4, **blocked))
    assert (w.reason, w.lock, w.run_id) == (WaitReason.LOCK, "L", 3)
    w = planner.waiting_reason(_facts(overlap_run_id=4, **blocked))
    assert (w.reason, w.run_id) == (WaitReason.OVERLAP, 4)
    w = planner.waiting_reason(_facts(max_running=1, job_leased=1, **blocked))
    assert (w.reason, w.detail) == (WaitReason.MAX_RUNNING, "1 of 1 run of j running")
    w = planner.waiting_reason(_facts())
    assert w.reason is WaitReason.WORKERS and "4 runs running" in w.detail


# ------------------------------------------------------------------ followed output


def test_followed_output_on_a_terminal_is_shown_safely(capsys):
    stream = OutputStream(tty=True)
    data = "é\x1b[31mred\n".encode() + b"\xff\n"
    stream.write(data[:1])  # half of é
    stream.write(data[1:])
    stream.write(b"\xc3")  # a character the attempt never finished
    stream.end()
    out = capsys.readouterr().out
    assert out == "é\\x1b[31mred\n\ufffd\n\ufffd"


def test_followed_output_into_a_pipe_is_raw(capfdbinary):
    stream = OutputStream(tty=False)
    stream.write(b"\x1b[31m\xff\n")
    stream.end()
    assert capfdbinary.readouterr().out == b"\x1b[31m\xff\n"
