"""Wake-ups across hosts: a ``LISTEN`` connection, seen by the daemon's selector.

Every change is announced with ``NOTIFY jobctl`` in the transaction that makes it, so a
daemon on any host is woken the moment the change is visible. A small thread holds the
LISTEN connection and passes each notification through a pipe, whose read end is the
:meth:`Waker.fileno` the daemon's selector watches; the descriptor never changes, even
when the connection is made again. A lost connection is retried with a backoff that
doubles up to :data:`~.db.MAX_BACKOFF_SECONDS`; once it is back (LISTEN again) the waker
answers ``all``: what was announced meanwhile is gone, so the daemon re-reads everything.

What the daemon's own connection announced is not passed on (``own_pid``: that connection's
server process, the pid a NOTIFY carries), as a SQLite daemon pokes every daemon but
itself: it knows what it just did, and a wake-up of its own would cost it a turn and a
re-read of each job whose run it just finished.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

from .db import CHANNEL, FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, connect

#: how often the listening thread looks at its stop flag (seconds)
POLL_SECONDS = 0.5


class Waker:
    """The daemon's end: readable when a notification arrived. Close with :meth:`close`."""

    def __init__(self, url: str, own_pid: Callable[[], int] | None = None) -> None:
        self.url = url
        self._own_pid = own_pid
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._queue: list[str] = []
        self._stop = threading.Event()
        #: how many times the LISTEN connection was made again
        self.reconnects = 0
        self._conn: Any = self._listen()  # LISTENing before the daemon announces itself
        self._thread = threading.Thread(target=self._loop, name="jobctl-listen", daemon=True)
        self._thread.start()

    def _listen(self) -> Any:
        try:
            conn = connect(self.url)
            conn.execute(f"LISTEN {CHANNEL}")
        except Exception:
            return None
        return conn

    def _push(self, message: str) -> None:
        with self._lock:
            self._queue.append(message)
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._w, b"!")

    def _loop(self) -> None:
        backoff = FIRST_BACKOFF_SECONDS
        while not self._stop.is_set():
            conn = self._conn
            if conn is None:
                if self._stop.wait(backoff):
                    return
                conn = self._listen()
                if conn is None:
                    backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                    continue
                backoff = FIRST_BACKOFF_SECONDS
                self._conn = conn
                self.reconnects += 1
                self._push("all")
            try:
                for note in conn.notifies(timeout=POLL_SECONDS):
                    if self._own_pid is not None and note.pid == self._own_pid():
                        continue
                    self._push(note.payload or "all")
            except Exception:
                with contextlib.suppress(Exception):
                    conn.close()
                self._conn = None

    def fileno(self) -> int:
        """The descriptor to select on (it stays the same for the waker's life)."""
        return self._r

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def drain(self) -> list[str]:
        """Every notification waiting (``job:ID``, ``run:ID``, ``run``, ``all``); never blocks."""
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._r, 4096):
                pass
        with self._lock:
            out, self._queue = self._queue, []
        return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(POLL_SECONDS * 4)
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
