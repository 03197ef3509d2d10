"""Wake-ups: hints that something changed in the database, sent to running daemons.

A daemon binds a Unix datagram socket in the Linux abstract namespace (no file to clean
up) and publishes its address in the database. After the CLI commits a change it sends a
short datagram to each live daemon: ``job:ID``, ``run:ID`` or ``all``. The table stays the
truth; a lost datagram only delays the daemon until its next lease renewal.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable

MAX_MESSAGE_BYTES = 256


class WakeSocket:
    """The daemon's end: non-blocking, readable when a hint arrives."""

    def __init__(self, daemon_id: str) -> None:
        self.address = f"\0jobctl-{daemon_id}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.sock.bind(self.address)
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def published(self) -> str:
        """The address as stored in the database (``@`` stands for the leading NUL)."""
        return "@" + self.address[1:]

    def drain(self) -> list[str]:
        """Every message waiting, decoded."""
        out: list[str] = []
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE_BYTES)
            except (BlockingIOError, InterruptedError):
                return out
            out.append(data.decode("ascii", "replace"))

    def close(self) -> None:
        self.sock.close()


def poke(addresses: Iterable[str], message: str, *, skip: str | None = None) -> None:
    """Send ``message`` to each daemon address; errors are ignored (hints only)."""
    data = message.encode("ascii", "replace")[:MAX_MESSAGE_BYTES]
    sock = None
    try:
        for addr in addresses:
            if not addr or addr == skip:
                continue
            if sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                sock.setblocking(False)
            target = "\0" + addr[1:] if addr.startswith("@") else addr
            with contextlib.suppress(OSError):
                sock.sendto(data, target)
    finally:
        if sock is not None:
            sock.close()


def new_daemon_id() -> str:
    """A unique id for a daemon process: host-independent random hex plus the pid."""
    return f"{os.urandom(6).hex()}-{os.getpid()}"
