"""The delivery role: sends the outbox's notifications without ever blocking the loop.

The loop thread does every store call: it leases due notifications (at most one per free
delivery thread), reads what each body needs, and records each outcome. The sending
itself (an HTTP POST, an SMTP conversation, a command) runs on a bounded pool of
``threads`` delivery threads; a finished send puts its outcome on a queue and writes a
byte to a pipe the loop watches, so the loop picks it up at its next wake-up. A receiver
that hangs for its whole timeout holds one delivery thread, never the loop: claims,
finishes and the other deliveries go on. At most ``threads`` sends are under way at once.

A delivery is leased to this daemon while it is sent (its lease ends with the daemon's
row): a daemon that dies mid-send leaves it to the next live daemon, which sends it again
with the same key. Failed sends are tried again after 10 s, doubling up to 10 min, 10 tries
in all (:func:`jobctl.notifications.retry_delay_seconds`).

The scheduler-lease holder also watches time pass for the notifications it causes: runs
``late`` past their grace, attempts ``long`` past ``--warn-after`` (the store judges both
with the database's clock on PostgreSQL).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .clock import iso
from .errors import StoreError
from .models import Attempt, Job, Run
from .notifications import (
    EMAIL_OUTPUT_BYTES,
    Outcome,
    Outgoing,
    email_text,
    retry_delay_seconds,
    webhook_body,
)
from .store import DaemonStore

#: delivery threads of a daemon: sends under way at once
DELIVERY_THREADS = 4
#: how long a delivery is leased to this daemon (the longest send, a command's 30 s or an
#: SMTP conversation's, with room); a daemon that dies frees it at once when found dead
DELIVERY_LEASE_SECONDS = 90.0
#: after a store error, the notifier tries again this much later
RETRY_STORE_SECONDS = 1.0
#: the shortest --warn-after (a DURATION is a whole number of seconds, at least 1): an
#: attempt started now is ``long`` no sooner than this
MIN_WARN_AFTER_SECONDS = 1.0


@dataclass(frozen=True)
class Render:
    """The ``--json`` objects of a job, a run and an attempt, given by the daemon (the notifier
    renders nothing)."""

    job: Callable[[Job, Run | None], dict[str, Any]]
    run: Callable[[Run], dict[str, Any]]
    attempt: Callable[[Attempt], dict[str, Any]]


class Notifier:
    """See the module docstring. Driven by the loop: :meth:`fileno` is watched, and
    :meth:`turn` is called each turn; :meth:`next_at` says when it next has work."""

    def __init__(
        self,
        store: DaemonStore,
        *,
        environ: Mapping[str, str],
        log: Callable[[str], None],
        render: Render,
        threads: int = DELIVERY_THREADS,
        lease_seconds: float = DELIVERY_LEASE_SECONDS,
        first_retry_seconds: float | None = None,
    ) -> None:
        self.store = store
        self.environ = dict(environ)
        self.log = log
        self.render = render
        self.threads = threads
        self.lease_seconds = lease_seconds
        #: a test's short backoff (JOBCTL_NOTIFY_RETRY_SECONDS); None: 10 s (README, Getting told)
        self.first_retry_seconds = first_retry_seconds
        self._pool: DeliveryPool | None = None
        self._done: queue.SimpleQueue[tuple[int, str | None, int]] = queue.SimpleQueue()
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._in_flight: dict[int, Outgoing] = {}
        self._outcomes: list[Outcome] = []
        #: when the next notification is due (None: none known); a hint re-reads it
        self._due_at: datetime | None = None
        #: (the first look comes with the first renewal, at the loop's first turn)
        self._look = False
        self._retry_at: datetime | None = None
        self._overdue_at: datetime | None = None
        self._overdue_look = False
        self._pids: set[int] = set()
        self._pid_lock = threading.RLock()
        self.stopping = False
        #: this daemon holds the scheduler lease (as of its last renewal)
        self.leading = False

    # ------------------------------------------------------------------ the loop's view

    def fileno(self) -> int:
        return self._r

    def on_ready(self, now: datetime, mono: float) -> None:
        """Sends finished: take their outcomes (recorded at this turn's exchange)."""
        with contextlib.suppress(OSError):
            os.read(self._r, 4096)
        while True:
            try:
                nid, error, tries = self._done.get_nowait()
            except queue.Empty:
                break
            self._in_flight.pop(nid, None)
            retry_at = None
            if error is not None:
                delay = retry_delay_seconds(tries)
                if delay is not None:
                    if self.first_retry_seconds is not None:
                        delay = delay * self.first_retry_seconds / 10.0
                    retry_at = now + timedelta(seconds=delay)
            self._outcomes.append(Outcome(nid, error, retry_at))
        self._look = True

    def wake(self) -> None:
        """Something changed (a hint, our own write): look for due notifications."""
        self._look = True

    def seen(self, due: datetime | None) -> None:
        """When a notification may next be leased, read by a turn's transaction: after
        every notification this daemon wrote and every hint it had, so no look of its own
        is owed (on PostgreSQL a look is a wait on the server)."""
        self._due_at = due
        self._look = False

    def time_passed(self) -> None:
        """Runs were recorded or started: look for late and long ones again (leader)."""
        self._overdue_look = True

    def attempts_started(self, now: datetime) -> None:
        """Attempts may have started (claimed here, or hinted from another daemon): a
        ``long`` among them falls due no sooner than the shortest ``--warn-after``, so the
        leader looks again then, and the look says when the next one is due. A burst of
        starts costs one look, not one each."""
        soon = now + timedelta(seconds=MIN_WARN_AFTER_SECONDS)
        if self._overdue_at is None or soon < self._overdue_at:
            self._overdue_at = soon

    def on_renewal(self, leader: bool) -> None:
        """A heartbeat: whether this daemon holds the scheduler lease (it then notes late
        runs and long attempts), and the safety net for a lost wake-up hint."""
        self.leading = leader
        self._look = True
        self._overdue_look = True

    def next_wake(self, now: datetime) -> float | None:
        """Seconds until :meth:`turn` has something to do (None: only when woken). A due
        notification counts only while a delivery thread is free: a thread that frees
        wakes the loop itself."""
        if self._outcomes or self._look or (self.leading and self._overdue_look):
            return 0.0
        due = self._due_at if self._free() > 0 else None
        overdue = self._overdue_at if self.leading else None
        times = [t for t in (due, self._retry_at, overdue) if t is not None]
        return max((min(times) - now).total_seconds(), 0.0) if times else None

    def tracked_pids(self) -> set[int]:
        """Pids of command-channel children under way (the stray sweep leaves them)."""
        with self._pid_lock:
            return set(self._pids)

    @contextlib.contextmanager
    def no_spawns(self) -> Iterator[None]:
        """While held, no delivery thread starts a command (the stray sweep holds it)."""
        with self._pid_lock:
            yield

    # ------------------------------------------------------------------ a turn

    def turn(self, now: datetime) -> None:
        """Record the outcomes gathered, lease what is due for the free threads and start
        sending it; while ``leading``, note late runs and long attempts."""
        if self.stopping:
            return
        leading = self.leading
        if leading and (
            self._overdue_look or (self._overdue_at is not None and now >= self._overdue_at)
        ):
            self._overdue_look = False
            self._look = True  # what it noted is due at once
            try:
                # watched runs whose end ping never came end dead first: their dead is
                # told, and a run ended is no longer late
                settle_at = self.store.settle_watched(now)
                overdue_at = self.store.note_overdue(now)
                times = [t for t in (settle_at, overdue_at) if t is not None]
                self._overdue_at = min(times) if times else None
            except StoreError as e:
                self.log(f"cannot look for late runs: {e}")
                self._overdue_at = now + timedelta(seconds=RETRY_STORE_SECONDS)
        elif not leading:
            self._overdue_at = None
        if self._look and not self._outcomes:
            # a read first: most wake-ups (a burst's ends) have told no one
            self._look = False
            try:
                self._due_at = self.store.next_notification_at(now)
            except StoreError as e:
                self.log(f"cannot read the notifications: {e}")
                self._retry_at = now + timedelta(seconds=RETRY_STORE_SECONDS)
                return
        due = self._due_at
        if not (self._outcomes or (due is not None and now >= due and self._free() > 0)):
            return
        outcomes = self._outcomes
        limit = self._free()
        try:
            claimed, self._due_at = self.store.exchange_notifications(
                now,
                outcomes,
                limit=limit,
                lease_seconds=self.lease_seconds,
            )
        except StoreError as e:
            self.log(f"cannot lease notifications: {e}")
            self._retry_at = now + timedelta(seconds=RETRY_STORE_SECONDS)
            return
        self._retry_at = None
        self._outcomes = []
        self._look = False
        for o in outcomes:
            if o.error is not None:
                again = f"; again at {iso(o.retry_at)}" if o.retry_at else "; failed"
                self.log(f"notification {o.id}: {o.error}{again}")
        for out in claimed:
            self._send(out, now)

    def _free(self) -> int:
        return max(self.threads - len(self._in_flight), 0)

    def _send(self, out: Outgoing, now: datetime) -> None:
        note = out.note
        if out.channel is None:
            self._outcomes.append(Outcome(note.id, "channel removed", dropped=True))
            self._look = True
            return
        try:
            job, last_run, run, attempt, output = self.store.notification_context(
                out.job_id, note.run_id, note.attempt
            )
        except StoreError as e:
            self.log(f"notification {note.id}: cannot read its run: {e}")
            job = last_run = run = attempt = None
            output = b""
        body = webhook_body(
            key=note.key,
            event=note.event,
            text=note.text,
            at=iso(note.created_at),
            job=self.render.job(job, last_run) if job else None,
            run=self.render.run(run) if run else None,
            attempt=self.render.attempt(attempt) if attempt else None,
            detail=note.detail,
        )
        text = email_text(body, output[-EMAIL_OUTPUT_BYTES:])
        if self._pool is None:
            self._pool = DeliveryPool(self.threads)
        # the senders (ssl, http, email, smtp: some 4 MiB) only once there is one to send
        from .delivery import DeliveryError, deliver

        self._in_flight[note.id] = out
        channel = out.channel
        tries = note.tries + 1

        def send() -> None:
            error: str | None = None
            try:
                deliver(
                    channel,
                    body,
                    email_text=text,
                    environ=self.environ,
                    on_pid=self._on_pid,
                    spawn_lock=self._pid_lock,
                )
            except DeliveryError as e:
                error = str(e)
            except Exception as e:  # a bug must not lose the notification: it is retried
                error = f"delivery error: {e.__class__.__name__}"
            self._done.put((note.id, error, tries))
            with contextlib.suppress(OSError):
                os.write(self._w, b"x")

        self._pool.submit(send)

    def _on_pid(self, pid: int, alive: bool) -> None:
        with self._pid_lock:
            if alive:
                self._pids.add(pid)
            else:
                self._pids.discard(pid)

    # ------------------------------------------------------------------ the end

    def close(self) -> None:
        """Stop: sends under way are left to finish on their own (their leases end with
        this daemon's row, so another daemon sends them again, with the same key)."""
        self.stopping = True
        if self._pool is not None:
            self._pool.stop()
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


class DeliveryPool:
    """``threads`` daemon threads that run what :meth:`submit` queues, in order. Daemon
    threads: a send still hanging on a receiver never holds the process at its exit (what
    it was sending is sent again by the next daemon, with the same key)."""

    def __init__(self, threads: int) -> None:
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"jobctl-deliver-{i}", daemon=True)
            for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[[], None]) -> None:
        self._work.put(fn)

    def _serve(self) -> None:
        while (fn := self._work.get()) is not None:
            fn()

    def stop(self) -> None:
        """Let each thread end after what it is doing (none is waited for)."""
        for _ in self._threads:
            self._work.put(None)
