"""Running the application with uvicorn on a socket ``serve`` already bound."""

from __future__ import annotations

import signal
import socket
from types import FrameType

import uvicorn
from starlette.applications import Starlette

#: how long open streams (a run page following live output) may take to close on SIGTERM
GRACEFUL_SHUTDOWN_SECONDS = 3


def run(app: Starlette, sock: socket.socket) -> bool:
    """Serve until SIGINT or SIGTERM. Returns False when the server could not start."""
    config = uvicorn.Config(
        app,
        loop="asyncio",
        http="h11",
        ws="none",
        lifespan="off",
        log_level="warning",
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    server = uvicorn.Server(config)
    stops: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        stops.append(signum)

    # uvicorn handles SIGINT/SIGTERM itself (a graceful shutdown), then raises the signal
    # again for the handlers it found: with these, that only notes it and serve exits 0
    previous = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[sock])
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return bool(server.started)
