"""What a start imports: ``--version`` and ``list`` pay for no module they do not use
(docs/benchmarks.md: the CLI against ``import click``), and a daemon loads neither the
senders of notifications nor OpenSSL's hashlib until it needs them (its memory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import sys
from jobctl.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("MODULES:" + ",".join(sorted(sys.modules)), file=sys.stderr)
"""

#: what a listing never uses: job files and their parsers, jobctl check, the daemon's face
#: of the store, durations and zones (only the text of one job shows them)
NOT_FOR_A_LISTING = (
    "jobctl.jobfile",
    "jobctl.specs",
    "jobctl.cronexpr",
    "jobctl.checks",
    "jobctl.durations",
    "jobctl.zones",
    "jobctl.store.daemon",
    "tomllib",
    "zoneinfo",
    "shutil",
)


def _modules(args: list[str], env: dict[str, str]) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=60
    )
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES:"))
    return set(line.removeprefix("MODULES:").split(","))


@pytest.mark.parametrize("args", [["--version"], ["list", "--json"]])
def test_a_listing_imports_nothing_it_does_not_use(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "j.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jobctl",
            "--db",
            str(db),
            "add",
            "j",
            "--every",
            "5m",
            "--",
            "true",
        ],
        check=True,
        capture_output=True,
        env=env,
        timeout=60,
    )
    full = args if args == ["--version"] else ["--db", str(db), *args]
    loaded = _modules(full, env)
    if args != ["--version"]:
        assert "jobctl.store.commands" in loaded  # the probe did list
    assert sorted(loaded.intersection(NOT_FOR_A_LISTING)) == []


DAEMON_PROBE = """
import sys
import jobctl.daemon, jobctl.scheduler, jobctl.executor, jobctl.notifier, jobctl.planner
from jobctl.store import open_store
open_store(sys.argv[1]).open_daemon  # the daemon's face of the store, as the daemon opens it
import jobctl.store.daemon, jobctl.store.sqlite.driver
print("MODULES:" + ",".join(sorted(sys.modules)), file=sys.stderr)
"""

#: what a daemon with no channel and no cron H never uses: the senders of notifications
#: (ssl, http, email, smtp) and hashlib (OpenSSL's libcrypto): some 8 MiB of its RSS
NOT_FOR_A_DAEMON = ("ssl", "_ssl", "http.client", "smtplib", "email.message", "_hashlib")


def test_a_daemon_imports_no_sender_and_no_hashlib(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    proc = subprocess.run(
        [sys.executable, "-c", DAEMON_PROBE, str(tmp_path / "d.db")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES:"))
    loaded = set(line.removeprefix("MODULES:").split(","))
    assert "jobctl.notifier" in loaded and "jobctl.cronexpr" in loaded
    assert sorted(loaded.intersection(NOT_FOR_A_DAEMON)) == []
