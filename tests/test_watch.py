"""Watching work end to end (issue 12; jobctl(1), WATCHING A RUN): output stored while an attempt
runs, ``logs --follow``, ``run --wait`` that talks, and the no-daemon warning.

A real ``jobctl daemon``, real ``sh`` children; the CLI in-process (``jobctl`` fixture) or,
where it must run beside the test (follow, Ctrl-C), as its own process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import wait_until

from jobctl.errors import NotFound
from jobctl.models import RunState

NO_DAEMON = "warning: no daemon is running; start one with jobctl daemon"
#: prints ``line N <epoch seconds>`` once a second: each line says when it was written
TICKER = 'for i in $(seq 1 {n}); do echo "line $i $(date +%s.%N)"; sleep 1; done'


class Cli:
    """``jobctl`` as a process of its own; each stdout/stderr line is kept with the
    monotonic-free wall time it arrived (time.time, comparable with ``date +%s.%N``)."""

    def __init__(self, db: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobctl", "--db", str(db), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")},
        )
        self.out: list[tuple[float, str]] = []
        self.err: list[tuple[float, str]] = []
        self._threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for t in self._threads:
            t.start()

    @staticmethod
    def _read(stream, into: list[tuple[float, str]]) -> None:
        for raw in iter(stream.readline, b""):
            into.append((time.time(), raw.decode(errors="replace").rstrip("\n")))

    def lines(self, which: str = "out") -> list[str]:
        return [line for _, line in (self.out if which == "out" else self.err)]

    def wait(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout)
        for t in self._threads:
            t.join(5)
        return code

    def kill(self) -> None:
        """Stop it if it still runs, and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for t in self._threads:
            t.join(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _ticks(lines: list[tuple[float, str]]) -> list[tuple[int, float, float]]:
    """(N, when it was written, when it was seen) of each ``line N TS`` line."""
    out = []
    for seen, line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "line":
            out.append((int(parts[1]), float(parts[2]), seen))
    return out


def _state(jobctl, run_id: int) -> str:
    return jobctl.json("inspect", str(run_id))["state"]


# ------------------------------------------------------------------ output while running


def test_running_output_shows_in_logs_within_2s(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "tick", "--manual", "--", TICKER.format(n=8))
    run_id = jobctl.json("run", "tick")["id"]
    seen: dict[int, float] = {}

    def three_lines_seen() -> bool:
        now = time.time()
        try:
            out = jobctl("logs", str(run_id), ok=False).stdout
        except NotFound:  # not claimed yet (in-process, the error is not turned into exit 2)
            return False
        for n, written, _ in _ticks([(now, line) for line in out.splitlines()]):
            seen.setdefault(n, now - written)
        return len(seen) >= 3

    wait_until(three_lines_seen, 15, interval=0.05, what="three lines in logs")
    assert _state(jobctl, run_id) == "leased"  # while it still runs
    lags = [seen[n] for n in (1, 2, 3)]
    assert all(lag < 2.0 for lag in lags), lags
    data = jobctl.json("logs", str(run_id))
    assert data["finished_at"] is None and data["output_bytes"] > 0
    jobctl("cancel", str(run_id))


def test_logs_follow_streams_while_running_and_exits_0_at_the_end(jobctl, start_daemon, db):
    start_daemon()
    jobctl("add", "tick", "--manual", "--", TICKER.format(n=6))
    run_id = jobctl.json("run", "tick")["id"]
    follow = Cli(db, "logs", str(run_id), "--follow")
    try:
        wait_until(lambda: len(_ticks(follow.out)) >= 2, 15, what="two followed lines")
        assert _state(jobctl, run_id) == "leased"
        assert follow.wait(30) == 0
    finally:
        follow.kill()
    ticks = _ticks(follow.out)
    assert [n for n, _, _ in ticks] == [1, 2, 3, 4, 5, 6]
    # each line written once the follower was showing lines is shown within 2 s (the last
    # one at the latest when the attempt ended); the ones before waited for it to start
    lags = [seen - written for _, written, seen in ticks if written >= ticks[0][2]]
    assert len(lags) >= 2 and all(lag < 2.0 for lag in lags), (lags, ticks)
    assert _state(jobctl, run_id) == "succeeded"
    assert follow.lines("err") == []


def test_logs_follow_across_a_retry_prints_both_attempts(jobctl, start_daemon, db, tmp_path):
    start_daemon()
    # the first attempt fails only once the follower has shown its line: a follower that
    # a busy machine starts late still starts during the first attempt
    shown = tmp_path / "shown"
    jobctl(
        "add",
        "flaky",
        "--manual",
        "--retries",
        "1",
        "--backoff",
        "1",
        "--",
        f'echo "try $JOBCTL_ATTEMPT"; [ "$JOBCTL_ATTEMPT" -ge 2 ] && exit 0; '
        f"while [ ! -e {shown} ]; do sleep 0.05; done; exit 1",
    )
    run_id = jobctl.json("run", "flaky")["id"]
    follow = Cli(db, "logs", str(run_id), "-f")
    try:
        wait_until(lambda: follow.lines() == ["try 1"], 30, what="the first attempt's line")
        shown.touch()
        assert follow.wait(30) == 0
    finally:
        follow.kill()
    assert follow.lines() == ["try 1", "try 2"]
    assert follow.lines("err") == ["--- attempt 2 ---"]
    assert _state(jobctl, run_id) == "succeeded"


def test_sigkilled_daemon_keeps_the_output_written_before(jobctl, start_daemon):
    d = start_daemon()
    jobctl("add", "long", "--manual", "--retries", "0", "--", TICKER.format(n=60))
    run_id = jobctl.json("run", "long")["id"]

    def stored() -> str:
        try:
            return jobctl("logs", str(run_id), ok=False).stdout
        except NotFound:  # not claimed yet: no attempt to show
            return ""

    wait_until(lambda: "line 3 " in stored(), 15, what="3 lines stored")
    before = jobctl("logs", str(run_id)).stdout
    pid = jobctl.json("inspect", str(run_id))["attempts"][0]["pid"]
    d.kill()
    try:
        os.killpg(pid, signal.SIGKILL)  # the daemon's child lives in its own group
    except ProcessLookupError:
        pass
    after = jobctl("logs", str(run_id)).stdout
    assert after.startswith(before) and "line 1 " in after and "line 3 " in after
    # a new daemon settles the lost attempt; its output stays
    start_daemon()
    wait_until(lambda: _state(jobctl, run_id) == "dead", 15, what="the run dead (lost)")
    data = jobctl.json("inspect", str(run_id))
    assert data["attempts"][0]["error"] == "lost"
    assert jobctl("logs", str(run_id), "--attempt", "1").stdout.startswith(before)


# ------------------------------------------------------------------ run --wait


def test_run_wait_says_enqueued_at_once_and_closes_with_state_and_error(jobctl, start_daemon, db):
    start_daemon()
    jobctl("add", "bad", "--manual", "--retries", "0", "--", "sleep 1; exit 7")
    waiter = Cli(db, "run", "bad", "--wait")
    try:
        wait_until(lambda: waiter.err, 10, what="the enqueued line")
        first = waiter.lines("err")[0]
        assert first.startswith("run ") and first.endswith(" enqueued")
        run_id = int(first.split()[1])
        assert jobctl.store().get_run(run_id).state not in (RunState.DEAD,)  # not ended yet
        assert waiter.wait(30) == 1
    finally:
        waiter.kill()
    # not a terminal: no status line, just the two lines
    assert waiter.lines("err") == [
        f"run {run_id} enqueued",
        f"run {run_id} dead after 1 attempt: exit 7",
    ]
    assert waiter.lines() == [f"{run_id} dead"]


def test_run_wait_succeeded_line_and_follow_streams_output(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "hello", "--manual", "--", "echo hello; echo world")
    r = jobctl("run", "hello", "--follow")
    assert r.exit_code == 0
    assert r.stdout == "hello\nworld\n"
    lines = r.stderr.splitlines()
    assert lines[0].endswith(" enqueued")
    assert lines[-1].startswith(f"run {lines[0].split()[1]} succeeded in ")
    assert lines[-1].endswith("s")


def test_run_wait_ctrl_c_just_after_the_enqueued_line_stops_only_the_waiting(jobctl, monkeypatch):
    # Ctrl-C may come as soon as `run N enqueued` is out (a daemon can lease the run at
    # once), before the waiting proper began: it still stops only the waiting, exit 130
    # (it was click's abort, exit 1, on a loaded machine)
    from jobctl.cli.base import Ctx

    jobctl("add", "slow", "--manual", "--", "sleep 30")
    monkeypatch.setattr(Ctx, "warn_if_no_daemon", lambda self: os.kill(os.getpid(), signal.SIGINT))
    before = signal.getsignal(signal.SIGINT)
    r = jobctl("run", "slow", "--wait", ok=False)
    assert r.exit_code == 130
    run_id = int(r.stderr.splitlines()[0].split()[1])
    assert f"run {run_id} goes on without waiting" in r.stderr
    assert jobctl.store().get_run(run_id).state is RunState.PENDING
    assert signal.getsignal(signal.SIGINT) is before  # given back


def test_run_wait_sigint_leaves_the_run_going_and_exits_130(jobctl, start_daemon, db, tmp_path):
    start_daemon()
    # the command ends only once the waiter has exited: on a busy machine a fixed sleep
    # could end the run before the waiter handles its SIGINT (it then exits 0)
    gate = tmp_path / "gate"
    jobctl("add", "slow", "--manual", "--", f"while [ ! -e {gate} ]; do sleep 0.05; done")
    waiter = Cli(db, "run", "slow", "--wait")
    try:
        wait_until(lambda: waiter.err, 30, what="the enqueued line")
        run_id = int(waiter.lines("err")[0].split()[1])
        wait_until(lambda: _state(jobctl, run_id) == "leased", 30, what="the run leased")
        waiter.proc.send_signal(signal.SIGINT)
        assert waiter.wait(30) == 130
    finally:
        waiter.kill()
    last = waiter.lines("err")[-1]
    assert f"jobctl cancel {run_id}" in last and "Error" not in last
    assert _state(jobctl, run_id) == "leased"  # the run goes on
    gate.touch()
    wait_until(lambda: _state(jobctl, run_id) == "succeeded", 30, what="the run succeeded")


# ------------------------------------------------------------------ no daemon


def test_commands_warn_when_no_daemon_is_live(jobctl, start_daemon):
    r = jobctl("add", "j", "--manual", "--", "true")
    assert r.exit_code == 0 and r.stderr == NO_DAEMON + "\n"
    assert jobctl("edit", "j", "--retries", "1").stderr == NO_DAEMON + "\n"
    r = jobctl("run", "j")
    assert r.exit_code == 0 and r.stderr == NO_DAEMON + "\n" and r.stdout.strip().isdigit()
    jobctl("pause", "j")
    assert jobctl("resume", "j").stderr == NO_DAEMON + "\n"
    start_daemon()
    assert jobctl("add", "k", "--manual", "--", "true").stderr == ""
    assert jobctl("run", "k").stderr == ""


def test_run_of_a_paused_job_enqueues_with_a_warning(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "p", "--manual", "--paused", "--", "true")
    r = jobctl("run", "p")
    assert r.exit_code == 0
    run_id = int(r.stdout)
    assert r.stderr == f"warning: job p is paused: run {run_id} waits until jobctl resume p\n"
    assert jobctl.json("inspect", str(run_id))["waiting"]["reason"] == "paused"


# ------------------------------------------------------------------ fields


def test_attempt_and_run_fields_and_the_hook_result(jobctl, start_daemon):
    start_daemon()
    jobctl("add", "dies", "--manual", "--retries", "0", "--on-failure", "exit 4", "--", "exit 3")
    run_id = jobctl.json("run", "dies")["id"]
    wait_until(
        lambda: jobctl.json("inspect", str(run_id))["hook_status"], 15, what="the hook result"
    )
    data = jobctl.json("inspect", str(run_id))
    assert data["state"] == "dead" and data["hook_status"] == "exit 4"
    assert data["waiting"] is None
    (att,) = data["attempts"]
    assert {"duration", "host", "pid", "output_bytes", "exit_code", "error"} <= set(att)
    assert att["exit_code"] == 3 and att["error"] == "exit 3"
    assert isinstance(att["duration"], float) and 0 <= att["duration"] < 10
    assert att["host"] == os.uname().nodename and att["pid"] > 0
    assert data["duration"] == att["duration"] and data["host"] == att["host"]
    run = jobctl.json("runs", "dies")[0]
    assert run["duration"] == att["duration"] and run["host"] == att["host"]
    text = jobctl("inspect", str(run_id)).stdout
    assert "on failure  exit 4" in text and "DURATION" in text and "PID" in text
    assert "DURATION" in jobctl("runs").stdout.splitlines()[0]
    assert "DURATION" in jobctl("show", "dies").stdout


def test_run_wait_on_a_terminal_shows_a_live_status_line(jobctl, start_daemon, db):
    import pty

    start_daemon()
    jobctl("add", "slow", "--manual", "--", "sleep 1.5")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobctl", "--db", str(db), "run", "slow", "--wait"],
        stdout=subprocess.DEVNULL,
        stderr=slave,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")},
            "TERM": "xterm",
        },
    )
    os.close(slave)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = seen.decode(errors="replace")
    assert " enqueued" in text
    assert "leased" in text and "attempt 1 of 3" in text  # the live line, redrawn
    # the status line is gone before the closing line, the last thing written
    assert text.rstrip().splitlines()[-1].endswith("s") and "succeeded in " in text
    assert text.rindex("attempt 1 of 3") < text.rindex("succeeded in ")


def test_list_shows_missed_windows_only_when_there_are_some(jobctl, start_daemon):
    from datetime import UTC, datetime, timedelta

    jobctl("add", "often", "--every", "1s", "--catchup", "skip", "--", "true")
    jobctl("add", "calm", "--manual", "--", "true")
    assert "MISSED" not in jobctl("list").stdout
    first = datetime.fromisoformat(
        jobctl.json("show", "often")["next_run_at"].replace("Z", "+00:00")
    )
    # windows pass while no scheduler runs; the daemon counts them missed when it starts
    wait_until(lambda: datetime.now(UTC) > first + timedelta(seconds=2), 10, what="windows pass")
    start_daemon()
    wait_until(lambda: jobctl.json("show", "often")["missed_total"] >= 2, 10, what="missed")
    lines = jobctl("list").stdout.splitlines()
    assert lines[0].split()[-1] == "MISSED"
    missed = jobctl.json("show", "often")["missed_total"]
    row = next(line for line in lines if line.startswith("often "))
    assert row.split()[-1] == str(missed)
    calm = next(line for line in lines if line.startswith("calm "))
    assert calm.split()[-1] == "active"  # zero is left blank


def test_logs_follow_of_a_finished_run_prints_it_and_exits(jobctl, start_daemon, db):
    d = start_daemon()
    jobctl("add", "once", "--manual", "--retries", "0", "--", "printf 'a\\nb'; exit 1")
    run_id = jobctl.json("run", "once")["id"]
    wait_until(lambda: _state(jobctl, run_id) == "dead", 10, what="the run dead")
    assert d.terminate() == 0  # follow reads the database only: no daemon needed
    r = jobctl("logs", str(run_id), "--follow")
    assert r.exit_code == 0 and r.stdout == "a\nb" and r.stderr == ""
    for args, code, message in (
        ([str(run_id), "--attempt", "2"], 1, f"Error: run {run_id} has no attempt 2"),
        (["999"], 1, "Error: no run with id 999"),
        ([str(run_id), "--json"], 2, "Error: --follow and --json cannot be combined"),
    ):
        cli = Cli(db, "logs", *args, "--follow")
        try:
            assert cli.wait(30) == code
        finally:
            cli.kill()
        assert cli.lines("err") == [message] and cli.lines() == []
