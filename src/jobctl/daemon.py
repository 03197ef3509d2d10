"""The daemon: one loop, one thread, that drives the scheduler and executor roles.

Each turn reads the clock once, renews the leases when due (heartbeat), lets the
:class:`~jobctl.scheduler.Scheduler` fire due windows while it leads, lets the
:class:`~jobctl.executor.Executor` claim runs for free workers, sweeps stray processes, and
then sleeps in ``epoll`` until the heap's head is due, a retry or a lease expiry comes, a
child writes or exits, a signal arrives or a wake-up hint comes. Each file descriptor
registers its own callback. Nothing is polled: with nothing due the daemon wakes only to
renew its leases.

Shutdown is one phase: running → draining (no new claims; running attempts get
``--shutdown-grace``) → killing (what is left is killed and goes back to pending) → exit.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from .clock import Clock, SystemClock
from .errors import JobctlError, StoreError
from .executor import Executor, ExecutorConfig, Ready
from .keeper import Keeper
from .logs import INFO, WARNING, Log, LogFn
from .notifier import Notifier, Render
from .reaper import StrayReaper
from .retention import RETENTION_SLACK_SECONDS, Retention
from .spawner import Spawner
from .store import Store
from .store.values import DaemonIdentity
from .worker import mark_inherited_fds_cloexec

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
MAX_SLEEP_SECONDS = 3600.0
#: a loop that wakes this much later than it planned counts the gap as missed
#: (jobctl(1), CATCH-UP AND DST)
MISSED_GAP_SECONDS = 60.0
#: after a store error in a turn, wait this long before the next turn
STORE_ERROR_BACKOFF_SECONDS = 0.5
#: strays are swept this long after a child exited (one /proc walk for a burst of exits)
SWEEP_DELAY_SECONDS = 0.1
#: a daemon that committed nothing for this long is idle: the store then does the upkeep
#: it put off meanwhile (see Daemon._sleep)
IDLE_SECONDS = 0.2
#: the end of a wait slept precisely (see :meth:`Poller.select`), and the kernel's slack
#: on a long ``epoll`` timeout (0.1 % of it)
PRECISE_SECONDS = 0.002
EPOLL_SLACK = 0.001


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def new_daemon_id() -> str:
    """A unique id for a daemon process: random hex plus the pid."""
    return f"{os.urandom(6).hex()}-{os.getpid()}"


def is_jobctl_daemon(pid: int) -> bool:
    """Whether ``pid`` on this host is a live ``jobctl … daemon`` process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return b"daemon" in argv and any(b"jobctl" in a for a in argv)


@dataclass(frozen=True)
class DaemonConfig:
    workers: int = 4
    reserved: int = 0
    reserved_priority: int | None = None
    lease_seconds: float = 30.0
    shutdown_grace_seconds: float = 30.0
    #: become a child subreaper and kill+reap orphans that left their attempt; off only
    #: for a daemon driven inside a test process
    reap_strays: bool = True
    #: delivery threads: notifications sent at once, off the loop (README, Getting told)
    notify_threads: int = 4
    #: the first retry of a failed delivery (doubling, at most 60 times this)
    notify_retry_seconds: float = 10.0
    #: ``--tag``: what jobs' ``--on`` may ask of this daemon (``host:HOSTNAME`` is added)
    tags: tuple[str, ...] = ()


def daemon_tags(tags: Sequence[str], host: str) -> tuple[str, ...]:
    """A daemon's tags: those given and ``host:HOSTNAME``, sorted, each once."""
    return tuple(sorted({*tags, f"host:{host}"}))


class Phase(Enum):
    RUNNING = "running"
    DRAINING = "draining"
    KILLING = "killing"


class Poller:
    """``epoll`` with one callback per descriptor: what ``selectors`` does for the loop,
    without its layers on every register, unregister and wait (a burst does four of the
    first two per run)."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        #: fd -> its registration; a new registration is a new object, so a wait's events
        #: can be checked against what is registered when each is dispatched
        self._regs: dict[int, list[Ready]] = {}

    def register(self, fd: int, callback: Ready) -> None:
        self._epoll.register(fd, select.EPOLLIN)
        self._regs[fd] = [callback]

    def forget(self, fd: int) -> None:
        """Stop watching ``fd``, which the caller is about to close. It is taken out of
        epoll first: a child we just spawned can still hold a copy of it (until its exec
        closes it), and that copy would keep the registration, so a new descriptor given
        the same number would be reported with the old one's readiness."""
        if self._regs.pop(fd, None) is not None:
            self._epoll.unregister(fd)

    def select(self, timeout: float) -> list[tuple[int, list[Ready]]]:
        """The registrations of the descriptors that are ready (up to ``timeout`` s).

        On time to a fraction of a millisecond: ``epoll`` rounds its timeout up to whole
        milliseconds and the kernel lets a long one run 0.1 % over (1 ms late on a 1 s
        wait), so the wait ends a little early and the last ``PRECISE_SECONDS`` or so
        are slept precisely (an event then waits at most that long). A short wait (a busy
        loop's timers) is one plain ``epoll`` wait."""
        most = max(len(self._regs), 1)
        if timeout <= 2 * PRECISE_SECONDS:
            return self._ready(self._epoll.poll(timeout, most))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= PRECISE_SECONDS:
                break
            events = self._epoll.poll(left - (left * EPOLL_SLACK + PRECISE_SECONDS / 2), most)
            if events:
                return self._ready(events)
        if left > 0:
            time.sleep(left)
        return self._ready(self._epoll.poll(0, most))

    def _ready(self, events: list[tuple[int, int]]) -> list[tuple[int, list[Ready]]]:
        return [(fd, self._regs[fd]) for fd, _ in events if fd in self._regs]

    def holds(self, fd: int, reg: list[Ready]) -> bool:
        """Whether ``reg`` is still the registration of ``fd``."""
        return self._regs.get(fd) is reg

    def close(self) -> None:
        self._epoll.close()


class Daemon:
    """See the module docstring. ``run()`` returns the process exit code."""

    def __init__(
        self,
        handle: Store,
        config: DaemonConfig,
        *,
        clock: Clock | None = None,
        log: LogFn | None = None,
        environ: Mapping[str, str] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        from .scheduler import Scheduler

        self.id = new_daemon_id()
        self.host = socket.gethostname()
        self.boot_id = read_boot_id()
        # who this daemon is, said once: every write of its face of the store names it
        identity = DaemonIdentity(
            self.id,
            self.host,
            os.getpid(),
            self.boot_id,
            config.lease_seconds,
            config.workers,
            config.reserved,
            config.reserved_priority,
            daemon_tags(config.tags, self.host),
        )
        self.store = store = handle.open_daemon(identity)
        self.config = config
        # on PostgreSQL the server's clock (README, Many hosts on PostgreSQL: One clock)
        self.clock: Clock = clock or store.clock(SystemClock())
        self.log: LogFn = log or Log()
        env = dict(os.environ if environ is None else environ)
        # a job that calls jobctl (a fan-out) reaches the daemon's own database
        env["JOBCTL_DB"] = self.child_db = store.child_location()
        rng = rng or random.Random()
        self.selector = Poller()
        self.phase = Phase.RUNNING
        self.signal_received: int | None = None
        self.kill_deadline: float | None = None
        self.next_heartbeat = 0.0
        self.last_renewal: float | None = None
        self.expected_wake: datetime | None = None
        #: the store's count of commits awaiting upkeep, as last seen, and since when
        #: (monotonic) it has not moved (see _sleep)
        self._upkeep_seen = 0
        self._quiet_since = 0.0
        self.scheduler = Scheduler(
            store, log=self.log, rng=rng, boot_id=self.boot_id, lease_seconds=config.lease_seconds
        )
        self.retention = Retention(store, log=self.log)
        #: outlives the daemon to kill its attempts if it dies without its shutdown
        self.keeper = Keeper(self.log)
        #: a small process that starts the attempts: their max_rss is their own
        self.spawner = Spawner()
        from . import output

        self.notifier = Notifier(
            store,
            environ=env,
            log=self.log,
            render=Render(output.job_json, output.run_json, output.attempt_json),
            threads=config.notify_threads,
            first_retry_seconds=config.notify_retry_seconds,
        )
        self.executor = Executor(
            store,
            ExecutorConfig(
                config.workers, config.reserved, config.reserved_priority, config.lease_seconds
            ),
            environ=env,
            log=self.log,
            rng=rng,
            watch=self.watch,
            unwatch=self.unwatch,
            keeper=self.keeper,
            spawner=self.spawner,
            notifications_due=self.notifier.seen,
        )
        self.reaper = StrayReaper()
        #: the groups of attempts that ended before the last sweep (see _sweep)
        self._ended_groups: set[int] = set()
        self.strays: set[int] = set()
        self.sweep_at: float | None = None
        self.waker = self.store.open_waker()
        self._sig_r, self._sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    # ------------------------------------------------------------------ descriptors

    def watch(self, fd: int, callback: Ready) -> None:
        self.selector.register(fd, callback)

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd``, which the caller then closes (see :meth:`Poller.forget`)."""
        self.selector.forget(fd)

    def _on_wake(self, now: datetime, mono: float) -> None:
        messages = self.waker.drain()
        self.executor.wake(cancels=True)
        self.notifier.wake()
        self.notifier.attempts_started(now)  # another daemon's claim, maybe
        self.scheduler.on_wake(messages, now)

    def _on_signal(self, now: datetime, mono: float) -> None:
        with contextlib.suppress(OSError):
            os.read(self._sig_r, 512)

    def _start_keeper(self) -> None:
        if self.keeper.start() and self.keeper.pidfd is not None:
            self.watch(self.keeper.pidfd, self._on_keeper_exit)

    def _on_keeper_exit(self, now: datetime, mono: float) -> None:
        """Someone killed the keeper: another is started and told every running group."""
        if self.keeper.pidfd is not None:
            self.unwatch(self.keeper.pidfd)
        self.keeper.on_exit()
        if self.keeper.pidfd is not None:
            self.watch(self.keeper.pidfd, self._on_keeper_exit)

    def _on_stray_exit(self, fd: int) -> None:
        self.unwatch(fd)
        self.strays.discard(fd)
        self.reaper.reap(fd)

    # ------------------------------------------------------------------ set-up

    def _install_signals(self) -> None:
        def handler(signum: int, frame: object) -> None:
            # only a flag: the loop notices it (no exception mid-write)
            self.signal_received = signum

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        signal.set_wakeup_fd(self._sig_w, warn_on_full_buffer=False)

    def _take_over_dead_local_daemons(self, now: datetime) -> None:
        """A daemon of this host and boot whose process is gone (or is another program)
        is dead for sure: free its leases at once instead of waiting for them to expire."""
        dead = [
            daemon_id
            for daemon_id, pid in self.store.local_daemons(now)
            if daemon_id != self.id and not is_jobctl_daemon(pid)
        ]
        if dead:
            self.store.forget_daemons(dead)
            self.log(f"daemon {', '.join(dead)} of this host is gone: its leases are free", INFO)

    def run(self) -> int:
        self._install_signals()
        mark_inherited_fds_cloexec()
        self._start_keeper()  # after the line above: it gets none of our descriptors
        if not self.spawner.start():
            self.log(
                f"{self.spawner.failure}: attempts are spawned by the daemon, "
                "their max_rss is not told",
                WARNING,
            )
        if self.config.reap_strays and not self.reaper.enable():
            self.log(
                "cannot become a child subreaper: escaped grandchildren are not reaped", WARNING
            )
        self.watch(self.waker.fileno(), self._on_wake)
        self.watch(self._sig_r, self._on_signal)
        self.watch(self.notifier.fileno(), self.notifier.on_ready)
        now = self.clock.now()
        self._take_over_dead_local_daemons(now)
        self.store.register_daemon(now)
        self.log(
            f"daemon {self.id} started: db={self.store.child_location()} "
            f"workers={self.config.workers} lease={self.config.lease_seconds:g}s"
        )
        try:
            while True:
                try:
                    if not self.turn():
                        break
                except JobctlError as e:
                    # a busy, full or failing database: nothing half-applied (one
                    # transaction per write); log, back off, and carry on with the rest
                    self.log(
                        f"store error: {e}; next turn in {STORE_ERROR_BACKOFF_SECONDS:g}s",
                        WARNING,
                    )
                    self.executor.wake()
                    self.scheduler.reload()
                    self._flush_log()
                    time.sleep(STORE_ERROR_BACKOFF_SECONDS)
        finally:
            self._cleanup()
            self.log(f"daemon {self.id} stopped")
            self._flush_log()
        return 0

    def _cleanup(self) -> None:
        try:
            self.store.unregister_daemon()
        except StoreError as e:
            self.log(f"cannot unregister: {e} (the row expires with its lease)", WARNING)
        self.executor.kill_all()
        self.unwatch(self.notifier.fileno())
        self.notifier.close()
        if self.config.reap_strays:
            self._sweep()
        if self.keeper.pidfd is not None:
            self.unwatch(self.keeper.pidfd)
        self.keeper.stop()
        self.spawner.stop()
        signal.set_wakeup_fd(-1)
        self.waker.close()
        self.selector.close()
        for fd in (self._sig_r, self._sig_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ------------------------------------------------------------------ the loop

    def turn(self) -> bool:
        """One turn of the loop. Returns False when the daemon should exit."""
        now = self.clock.now()
        mono = self.clock.monotonic()
        if self.expected_wake is not None:
            late = (now - self.expected_wake).total_seconds()
            if late > MISSED_GAP_SECONDS:
                self.log(
                    f"woke {late:.0f}s late (suspend?): windows since then count as missed",
                    WARNING,
                )
                self.scheduler.note_gap(now)
            self.expected_wake = None
        self._advance_phase(mono)
        if mono >= self.next_heartbeat:
            self._heartbeat(now, mono)
        running = self.phase is Phase.RUNNING
        if self.scheduler.turn(now, mono, firing=running):
            self.executor.wake(cancels=True)  # an --overlap replace may have asked
            self.notifier.wake()  # missed windows may have been told
            self.notifier.time_passed()
        self.executor.tick(now, mono)
        if running and self.executor.wants_claim(now):
            held = len(self.executor.held)
            self.executor.claim(now, mono)
            if len(self.executor.held) > held:
                self.notifier.attempts_started(now)
        elif self.executor.unrecorded(mono):
            self.executor.record(now, mono)
        self._runs_ended(mono)
        if running:
            self.notifier.turn(now)
        if self.config.reap_strays:
            if self.executor.take_exited() and self.sweep_at is None:
                self.sweep_at = mono + SWEEP_DELAY_SECONDS
            # not while a clone of the spawner may be a child whose pid is not known yet
            # (its answer wakes the loop)
            if self.sweep_at is not None and mono >= self.sweep_at and not self.executor.spawning:
                self.sweep_at = None
                self._sweep()
        if self.phase is not Phase.RUNNING and not self.executor.busy:
            return False
        self._wait(now, mono)
        self._runs_ended(self.clock.monotonic())
        return True

    def _runs_ended(self, mono: float) -> None:
        """Runs that ended: the scheduler moves their jobs on. (Whom their ends told, the
        notifier learned from the turn that recorded them: :meth:`Notifier.seen`.)"""
        self.scheduler.runs_ended(self.executor.take_ended(), mono)

    def _advance_phase(self, mono: float) -> None:
        if self.signal_received is not None and self.phase is Phase.RUNNING:
            self.phase = Phase.DRAINING
            self.kill_deadline = mono + self.config.shutdown_grace_seconds
            self.log(
                f"signal {self.signal_received}: no new claims; waiting up to "
                f"{self.config.shutdown_grace_seconds:g}s for "
                f"{len(self.executor.held_attempts())} running"
            )
            if self.scheduler.lose_lease():
                try:
                    self.store.release_leader()
                except StoreError as e:
                    self.log(f"cannot release the scheduler lease: {e}", WARNING)
            self.retention.on_renewal(False)
        if (
            self.phase is Phase.DRAINING
            and self.kill_deadline is not None
            and mono >= self.kill_deadline
        ):
            self.phase = Phase.KILLING
            self.executor.interrupt_all()

    def _wait(self, now: datetime, mono: float) -> None:
        if self.executor.spawning:
            # the spawner's answers that came during the turn (it answers in tens of
            # microseconds): taken now, not in a wake-up of their own
            self.executor.spawned(now, mono)
        timeout = max(self.next_heartbeat - mono, 0.0)
        running = self.phase is Phase.RUNNING
        # each role answers one question: when does it next need a turn?
        for wait in (
            self.scheduler.next_wake(now, mono, firing=running),
            self.executor.next_wake(now, mono, claiming=running),
            self.notifier.next_wake(now) if running else None,
        ):
            if wait is not None:
                timeout = min(timeout, wait)
        if self.sweep_at is not None and not self.executor.spawning:
            timeout = min(timeout, max(self.sweep_at - mono, 0.0))
        if self.phase is Phase.DRAINING and self.kill_deadline is not None:
            timeout = min(timeout, max(self.kill_deadline - mono, 0.0))
        timeout = min(timeout, MAX_SLEEP_SECONDS)
        if running:
            timeout = self._retain(now, mono, timeout)
        # the timeout was reckoned from the turn's start: what the turn did since, and the
        # upkeep in the sleep (a checkpoint fsyncs), come off it, or the loop would wake
        # that late
        wake_at = mono + timeout
        self._flush_log()
        timeout = max(wake_at - self.clock.monotonic(), 0.0)
        # from the clock as we go to sleep: a slow turn is busy, not suspended
        self.expected_wake = self.clock.now() + timedelta(seconds=timeout)
        events = self._sleep(wake_at, timeout)
        if not events:
            return
        woke, woke_mono = self.clock.now(), self.clock.monotonic()
        self.executor.begin_batch()
        try:
            for fd, reg in events:
                # a callback earlier in this batch may have closed this fd and a new one
                # taken its number: act only on what is still registered as it was
                if not self.selector.holds(fd, reg):
                    continue
                reg[0](woke, woke_mono)
        finally:
            # the ends of this wake-up, and the claims for the workers they freed, in
            # one transaction
            self.executor.end_batch(woke, woke_mono, claim=self.phase is Phase.RUNNING)

    def _sleep(self, wake_at: float, timeout: float) -> list[tuple[int, list[Ready]]]:
        """The events of a sleep of ``timeout`` seconds (until ``wake_at``, monotonic).

        Upkeep the store put off (SQLite: a checkpoint, which fsyncs) runs once nothing
        has been committed for IDLE_SECONDS, when the loop has that long to sleep: never
        between a burst's exits and the claims they free (each turn of a burst commits),
        and in time while a chatty command's output wakes the loop (output commits
        nothing until it is stored)."""
        pending = self.store.upkeep_pending()
        mono = self.clock.monotonic()
        if pending != self._upkeep_seen:
            self._upkeep_seen, self._quiet_since = pending, mono
        due = self._quiet_since + IDLE_SECONDS
        if not pending or due >= wake_at:
            return self.selector.select(timeout)
        if due > mono:
            events = self.selector.select(due - mono)
            if events:
                return events
        try:
            self.store.idle()
        except StoreError as e:
            self.log(f"store upkeep failed: {e}", WARNING)
            self._flush_log()
        return self.selector.select(max(wake_at - self.clock.monotonic(), 0.0))

    def _retain(self, now: datetime, mono: float, timeout: float) -> float:
        """Retention's turn (README, History: what is kept): a step only when nothing else is due
        for RETENTION_SLACK_SECONDS, so no claim or window waits behind it; returns the sleep
        left (none while a pass has more to delete: the next turn comes first)."""
        if timeout < RETENTION_SLACK_SECONDS:
            return timeout
        try:
            started = self.clock.monotonic()
            if self.retention.turn(now, mono):
                self.retention.rest(started, self.clock.monotonic())
        except StoreError as e:
            self.log(f"retention failed: {e}", WARNING)
            self.retention.fail(mono)
        wait = self.retention.next_wake(mono)
        return timeout if wait is None else min(timeout, wait)

    def _stray_callback(self, fd: int) -> Ready:
        def on_exit(now: datetime, mono: float) -> None:
            self._on_stray_exit(fd)

        return on_exit

    def _flush_log(self) -> None:
        flush = getattr(self.log, "flush", None)
        if flush is not None:
            flush()

    def _sweep(self) -> None:
        with self.notifier.no_spawns():  # a command channel's child is not a stray
            tracked = self.executor.tracked_pids() | self.notifier.tracked_pids()
            for helper in (self.keeper.pid, self.spawner.pid):
                if helper is not None:
                    tracked.add(helper)  # a child of ours, but no stray
            fds = self.reaper.sweep(
                tracked,
                self.executor.running_pgids(),
                self.executor.running_runs(),
                self.child_db,
            )
        # what is left of a group killed whole at its attempt's end (a command's child
        # reparented here as its shell died) is no stray: it is reaped without a word
        ended = self.executor.take_ended_groups()
        killed_whole, self._ended_groups = ended | self._ended_groups, ended
        for fd in fds:
            self.strays.add(fd)
            self.watch(fd, self._stray_callback(fd))
            if self.reaper.groups.get(fd) in killed_whole:
                continue
            self.log(
                f"killed stray process {self.reaper.pid_of(fd)} (it left its attempt's group)",
                WARNING,
            )

    # ------------------------------------------------------------------ leases

    def _heartbeat(self, now: datetime, mono: float) -> None:
        lease = self.config.lease_seconds
        try:
            renewal = self.store.heartbeat(
                now,
                want_leader=self.phase is Phase.RUNNING,
                held=self.executor.held_attempts(),
            )
        except StoreError as e:
            self.log(f"heartbeat failed: {e}", WARNING)
            self.next_heartbeat = mono + min(1.0, lease / 3)
            since = mono - (self.last_renewal if self.last_renewal is not None else mono)
            if self.last_renewal is not None and since >= 2 * lease / 3:
                self.executor.fence()
            return
        self.last_renewal = mono
        self.next_heartbeat = mono + lease / 3
        self.executor.on_lost(renewal.lost)
        self.executor.on_cancel(renewal.cancel, mono)
        self.executor.wake()
        self.scheduler.on_renewal(renewal.leader, now)
        self.retention.on_renewal(renewal.leader)
        self.notifier.on_renewal(renewal.leader)
        if not renewal.leader and self.phase is Phase.RUNNING:
            # try again right when the holder's lease runs out: failover within one lease
            try:
                expiry = self.store.leader_lease_expiry()
            except StoreError:
                expiry = None
            if expiry is not None:
                wait = (expiry - now).total_seconds() + 0.01
                self.next_heartbeat = min(self.next_heartbeat, mono + max(wait, 0.05))
