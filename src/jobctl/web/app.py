"""The ASGI application of ``jobctl serve``: routes, the guard, errors (README, The dashboard and
the HTTP API).

Starlette for routing, responses and server-sent events; Jinja2 (autoescaping) for the
pages. Every handler is thin: parse the request, make one call on the store in a worker
thread over a connection of its own (a SQLite connection is never shared between
threads), render the JSON builders of :mod:`jobctl.output`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Match, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..clock import SystemClock
from . import api as api_routes
from . import console, deliveries, pages, pings
from .context import AnyClock, Web, error_status, error_text
from .roles import CURRENT, refusal

if TYPE_CHECKING:
    from ..store import Store

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


#: every path takes the token as a bearer (the pages the session cookie too)
CHALLENGE = 'Bearer realm="jobctl"'


def _is_public(method: str, path: str) -> bool:
    """What needs no token: liveness, the sign-in form and its post, and the stylesheet and
    script (package files, no data) that the sign-in form uses."""
    if path == "/healthz":
        return method in ("GET", "HEAD")
    if path == "/" and method in ("GET", "HEAD"):
        return True
    if path == "/login" and method == "POST":
        return True
    return path.startswith("/static/") and method in ("GET", "HEAD")


def wants_json(path: str) -> bool:
    return path.startswith("/v1/") or path in ("/v1", "/metrics", "/healthz")


def json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def api(
    handler: Callable[[Web, Request], Awaitable[Response]], web: Web
) -> Callable[[Request], Awaitable[Response]]:
    """An API endpoint: errors become ``{"error": "one line"}`` with their status."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(web, request)
        except Exception as e:
            status = error_status(e)
            if status is None:
                return json_error(500, f"internal error: {type(e).__name__}: {error_text(e)}")
            return json_error(status, error_text(e))

    return endpoint


class Guard:
    """Pure ASGI middleware: the token check (401), the security headers on every answer,
    and ``Server-Timing: app;dur=MS``, the milliseconds the server took to answer. Sets
    ``request.state.auth`` to ``"bearer"``, ``"cookie"`` or None and
    ``request.state.principal`` to who it is; a request beyond that token's role (README
    "Tokens") is 403 and reaches no handler."""

    def __init__(
        self,
        app: ASGIApp,
        web: Web,
        login_page: Callable[[Request], Response],
        forbidden_page: Callable[[Request, str], Response],
    ) -> None:
        self.app = app
        self.web = web
        self.login_page = login_page
        self.forbidden_page = forbidden_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers.extend(h for h in SECURITY_HEADERS if h[0] not in names)
                if b"cache-control" not in names:
                    headers.append((b"cache-control", b"no-store"))
                if message["status"] == 401 and b"www-authenticate" not in names:
                    # RFC 9110: a 401 names how to authenticate, a page's as an API's
                    headers.append((b"www-authenticate", CHALLENGE.encode()))
                # how long the server took to the answer's start (a page is whole by then)
                took_ms = (time.perf_counter() - started) * 1000
                headers.append((b"server-timing", f"app;dur={took_ms:.1f}".encode()))
                message["headers"] = headers
            await send(message)

        auth, principal = await self.web.identify(scope)
        state = scope.setdefault("state", {})
        state["auth"], state["principal"] = auth, principal
        method, path = scope["method"], scope["path"]
        response: Response
        if auth is None and not _is_public(method, path):
            if wants_json(path):
                response = json_error(401, "missing or wrong token")
            else:
                response = self.login_page(Request(scope))
            await response(scope, receive, send_with_headers)
            return
        if principal is not None and not self.web.may(principal, method, path):
            # beyond the token's role: refused before any handler runs, so nothing changes
            message = refusal(principal, method, path)
            if wants_json(path):
                response = json_error(403, message)
            else:
                response = self.forbidden_page(Request(scope), message)
            await response(scope, receive, send_with_headers)
            return
        CURRENT.set(principal)
        await self.app(scope, receive, send_with_headers)


def allowed_methods(app: Starlette, scope: Scope) -> str:
    """The ``Allow`` of a 405: the methods of every route of that path. Starlette's own
    names only the first route that matched the path, and a path here often has one
    route a method (``GET`` and ``POST /v1/jobs``)."""
    methods: set[str] = set()
    for route in app.router.routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches({**scope, "type": "http"})
            if match is not Match.NONE:
                methods |= route.methods
    return ", ".join(sorted(methods))


def create_app(
    open_store: Callable[[], Store], token: str, *, clock: AnyClock | None = None
) -> Starlette:
    """The application over the database ``open_store`` opens (one connection a call)."""
    web = Web(open_store, token, clock or SystemClock())

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        response: Response
        if wants_json(request.url.path):
            response = json_error(exc.status_code, str(exc.detail).lower())
        else:
            response = pages.error_page(web, request, exc.status_code, str(exc.detail))
        if exc.status_code == 405:
            response.headers["allow"] = allowed_methods(app, request.scope)
        return response

    async def server_error(request: Request, exc: Exception) -> Response:
        if wants_json(request.url.path):
            return json_error(500, f"internal error: {type(exc).__name__}")
        return PlainTextResponse("internal error", status_code=500)

    routes = [
        Route("/healthz", lambda request: JSONResponse({"ok": True}), methods=["GET"]),
        *[
            Route(path, api(handler, web), methods=[method])
            for method, path, handler in api_routes.ROUTES
        ],
        *pages.routes(web),
        *console.routes(web),
        *deliveries.routes(),
        Mount("/static", app=StaticFiles(packages=[("jobctl.web", "static")]), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            # the ping protocol answers first: no session, no token (the key is the secret)
            Middleware(pings.Pings, web=web),
            Middleware(
                Guard,
                web=web,
                login_page=lambda r: pages.login_page(web, r),
                forbidden_page=lambda r, message: pages.error_page(web, r, 403, message),
            ),
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.state.web = web
    web.routes = app.router.routes
    return app
