"""The keeper: a small process that outlives its daemon and kills the daemon's attempts.

A daemon that is killed outright (SIGKILL, the OOM killer) runs no shutdown: its attempts
would go on running, reparented to init, while another daemon runs the same runs again
once their leases expire. The keeper is started by the daemon and holds the read end of a
pipe whose only write end the daemon holds, and maps a table the daemon shares with it (a
memory file of :data:`TABLE_SLOTS` process group ids, 0 for a free slot):

- the daemon writes an attempt's group id (its pid) into a free slot right after it
  started the attempt;
- it sets the slot back to 0 when the attempt's main process exited, *before* it reaps it
  (until then the pid, and so the group id, cannot be given to another process).

Neither costs a system call, and the keeper does not wake while the daemon lives: it reads
the pipe, on which nothing is written. When the daemon dies, however it dies, the kernel
closes the write end and the keeper reads end of file: it SIGKILLs every group still in
the table and exits. A normal shutdown ends the same way with an empty table. The keeper
never signals a group whose id was reused: only the daemon reaped its attempts, so an id
in the table was its leader's until the daemon died, and a process that has the id and
started after the keeper saw the pipe end is another's.

It is started as ``python -I -S keeper.py`` with its own process group (a terminal's
Ctrl-C is not for it; it ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT, blocked from its
first instruction, so that a service manager's stop lets the daemon finish first) and
only four descriptors: the pipe on stdin, ``/dev/null`` on stdout, the daemon's stderr
for its one line, and the table (read once the pipe ends). It holds none of the daemon's
database files, sockets or listening ports, and imports nothing from jobctl.

This module is both the keeper's program (:func:`main`) and the daemon's side of it
(:class:`Keeper`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the keeper's program runs alone (python -I -S): nothing of jobctl
    from collections.abc import Iterable

    from .logs import LogFn

#: signals the keeper ignores: a stop or hang-up is the daemon's to act on; the keeper
#: ends when the daemon's pipe does
IGNORED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
READ_CHUNK_BYTES = 65536
#: how long a daemon that stops waits for its keeper to exit
EXIT_WAIT_SECONDS = 2.0
#: the table's slots, one 32-bit group id each (256 KiB of a memory file, of which the
#: pages a daemon's attempts running at once touch are memory: one per 1,024)
TABLE_SLOTS = 1 << 16
#: the table's descriptor in the keeper
TABLE_FD = 3


def start_time(pid: int, proc_root: str = "/proc") -> int | None:
    """When ``pid`` started (clock ticks since boot, field 22 of ``/proc/PID/stat``), or
    None when there is no such process."""
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat.rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_ticks(proc_root: str = "/proc") -> int:
    """Now, in clock ticks since boot (the unit of :func:`start_time`)."""
    with open(f"{proc_root}/uptime", "rb") as f:
        seconds, _, hundredths = f.read().split()[0].partition(b".")
    hz = os.sysconf("SC_CLK_TCK")
    # as the kernel rounds both (down, to a hundredth): no float, whose product can fall
    # a tick short of the start time of a process that started in this very tick
    return int(seconds) * hz + int(hundredths.ljust(2, b"0")[:2]) * hz // 100


def held(table: memoryview) -> list[int]:
    """The group ids in the table (its non-zero slots)."""
    return [pgid for pgid in table if pgid > 1]


def kill_all(groups: Iterable[int], died: int, proc_root: str = "/proc") -> list[int]:
    """SIGKILL each of ``groups``, but one whose id names a process that started after
    ``died`` (clock ticks since boot: when the keeper saw the daemon's end), whose id was
    reused. Returns the groups signalled."""
    killed = []
    for pgid in groups:
        started = start_time(pgid, proc_root)
        if started is not None and started > died:
            continue  # the leader is gone and its pid is another process's now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
            killed.append(pgid)
    return killed


def main(fd: int = 0, table_fd: int = TABLE_FD) -> int:
    """The keeper process: wait for the end of the daemon's pipe, then kill what the table
    holds."""
    # they came blocked (see Keeper.start), so none could end us before this line; what
    # is pending is dropped here
    for sig in IGNORED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, IGNORED_SIGNALS)
    while True:
        try:
            data = os.read(fd, READ_CHUNK_BYTES)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
    table = memoryview(os.pread(table_fd, 4 * TABLE_SLOTS, 0)).cast("i")
    killed = kill_all(held(table), boot_ticks())
    if killed:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(
                f"jobctl keeper {os.getpid()}: the daemon is gone: killed the process "
                f"groups of its attempts: {' '.join(map(str, sorted(killed)))}\n"
            )
            sys.stderr.flush()
    return 0


class Keeper:
    """The daemon's side: make the table, start the keeper, name each attempt's group in
    the table, restart the keeper if it dies, and let it go at shutdown.

    :meth:`hold` and :meth:`release` write one slot of the shared table: no system call,
    nothing for the keeper to read while the daemon lives. ``log`` gets one line for each
    start after the first and each failure."""

    def __init__(self, log: LogFn) -> None:
        self.log = log
        self.pid: int | None = None
        #: readable when the keeper exited; the daemon watches it (:meth:`on_exit`)
        self.pidfd: int | None = None
        self._w: int | None = None
        #: the table's memory file, its slots, and where each group held is
        self._table_fd: int | None = None
        self._slots: memoryview | None = None
        self._slot_of: dict[int, int] = {}
        #: slots given back (used again first, so few pages are ever touched), and the
        #: first never used
        self._free: list[int] = []
        self._next = 0

    def _table(self) -> int:
        """The table's descriptor, made on first use (OSError when it cannot be)."""
        if self._table_fd is None:
            fd = os.memfd_create("jobctl-keeper", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, 4 * TABLE_SLOTS)
                self._slots = memoryview(mmap.mmap(fd, 4 * TABLE_SLOTS)).cast("i")
            except OSError:
                os.close(fd)
                raise
            self._table_fd = fd
        return self._table_fd

    def start(self) -> bool:
        """Start a keeper process on the table (the groups held so far are in it). Returns
        False (and logs) when it cannot start: attempts then die with the daemon only on
        its shutdown, as before."""
        try:
            table = self._table()
        except OSError as e:
            self._warn(f"cannot start the keeper: {e}: attempts outlive a daemon killed outright")
            return False
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                {},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, r, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, table, TABLE_FD),
                ],
                setpgroup=0,
                # blocked until the keeper ignores them: a stop sent while the
                # interpreter starts does not end it
                setsigmask=IGNORED_SIGNALS,
                setsigdef=(*IGNORED_SIGNALS, signal.SIGPIPE),
            )
        except OSError as e:
            os.close(w)
            self._warn(f"cannot start the keeper: {e}: attempts outlive a daemon killed outright")
            return False
        finally:
            os.close(r)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as e:  # as for an attempt (worker.Child): no pidfd, no child
            os.close(w)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            self._warn(f"cannot watch the keeper: {e}: attempts outlive a daemon killed outright")
            return False
        self.pid, self.pidfd, self._w = pid, pidfd, w
        return True

    def hold(self, pgid: int) -> None:
        """An attempt started in process group ``pgid``: kill it if the daemon dies."""
        if self._slots is None or pgid in self._slot_of:
            return
        if self._free:
            slot = self._free.pop()
        elif self._next < TABLE_SLOTS:
            slot, self._next = self._next, self._next + 1
        else:  # more attempts at once than slots: this one dies with the daemon's stop
            return
        self._slots[slot] = pgid
        self._slot_of[pgid] = slot

    def release(self, pgid: int) -> None:
        """The attempt's main process exited and is about to be reaped."""
        slot = self._slot_of.pop(pgid, None)
        if slot is not None and self._slots is not None:
            self._slots[slot] = 0
            self._free.append(slot)

    def on_exit(self) -> None:
        """The keeper exited while the daemon runs (killed by someone): reap it and
        start another. The caller stops watching the old :attr:`pidfd` first and
        watches the new one after."""
        status = self._reap()
        self._warn(f"the keeper exited ({status}): starting another")
        self.start()

    def _warn(self, message: str) -> None:
        from .logs import WARNING  # here: the keeper's program imports nothing of jobctl

        self.log(message, WARNING)

    def _reap(self) -> str:
        if self._w is not None:
            with contextlib.suppress(OSError):
                os.close(self._w)
            self._w = None
        text = "gone"
        if self.pid is not None:
            with contextlib.suppress(ChildProcessError):
                _, status = os.waitpid(self.pid, 0)
                code = os.waitstatus_to_exitcode(status)
                text = f"signal {-code}" if code < 0 else f"exit {code}"
        if self.pidfd is not None:
            os.close(self.pidfd)
        self.pid = self.pidfd = None
        return text

    def stop(self) -> None:
        """The daemon stops: close the pipe (the keeper kills what is still held, nothing
        after a clean shutdown, whose attempts were killed and reaped) and reap the
        keeper, waiting for it at most ``EXIT_WAIT_SECONDS``. The caller stops watching
        :attr:`pidfd` first."""
        if self._w is not None:
            with contextlib.suppress(OSError):
                os.close(self._w)
            self._w = None
        if self.pid is None:
            return
        if self.pidfd is not None:
            import select

            ready, _, _ = select.select([self.pidfd], [], [], EXIT_WAIT_SECONDS)
            if not ready:  # it exits on its own; the daemon does not wait longer for it
                os.close(self.pidfd)
                self.pid = self.pidfd = None
                return
            self._reap()


if __name__ == "__main__":
    sys.exit(main())
