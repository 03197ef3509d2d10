"""Process groups and strays: signalling a group, finding a run's leftovers, reaping orphans.

The daemon is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a grandchild that left its
attempt (double fork, ``setsid``) is reparented to the daemon instead of init, and
:class:`StrayReaper` kills and reaps it. It owns no selector: :meth:`StrayReaper.sweep`
returns the pidfds of the strays it killed, the caller watches them and hands each back
to :meth:`StrayReaper.reap` once readable.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Collection

PR_SET_CHILD_SUBREAPER = 36


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a whole process group. Returns False when no such group exists (or it is
    not ours to signal); never signals group 0 or 1."""
    if pgid <= 1:
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_alive(pgid: int) -> bool:
    return kill_group(pgid, 0)


def _environ(pid: str, proc_root: str) -> bytes | None:
    """The environment of process ``pid`` as ``/proc`` gives it (None: gone, or not ours
    to read)."""
    try:
        with open(f"{proc_root}/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return None


def _db_item(db: str) -> bytes:
    """``JOBCTL_DB=db`` as the children's environment holds it: encoded as the exec
    encodes (a path that is not UTF-8 is held by Python with surrogates)."""
    return f"JOBCTL_DB={db}".encode("utf-8", "surrogateescape")


def processes_of_run(run_id: int, db: str, proc_root: str = "/proc") -> list[int]:
    """Pids on this host whose environment has both ``JOBCTL_RUN_ID=run_id`` and
    ``JOBCTL_DB=db`` (README, Choices where the contract is silent), other than this process.

    ``db`` is the ``JOBCTL_DB`` value exactly as the run's children were given it (the
    ``build_env`` value): run ids are per database, so the run id alone could name an
    attempt of another database's run. The last resort after a daemon died between
    starting an attempt and recording its process group: every process of the attempt
    inherited both variables. Processes we may not read are skipped.
    """
    want_run = f"JOBCTL_RUN_ID={run_id}".encode()
    want_db = _db_item(db)
    me = os.getpid()
    found = []
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        env = _environ(entry, proc_root)
        if env is None or want_run not in env or want_db not in env:  # cheap test before the split
            continue
        pairs = env.split(b"\0")
        if want_run in pairs and want_db in pairs:
            found.append(int(entry))
    return found


def run_of(pid: int, db: str, proc_root: str = "/proc") -> int | None:
    """The run whose attempt ``pid`` came from, as its environment says
    (``JOBCTL_RUN_ID``, with ``JOBCTL_DB=db``); None when it names none of this database."""
    raw = _environ(str(pid), proc_root)
    if raw is None:
        return None
    env = raw.split(b"\0")
    if _db_item(db) not in env:
        return None
    for item in env:
        if item.startswith(b"JOBCTL_RUN_ID="):
            value = item[len(b"JOBCTL_RUN_ID=") :]
            return int(value) if value.isdigit() else None
    return None


def kill_run_processes(run_id: int, db: str) -> int:
    """SIGKILL the process group of every process left from an earlier attempt of run
    ``run_id`` of database ``db`` (see :func:`processes_of_run`), and the process itself.
    Our own process group is never signalled. Returns how many processes were found."""
    pids = processes_of_run(run_id, db)
    own_group = os.getpgid(0)
    for pid in pids:
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if pgid != own_group:
            kill_group(pgid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def child_pids() -> list[int]:
    """Our direct children, from ``/proc/self/task/*/children``."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    return out


def pgid_of(pid: int) -> int | None:
    """The process group of ``pid`` read from ``/proc`` (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


class StrayReaper:
    """Kills and reaps the orphans reparented to this process.

    Call :meth:`enable` once at start-up, :meth:`sweep` when a child may have left
    orphans (once per loop turn, or on a timer), and :meth:`reap` with each pidfd it
    returned when that pidfd is readable. Only pids read from ``/proc`` are waited for:
    never ``waitpid(-1)``, which would steal the exit status of a tracked child.
    """

    def __init__(self) -> None:
        self.pending: dict[int, int] = {}  # pidfd -> pid of a killed stray, to reap
        self.groups: dict[int, int] = {}  # pidfd -> the process group it was in

    @staticmethod
    def enable() -> bool:
        """Become a child subreaper. Returns False where the kernel refuses it."""
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
        except (OSError, AttributeError):
            return False

    def sweep(
        self,
        tracked_pids: set[int],
        running_pgids: set[int],
        running_runs: Collection[int] = (),
        db: str = "",
    ) -> list[int]:
        """Kill the strays among our children; return the pidfds of those killed.

        A child in ``tracked_pids`` (attempts and hooks the caller waits for) or already
        killed and not yet reaped is left alone. An orphan still in the process group of
        a running attempt (``running_pgids``) is left to it: it dies with the group when
        the attempt ends. So is one that left the group (``setsid``) while its attempt
        runs: its environment names a run in ``running_runs`` of database ``db`` (an
        ``ssh-agent`` the command started and still uses); it is a stray at the first
        sweep after that attempt ended. Any other child is a stray: SIGKILL its group
        when it leads one, else the process. A stray that is already gone is reaped at
        once, and one whose pidfd cannot be opened is reaped if it has exited.
        """
        fds: list[int] = []
        known = set(self.pending.values())
        for pid in child_pids():
            if pid in tracked_pids or pid in known:
                continue
            pgid = pgid_of(pid)
            if pgid is None or pgid in running_pgids:
                continue
            if running_runs and run_of(pid, db) in running_runs:
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
            self.pending[fd] = pid
            self.groups[fd] = pgid
            fds.append(fd)
        return fds

    def pid_of(self, fd: int) -> int | None:
        """The pid a pidfd from :meth:`sweep` stands for (None when not one of ours)."""
        return self.pending.get(fd)

    def reap(self, fd: int) -> int | None:
        """Reap the stray behind ``fd`` (readable: it exited) and close ``fd``.
        Returns its pid, or None when ``fd`` is not one of ours."""
        pid = self.pending.pop(fd, None)
        self.groups.pop(fd, None)
        if pid is None:
            return None
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        os.close(fd)
        return pid

    def close(self) -> None:
        """Reap what has exited and release every pidfd (at shutdown)."""
        for fd in list(self.pending):
            self.reap(fd)
