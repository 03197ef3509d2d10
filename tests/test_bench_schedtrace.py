"""The burst's scheduler trace (bench/diagnostics/schedtrace.py): what it counts, on hand-made traces."""

from __future__ import annotations

import pytest

from bench.diagnostics.schedtrace import analyse, daemon_pid, parse


def _event(cpu: int, t: float, name: str, fields: str) -> str:
    """One line as ``perf script -F cpu,time,event,trace`` prints it."""
    return f"[{cpu:03d}] {t:.6f}:       sched:{name}: {fields}"


def _switch(cpu: int, t: float, prev: int, state: str, nxt: int) -> str:
    fields = f"prev_comm=p{prev} prev_pid={prev} prev_prio=120 prev_state={state} ==> "
    return _event(cpu, t, "sched_switch", fields + f"next_comm=p{nxt} next_pid={nxt}")


def _fork(cpu: int, t: float, child: int) -> str:
    fields = f"comm=jobctl pid=100 child_comm=jobctl child_pid={child}"
    return _event(cpu, t, "sched_process_fork", fields)


def _new(cpu: int, t: float, child: int, target: int) -> str:
    fields = f"comm=jobctl pid={child} prio=120 target_cpu={target:03d}"
    return _event(cpu, t, "sched_wakeup_new", fields)


def _waking(cpu: int, t: float, target: int) -> str:
    return _event(cpu, t, "sched_waking", f"comm=jobctl pid=100 prio=120 target_cpu={target:03d}")


def _us(d: dict[str, float]) -> dict[str, int]:
    return {k: round(v * 1e6) for k, v in d.items()}


#: the daemon (pid 100) on core 0, core 1 idle; its first child placed on its core, and the
#: daemon blocked in the spawn from 1.000010
_FIRST_SPAWN = [
    _switch(1, 0.999, 50, "S", 0),
    _switch(0, 0.9995, 0, "R", 100),
    _fork(0, 1.000000, 201),
    _new(0, 1.000001, 201, 0),
    _switch(0, 1.000010, 100, "D", 201),
]


def test_two_spawns_one_child_on_each_core() -> None:
    trace = [
        *_FIRST_SPAWN,
        _waking(0, 1.000100, 0),  # the child's exec lets it go
        # core 1 stays idle until the second child starts there
        _switch(0, 1.000110, 201, "R+", 100),
        _fork(0, 1.000200, 202),
        _new(0, 1.000201, 202, 1),  # placed on the other core
        _switch(0, 1.000210, 100, "D", 201),
        _switch(1, 1.000220, 0, "R", 202),
        _waking(1, 1.000300, 0),
        _switch(0, 1.000500, 201, "Z", 100),  # core 0 free only once 201 is done
        _switch(1, 1.000600, 202, "Z", 0),  # the last child's end: the window's end
        _switch(0, 1.000700, 100, "S", 0),
        "a line that is not an event",
    ]
    events = parse(trace)
    assert len(events) == 15
    assert daemon_pid(events) == "100"
    res = analyse(events, "100")
    assert res["window_s"] == pytest.approx(0.0006)
    assert res["children"] == 2
    assert _us(res["daemon_s"]) == {"running": 210, "queued": 210, "spawn": 180}  # type: ignore[arg-type]
    assert _us(res["core_s"]) == {"children": 770, "idle": 220, "daemon": 210}  # type: ignore[arg-type]
    idle = _us(res["idle_core_s_by_daemon_state"])  # type: ignore[arg-type]
    assert idle == {"running": 110, "spawn": 100, "queued": 10}
    spawns = res["spawns"]
    assert isinstance(spawns, dict)
    assert spawns["same core"]["spawns"] == 1
    assert spawns["same core"]["blocked_median_us"] == pytest.approx(100)
    assert spawns["same core"]["then_waited_median_us"] == pytest.approx(10)
    assert spawns["other core"]["blocked_median_us"] == pytest.approx(100)
    assert spawns["other core"]["then_waited_median_us"] == pytest.approx(200)
    assert res["switches_missing"] == 0


def test_a_switch_missing_from_the_trace_is_made_up_from_the_runtime_reported() -> None:
    trace = [
        *_FIRST_SPAWN,
        _waking(0, 1.000100, 1),
        # the switch to the daemon on core 1 (at 1.000110) is missing
        "[001] 1.000200: sched:sched_stat_runtime: comm=jobctl pid=100 runtime=90000 [ns]",
        _switch(0, 1.000300, 201, "Z", 0),
    ]
    res = analyse(parse(trace), "100")
    assert res["switches_missing"] == 1
    assert _us(res["daemon_s"]) == {"running": 200, "spawn": 90, "queued": 10}  # type: ignore[arg-type]
    assert _us(res["core_s"]) == {"children": 290, "daemon": 200, "idle": 110}  # type: ignore[arg-type]
    spawns = res["spawns"]
    assert isinstance(spawns, dict)
    # how long it waited after its child let it go is not known: counted apart
    assert spawns["same core"]["spawns"] == 0
    assert spawns["same core"]["unmatched"] == 1


def test_a_trace_without_the_daemons_children_is_refused() -> None:
    with pytest.raises(ValueError, match="no fork"):
        daemon_pid(parse([_switch(0, 1.0, 0, "R", 5)]))
