"""One attempt as a child process: its own session, its environment, its output tail.

The daemon owns the event loop; a :class:`Child` only exposes file descriptors to wait
on (the output pipe and a pidfd) and methods to call when they are ready. Children are
handled whole: each runs in a new session (so its process group is its pid), every
signal goes to the whole group, and every child is reaped after its group is killed.

Children are started with ``os.posix_spawn`` (a ``vfork``-style clone in glibc: no copy
of the daemon's page tables, no Python between fork and exec). What ``subprocess.Popen``
did in the child is done by spawn attributes and file actions instead:

- ``setsid=True``: a new session, so the process group id is the pid;
- ``setsigdef``: the signals Popen restores (``SIGPIPE``, ``SIGXFSZ``, ignored by Python)
  and those a daemon handles are back to their default; the signal mask is emptied
  (glibc leaves its two reserved real-time signals, 32 and 33, ignored across the exec;
  Python does not let a caller name them, and glibc programs reset them at start);
- ``dup2`` file actions put stdin, and the write end of one pipe for merged
  stdout+stderr, on 0, 1 and 2. Every other descriptor is close-on-exec: Python creates
  them so (PEP 446), and :func:`mark_inherited_fds_cloexec` marks those the daemon
  inherited, once at start-up;
- the working directory: ``posix_spawn`` has no cwd parameter in Python 3.11, so the
  spawn runs between an ``os.chdir`` to the child's directory and an ``os.fchdir`` back
  (the daemon is one thread; an exec wrapper would cost a second exec per child). The
  chdir is also the check that the directory exists, and its error names it.

Limits (README, Run policies and what a run costs) reach every process of an attempt before it runs
anything, at no cost to attempts without them:

- ``--memory-max``, ``--cpu-max``, ``--files-max`` are resource limits the shell sets on
  itself first: the command is run as ``ulimit …; COMMAND`` (builtins of every POSIX
  shell), so they hold before its first line and every process it starts inherits them.
  They cannot be set by the daemon around the spawn (glibc's spawn maps the child's stack
  in the daemon, which a lowered address-space limit refuses; a CPU limit lower than the
  daemon's own CPU time would signal the daemon), nor by ``prlimit`` on the new pid (the
  command may already run). The hard limit is set too (so the command cannot raise its
  own), a second above the soft one for the CPU, so the kernel's first word is
  ``SIGXCPU`` (error ``cpu limit``).
- ``--nice`` and ``--io-class`` belong to a thread on Linux and a spawned process takes
  those of the thread that spawns it: such a child is spawned by a helper thread that set
  its own once (one thread a combination, made on first use), while the daemon's thread
  waits.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import queue
import resource
import select
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from . import triggers
from .clock import iso
from .models import (
    NO_LIMITS,
    OUTPUT_LIMIT_BYTES,
    IoClass,
    Limits,
    Run,
    RunReason,
    RunSettings,
    StopReason,
)
from .outcomes import AttemptResult
from .reaper import kill_group
from .spawner import SPAWN_FAILED_EXIT, Request, Spawner, SpawnError, exec_failure

#: on ``--timeout``: SIGTERM first, SIGKILL this long after (README, Choices where the
#: contract is silent)
KILL_GRACE_SECONDS = 5.0
#: a cancel is acted on within 2 s: SIGTERM, then SIGKILL this long after
CANCEL_GRACE_SECONDS = 1.0
READ_CHUNK_BYTES = 65536
#: reads per readiness event: a child that writes without end cannot hold the loop
MAX_READS_PER_EVENT = 16
#: back to the default disposition in the child: what Popen restores (Python ignores
#: SIGPIPE and SIGXFSZ) and what a daemon may catch or ignore itself
DEFAULT_SIGNALS: tuple[int, ...] = tuple(
    int(s)
    for s in (
        signal.SIGPIPE,
        signal.SIGXFSZ,
        signal.SIGXCPU,
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGCHLD,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGALRM,
    )
)
#: what a new pipe holds on Linux; larger ``--stdin`` text asks for a larger pipe
PIPE_DEFAULT_BYTES = 65536


#: the exit status a shell gives when its ``ulimit`` line fails
LIMITS_FAILED_EXIT = 125


def limits_prefix(limits: Limits) -> str:
    """The line a POSIX shell runs before the command to set ``limits``' resource limits
    (soft, then hard), or ``''`` when none is set. A limit above what the daemon may
    give (its own hard limit) is given as that hard limit."""
    parts = []
    for flag, value, extra in (
        ("-v", None if limits.memory_max is None else limits.memory_max // 1024, 0),
        ("-t", None if limits.cpu_max_seconds is None else int(limits.cpu_max_seconds), 1),
        ("-n", limits.files_max, 0),
    ):
        if value is None:
            continue
        value = min(value, _hard_limit(flag))
        parts.append(f"ulimit -S {flag} {value}")
        parts.append(f"ulimit -H {flag} {min(value + extra, _hard_limit(flag))}")
    if not parts:
        return ""
    return " && ".join(parts) + f" || exit {LIMITS_FAILED_EXIT}\n"


_RLIMITS = {"-v": resource.RLIMIT_AS, "-t": resource.RLIMIT_CPU, "-n": resource.RLIMIT_NOFILE}
#: a ``ulimit`` value's unit in the resource's own (KiB for ``-v``)
_ULIMIT_UNIT = {"-v": 1024, "-t": 1, "-n": 1}


def _hard_limit(flag: str) -> int:
    hard = resource.getrlimit(_RLIMITS[flag])[1]
    return 2**62 if hard == resource.RLIM_INFINITY else hard // _ULIMIT_UNIT[flag]


def cpu_limit_hit(limits: Limits, rc: int, rusage: Any) -> bool:
    """Whether the kernel stopped an attempt for ``--cpu-max``: its main process (or the
    process it waited for, as a shell reports it: 128 + the signal) ended by ``SIGXCPU``,
    or by ``SIGKILL`` with at least the limit's CPU time used (the hard limit)."""
    if limits.cpu_max_seconds is None:
        return False
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else None
    if sig == signal.SIGXCPU:
        return True
    used = 0.0 if rusage is None else rusage.ru_utime + rusage.ru_stime
    return sig == signal.SIGKILL and used >= limits.cpu_max_seconds


# ioprio_set(2): no wrapper in Python's os module
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "arm64": 30}.get(os.uname().machine)
_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_SHIFT = 13
_IOPRIO = {IoClass.BEST_EFFORT: (2 << _IOPRIO_CLASS_SHIFT) | 4, IoClass.IDLE: 3 << 13}


def _set_thread_io_class(io_class: IoClass) -> None:
    """The calling thread's I/O scheduling class (``ioprio_set`` on thread id 0)."""
    import ctypes

    if _SYS_IOPRIO_SET is None:
        raise OSError(errno.ENOSYS, "--io-class: ioprio_set is not known on this machine")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_IOPRIO_SET, _IOPRIO_WHO_PROCESS, 0, _IOPRIO[io_class]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"--io-class {io_class.value}: {os.strerror(err)}")


class _Spawner:
    """A thread whose niceness and I/O class are those of the attempts it spawns (both are
    a thread's on Linux, and a spawned process starts with its spawning thread's). The
    daemon's thread hands it a call and waits for its answer: one spawn at a time."""

    def __init__(self, nice: int | None, io_class: IoClass | None) -> None:
        self._calls: queue.SimpleQueue[Callable[[], int]] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[int, BaseException | None]] = queue.SimpleQueue()
        self.error: OSError | None = None
        ready = threading.Event()

        def main() -> None:
            try:
                if nice is not None:
                    # on Linux PRIO_PROCESS with 0 is the calling thread; a niceness below
                    # the daemon's own is not ours to give: the daemon's is kept
                    with contextlib.suppress(PermissionError):
                        os.setpriority(os.PRIO_PROCESS, 0, nice)
                if io_class is not None:
                    _set_thread_io_class(io_class)
            except OSError as e:
                self.error = e
            ready.set()
            while True:
                call = self._calls.get()
                try:
                    self._answers.put((call(), None))
                except BaseException as e:  # handed to the caller, raised there
                    self._answers.put((0, e))

        threading.Thread(target=main, name=f"jobctl-spawn-{nice}-{io_class}", daemon=True).start()
        ready.wait()

    def call(self, fn: Callable[[], int]) -> int:
        if self.error is not None:
            raise self.error
        self._calls.put(fn)
        pid, error = self._answers.get()
        if error is not None:
            raise error
        return pid


_SPAWNERS: dict[tuple[int | None, IoClass | None], _Spawner] = {}


def _spawner(limits: Limits) -> _Spawner | None:
    """The helper thread for ``limits``' niceness and I/O class, None when neither is set."""
    if limits.nice is None and limits.io_class is None:
        return None
    key = (limits.nice, limits.io_class)
    spawner = _SPAWNERS.get(key)
    if spawner is None:
        spawner = _SPAWNERS[key] = _Spawner(*key)
    return spawner


#: the variables an attempt has only when its run has them: taken out of the daemon's
RUN_ONLY_VARS = ("JOBCTL_CATCHUP_FROM", "JOBCTL_TRIGGER", "JOBCTL_RUN_KEY")


def _run_vars(
    run: Run,
    settings: RunSettings,
    attempt: int,
    file_env: Mapping[str, str] | None,
    secret_env: Mapping[str, str] | None,
) -> dict[str, str]:
    """What an attempt's environment sets over the daemon's, in order (see build_env)."""
    env: dict[str, str] = {}
    if file_env:
        env.update(file_env)
    env.update(settings.env)
    env.update(run.env)
    if secret_env:
        env.update(secret_env)
    env["JOBCTL_JOB"] = run.job_name
    env["JOBCTL_RUN_ID"] = str(run.id)
    env["JOBCTL_ATTEMPT"] = str(attempt)
    env["JOBCTL_SCHEDULED_FOR"] = iso(run.scheduled_for) or ""
    if run.catchup_from is not None:
        env["JOBCTL_CATCHUP_FROM"] = iso(run.catchup_from) or ""
    else:
        env.pop("JOBCTL_CATCHUP_FROM", None)
    made_by = None
    if run.reason not in (RunReason.MANUAL, RunReason.AFTER):
        made_by = triggers.named_by(settings.trigger, run.scheduled_for)
    if made_by is not None:
        env["JOBCTL_TRIGGER"] = made_by
    else:
        env.pop("JOBCTL_TRIGGER", None)
    if run.run_key is not None:
        env["JOBCTL_RUN_KEY"] = run.run_key
    else:
        env.pop("JOBCTL_RUN_KEY", None)
    return env


def build_env(
    base: Mapping[str, str],
    run: Run,
    settings: RunSettings,
    attempt: int,
    *,
    file_env: Mapping[str, str] | None = None,
    secret_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The child's environment (jobctl(1), ENVIRONMENT): the daemon's, then the job's
    ``--env-file`` (``file_env``), then its ``--env``, then the run's payload, then its
    ``--secret`` values (``secret_env``), then the ``JOBCTL_*`` variables."""
    return _whole(base, _run_vars(run, settings, attempt, file_env, secret_env))


def _whole(base: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The daemon's variables but those only a run may have, then the attempt's over them."""
    env = {k: v for k, v in base.items() if k not in RUN_ONLY_VARS}
    env.update(extra)
    return env


class BaseEnv:
    """The daemon's environment as the base of its attempts': its variables, and their
    text as a spawn request carries it (``NAME=value``, NUL between), encoded once."""

    __slots__ = ("data", "shared", "vars")

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.vars = dict(environ)
        self.data = "\0".join(map("=".join, self.vars.items())).encode("utf-8", "surrogateescape")
        #: an attempt's environment can be this and its own variables: none of the
        #: daemon's is one an attempt may not have, and none holds a NUL (the request's
        #: separator; the OS's own calls refuse one)
        self.shared = not any(k in self.vars for k in RUN_ONLY_VARS) and (
            self.data.count(b"\0") == max(len(self.vars) - 1, 0)
        )


class AttemptEnv(Mapping[str, str]):
    """An attempt's environment: ``base``'s variables and its own (``extra``), no name in
    both (see :func:`attempt_env`)."""

    __slots__ = ("base", "extra")

    def __init__(self, base: BaseEnv, extra: dict[str, str]) -> None:
        self.base = base
        self.extra = extra

    def __getitem__(self, key: str) -> str:
        value = self.extra.get(key)
        return self.base.vars[key] if value is None else value

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self.extra, self.base.vars)

    def __len__(self) -> int:
        return len(self.extra) + len(self.base.vars)


def attempt_env(
    base: BaseEnv,
    run: Run,
    settings: RunSettings,
    attempt: int,
    *,
    file_env: Mapping[str, str] | None = None,
    secret_env: Mapping[str, str] | None = None,
) -> Mapping[str, str]:
    """:func:`build_env` over ``base``: an :class:`AttemptEnv` when no variable of the
    attempt's is one of the daemon's (a spawn request then sends the daemon's as it was
    encoded once), else the whole environment as a dict."""
    extra = _run_vars(run, settings, attempt, file_env, secret_env)
    if base.shared and base.vars.keys().isdisjoint(extra):
        return AttemptEnv(base, extra)
    return _whole(base.vars, extra)


def mark_inherited_fds_cloexec(keep: Sequence[int] = (0, 1, 2)) -> list[int]:
    """Mark every open descriptor but ``keep`` close-on-exec; return those changed.

    Call once at start-up, before the first spawn: descriptors the daemon inherited (from
    a shell, a service manager, a C library) would otherwise reach every child. The ones
    Python opens later are close-on-exec already.
    """
    changed = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd in keep:
            continue
        try:
            if os.get_inheritable(fd):
                os.set_inheritable(fd, False)
                changed.append(fd)
        except OSError:  # the descriptor listdir itself used, closed by now
            continue
    return changed


def _high_fd(fd: int) -> int:
    """``fd`` moved to 3 or above (close-on-exec), so the dup2 onto 0/1/2 cannot clobber
    one another when the daemon runs with a standard descriptor closed."""
    if fd >= 3:
        return fd
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return new


def _stdin_fd(data: bytes) -> int:
    """A close-on-exec descriptor to read ``data`` from, with no file on disk.

    A pipe filled before the spawn when the text fits in it (growing the pipe up to the
    system's limit if need be); else an anonymous memory file (``memfd_create``), else a
    temporary file. The caller closes it once the child holds its copy.
    """
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        if len(data) > PIPE_DEFAULT_BYTES:
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, len(data))
        os.set_blocking(w, False)
        view = memoryview(data)
        while view:
            view = view[os.write(w, view) :]
    except OSError:  # too large for a pipe (EPERM, EINVAL) or it filled (EAGAIN)
        os.close(r)
        os.close(w)
        return _file_with(data)
    os.close(w)
    return _high_fd(r)


def _file_with(data: bytes) -> int:
    try:
        fd = os.memfd_create("jobctl-stdin", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        with tempfile.TemporaryFile() as f:  # closed here; the descriptor is a dup
            fd = os.dup(f.fileno())
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return _high_fd(fd)


def _not_found(path: str, err: int) -> OSError:
    """An OSError whose ``strerror`` names the path: ``/no/such/dir: No such file or
    directory`` (the daemon records ``spawn: `` + strerror)."""
    return OSError(err, f"{path}: {os.strerror(err)}")


def _resolve_shell(shell: str, env: Mapping[str, str]) -> str:
    """The shell as a path: a bare name is looked up in the child's PATH, as Popen does
    (OSError naming it when it is not found); a path is taken as it is (the spawn's own
    error names it when it is missing or not executable)."""
    if "/" in shell:
        return shell  # the exec itself says when it is missing or not executable
    for d in env.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(d or ".", shell)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    raise _not_found(shell, errno.ENOENT)


def _spawn_failure(e: SpawnError, path: str, cwd: str, limits: Limits) -> OSError:
    """A step of a spawn through the spawner that failed, as :func:`spawn` says it."""
    err = e.errno or errno.ENOEXEC
    if e.step == "chdir":
        return _not_found(cwd, err)
    if e.step == "exec":
        return _not_found(path, err)
    if e.step == "ioprio" and limits.io_class is not None:
        return OSError(err, f"--io-class {limits.io_class.value}: {os.strerror(err)}")
    return OSError(err, f"{e.step}: {os.strerror(err)}")


def start_error(e: OSError) -> str:
    """An attempt's error when its command could not be started (``spawn: …``)."""
    error = f"spawn: {e.strerror or e}" if not str(e).startswith("spawn:") else str(e)
    if e.filename and e.filename not in error:
        error = f"spawn: {e.filename}: {e.strerror or e}"
    return error


def own_peak_rss_bytes() -> int | None:
    """This process's peak resident set (``VmHWM``), None where it cannot be read."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    stdin: bytes | None,
    output_fd: int | None,
    limits: Limits = NO_LIMITS,
) -> int:
    """Start ``argv`` in a new session with exactly ``env``, in directory ``cwd``, at
    ``limits``' niceness and I/O class (their resource limits are the shell's to set: see
    :func:`limits_prefix`).

    stdin reads ``stdin`` (``/dev/null`` when None); stdout and stderr both go to
    ``output_fd`` (``/dev/null`` when None). The child gets descriptors 0, 1 and 2 only
    (given every other one is close-on-exec). ``argv[0]`` is resolved like Popen does.
    Returns the pid. Raises OSError whose ``strerror`` names the directory or the program
    when either is missing or unusable.

    ``posix_spawn`` returns once the child's exec has replaced its memory, which can be
    before that exec has closed the child's copies of our close-on-exec descriptors. So
    for an instant a descriptor we close may live on in the child: a caller that watches
    descriptors in ``epoll`` takes each one out before closing it (see ``Child``), or the
    copy keeps the registration alive and a new descriptor given the same number is
    reported with the old one's readiness.
    """
    path = _resolve_shell(argv[0], env)
    actions: list[tuple[Any, ...]] = []
    in_fd = None
    try:
        if stdin is None:
            actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
        else:
            in_fd = _stdin_fd(stdin)
            actions.append((os.POSIX_SPAWN_DUP2, in_fd, 0))
        if output_fd is None:
            actions.append((os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0))
            actions.append((os.POSIX_SPAWN_DUP2, 1, 2))
        else:
            actions.append((os.POSIX_SPAWN_DUP2, output_fd, 1))
            actions.append((os.POSIX_SPAWN_DUP2, output_fd, 2))
        back = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            try:
                os.chdir(cwd)
            except OSError as e:
                raise _not_found(cwd, e.errno or errno.ENOENT) from None
            args = list(argv)

            def start() -> int:
                return os.posix_spawn(
                    path,
                    args,
                    env,
                    file_actions=actions,
                    setsid=True,
                    setsigmask=(),
                    setsigdef=DEFAULT_SIGNALS,
                )

            spawner = _spawner(limits)
            try:
                return start() if spawner is None else spawner.call(start)
            except OSError as e:  # the exec failed: the directory was fine
                raise _not_found(path, e.errno or errno.ENOEXEC) from None
        finally:
            os.fchdir(back)
            os.close(back)
    finally:
        if in_fd is not None:
            os.close(in_fd)


def _default_cwd(cwd: str | None, env: Mapping[str, str]) -> str:
    return cwd or env.get("HOME") or "/"


def _exit_status(pid: int) -> int:
    """Reap ``pid``: its exit status, or minus the signal that ended it (like Popen)."""
    return _reap(pid)[0]


def _reap(pid: int) -> tuple[int, Any]:
    """Reap ``pid``: its exit status (minus the signal that ended it, like Popen) and the
    kernel's account of it and of the processes it waited for (``os.wait4``'s rusage;
    None when it was reaped elsewhere)."""
    while True:
        try:
            _, status, rusage = os.wait4(pid, 0)
        except ChildProcessError:  # reaped elsewhere: nothing more to learn
            return -signal.SIGKILL, None
        except InterruptedError:
            continue
        return os.waitstatus_to_exitcode(status), rusage


#: a secret's value shorter than this is not masked in output (README "Secrets"): three
#: letters would blot out every word they occur in
MIN_MASKED_BYTES = 4
MASK = b"***"


class OutputTail:
    """Keeps the last ``limit`` bytes written, and counts them all.

    ``total`` only grows, by every byte fed: a caller that stores the tail now and then
    keeps the ``total`` it stored and compares (``changed_since``) to know whether new
    output arrived since, at the cost of one integer comparison.

    ``masks`` are the values of the secrets given to the attempt: :meth:`value` has each
    occurrence (of a value of at least :data:`MIN_MASKED_BYTES`) replaced by ``***``, the
    longest first. The buffer keeps the longest value's length more than ``limit``, so a
    value cut by the tail's start is masked whole too; and an end of the output that may
    be the start of a value still to come is held back until it is known.
    """

    def __init__(self, limit: int = OUTPUT_LIMIT_BYTES, masks: Sequence[bytes] = ()) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.total = 0
        self.masks = tuple(
            sorted({m for m in masks if len(m) >= MIN_MASKED_BYTES}, key=len, reverse=True)
        )
        self.keep = limit + max((len(m) for m in self.masks), default=0)

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self.buf += data
        if len(self.buf) > 2 * self.keep:
            del self.buf[: len(self.buf) - self.keep]

    def value(self, *, final: bool = True) -> bytes:
        """The tail, masked; with ``final`` False (the output may go on) an end that is the
        start of a secret's value is left out."""
        if not self.masks:
            return bytes(self.buf[-self.limit :])
        data = bytes(self.buf)
        for m in self.masks:
            data = data.replace(m, MASK)
        if not final:
            data = data[: len(data) - _partial_mask(data, self.masks)]
        return data[-self.limit :]

    def changed_since(self, mark: int) -> bool:
        """Whether bytes arrived since ``total`` was ``mark``."""
        return self.total != mark


def _partial_mask(data: bytes, masks: Sequence[bytes]) -> int:
    """The length of the longest end of ``data`` that is a proper start of a mask."""
    best = 0
    for m in masks:
        for n in range(min(len(m) - 1, len(data)), best, -1):
            if data.endswith(m[:n]):
                best = n
                break
    return best


class Child:
    """A running command. Create with :meth:`start`; feed it readiness events.

    ``output_fd`` is readable when output arrives; ``pidfd`` when the process exited.
    The process is finished when :attr:`returncode` is set and the output is closed.
    ``on_close`` is called with each of the two descriptors just before the child closes
    it: the caller that watches them in ``epoll`` unregisters it there (see :func:`spawn`).
    ``on_reap`` is called with the pid just before the exited process is reaped (the
    daemon's keeper forgets its group then: see :mod:`jobctl.keeper`).
    """

    def __init__(
        self,
        pid: int,
        pidfd: int | None,
        output_fd: int,
        deadline: float | None,
        on_close: Callable[[int], None] | None = None,
        limits: Limits = NO_LIMITS,
        on_reap: Callable[[int], None] | None = None,
        masks: Sequence[bytes] = (),
        own_rss: bool = False,
    ) -> None:
        self.pid = pid
        #: spawned by a small process (the spawner): its max_rss is its own as counted
        self.own_rss = own_rss
        self.limits = limits
        self.rusage: Any = None
        self.on_close = on_close
        self.on_reap = on_reap
        self.pidfd: int | None = pidfd
        self.output_fd: int | None = output_fd
        os.set_blocking(output_fd, False)
        self.tail = OutputTail(masks=masks)
        self.returncode: int | None = None
        self.deadline = deadline  # monotonic seconds, for --timeout
        self.kill_at: float | None = None  # monotonic: SIGKILL the group then
        self.stop_reason: StopReason | None = None
        #: asked of the spawner and not answered yet (pid 0 until then: see request)
        self.request_: Request | None = None
        #: what the spawn needs until it is answered: the arguments of :func:`spawn`
        #: (to spawn here if the spawner is lost) and the descriptors the child gets
        self._spawn_args: tuple[Any, ...] | None = None
        self._keep: list[int] = []
        #: the shell's path, the working directory and the limits: what names a step
        #: that failed (see _spawn_failure)
        self._context: tuple[str, str, Limits] | None = None
        #: where a clone of the spawner reports a step that failed (read at the exit): its
        #: own pipe, or the spawner
        self.report_r: int | None = None
        self._spawner: Spawner | None = None
        #: why the command could not start, when that was learnt after the spawn
        self.spawn_error: str | None = None

    @classmethod
    def request(
        cls,
        settings: RunSettings,
        env: Mapping[str, str],
        now_monotonic: float,
        spawner: Spawner,
        on_close: Callable[[int], None] | None = None,
        on_reap: Callable[[int], None] | None = None,
        masks: Sequence[bytes] = (),
        report: bool = False,
    ) -> Child:
        """As :meth:`start` through ``spawner``, without waiting for it: the child is
        pending (pid 0, no pidfd; its output pipe is there) until :meth:`spawned` is
        given the spawner's answer. A step of the clone that failed is learnt at its
        exit, from the spawner (:meth:`Spawner.report`), or with ``report`` from a pipe of
        its own (what waiting for the exec needs). ConnectionError when no spawner can be
        had; OSError when the shell cannot be found."""
        r, w = os.pipe2(os.O_CLOEXEC)
        r, w = _high_fd(r), _high_fd(w)
        in_fd = None
        limits = settings.limits
        argv = [settings.shell, "-c", limits_prefix(limits) + settings.command]
        cwd = _default_cwd(settings.cwd, env)
        stdin = None if settings.stdin is None else settings.stdin.encode()
        try:
            path = _resolve_shell(argv[0], env)
            in_fd = None if stdin is None else _stdin_fd(stdin)
            ioprio = None if limits.io_class is None else _IOPRIO[limits.io_class]
            if isinstance(env, AttemptEnv):
                base = (env.base.data, len(env.base.vars))
                req = spawner.request(
                    path, argv, env.extra, cwd, in_fd, w, limits.nice, ioprio, base, report
                )
            else:
                req = spawner.request(
                    path, argv, env, cwd, in_fd, w, limits.nice, ioprio, report=report
                )
        except BaseException:
            for fd in (r, w, in_fd):
                if fd is not None:
                    os.close(fd)
            raise
        deadline = now_monotonic + settings.timeout_seconds if settings.timeout_seconds else None
        child = cls(0, None, r, deadline, on_close, limits, on_reap, masks, own_rss=True)
        child.request_, child.report_r = req, req.report_r
        child._spawner = None if report else spawner
        child._keep = [w] if in_fd is None else [w, in_fd]
        child._spawn_args = (argv, env, cwd, stdin, w, limits)
        child._context = (path, cwd, limits)
        return child

    def spawned(self, answer: int | SpawnError | None) -> OSError | None:
        """The spawner's answer to :meth:`request`: the pid (the child runs: its pidfd is
        opened, and a stop asked meanwhile is sent), the step that kept it from starting
        (returned, the output closed), or None: the spawner is lost, the child is
        spawned here (its max_rss then not told: see :meth:`_max_rss`)."""
        path_args, self._spawn_args = self._spawn_args, None
        self.request_ = None
        try:
            if answer is None:
                assert path_args is not None
                self.own_rss = False
                self._spawner = None  # (its exit code is the command's own)
                if self.report_r is not None:
                    os.close(self.report_r)
                    self.report_r = None
                try:
                    answer = spawn(*path_args)
                except OSError as e:
                    return self._not_started(e)
            elif isinstance(answer, SpawnError):
                assert self._context is not None
                self.report_r = None  # (closed by the spawner's side)
                return self._not_started(_spawn_failure(answer, *self._context))
        finally:
            for fd in self._keep:
                os.close(fd)
            self._keep = []
        self.pid = answer
        try:
            self.pidfd = os.pidfd_open(answer)
        except OSError as e:
            self._signal(signal.SIGKILL)
            _exit_status(answer)
            return self._not_started(e)
        if self.stop_reason is not None:  # stopped before it was known
            self._signal(signal.SIGKILL if self.kill_at is None else signal.SIGTERM)
        return None

    def _not_started(self, e: OSError) -> OSError:
        if self.report_r is not None:
            os.close(self.report_r)
            self.report_r = None
        self._close_output()
        return e

    def _signal(self, sig: int) -> None:
        """Signal the child's process group; the child alone while it has none yet (a
        clone of the spawner between its birth and its ``setsid``; not reaped yet, so its
        pid is still its own)."""
        if self.pid > 1 and not kill_group(self.pid, sig) and self.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)

    @classmethod
    def start(
        cls,
        settings: RunSettings,
        env: Mapping[str, str],
        now_monotonic: float,
        on_close: Callable[[int], None] | None = None,
        on_reap: Callable[[int], None] | None = None,
        masks: Sequence[bytes] = (),
        spawner: Spawner | None = None,
    ) -> Child:
        """Spawn ``shell -c command`` in a new session (see :func:`spawn`), through
        ``spawner`` when it is given and can be had (:meth:`request`, waited for);
        ``masks``, the values of the secrets it was given, are masked in its output tail.

        Raises OSError, its ``strerror`` naming the path, if it cannot start.
        """
        if spawner is not None and spawner.available:
            with contextlib.suppress(ConnectionError):  # then spawned here, below
                child = cls.request(
                    settings, env, now_monotonic, spawner, on_close, on_reap, masks, report=True
                )
                child._wait_spawned(spawner)
                return child
        r, w = os.pipe2(os.O_CLOEXEC)
        r, w = _high_fd(r), _high_fd(w)
        try:
            limits = settings.limits
            pid = spawn(
                [settings.shell, "-c", limits_prefix(limits) + settings.command],
                env,
                _default_cwd(settings.cwd, env),
                None if settings.stdin is None else settings.stdin.encode(),
                w,
                limits,
            )
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            kill_group(pid)
            _exit_status(pid)
            os.close(r)
            raise
        deadline = now_monotonic + settings.timeout_seconds if settings.timeout_seconds else None
        return cls(pid, pidfd, r, deadline, on_close, settings.limits, on_reap, masks)

    def _wait_spawned(self, spawner: Spawner) -> None:
        """Wait for the answer to :meth:`request` and for the exec (``Spawner.wait``, which
        reads the report pipe), then :meth:`spawned`; raise what kept it from starting."""
        req = self.request_
        assert req is not None
        answer: int | SpawnError | None
        try:
            answer = spawner.wait(req)
        except SpawnError as e:
            answer = e
        except ConnectionError:
            answer = None  # spawned here
        if answer is not None:
            self.report_r = None  # read and closed by the spawner's side
        failed = self.spawned(answer)
        if failed is not None:
            raise failed

    # -- events

    def on_output(self) -> bool:
        """Drain what is readable (at most ``MAX_READS_PER_EVENT`` reads: the loop is
        told again if more is there). Returns False at end of file (the fd is then
        closed)."""
        if self.output_fd is None:
            return False
        for _ in range(MAX_READS_PER_EVENT):
            try:
                data = os.read(self.output_fd, READ_CHUNK_BYTES)
            except BlockingIOError:
                return True
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                self._close_output()
                return False
            self.tail.feed(data)
        return True

    def on_exit(self) -> None:
        """The process exited: kill what is left of its group, reap it, drain the pipe.

        The group is killed first: until the exited process is reaped its pid (the
        group id) cannot be reused, so the signal cannot reach an unrelated group.
        Whatever the command left running in its group is killed (like systemd's
        KillMode=control-group), so an attempt leaves no stray process behind.
        """
        kill_group(self.pid, signal.SIGKILL)
        if self.on_reap is not None:
            self.on_reap(self.pid)  # the keeper lets the group go while its id is ours
        self.returncode, self.rusage = _reap(self.pid)
        if self.pidfd is not None:
            self._close(self.pidfd)
            self.pidfd = None
        failed = None
        if self.report_r is not None:  # a clone of the spawner: did its exec take?
            failed, self.report_r = exec_failure(self.report_r), None
        elif self._spawner is not None and self.returncode == SPAWN_FAILED_EXIT:
            failed = self._spawner.report(self.pid)  # (it reported before it exited)
        if failed is not None and self._context is not None:
            self.spawn_error = start_error(_spawn_failure(failed, *self._context))
        # what is already in the pipe is kept; a process outside the group that still
        # holds the pipe open does not keep the attempt alive
        self.on_output()
        self._close_output()

    def _close_output(self) -> None:
        if self.output_fd is not None:
            self._close(self.output_fd)
            self.output_fd = None

    def _close(self, fd: int) -> None:
        """Tell the watcher (which unregisters it, and may raise: nothing is hidden), then
        close ``fd``; the close's own error is moot (the descriptor is gone either way)."""
        if self.on_close is not None:
            self.on_close(fd)
        with contextlib.suppress(OSError):
            os.close(fd)

    @property
    def finished(self) -> bool:
        return self.returncode is not None and self.output_fd is None

    # -- control

    def stop(self, reason: StopReason, now_monotonic: float, grace_seconds: float) -> None:
        """SIGTERM the whole group now and SIGKILL it ``grace_seconds`` later. The first
        reason given is the one kept."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._signal(signal.SIGTERM)
        kill_at = now_monotonic + grace_seconds
        self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)

    def kill_now(self, reason: StopReason) -> None:
        """SIGKILL the whole group now. The first reason given is the one kept."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._signal(signal.SIGKILL)
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
            self._signal(signal.SIGKILL)
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
        """How the attempt ended; only once :attr:`finished`."""
        rc = self.returncode
        if rc is None:
            raise RuntimeError("the child has not been reaped yet")
        ru = self.rusage
        if self.spawn_error is not None:  # the clone's exec failed
            return AttemptResult(None, spawn_error=self.spawn_error)
        return AttemptResult(
            exit_code=rc if rc >= 0 else None,
            signal=-rc if rc < 0 else None,
            stop_reason=self.stop_reason,
            output=self.tail.value(),
            output_bytes=self.tail.total,
            cpu_user=None if ru is None else ru.ru_utime,
            cpu_system=None if ru is None else ru.ru_stime,
            # Linux counts ru_maxrss in KiB
            max_rss=self._max_rss(ru),
            limit_error="cpu limit" if cpu_limit_hit(self.limits, rc, ru) else None,
        )

    def _max_rss(self, ru: Any) -> int | None:
        """The attempt's peak resident set (README, what a run costs): the kernel's
        account (KiB on Linux) of its main process and those it waited for. A child this
        process spawned itself is charged with this process's peak at its exec: its
        count is the command's own only when above that peak (else unknown: None)."""
        if ru is None:
            return None
        rss = int(ru.ru_maxrss) * 1024
        if self.own_rss:
            return rss
        mine = own_peak_rss_bytes()
        return rss if mine is not None and rss > mine else None


class Hook:
    """An ``--on-failure`` command: fire and forget, but watched and reaped.

    The caller waits for ``pidfd`` to be readable, unregisters it and calls :meth:`wait`.
    """

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.returncode: int | None = None

    def wait(self) -> int:
        """Kill what is left of the hook's process group, reap the hook, close ``pidfd``.

        Returns the exit status, or minus the signal that ended it. Called before
        ``pidfd`` is readable, it first blocks until the hook exits. Idempotent.
        """
        if self.returncode is None:
            select.select([self.pidfd], [], [])
            kill_group(self.pid, signal.SIGKILL)  # before the reap: see Child.on_exit
            self.returncode = _exit_status(self.pid)
            os.close(self.pidfd)
        return self.returncode


def spawn_hook(
    command: str, shell: str, env: Mapping[str, str], stdin: bytes, cwd: str | None
) -> Hook | None:
    """Start an ``--on-failure`` command with ``stdin`` as its input and its output
    discarded, in its own session like an attempt (same :func:`spawn`). The caller
    watches ``Hook.pidfd`` and calls ``Hook.wait()``. Returns None if it cannot start."""
    try:
        pid = spawn([shell, "-c", command], env, _default_cwd(cwd, env), stdin, None)
    except OSError:
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        kill_group(pid)
        _exit_status(pid)
        return None
    return Hook(pid, pidfd)
