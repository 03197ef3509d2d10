"""Strays: processes that left their attempt's process group and were reparented to us.

The daemon is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so a double-forked,
``setsid``'d grandchild of an attempt becomes its child instead of init's. The reaper kills
and reaps those, and only those: never ``waitpid(-1)``, which would steal the exit status
of a tracked child.
"""

from __future__ import annotations

import contextlib
import os
import signal

from .worker import kill_group

PR_SET_CHILD_SUBREAPER = 36


def _child_pids() -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    return out


def _pgid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


class StrayReaper:
    """Kill and reap orphaned descendants. The caller watches the pidfds :meth:`sweep`
    returns and calls :meth:`reap` when one is readable."""

    def __init__(self) -> None:
        self._strays: dict[int, int] = {}  # pidfd -> pid

    def enable(self) -> bool:
        """Become a child subreaper. Returns False when the kernel refuses."""
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
        except (OSError, AttributeError):
            return False

    def sweep(self, tracked_pids: set[int], running_pgids: set[int]) -> list[int]:
        """Kill our children that are neither tracked nor in the group of a running
        attempt (an orphan still in a running attempt's group dies with it). Returns the
        pidfds of the killed ones, to watch."""
        fds = []
        known = tracked_pids | set(self._strays.values())
        for pid in _child_pids():
            if pid in known:
                continue
            pgid = _pgid_of(pid)
            if pgid is None or pgid in running_pgids:
                continue
            if pgid == pid:
                kill_group(pid)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                continue
            self._strays[fd] = pid
            fds.append(fd)
        return fds

    def pid_of(self, fd: int) -> int:
        return self._strays.get(fd, -1)

    def reap(self, fd: int) -> None:
        pid = self._strays.pop(fd, None)
        if pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        with contextlib.suppress(OSError):
            os.close(fd)
