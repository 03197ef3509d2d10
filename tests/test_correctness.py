"""What a new user got wrong from jobctl (issue 29): each case fails without its fix.

The cases that touch the store run on the suite's backend (``JOBCTL_TEST_BACKEND``); the
daemon's keeper has its own file (test_keeper.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import Jobctl

HUGE = "99999999999999999999"


@pytest.fixture
def cli(db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Jobctl:
    """The real CLI through its error boundary, on the suite's backend."""
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    return Jobctl(db, capsys)


def one_error(err: str, *words: str) -> None:
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], (word, err)


# ---------------------------------------------------------------------- 4: worker counts


@pytest.mark.parametrize(
    "args",
    [
        ["--workers", HUGE],
        ["--workers", "4097"],
        ["--workers", "0"],
        ["--workers", "4", "--reserved", HUGE, "--reserved-priority", "1"],
    ],
)
def test_a_worker_count_the_machine_cannot_run_is_invalid_input(db: Path, args: list[str]) -> None:
    # a process of its own: without the check the daemon would start and run
    try:
        r = subprocess.run(
            [sys.executable, "-m", "jobctl", "--db", str(db), "daemon", *args],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"daemon {' '.join(args)} started")
    assert r.returncode == 2, r
    one_error(r.stderr, "--")
