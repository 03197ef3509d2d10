"""What a new user and outside validators found wrong in how runs are kept, told about
and measured (issue 40): each case fails without its fix, on the suite's backend
(``JOBCTL_TEST_BACKEND``), with real daemons and real receivers where it needs them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from clihelpers import Jobctl


@pytest.fixture
def cli(db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Jobctl:
    """The real CLI through its error boundary, on the suite's backend."""
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    return Jobctl(db, capsys)


def _z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ---------------------------------------------------------------------- 6: status's next due


def test_status_next_due_is_never_a_paused_jobs_queued_run(cli: Jobctl) -> None:
    cli.ok("add", "held", "--manual", "--", "true")
    cli.ok("pause", "held")
    cli.ok("run", "held")  # queued, due now, but it waits for the resume
    assert cli.json("status")["next_due_at"] is None
    cli.ok("add", "later", "--at", "2031-01-01T00:00Z", "--", "true")
    assert cli.json("status")["next_due_at"] == "2031-01-01T00:00:00Z"
    # resumed, its run is due again: now, not in 2031
    cli.ok("resume", "held")
    due = _z(cli.json("status")["next_due_at"])
    assert due <= datetime.now(UTC) + timedelta(seconds=1)
