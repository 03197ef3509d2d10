"""The daemon: the clock and the dispatcher.

One loop, one thread. Each turn reads the clock once, renews leases when due, turns due
windows into runs (only the scheduler-lease holder), claims runs for free workers, then
sleeps in ``epoll`` until the heap's head is due, a retry or lease expiry comes, a child
writes or exits, a signal arrives, or the CLI sends a wake-up. Nothing is polled: with
nothing due the daemon wakes only for its lease renewals.
"""

from __future__ import annotations

import contextlib
import os
import random
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from . import planner
from .clock import SystemClock, from_us, iso, to_us
from .errors import JobctlError, StoreError
from .models import Job, JobState, Run, RunState, StopReason
from .reaper import group_alive, kill_group, kill_run_processes
from .store import Claimed, Store, WindowRow
from .wake import WakeSocket, new_daemon_id, poke
from .worker import (
    CANCEL_GRACE_SECONDS,
    Child,
    Hook,
    build_env,
    mark_inherited_fds_cloexec,
    spawn_hook,
)

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
MAX_SLEEP_SECONDS = 3600.0
#: due jobs whose windows are recorded in one transaction, one chunk a loop turn
FIRE_BATCH_JOBS = 50


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


@dataclass(frozen=True)
class DaemonConfig:
    workers: int = 4
    reserved: int = 0
    reserved_priority: int | None = None
    lease_seconds: float = 30.0
    shutdown_grace_seconds: float = 30.0
    #: become a child subreaper and kill+reap orphans that left their attempt (see
    #: :meth:`Daemon._sweep_strays`); off only for a daemon driven inside a test process
    reap_strays: bool = True


PR_SET_CHILD_SUBREAPER = 36
#: after a store error in a turn, wait this long before the next turn
STORE_ERROR_BACKOFF_SECONDS = 0.5


def set_child_subreaper() -> bool:
    """Make orphaned descendants (a double-forked, setsid'd grandchild) reparent to us."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


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


class Log:
    """One event a line on stderr; no timestamps under systemd (it adds its own)."""

    def __init__(self, stream=None, environ=None) -> None:
        self.stream = stream or sys.stderr
        env = os.environ if environ is None else environ
        self.stamps = "JOURNAL_STREAM" not in env

    def __call__(self, message: str) -> None:
        line = message
        if self.stamps:
            line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}"
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(line + "\n")
            self.stream.flush()


@dataclass
class _Held:
    run: Run
    attempt: int
    child: Child


class Daemon:
    """See the module docstring. ``run()`` returns the process exit code."""

    def __init__(
        self,
        store: Store,
        config: DaemonConfig,
        *,
        clock: SystemClock | None = None,
        log: Callable[[str], None] | None = None,
        environ: dict[str, str] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock or SystemClock()
        self.log = log or Log()
        self.environ = dict(os.environ if environ is None else environ)
        # a job that calls jobctl (a fan-out) reaches the daemon's own database
        self.environ["JOBCTL_DB"] = str(store.path.resolve())
        self.rng = rng or random.Random()
        self.id = new_daemon_id()
        self.host = socket.gethostname()
        self.heap = planner.FireHeap()
        self.leader = False
        self.held: dict[int, _Held] = {}
        self.hooks: dict[int, Hook] = {}  # pidfd -> process
        self.strays: dict[int, int] = {}  # pidfd -> pid of a killed orphan, to reap
        self.reload_heap = False
        self.stopping = False
        self.stop_deadline: float | None = None
        self.signal_received: int | None = None
        self.next_heartbeat = 0.0
        self.next_claim_wall: datetime | None = None
        self.claim_needed = True
        self.expected_wake: datetime | None = None
        self.missed_until_us = -1
        self._peers: list[str] | None = None
        self.cancels_unchecked = True
        self._peers_until = 0.0
        self.selector = selectors.DefaultSelector()
        self.wake = WakeSocket(self.id)
        self._sig_r, self._sig_w = os.pipe()
        os.set_blocking(self._sig_r, False)
        os.set_blocking(self._sig_w, False)

    # ------------------------------------------------------------------ set-up

    def _install_signals(self) -> None:
        def handler(signum: int, frame: object) -> None:
            # only a flag: the loop notices it (no exception mid-write)
            self.signal_received = signum

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        signal.set_wakeup_fd(self._sig_w, warn_on_full_buffer=False)

    def run(self) -> int:
        self._install_signals()
        mark_inherited_fds_cloexec()
        if self.config.reap_strays and not set_child_subreaper():
            self.log("cannot become a child subreaper: escaped grandchildren are not reaped")
        self.selector.register(self.wake.fileno(), selectors.EVENT_READ, ("wake", None))
        self.selector.register(self._sig_r, selectors.EVENT_READ, ("signal", None))
        now = self.clock.now()
        self.store.register_daemon(
            self.id, os.getpid(), self.host, self.wake.published, now, self.config.lease_seconds
        )
        self.log(
            f"daemon {self.id} started: db={self.store.path} workers={self.config.workers} "
            f"lease={self.config.lease_seconds:g}s"
        )
        try:
            while True:
                try:
                    if not self._turn():
                        break
                except JobctlError as e:
                    # a busy, full or failing database: nothing half-applied (one
                    # transaction per write); log, back off, and carry on with the rest
                    self.log(f"store error: {e}; retrying")
                    self.reload_heap = True
                    self.claim_needed = True
                    time.sleep(STORE_ERROR_BACKOFF_SECONDS)
        finally:
            self._cleanup()
        self.log(f"daemon {self.id} stopped")
        return 0

    def _cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.store.unregister_daemon(self.id)
        for held in self.held.values():
            kill_group(held.child.pid)
        if self.config.reap_strays:
            self._sweep_strays()
        with contextlib.suppress(Exception):
            signal.set_wakeup_fd(-1)
        self.wake.close()
        self.selector.close()
        for fd in (self._sig_r, self._sig_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ------------------------------------------------------------------ the loop

    def _turn(self) -> bool:
        """One turn of the loop. Returns False when the daemon should exit."""
        now = self.clock.now()
        mono = self.clock.monotonic()
        if self.expected_wake is not None:
            late = (now - self.expected_wake).total_seconds()
            if late > planner.MISSED_GAP_SECONDS:
                self.log(f"woke {late:.0f}s late (suspend?): windows since then count as missed")
                self.missed_until_us = to_us(now)
            self.expected_wake = None
        if self.signal_received is not None and not self.stopping:
            self._begin_shutdown(mono)
        if mono >= self.next_heartbeat:
            self._heartbeat(now, mono)
        if self.leader and not self.stopping:
            if self.reload_heap:
                self.heap.load(self.store.schedule_heads())
                self.reload_heap = False
            self._fire_due(now)
        for held in list(self.held.values()):
            held.child.tick(mono)
            if held.child.finished:  # its end could not be recorded last turn
                self._maybe_finish(held)
        if self.stopping:
            if self.stop_deadline is not None and mono >= self.stop_deadline:
                for held in self.held.values():
                    if held.child.returncode is None:
                        held.child.kill_now(StopReason.INTERRUPTED)
                self.stop_deadline = None
            if not self.held:
                return False
        elif self.claim_needed or (
            self.next_claim_wall is not None and now >= self.next_claim_wall
        ):
            self._claim(now, mono)
        self._wait(now, mono)
        return True

    def _wait(self, now: datetime, mono: float) -> None:
        timeout = max(self.next_heartbeat - mono, 0.0)
        if self.leader and not self.stopping:
            head = self.heap.peek()
            if head is not None:
                timeout = min(timeout, max((from_us(head) - now).total_seconds(), 0.0))
        if self.next_claim_wall is not None and not self.stopping:
            timeout = min(timeout, max((self.next_claim_wall - now).total_seconds(), 0.0))
        for held in self.held.values():
            d = held.child.next_deadline()
            if d is not None:
                timeout = min(timeout, max(d - mono, 0.0))
        if self.stop_deadline is not None:
            timeout = min(timeout, max(self.stop_deadline - mono, 0.0))
        if self.claim_needed and not self.stopping:
            timeout = 0.0
        timeout = min(timeout, MAX_SLEEP_SECONDS)
        # from the clock as we go to sleep: a slow turn is busy, not suspended
        self.expected_wake = self.clock.now() + timedelta(seconds=timeout)
        for key, _ in self.selector.select(timeout):
            kind, obj = key.data
            if kind == "wake":
                self._on_wake(self.wake.drain())
            elif kind == "signal":
                with contextlib.suppress(OSError):
                    os.read(self._sig_r, 512)
            elif kind == "output":
                held = obj
                if not held.child.on_output():
                    self._unregister(key.fd)
                self._maybe_finish(held)
            elif kind == "exit":
                held = obj
                self._unregister(key.fd)
                if held.child.output_fd is not None:
                    self._unregister(held.child.output_fd)
                held.child.on_exit()
                if self.config.reap_strays:
                    self._sweep_strays()
                self._maybe_finish(held)
            elif kind == "hook":
                self._unregister(key.fd)
                proc = self.hooks.pop(key.fd)
                proc.wait()
            elif kind == "stray":
                self._unregister(key.fd)
                self.strays.pop(key.fd, None)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(obj, os.WNOHANG)
                os.close(key.fd)

    def _sweep_strays(self) -> None:
        """Kill and reap orphans that were reparented to us (we are a child subreaper).

        Only pids read from ``/proc/self/task/*/children`` that are neither a tracked
        attempt nor a hook: never ``waitpid(-1)``, which would steal the exit status of a
        tracked child. An orphan still in the process group of a running attempt is left
        to it (it dies with the group when the attempt ends); one that left with
        ``setsid``, or whose attempt ended, is killed with its group.
        """
        tracked = {h.child.pid for h in self.held.values()}
        tracked |= {p.pid for p in self.hooks.values()}
        tracked |= set(self.strays.values())
        running = {h.child.pid for h in self.held.values() if h.child.returncode is None}
        for pid in _child_pids():
            if pid in tracked:
                continue
            pgid = _pgid_of(pid)
            if pgid is None or pgid in running:
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
            self.log(f"killed stray process {pid} (it left its attempt's process group)")
            self.strays[fd] = pid
            self.selector.register(fd, selectors.EVENT_READ, ("stray", pid))

    def _unregister(self, fd: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(fd)

    # ------------------------------------------------------------------ leases

    def _heartbeat(self, now: datetime, mono: float) -> None:
        held = [(h.run.id, h.attempt) for h in self.held.values()]
        try:
            leader, lost, cancel = self.store.heartbeat(
                self.id,
                now,
                self.config.lease_seconds,
                want_leader=not self.stopping,
                held=held,
                host=self.host,
                wake_address=self.wake.published,
            )
        except StoreError as e:
            self.log(f"heartbeat failed: {e}")
            self.next_heartbeat = mono + min(1.0, self.config.lease_seconds / 3)
            return
        self.next_heartbeat = mono + self.config.lease_seconds / 3
        if self.config.reap_strays:
            self._sweep_strays()
        for run_id in lost:
            h = self.held.get(run_id)
            if h is not None and h.child.stop_reason is None:
                self.log(f"run {run_id} attempt {h.attempt}: lease lost, killing it")
                h.child.kill_now(StopReason.LOST)
        for run_id in cancel:
            self._cancel_held(run_id, mono)
        if leader and not self.leader:
            self.log("took the scheduler lease")
            self.leader = True
            self._load_schedule(now)
        elif not leader and self.leader:
            self.log("lost the scheduler lease")
            self.leader = False
            self.heap = planner.FireHeap()
        elif leader:
            self._catch_changes(now)
        if not leader and not self.stopping:
            # try again right when the holder's lease runs out: failover within one lease
            with contextlib.suppress(StoreError):
                expiry = self.store.leader_lease_expiry()
                if expiry is not None:
                    wait = (expiry - now).total_seconds() + 0.01
                    self.next_heartbeat = min(self.next_heartbeat, mono + max(wait, 0.05))
        self.claim_needed = True

    def _catch_changes(self, now: datetime) -> None:
        """Re-read the jobs changed lately, in case a wake-up was lost."""
        since = now - timedelta(seconds=2 * self.config.lease_seconds)
        try:
            changed = self.store.jobs_changed_since(since)
        except StoreError:
            return
        for job_id, next_us in changed:
            self.heap.push(job_id, next_us)

    def _load_schedule(self, now: datetime) -> None:
        """On taking the lease: every window that already passed was missed (SPEC §6)."""
        self.missed_until_us = to_us(now)
        self.heap.load(self.store.schedule_heads())
        boot_id = read_boot_id()
        for job in self.store.reboot_jobs():
            if job.last_boot_id == boot_id:
                continue
            ids = self.store.record_windows(
                job.id,
                job.next_run_at,
                [WindowRow(now, RunState.PENDING, planner.RunReason.SCHEDULE, not_before=now)],
                next_run_at=None,
                last_window_at=now,
                missed_increment=0,
                now=now,
                boot_id=boot_id,
            )
            if ids:
                self.log(f"job {job.name}: @reboot run {ids[0]} (boot {boot_id[:8]})")
        self.log(f"scheduling {len(self.heap)} jobs")

    # ------------------------------------------------------------------ scheduling

    def _fire_due(self, now: datetime) -> None:
        # One chunk of due jobs a turn, in one commit: a burst of 1,000 windows is not 1,000
        # commits, the write lock stays short for the CLI, and the claims of the first
        # chunk start children while the next chunk is recorded (the head is still due,
        # so the loop comes straight back).
        due = self.heap.pop_due(to_us(now), FIRE_BATCH_JOBS)
        inserted = False
        with self.store.batch():
            for due_us, job_id in due:
                job = self.store.get_job_by_id(job_id)
                if job is None or job.next_run_at is None:
                    continue
                if to_us(job.next_run_at) != due_us:
                    self.heap.push(job_id, to_us(job.next_run_at))
                    continue
                missed = due_us <= self.missed_until_us
                inserted |= self._fire_job(job, now, missed)
        if inserted:
            self.claim_needed = True
            self.cancels_unchecked = True  # an --overlap replace may have asked for one
            self._poke_others("run")

    def _fire_job(self, job: Job, now: datetime, missed: bool) -> bool:
        plan = planner.plan_due(job, now, missed=missed, rng=self.rng)
        if plan is None:
            self.heap.push(job.id, None if job.next_run_at is None else to_us(job.next_run_at))
            return False
        ids = self.store.record_windows(
            job.id,
            job.next_run_at,
            plan.windows,
            next_run_at=plan.next_run_at,
            last_window_at=plan.last_window_at,
            missed_increment=plan.missed_increment,
            now=now,
            done=plan.done,
            job=job,  # read in this same transaction (_fire_due's batch)
        )
        if ids is None:  # changed under us: take the stored state
            fresh = self.store.get_job_by_id(job.id)
            if fresh is not None and fresh.next_run_at is not None:
                self.heap.push(job.id, to_us(fresh.next_run_at))
            return False
        n_run = sum(1 for w in plan.windows if w.state is RunState.PENDING)
        n_skip = len(plan.windows) - n_run
        what = "missed windows" if missed else "window"
        self.log(
            f"job {job.name}: {what} up to {iso(plan.last_window_at)}: {n_run} to run, "
            f"{n_skip} skipped"
        )
        if plan.next_run_at is not None:
            self.heap.push(job.id, to_us(plan.next_run_at))
        return bool(ids)

    def _reload_job(self, job_id: int) -> None:
        job = self.store.get_job_by_id(job_id)
        if job is None or job.state is not JobState.ACTIVE or job.next_run_at is None:
            self.heap.remove(job_id)
            return
        self.heap.push(job_id, to_us(job.next_run_at))

    def _on_wake(self, messages: list[str]) -> None:
        self.claim_needed = True
        self.cancels_unchecked = True
        if not self.leader:
            return
        for msg in messages:
            if msg == "all":
                self.heap.load(self.store.schedule_heads())
            elif msg.startswith("job:"):
                with contextlib.suppress(ValueError):
                    self._reload_job(int(msg[4:]))

    def _poke_others(self, message: str) -> None:
        mono = self.clock.monotonic()
        if self._peers is None or mono >= self._peers_until:
            # the daemons list changes rarely: re-read it once per renewal period
            self._peers = self.store.wake_addresses(self.clock.now())
            self._peers_until = mono + self.config.lease_seconds / 3
        poke(self._peers, message, skip=self.wake.published)

    def _claim(self, now: datetime, mono: float) -> None:
        self.claim_needed = False
        cfg = self.config
        free = cfg.workers - len(self.held)
        low_limit = None
        if cfg.reserved_priority is not None and cfg.reserved > 0:
            low_running = sum(
                1 for h in self.held.values() if h.run.priority < cfg.reserved_priority
            )
            low_limit = max(0, cfg.workers - cfg.reserved - low_running)
        try:
            if free > 0:
                claimed, dead = self.store.claim_runs(
                    self.id,
                    self.host,
                    now,
                    cfg.lease_seconds,
                    limit=free,
                    low_limit=low_limit,
                    reserved_priority=cfg.reserved_priority,
                )
            else:
                claimed, dead = [], []
            if self.cancels_unchecked:
                # a cancel request comes with a wake-up (or is seen at the next renewal)
                self.cancels_unchecked = False
                self._check_cancels(mono)
            if len(self.held) + len(claimed) < cfg.workers:
                self.next_claim_wall = self.store.next_claim_at(self.id, now)
            else:
                # every worker is busy: the next claim comes when one of them finishes
                self.next_claim_wall = None
        except StoreError as e:
            self.log(f"claim failed: {e}")
            self.next_claim_wall = now + timedelta(seconds=1)
            return
        for run in dead:
            self.log(f"run {run.id} of {run.job_name}: lease lost on its last attempt: dead")
            self._on_failure_hook(run, "lost", b"")
            if self.leader:  # a fixed-delay job may have moved on
                self._reload_job(run.job_id)
            else:
                self._poke_others(f"job:{run.job_id}")
        started: list[tuple[int, int, int]] = []
        for c in claimed:
            try:
                self._start(c, now, mono, started)
            except StoreError as e:  # the run's lease expires and it is retried
                self.log(f"run {c.run.id}: could not be started: {e}")
        try:  # one commit for the whole turn; only a takeover's kill needs the pids
            self.store.set_attempt_processes(self.id, started)
        except StoreError as e:
            self.log(f"cannot record process groups: {e}")

    def _check_cancels(self, mono: float) -> None:
        if not self.held:
            return
        for run_id in self.store.cancel_requests(self.id):
            self._cancel_held(run_id, mono)

    def _cancel_held(self, run_id: int, mono: float) -> None:
        h = self.held.get(run_id)
        if h is not None and h.child.stop_reason is None:
            self.log(f"run {run_id} of {h.run.job_name}: cancel requested")
            h.child.stop(StopReason.CANCELLED, mono, CANCEL_GRACE_SECONDS)

    def _start(
        self, claimed: Claimed, now: datetime, mono: float, started: list[tuple[int, int, int]]
    ) -> None:
        run = claimed.run
        if claimed.stale_pgid and group_alive(claimed.stale_pgid):
            self.log(f"run {run.id}: killing process group {claimed.stale_pgid} of a lost attempt")
            kill_group(claimed.stale_pgid)
        settings = run.settings
        assert settings is not None
        env = build_env(self.environ, run, settings, run.attempt)
        if claimed.lost_here:
            # also what a daemon killed before it recorded the process group left behind
            n = kill_run_processes(run.id, env.get("JOBCTL_DB", ""))
            if n:
                self.log(f"run {run.id}: killed {n} leftover processes of a lost attempt")
        try:
            child = Child.start(settings, env, mono)
        except OSError as e:
            self.log(f"run {run.id} of {run.job_name}: cannot start: {e.strerror or e}")
            self._finish_failed(run, run.attempt, now, None, f"spawn: {e.strerror or e}", b"", 0)
            return
        held = _Held(run, run.attempt, child)
        self.held[run.id] = held
        assert child.output_fd is not None and child.pidfd is not None  # just started
        self.selector.register(child.output_fd, selectors.EVENT_READ, ("output", held))
        self.selector.register(child.pidfd, selectors.EVENT_READ, ("exit", held))
        started.append((run.id, run.attempt, child.pid))
        self.log(f"run {run.id} of {run.job_name}: attempt {run.attempt} started, pid {child.pid}")

    def _maybe_finish(self, held: _Held) -> None:
        if not held.child.finished:
            return
        now = self.clock.now()
        out = held.child.result()
        run = held.run
        tail = held.child.tail.value()
        total = held.child.tail.total
        job_changed = None

        def finish(outcome: RunState, error: str | None, **kw: Any) -> tuple[bool, Job | None]:
            return self.store.finish_attempt(
                run.id,
                held.attempt,
                self.id,
                now,
                exit_code=out.exit_code,
                error=error,
                output=tail,
                output_bytes=total,
                outcome=outcome,
                **kw,
            )

        if held.child.stop_reason is StopReason.LOST:
            self.log(f"run {run.id}: attempt {held.attempt} ended after its lease was lost")
        elif held.child.stop_reason is StopReason.INTERRUPTED:
            finish(RunState.PENDING, "interrupted", interrupted=True)
            self.log(f"run {run.id}: interrupted by shutdown, back to pending")
        elif held.child.stop_reason is StopReason.CANCELLED:
            _, job_changed = finish(RunState.CANCELLED, "cancelled")
            self.log(f"run {run.id} of {run.job_name}: cancelled")
        elif out.ok:
            ok, job_changed = finish(RunState.SUCCEEDED, None)
            self.log(
                f"run {run.id} of {run.job_name}: attempt {held.attempt} succeeded"
                + ("" if ok else " (not recorded: lease lost)")
            )
        else:
            job_changed = self._finish_failed(
                run, held.attempt, now, out.exit_code, out.error or "failed", tail, total
            )
        # only now: a store error above leaves it held, and the next turn records it again
        if self.held.get(held.run.id) is held:
            del self.held[held.run.id]
        if job_changed is not None:
            if self.leader:
                self._reload_job(job_changed.id)
            else:
                self._poke_others(f"job:{job_changed.id}")
        self.claim_needed = True
        self._poke_others("run")

    def _finish_failed(
        self,
        run: Run,
        attempt: int,
        now: datetime,
        exit_code: int | None,
        error: str,
        tail: bytes,
        total: int,
    ) -> Job | None:
        retrying = attempt < run.max_attempts
        if retrying:
            backoff = run.settings.backoff_seconds if run.settings else 10.0
            delay = planner.retry_delay_seconds(attempt, backoff, self.rng)
        ok, job = self.store.finish_attempt(
            run.id,
            attempt,
            self.id,
            now,
            exit_code=exit_code,
            error=error,
            output=tail,
            output_bytes=total,
            outcome=RunState.FAILED if retrying else RunState.DEAD,
            retry_at=now + timedelta(seconds=delay) if retrying else None,
        )
        if retrying:
            self.log(
                f"run {run.id} of {run.job_name}: attempt {attempt} failed ({error}); "
                f"retry in {delay:.1f}s"
            )
            return None
        self.log(f"run {run.id} of {run.job_name}: attempt {attempt} failed ({error}); dead")
        if ok and self.store.get_run(run.id).state is RunState.DEAD:  # not cancelled meanwhile
            self._on_failure_hook(run, error, tail)
        return job

    def _on_failure_hook(self, run: Run, error: str, tail: bytes) -> None:
        settings = run.settings
        if settings is None or not settings.on_failure:
            return
        env = build_env(self.environ, run, settings, run.attempt)
        env["JOBCTL_STATE"] = "dead"
        env["JOBCTL_ERROR"] = error
        proc = spawn_hook(settings.on_failure, settings.shell, env, tail, settings.cwd)
        if proc is None:
            self.log(f"run {run.id}: on-failure command could not start")
            return
        fd = proc.pidfd
        self.hooks[fd] = proc
        self.selector.register(fd, selectors.EVENT_READ, ("hook", None))
        self.log(f"run {run.id} of {run.job_name}: on-failure command started")

    # ------------------------------------------------------------------ shutdown

    def _begin_shutdown(self, mono: float) -> None:
        self.stopping = True
        self.log(
            f"signal {self.signal_received}: no new claims; waiting up to "
            f"{self.config.shutdown_grace_seconds:g}s for {len(self.held)} running"
        )
        self.stop_deadline = mono + self.config.shutdown_grace_seconds
        if self.leader:
            with contextlib.suppress(StoreError):
                self.store.release_leader(self.id)
            self.leader = False
