"""``jobctl check``'s judgement (jobctl(1), jobctl check), from the facts the store reads."""

from __future__ import annotations

from jobctl.checks import CheckFacts, CheckState, judge, unknown


def _judge(**kw: object) -> tuple[CheckState, str]:
    facts = {"daemons": 1, "leader": "h1", "late": 0, "dead": 0, "failed_notifications": 0}
    facts.update(kw)
    r = judge(CheckFacts(**facts), late_text="5m", since_text="24h")  # type: ignore[arg-type]
    return r.state, r.line()


def test_each_state() -> None:
    state, line = _judge()
    assert state is CheckState.OK
    assert line.startswith("JOBCTL OK - 1 daemon(s), leader on h1 | daemons=1;")
    assert _judge(daemons=0, leader=None)[0] is CheckState.CRITICAL
    assert _judge(leader=None)[0] is CheckState.CRITICAL
    assert _judge(late=2)[0] is CheckState.CRITICAL
    state, line = _judge(dead=1)
    assert state is CheckState.WARNING and "1 dead run(s) in the last 24h" in line
    assert _judge(failed_notifications=3)[0] is CheckState.WARNING
    # critical wins, and still says what else is wrong
    state, line = _judge(daemons=0, leader=None, dead=1)
    assert state is CheckState.CRITICAL and "no live daemon; 1 dead" in line
    r = unknown("cannot read\nthe database")
    assert r.code == 3 and r.line() == "JOBCTL UNKNOWN - cannot read the database"
    assert r.to_json()["state"] == "UNKNOWN"


def test_perfdata_counts() -> None:
    _, line = _judge(late=2, dead=3, failed_notifications=4)
    perf = line.split(" | ", 1)[1].split()
    assert [p.split("=")[0] for p in perf] == ["daemons", "late", "dead", "failed_notifications"]
    assert [p.split("=")[1].split(";")[0] for p in perf] == ["1", "2", "3", "4"]
