"""A suspend (the loop waking far later than it planned) is missed windows, not a burst."""

from __future__ import annotations

from collections import Counter

from rhelpers import cli_main

from jobctl.clock import FakeClock, SystemClock
from jobctl.daemon import Daemon, DaemonConfig
from jobctl.store import open_store


def test_suspend_is_missed_windows_by_policy_busy_is_not(tmp_path):
    db = tmp_path / "clock.db"
    for name, extra in (
        ("skip", ["--catchup", "skip"]),
        ("once", ["--catchup", "once"]),
        ("all", ["--catchup", "all", "--catchup-limit", "2"]),
    ):
        code, _, err = cli_main(
            ["--db", str(db), "add", name, "--every", "10s", *extra, "--", "true"]
        )
        assert code == 0, err
    clock = FakeClock(SystemClock().now())
    handle = open_store(db)
    store = handle.commands
    logs: list[str] = []
    d = Daemon(
        handle,
        DaemonConfig(workers=1, lease_seconds=30, reap_strays=False),
        clock=clock,
        log=lambda line, level=None: logs.append(line),
    )
    d.selector.select = lambda timeout: []  # the fake clock is the only time that passes
    # record, never run
    d.executor.claim = lambda now, mono: setattr(d.executor, "claim_needed", False)
    d.store.register_daemon(clock.now())

    def runs():
        return {
            n: Counter((r.state.value, r.reason.value) for r in store.list_runs(n, limit=1000))
            for n in ("skip", "once", "all")
        }

    try:
        d.turn()
        assert d.scheduler.leading
        for _ in range(3):  # on time: each window becomes a run
            clock.advance(10)
            d.turn()
        assert all(c == Counter({("pending", "schedule"): 3}) for c in runs().values()), runs()

        clock.advance(3600)  # suspended for an hour: 360 windows passed
        d.turn()
        after = runs()
        assert any("late" in line for line in logs), logs
        assert after["skip"][("pending", "catchup")] == 0
        assert after["once"][("pending", "catchup")] == 1
        assert after["all"][("pending", "catchup")] == 2
        for n in ("skip", "once", "all"):
            assert sum(after[n].values()) <= 3 + 100 + 2  # at most 100 skipped rows
            assert after[n][("pending", "schedule")] == 3  # no burst of scheduled runs
        missed = {n: store.get_job(n).missed_total for n in ("skip", "once", "all")}
        assert missed["skip"] - missed["once"] == 1 and missed["once"] - missed["all"] == 1
        assert 355 <= missed["skip"] <= 361, missed

        before = runs()
        clock.advance(10)
        d.turn()
        clock.advance(35)  # busy, not suspended (< 60 s late): the windows still run
        d.turn()
        now_runs = runs()
        for n in ("skip", "once", "all"):
            assert now_runs[n][("pending", "schedule")] - before[n][("pending", "schedule")] >= 4
            assert now_runs[n][("skipped", "catchup")] == before[n][("skipped", "catchup")]
    finally:
        d._cleanup()
        handle.close()
