"""What the CLI tests share: ``jobctl.cli.main(argv)`` run in-process through its real error
boundary, and the checks of the JSON fields (jobctl(1), DESCRIPTION and EXIT STATUS).

Every test uses a real SQLite file in ``tmp_path``. ``main`` always ends in ``sys.exit``;
``Jobctl`` catches it and returns (exit code, stdout, stderr). Each ``test_cli_*.py`` file
gets it as its ``jobctl`` fixture from ``cli_jobctl``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import StoreView, finish_one

from jobctl.cli import main
from jobctl.models import RunState

UTC = UTC

JOB_FIELDS = {
    "id",
    "name",
    "description",
    "trigger",
    "command",
    "stdin",
    "env",
    "cwd",
    "shell",
    "paused",
    "state",
    "catchup",
    "catchup_limit",
    "overlap",
    "timeout",
    "retries",
    "backoff",
    "priority",
    "jitter",
    "on_failure",
    "next_run_at",
    "missed_total",
    "last_run",
}
TRIGGER_FIELDS = {"kind", "expr", "tz", "after_completion"}
RUN_FIELDS = {
    "id",
    "job",
    "scheduled_for",
    "state",
    "skip_reason",
    "attempt",
    "not_before",
    "leased_by",
    "lease_until",
    "started_at",
    "finished_at",
    "exit_code",
    "last_error",
    "reason",
    "catchup_from",
    "priority",
    "run_key",
    "env",
    "locks",
}
ATTEMPT_FIELDS = {
    "run_id",
    "attempt",
    "started_at",
    "finished_at",
    "exit_code",
    "error",
    "output_bytes",
}
DAEMON_FIELDS = {"id", "pid", "host", "leader", "started_at", "heartbeat_at"}
JOB_TIME_FIELDS = ("next_run_at",)
RUN_TIME_FIELDS = (
    "scheduled_for",
    "not_before",
    "lease_until",
    "started_at",
    "finished_at",
    "catchup_from",
)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Jobctl:
    def __init__(self, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.db = db
        self.capsys = capsys

    def __call__(self, *args: str, db: bool = True) -> Result:
        argv = (["--db", str(self.db)] if db else []) + list(args)
        self.capsys.readouterr()
        code: int | str | None = 0
        try:
            main(argv)
        except SystemExit as e:
            code = e.code
        else:  # pragma: no cover - main always exits
            pytest.fail("main() returned instead of exiting")
        out, err = self.capsys.readouterr()
        return Result(0 if code is None else int(code), out, err)

    def ok(self, *args: str) -> Result:
        r = self(*args)
        assert r.code == 0, (args, r)
        assert r.err == "" or "Error" not in r.err, r.err
        return r

    def json(self, *args: str) -> Any:
        return self.ok(*args, "--json").json()

    def store(self) -> StoreView:
        return StoreView(self.db)


def cli_jobctl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Jobctl:
    """The ``jobctl`` fixture of the CLI tests: a fresh database, no ``JOBCTL_DB``, TZ=UTC."""
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    return Jobctl(tmp_path / "jobctl.db", capsys)


def now() -> datetime:
    return datetime.now(UTC)


def parse_z(text: str) -> datetime:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text[:-1] + "+00:00")


def check_job_json(job: dict[str, Any]) -> None:
    assert JOB_FIELDS <= set(job), JOB_FIELDS - set(job)
    assert TRIGGER_FIELDS <= set(job["trigger"])
    for k in JOB_TIME_FIELDS:
        assert job[k] is None or job[k].endswith("Z")
    for k in ("timeout", "backoff", "jitter"):
        assert job[k] is None or (isinstance(job[k], (int, float)) and not isinstance(job[k], bool))
    assert isinstance(job["paused"], bool)
    assert job["state"] in {"active", "paused", "cancelled", "done"}
    assert job["trigger"]["kind"] in {"cron", "interval", "once", "reboot", "manual"}
    if job["last_run"] is not None:
        check_run_json(job["last_run"])


def check_run_json(run: dict[str, Any]) -> None:
    assert RUN_FIELDS <= set(run), RUN_FIELDS - set(run)
    for k in RUN_TIME_FIELDS:
        assert run[k] is None or run[k].endswith("Z"), (k, run[k])
    assert isinstance(run["id"], int)
    assert run["skip_reason"] in (None, "missed", "overlap")
    assert run["reason"] in ("schedule", "catchup", "manual")
    assert run["state"] in {s.value for s in RunState}


def lease(db: Path, limit: int = 10) -> list[Any]:
    """Make due runs ``leased`` the way a daemon would (a claim through the store)."""
    with StoreView(db) as store:
        claimed, _dead = store.claim(
            "test-daemon", "test-host", now() + timedelta(seconds=1), 30, limit=limit
        )
    return [c.run for c in claimed]


def make_dead(db: Path, *run_ids: int) -> None:
    """Claim the runs and finish their attempt ``dead``, as a daemon does after the last try."""
    with StoreView(db) as store:
        claimed, _ = store.claim(
            "test-daemon", "test-host", now() + timedelta(seconds=1), 30, limit=50
        )
        attempts = {c.run.id: c.run.attempt for c in claimed}
        assert set(run_ids) <= set(attempts), "a run could not be claimed"
        from jobctl.outcomes import AttemptResult, Decision

        for run_id in run_ids:
            done = finish_one(
                store.daemon,
                run_id,
                attempts[run_id],
                "test-daemon",
                now() + timedelta(seconds=1),
                AttemptResult(3, output=b"boom\n", output_bytes=5),
                Decision(RunState.DEAD, "exit 3"),
            )
            assert done.state is RunState.DEAD


def assert_one_error_line(r: Result) -> None:
    lines = r.err.splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("Error: "), r.err
    assert "Traceback" not in r.err
