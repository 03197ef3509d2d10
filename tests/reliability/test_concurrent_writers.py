"""Eight writer processes against one database while a daemon runs hundreds of runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import wait_until

WRITER = r"""
import io, json, sys
from jobctl.cli import main
db, me, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
errors, expect = [], {}
def call(*a, ok=True):
    err = io.StringIO(); old = sys.stderr; sys.stderr = err
    old_out = sys.stdout; sys.stdout = io.StringIO()
    code = 0
    try:
        main(["--db", db, *a])
    except SystemExit as e:
        code = e.code or 0
    finally:
        text = sys.stdout.getvalue(); sys.stderr = old; sys.stdout = old_out
    if (ok and code != 0) or "locked" in err.getvalue() or "Traceback" in err.getvalue():
        errors.append([list(a), code, err.getvalue()])
    return code, text
for k in range(rounds):
    name = f"{me}-{k}"
    cmd = "exit 1" if k % 4 == 0 else "true"
    call("add", name, "--manual", "--retries", "0", "--overlap", "allow", "--", cmd)
    call("edit", name, "--description", f"d{k}", "--priority", str(k))
    ids = []
    for _ in range(3):
        code, text = call("run", name, "--json")
        ids.append(json.loads(text)["id"])
    code, text = call("cancel", str(ids[0]), "--json")
    at_cancel = json.loads(text)[0]["state"]
    call("pause", name)
    call("resume", name)
    call("retry-dead", name)
    if k % 5 == 4:
        call("rm", name, "--force")
        expect[name] = None
    else:
        expect[name] = {"description": f"d{k}", "priority": k, "cancelled": ids[0], "at_cancel": at_cancel, "runs": ids}
json.dump({"errors": errors, "expect": expect}, open(out, "w"))
"""


@pytest.mark.long
def test_eight_writers_while_a_daemon_runs(jobctl, start_daemon, db, tmp_path):
    jobctl("add", "bulk", "--every", "1s", "--overlap", "allow", "--", "true")
    d = start_daemon("--workers", "8")
    procs = []
    for i in range(8):
        out = tmp_path / f"w{i}.json"
        procs.append(
            (
                out,
                subprocess.Popen(
                    [sys.executable, "-c", WRITER, str(db), f"w{i}", "12", str(out)],
                    stderr=subprocess.PIPE,
                ),
            )
        )
    results = []
    for out, p in procs:
        _, err = p.communicate(timeout=150)
        assert p.returncode == 0, err.decode()
        results.append(json.loads(out.read_text()))
    errors = [e for r in results for e in r["errors"]]
    assert errors == [], errors[:5]
    store = jobctl.store()
    # every change is visible afterwards
    for r in results:
        for name, want in r["expect"].items():
            if want is None:
                assert name not in store.job_names()
                continue
            job = store.get_job(name)
            assert job.spec.description == want["description"]
            assert job.spec.priority == want["priority"]
            assert job.state.value == "active"
            # a cancel that found the run open wins over its end; a finished run stays
            final = store.get_run(want["cancelled"]).state.value
            if want["at_cancel"] in ("pending", "failed", "cancelled"):
                assert final == "cancelled", (name, want)
            elif want["at_cancel"] == "leased":
                # a running attempt that still succeeded did its work; one that failed
                # is not retried nor made dead: the cancel wins
                assert final in ("cancelled", "succeeded"), (name, want, final)
            else:
                assert final == want["at_cancel"] or want["at_cancel"] == "dead", (name, want)
    total = sum(len(r["runs"]) for res in results for r in res["expect"].values() if r)
    assert total >= 200
    # the daemon drains them all: no run stuck
    wait_until(
        lambda: (
            not [
                r
                for r in store.list_runs(limit=100000)
                if r.state.value in ("pending", "leased", "failed") and r.job_name != "bulk"
            ]
        ),
        60,
        interval=0.5,
        what="runs drained",
    )
    assert d.proc.poll() is None
    assert d.terminate() == 0
    assert "Traceback" not in d.log() and "locked" not in d.log()
