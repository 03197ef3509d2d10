"""Crash loops: SIGKILL a daemon at random moments, SIGKILL CLI writers mid-transaction."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import timedelta
from itertools import pairwise

import pytest
from conftest import wait_until
from rhelpers import integrity

from jobctl.models import RunState

JOBS = [f"j{i}" for i in range(6)]


def _attempt_log(path):
    """{(run, attempt): [start, end|None]} from the lines the jobs appended."""
    seen: dict[tuple[int, int], list] = {}
    starts: dict[tuple[int, int], int] = defaultdict(int)
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue  # a line cut by a SIGKILL of the whole group
        kind, run, att, t = parts[0], int(parts[1]), int(parts[2]), float(parts[3])
        key = (run, att)
        if kind == "start":
            starts[key] += 1
            seen[key] = [t, None]
        elif key in seen:
            seen[key][1] = t
    return seen, starts


@pytest.mark.long
def test_sigkill_loop_loses_nothing_and_never_runs_twice(jobctl, start_daemon, db, tmp_path):
    log = tmp_path / "attempts.log"
    body = (
        f'echo "start $JOBCTL_RUN_ID $JOBCTL_ATTEMPT $(date +%s.%N)" >> {log}; sleep {{d}}; '
        f'echo "end $JOBCTL_RUN_ID $JOBCTL_ATTEMPT $(date +%s.%N)" >> {log}'
    )
    for name in JOBS:
        jobctl("add", name, "--every", "1s", "--", body.format(d=1))
    # a longer job, so a lost attempt is still running when its lease is taken over
    jobctl("add", "slow", "--every", "1s", "--retries", "5", "--", body.format(d=3.5))
    rng = random.Random(1234)
    kills = 0
    while kills < 15:
        d = start_daemon("--workers", "8", ready=rng.random() < 0.7)
        time.sleep(rng.uniform(0.1, 2.5))
        d.kill()
        kills += 1
    final = start_daemon("--workers", "8")
    final_id = re.search(r"daemon (\S+) started", final.log()).group(1)

    def orphans() -> list[int]:
        leased = jobctl.store().list_runs(state=RunState.LEASED, limit=1000)
        return [r.id for r in leased if r.leased_by != final_id]

    # every orphaned lease (2 s) expires and is taken back by the last daemon
    wait_until(lambda: not orphans(), 30, what="no run leased by a killed daemon")
    assert final.terminate() == 0
    assert "Traceback" not in "".join((tmp_path / f"daemon{i}.log").read_text() for i in range(16))

    assert integrity(db) == "ok"
    store = jobctl.store()
    leased = store.list_runs(state=RunState.LEASED, limit=1000)
    assert leased == [], leased
    for name in [*JOBS, "slow"]:
        runs = [r for r in store.list_runs(name, limit=100000) if r.reason.value != "manual"]
        windows = sorted(r.scheduled_for for r in runs)
        assert len(windows) == len(set(windows))
        gaps = {b - a for a, b in pairwise(windows)}
        assert gaps <= {timedelta(seconds=1)}, (name, sorted(gaps))  # none missing
        assert len(windows) >= 15
    seen, starts = _attempt_log(log)
    assert seen, "no attempt ran"
    assert max(starts.values()) == 1, [k for k, v in starts.items() if v > 1]
    by_run = defaultdict(list)
    for (run, att), (t0, t1) in seen.items():
        by_run[run].append((att, t0, t1))
    for run, atts in by_run.items():
        atts.sort()
        for (a1, s1, e1), (a2, s2, _) in pairwise(atts):
            # attempt a2 started only once a1 had ended (or had been killed: no end line)
            assert e1 is None or e1 <= s2, (run, a1, a2, s1, e1, s2)
    # and nothing of a lost attempt ran on after its successor started
    for run, atts in by_run.items():
        for a, s, e in atts:
            later = [s2 for a2, s2, _ in atts if a2 > a]
            if e is not None and later:
                assert e <= min(later)


WRITER = r"""
import contextlib, io, random, sys
from jobctl.cli import main
db, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
def call(*a):
    try:
        main(["--db", db, *a])
    except SystemExit:
        pass
with contextlib.redirect_stdout(io.StringIO()):
    call("list")  # the driver loaded and the database reached: from here on it writes
print("ready", flush=True)
k = 0
while True:
    k += 1
    name = f"w{seed}-{k}"
    call("add", name, "--manual", "--lock", "L" + name, "--env", "A=1", "--description", "x" * rng.randint(0, 5000), "--", "true")
    call("run", name, "--key", "k", "--lock", "M" + name)
    call("edit", name, "--description", "edited", "--retries", "3")
    call("pause", name)
    if k % 3 == 0:
        call("rm", name, "--force")
"""


@pytest.mark.long
def test_sigkill_of_cli_writers_leaves_no_half_written_state(jobctl, db):
    jobctl("list")
    rng = random.Random(7)
    for i in range(15):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(db), str(i * 10 + j)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for j in range(2)
        ]
        for p in procs:  # killed while writing, not while starting (a loaded machine)
            assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.4, 1.2))
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
            assert b"Traceback" not in p.stderr.read()
            p.stderr.close()
            p.stdout.close()
    assert integrity(db) == "ok"
    store = jobctl.store()
    jobs = store.list_jobs()
    assert jobs
    for job in jobs:
        assert job.spec.locks == ("L" + job.name,) and job.spec.env == {"A": "1"}
        for run in store.list_runs(job.name, limit=100):
            # the run and its lock rows were written in one transaction
            assert set(run.locks) == {"L" + job.name, "M" + job.name}, run
            assert run.settings is not None
    # the CLI still works on the file
    wait_until(lambda: jobctl("list", "--json").exit_code == 0, 10)
