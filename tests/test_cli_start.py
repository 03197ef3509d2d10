"""What a start imports: ``--version`` and ``list`` pay for no module they do not use
(docs/benchmarks.md: the CLI against ``import click``), and a daemon loads neither the
senders of notifications nor OpenSSL's hashlib until it needs them (its memory)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from jobctl.cli import cli
from jobctl.cli.base import COMMAND_MODULES

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
    # who a change is made by (getpass, socket) is read on a change; a wake-up is sent
    # after a write commits (socket)
    "getpass",
    "socket",
    "selectors",
)

#: every jobctl module ``jobctl --version`` loads: the group, and none of its commands
VERSION_MODULES = {"jobctl", "jobctl.cli", "jobctl.cli.base", "jobctl.errors"}

#: every jobctl module ``list --json`` on a SQLite file loads, and no other: the module of
#: its command (not the other commands': the group imports a command's module when it
#: runs), the commands' face of the store without its collaborators (the outbox and the
#: notifications, pings, secrets' tokens, the dashboard: made when a command first needs
#: one), the rows and the rendering. A module that joins the path must be one a listing
#: uses: add it here only then, and say why in the commit.
LISTING_MODULES = VERSION_MODULES | {
    "jobctl.cli.jobs",
    "jobctl.clock",
    "jobctl.models",
    "jobctl.output",
    "jobctl.paths",
    "jobctl.store",
    "jobctl.store.calendars",
    "jobctl.store.commands",
    "jobctl.store.dialect",
    "jobctl.store.protocol",
    "jobctl.store.queries",
    "jobctl.store.rows",
    "jobctl.store.sqlfiles",
    "jobctl.store.sqlite",
    "jobctl.store.sqlite.db",
    "jobctl.store.sqlite.schema",
    "jobctl.store.sqlite.sql",
    "jobctl.store.writes",
}


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
    ours = {m for m in loaded if m == "jobctl" or m.startswith("jobctl.")}
    assert sorted(ours) == sorted(VERSION_MODULES if args == ["--version"] else LISTING_MODULES)


def test_the_group_names_the_module_of_every_command() -> None:
    """The lazy group's table (help order) names every command its modules register, and
    each command's own module: a command missing from it would be missing from help."""
    for module in dict.fromkeys(COMMAND_MODULES.values()):
        importlib.import_module(module)
    assert sorted(cli.commands) == sorted(COMMAND_MODULES)
    for name, cmd in cli.commands.items():
        assert cmd.callback is not None and cmd.callback.__module__ == COMMAND_MODULES[name], name
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == list(COMMAND_MODULES)
    assert cli.get_command(ctx, "no-such-command") is None


@pytest.mark.parametrize("name", ["serve", "logs", "calendar"])
def test_a_command_imports_its_own_module_and_no_other(name: str) -> None:
    """``jobctl NAME --help`` loads NAME's module, and of the commands' modules only it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    loaded = _modules([name, "--help"], env)
    commands = {m for m in loaded if m.startswith("jobctl.cli.")} - {"jobctl.cli.base"}
    assert commands == {COMMAND_MODULES[name]}


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
