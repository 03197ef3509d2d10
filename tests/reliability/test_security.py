"""Unsafe database files are refused; files are private; user text is never interpreted."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from conftest import wait_until

from jobctl.models import RunState


@pytest.mark.sqlite_only
def test_daemon_refuses_a_file_owned_by_another_user(jobctl, db, start_daemon):
    jobctl("add", "seed", "--manual", "--", "true")  # creates the file
    os.chown(db, 65534, 65534)  # nobody; the tests run as root
    d = start_daemon(ready=False)
    assert d.proc.wait(10) == 1
    assert "Error: refusing to run jobs" in d.log() and "owned by uid 65534" in d.log()
    os.chown(db, os.geteuid(), os.getegid())
    os.chown(db.parent, 65534, 65534)
    d2 = start_daemon(ready=False)
    assert d2.proc.wait(10) == 1
    assert "owned by uid 65534" in d2.log()
    os.chown(db.parent, os.geteuid(), os.getegid())
    os.chmod(db, 0o620)  # group-writable
    d3 = start_daemon(ready=False)
    assert d3.proc.wait(10) == 1 and "writable by group or others" in d3.log()
    assert "Traceback" not in d.log() + d2.log() + d3.log()


def test_files_are_private_whatever_the_umask(tmp_path):
    db = tmp_path / "a" / "b" / "jobctl.db"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from jobctl.cli import main; main()",
            "--db",
            str(db),
            "add",
            "x",
            "--manual",
            "--",
            "true",
        ],
        check=False,
        capture_output=True,
        text=True,
        umask=0,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    import sqlite3

    holder = sqlite3.connect(db)  # keeps -wal and -shm in place (a last close removes them)
    holder.execute("SELECT COUNT(*) FROM jobs").fetchone()
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from jobctl.cli import main; main()",
            "--db",
            str(db),
            "add",
            "y",
            "--manual",
            "--",
            "true",
        ],
        check=False,
        capture_output=True,
        text=True,
        umask=0,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(db.parent.parent.stat().st_mode) & 0o077 == 0
    holder.close()


def test_markup_and_escapes_print_literally(jobctl, start_daemon):
    nasty = "[bold]B[/bold] [red]R\x1b[31mX\x1b]0;title\x07"
    jobctl(
        "add",
        "m",
        "--manual",
        "--description",
        nasty,
        "--env",
        f"V={nasty}",
        "--",
        f"echo '[bold]out[/bold]'; printf '\\033[2J'; true # {nasty}",
    )
    outputs = [jobctl(*a).stdout for a in (("list",), ("show", "m"), ("runs",))]
    start_daemon()
    run = jobctl.json("run", "m")
    wait_until(lambda: jobctl.store().get_run(run["id"]).state is RunState.SUCCEEDED, 5)
    outputs += [jobctl(*a).stdout for a in (("show", "m"), ("runs", "m"))]
    for text in outputs:
        assert "\x1b" not in text and "\x07" not in text, text
    assert "[bold]B[/bold] [red]R" in outputs[1]
    assert "[bold]out[/bold]" in jobctl("logs", str(run["id"])).stdout


def test_env_secrets_never_reach_the_daemon_log(jobctl, start_daemon, tmp_path):
    secret = "s3cr3t-VALUE-42"
    d = start_daemon()
    jobctl(
        "add",
        "sec",
        "--manual",
        "--retries",
        "1",
        "--backoff",
        "1s",
        "--env",
        f"TOKEN={secret}",
        "--on-failure",
        "echo hook $TOKEN",
        "--",
        "echo $TOKEN; exit 3",
    )
    run = jobctl.json("run", "sec", "--env", f"PAYLOAD={secret}")
    wait_until(lambda: jobctl.store().get_run(run["id"]).state is RunState.DEAD, 10)
    gone = tmp_path / "gone"  # exists at add (checked), removed before the run: spawn fails
    gone.mkdir()
    jobctl("add", "sec2", "--manual", "--env", f"TOKEN={secret}", "--cwd", str(gone), "--", "true")
    gone.rmdir()
    run2 = jobctl.json("run", "sec2")
    wait_until(lambda: jobctl.store().get_run(run2["id"]).state.value in ("failed", "dead"), 10)
    assert d.terminate() == 0
    assert secret not in d.log()
