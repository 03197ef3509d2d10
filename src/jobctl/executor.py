"""The executor role: claim runs for free workers, run each attempt as a child, record its end.

It holds the runs this daemon leased, one :class:`~jobctl.worker.Child` each, and watches
their output and exit through callbacks it registers with the loop (``watch``). The end of
an attempt is decided by :func:`jobctl.planner.decide` and persisted by the store in one
fenced write. It never fires windows: the job ids whose runs ended are handed back
(:meth:`Executor.take_ended`) and the loop passes them to the scheduler.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from . import planner
from .envfile import EnvFileError, read_env_file
from .errors import StoreError
from .keeper import Keeper
from .logs import DEBUG, ERROR, INFO, WARNING, LogFn
from .models import Run, RunState, StopReason
from .outcomes import AttemptResult, Decision
from .reaper import group_alive, kill_group, kill_run_processes
from .spawner import Spawner, SpawnError
from .store import DaemonStore
from .store.values import Claimed, ExpiredLease, Finished, FinishItem
from .worker import (
    CANCEL_GRACE_SECONDS,
    BaseEnv,
    Child,
    Hook,
    attempt_env,
    build_env,
    spawn_hook,
    start_error,
)

#: a running attempt's output tail is stored at most this often while it changes
OUTPUT_FLUSH_SECONDS = 1.0
#: a child's pid is written with its attempt's end when it ends within this long of its
#: start (most children of a burst), else on its own (riding with a transaction if one
#: comes); a daemon that dies sooner leaves the leftover kill to the run-id scan
PID_FLUSH_SECONDS = 0.05
#: after a store error, what a turn learned is recorded again this much later
RECORD_RETRY_SECONDS = 1.0

#: a callback for a ready descriptor gets the time the loop read after waking
Ready = Callable[[datetime, float], None]
Watch = Callable[[int, Ready], None]
#: stop watching a descriptor the caller closes (now, or just before)
Unwatch = Callable[[int], None]


class AttemptEnvError(Exception):
    """An attempt's environment file or secrets cannot be read: the attempt fails with this
    error (retried as any failure)."""


@dataclass(frozen=True)
class ExecutorConfig:
    workers: int = 4
    reserved: int = 0
    reserved_priority: int | None = None
    lease_seconds: float = 30.0


@dataclass
class Held:
    """A run this daemon leased, and the child running its attempt."""

    run: Run
    attempt: int
    child: Child
    started_mono: float
    saved_total: int = 0
    saved_mono: float = field(default=0.0)
    #: its end is decided and waits for the turn's transaction
    queued: bool = False
    #: when its main process was seen to exit: the attempt's end time
    exited_at: datetime | None = None


@dataclass
class Ending:
    """An attempt's end, decided and waiting to be recorded (``held`` None: never started)."""

    held: Held | None
    run: Run
    attempt: int
    result: AttemptResult
    decision: Decision
    #: when the attempt ended: its recorded end, however much later the write succeeds
    ended_at: datetime


class Executor:
    """Claims, children, finishes, retries, hooks and cancels (see the module docstring)."""

    def __init__(
        self,
        store: DaemonStore,
        config: ExecutorConfig,
        *,
        environ: Mapping[str, str],
        log: LogFn,
        rng: random.Random,
        watch: Watch,
        unwatch: Unwatch,
        keeper: Keeper | None = None,
        spawner: Spawner | None = None,
        notifications_due: Callable[[datetime | None], None] | None = None,
    ) -> None:
        self.store = store
        #: told, after each turn's transaction, when a notification may next be leased
        self.notifications_due = notifications_due
        #: told each attempt's process group, to kill them if the daemon dies
        self.keeper = keeper
        #: starts the attempts, so their max_rss is their own (see jobctl.spawner)
        self.spawner = spawner
        self.config = config
        self.daemon_id = store.identity.id
        self.host = store.identity.host
        self.environ = dict(environ)
        #: the same, as the base of each attempt's (encoded once for the spawner)
        self.base_env = BaseEnv(self.environ)
        self.log = log
        self.rng = rng
        self.watch = watch
        self.unwatch = unwatch
        self.held: dict[int, Held] = {}
        self.hooks: dict[int, tuple[Hook, int]] = {}  # pidfd -> (hook, run id)
        self.claim_needed = True
        self.cancels_unchecked = True
        self.next_claim_wall: datetime | None = None
        self._ended_jobs: list[int] = []
        self._exited = False
        self._ended_groups: set[int] = set()
        #: ends decided since the last transaction, recorded with the next one
        self._ending: list[Ending] = []
        #: (run_id, attempt) -> (pid, when it started) of children whose pid is not yet
        #: recorded, oldest first
        self._started: dict[tuple[int, int], tuple[int, float]] = {}
        self._record_after = 0.0
        self._batching = False
        #: attempts asked of the spawner and not answered yet, oldest first
        self._spawning: list[Held] = []
        self._spawner_fd: int | None = None

    # ------------------------------------------------------------------ what the loop reads

    @property
    def busy(self) -> bool:
        return bool(self.held)

    @property
    def spawning(self) -> bool:
        """Attempts were asked of the spawner and their pids are not known yet."""
        return bool(self._spawning)

    def tracked_pids(self) -> set[int]:
        """Pids of children this executor reaps itself (attempts and hooks)."""
        return {h.child.pid for h in self.held.values()} | {h.pid for h, _ in self.hooks.values()}

    def running_pgids(self) -> set[int]:
        return {h.child.pid for h in self.held.values() if h.child.returncode is None}

    def running_runs(self) -> set[int]:
        """The runs whose attempt's main process has not exited yet."""
        return {h.run.id for h in self.held.values() if h.child.returncode is None}

    def take_ended(self) -> list[int]:
        """Job ids whose runs ended since the last call (for fixed-delay scheduling)."""
        out, self._ended_jobs = self._ended_jobs, []
        return out

    def take_exited(self) -> bool:
        """Whether a child exited since the last call (the loop then sweeps strays)."""
        out, self._exited = self._exited, False
        return out

    def take_ended_groups(self) -> set[int]:
        """The process groups of the attempts and hooks that exited since the last call:
        each was killed whole at its end, so what is left of one is no stray that left its
        group, only a process not yet reaped."""
        out, self._ended_groups = self._ended_groups, set()
        return out

    def unrecorded(self, mono: float) -> bool:
        """Ends decided that no transaction has recorded yet, or pids that waited long
        enough (a pid rides with the attempt's end when that comes sooner)."""
        return bool(self._ending) or (bool(self._started) and mono >= self._pids_due_at())

    def wake(self, *, cancels: bool = False) -> None:
        """Something changed (a run ended, was created or freed, a renewal came): claim
        at the next turn; with ``cancels``, look for cancel requests too."""
        self.claim_needed = True
        if cancels:
            self.cancels_unchecked = True

    def wants_claim(self, now: datetime) -> bool:
        return self.claim_needed or (
            self.next_claim_wall is not None and now >= self.next_claim_wall
        )

    def next_wake(self, now: datetime, mono: float, *, claiming: bool) -> float | None:
        """Seconds from now until this role needs a turn (0: at once), or None: never
        until something wakes the loop: a claim owed or due (with ``claiming``), a
        child's timeout or kill, a pid or an output tail to record."""
        waits = []
        if claiming:
            if self.wants_claim(now):
                return 0.0
            if self.next_claim_wall is not None:
                waits.append((self.next_claim_wall - now).total_seconds())
        d = self.next_deadline(mono)
        if d is not None:
            waits.append(d - mono)
        return max(min(waits), 0.0) if waits else None

    def next_deadline(self, mono: float) -> float | None:
        """The next monotonic time :meth:`tick` has something to do."""
        times = []
        for h in self.held.values():
            d = h.child.next_deadline()
            if d is not None:
                times.append(d)
            if h.child.returncode is None and h.child.tail.total != h.saved_total:
                times.append(max(h.started_mono, h.saved_mono) + OUTPUT_FLUSH_SECONDS)
        if self._started:
            times.append(max(self._pids_due_at(), self._record_after))
        if self._ending:
            times.append(self._record_after)
        return min(times) if times else None

    def _pids_due_at(self) -> float:
        """When the oldest unrecorded pid is to be written on its own."""
        return next(iter(self._started.values()))[1] + PID_FLUSH_SECONDS

    # ------------------------------------------------------------------ claims

    def begin_batch(self) -> None:
        """The loop is about to run the callbacks of one wake-up: the ends they learn are
        recorded together by :meth:`end_batch` (one transaction), not one by one."""
        self._batching = True

    def end_batch(self, now: datetime, mono: float, *, claim: bool) -> None:
        """Record what the wake-up's callbacks learned; with ``claim``, in the same
        transaction as the claims for the workers they freed (see :meth:`claim`)."""
        self._batching = False
        if not self._ending:
            return
        if claim:
            self.claim(now, mono)
        else:
            self.record(now, mono)

    def claim(self, now: datetime, mono: float) -> None:
        """One transaction for the turn: record the ends and pids learned since the last
        one, claim runs for the free workers, and start them; check cancel requests."""
        self.claim_needed = False
        self._exchange(now, mono, claim=True)

    def record(self, now: datetime, mono: float) -> None:
        """Record the ends learned since the last transaction, and the pids that waited
        ``PID_FLUSH_SECONDS`` (no claims: used while draining, and for children that run
        on)."""
        if self.unrecorded(mono) and mono >= self._record_after:
            self._exchange(now, mono, claim=False)

    def _exchange(self, now: datetime, mono: float, *, claim: bool) -> None:
        outer = self._batching
        self._batching = True  # a spawn failure below is recorded after, not inside
        try:
            self._exchange_once(now, mono, claim=claim)
        finally:
            self._batching = outer
        if not outer and self._ending and mono >= self._record_after:
            self._exchange_once(now, mono, claim=False)

    def _exchange_once(self, now: datetime, mono: float, *, claim: bool) -> None:
        cfg = self.config
        ending = list(self._ending)
        if claim and any(e.run.locks for e in ending):
            # a freed lock is offered to every daemon first: record now, tell them (the
            # loop pokes), and claim next turn, so one daemon cannot keep a lock by
            # re-taking it in the transaction that frees it
            claim = False
            self.claim_needed = True
        running = [h for h in self.held.values() if not h.queued]
        free = cfg.workers - len(running) if claim else 0
        low_limit = None
        if cfg.reserved_priority is not None and cfg.reserved > 0:
            low_running = sum(1 for h in running if h.run.priority < cfg.reserved_priority)
            low_limit = max(0, cfg.workers - cfg.reserved - low_running)
        claimed: list[Claimed] = []
        ended: list[tuple[Run, Decision]] = []
        finished: list[Finished] = []
        try:
            pids_due = bool(self._started) and mono >= self._pids_due_at()
            # an attempt that ended before its pid was written takes the pid into its end
            finishes = [
                FinishItem(
                    e.run.id,
                    e.attempt,
                    e.result,
                    e.decision,
                    pid[0] if pid else None,
                    e.run.job_id,
                    e.ended_at,
                )
                for e in ending
                for pid in [self._started.get((e.run.id, e.attempt))]
            ]
            folded = {(f.run_id, f.attempt) for f in finishes if f.pid is not None}
            sent = (
                [(r, a, pid) for (r, a), (pid, _) in self._started.items() if (r, a) not in folded]
                if pids_due
                else []
            )
            called = free > 0 or bool(ending) or pids_due
            if called:
                res = self.store.record_and_claim(
                    now,
                    finishes=finishes,
                    started=sent,
                    limit=max(free, 0),
                    low_limit=low_limit,
                    reserved_priority=cfg.reserved_priority,
                    on_expired=_decide_expired,
                )
                claimed, ended, finished = res.claimed, res.ended, res.finished
                if self.notifications_due is not None:
                    self.notifications_due(res.next_notification)
        except StoreError as e:
            # what was learned stays queued and is recorded again with the next try
            self.log(f"claim failed: {e}" if claim else f"cannot record yet: {e}", WARNING)
            self._record_after = mono + RECORD_RETRY_SECONDS
            if claim:
                self.next_claim_wall = now + timedelta(seconds=RECORD_RETRY_SECONDS)
            return
        self._ending = self._ending[len(ending) :]
        if called:
            for key in folded:
                del self._started[key]
            for run_id, attempt, _ in sent:
                del self._started[(run_id, attempt)]
        for item, done in zip(ending, finished, strict=True):
            self._after_finish(item, done, now)
        for run, decision in ended:
            self.log(
                f"run {run.id} of {run.job_name}: lease lost on its last attempt: "
                f"{decision.state.value}",
                ERROR if decision.state is RunState.DEAD else WARNING,
            )
            self._ended_jobs.append(run.job_id)
            if decision.state is RunState.DEAD:
                self._on_failure_hook(run, "lost", b"")
        if claim:
            # what these ends freed was claimed in the same transaction (they were
            # recorded first): no claim is owed for them
            self.claim_needed = False
        for c in claimed:
            self._start(c, now, mono)
        if self.spawner is not None and self.spawner.taken:
            # answers read while asking (a turn of many claims): the socket will not say so
            self.spawned(now, mono)
        if not claim:
            return
        try:  # reads only; what was recorded and started above stands
            if self.cancels_unchecked:
                # a cancel request comes with a wake-up (or is seen at the next renewal)
                self.check_held(mono)
                self.cancels_unchecked = False
            if len(running) + len(claimed) < cfg.workers:
                self.next_claim_wall = self.store.next_claim_at(now)
            else:
                # every worker is busy: the next claim comes when one of them finishes
                self.next_claim_wall = None
        except StoreError as e:
            self.log(f"claim failed: {e}", WARNING)
            self.next_claim_wall = now + timedelta(seconds=RECORD_RETRY_SECONDS)

    def _start(self, claimed: Claimed, now: datetime, mono: float) -> None:
        run = claimed.run
        if claimed.stale_pgid and group_alive(claimed.stale_pgid):
            self.log(
                f"run {run.id}: killing process group {claimed.stale_pgid} of a lost attempt",
                WARNING,
            )
            kill_group(claimed.stale_pgid)
        try:
            file_env, secret_env = self._attempt_env(run)
        except AttemptEnvError as e:
            self.log(f"run {run.id} of {run.job_name}: cannot start: {e}", WARNING)
            self._queue(None, run, run.attempt, AttemptResult(None, spawn_error=str(e)), now, mono)
            return
        env = attempt_env(
            self.base_env, run, run.settings, run.attempt, file_env=file_env, secret_env=secret_env
        )
        if claimed.lost_here:
            # also what a daemon killed before it recorded the process group left behind
            n = kill_run_processes(run.id, env.get("JOBCTL_DB", ""))
            if n:
                self.log(f"run {run.id}: killed {n} leftover processes of a lost attempt", WARNING)
        spawner = self.spawner if self.spawner is not None and self.spawner.available else None
        masks = [v.encode("utf-8", "surrogateescape") for v in secret_env.values()]
        on_reap = self.keeper.release if self.keeper is not None else None
        child = None
        try:
            if spawner is not None:
                try:
                    child = Child.request(
                        run.settings, env, mono, spawner, self.unwatch, on_reap, masks
                    )
                except ConnectionError as e:  # spawned here, below, as those waiting
                    self._spawner_lost(e, now, mono)
            if child is None:
                child = Child.start(run.settings, env, mono, self.unwatch, on_reap, masks)
        except OSError as e:
            self._not_started(run, e, now, mono)
            return
        held = Held(run, run.attempt, child, mono)
        self.held[run.id] = held
        assert child.output_fd is not None  # just started
        self.watch(child.output_fd, lambda now, mono: self._on_output(held, now, mono))
        if child.request_ is not None:  # its pid comes with the spawner's answer
            self._spawning.append(held)
            self._watch_spawner()
        else:
            self._running(held, mono)

    def _not_started(self, run: Run, e: OSError, now: datetime, mono: float) -> None:
        error = start_error(e)
        self.log(f"run {run.id} of {run.job_name}: cannot start: {error}", WARNING)
        self._queue(None, run, run.attempt, AttemptResult(None, spawn_error=error), now, mono)

    def _running(self, held: Held, mono: float) -> None:
        """The attempt's child runs, its pid known: watch its exit, name its group to the
        keeper, record its pid with the next transaction."""
        child, run = held.child, held.run
        if self.keeper is not None:
            self.keeper.hold(child.pid)
        assert child.pidfd is not None
        self.watch(child.pidfd, lambda now, mono: self._on_exit(held, now, mono))
        self._started[(run.id, run.attempt)] = (child.pid, mono)
        self.log(
            f"run {run.id} of {run.job_name}: attempt {run.attempt} started, pid {child.pid}", DEBUG
        )

    # ------------------------------------------------------------------ the spawner

    def _watch_spawner(self) -> None:
        """Watch the descriptor the spawner answers on (another once it was replaced)."""
        assert self.spawner is not None
        self.spawner.on_close = self._spawner_closed
        fd = self.spawner.fileno()
        if fd is not None and fd != self._spawner_fd:
            self.watch(fd, self._on_spawner)
            self._spawner_fd = fd

    def _spawner_closed(self, fd: int) -> None:
        if fd == self._spawner_fd:
            self.unwatch(fd)
            self._spawner_fd = None

    def _on_spawner(self, now: datetime, mono: float) -> None:
        self.spawned(now, mono)

    def spawned(self, now: datetime, mono: float) -> None:
        """Take the spawner's answers that came: each attempt asked of it runs, or did
        not start. A spawner lost and not to be had again: the attempts still waiting
        are spawned here."""
        assert self.spawner is not None
        try:
            answers = self.spawner.answers()
        except ConnectionError as e:
            self._spawner_lost(e, now, mono)
            return
        self._watch_spawner()
        self._take(answers, now, mono)

    def _spawner_lost(self, e: ConnectionError, now: datetime, mono: float) -> None:
        """The spawner is gone for good: the attempts it answered run, those that waited
        for it are spawned here."""
        self.log(f"{e}: attempts are spawned by the daemon, their max_rss is not told", WARNING)
        assert self.spawner is not None
        answered, self.spawner.taken = self.spawner.taken, []
        self._take(answered, now, mono)
        self._take([(h.child.request_, None) for h in self._spawning], now, mono)

    def _take(
        self, answers: Sequence[tuple[object, int | SpawnError | None]], now: datetime, mono: float
    ) -> None:
        for req, answer in answers:
            held = self._spawning.pop(0)
            assert held.child.request_ is req
            failed = held.child.spawned(answer)
            if failed is None:
                self._running(held, mono)
                continue
            if self.held.get(held.run.id) is held:
                del self.held[held.run.id]
            self._not_started(held.run, failed, now, mono)

    def _attempt_env(self, run: Run) -> tuple[dict[str, str], dict[str, str]]:
        """What the attempt's environment gets when it starts (README "Secrets"): the
        variables of its ``--env-file`` and the values of its ``--secret`` names, both read
        now, so a changed file or a rotated secret reaches the next attempt. Raises
        AttemptEnvError (the attempt's error) when one cannot be read."""
        settings = run.settings
        file_env: dict[str, str] = {}
        if settings.env_file is not None:
            try:
                file_env = read_env_file(settings.env_file)
            except EnvFileError as e:
                raise AttemptEnvError(f"env-file: {e}") from None
        if not settings.secrets:
            return file_env, {}
        try:
            values = self.store.secret_values(sorted(set(settings.secrets.values())))
        except StoreError as e:
            raise AttemptEnvError(f"secret: cannot read: {e}") from None
        missing = sorted(set(settings.secrets.values()) - set(values))
        if missing:
            raise AttemptEnvError(f"secret: no secret named {missing[0]}")
        # a value is bytes; the environment takes it as the child will see it
        secret_env = {
            env: values[name].decode("utf-8", "surrogateescape")
            for env, name in settings.secrets.items()
        }
        return file_env, secret_env

    # ------------------------------------------------------------------ children

    def _on_output(self, held: Held, now: datetime, mono: float) -> None:
        held.child.on_output()  # at its end the child unwatches and closes the pipe
        self._maybe_finish(held, now, mono)

    def _on_exit(self, held: Held, now: datetime, mono: float) -> None:
        child = held.child
        child.on_exit()
        held.exited_at = now
        self._exited = True
        self._ended_groups.add(child.pid)
        self._maybe_finish(held, now, mono)

    def tick(self, now: datetime, mono: float) -> None:
        """Timeouts and SIGKILL follow-ups; store the output of running attempts at most
        once a second while it changes (none for an attempt in its first second); and
        record the ends that could not be recorded before (a store error)."""
        outputs = []
        for h in list(self.held.values()):
            h.child.tick(mono)
            if h.child.finished:
                self._maybe_finish(h, now, mono)
                continue
            total = h.child.tail.total
            if (
                total != h.saved_total
                and mono >= h.started_mono + OUTPUT_FLUSH_SECONDS
                and mono >= h.saved_mono + OUTPUT_FLUSH_SECONDS
            ):
                outputs.append((h.run.id, h.attempt, h.child.tail.value(final=False), total))
                h.saved_total, h.saved_mono = total, mono
        if outputs:
            try:
                self.store.save_output(outputs)
            except StoreError as e:
                self.log(f"cannot store running output: {e}", WARNING)
        if self._started and mono >= self._pids_due_at():
            self.record(now, mono)

    def _maybe_finish(self, held: Held, now: datetime, mono: float) -> None:
        if not held.child.finished or held.queued:
            return
        result = held.child.result()
        run = held.run
        if result.stop_reason is StopReason.LOST:
            self.log(
                f"run {run.id}: attempt {held.attempt} ended after its lease was lost", WARNING
            )
            self._release(held)
            return
        self._queue(held, run, held.attempt, result, now, mono, ended_at=held.exited_at)

    def _queue(
        self,
        held: Held | None,
        run: Run,
        attempt: int,
        result: AttemptResult,
        now: datetime,
        mono: float,
        *,
        ended_at: datetime | None = None,
    ) -> None:
        """Decide an attempt's end now, as of ``ended_at`` (default ``now``): when its
        main process exited, the end time recorded however late the write succeeds.
        Inside a batch (:meth:`begin_batch`) it is recorded with the batch's transaction,
        else at once."""
        ended = now if ended_at is None else ended_at
        decision = planner.decide(run, attempt, result, ended, self.rng)
        if decision is None:
            if held is not None:
                self._release(held)
            return
        if held is not None:
            held.queued = True
        self._ending.append(Ending(held, run, attempt, result, decision, ended))
        self.claim_needed = True
        if not self._batching:
            self.record(now, mono)

    def _release(self, held: Held) -> None:
        if self.held.get(held.run.id) is held:
            del self.held[held.run.id]
        self.claim_needed = True

    def _after_finish(self, e: Ending, done: Finished, now: datetime) -> None:
        if e.held is not None:
            self._release(e.held)
        self.claim_needed = True
        run, attempt, result, decision = e.run, e.attempt, e.result, e.decision
        if done.state is None:
            self.log(
                f"run {run.id} of {run.job_name}: attempt {attempt} ended "
                f"({result.error or 'ok'}), not recorded: lease lost",
                WARNING,
            )
            return
        self._ended_jobs.append(run.job_id)
        state = done.state
        if state is RunState.SUCCEEDED:
            self.log(f"run {run.id} of {run.job_name}: attempt {attempt} succeeded", DEBUG)
        elif state is RunState.FAILED and decision.retry_at is not None:
            delay = (decision.retry_at - now).total_seconds()
            self.log(
                f"run {run.id} of {run.job_name}: attempt {attempt} failed ({result.error}); "
                f"retry in {delay:.1f}s",
                WARNING,
            )
        elif state is RunState.PENDING:
            self.log(f"run {run.id}: interrupted by shutdown, back to pending")
        elif state is RunState.CANCELLED:
            self.log(f"run {run.id} of {run.job_name}: cancelled")
        elif state is RunState.DEAD:
            self.log(
                f"run {run.id} of {run.job_name}: attempt {attempt} failed ({result.error}); dead",
                ERROR,
            )
            self._on_failure_hook(run, result.error or "failed", result.output)

    # ------------------------------------------------------------------ hooks

    def _on_failure_hook(self, run: Run, error: str, tail: bytes) -> None:
        settings = run.settings
        if not settings.on_failure:
            return
        env = build_env(self.environ, run, settings, run.attempt)
        env["JOBCTL_STATE"] = "dead"
        env["JOBCTL_ERROR"] = error
        hook = spawn_hook(settings.on_failure, settings.shell, env, tail, settings.cwd)
        if hook is None:
            self.log(f"run {run.id}: on-failure command could not start", WARNING)
            self._record_hook(run.id, "not started")
            return
        self.hooks[hook.pidfd] = (hook, run.id)
        self.watch(hook.pidfd, lambda now, mono: self._on_hook_exit(hook.pidfd))
        self.log(f"run {run.id} of {run.job_name}: on-failure command started", DEBUG)

    def _on_hook_exit(self, fd: int) -> None:
        self.unwatch(fd)
        hook, run_id = self.hooks.pop(fd)
        status = hook.wait()
        text = f"signal {-status}" if status < 0 else f"exit {status}"
        self.log(f"run {run_id}: on-failure command ended: {text}", WARNING if status else INFO)
        self._record_hook(run_id, text)
        self._exited = True
        self._ended_groups.add(hook.pid)

    def _record_hook(self, run_id: int, status: str) -> None:
        try:
            self.store.record_hook(run_id, status)
        except StoreError as e:
            self.log(f"run {run_id}: cannot record the on-failure result: {e}", WARNING)

    # ------------------------------------------------------------------ leases and cancels

    def held_attempts(self) -> list[tuple[int, int]]:
        return [(h.run.id, h.attempt) for h in self.held.values()]

    def on_lost(self, run_ids: frozenset[int]) -> None:
        """Held runs whose lease is gone (taken over, deleted): kill their attempts."""
        for run_id in run_ids:
            h = self.held.get(run_id)
            if h is not None and not h.queued and h.child.stop_reason is None:
                self.log(f"run {run_id} attempt {h.attempt}: lease lost, killing it", WARNING)
                h.child.kill_now(StopReason.LOST)

    def on_cancel(self, run_ids: frozenset[int], mono: float) -> None:
        for run_id in run_ids:
            h = self.held.get(run_id)
            if h is not None and not h.queued and h.child.stop_reason is None:
                self.log(f"run {run_id} of {h.run.job_name}: cancel requested")
                h.child.stop(StopReason.CANCELLED, mono, CANCEL_GRACE_SECONDS)

    def check_held(self, mono: float) -> None:
        """Act on cancel requests and on held runs that are gone (``rm --force``)."""
        if not self.held:
            return
        cancel, lost = self.store.held_status(self.held_attempts())
        self.on_lost(lost)
        self.on_cancel(cancel, mono)

    def fence(self) -> None:
        """Self-fencing: the leases could not be renewed for two thirds of their length, so
        another daemon may soon take them: kill every attempt's group now."""
        for h in self.held.values():
            if h.child.returncode is None and h.child.stop_reason is None:
                self.log(
                    f"run {h.run.id}: cannot renew its lease: killing attempt {h.attempt}", WARNING
                )
                h.child.kill_now(StopReason.LOST)

    def interrupt_all(self) -> None:
        """The shutdown grace ran out: kill what still runs; its runs go back to pending."""
        for h in self.held.values():
            if h.child.returncode is None:
                h.child.kill_now(StopReason.INTERRUPTED)

    def kill_all(self) -> None:
        """Last resort on exit: no attempt outlives its daemon."""
        for h in self.held.values():
            kill_group(h.child.pid)


def _decide_expired(lease: ExpiredLease) -> Decision:
    return planner.decide_expired(lease.attempt, lease.max_attempts, lease.cancel_requested)


__all__ = ["Executor", "ExecutorConfig", "Held"]
