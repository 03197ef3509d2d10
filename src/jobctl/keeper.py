"""The keeper: a small process that outlives its daemon and kills the daemon's attempts.

A daemon that is killed outright (SIGKILL, the OOM killer) runs no shutdown: its attempts
would go on running, reparented to init, while another daemon runs the same runs again
once their leases expire. The keeper is started by the daemon and holds the read end of a
pipe whose only write end the daemon holds. The daemon writes one line per change:

- ``+PGID`` right after it started an attempt (its process group is its pid);
- ``-PGID`` when the attempt's main process exited, *before* the daemon reaps it (until
  then the pid, and so the group id, cannot be given to another process).

When the daemon dies, however it dies, the kernel closes the write end and the keeper
reads end of file: it SIGKILLs every group still listed and exits. A normal shutdown ends
the same way with an empty list. The keeper never signals a group whose id was reused:
it notes the start time of each group's leader when it learns of it, and skips a group
whose id now names a process that started at another time.

It is started as ``python -I -S keeper.py`` with its own process group (a terminal's
Ctrl-C is not for it; it ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT, blocked from its
first instruction, so that a service manager's stop lets the daemon finish first) and
only three descriptors: the pipe on stdin, ``/dev/null`` on stdout, the daemon's stderr
for its one line. It holds none of the daemon's database files, sockets or listening
ports, and imports nothing from jobctl.

This module is both the keeper's program (:func:`main`) and the daemon's side of it
(:class:`Keeper`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the keeper's program runs alone (python -I -S): nothing of jobctl
    from .logs import LogFn

#: signals the keeper ignores: a stop or hang-up is the daemon's to act on; the keeper
#: ends when the daemon's pipe does
IGNORED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
READ_CHUNK_BYTES = 65536
#: the keeper's pause after each read: what the daemon writes meanwhile is read at once
READ_PAUSE_SECONDS = 0.01
#: how long a daemon that stops waits for its keeper to exit
EXIT_WAIT_SECONDS = 2.0


def start_time(pid: int, proc_root: str = "/proc") -> int | None:
    """When ``pid`` started (clock ticks since boot, field 22 of ``/proc/PID/stat``), or
    None when there is no such process."""
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat.rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


class Groups:
    """The keeper's list: the process groups to kill, each with its leader's start time.

    :meth:`feed` takes the pipe's bytes as they come (lines may be split across reads);
    :meth:`kill_all` kills what is left when the pipe ends."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self.held: dict[int, int | None] = {}
        self._partial = b""

    def feed(self, data: bytes) -> None:
        """The lines of ``data``; a group's start time is read once the whole chunk is
        taken, for the groups still held then: a ``+`` and its ``-`` in one chunk (an
        attempt that started and ended between two reads) cost no read of ``/proc``. Its
        leader is not reaped before the daemon wrote its ``-``, so until that line is read
        the pid is still the leader's."""
        *lines, self._partial = (self._partial + data).split(b"\n")
        new: set[int] = set()
        for line in lines:
            try:
                pgid = int(line[1:])
            except ValueError:
                continue
            if line.startswith(b"+") and pgid > 1:
                self.held[pgid] = None
                new.add(pgid)
            elif line.startswith(b"-"):
                self.held.pop(pgid, None)
                new.discard(pgid)
        for pgid in new:
            self.held[pgid] = start_time(pgid, self.proc_root)

    def kill_all(self) -> list[int]:
        """SIGKILL every group held, but one whose id now names a process that started at
        another time than its leader (the id was reused). Returns the groups signalled."""
        killed = []
        for pgid, started in self.held.items():
            now = start_time(pgid, self.proc_root)
            if now is not None and started is not None and now != started:
                continue  # the leader is gone and its pid is another process's now
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
                killed.append(pgid)
        self.held.clear()
        return killed


def main(fd: int = 0) -> int:
    """The keeper process: read the daemon's lines until end of file, then kill."""
    # they came blocked (see Keeper.start), so none could end us before this line; what
    # is pending is dropped here
    for sig in IGNORED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, IGNORED_SIGNALS)
    groups = Groups()
    while True:
        try:
            data = os.read(fd, READ_CHUNK_BYTES)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
        groups.feed(data)
        # a busy daemon's lines are taken a chunk at a time, not one wake-up a line (a
        # burst writes two a run); the end of file is seen at most this much later
        time.sleep(READ_PAUSE_SECONDS)
    killed = groups.kill_all()
    if killed:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(
                f"jobctl keeper {os.getpid()}: the daemon is gone: killed the process "
                f"groups of its attempts: {' '.join(map(str, sorted(killed)))}\n"
            )
            sys.stderr.flush()
    return 0


class Keeper:
    """The daemon's side: start the keeper, tell it each attempt's group, restart it if
    it dies, and let it go at shutdown.

    :meth:`hold` and :meth:`release` never block the daemon: the pipe is non-blocking and
    what does not fit waits in memory for the next write. ``log`` gets one line for each
    start after the first and each failure."""

    def __init__(self, log: LogFn) -> None:
        self.log = log
        self.pid: int | None = None
        #: readable when the keeper exited; the daemon watches it (:meth:`on_exit`)
        self.pidfd: int | None = None
        self._w: int | None = None
        self._held: set[int] = set()
        self._unsent = b""

    def start(self) -> bool:
        """Start a keeper process and tell it the groups held so far. Returns False (and
        logs) when it cannot start: attempts then die with the daemon only on its
        shutdown, as before."""
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                {},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, r, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
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
        os.set_blocking(w, False)
        self.pid, self.pidfd, self._w = pid, pidfd, w
        self._unsent = b"".join(b"+%d\n" % pgid for pgid in sorted(self._held))
        self.flush()
        return True

    def hold(self, pgid: int) -> None:
        """An attempt started in process group ``pgid``: kill it if the daemon dies."""
        self._held.add(pgid)
        self._send(b"+%d\n" % pgid)

    def release(self, pgid: int) -> None:
        """The attempt's main process exited and is about to be reaped."""
        if pgid in self._held:
            self._held.discard(pgid)
            self._send(b"-%d\n" % pgid)

    def _send(self, line: bytes) -> None:
        if self._w is None:
            return
        self._unsent += line
        self.flush()

    @property
    def behind(self) -> bool:
        """Lines wait for room in the pipe (the loop calls :meth:`flush` each turn)."""
        return bool(self._unsent)

    def flush(self) -> None:
        """Write what waits, as much as the pipe takes now."""
        if self._w is None or not self._unsent:
            return
        try:
            n = os.write(self._w, self._unsent)
        except BlockingIOError:
            return  # the keeper is behind: the rest goes with the next line
        except OSError:  # it died: on_exit starts another, which is told everything
            self._unsent = b""
            return
        self._unsent = self._unsent[n:]

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
        self._unsent = b""
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
