"""Wake-ups across hosts: a dedicated ``LISTEN`` connection for the daemon's selector.

Every change is announced with ``NOTIFY jobctl`` in the transaction that makes it, so a
daemon on any host is woken the moment the change is visible. The connection's socket goes
into the daemon's selector (:meth:`Waker.fileno`); :meth:`Waker.drain` reads what arrived.
A lost connection is made again (with the store's backoff rules) and LISTENs again; the
drain after a reconnect answers ``all``, because notifications sent meanwhile are lost and
the daemon must re-read what may have changed.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from .connection import CHANNEL, FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, connect


class Waker:
    """The daemon's end: readable when a notification arrives (or the connection broke)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None
        self._backoff = FIRST_BACKOFF_SECONDS
        self._retry_at = 0.0
        # stands in for the socket while disconnected: never readable, always valid
        self._idle_r, self._idle_w = os.pipe()
        self.reconnects = 0
        self._listen()

    def _listen(self) -> bool:
        try:
            conn = connect(self.url)
            conn.execute(f"LISTEN {CHANNEL}")
        except Exception:
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, MAX_BACKOFF_SECONDS)
            return False
        self._conn = conn
        self._backoff = FIRST_BACKOFF_SECONDS
        return True

    def fileno(self) -> int:
        """The descriptor to select on. It changes after a reconnect: re-register it
        when :meth:`drain` returned ``all``."""
        if self._conn is not None and not self._conn.closed:
            return int(self._conn.pgconn.socket)
        return self._idle_r

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed and not self._conn.broken

    def drain(self) -> list[str]:
        """Every notification waiting (their payloads: ``job:ID``, ``run:ID``, ``all``...).

        When the connection was lost, try to make it again (at most once per backoff
        period); once it is back, answer ``["all"]``: whatever was announced meanwhile is
        gone, so the daemon re-reads everything."""
        if not self.connected:
            with contextlib.suppress(Exception):
                if self._conn is not None:
                    self._conn.close()
            self._conn = None
            if time.monotonic() < self._retry_at or not self._listen():
                return []
            self.reconnects += 1
            return ["all"]
        out: list[str] = []
        try:
            for note in self._conn.notifies(timeout=0, stop_after=None):
                out.append(note.payload or "all")
        except Exception:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
            self._retry_at = 0.0
            out.append("all")
        return out

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        for fd in (self._idle_r, self._idle_w):
            with contextlib.suppress(OSError):
                os.close(fd)
