"""One attempt as a child process: its own session, its environment, its output tail.

The daemon owns the event loop; a :class:`Child` only exposes file descriptors to wait
on (the output pipe and a pidfd) and methods to call when they are ready. Children are
handled whole: each runs in a new session (so its process group is its pid), every
signal goes to the whole group, and every child is reaped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping

from .clock import iso
from .models import OUTPUT_LIMIT_BYTES, AttemptResult, Run, RunSettings, StopReason

#: SIGTERM first, SIGKILL this long after (SPEC §4 --timeout)
KILL_GRACE_SECONDS = 5.0
#: a cancel is acted on within 2 s: SIGTERM, then SIGKILL this long after
CANCEL_GRACE_SECONDS = 1.0
READ_CHUNK_BYTES = 65536


def build_env(
    base: Mapping[str, str], run: Run, settings: RunSettings, attempt: int
) -> dict[str, str]:
    """The child's environment (SPEC §5): the daemon's, then the job's ``--env``, then the
    run's payload, then the ``JOBCTL_*`` variables."""
    env = dict(base)
    env.update(settings.env)
    env.update(run.env)
    env["JOBCTL_JOB"] = run.job_name
    env["JOBCTL_RUN_ID"] = str(run.id)
    env["JOBCTL_ATTEMPT"] = str(attempt)
    env["JOBCTL_SCHEDULED_FOR"] = iso(run.scheduled_for) or ""
    if run.catchup_from is not None:
        env["JOBCTL_CATCHUP_FROM"] = iso(run.catchup_from) or ""
    else:
        env.pop("JOBCTL_CATCHUP_FROM", None)
    if run.run_key is not None:
        env["JOBCTL_RUN_KEY"] = run.run_key
    else:
        env.pop("JOBCTL_RUN_KEY", None)
    return env


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a whole process group. Returns False when no such group exists."""
    if pgid <= 1:
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def group_alive(pgid: int) -> bool:
    return kill_group(pgid, 0)


def processes_of_run(run_id: int, db: str = "", proc_root: str = "/proc") -> list[int]:
    """Pids on this host whose environment has ``JOBCTL_RUN_ID=run_id``.

    The last resort after a daemon died between starting an attempt and recording its
    process group: every process of the attempt inherited the variable.
    """
    needle = f"JOBCTL_RUN_ID={run_id}".encode()
    db_needle = f"JOBCTL_DB={db}".encode()
    me = os.getpid()
    found = []
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"{proc_root}/{entry}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        entries_ = env.split(b"\0")
        if needle in entries_ and (not db or db_needle in entries_):
            found.append(int(entry))
    return found


def kill_run_processes(run_id: int, db: str = "") -> int:
    """SIGKILL the process group of every process left from an earlier attempt of a run.
    Returns how many processes were found."""
    pids = processes_of_run(run_id, db)
    for pid in pids:
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if pgid != os.getpgid(0):
            kill_group(pgid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


class OutputTail:
    """Keeps the last ``limit`` bytes written, and counts them all."""

    def __init__(self, limit: int = OUTPUT_LIMIT_BYTES) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self.buf += data
        if len(self.buf) > 2 * self.limit:
            del self.buf[: len(self.buf) - self.limit]

    def value(self) -> bytes:
        return bytes(self.buf[-self.limit :])


class Child:
    """A running command. Create with :meth:`start`; feed it readiness events.

    ``output_fd`` is readable when output arrives; ``pidfd`` when the process exited.
    The process is finished when :attr:`returncode` is set and the output is closed.
    """

    def __init__(self, proc: subprocess.Popen[bytes], pidfd: int, deadline: float | None) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pidfd: int | None = pidfd
        assert proc.stdout is not None
        self.output_fd: int | None = proc.stdout.fileno()
        os.set_blocking(self.output_fd, False)
        self.tail = OutputTail()
        self.returncode: int | None = None
        self.deadline = deadline  # monotonic seconds, for --timeout
        self.kill_at: float | None = None  # monotonic: SIGKILL the group then
        self.stop_reason: StopReason | None = None

    @classmethod
    def start(
        cls,
        settings: RunSettings,
        env: dict[str, str],
        now_monotonic: float,
    ) -> Child:
        """Spawn ``shell -c command`` in a new session. Raises OSError if it cannot start."""
        stdin_file = None
        if settings.stdin is not None:
            stdin_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
            stdin_file.write(settings.stdin.encode())
            stdin_file.seek(0)
        cwd = settings.cwd or env.get("HOME") or "/"
        try:
            proc = subprocess.Popen(
                [settings.shell, "-c", settings.command],
                stdin=stdin_file if stdin_file is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            if stdin_file is not None:
                stdin_file.close()
        pidfd = os.pidfd_open(proc.pid)
        deadline = now_monotonic + settings.timeout_seconds if settings.timeout_seconds else None
        return cls(proc, pidfd, deadline)

    # -- events

    def on_output(self) -> bool:
        """Drain what is readable. Returns False at end of file (the fd is then closed)."""
        if self.output_fd is None:
            return False
        while True:
            try:
                data = os.read(self.output_fd, READ_CHUNK_BYTES)
            except BlockingIOError:
                return True
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                data = b""
            if not data:
                self._close_output()
                return False
            self.tail.feed(data)

    def on_exit(self) -> None:
        """The process exited: reap it, kill what is left of its group, drain the pipe.

        Whatever the command left running in its process group is killed (like systemd's
        KillMode=control-group), so an attempt leaves no stray process behind.
        """
        self.returncode = self.proc.wait()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        kill_group(self.pid, signal.SIGKILL)
        # what is already in the pipe is kept; a process outside the group that still
        # holds the pipe open does not keep the attempt alive
        self.on_output()
        self._close_output()

    def _close_output(self) -> None:
        if self.output_fd is not None:
            assert self.proc.stdout is not None
            with contextlib.suppress(OSError):
                self.proc.stdout.close()
            self.output_fd = None

    @property
    def finished(self) -> bool:
        return self.returncode is not None and self.output_fd is None

    # -- control

    def stop(self, reason: StopReason, now_monotonic: float, grace_seconds: float) -> None:
        """SIGTERM the whole group now and SIGKILL it ``grace_seconds`` later."""
        if self.stop_reason is None:
            self.stop_reason = reason
        kill_group(self.pid, signal.SIGTERM)
        kill_at = now_monotonic + grace_seconds
        self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)

    def kill_now(self, reason: StopReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        kill_group(self.pid, signal.SIGKILL)
        self.kill_at = None

    def tick(self, now_monotonic: float) -> None:
        """Act on the timeout and the SIGKILL follow-up when their time has come."""
        if self.returncode is not None:
            return
        if (
            self.deadline is not None
            and now_monotonic >= self.deadline
            and self.stop_reason is None
        ):
            self.stop(StopReason.TIMEOUT, now_monotonic, KILL_GRACE_SECONDS)
        if self.kill_at is not None and now_monotonic >= self.kill_at:
            kill_group(self.pid, signal.SIGKILL)
            self.kill_at = None

    def next_deadline(self) -> float | None:
        """The next monotonic time :meth:`tick` has something to do, or None."""
        if self.returncode is not None:
            return None
        times = [t for t in (self.kill_at,) if t is not None]
        if self.deadline is not None and self.stop_reason is None:
            times.append(self.deadline)
        return min(times) if times else None

    def result(self) -> AttemptResult:
        rc = self.returncode
        assert rc is not None
        return AttemptResult(
            exit_code=rc if rc >= 0 else None,
            signal=-rc if rc < 0 else None,
            stop_reason=self.stop_reason,
            output=self.tail.value(),
            output_bytes=self.tail.total,
        )


class Hook:
    """A started ``--on-failure`` command: watch ``pidfd``, then :meth:`wait`."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pidfd = os.pidfd_open(proc.pid)

    def wait(self) -> int:
        status = self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self.pidfd)
        return status


def spawn_hook(
    command: str, shell: str, env: dict[str, str], stdin: bytes, cwd: str | None
) -> Hook | None:
    """Start an ``--on-failure`` command with ``stdin`` as its input (fire and forget;
    the caller reaps it). Returns None if it cannot start."""
    stdin_file = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
    try:
        stdin_file.write(stdin)
        stdin_file.seek(0)
        return Hook(subprocess.Popen(
            [shell, "-c", command],
            stdin=stdin_file,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=cwd or env.get("HOME") or "/",
            env=env,
            start_new_session=True,
            close_fds=True,
        ))
    except OSError:
        return None
    finally:
        stdin_file.close()
