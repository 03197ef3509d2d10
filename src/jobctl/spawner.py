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

On x86-64 the spawner's loop is machine code (:data:`NATIVE_SPAWN`, its source in
:data:`NATIVE_SPAWN_SOURCE`): once started, the interpreter sets up its block and calls
it, and it unmaps the interpreter (its heap, libraries and every other mapping but the
stack, kept for ``ps``, and the kernel's) and never returns. It receives, clones and
answers with its own system calls. Each clone shares the loop's memory
(``CLONE_VM | CLONE_VFORK``: nothing is copied, and the loop waits until the clone has
exec'd, a few tens of microseconds); it answers its own pid at once, then issues
``setsid``, ``ioprio_set``, ``setpriority`` and ``execve`` touching no memory but the
block. An exec charges the new program with the peak resident set of the memory it
leaves, here the loop's: so the loop resets its peak (``/proc/self/clear_refs``) once
the interpreter is unmapped, and the attempt is charged with its own memory alone
(``true``: about 1 MiB; a few hundred KiB is the most the loop itself ever holds, the
largest request). Where the peak cannot be reset, each clone is a copy of the loop's
four mappings instead (the stack is marked ``MADV_DONTFORK``), answered by the loop. A
spawn costs the spawner about 0.03 ms (the kernel's clone, mostly), where a loop in
Python cost 0.1 ms. (The kernel writes a thread's restartable-sequence area, in memory
the loop unmaps, on its way back to user space: the spawner is started with glibc's
``rseq`` registration off, and serves in Python where one is registered.) Where the
loop cannot be had (another machine, or memory that may not be made executable), the
spawner serves in Python and the clone returns into Python, which execs: the attempt is
then charged with the copy of the spawner it was (about 6 MiB), and each attempt costs a
few tenths of a millisecond more.

The daemon sends one message per attempt on a ``SOCK_SEQPACKET`` socket: the program,
argv, environment, working directory, niceness and I/O priority, with descriptors
(``SCM_RIGHTS``): stdin's and the output's, and, for a caller that waits for the exec
(:meth:`Spawner.wait`), the write end of a close-on-exec pipe of its own. The spawner
puts the first two on 0, 1 and 2, goes to the working directory
and clones; the clone starts a new session, sets its niceness and I/O priority and
execs (its signals are the defaults, its mask empty: the spawner's own). The pid is
answered as soon as the clone is made (by the clone itself, where it shares the native
loop's memory), or the step that failed before it
(``stdio``, ``chdir``, ``fork``) with its errno; a step of the clone that fails is
sent by the clone on the socket (its pid, the step, the errno), or written to that
pipe, before it exits 127, and the daemon reads it when the clone has exited 127 (an
exec that took sent nothing, and closed the pipe). So the
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
#: the native loop's clones share its memory, the loop waiting until each has exec'd
CLONE_VM = 0x00000100
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


#: the spawner's loop in machine code (GNU as, Intel syntax): ``serve(block)``, which never
#: returns. The block (:class:`_Native`, offsets in ``_B_*``) holds a ``msghdr`` with its
#: iovec (the message, at ``_B_MSG``) and room for four descriptors, the answer and the
#: report, the socket's and ``/dev/null``'s descriptors, the clone's flags, the size of
#: the mapping and the path of ``clear_refs``. It first unmaps the mappings listed at
#: ``_B_MSG`` (the interpreter's) and resets its peak resident set (where it cannot, it
#: takes ``CLONE_VM`` and ``CLONE_VFORK`` out of the flags), then for each request:
#: receives it, puts its descriptors on 0, 1 and 2, walks its fields (path, directory,
#: argc, argv, environment, each ended by NUL) into argv and envp tables written after
#: it, goes to the directory and clones. The clone uses no stack (it has none of its own:
#: see the module's doc); sharing the loop's memory (``CLONE_VFORK``: the loop waits
#: until it has exec'd) it first answers its own pid; then it starts a new session, sets
#: its I/O priority and niceness and execs, or reports the step that failed and its errno
#: (to the request's report pipe, else on the socket with its pid) and exits 127. The
#: loop closes what it received, puts ``/dev/null`` back on 0, 1 and 2, answers
#: (pid, -1, 0) for a clone that is a copy or (0, step, errno) for a step before the
#: clone, gives back the pages of a request over 64 KiB, and reads the next; it exits
#: when the daemon's end is closed.
#: ``tests/test_spawner_code.py`` assembles it, where binutils are, and checks the bytes.
NATIVE_SPAWN_SOURCE = """\
    .intel_syntax noprefix
serve:
    endbr64
    mov rbx, rdi            # the block (see _Native): never left, nothing on a stack
    mov r12d, [rbx+140]     # the mappings to unmap, (address, length) pairs at 256
    lea r13, [rbx+256]
unmap:
    test r12d, r12d
    jz unmapped
    mov rdi, [r13]
    mov rsi, [r13+8]
    mov eax, 11             # munmap
    syscall
    add r13, 16
    dec r12d
    jmp unmap
unmapped:
    mov eax, 2              # open(the path at 216, O_WRONLY): /proc/self/clear_refs
    lea rdi, [rbx+216]
    mov esi, 1
    xor edx, edx
    syscall
    test rax, rax
    js own_copy
    mov r12, rax
    mov edi, r12d           # write "5": the peak resident set is what is left now
    lea rsi, [rbx+240]
    mov edx, 1
    mov eax, 1
    syscall
    mov r13, rax
    mov edi, r12d
    mov eax, 3
    syscall
    cmp r13, 1
    je next
own_copy:
    and qword ptr [rbx+144], -0x4101  # no reset: copies (no CLONE_VM, CLONE_VFORK)
next:
    mov qword ptr [rbx+40], 32  # recvmsg(sock, the msghdr at 0, MSG_CMSG_CLOEXEC)
    mov dword ptr [rbx+48], 0
    mov edi, [rbx+128]
    mov rsi, rbx
    mov edx, 0x40000000
    mov eax, 47
    syscall
    cmp rax, -4             # EINTR
    je next
    test rax, rax
    jle quit                # the daemon's end is closed
    mov r12, rax            # n: the message's length
    lea rax, [r12+256]
    mov [rbx+208], rax      # where the request ends (the tables', once written)
    xor r13d, r13d          # k: the descriptors received, at 88
    cmp qword ptr [rbx+40], 16
    jb 1f
    mov rax, 0x100000001    # SOL_SOCKET, SCM_RIGHTS
    cmp [rbx+72+8], rax
    jne 1f
    mov r13, [rbx+72]
    sub r13, 16
    shr r13, 2
1:
    mov r14d, 1             # step 1, stdio: the descriptors the request says it sent
    mov r15d, 22            # EINVAL (stdin's, the output's, a report pipe's: bits 0 to 2)
    mov eax, [rbx+256+8]
    mov ecx, eax
    and ecx, 1
    mov edx, eax
    shr edx, 1
    and edx, 1
    add ecx, edx
    mov edx, eax
    shr edx, 2
    and edx, 1
    add ecx, edx
    cmp r13, rcx
    jne fail
    lea rsi, [rbx+88]
    mov edx, [rbx+132]      # stdin: /dev/null unless sent
    test eax, 1
    jz 2f
    mov edx, [rsi]
    add rsi, 4
2:
    mov [rbx+188], edx
    mov edx, [rbx+136]      # the output: /dev/null unless sent
    test eax, 2
    jz 3f
    mov edx, [rsi]
    add rsi, 4
3:
    mov [rbx+192], edx
    mov edx, -1             # where the clone reports a step that failed: the pipe sent,
    test eax, 4             # else (-1) the socket
    jz 4f
    mov edx, [rsi]
4:
    mov [rbx+184], edx
    # the fields, each ended by NUL: path, directory, argc, argv..., environment...
    lea r8, [rbx+256+r12]   # the end
    mov byte ptr [r8], 0
    lea rdi, [r8+8]
    and rdi, -8             # the argv and envp tables, after the message
    mov r9d, [rbx+256+12]   # nfields
    lea rax, [rdi+r9*8+16]
    mov rdx, rbx
    add rdx, [rbx+152]
    cmp rax, rdx
    jbe 4f
    mov r14d, 6             # more than the tables have room for: too big to exec
    mov r15d, 7             # E2BIG
    jmp fail
4:
    sub rax, rbx
    mov [rbx+208], rax
    mov [rbx+168], rdi      # argv
    lea rsi, [rbx+256+16]
    xor ecx, ecx            # the field's index
    xor r10d, r10d          # argc
field:
    cmp ecx, r9d
    jae fields_end
    cmp rsi, r8
    ja fail                 # fewer fields than told (EINVAL, stdio)
    cmp ecx, 2
    ja arg
    je count
    test ecx, ecx
    jnz 5f
    mov [rbx+160], rsi      # the path
    jmp skip
5:
    mov [rbx+200], rsi      # the directory
    jmp skip
count:
    movzx eax, byte ptr [rsi]
    test eax, eax
    jz counted
    sub eax, 48
    cmp eax, 9
    ja fail
    imul r10, r10, 10
    add r10, rax
    cmp r10, r9
    ja fail
    inc rsi
    jmp count
counted:
    lea rax, [r10+3]
    cmp rax, r9
    ja fail                 # more arguments than fields
    test r10, r10
    jnz skip
    jmp argv_end
arg:
    mov [rdi], rsi
    add rdi, 8
    lea rax, [r10+2]
    cmp rcx, rax
    jne skip
argv_end:
    mov qword ptr [rdi], 0
    add rdi, 8
    mov [rbx+176], rdi      # envp
skip:
    cmp byte ptr [rsi], 0
    je 6f
    inc rsi
    jmp skip
6:
    inc rsi
    inc ecx
    jmp field
fields_end:
    mov qword ptr [rdi], 0
    cmp ecx, 3
    jb fail
    mov edi, [rbx+188]      # dup2(stdin, 0), dup2(output, 1), dup2(output, 2)
    xor esi, esi
    mov eax, 33
    syscall
    test rax, rax
    js failed
    mov edi, [rbx+192]
    mov esi, 1
    mov eax, 33
    syscall
    test rax, rax
    js failed
    mov edi, [rbx+192]
    mov esi, 2
    mov eax, 33
    syscall
    test rax, rax
    js failed
    mov r14d, 5             # step 5: chdir(directory)
    mov rdi, [rbx+200]
    mov eax, 80
    syscall
    test rax, rax
    js failed
    xor r14d, r14d          # step 0, fork: clone(flags, stack 0: the same address, in the copy)
    mov rdi, [rbx+144]
    xor esi, esi
    xor edx, edx
    xor r10d, r10d
    xor r8d, r8d
    mov eax, 56
    syscall
    test rax, rax
    jz child
    js failed
    mov [rbx+104], eax      # the answer: the pid
    mov dword ptr [rbx+108], -1
    mov dword ptr [rbx+112], 0
    test dword ptr [rbx+144], 0x4000
    jz answer
    mov dword ptr [rbx+104], -1  # CLONE_VFORK: the clone sent it (see child), nothing to send here
    jmp answer
failed:
    neg eax
    mov r15d, eax
fail:
    mov dword ptr [rbx+104], 0  # the answer: the step that failed, its errno
    mov [rbx+108], r14d
    mov [rbx+112], r15d
answer:
    test r13, r13           # close what was received
    jz 7f
    mov edi, [rbx+88+r13*4-4]
    mov eax, 3
    syscall
    dec r13
    jmp answer
7:
    mov edi, [rbx+132]      # 0, 1 and 2 back to /dev/null: no pipe of a child held here
    xor esi, esi
    mov eax, 33
    syscall
    mov edi, [rbx+136]
    mov esi, 1
    mov eax, 33
    syscall
    mov edi, [rbx+136]
    mov esi, 2
    mov eax, 33
    syscall
    cmp dword ptr [rbx+104], -1
    je 9f
    lea rsi, [rbx+104]      # the answer
    lea r15, [rip+8f]
    jmp send
8:
    test rax, rax
    js quit
9:
    mov rsi, [rbx+208]      # a large request gives its pages back (the next copies less)
    cmp rsi, 0x10000
    jbe next
    lea rdi, [rbx+4096]
    sub rsi, 4096
    mov edx, 4              # MADV_DONTNEED
    mov eax, 28
    syscall
    jmp next
quit:
    xor edi, edi            # exit_group(0)
    mov eax, 231
    syscall
send:                       # send(sock, rsi, 12), again when interrupted; then to r15
    mov edi, [rbx+128]
    mov edx, 12
    xor r10d, r10d
    xor r8d, r8d
    xor r9d, r9d
    mov eax, 44
    syscall
    cmp rax, -4
    je send
    jmp r15
child:
    test dword ptr [rbx+144], 0x4000
    jz 3f
    mov eax, 39             # CLONE_VFORK (the loop waits for the exec): the copy answers
    syscall                 # its own pid at once, from the memory it shares: getpid()
    mov [rbx+104], eax
    mov dword ptr [rbx+108], -1
    mov dword ptr [rbx+112], 0
    lea rsi, [rbx+104]
    lea r15, [rip+3f]
    jmp send
3:
    mov r14d, 2             # step 2, session: setsid()
    mov eax, 112
    syscall
    test rax, rax
    js child_failed
    mov r14d, 3             # step 3: ioprio_set(IOPRIO_WHO_PROCESS, 0, ioprio)
    mov edx, [rbx+256+4]
    test edx, edx
    js 1f
    mov edi, 1
    xor esi, esi
    mov eax, 251
    syscall
    test rax, rax
    js child_failed
1:
    mov r14d, 4             # step 4: setpriority(PRIO_PROCESS, 0, nice)
    mov edx, [rbx+256]
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
    js child_failed
2:
    mov r14d, 6             # step 6: execve(path, argv, envp)
    mov rdi, [rbx+160]
    mov rsi, [rbx+168]
    mov rdx, [rbx+176]
    mov eax, 59
    syscall
child_failed:
    neg eax                 # write(report, {step, errno}, 8) from the copy's block
    mov [rbx+120], r14d
    mov [rbx+124], eax
    mov edi, [rbx+184]
    test edi, edi
    js 5f
    lea rsi, [rbx+120]
    mov edx, 8
    mov eax, 1
    syscall
    jmp 7f
5:
    mov eax, 39             # or send(sock, {pid, step, errno}, 12): getpid()
    syscall
    mov [rbx+116], eax
    lea rsi, [rbx+116]
    lea r15, [rip+7f]
    jmp send
7:
    mov edi, 127            # exit_group(127)
    mov eax, 231
    syscall
"""
#: :data:`NATIVE_SPAWN_SOURCE` assembled, by machine (``os.uname().machine``)
NATIVE_SPAWN = {
    "x86_64": bytes.fromhex(
        "f30f1efa4889fb448ba38c0000004c8dab000100004585e47418498b7d00498b7508b80b0000000f"
        "054983c51041ffccebe3b802000000488dbbd8000000be0100000031d20f054885c0782c4989c444"
        "89e7488db3f0000000ba01000000b8010000000f054989c54489e7b8030000000f054983fd01740b"
        "4881a390000000ffbeffff48c7432820000000c74330000000008bbb800000004889deba00000040"
        "b82f0000000f054883f8fc74d64885c00f8e160300004989c4498d842400010000488983d0000000"
        "4531ed48837b2810721c48b8010000000100000048394350750c4c8b6b484983ed1049c1ed0241be"
        "0100000041bf160000008b830801000089c183e10189c2d1ea83e20101d189c2c1ea0283e20101d1"
        "4939cd0f8508020000488d73588b9384000000a90100000074068b164883c6048993bc0000008b93"
        "88000000a90200000074068b164883c6048993c0000000baffffffffa90400000074028b168993b8"
        "0000004e8d84230001000041c60000498d78084883e7f8448b8b0c0100004a8d44cf104889da4803"
        "93980000004839d0761141be0600000041bf07000000e97e0100004829d8488983d00000004889bb"
        "a8000000488db31001000031c94531d24439c90f83980000004c39c60f874f01000083f902775474"
        "1685c975094889b3a0000000eb674889b3c8000000eb5e0fb60685c0742183e83083f8090f871f01"
        "00004d6bd20a4901c24d39ca0f870f01000048ffc6ebd8498d42034c39c80f87fd0000004d85d275"
        "24eb104889374883c708498d42024839c1751248c707000000004883c7084889bbb0000000803e00"
        "740548ffc6ebf648ffc6ffc1e95fffffff48c7070000000083f9030f82b00000008bbbbc00000031"
        "f6b8210000000f054885c00f88930000008bbbc0000000be01000000b8210000000f054885c0787c"
        "8bbbc0000000be02000000b8210000000f054885c0786541be05000000488bbbc8000000b8500000"
        "000f054885c0784c4531f6488bbb9000000031f631d24531d24531c0b8380000000f054885c00f84"
        "fd0000007826894368c7436cffffffffc7437000000000f7839000000000400000741dc74368ffff"
        "ffffeb14f7d84189c7c74368000000004489736c44897b704d85ed7411428b7cab54b8030000000f"
        "0549ffcdebea8bbb8400000031f6b8210000000f058bbb88000000be01000000b8210000000f058b"
        "bb88000000be02000000b8210000000f05837b68ff7412488d73684c8d3d02000000eb414885c078"
        "33488bb3d00000004881fe000001000f86d6fcffff488dbb001000004881ee00100000ba04000000"
        "b81c0000000f05e9b7fcffff31ffb8e70000000f058bbb80000000ba0c0000004531d24531c04531"
        "c9b82c0000000f054883f8fc74df41ffe7f78390000000004000007425b8270000000f05894368c7"
        "436cffffffffc7437000000000488d73684c8d3d02000000ebab41be02000000b8700000000f0548"
        "85c0787541be030000008b930401000085d27813bf0100000031f6b8fb0000000f054885c0785241"
        "be040000008b930001000081fa00000080741c31ff31f6b88d0000000f054883f8ff740b4883f8f3"
        "74054885c0782241be06000000488bbba0000000488bb3a8000000488b93b0000000b83b0000000f"
        "05f7d84489737889437c8bbbb800000085ff7812488d7378ba08000000b8010000000f05eb1ab827"
        "0000000f05894374488d73744c8d3d05000000e9e5feffffbf7f000000b8e70000000f05"
    ),
}.get(os.uname().machine)
#: the block's layout (see NATIVE_SPAWN_SOURCE): the msghdr, its iovec, the descriptors
#: received, the socket and /dev/null, the request's message
_B_IOV, _B_CMSG, _B_SOCK, _B_FLAGS, _B_CLEAR_REFS, _B_MSG = 56, 72, 128, 144, 216, 256
#: the file and the value that reset a process's peak resident set (proc(5)), at 216 and
#: 240 of the block
_CLEAR_REFS = b"/proc/self/clear_refs".ljust(24, b"\0") + b"5"
#: the control buffer's size: CMSG_SPACE of three descriptors (room for four)
_CMSG_BYTES = 32
#: what the spawner's environment asks of glibc: no restartable sequences (see above)
SPAWNER_ENV = {"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}
#: madvise(2): the mapping is not copied into a child
MADV_DONTFORK = 10
#: the kernel's own mappings, kept when the loop unmaps the interpreter's (the stack too:
#: ``ps`` reads the command line there)
_KEPT_MAPPINGS = (b"[stack]", b"[vdso]", b"[vvar]", b"[vvar_vclock]", b"[vsyscall]")


#: an answer: pid, the step that failed (-1: none), its errno
_ANSWER_BYTES = 12
#: what a clone whose exec failed writes to the report pipe it was given: the step, errno
#: (without one it sends pid, step, errno on the socket, as an answer with a pid and a step)
_REPORT_BYTES = 8
#: requests the daemon leaves unanswered at most (see Spawner.request)
MAX_WAITING = 64


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
    sock_fd: int,
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
        if report_fd != _NO_FD:
            os.write(report_fd, _pack(step, err))
        else:
            os.write(sock_fd, _pack(os.getpid(), step, err))
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


def _serve_one(sock: _socket.socket, libc: object, buf: mmap.mmap, n: int, fds: list[int]) -> None:
    """One request, the ``n`` bytes at the start of ``buf``, where the native loop cannot
    run (the clone returns into Python): the child's descriptors and directory are set
    here, in the spawner (what a clone copies), so the clone itself runs little before
    its exec. The answer goes as soon as the clone is made; a step of the clone that
    fails is reported on the report pipe the request sent (the daemon's, close-on-exec:
    it reads the end of file once the exec took), else on the socket."""
    nice, ioprio, which, nfields = _ints(bytes(buf[:16]), 4)
    fields = bytes(buf[16:n]).split(b"\0")[:nfields]
    given = iter(fds)  # stdin's, the output's, the report pipe's, each when it was sent
    in_fd, out_fd, report_fd = (
        next(given, _NO_FD) if which >> bit & 1 else _NO_FD for bit in (0, 1, 2)
    )
    try:
        step = 1
        if len(fds) != (which & 1) + (which >> 1 & 1) + (which >> 2 & 1):
            raise OSError(22, "a request without its descriptors")  # EINVAL
        os.dup2(_devnull(os.O_RDONLY) if in_fd == _NO_FD else in_fd, 0)
        out = _devnull(os.O_WRONLY) if out_fd == _NO_FD else out_fd
        os.dup2(out, 1)
        os.dup2(out, 2)
        step = 5
        os.chdir(fields[1])
        step = 0
        pid = _clone_parent(libc)
    except OSError as e:
        sock.send(_pack(0, step, e.errno or 0))
        pid = -1
    if pid == 0:  # the Python clone (the descriptors received are close-on-exec)
        path, argc = fields[0], int(fields[2])
        env = dict(item.partition(b"=")[::2] for item in fields[3 + argc :])
        _child(path, fields[3 : 3 + argc], env, nice, ioprio, report_fd, sock.fileno())
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
    """The loop of :data:`NATIVE_SPAWN`: its code in a page made executable, and its block
    in a private mapping the requests are received into (the strings stay where they
    arrived; the argv and envp tables are written after them), which each clone copies:
    the next request may be read before the clone has exec'd. :meth:`serve` hands the
    process over to it: every other mapping but the kernel's is unmapped first, so a
    clone copies four mappings and no page of the interpreter. OSError when it cannot
    be had (the caller serves in Python)."""

    def __init__(self, libc: object) -> None:
        import ctypes

        assert NATIVE_SPAWN is not None
        self.ctypes = ctypes
        self.libc = libc
        try:
            rseq = ctypes.c_uint.in_dll(libc, "__rseq_size").value  # type: ignore[arg-type]
        except ValueError:  # a glibc without it registers none
            rseq = 0
        if rseq:  # the kernel writes that area, in memory the loop unmaps, at each return
            raise OSError(22, "glibc registered a restartable-sequence area")
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
        # the block, the message (at most MAX_MESSAGE_BYTES) and the tables that point
        # into it; mapped, not touched: what a request writes is what is resident
        self.size = 2 * MAX_MESSAGE_BYTES + _B_MSG
        self.data = mmap.mmap(-1, self.size, mmap.MAP_PRIVATE)
        self.at = self._address(self.data)
        self.kept = ((code_at, mmap.PAGESIZE), (self.at, self.size))

    def _address(self, m: mmap.mmap) -> int:
        return self.ctypes.addressof(self.ctypes.c_char.from_buffer(m))

    def mappings(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """What the loop unmaps (every mapping but its own two and the kernel's, as
        ``(address, length)``) and the stack's (kept: ``ps`` reads the command line there;
        marked ``MADV_DONTFORK`` by :meth:`serve`, so the clones copy none of it). Its
        own are cut out of what the kernel may have merged them with."""
        gone: list[tuple[int, int]] = []
        stack: list[tuple[int, int]] = []
        with open("/proc/self/maps", "rb") as f:
            for line in f:
                span, *rest = line.split()
                lo, hi = (int(x, 16) for x in span.split(b"-"))
                if rest[-1:] == [b"[stack]"]:
                    stack.append((lo, hi - lo))
                elif not (len(rest) == 5 and rest[-1] in _KEPT_MAPPINGS):
                    gone += _without(lo, hi, self.kept)
        return gone, stack

    def serve(self, sock: int, null_r: int, null_w: int, shared: bool = True) -> None:
        """Hand the process over to the loop: it serves the requests on ``sock`` until
        the daemon's end is closed, then exits. Never returns; OSError before it starts
        (the caller then serves in Python)."""
        gone, stack = self.mappings()
        if 16 * len(gone) > MAX_MESSAGE_BYTES:
            raise OSError(7, "too many mappings")  # E2BIG
        at, data = self.at, self.data
        _struct.pack_into(
            "=8Q", data, 0, 0, 0, at + _B_IOV, 1, at + _B_CMSG, _CMSG_BYTES, 0, at + _B_MSG
        )
        _struct.pack_into("=Q", data, _B_IOV + 8, MAX_MESSAGE_BYTES)
        _struct.pack_into("=4i", data, _B_SOCK, sock, null_r, null_w, len(gone))
        flags = CLONE_PARENT | _signal.SIGCHLD
        if shared:  # (the loop takes the two back if it cannot reset its peak)
            flags |= CLONE_VM | CLONE_VFORK
            data[_B_CLEAR_REFS : _B_CLEAR_REFS + len(_CLEAR_REFS)] = _CLEAR_REFS
        _struct.pack_into("=2Q", data, _B_FLAGS, flags, self.size)
        _struct.pack_into(f"={2 * len(gone)}Q", data, _B_MSG, *(x for m in gone for x in m))
        for lo, size in stack:  # from here on, no way back to Python in a clone
            self.libc.madvise(lo, size, MADV_DONTFORK)  # type: ignore[attr-defined]
        self.call(at)


def _without(lo: int, hi: int, kept: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[lo, hi)`` less the ``(address, length)`` ranges of ``kept``, as ``(address,
    length)`` ranges."""
    spans = [(lo, hi)]
    for k_lo, k_size in kept:
        k_hi = k_lo + k_size
        spans = [
            piece
            for a, b in spans
            for piece in ((a, min(b, k_lo)), (max(a, k_hi), b))
            if piece[0] < piece[1]
        ]
    return [(a, b - a) for a, b in spans]


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


def main(fd: int = 0, native: bool = True, shared: bool = True) -> int:
    """The spawner process: serve the daemon's requests until its socket ends.

    Its signals keep their default dispositions (what Python sets is set back), so
    the clone needs no signal work and runs no handler: it is in a process group of its
    own (a terminal's Ctrl-C is not for it), and a stop that ends it ends no attempt (the
    daemon spawns none while it stops, and starts another spawner when it needs one).
    ``native`` False: the clone returns into Python; ``shared`` False: the native loop's
    clones are copies (see the module's doc)."""
    for sig in (_signal.SIGINT, _signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(sig, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())  # and the clones' mask is empty
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, os.dup(fd))
    # 0, 1 and 2 stay taken (the next child's, set before each clone), so a descriptor
    # received is never one of them
    os.dup2(_devnull(os.O_RDONLY), fd)
    libc = _libc()
    if native and NATIVE_SPAWN is not None:
        try:  # never returns, but when the loop cannot be had
            _Native(libc).serve(sock.fileno(), _devnull(os.O_RDONLY), _devnull(os.O_WRONLY), shared)
        except OSError:
            pass
    # the requests' buffer, once: mapped, not touched (what arrives is what counts), so
    # it costs no page, and no map and unmap a request as a new buffer each time would
    buf = mmap.mmap(-1, MAX_MESSAGE_BYTES, mmap.MAP_PRIVATE)
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
        _serve_one(sock, libc, buf, n, _received_fds(ancdata))


# ---------------------------------------------------------------------- the daemon's side


class SpawnError(OSError):
    """A step before the exec failed: ``step`` names it (see :data:`STEPS`)."""

    def __init__(self, err: int, step: str) -> None:
        super().__init__(err, os.strerror(err) if err else "failed")
        self.step = step


class Request:
    """One spawn asked of the spawner and not answered yet: the message and descriptors
    (sent again to a new spawner if this one is lost before it answers), and, for a
    caller that waits for the exec (:meth:`Spawner.wait`), the read end of the pipe its
    clone reports a failed step on (:func:`exec_failure`); without one the clone reports
    on the socket (:meth:`Spawner.report`)."""

    __slots__ = ("fds", "message", "report_r", "report_w")

    def __init__(self, message: bytes, fds: list[int], report: bool) -> None:
        self.message = message
        #: the caller's descriptors (stdin's, the output's): theirs to keep open until
        #: the answer, and to close
        self.fds = fds
        self.report_r: int | None = None
        self.report_w: int | None = None
        if report:
            self.report_r, self.report_w = os.pipe2(os.O_CLOEXEC)

    def sent_fds(self) -> list[int]:
        """The descriptors the message carries: the caller's, then the report pipe's."""
        return self.fds if self.report_w is None else [*self.fds, self.report_w]

    def drop_report(self) -> None:
        """Close the report pipe's write end (the clone holds its own copy)."""
        if self.report_w is not None:
            os.close(self.report_w)
            self.report_w = None


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

    def __init__(self, native: bool = True, shared: bool = True) -> None:
        self.pid: int | None = None
        self._sock: socket.socket | None = None
        #: False: the clone returns into Python, even where the native spawn would do
        self.native = native
        #: False: the native loop's clones are copies, even where they could share its
        #: memory (what it does when it cannot reset its peak resident set)
        self.shared = shared
        self.available = SYS_CLONE is not None and sys.platform == "linux"
        self.failure: str | None = None if self.available else "clone is not known here"
        #: asked, not answered, oldest first
        self.waiting: list[Request] = []
        #: answers read before :meth:`answers` was called (see MAX_WAITING), oldest first
        self.taken: list[tuple[Request, int | SpawnError]] = []
        #: what clones without a report pipe said failed, by pid (:meth:`report`)
        self.reports: dict[int, SpawnError] = {}
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
                + ([] if self.native else ["--python-clone"])
                + ([] if self.shared else ["--copy"]),
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
        base: tuple[bytes, int] | None = None,
        report: bool = False,
    ) -> Request:
        """Ask for ``argv`` (``path`` resolved) to be started as the daemon's child; its
        answer comes later (:meth:`answers`). The caller keeps ``stdin_fd`` and
        ``output_fd`` open until then. ``base``: more of the environment, as its text
        already encoded (``NAME=value``, NUL between, none inside one) and how many
        variables it holds; none of them is in ``env``. ``report``: the clone reports a
        failed step on a pipe of the request's own (what :meth:`wait` needs), not on the
        socket. ConnectionError when no spawner can be had (the caller spawns itself)."""
        # the fields joined as text and encoded once (an environment is some fifty
        # variables: one encode each cost more than the rest of the message), as the OS's
        # own calls encode (os.fsencode): a value that came from bytes that are not UTF-8
        # (the daemon's environment, decoded by Python) goes back as those bytes
        text = "\0".join([path, cwd, str(len(argv)), *argv, *map("=".join, env.items())])
        nfields = 3 + len(argv) + len(env)
        tail, n_tail = (b"", 0) if base is None or not base[1] else (b"\0" + base[0], base[1])
        if text.count("\0") != nfields - 1:
            # NUL ends each field: one inside a field would split it (as the OS's own calls
            # refuse a string with one, ValueError; here EINVAL: the attempt does not start)
            raise OSError(22, "a NUL byte in the command, its directory or its environment")
        fds = [fd for fd in (stdin_fd, output_fd) if fd is not None]
        which = (stdin_fd is not None) | (output_fd is not None) << 1 | report << 2
        head = _pack(
            _NO_NICE if nice is None else nice,
            -1 if ioprio is None else ioprio,
            which,
            nfields + n_tail,
        )
        req = Request(head + text.encode("utf-8", "surrogateescape") + tail, fds, report)
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
            socket.send_fds(self._sock, [req.message], req.sent_fds())
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
            req.drop_report()
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
        """Read what came: the answers into :attr:`taken`, the clones' reports into
        :attr:`reports` (blocking for the first answer with ``block``)."""
        while self._sock is not None:
            wait = block and bool(self.waiting)
            try:
                message = self._sock.recv(_ANSWER_BYTES, 0 if wait else socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                message = b""
            if len(message) != _ANSWER_BYTES:
                if not self.waiting:  # gone with nothing asked: the next request starts one
                    self._lost()
                    break
                self._replace()  # (raises, or the new spawner answers from the start)
                continue
            pid, step, err = _ints(message, 3)
            if pid > 0 and step >= 0:  # a clone's report: the step it failed at
                self.reports[pid] = SpawnError(err, STEPS[step] if step < len(STEPS) else "exec")
                continue
            if not self.waiting:
                continue  # an answer to nothing asked: not one of ours
            block = False
            req = self.waiting.pop(0)
            req.drop_report()
            if pid == 0:
                if req.report_r is not None:
                    os.close(req.report_r)
                    req.report_r = None
                self.taken.append((req, SpawnError(err, STEPS[step])))
            else:
                self.taken.append((req, pid))

    def report(self, pid: int) -> SpawnError | None:
        """What the clone ``pid``, asked without a report pipe, said failed before its
        exec (None: nothing, its exec took). For a clone that exited: it reports before
        it exits, so its report is on the socket by then."""
        if pid not in self.reports:
            self._read(block=False)
        return self.reports.pop(pid, None)

    def wait(self, req: Request) -> int:
        """Wait for the answer to ``req`` (the only request waiting) and for its exec:
        the pid. SpawnError names the step that failed (a clone that failed is reaped
        here); ConnectionError when the spawner is gone and cannot be had again (the
        caller spawns itself)."""
        assert self.waiting == [req], "wait is for a request waiting alone"
        assert req.report_r is not None, "wait is for a request with a report pipe"
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
            req.drop_report()
        self.waiting = []
        self._lost()


if __name__ == "__main__":
    sys.exit(main(native="--python-clone" not in sys.argv, shared="--copy" not in sys.argv))
