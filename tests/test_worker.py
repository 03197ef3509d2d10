"""The child-process layer: posix_spawn children are whole (session, environment,
descriptors, group), their output and stdin flow, their errors name the path."""

from __future__ import annotations

import hashlib
import os
import select
import selectors
import signal
import sqlite3
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from conftest import pid_alive, wait_until

from jobctl.daemon import Poller
from jobctl.models import OUTPUT_LIMIT_BYTES, Run, RunReason, RunSettings, RunState, StopReason
from jobctl.outcomes import AttemptResult
from jobctl.spawner import Spawner
from jobctl.worker import (
    KILL_GRACE_SECONDS,
    MAX_READS_PER_EVENT,
    READ_CHUNK_BYTES,
    AttemptEnv,
    BaseEnv,
    Child,
    OutputTail,
    attempt_env,
    build_env,
    mark_inherited_fds_cloexec,
    spawn,
    spawn_hook,
)

BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/"}


def _settings(command: str, **kw: object) -> RunSettings:
    s = RunSettings(
        command=command,
        shell="/bin/sh",
        cwd=None,
        env={},
        stdin=None,
        timeout_seconds=None,
        backoff_seconds=10.0,
        on_failure=None,
    )
    return replace(s, **kw)  # type: ignore[arg-type]


def _drive(child: Child, timeout: float = 20.0, on_turn=None) -> AttemptResult:
    """Run the child to its end the way the daemon does: a selector on both fds."""
    sel = selectors.DefaultSelector()
    assert child.output_fd is not None and child.pidfd is not None
    sel.register(child.output_fd, selectors.EVENT_READ, "output")
    sel.register(child.pidfd, selectors.EVENT_READ, "exit")
    deadline = time.monotonic() + timeout
    try:
        while not child.finished:
            assert time.monotonic() < deadline, "the child did not finish in time"
            if on_turn is not None:
                on_turn(child)
            for key, _ in sel.select(0.1):
                if sel.get_map().get(key.fd) is not key:  # closed earlier in this batch
                    continue
                if key.data == "output":
                    if not child.on_output():
                        sel.unregister(key.fd)
                else:
                    sel.unregister(key.fd)
                    if child.output_fd is not None:
                        sel.unregister(child.output_fd)
                    child.on_exit()
    finally:
        sel.close()
    return child.result()


def _run(command: str, env: dict[str, str] | None = None, **kw: object) -> AttemptResult:
    return _drive(Child.start(_settings(command, **kw), env or BASE_ENV, time.monotonic()))


def _wait_for_output(child: Child, text: bytes, timeout: float = 5.0) -> None:
    sel = selectors.DefaultSelector()
    assert child.output_fd is not None
    sel.register(child.output_fd, selectors.EVENT_READ)
    try:
        wait_until(
            lambda: (sel.select(0.05) and child.on_output()) and text in child.tail.value(),
            timeout,
            interval=0.0,
            what=f"{text!r} in the output",
        )
    finally:
        sel.close()


def _own_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


# -- the process: session, environment, descriptors, group


def test_child_leads_its_own_session_and_group():
    child = Child.start(_settings("exec sleep 30"), BASE_ENV, time.monotonic())
    try:
        assert os.getsid(child.pid) == child.pid
        assert os.getpgid(child.pid) == child.pid
        assert os.getsid(child.pid) != os.getsid(0)
    finally:
        child.kill_now(StopReason.CANCELLED)
        result = _drive(child)
    assert result.signal == signal.SIGKILL


def _env_run(settings: RunSettings) -> Run:
    """A catch-up run with a key and a payload: every variable an attempt may be given."""
    t = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    return Run(
        id=42,
        job_id=7,
        job_name="nightly",
        scheduled_for=t,
        state=RunState.LEASED,
        skip_reason=None,
        attempt=2,
        max_attempts=3,
        not_before=None,
        leased_by="d1",
        lease_until=None,
        started_at=None,
        finished_at=None,
        exit_code=None,
        last_error=None,
        reason=RunReason.CATCHUP,
        catchup_from=t.replace(hour=9),
        priority=0,
        run_key="k-1",
        env={"PAYLOAD": "a=b"},
        locks=(),
        settings=settings,
    )


#: the daemon's environment in the tests below: PWD as the shell would set it (the cwd is
#: HOME, /): dash exports its own otherwise
DAEMON_ENV = dict(BASE_ENV, PWD="/", JOBCTL_DB="/data/j.db", MULTI="line one\nline two")


def test_child_gets_exactly_the_environment_of_spec_5():
    settings = _settings("exec env -0", env={"GREETING": "hello world", "EMPTY": ""})
    run = _env_run(settings)
    env = build_env(DAEMON_ENV, run, settings, 2)
    result = _drive(Child.start(settings, env, time.monotonic()))
    assert result.ok, result
    got = dict(p.split("=", 1) for p in result.output.decode().split("\0") if p)
    assert got == env
    assert got["JOBCTL_RUN_ID"] == "42" and got["JOBCTL_ATTEMPT"] == "2"
    assert got["JOBCTL_JOB"] == "nightly" and got["JOBCTL_DB"] == "/data/j.db"
    assert got["JOBCTL_SCHEDULED_FOR"].startswith("2026-03-01T12:00:00")
    assert got["JOBCTL_CATCHUP_FROM"].startswith("2026-03-01T09:00:00")


@pytest.mark.parametrize("job_env", [{"GREETING": "hi"}, {"PATH": "/bin", "GREETING": "hi"}])
def test_the_daemons_environment_encoded_once_gives_the_attempt_the_same(job_env):
    # through the spawner an attempt's variables go with the daemon's, encoded once; a job
    # variable that is also the daemon's (PATH) makes the environment whole instead
    settings = _settings("exec env -0", env=job_env)
    run = _env_run(settings)
    base = BaseEnv(DAEMON_ENV)
    env = attempt_env(base, run, settings, 2)
    assert isinstance(env, AttemptEnv) == ("PATH" not in job_env)
    assert dict(env) == build_env(DAEMON_ENV, run, settings, 2)
    spawner = Spawner()
    assert spawner.start()
    try:
        result = _drive(Child.start(settings, env, time.monotonic(), spawner=spawner))
    finally:
        spawner.stop()
    assert result.ok, result
    got = dict(p.split("=", 1) for p in result.output.decode().split("\0") if p)
    assert got == build_env(DAEMON_ENV, run, settings, 2)
    # a daemon started by an attempt has a variable its attempts may not: made whole
    inherited = BaseEnv(dict(DAEMON_ENV, JOBCTL_RUN_KEY="theirs"))
    env = attempt_env(inherited, replace(run, run_key=None), settings, 2)
    assert not isinstance(env, AttemptEnv) and "JOBCTL_RUN_KEY" not in env


def test_child_inherits_no_descriptor_once_marked():
    leaked = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leaked, True)
    conn = sqlite3.connect(":memory:")
    try:
        # without the mark, the inheritable descriptor does reach the child
        out = _run("exec ls /proc/self/fd").output.decode().split()
        assert str(leaked) in out
        assert leaked in mark_inherited_fds_cloexec()
        assert not os.get_inheritable(leaked)
        out = _run("exec ls /proc/self/fd").output.decode().split()
        # 0, 1, 2 and the descriptor ls reads the directory with
        assert len(out) == 4 and set(out) >= {"0", "1", "2"}, out
        assert str(leaked) not in out
    finally:
        conn.close()
        os.close(leaked)


def test_a_pidfd_closed_while_a_new_child_holds_a_copy_is_not_reported_for_its_successor():
    # posix_spawn returns once the child's exec has replaced its memory, before the exec
    # closes the child's copies of our close-on-exec descriptors (on most spawns of a
    # loaded machine). A pidfd closed meanwhile lives on in that child; were it closed
    # while still in epoll, its registration would live on too, and the next pidfd, given
    # the same number, would be reported with the old child's exit: a running child taken
    # for ended. The daemon's poller takes a descriptor out of epoll before its close.
    poller = Poller()
    stale = reused = 0
    try:
        for _ in range(200):
            done = spawn(["/bin/sh", "-c", "exit 0"], BASE_ENV, "/", None, None)
            done_fd = os.pidfd_open(done)
            select.select([done_fd], [], [])  # it has exited: its pidfd is readable
            poller.register(done_fd, lambda now, mono: None)
            running = spawn(["/bin/sh", "-c", "exec sleep 30"], BASE_ENV, "/", None, None)
            poller.forget(done_fd)
            os.close(done_fd)
            os.waitpid(done, 0)
            fd = os.pidfd_open(running)
            reused += fd == done_fd
            poller.register(fd, lambda now, mono: None)
            stale += bool(poller.select(0))
            poller.forget(fd)
            os.close(fd)
            os.killpg(running, signal.SIGKILL)
            os.waitpid(running, 0)
    finally:
        poller.close()
    assert reused > 100  # the case under test: the number is given again
    assert stale == 0


def test_child_starts_with_default_signals_and_an_empty_mask():
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        out = _run("exec grep -E 'SigIgn|SigBlk' /proc/self/status").output.decode()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        signal.signal(signal.SIGTERM, old_term)
    masks = {k: int(v, 16) for k, v in (line.split(":\t") for line in out.splitlines())}
    assert masks["SigBlk"] == 0
    # SIGPIPE and SIGXFSZ (ignored by Python) and SIGTERM (ignored above) are back to
    # the default; glibc leaves its two reserved signals (32, 33) ignored, which Python
    # does not let a caller name
    valid = sum(1 << (s - 1) for s in signal.valid_signals() if s < 64)
    assert masks["SigIgn"] & valid == 0, hex(masks["SigIgn"])


def test_grandchildren_die_with_the_group_when_the_child_exits():
    result = _run("sleep 300 >/dev/null 2>&1 & echo $!; exit 0")
    assert result.ok
    grandchild = int(result.output.split()[0])
    wait_until(lambda: not pid_alive(grandchild), 5, what="grandchild killed with its group")


def test_a_process_outside_the_group_holding_the_pipe_does_not_hold_the_attempt(tmp_path):
    f = tmp_path / "escaped.pid"
    # the inner shell writes its pid only once setsid has made it leave the group
    r = _run(f"setsid sh -c 'echo $$ > {f}; exec sleep 30' & until [ -s {f} ]; do :; done")
    assert r.ok
    escaped = int(f.read_text())
    try:
        assert pid_alive(escaped)  # it left the group: that one is the stray reaper's task
        assert os.getsid(escaped) == escaped
    finally:
        os.kill(escaped, signal.SIGKILL)


def test_every_child_is_reaped():
    child = Child.start(_settings("exit 0"), BASE_ENV, time.monotonic())
    _drive(child)
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)


# -- ends: exit codes, signals, timeout, stop


def test_result_carries_exit_code_output_and_error():
    r = _run("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.signal, r.stop_reason, r.error) == (3, None, None, "exit 3")
    assert r.output == b"out\nerr\n" and r.output_bytes == 8
    ok = _run("true")
    assert ok.ok and ok.exit_code == 0 and ok.error is None


def test_a_signal_that_ends_the_child_is_reported():
    r = _run("kill -TERM $$")
    assert (r.exit_code, r.signal, r.error) == (None, signal.SIGTERM, "signal 15")


def test_timeout_sends_sigterm_then_sigkill_after_the_grace():
    start = time.monotonic()
    child = Child.start(
        _settings("trap '' TERM; echo ready; sleep 30", timeout_seconds=2.0), BASE_ENV, start
    )
    _wait_for_output(child, b"ready")
    assert child.next_deadline() == start + 2.0
    child.tick(start + 1.0)
    assert child.stop_reason is None
    child.tick(start + 2.0)  # the timeout: SIGTERM, which the command ignores
    assert child.stop_reason is StopReason.TIMEOUT
    assert child.next_deadline() == start + 2.0 + KILL_GRACE_SECONDS
    sel = selectors.DefaultSelector()
    assert child.pidfd is not None
    sel.register(child.pidfd, selectors.EVENT_READ)
    assert sel.select(0.3) == []  # still alive: SIGTERM was ignored
    sel.close()
    child.tick(start + 2.0 + KILL_GRACE_SECONDS)
    r = _drive(child)
    assert r.signal == signal.SIGKILL and r.stop_reason is StopReason.TIMEOUT
    assert r.error == "timeout" and r.exit_code is None


def test_stop_terms_the_group_and_keeps_the_first_reason():
    child = Child.start(_settings("echo ready; sleep 30"), BASE_ENV, time.monotonic())
    _wait_for_output(child, b"ready")
    child.stop(StopReason.CANCELLED, time.monotonic(), 1.0)
    child.kill_now(StopReason.INTERRUPTED)
    r = _drive(child)
    assert r.stop_reason is StopReason.CANCELLED and r.error == "cancelled"


# -- stdin


@pytest.mark.parametrize("size", [5, 65536, 200_000, 3_000_000])
def test_stdin_text_arrives_whole(size):
    text = "".join(chr(ord("a") + i % 26) for i in range(size))
    before = _own_fds()
    r = _run("sha256sum; wc -c", stdin=text)
    digest, count = r.output.decode().split()[0], r.output.decode().split()[-1]
    assert digest == hashlib.sha256(text.encode()).hexdigest()
    assert int(count) == 0  # sha256sum read it all: stdin is one stream, at its end
    assert _own_fds() == before


def test_no_stdin_reads_dev_null():
    r = _run("wc -c; readlink /proc/self/fd/0")
    assert r.output.split() == [b"0", b"/dev/null"]


# -- errors name the path


def test_missing_cwd_is_named(tmp_path):
    before = _own_fds()
    with pytest.raises(OSError) as e:
        Child.start(_settings("true", cwd="/no/such/dir"), BASE_ENV, time.monotonic())
    assert f"spawn: {e.value.strerror}" == "spawn: /no/such/dir: No such file or directory"
    assert _own_fds() == before


def test_missing_shell_is_named():
    before = _own_fds()
    with pytest.raises(OSError) as e:
        Child.start(_settings("true", shell="/bin/nosh"), BASE_ENV, time.monotonic())
    assert f"spawn: {e.value.strerror}" == "spawn: /bin/nosh: No such file or directory"
    assert _own_fds() == before


def test_cwd_is_used_and_the_daemons_own_is_restored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    assert _run("pwd", cwd=str(work)).output == f"{work}\n".encode()
    assert _run("pwd", env=dict(BASE_ENV, HOME=str(work))).output == f"{work}\n".encode()
    assert os.getcwd() == str(tmp_path)
    with pytest.raises(OSError):
        Child.start(_settings("true", cwd=str(tmp_path / "gone")), BASE_ENV, time.monotonic())
    assert os.getcwd() == str(tmp_path)


def test_a_bare_shell_name_is_found_in_the_childs_path():
    assert _run("echo $0", shell="sh").output == b"sh\n"
    with pytest.raises(OSError) as e:
        Child.start(_settings("true", shell="nosh"), BASE_ENV, time.monotonic())
    assert e.value.strerror == "nosh: No such file or directory"


# -- output


def test_100_mb_of_output_keeps_a_64_kib_tail_without_holding_the_loop():
    longest = 0.0

    def timed(child: Child) -> None:
        nonlocal longest
        t = time.monotonic()
        child.on_output()
        longest = max(longest, time.monotonic() - t)

    child = Child.start(
        _settings("head -c 100000000 /dev/zero; printf END"), BASE_ENV, time.monotonic()
    )
    r = _drive(child, timeout=60, on_turn=timed)
    assert r.ok
    assert r.output_bytes == 100_000_003
    assert len(r.output) == OUTPUT_LIMIT_BYTES
    assert r.output.endswith(b"\0END") and r.output.count(b"\0") == OUTPUT_LIMIT_BYTES - 3
    assert len(child.tail.buf) <= 2 * OUTPUT_LIMIT_BYTES
    # one call reads at most MAX_READS_PER_EVENT chunks, then lets the loop go on
    assert longest < 0.5, longest
    assert MAX_READS_PER_EVENT * READ_CHUNK_BYTES <= 2 * 1024 * 1024


def test_output_tail_tells_whether_bytes_arrived_since_a_mark():
    tail = OutputTail(limit=4)
    mark = tail.total
    assert not tail.changed_since(mark)
    tail.feed(b"abcdefghij")
    assert tail.changed_since(mark) and tail.value() == b"ghij"
    mark = tail.total
    tail.feed(b"")
    assert not tail.changed_since(mark)


# -- the on-failure hook


def test_hook_gets_its_stdin_and_env_and_is_reaped(tmp_path):
    out = tmp_path / "hook.out"
    env = dict(BASE_ENV, JOBCTL_STATE="dead")
    hook = spawn_hook(
        f'{{ cat; echo "$JOBCTL_STATE"; pwd; }} > {out}', "/bin/sh", env, b"tail\n", str(tmp_path)
    )
    assert hook is not None
    assert os.getsid(hook.pid) == hook.pid
    sel = selectors.DefaultSelector()
    sel.register(hook.pidfd, selectors.EVENT_READ)
    assert sel.select(10), "the hook did not exit"
    sel.close()
    assert hook.wait() == 0
    assert out.read_text() == f"tail\ndead\n{tmp_path}\n"
    with pytest.raises(ChildProcessError):
        os.waitpid(hook.pid, os.WNOHANG)


def test_hook_reports_its_status_and_its_group_is_killed(tmp_path):
    pid_file = tmp_path / "gc.pid"
    hook = spawn_hook(f"sleep 300 & echo $! > {pid_file}; exit 4", "/bin/sh", BASE_ENV, b"", None)
    assert hook is not None
    assert hook.wait() == 4
    assert hook.wait() == 4  # idempotent
    grandchild = int(pid_file.read_text())
    wait_until(lambda: not pid_alive(grandchild), 5, what="the hook's group killed")


def test_hook_that_cannot_start_is_none():
    assert spawn_hook("true", "/bin/nosh", BASE_ENV, b"", None) is None
    assert spawn_hook("true", "/bin/sh", BASE_ENV, b"", "/no/such/dir") is None
