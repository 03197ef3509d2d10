"""The ping routes of ``jobctl serve`` (README "Watching jobs that jobctl does not run"):
the protocol of Healthchecks.io, so an existing ``curl`` line needs only a new address.

``GET``, ``POST`` or ``HEAD`` on ``/ping/KEY`` (success), ``/ping/KEY/start``,
``/ping/KEY/fail``, ``/ping/KEY/log`` or ``/ping/KEY/N`` (exit code N, 0-255), each with
an optional ``?rid=ID``. No token: the key is the secret. 200 ``OK`` (text/plain); an
unknown key 404 ``not found``; a POST body (at most 100 KB kept) is the attempt's output.

Pings come often and from many hosts at once, so they are answered in front of the rest
of the application (no routing, no session lookup: the token guard does not apply), and
written by a few threads of their own, each keeping its own open connection to the
database rather than opening one per request.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import NotFound, StoreError, UsageError
from ..watching import Ping, make_ping, parse_ping_path
from .context import MAX_BODY_BYTES, Web

if TYPE_CHECKING:
    from ..store import Store

#: threads (each with its own connection) that write pings on PostgreSQL: two keep the
#: server busy while one waits on it, and leave each batch large (8 threads cost 1.6 ms of
#: CPU a ping in all, 2 threads 1.1 ms, bench/pings.py); SQLite has one writer at a time,
#: so one thread writes there (several would only wait on its lock)
PG_PING_THREADS = 2
#: pings written in one transaction at most
BATCH_PINGS = 128

_HEADERS = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
]

_Item = tuple[Ping, str, str, asyncio.AbstractEventLoop, "asyncio.Future[int | None]"]


class _Writers:
    """The threads that write pings: each takes every ping waiting and writes them in one
    transaction (group commit: under load a commit carries many pings, so the rate is not
    bounded by one commit a ping), over a connection of its own, opened again after a
    database error. An unknown key fails only its own ping; a batch that fails whole is
    written again one ping at a time, so one bad ping never fails the others."""

    def __init__(self, open_store: Callable[[], Store], web: Web) -> None:
        self.open_store = open_store
        self.web = web
        self.queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._started = False
        self._lock = threading.Lock()

    def submit(self, item: _Item) -> None:
        if not self._started:
            self._start()
        self.queue.put(item)

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            first = self.open_store()
            n = 1 if first.backend == "sqlite" else PG_PING_THREADS
            for i in range(n):
                store = first if i == 0 else None
                threading.Thread(
                    target=self._run, args=(store,), name=f"jobctl-ping-{i}", daemon=True
                ).start()
            self._started = True

    def _run(self, store: Store | None) -> None:
        while True:
            batch = [self.queue.get()]
            while len(batch) < BATCH_PINGS:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            store = self._write(store, batch)

    def _write(self, store: Store | None, batch: list[_Item]) -> Store | None:
        """Write ``batch`` and answer each of its pings; returns the connection to go on
        with (None: open another)."""
        if store is None:
            try:
                store = self.open_store()
            except Exception as e:  # the database cannot be opened: each ping says so
                for item in batch:
                    _settle(item, e)
                return None
        try:
            results = store.commands.ping_many(
                [(p, key, host) for p, key, host, _, _ in batch], self.web.clock.now()
            )
        except StoreError as e:
            store.close()
            if len(batch) == 1:
                _settle(batch[0], e)
                return None
            again: Store | None = None
            for item in batch:
                again = self._write(again, [item])
            return again
        except Exception as e:
            for item in batch:
                _settle(item, e)
            return store
        for item, result in zip(batch, results, strict=True):
            _settle(item, result)
        return store


def _settle(item: _Item, result: int | BaseException | None) -> None:
    """Hand a ping's outcome to the request waiting for it, on its event loop."""
    loop, fut = item[3], item[4]

    def done() -> None:
        if fut.done():
            return
        if isinstance(result, BaseException):
            fut.set_exception(result)
        else:
            fut.set_result(result)

    loop.call_soon_threadsafe(done)


class Pings:
    """ASGI middleware in front of the application: answers ``/ping/...`` itself and
    passes every other request on."""

    def __init__(self, app: ASGIApp, web: Web) -> None:
        self.app = app
        self.writers = _Writers(web.open_store, web)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/ping/"):
            await self.app(scope, receive, send)
            return
        status, text = await self._answer(scope, receive)
        body = b"" if scope["method"] == "HEAD" else text.encode()
        headers = [*_HEADERS, (b"content-length", str(len(text.encode())).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _answer(self, scope: Scope, receive: Receive) -> tuple[int, str]:
        method = scope["method"]
        if method not in ("GET", "POST", "HEAD"):
            return 405, "method not allowed"
        parsed = parse_ping_path(scope["path"][len("/ping/") :])
        if parsed is None:
            return 404, "not found"
        key, kind, code = parsed
        body = b""
        if method == "POST":
            got = await _read_body(receive)
            if got is None:
                return 413, "request body too large"
            body = got
        rid = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("rid", [None])[-1]
        try:
            ping = make_ping(kind, exit_code=code, rid=rid, body=body)
        except UsageError as e:
            return 400, str(e)
        client = scope.get("client")
        host = client[0] if client else "unknown"
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int | None] = loop.create_future()
        self.writers.submit((ping, key, host, loop, fut))
        try:
            await fut
        except NotFound:
            return 404, "not found"
        except StoreError as e:
            return 503, f"database error: {' '.join(str(e).split())}"
        return 200, "OK"


async def _read_body(receive: Receive) -> bytes | None:
    """The request body, None past MAX_BODY_BYTES (refused before the store sees it)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


__all__ = ["Pings"]
