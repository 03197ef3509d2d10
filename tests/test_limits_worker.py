"""What an attempt costs and what it may use (README, Run policies and what a run costs), at the worker: real children
through /bin/sh, reaped with their rusage, started under their limits."""

from __future__ import annotations

import errno
import os
import resource
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from jobctl.models import IoClass, Limits, RunSettings
from jobctl.outcomes import AttemptResult
from jobctl.spawner import (
    MAX_WAITING,
    NATIVE_SPAWN,
    Spawner,
    SpawnError,
)
from jobctl.worker import LIMITS_FAILED_EXIT, Child, limits_prefix, own_peak_rss_bytes

BASE_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/"}
#: a child that holds 200 MiB resident (``b'x' * n`` writes every page)
ALLOC_200M = f"{sys.executable} -c \"b = b'x' * (200 << 20); print(len(b))\""


def _settings(command: str, limits: Limits | None = None) -> RunSettings:
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
    return s if limits is None else replace(s, limits=limits)


def _run(
    command: str,
    limits: Limits | None = None,
    timeout: float = 30.0,
    spawner: Spawner | None = None,
) -> AttemptResult:
    child = Child.start(_settings(command, limits), BASE_ENV, time.monotonic(), spawner=spawner)
    return _drive(child, timeout)


def _drive(child: Child, timeout: float = 30.0) -> AttemptResult:
    """Watch a started child's output and exit as the daemon does; how it ended."""
    import selectors

    sel = selectors.DefaultSelector()
    assert child.output_fd is not None and child.pidfd is not None
    sel.register(child.output_fd, selectors.EVENT_READ, "output")
    sel.register(child.pidfd, selectors.EVENT_READ, "exit")
    deadline = time.monotonic() + timeout
    try:
        while not child.finished:
            assert time.monotonic() < deadline, "the child did not finish in time"
            for key, _ in sel.select(0.1):
                if sel.get_map().get(key.fd) is not key:
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


def test_max_rss_of_a_child_that_holds_200_mib_is_at_least_200_mib():
    # spawned here, a child's count is told only above this process's own peak, which an
    # earlier test in this worker may have raised (a 300 MiB ballast): it holds more then
    held = max(200 << 20, (own_peak_rss_bytes() or 0) + (64 << 20))
    result = _run(f"{sys.executable} -c \"b = b'x' * {held}; print(len(b))\"")
    assert result.ok, result.output
    assert result.max_rss is not None and result.max_rss >= held


@pytest.fixture(
    params=[(True, True), (True, False), (False, False)],
    ids=["native", "native-copy", "python-clone"],
)
def spawner(request):
    """The spawner every way (jobctl.spawner): the native loop where this machine has
    one, its clones sharing its memory or (where it cannot reset its peak) copies of it,
    and the clone that returns into Python that other machines use."""
    native, shared = request.param
    if native and NATIVE_SPAWN is None:
        pytest.skip(f"no native spawn for {os.uname().machine}")
    s = Spawner(native=native, shared=shared)
    assert s.start()
    yield s
    s.stop()


def _big() -> bytes:
    """300 MiB resident in this process (every page written): a daemon grown large."""
    return b"x" * (300 << 20)


def test_through_the_spawner_max_rss_is_the_commands_own_whatever_our_size(spawner):
    ballast = _big()
    small = _run("true", spawner=spawner)
    assert small.ok and small.max_rss is not None and small.max_rss < 8 << 20
    if spawner.native:
        # the copy held none of the spawner's memory: a shell running true, no more
        assert small.max_rss < 3 << 20
    big = _run(ALLOC_200M, spawner=spawner)
    assert big.ok and big.max_rss is not None and 200 << 20 <= big.max_rss <= 230 << 20
    # spawned here, the child is charged with our peak: not told, rather than ours
    assert _run("true").max_rss is None and _run(ALLOC_200M).max_rss is None
    assert len(ballast) == 300 << 20


def test_the_spawner_gives_the_child_what_a_spawn_here_gives(spawner):
    # the shell's own mask read by the shell (a builtin loop): a grep it forks could read
    # it while the shell blocks every signal around that fork (dash does), ~1 run in 8
    show = (
        "read line; echo $line; pwd; ps -o ni=,pgid=,sid= -p $$; "
        "while read -r l; do case $l in SigBlk*|SigIgn*) echo $l;; esac; done "
        "</proc/$$/status; ls /proc/$$/fd; echo $JOBCTL_X"
    )
    here = _run(show, Limits(nice=10))
    there = _run(show, Limits(nice=10), spawner=spawner)
    assert there.ok and here.ok, (there.output, here.output)
    lines = there.output.decode().split("\n")
    assert lines[1] == "/"  # HOME, the default working directory
    ni, pgid, sid = lines[2].split()
    assert ni == "10" and pgid == sid  # its own session and group
    assert lines[3].split() == ["SigBlk:", "0000000000000000"]
    # the same environment, signals ignored (none but what glibc keeps) and descriptors
    assert there.output.replace(pgid.encode(), b"G") == here.output.replace(
        here.output.decode().split("\n")[2].split()[1].encode(), b"G"
    )
    idle = _run("echo ok", Limits(io_class=IoClass.IDLE), spawner=spawner)
    assert idle.ok and idle.output == b"ok\n"


def test_the_spawner_names_the_step_that_failed_and_goes_on(spawner, tmp_path):
    # the clone reports a failed exec on the pipe of its own request, the spawner a step
    # before the clone in its answer; a success after a failure is one
    with pytest.raises(SpawnError) as failed:
        spawner.wait(
            spawner.request(
                str(tmp_path / "missing"), ["missing"], {}, "/", None, None, None, None, report=True
            )
        )
    assert (failed.value.step, failed.value.errno) == ("exec", errno.ENOENT)
    with pytest.raises(SpawnError) as failed:
        spawner.wait(
            spawner.request(
                "/bin/true",
                ["true"],
                {},
                str(tmp_path / "gone"),
                None,
                None,
                None,
                None,
                report=True,
            )
        )
    assert (failed.value.step, failed.value.errno) == ("chdir", errno.ENOENT)
    pid = spawner.wait(
        spawner.request(
            "/bin/sh", ["sh", "-c", "exit 7"], {}, "/", None, None, None, None, report=True
        )
    )
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7


def test_the_spawner_refuses_a_nul_byte_as_the_os_does_and_goes_on(spawner):
    # a NUL inside a field would split it in the message (a variable would become two);
    # the request is refused before it is sent, as posix_spawn refuses one
    for env, argv in (({"A": "x\0B=1"}, ["sh", "-c", "true"]), ({}, ["sh", "-c", "tr\0ue"])):
        with pytest.raises(OSError) as refused:
            spawner.request("/bin/sh", argv, env, "/", None, None, None, None)
        assert refused.value.errno == errno.EINVAL
    assert spawner.waiting == []
    pid = spawner.wait(
        spawner.request(
            "/bin/sh",
            ["sh", "-c", 'test "$A" = x'],
            {"A": "x"},
            "/",
            None,
            None,
            None,
            None,
            report=True,
        )
    )
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_a_spawner_that_died_is_started_again(spawner):
    first = spawner.pid
    os.kill(first, signal.SIGKILL)
    assert _run("true", spawner=spawner).ok
    assert spawner.pid not in (None, first)


def test_cpu_time_of_the_main_process_and_what_it_waited_for_is_counted():
    # the shell waits for a busy child: the child's CPU is the attempt's
    busy = f'{sys.executable} -c "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"'
    result = _run(busy)
    assert result.ok, result.output
    assert result.cpu_user is not None and result.cpu_system is not None
    assert result.cpu_user + result.cpu_system >= 0.3


def test_memory_max_makes_the_200_mib_child_fail():
    result = _run(ALLOC_200M, Limits(memory_max=100 << 20))
    assert not result.ok
    assert result.exit_code == 1 and b"MemoryError" in result.output


def test_nice_is_seen_by_the_child_and_its_children():
    result = _run("ps -o ni= -p $$; sh -c 'ps -o ni= -p $$'", Limits(nice=10))
    assert result.ok, result.output
    assert result.output.split() == [b"10", b"10"]
    # the daemon's own thread keeps its niceness
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0


def test_io_class_idle_is_seen_by_the_child():
    script = (
        f'{sys.executable} -c "import ctypes, os; '
        "libc = ctypes.CDLL(None, use_errno=True); "
        'print(libc.syscall(252, 1, 0) >> 13)"'
    )
    if os.uname().machine != "x86_64":
        pytest.skip("ioprio_get's number is x86_64's here")
    assert _run(script).output.strip() != b"3"
    result = _run(script, Limits(io_class=IoClass.IDLE))
    assert result.ok, result.output
    assert result.output.strip() == b"3"  # IOPRIO_CLASS_IDLE


def test_cpu_max_stops_a_busy_loop_with_cpu_limit():
    started = time.monotonic()
    result = _run("while :; do :; done", Limits(cpu_max_seconds=1.0))
    assert result.signal == signal.SIGXCPU
    assert result.error == "cpu limit"
    assert result.cpu_user is not None and result.cpu_user + (result.cpu_system or 0) >= 0.5
    assert time.monotonic() - started < 25


def test_cpu_max_holds_for_a_process_that_ignores_sigxcpu():
    # the hard limit, a second above: SIGKILL, still a cpu limit
    result = _run("trap '' XCPU; while :; do :; done", Limits(cpu_max_seconds=1.0))
    assert result.signal == signal.SIGKILL
    assert result.error == "cpu limit"


def test_files_max_is_the_limit_of_every_process_and_cannot_be_raised():
    result = _run("ulimit -n; sh -c 'ulimit -n'; ulimit -n 4096", Limits(files_max=64))
    lines = result.output.split(b"\n")
    assert lines[:2] == [b"64", b"64"]
    assert not result.ok  # raising it past the hard limit is refused


def test_a_limit_above_the_daemons_hard_limit_is_that_hard_limit():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit on open files here")
    result = _run("ulimit -n", Limits(files_max=hard + 1000))
    assert result.ok, result.output
    assert result.output.strip() == str(hard).encode()


def test_no_limits_no_prefix_and_a_failed_limit_line_is_exit_125():
    assert limits_prefix(Limits()) == ""
    assert "ulimit -S -v 1048576" in limits_prefix(Limits(memory_max=1 << 30))
    result = _run(limits_prefix(Limits(files_max=64)).replace("64", "-1") + "echo never")
    assert result.exit_code == LIMITS_FAILED_EXIT
    assert b"never" not in result.output


def test_requests_are_answered_in_order_and_need_no_wait(spawner, tmp_path):
    # the daemon sends each request and goes on; the answers come in the order asked,
    # and a clone whose exec took reports nothing (the daemon asks at its exit)
    reqs = [
        spawner.request("/bin/sh", ["sh", "-c", f"exit {n}"], {}, "/", None, None, None, None)
        for n in (3, 4, 5)
    ]
    got = []
    while len(got) < len(reqs):
        got += spawner.answers(block=True)
    assert [req for req, _ in got] == reqs
    codes = []
    for req, pid in got:
        assert isinstance(pid, int) and pid > 0
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        assert req.report_r is None and spawner.report(pid) is None
    assert codes == [3, 4, 5]
    # a step before the clone is in the answer; the clone's own it sends on the socket
    # before it exits (no pipe a request: the daemon's way)
    bad = spawner.request("/bin/true", ["true"], {}, str(tmp_path / "gone"), None, None, None, None)
    worse = spawner.request(str(tmp_path / "nope"), ["nope"], {}, "/", None, None, None, None)
    got = []
    while len(got) < 2:
        got += spawner.answers(block=True)
    (r1, a1), (r2, a2) = got
    assert r1 is bad and isinstance(a1, SpawnError) and a1.step == "chdir"
    assert r2 is worse and isinstance(a2, int)
    assert os.waitstatus_to_exitcode(os.waitpid(a2, 0)[1]) == 127
    failed = spawner.report(a2)
    assert failed is not None and (failed.step, failed.errno) == ("exec", errno.ENOENT)
    assert spawner.reports == {}


def test_the_clones_stay_small_request_after_request(spawner):
    # the native loop's copies hold its own two mappings, and none of the pages a request
    # wrote: one after hundreds of requests is as small as the first
    rss = []
    for _ in range(300):
        pid = spawner.wait(
            spawner.request("/bin/true", ["true"], {}, "/", None, None, None, None, report=True)
        )
        _, status, ru = os.wait4(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        rss.append(ru.ru_maxrss)
    assert max(rss) < (3 << 10 if spawner.native else 8 << 10)  # KiB


def test_many_requests_unread_never_wait_on_each_other(spawner):
    # the spawner answers each request before reading the next; a caller that asks more
    # than MAX_WAITING times before reading reads the answers meanwhile (else both sides
    # of the socket fill and each waits on the other: the alarm would end this test)
    signal.alarm(60)
    try:
        reqs = [
            spawner.request("/bin/true", ["true"], {}, "/", None, None, None, None)
            for _ in range(6 * MAX_WAITING)
        ]
        got = []
        while len(got) < len(reqs):
            got += spawner.answers(block=True)
    finally:
        signal.alarm(0)
    assert [req for req, _ in got] == reqs
    for req, pid in got:
        assert isinstance(pid, int)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert spawner.report(pid) is None


def test_a_spawner_lost_before_it_answers_leaves_the_attempt_to_be_spawned_here(
    spawner, monkeypatch
):
    # the request is in the socket when the spawner dies, and none can be started again:
    # the attempt is spawned by this process (its max_rss then not told), once
    import threading

    pid = spawner.pid
    os.kill(pid, signal.SIGSTOP)
    threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()
    monkeypatch.setattr(spawner, "start", lambda: False)
    result = _run("echo here", spawner=spawner)
    assert result.ok and result.output == b"here\n"
    assert not spawner.available and spawner.waiting == [] and spawner.pid is None


def test_a_request_dropped_with_its_spawner_is_spawned_by_its_caller(spawner, monkeypatch):
    # as the daemon does (Executor.spawned): the answers it waits on never come, the
    # requests are dropped, and each child asked is spawned here; its report pipe's read
    # end is the caller's, closed once (a second close could hit another descriptor)
    import threading

    pid = spawner.pid
    os.kill(pid, signal.SIGSTOP)
    child = Child.request(_settings("echo here"), BASE_ENV, time.monotonic(), spawner)
    threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()
    monkeypatch.setattr(spawner, "start", lambda: False)
    with pytest.raises(ConnectionError):
        spawner.answers(block=True)
    assert child.spawned(None) is None and child.report_r is None
    result = _drive(child)
    assert result.ok and result.output == b"here\n"


def test_the_native_loop_keeps_no_mapping_of_the_interpreter(spawner):
    # the spawner hands itself over to its loop of machine code and unmaps the rest: its
    # code and block, the stack (ps reads the command line there) and the kernel's
    if not spawner.native:
        pytest.skip("the clone returns into Python: the interpreter stays")
    pid = spawner.wait(
        spawner.request("/bin/true", ["true"], {}, "/", None, None, None, None, report=True)
    )
    os.waitpid(pid, 0)
    maps = [line.split() for line in Path(f"/proc/{spawner.pid}/maps").read_text().splitlines()]
    named = [m[5] for m in maps if len(m) > 5]
    assert not [n for n in named if "python" in n or ".so" in n], named
    assert len(maps) <= 8, maps
    cmdline = Path(f"/proc/{spawner.pid}/cmdline").read_bytes()
    assert b"/spawner.py\0" in cmdline


def test_a_large_request_leaves_the_loop_no_larger(spawner):
    # a 190 kB variable is more than an exec takes (E2BIG, told as a failed exec); the
    # loop gives back the pages past the first 64 KiB that the request wrote, so it holds
    # a few pages whatever came (its clones share or copy what it holds)
    if not spawner.native:
        pytest.skip("the spawner serves in Python: its interpreter's memory comes and goes")

    def loop_rss() -> int:
        pid = spawner.wait(
            spawner.request("/bin/true", ["true"], {}, "/", None, None, None, None, report=True)
        )
        os.waitpid(pid, 0)
        assert spawner.pid is not None
        status = Path(f"/proc/{spawner.pid}/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0])  # KiB

    before = loop_rss()
    big = {"A": "x" * 190_000}
    with pytest.raises(SpawnError) as failed:
        spawner.wait(
            spawner.request("/bin/true", ["true"], big, "/", None, None, None, None, report=True)
        )
    assert (failed.value.step, failed.value.errno) == ("exec", errno.E2BIG)
    assert loop_rss() <= before + 64
