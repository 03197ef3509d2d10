"""The ping routes of ``jobctl serve`` (README "Watching jobs that jobctl does not run"):
the protocol of Healthchecks.io, so an existing ``curl`` line needs only a new address.

``GET``, ``POST`` or ``HEAD`` on ``/ping/KEY`` (success), ``/ping/KEY/start``,
``/ping/KEY/fail``, ``/ping/KEY/log`` or ``/ping/KEY/N`` (exit code N, 0-255), each with
an optional ``?rid=ID``. No token: the key is the secret. 200 ``OK`` (text/plain); an
unknown key 404 ``not found``; a POST body (at most 100 KB kept) is the attempt's output.

Pings come often and from many hosts at once, so they keep a few open connections to the
database (one per worker thread at a time) rather than opening one per request.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import NotFound, StoreError, UsageError
from ..watching import Ping, make_ping, parse_ping_path
from .context import BodyTooLarge, Web, read_body

if TYPE_CHECKING:
    from ..store import Store

#: open connections kept for pings between requests
KEPT_CONNECTIONS = 8


class Connections:
    """Open stores for the ping routes: one is taken for a call and given back after it
    (a connection is never used by two threads at once); one that failed is closed."""

    def __init__(self, open_store: Callable[[], Store], kept: int = KEPT_CONNECTIONS) -> None:
        self.open_store = open_store
        self.kept = kept
        self._idle: queue.SimpleQueue[Store] = queue.SimpleQueue()

    def record(self, ping: Ping, web: Web, key: str, host: str) -> int | None:
        try:
            store = self._idle.get_nowait()
        except queue.Empty:
            store = self.open_store()
        ok = False
        try:
            run_id = store.commands.ping(ping, web.clock.now(), key=key, host=host)
            ok = True
            return run_id
        except NotFound:
            ok = True
            raise
        finally:
            if ok and self._idle.qsize() < self.kept:
                self._idle.put(store)
            else:
                store.close()


def _text(status: int, text: str) -> Response:
    return PlainTextResponse(text, status_code=status)


def routes(web: Web) -> list[BaseRoute]:
    connections = Connections(web.open_store)

    async def ping(request: Request) -> Response:
        rest = request.url.path[len("/ping/") :]
        parsed = parse_ping_path(rest)
        if parsed is None:
            return _text(404, "not found")
        key, kind, code = parsed
        try:
            body = await read_body(request) if request.method == "POST" else b""
            p = make_ping(kind, exit_code=code, rid=request.query_params.get("rid"), body=body)
        except BodyTooLarge:
            return _text(413, "request body too large")
        except UsageError as e:
            return _text(400, str(e))
        host = request.client.host if request.client else "unknown"
        try:
            await run_in_threadpool(connections.record, p, web, key, host)
        except NotFound:
            return _text(404, "not found")
        except StoreError as e:
            return _text(503, f"database error: {' '.join(str(e).split())}")
        return _text(200, "OK")

    methods = ["GET", "POST", "HEAD"]
    return [
        Route("/ping/{key}", ping, methods=methods),
        Route("/ping/{key}/{what}", ping, methods=methods),
    ]


__all__ = ["Connections", "routes"]
