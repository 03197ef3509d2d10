"""README, Two workloads, end to end: the digest fan-out (keyed runs) and the polite crawler (locks)."""

from __future__ import annotations

import itertools
import os
import shlex
import sys
import time
from datetime import timedelta
from pathlib import Path

from conftest import wait_until

from jobctl.models import RunState

FINAL = {"succeeded", "dead", "cancelled"}


def _env_with_jobctl() -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


def _runs(jobctl, name):
    return jobctl.json("runs", name, "--limit", "1000")


def test_digest_fan_out_one_run_per_user_and_day(jobctl, start_daemon, db, tmp_path):
    out = tmp_path / "sent"
    jobctl(
        "add",
        "digest",
        "--manual",
        "--overlap",
        "allow",
        "--retries",
        "1",
        "--backoff",
        "1s",
        "--",
        f'[ "$USER_ID" = u3 ] && {{ echo "no mailbox for u3"; exit 1; }}; '
        f'echo "$USER_ID $JOBCTL_RUN_KEY" >> {out}',
    )
    jobctl_cmd = f"{shlex.quote(sys.executable)} -m jobctl --db {shlex.quote(str(db))}"
    jobctl(
        "add",
        "fanout",
        "--manual",
        "--",
        f'for u in u1 u2 u3 u4; do {jobctl_cmd} run digest --key "$u:$(date -u +%F)" '
        f"--env USER_ID=$u || exit 1; done",
    )
    start_daemon(env=_env_with_jobctl())
    for _ in range(3):  # the fan-out retried: still one digest per user and day
        assert jobctl("run", "fanout", "--wait").exit_code == 0
    wait_until(
        lambda: (
            len(_runs(jobctl, "digest")) == 4
            and all(r["state"] in FINAL for r in _runs(jobctl, "digest"))
        ),
        20,
    )
    runs = {r["env"]["USER_ID"]: r for r in _runs(jobctl, "digest")}
    assert sorted(runs) == ["u1", "u2", "u3", "u4"]
    assert runs["u3"]["state"] == "dead" and runs["u3"]["attempt"] == 2
    for u in ("u1", "u2", "u4"):
        assert runs[u]["state"] == "succeeded"
        assert runs[u]["run_key"].startswith(f"{u}:")
    sent = sorted(out.read_text().splitlines())
    assert [line.split()[0] for line in sent] == ["u1", "u2", "u4"]
    assert all(line.split()[1] == runs[line.split()[0]]["run_key"] for line in sent)


def _intervals(log: Path):
    starts, spans = {}, []
    for line in log.read_text().splitlines():
        kind, host, rid, t = line.split()
        if kind == "start":
            starts[rid] = (host, float(t))
        else:
            h, t0 = starts.pop(rid)
            spans.append((h, t0, float(t)))
    return spans


def _overlap(a, b):
    return a[1] < b[2] and b[1] < a[2]


FETCH = (
    "echo start $HOST $JOBCTL_RUN_ID $(date +%s.%N) >> {log}; sleep {secs}; "
    "echo end $HOST $JOBCTL_RUN_ID $(date +%s.%N) >> {log}"
)


def test_crawler_per_host_lock_parallel_hosts(jobctl, start_daemon, tmp_path):
    log = tmp_path / "fetch.log"
    jobctl("add", "fetch", "--manual", "--overlap", "allow", "--", FETCH.format(log=log, secs=0.5))
    jobctl("pause", "fetch")  # the six wait, then are offered at once (a slow CLI staggers none)
    start_daemon("--workers", "4")
    ids = []
    for i in range(3):
        for host in ("a.example", "b.example"):
            ids.append(
                jobctl.json(
                    "run",
                    "fetch",
                    "--key",
                    f"https://{host}/{i}",
                    "--lock",
                    f"host:{host}",
                    "--env",
                    f"HOST={host}",
                )["id"]
            )
    jobctl("resume", "fetch")
    wait_until(lambda: all(r["state"] == "succeeded" for r in _runs(jobctl, "fetch")), 20)
    spans = _intervals(log)
    assert len(spans) == 6
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if a[0] == b[0]:
                assert not _overlap(a, b), (a, b)
    assert any(_overlap(a, b) for a in spans for b in spans if a[0] != b[0])
    run = jobctl.json("runs", "fetch", "--limit", "1")[0]
    assert run["locks"] == [f"host:{run['env']['HOST']}"]


def test_hanging_fetch_with_timeout_frees_its_host(jobctl, start_daemon, tmp_path):
    log = tmp_path / "fetch.log"
    jobctl("add", "hang", "--manual", "--timeout", "3s", "--retries", "0", "--", "sleep 100")
    jobctl("add", "fetch", "--manual", "--", FETCH.format(log=log, secs=0))
    start_daemon()
    stuck = jobctl.json("run", "hang", "--lock", "host:c.example")
    wait_until(lambda: jobctl.json("runs", "hang")[0]["state"] == "leased", 5)
    nxt = jobctl.json("run", "fetch", "--lock", "host:c.example", "--env", "HOST=c.example")
    time.sleep(0.3)
    assert jobctl.store().get_run(nxt["id"]).state is RunState.PENDING  # waits on the lock
    wait_until(lambda: jobctl.store().get_run(nxt["id"]).state is RunState.SUCCEEDED, 15)
    hang, fetch = jobctl.store().get_run(stuck["id"]), jobctl.store().get_run(nxt["id"])
    assert hang.last_error == "timeout"
    # started once the hung run's timeout freed the host, not after its 100 s
    assert hang.finished_at <= fetch.started_at < hang.finished_at + timedelta(seconds=10)


def test_lock_of_a_killed_daemon_is_free_after_its_lease(jobctl, start_daemon, tmp_path):
    log = tmp_path / "fetch.log"
    jobctl(
        "add",
        "fetch",
        "--manual",
        "--overlap",
        "allow",
        "--",
        '[ "$JOBCTL_ATTEMPT" = 1 ] && [ "$HOST" = stuck ] && exec sleep 60; '
        + FETCH.format(log=log, secs=0),
    )
    first = start_daemon()
    held = jobctl.json("run", "fetch", "--lock", "host:d", "--env", "HOST=stuck")
    wait_until(lambda: jobctl.store().get_run(held["id"]).state is RunState.LEASED, 5)
    first.kill()
    waiting = jobctl.json("run", "fetch", "--lock", "host:d", "--env", "HOST=d")
    start_daemon()
    wait_until(lambda: jobctl.store().get_run(waiting["id"]).state is RunState.SUCCEEDED, 10)
    assert jobctl.store().get_attempts(held["id"])[0].error == "lost"


def test_two_daemons_never_hold_one_lock_at_once(jobctl, start_daemon, tmp_path):
    log = tmp_path / "fetch.log"
    jobctl("add", "fetch", "--manual", "--overlap", "allow", "--", FETCH.format(log=log, secs=0.05))
    jobctl("pause", "fetch")  # all thirty wait, then are offered at once
    daemons = [start_daemon("--workers", "4"), start_daemon("--workers", "4")]
    for i in range(30):
        jobctl("run", "fetch", "--lock", "host:shared", "--env", f"HOST=h{i % 3}")
    jobctl("resume", "fetch")

    def holders() -> set[str]:
        return {r[0] for r in jobctl.store().conn.execute("SELECT daemon_id FROM attempts")}

    # A daemon that ends a run frees the lock and claims the next waiting run in the same
    # transaction, so the first holder may keep it for every run. Once a few runs have
    # ended, stop that holder: the lock must pass to the other daemon, never overlapping.
    wait_until(lambda: log.exists() and log.read_text().count("end ") >= 5, 30)
    if len(holders()) == 1:
        (holder,) = holders()
        next(d for d in daemons if holder.endswith(f"-{d.pid}")).terminate()
    wait_until(lambda: all(r["state"] == "succeeded" for r in _runs(jobctl, "fetch")), 30)
    spans = sorted(_intervals(log), key=lambda s: s[1])
    assert len(spans) == 30
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(spans))
    assert len(holders()) == 2  # both daemons held the lock, one after the other
