"""The spawner: a small process that starts the daemon's attempts, so that what the kernel
counts of an attempt is the attempt's own.

Linux charges a new process with the resident set of the process it was made from: at
its exec, the peak memory of the address space it leaves is taken into its ``maxrss``,
whether it was made by ``fork``, ``vfork`` or ``posix_spawn`` (a ``vfork`` child leaves
its parent's). An attempt spawned by the daemon would record the daemon's peak (tens of
MiB, growing with it) as its own ``max_rss``. So attempts are made by a process that is
small when it forks: this one, a fresh interpreter (``python -I -S spawner.py``, a few
MiB, importing nothing of jobctl) that the daemon starts once.

It makes each attempt with ``clone(CLONE_PARENT)``: a copy of itself whose parent is
the daemon, not the spawner. So the daemon watches, signals and reaps its attempts as
before (a pidfd, ``killpg`` before the reap, ``wait4`` with its rusage); the spawner
only forks and execs, and a fork of a small process is what the attempt is charged
with (a few MiB, below what ``true`` or a shell needs of its own).

The daemon sends one message per attempt on a ``SOCK_SEQPACKET`` socket: the program,
argv, environment, working directory, niceness and I/O priority, with the descriptors
for stdin and for the output (``SCM_RIGHTS``). The child puts them on 0, 1 and 2, starts
a new session, sets the signals back to their defaults with an empty mask, sets its
niceness and I/O priority (a process's own, now: no helper thread), goes to the working
directory and execs. The spawner answers ``pid`` and, when a step failed before the
exec took, that step and its errno (the child then exits 127 and the daemon reaps it).

Where the spawner cannot run (no ``clone`` number known for the machine, or it cannot
start), the daemon spawns attempts itself and their ``max_rss`` is not told (null).

This module is both the spawner's program (:func:`main`) and the daemon's side of it
(:class:`Spawner`).
"""

from __future__ import annotations

# the spawner's program imports only these (built-in modules: a few pages each); the
# daemon's side imports what it needs inside its methods
import _signal  # type: ignore[import-not-found]  # (signal itself imports enum)
import _socket
import mmap
import os
import sys

if __name__ != "__main__":  # the daemon's side
    import socket
    from collections.abc import Mapping, Sequence

#: clone(2) and ioprio_set(2) numbers (Python's os module has neither)
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "arm64": 220}.get(os.uname().machine)
SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "arm64": 30}.get(os.uname().machine)
CLONE_PARENT = 0x00008000
#: the spawner is suspended until the clone has exec'd or exited (no pipe to wait on)
CLONE_VFORK = 0x00004000
#: the largest request: an environment and a command line (what one exec takes on Linux
#: is far less)
MAX_MESSAGE_BYTES = 4 << 20
#: what the child exits with when a step before the exec failed
SPAWN_FAILED_EXIT = 127
#: set back to their default when the spawner starts (as worker.DEFAULT_SIGNALS): a child
#: keeps what its parent ignores
RESET_SIGNALS = (
    _signal.SIGINT,
    _signal.SIGTERM,
    _signal.SIGHUP,
    _signal.SIGQUIT,
    _signal.SIGPIPE,
    _signal.SIGXFSZ,
    _signal.SIGXCPU,
    _signal.SIGCHLD,
    _signal.SIGUSR1,
    _signal.SIGUSR2,
    _signal.SIGALRM,
)
_NO_FD = -1
_NO_NICE = -(2**31)
#: the steps of a spawn, as the answer names the one that failed
STEPS = ("fork", "stdio", "session", "ioprio", "nice", "chdir", "exec")


#: an answer: pid, the step that failed (-1: none), its errno
_ANSWER_BYTES = 12
#: what a failed clone leaves in the shared page: the step and its errno
_REPORT_BYTES = 8


def _ints(data: bytes, n: int) -> list[int]:
    """``n`` native signed 32-bit integers from the start of ``data``."""
    return [int.from_bytes(data[4 * i : 4 * i + 4], sys.byteorder, signed=True) for i in range(n)]


def _pack(*values: int) -> bytes:
    return b"".join(v.to_bytes(4, sys.byteorder, signed=True) for v in values)


#: the shared page before a clone: no step failed
_NOT_REPORTED = _pack(-1, 0)


# ---------------------------------------------------------------------- the spawner


def _child(
    path: bytes,
    argv: list[bytes],
    env: dict[bytes, bytes],
    nice: int,
    ioprio: int,
    report: mmap.mmap,
) -> None:
    """In the clone, whose descriptors 0, 1, 2 and working directory the spawner set
    before it: a new session, the niceness and I/O priority asked for, and the exec. On a
    failure it writes the step and errno to ``report`` (shared with the spawner) and
    exits. As little Python as can be: each page it writes is copied, and counts in the
    attempt's peak memory and CPU. Never returns."""
    step = 2
    try:
        os.setsid()
        step = 3
        if ioprio >= 0:
            _ioprio_set(ioprio)
        step = 4
        if nice != _NO_NICE:
            # a niceness below the daemon's own is not ours to give: the daemon's is kept
            try:
                os.setpriority(os.PRIO_PROCESS, 0, nice)
            except PermissionError:
                pass
        step = 6
        os.execve(path, argv, env)
    except OSError as e:
        err = e.errno or 0
    except BaseException:
        err = 0
    try:
        report[:_REPORT_BYTES] = _pack(step, err)
    finally:
        os._exit(SPAWN_FAILED_EXIT)


def _libc() -> object:
    import ctypes

    # PyDLL: the GIL stays held across the call; the clone is a copy of the one thread,
    # which holds it, as after os.fork
    libc = ctypes.PyDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _ioprio_set(value: int) -> None:
    import ctypes

    if SYS_IOPRIO_SET is None:
        raise OSError(38, "ioprio_set is not known on this machine")  # ENOSYS
    if ctypes.CDLL(None, use_errno=True).syscall(SYS_IOPRIO_SET, 1, 0, value) != 0:
        raise OSError(ctypes.get_errno(), "ioprio_set")  # (1: IOPRIO_WHO_PROCESS, itself)


def _clone_parent(libc: object) -> int:
    """``clone(CLONE_PARENT | CLONE_VFORK | SIGCHLD)``: 0 in the child, its pid in the
    caller once the child has exec'd or exited."""
    import ctypes

    flags = CLONE_PARENT | CLONE_VFORK | _signal.SIGCHLD
    pid = int(libc.syscall(SYS_CLONE, flags, 0, 0, 0, 0))  # type: ignore[attr-defined]
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return pid


def _serve_one(
    sock: _socket.socket, libc: object, report: mmap.mmap, data: bytes, fds: list[int]
) -> None:
    """One request: the child's descriptors and directory are set here, in the spawner
    (what a fork copies), so the clone itself runs almost nothing before its exec. The
    clone is made with ``CLONE_VFORK``: the spawner goes on once it has exec'd or exited,
    and ``report`` (a shared page) then holds the step that failed, if one did."""
    nice, ioprio, which, nfields = _ints(data, 4)
    fields = data[16:].split(b"\0")[:nfields]
    path, cwd, argc = fields[0], fields[1], int(fields[2])
    argv = fields[3 : 3 + argc]
    env = dict(item.partition(b"=")[::2] for item in fields[3 + argc :])
    given = iter(fds)  # stdin's, then the output's, each when the daemon sent one
    in_fd, out_fd = (next(given, _NO_FD) if which >> bit & 1 else _NO_FD for bit in (0, 1))
    try:
        step = 1
        os.dup2(_devnull(os.O_RDONLY) if in_fd == _NO_FD else in_fd, 0)
        out = _devnull(os.O_WRONLY) if out_fd == _NO_FD else out_fd
        os.dup2(out, 1)
        os.dup2(out, 2)
        step = 5
        os.chdir(cwd)
        step = 0
        report[:_REPORT_BYTES] = _NOT_REPORTED
        pid = _clone_parent(libc)
    except OSError as e:
        sock.send(_pack(0, step, e.errno or 0))
        pid = -1
    if pid == 0:  # (the descriptors received are closed by the exec: close-on-exec)
        _child(path, argv, env, nice, ioprio, report)
    for fd in fds:
        os.close(fd)
    # the child's copies are its own: the spawner holds none of its pipes (an output
    # pipe held here would never end)
    os.dup2(_devnull(os.O_RDONLY), 0)
    os.dup2(_devnull(os.O_WRONLY), 1)
    os.dup2(_devnull(os.O_WRONLY), 2)
    if pid > 0:
        step, err = _ints(report[:_REPORT_BYTES], 2)
        sock.send(_pack(pid, step, err))


_DEVNULL: dict[int, int] = {}


def _devnull(flags: int) -> int:
    """``/dev/null`` opened once per mode (close-on-exec: a dup2 copy is not)."""
    fd = _DEVNULL.get(flags)
    if fd is None:
        fd = _DEVNULL[flags] = os.open(os.devnull, flags | os.O_CLOEXEC)
    return fd


def _received_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += _ints(data, len(data) // 4)
    return fds


def main(fd: int = 0) -> int:
    """The spawner process: serve the daemon's requests until its socket ends.

    Its signals keep their default dispositions (what Python ignores is set back), so
    the clone needs no signal work: it is in a process group of its own (a terminal's
    Ctrl-C is not for it), and a stop that ends it ends no attempt (the daemon spawns
    none while it stops, and starts another spawner when it needs one)."""
    for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(sig, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())  # and the clones' mask is empty
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, os.dup(fd))
    # 0, 1 and 2 stay taken (the next child's, set before each clone), so a descriptor
    # received is never one of them
    os.dup2(_devnull(os.O_RDONLY), fd)
    libc = _libc()
    # where a clone that failed says so: shared (an anonymous MAP_SHARED page), as the
    # clone's memory is otherwise a copy
    report = mmap.mmap(-1, mmap.PAGESIZE)
    # the requests' buffer, once: mapped, not touched (what arrives is what counts), so
    # it costs no page, and no map and unmap a request as a new buffer each time would
    buf = mmap.mmap(-1, MAX_MESSAGE_BYTES, mmap.MAP_PRIVATE)
    while True:
        try:
            n, ancdata, _, _ = sock.recvmsg_into(
                [buf], _socket.CMSG_SPACE(8), _socket.MSG_CMSG_CLOEXEC
            )
        except InterruptedError:
            continue
        except OSError:
            return 0
        if not n:
            return 0
        _serve_one(sock, libc, report, buf[:n], _received_fds(ancdata))


# ---------------------------------------------------------------------- the daemon's side


class SpawnError(OSError):
    """A step before the exec failed: ``step`` names it (see :data:`STEPS`)."""

    def __init__(self, err: int, step: str) -> None:
        super().__init__(err, os.strerror(err) if err else "failed")
        self.step = step


class Spawner:
    """The daemon's side: start the spawner once, then :meth:`spawn` through it.

    :attr:`available` is False when it cannot run (the daemon then spawns itself). A
    spawner that died is started again at the next spawn (once; if that fails too, the
    daemon spawns itself from then on)."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._sock: socket.socket | None = None
        self.available = SYS_CLONE is not None and sys.platform == "linux"
        self.failure: str | None = None if self.available else "clone is not known here"

    def start(self) -> bool:
        if not self.available:
            return False
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                {},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, theirs.fileno(), 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                ],
                setpgroup=0,
                setsigmask=(),
                setsigdef=RESET_SIGNALS,
            )
        except OSError as e:
            mine.close()
            self._give_up(f"cannot start the spawner: {e}")
            return False
        finally:
            theirs.close()
        self.pid, self._sock = pid, mine
        return True

    def _give_up(self, why: str) -> None:
        self.available = False
        self.failure = why

    def spawn(
        self,
        path: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        stdin_fd: int | None,
        output_fd: int | None,
        nice: int | None,
        ioprio: int | None,
    ) -> int:
        """Start ``argv`` (``path`` resolved) as the daemon's child through the spawner;
        its pid. SpawnError names the step that failed (the failed child is reaped
        here); ConnectionError when the spawner is gone and cannot be had again (the
        caller spawns itself)."""
        fields = [path.encode(), cwd.encode(), b"%d" % len(argv)]
        fields += [a.encode() for a in argv]
        fields += [f"{k}={v}".encode() for k, v in env.items()]
        fds = [fd for fd in (stdin_fd, output_fd) if fd is not None]
        which = (stdin_fd is not None) | (output_fd is not None) << 1
        head = _pack(
            _NO_NICE if nice is None else nice,
            -1 if ioprio is None else ioprio,
            which,
            len(fields),
        )
        message = head + b"\0".join(fields)
        answer = self._ask(message, fds) or self._ask(message, fds)  # a new one, once
        if answer is None:
            self._give_up("the spawner stopped answering")
            raise ConnectionError(self.failure)
        pid, step, err = _ints(answer, 3)
        if pid == 0:  # nothing was started
            raise SpawnError(err, STEPS[step])
        if step >= 0:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            raise SpawnError(err, STEPS[step])
        return int(pid)

    def _ask(self, message: bytes, fds: list[int]) -> bytes | None:
        """Send one request and read its answer; None (the spawner reaped) when it is
        gone. A spawner is started first when there is none."""
        if self._sock is None and not self.start():
            return None
        assert self._sock is not None
        try:
            socket.send_fds(self._sock, [message], fds)
            answer = self._sock.recv(_ANSWER_BYTES)
        except OSError:
            answer = b""
        if len(answer) == _ANSWER_BYTES:
            return answer
        self._lost()
        return None

    def _lost(self) -> None:
        """The spawner is gone: reap it; the next spawn starts another."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.pid is not None:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None

    def stop(self) -> None:
        """Close the socket (the spawner exits at its end) and reap it."""
        self._lost()


if __name__ == "__main__":
    sys.exit(main())
