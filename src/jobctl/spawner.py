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
only forks and execs.

On x86-64 the clone is made by a few instructions of machine code (:data:`NATIVE_SPAWN`,
its source in :data:`NATIVE_SPAWN_SOURCE`) that issue the ``clone``, ``setsid``,
``ioprio_set``, ``setpriority`` and ``execve`` system calls themselves and touch no
memory but the request they are given: so every other mapping of the spawner (the
interpreter's heap, stack and libraries) is marked ``MADV_DONTFORK`` and the copy
holds nothing of it. The attempt is charged with its own memory alone (``true``: about
1 MiB), and the copy makes no page fault before its exec: the attempt costs what one
started by ``posix_spawn`` costs, and the spawner about 0.1 ms of its own (a clone's
fixed cost in the kernel, mostly). (The kernel writes a thread's restartable-sequence
area, in memory the copy no longer has, on its way back to user space: the spawner is
started with glibc's ``rseq`` registration off.) Where
that cannot be had (another machine, or memory that may not be made executable), the
clone returns into Python, which execs: the attempt is then charged with the copy of
the spawner it was (about 6 MiB), and each attempt costs a few tenths of a millisecond
more.

The daemon sends one message per attempt on a ``SOCK_SEQPACKET`` socket: the program,
argv, environment, working directory, niceness and I/O priority, with descriptors
(``SCM_RIGHTS``): stdin's and the output's, and the write end of a close-on-exec pipe
of its own. The spawner puts the first two on 0, 1 and 2, goes to the working directory
and clones; the clone starts a new session, sets its niceness and I/O priority and
execs (its signals are the defaults, its mask empty: the spawner's own). The spawner
answers the pid as soon as the clone is made, or the step that failed before it
(``stdio``, ``chdir``, ``fork``) with its errno; a step of the clone that fails is
written by the clone to that pipe, before it exits 127, and the daemon reads it when
the clone has exited (an exec that took closed the pipe: it reads nothing). So the
daemon never waits for a spawn: it sends, goes on, and takes the answers when its loop
sees them (:meth:`Spawner.answers`), reading them early when :data:`MAX_WAITING` are
unanswered (the spawner answers each request before it reads the next, so the two
would otherwise wait on each other once its answers filled the socket).

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
import _struct
import mmap
import os
import sys

if __name__ != "__main__":  # the daemon's side
    import socket
    from collections.abc import Callable, Mapping, Sequence

#: clone(2) and ioprio_set(2) numbers (Python's os module has neither)
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "arm64": 220}.get(os.uname().machine)
SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "arm64": 30}.get(os.uname().machine)
CLONE_PARENT = 0x00008000
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


#: the native spawn's source (GNU as, Intel syntax): ``long spawn(struct request *r)``.
#: ``r`` holds, at 0, 8 and 16, the path, argv and envp of the exec; at 24 the niceness
#: (``_NO_NICE``: none) and at 28 the I/O priority (negative: none), 32-bit; at 32 room
#: for the step that failed and its errno (32-bit each), at 40 the clone's flags and at
#: 48 the descriptor a failure is written to. The caller gets the pid, or ``-errno`` when
#: the clone failed. The copy uses no stack (it has none: see the module's doc); on a
#: failure it writes the step and errno (8 bytes) to that descriptor and exits 127.
#: ``tests/test_spawner_code.py`` assembles it, where binutils are, and checks the bytes.
NATIVE_SPAWN_SOURCE = """\
    .intel_syntax noprefix
spawn:
    endbr64
    push rbx
    push r12
    mov rbx, rdi
    mov rdi, [rbx+40]       # clone(flags, stack 0: the same address, in the copy)
    xor esi, esi
    xor edx, edx
    xor r10d, r10d
    xor r8d, r8d
    mov eax, 56
    syscall
    test rax, rax
    jz child
    pop r12                 # the caller: the pid or -errno
    pop rbx
    ret
child:
    mov r12d, 2             # step 2, session: setsid()
    mov eax, 112
    syscall
    test rax, rax
    js fail
    mov r12d, 3             # step 3: ioprio_set(IOPRIO_WHO_PROCESS, 0, ioprio)
    mov edx, [rbx+28]
    test edx, edx
    js 1f
    mov edi, 1
    xor esi, esi
    mov eax, 251
    syscall
    test rax, rax
    js fail
1:
    mov r12d, 4             # step 4: setpriority(PRIO_PROCESS, 0, nice)
    mov edx, [rbx+24]
    cmp edx, 0x80000000
    je 2f
    xor edi, edi
    xor esi, esi
    mov eax, 141
    syscall
    cmp rax, -1             # EPERM, EACCES: a niceness below ours is not ours to give
    je 2f
    cmp rax, -13
    je 2f
    test rax, rax
    js fail
2:
    mov r12d, 6             # step 6: execve(path, argv, envp)
    mov rdi, [rbx]
    mov rsi, [rbx+8]
    mov rdx, [rbx+16]
    mov eax, 59
    syscall
fail:
    neg eax                 # write(fd, {step, errno}, 8) into the copy's request
    mov [rbx+32], r12d
    mov [rbx+36], eax
    mov edi, [rbx+48]
    lea rsi, [rbx+32]
    mov edx, 8
    mov eax, 1
    syscall
    mov edi, 127            # exit_group(127)
    mov eax, 231
    syscall
"""
#: :data:`NATIVE_SPAWN_SOURCE` assembled, by machine (``os.uname().machine``)
NATIVE_SPAWN = {
    "x86_64": bytes.fromhex(
        "f30f1efa5341544889fb488b7b2831f631d24531d24531c0b8380000000f054885c07404415c5bc341"
        "bc02000000b8700000000f054885c0786541bc030000008b531c85d27813bf0100000031f6b8fb0000"
        "000f054885c0784541bc040000008b531881fa00000080741c31ff31f6b88d0000000f054883f8ff74"
        "0b4883f8f374054885c0781841bc06000000488b3b488b7308488b5310b83b0000000f05f7d8448963"
        "208943248b7b30488d7320ba08000000b8010000000f05bf7f000000b8e70000000f05"
    ),
}.get(os.uname().machine)
#: the request's header (see NATIVE_SPAWN_SOURCE), before the strings it points at
_REQUEST_BYTES = 56
#: what the spawner's environment asks of glibc: no restartable sequences (see above)
SPAWNER_ENV = {"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}
#: madvise(2): the mapping is not copied into a child
MADV_DONTFORK = 10
#: the spawner looks again for mappings to leave out of its copies after this many
#: requests (the interpreter maps memory now and then)
REMAP_EVERY = 256


#: an answer: pid, the step that failed (-1: none), its errno
_ANSWER_BYTES = 12
#: what a clone whose exec failed writes to the descriptor it was given: the step, errno
_REPORT_BYTES = 8
#: requests the daemon leaves unanswered at most (see Spawner.request)
MAX_WAITING = 64
#: madvise(2): a mapping is copied into a child again (the request's, see _Native)
MADV_DOFORK = 11
#: a request larger than this gives its pages back after its clone, so that a later
#: clone's copy of the request holds no more than it needs
_GIVE_BACK_BYTES = 64 << 10
#: madvise(2): drop the pages of a private mapping (they read as zeros again)
MADV_DONTNEED = 4


def _ints(data: bytes, n: int) -> list[int]:
    """``n`` native signed 32-bit integers from the start of ``data``."""
    return [int.from_bytes(data[4 * i : 4 * i + 4], sys.byteorder, signed=True) for i in range(n)]


def _pack(*values: int) -> bytes:
    return b"".join(v.to_bytes(4, sys.byteorder, signed=True) for v in values)


# ---------------------------------------------------------------------- the spawner


def _child(
    path: bytes,
    argv: list[bytes],
    env: dict[bytes, bytes],
    nice: int,
    ioprio: int,
    report_fd: int,
) -> None:
    """In the Python clone, whose descriptors 0, 1, 2 and working directory the spawner
    set before it: a new session, the niceness and I/O priority asked for, and the exec.
    On a failure it writes the step and errno to ``report_fd`` and exits. As little
    Python as can be: each page it writes is copied, and counts in the attempt's peak
    memory and CPU. Never returns."""
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
        os.write(report_fd, _pack(step, err))
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
    """``clone(CLONE_PARENT | SIGCHLD)``: 0 in the child, its pid in the caller."""
    import ctypes

    flags = CLONE_PARENT | _signal.SIGCHLD
    pid = int(libc.syscall(SYS_CLONE, flags, 0, 0, 0, 0))  # type: ignore[attr-defined]
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return pid


def _serve_one(
    sock: _socket.socket,
    libc: object,
    native: _Native | None,
    buf: mmap.mmap | memoryview,
    n: int,
    fds: list[int],
) -> None:
    """One request, the ``n`` bytes at the start of ``buf``: the child's descriptors and
    directory are set here, in the spawner (what a clone copies), so the clone itself
    runs almost nothing before its exec. The answer goes as soon as the clone is made;
    a step of the clone that fails is written to the last descriptor received (the
    daemon's, close-on-exec: it reads the end of file once the exec took)."""
    nice, ioprio, which, nfields = _ints(bytes(buf[:16]), 4)
    fields = bytes(buf[16:n]).split(b"\0")[:nfields]
    given = iter(fds)  # stdin's, then the output's, each when the daemon sent one
    in_fd, out_fd = (next(given, _NO_FD) if which >> bit & 1 else _NO_FD for bit in (0, 1))
    report_fd = fds[-1] if fds else _NO_FD
    try:
        step = 1
        if report_fd == _NO_FD or len(fds) != 1 + (which & 1) + (which >> 1 & 1):
            raise OSError(22, "a request without its descriptors")  # EINVAL
        os.dup2(_devnull(os.O_RDONLY) if in_fd == _NO_FD else in_fd, 0)
        out = _devnull(os.O_WRONLY) if out_fd == _NO_FD else out_fd
        os.dup2(out, 1)
        os.dup2(out, 2)
        step = 5
        os.chdir(fields[1])
        step = 0
        if native is not None:
            pid = native.spawn(fields, n, nice, ioprio, report_fd)
            if pid < 0:
                raise OSError(-pid, os.strerror(-pid))
        else:
            pid = _clone_parent(libc)
    except OSError as e:
        sock.send(_pack(0, step, e.errno or 0))
        pid = -1
    if pid == 0:  # the Python clone (the descriptors received are close-on-exec)
        path, argc = fields[0], int(fields[2])
        env = dict(item.partition(b"=")[::2] for item in fields[3 + argc :])
        _child(path, fields[3 : 3 + argc], env, nice, ioprio, report_fd)
    for fd in fds:
        os.close(fd)
    # the child's copies are its own: the spawner holds none of its pipes (an output
    # pipe held here would never end)
    os.dup2(_devnull(os.O_RDONLY), 0)
    os.dup2(_devnull(os.O_WRONLY), 1)
    os.dup2(_devnull(os.O_WRONLY), 2)
    if pid > 0:
        sock.send(_pack(pid, -1, 0))


class _Native:
    """The spawn of :data:`NATIVE_SPAWN`: its code in a page made executable, and the
    request in a private mapping the message is received into (the strings stay where
    they arrived; the header and the argv and envp arrays are written after them), which
    each clone copies: the next request may be read before the clone has exec'd.
    :meth:`leave_out` marks every other mapping as not to be copied."""

    def __init__(self, libc: object) -> None:
        import ctypes

        assert NATIVE_SPAWN is not None
        self.ctypes = ctypes
        self.libc = libc
        libc.mprotect.argtypes = libc.madvise.argtypes = (  # type: ignore[attr-defined]
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
        )
        self.code = mmap.mmap(-1, mmap.PAGESIZE)  # shared: never copied
        self.code.write(NATIVE_SPAWN)
        code_at = self._address(self.code)
        prot = mmap.PROT_READ | mmap.PROT_EXEC
        if libc.mprotect(code_at, mmap.PAGESIZE, prot) != 0:  # type: ignore[attr-defined]
            err = ctypes.get_errno()
            raise OSError(err, f"cannot make the spawn's code executable: {os.strerror(err)}")
        self.call = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p)(code_at)
        # the message (at most MAX_MESSAGE_BYTES) and the arrays that point into it;
        # mapped, not touched: what a request writes is what is resident
        self.size = 2 * MAX_MESSAGE_BYTES + _REQUEST_BYTES
        self.data = mmap.mmap(-1, self.size, mmap.MAP_PRIVATE)
        self.at = self._address(self.data)
        self.view = memoryview(self.data)[_REQUEST_BYTES:]
        self.served = 0
        self.left_out = self.leave_out()

    def _address(self, m: mmap.mmap) -> int:
        return self.ctypes.addressof(self.ctypes.c_char.from_buffer(m))

    def leave_out(self) -> int:
        """Mark every mapping but the code's and the request's ``MADV_DONTFORK`` (the
        interpreter's heap, stack and libraries: nothing the native spawn touches, and
        each mapping a clone copies costs it); how many were. None is while glibc has
        registered a restartable-sequence area (it lives in that memory)."""
        try:
            rseq = self.ctypes.c_uint.in_dll(self.libc, "__rseq_size").value  # type: ignore[arg-type]
        except ValueError:  # a glibc without it registers none
            rseq = 0
        if rseq:
            return 0
        n = 0
        madvise = self.libc.madvise  # type: ignore[attr-defined]
        with open("/proc/self/maps", "rb") as f:
            for line in f:
                lo, hi = (int(x, 16) for x in line.split(maxsplit=1)[0].split(b"-"))
                if madvise(lo, hi - lo, MADV_DONTFORK) == 0:
                    n += 1
        kept = ((self._address(self.code), mmap.PAGESIZE), (self.at, self.size))
        if any(madvise(at, size, MADV_DOFORK) != 0 for at, size in kept):
            err = self.ctypes.get_errno()
            raise OSError(err, f"cannot keep the request in the clones: {os.strerror(err)}")
        return n

    def spawn(self, fields: list[bytes], n: int, nice: int, ioprio: int, report_fd: int) -> int:
        """Clone and exec the request received at the start of :attr:`view`: ``n``
        bytes, its 16-byte header then ``fields`` (as split), each ended by NUL but the
        last. The pid, or ``-errno`` when the clone failed."""
        self.view[n] = 0  # the last field's end
        addresses, at = [], self.at + _REQUEST_BYTES + 16
        for field in fields:
            addresses.append(at)
            at += len(field) + 1
        argc = int(fields[2])
        addresses[3 + argc : 3 + argc] = [0]  # argv's end; envp's is the last below
        addresses.append(0)
        table = (_REQUEST_BYTES + n + 8) & ~7
        n_ptrs = len(addresses) - 3
        _struct.pack_into(f"={n_ptrs}Q", self.data, table, *addresses[3:])
        argv_at = self.at + table
        _struct.pack_into(
            "=3Q4iQ2i",
            self.data,
            0,
            addresses[0],
            argv_at,
            argv_at + 8 * (argc + 1),
            nice,
            ioprio,
            -1,
            0,
            CLONE_PARENT | _signal.SIGCHLD,
            report_fd,
            0,
        )
        pid = int(self.call(self.at))
        end = table + 8 * n_ptrs
        if end > _GIVE_BACK_BYTES:  # a large request: the next clones need not copy it
            page = mmap.PAGESIZE
            self.libc.madvise(self.at + page, end - page, MADV_DONTNEED)  # type: ignore[attr-defined]
        self.served += 1
        if self.served % REMAP_EVERY == 0:
            try:  # (the clone is made: its answer stands whatever this gives)
                self.leave_out()
            except OSError:
                pass
        return pid


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


def main(fd: int = 0, native: bool = True) -> int:
    """The spawner process: serve the daemon's requests until its socket ends.

    Its signals keep their default dispositions (what Python sets is set back), so
    the clone needs no signal work and runs no handler: it is in a process group of its
    own (a terminal's Ctrl-C is not for it), and a stop that ends it ends no attempt (the
    daemon spawns none while it stops, and starts another spawner when it needs one).
    ``native`` False: the clone returns into Python (see the module's doc)."""
    for sig in (_signal.SIGINT, _signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(sig, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())  # and the clones' mask is empty
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, os.dup(fd))
    # 0, 1 and 2 stay taken (the next child's, set before each clone), so a descriptor
    # received is never one of them
    os.dup2(_devnull(os.O_RDONLY), fd)
    libc = _libc()
    spawn: _Native | None = None
    if native and NATIVE_SPAWN is not None:
        try:
            spawn = _Native(libc)
        except OSError:
            spawn = None
    # the requests' buffer, once: mapped, not touched (what arrives is what counts), so
    # it costs no page, and no map and unmap a request as a new buffer each time would
    buf = spawn.view if spawn is not None else mmap.mmap(-1, MAX_MESSAGE_BYTES, mmap.MAP_PRIVATE)
    while True:
        try:
            n, ancdata, _, _ = sock.recvmsg_into(
                [buf], _socket.CMSG_SPACE(12), _socket.MSG_CMSG_CLOEXEC
            )
        except InterruptedError:
            continue
        except OSError:
            return 0
        if not n:
            return 0
        _serve_one(sock, libc, spawn, buf, n, _received_fds(ancdata))


# ---------------------------------------------------------------------- the daemon's side


class SpawnError(OSError):
    """A step before the exec failed: ``step`` names it (see :data:`STEPS`)."""

    def __init__(self, err: int, step: str) -> None:
        super().__init__(err, os.strerror(err) if err else "failed")
        self.step = step


class Request:
    """One spawn asked of the spawner and not answered yet: the message and descriptors
    (sent again to a new spawner if this one is lost before it answers), and the read
    end of the pipe its clone reports a failed step on (:func:`exec_failure`)."""

    __slots__ = ("fds", "message", "report_r", "report_w")

    def __init__(self, message: bytes, fds: list[int]) -> None:
        self.message = message
        #: the caller's descriptors (stdin's, the output's): theirs to keep open until
        #: the answer, and to close
        self.fds = fds
        self.report_r, self.report_w = os.pipe2(os.O_CLOEXEC)


def exec_failure(report_r: int) -> SpawnError | None:
    """What the clone of a request wrote on its report pipe (read once the clone has
    exited, or blocking until its exec): the step that failed, or None when the exec
    took. Closes ``report_r``."""
    try:
        data = os.read(report_r, _REPORT_BYTES)
    except OSError:
        data = b""
    finally:
        os.close(report_r)
    if len(data) != _REPORT_BYTES:
        return None
    step, err = _ints(data, 2)
    return SpawnError(err, STEPS[step] if 0 <= step < len(STEPS) else "exec")


class Spawner:
    """The daemon's side: start the spawner once, then :meth:`request` spawns through it
    and read their :meth:`answers` when :meth:`fileno` is readable (or :meth:`wait` for
    one).

    :attr:`available` is False when it cannot run (the daemon then spawns itself). A
    spawner that died is started again and the requests it had not answered are sent to
    the new one; if that fails too, the daemon spawns itself from then on."""

    def __init__(self, native: bool = True) -> None:
        self.pid: int | None = None
        self._sock: socket.socket | None = None
        #: False: the clone returns into Python, even where the native spawn would do
        self.native = native
        self.available = SYS_CLONE is not None and sys.platform == "linux"
        self.failure: str | None = None if self.available else "clone is not known here"
        #: asked, not answered, oldest first
        self.waiting: list[Request] = []
        #: answers read before :meth:`answers` was called (see MAX_WAITING), oldest first
        self.taken: list[tuple[Request, int | SpawnError]] = []
        #: told the descriptor of :meth:`fileno` just before it is closed (a caller
        #: that watches it in epoll takes it out there)
        self.on_close: Callable[[int], None] | None = None

    def start(self) -> bool:
        if not self.available:
            return False
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", os.path.abspath(__file__)]
                + ([] if self.native else ["--python-clone"]),
                SPAWNER_ENV,
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

    def fileno(self) -> int | None:
        """The descriptor answers arrive on (None while there is no spawner); it changes
        when a lost spawner is replaced."""
        return None if self._sock is None else self._sock.fileno()

    def request(
        self,
        path: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        stdin_fd: int | None,
        output_fd: int | None,
        nice: int | None,
        ioprio: int | None,
    ) -> Request:
        """Ask for ``argv`` (``path`` resolved) to be started as the daemon's child; its
        answer comes later (:meth:`answers`). The caller keeps ``stdin_fd`` and
        ``output_fd`` open until then. ConnectionError when no spawner can be had (the
        caller spawns itself)."""
        # the fields joined as text and encoded once (an environment is some fifty
        # variables: one encode each cost more than the rest of the message), as the OS's
        # own calls encode (os.fsencode): a value that came from bytes that are not UTF-8
        # (the daemon's environment, decoded by Python) goes back as those bytes
        text = "\0".join([path, cwd, str(len(argv)), *argv, *map("=".join, env.items())])
        nfields = 3 + len(argv) + len(env)
        if text.count("\0") != nfields - 1:
            # NUL ends each field: one inside a field would split it (as the OS's own calls
            # refuse a string with one, ValueError; here EINVAL: the attempt does not start)
            raise OSError(22, "a NUL byte in the command, its directory or its environment")
        fds = [fd for fd in (stdin_fd, output_fd) if fd is not None]
        which = (stdin_fd is not None) | (output_fd is not None) << 1
        head = _pack(
            _NO_NICE if nice is None else nice,
            -1 if ioprio is None else ioprio,
            which,
            nfields,
        )
        req = Request(head + text.encode("utf-8", "surrogateescape"), fds)
        # the spawner answers each request before it reads the next: with too many
        # unread, its answers would fill its socket and both would wait on each other
        while len(self.waiting) >= MAX_WAITING:
            self._read(block=True)
        self.waiting.append(req)
        if not self._send(req):
            self._replace()
        return req

    def _send(self, req: Request) -> bool:
        if self._sock is None:
            return False
        try:
            socket.send_fds(self._sock, [req.message], [*req.fds, req.report_w])
        except OSError:
            return False
        return True

    def _replace(self) -> None:
        """The spawner is gone: reap it, start another and send it what was not
        answered; ConnectionError when that cannot be (every request dropped: its
        report pipe's write end closed, the read end left to the caller, who spawns it)."""
        self._lost()
        if self.start():
            if all(self._send(r) for r in self.waiting):
                return
            self._lost()
        for req in self.waiting:
            os.close(req.report_w)
        self.waiting = []
        self._give_up("the spawner stopped answering")
        raise ConnectionError(self.failure)

    def answers(self, block: bool = False) -> list[tuple[Request, int | SpawnError]]:
        """The answers that came (at least one when ``block``), oldest first: each
        request with its pid, or the SpawnError of a step before the clone (the request's
        report pipe is then closed). ConnectionError when the spawner is gone and cannot
        be had again (the requests not answered are dropped: the caller spawns them
        itself; those answered before stay in :attr:`taken`)."""
        self._read(block=block and not self.taken)
        out, self.taken = self.taken, []
        return out

    def _read(self, block: bool) -> None:
        """Read the answers that came into :attr:`taken` (blocking for the first with
        ``block``)."""
        first = True
        while self.waiting:
            assert self._sock is not None
            try:
                flags = 0 if block and first else socket.MSG_DONTWAIT
                answer = self._sock.recv(_ANSWER_BYTES, flags)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                answer = b""
            if len(answer) != _ANSWER_BYTES:
                self._replace()  # (raises, or the new spawner answers from the start)
                continue
            first = False
            req = self.waiting.pop(0)
            os.close(req.report_w)
            pid, step, err = _ints(answer, 3)
            if pid == 0:
                os.close(req.report_r)
                self.taken.append((req, SpawnError(err, STEPS[step])))
            else:
                self.taken.append((req, pid))

    def wait(self, req: Request) -> int:
        """Wait for the answer to ``req`` (the only request waiting) and for its exec:
        the pid. SpawnError names the step that failed (a clone that failed is reaped
        here); ConnectionError when the spawner is gone and cannot be had again (the
        caller spawns itself)."""
        assert self.waiting == [req], "wait is for a request waiting alone"
        ((_, answer),) = self.answers(block=True)
        if isinstance(answer, SpawnError):
            raise answer
        failed = exec_failure(req.report_r)  # blocks until the exec took or failed
        if failed is not None:
            try:
                os.waitpid(answer, 0)
            except ChildProcessError:
                pass
            raise failed
        return answer

    def _lost(self) -> None:
        """The spawner is gone: reap it; the next request starts another."""
        if self._sock is not None:
            if self.on_close is not None:
                self.on_close(self._sock.fileno())
            self._sock.close()
            self._sock = None
        if self.pid is not None:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None

    def stop(self) -> None:
        """Close the socket (the spawner exits at its end) and reap it; the requests not
        answered are dropped (their read ends are their callers')."""
        for req in self.waiting:
            os.close(req.report_w)
        self.waiting = []
        self._lost()


if __name__ == "__main__":
    sys.exit(main(native="--python-clone" not in sys.argv))
