"""The run policies (README, Run policies and what a run costs) as pure decisions (time passed in) and what a user types for
them and for §16's limits: exit codes, queue, deadline, pause after failures, --after."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from jobctl.errors import UsageError
from jobctl.models import (
    IoClass,
    Job,
    JobSpec,
    JobState,
    Limits,
    Overlap,
    Run,
    RunReason,
    RunSettings,
    RunState,
    SkipReason,
    StopReason,
    Trigger,
    TriggerKind,
)
from jobctl.outcomes import AttemptResult, Window
from jobctl.planner import after_fires, apply_overlap, deadline_at, decide, should_pause
from jobctl.specs import (
    TriggerOptions,
    build_spec,
    check_after,
    edit_changes,
    format_size,
    parse_exit_codes,
    parse_size,
)

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
RNG = random.Random(1)


def _run(**settings: object) -> Run:
    s = RunSettings("true", "/bin/sh", None, {}, None, None, 10.0, None)
    return Run(
        id=1,
        job_id=1,
        job_name="j",
        scheduled_for=T0,
        state=RunState.LEASED,
        skip_reason=None,
        attempt=1,
        max_attempts=3,
        not_before=T0,
        leased_by="d",
        lease_until=T0,
        started_at=T0,
        finished_at=None,
        exit_code=None,
        last_error=None,
        reason=RunReason.SCHEDULE,
        catchup_from=None,
        priority=0,
        run_key=None,
        env={},
        locks=(),
        settings=replace(s, **settings),  # type: ignore[arg-type]
    )


def _job(spec: JobSpec) -> Job:
    return Job(1, spec, JobState.ACTIVE, T0, None, 0, None)


def _spec(name: str = "j", **policies: object) -> JobSpec:
    return build_spec(name, TriggerOptions(every="1m"), policies, ["true"], T0)


# ---------------------------------------------------------------------- exit codes


def test_an_ok_exit_code_succeeds_and_others_still_fail():
    run = _run(ok_exit=(24,))
    assert decide(run, 1, AttemptResult(24), T0, RNG).state is RunState.SUCCEEDED
    assert decide(_run(), 1, AttemptResult(24), T0, RNG).state is RunState.FAILED
    assert decide(run, 1, AttemptResult(23), T0, RNG).state is RunState.FAILED
    # a timeout is not forgiven by the code the killed command happened to exit with
    timed_out = AttemptResult(24, stop_reason=StopReason.TIMEOUT)
    assert decide(run, 1, timed_out, T0, RNG).state is RunState.FAILED


def test_a_no_retry_exit_code_is_dead_at_once():
    run = _run(no_retry_exit=(3,))
    d = decide(run, 1, AttemptResult(3), T0, RNG)
    assert d is not None and d.state is RunState.DEAD and d.error == "exit 3"
    assert d.if_cancelled is RunState.CANCELLED
    assert decide(run, 1, AttemptResult(4), T0, RNG).state is RunState.FAILED


def test_a_cpu_limit_is_the_attempts_error():
    d = decide(_run(), 3, AttemptResult(None, signal=24, limit_error="cpu limit"), T0, RNG)
    assert d is not None and d.state is RunState.DEAD and d.error == "cpu limit"


# ---------------------------------------------------------------------- queue, deadline, pause


def _windows(n: int) -> list[Window]:
    return [
        Window(T0 + timedelta(minutes=i), RunState.PENDING, RunReason.SCHEDULE) for i in range(n)
    ]


def test_queue_keeps_one_window_waiting_and_skips_the_rest():
    out, replace_open = apply_overlap(_windows(3), Overlap.QUEUE, True)
    assert not replace_open
    assert [(w.state, w.skip_reason) for w in out] == [
        (RunState.PENDING, None),
        (RunState.SKIPPED, SkipReason.OVERLAP),
        (RunState.SKIPPED, SkipReason.OVERLAP),
    ]
    out, _ = apply_overlap(_windows(1), Overlap.QUEUE, True, has_waiting_run=True)
    assert out[0].state is RunState.SKIPPED and out[0].skip_reason is SkipReason.OVERLAP
    # forbid skips even the first while one runs
    out, _ = apply_overlap(_windows(1), Overlap.FORBID, True)
    assert out[0].state is RunState.SKIPPED


def test_deadline_is_the_window_plus_it_and_manual_runs_are_exempt():
    assert deadline_at(T0, RunReason.SCHEDULE, 30.0) == T0 + timedelta(seconds=30)
    assert deadline_at(T0, RunReason.CATCHUP, 30.0) == T0 + timedelta(seconds=30)
    assert deadline_at(T0, RunReason.MANUAL, 30.0) is None
    assert deadline_at(T0, RunReason.SCHEDULE, None) is None


def test_pause_after_n_dead_runs_in_a_row():
    dead, ok = RunState.DEAD, RunState.SUCCEEDED
    assert should_pause([dead, dead, dead], 3)
    assert should_pause([dead, dead, dead, ok], 3)
    assert not should_pause([dead, dead], 3)
    assert not should_pause([dead, ok, dead, dead], 3)
    assert not should_pause([dead, dead, dead], None)


def test_after_fires_for_the_states_it_names():
    job = _job(build_spec("b", TriggerOptions(after="a:succeeded,dead"), {}, ["true"], T0))
    assert job.trigger == Trigger(TriggerKind.AFTER, tz=job.trigger.tz, expr="a:succeeded,dead")
    assert after_fires(job, RunState.DEAD) and after_fires(job, RunState.SUCCEEDED)
    assert not after_fires(job, RunState.CANCELLED)
    plain = _job(build_spec("c", TriggerOptions(after="a"), {}, ["true"], T0))
    assert after_fires(plain, RunState.SUCCEEDED) and not after_fires(plain, RunState.DEAD)


# ---------------------------------------------------------------------- what a user types


def test_after_cycles_and_unknown_upstreams_are_refused():
    a = _job(_spec("a"))
    b = _job(build_spec("b", TriggerOptions(after="a"), {}, ["true"], T0))
    c = _job(build_spec("c", TriggerOptions(after="b"), {}, ["true"], T0))
    check_after("d", Trigger(TriggerKind.AFTER, "UTC", expr="c"), [a, b, c])
    with pytest.raises(UsageError, match="cycle: a -> b -> c -> a"):
        check_after("a", Trigger(TriggerKind.AFTER, "UTC", expr="c"), [a, b, c])
    with pytest.raises(UsageError, match="cycle"):
        check_after("x", Trigger(TriggerKind.AFTER, "UTC", expr="x"), [a])
    with pytest.raises(UsageError, match="no job named 'nope'"):
        check_after("d", Trigger(TriggerKind.AFTER, "UTC", expr="nope"), [a])
    for bad in ("a:done", "a:", "bad name", "a:succeeded,"):
        with pytest.raises(UsageError):
            build_spec("d", TriggerOptions(after=bad), {}, ["true"], T0)


def test_exit_code_lists():
    assert parse_exit_codes("24", "--ok-exit") == (24,)
    assert parse_exit_codes(" 75, 3,3", "--ok-exit") == (3, 75)
    assert parse_exit_codes("", "--ok-exit") == ()
    for bad in ("0", "256", "-1", "1.5", "a", "3,,4"):
        with pytest.raises(UsageError, match="exit codes 1-255"):
            parse_exit_codes(bad, "--ok-exit")


def test_sizes():
    assert parse_size("1G") == 1 << 30 and parse_size("100M") == 100 << 20
    assert parse_size("2048K") == 2 << 20 and parse_size("1T") == 1 << 40
    for bad in ("100", "1.5G", "512K", "G", "-1M", "1Q", ""):
        with pytest.raises(UsageError):
            parse_size(bad)
    assert format_size(1 << 30) == "1G" and format_size(1536 << 10) == "1536K"


def test_limits_and_policies_on_add_and_edit():
    spec = _spec(
        nice=5,
        io_class="idle",
        memory_max="1G",
        cpu_max="1m",
        files_max=64,
        deadline="30s",
        pause_after_failures=3,
        ok_exit="24",
        no_retry_exit="3,4",
        overlap="queue",
    )
    assert spec.limits == Limits(5, IoClass.IDLE, 1 << 30, 60.0, 64)
    assert spec.limits.to_dict() == {
        "nice": 5,
        "io_class": "idle",
        "memory_max": 1 << 30,
        "cpu_max": 60.0,
        "files_max": 64,
    }
    assert RunSettings.from_dict(RunSettings.from_spec(spec).to_dict()).limits == spec.limits
    assert (spec.deadline_seconds, spec.pause_after_failures) == (30.0, 3)
    assert (spec.ok_exit, spec.no_retry_exit, spec.overlap) == ((24,), (3, 4), Overlap.QUEUE)
    # edit changes one limit and keeps the others
    changes = edit_changes(
        _job(spec), TriggerOptions(), {"nice": 0}, command=None, rename=None, now=T0
    )
    assert changes["limits"] == replace(spec.limits, nice=0)
    for bad in ({"nice": 20}, {"nice": -1}, {"io_class": "rt"}, {"files_max": 0}, {"cpu_max": "0"}):
        with pytest.raises(UsageError):
            _spec(**bad)


def test_max_running_goes_with_overlap_allow_only():
    assert _spec(overlap="allow", max_running=2).max_running == 2
    with pytest.raises(UsageError, match="--max-running goes with --overlap allow"):
        _spec(max_running=2)
    with pytest.raises(UsageError, match="--max-running goes with --overlap allow"):
        _spec(overlap="queue", max_running=2)
    job = _job(_spec(overlap="allow", max_running=2))
    with pytest.raises(UsageError, match="--max-running"):
        edit_changes(
            job, TriggerOptions(), {"overlap": "forbid"}, command=None, rename=None, now=T0
        )
    # 0 clears it
    changes = edit_changes(
        job,
        TriggerOptions(),
        {"overlap": "forbid", "max_running": 0},
        command=None,
        rename=None,
        now=T0,
    )
    assert changes["max_running"] is None
