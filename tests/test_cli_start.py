"""What a command's start imports: ``--version`` and ``list`` pay for no module they do not
use (docs/benchmarks.md: the CLI against ``import click``)."""

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
    "jobctl.store.sqlite.daemon",
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
