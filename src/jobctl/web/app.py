"""The ASGI application of ``jobctl serve``: routes, the guard, errors (SPEC §11).

Starlette for routing, responses and server-sent events; Jinja2 (autoescaping) for the
pages. Every handler is thin: parse the request, make one call on the store in a worker
thread over a connection of its own (a SQLite connection is never shared between
threads), render the JSON builders of :mod:`jobctl.output`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..clock import FakeClock, SystemClock
from ..errors import Conflict, JobctlError, NotFound, UsageError
from .auth import SESSION_COOKIE, Sessions, bearer, same_secret
from .bodies import BadRequest

if TYPE_CHECKING:
    from ..store import CommandStore, Store

T = TypeVar("T")
AnyClock = SystemClock | FakeClock

#: a request body larger than this is refused (413) before any of it reaches the store
MAX_BODY_BYTES = 1024 * 1024

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


class BodyTooLarge(Exception):
    pass


class Forbidden(Exception):
    """A cookie-authenticated request that changes state without its CSRF token (403)."""


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


class Web:
    """What every handler shares: how to open the store, the token, the sessions."""

    def __init__(self, open_store: Callable[[], Store], token: str, clock: AnyClock) -> None:
        self.open_store = open_store
        self.token = token
        self.clock = clock
        self.sessions = Sessions()

    # ---------------------------------------------------------------- auth

    def authenticate(self, scope: Scope) -> str | None:
        """``"bearer"``, ``"cookie"`` (a live dashboard session) or None.

        A bearer token that is given but wrong is refused even with a good cookie."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        given = bearer(headers.get("authorization"))
        if given is not None:
            return "bearer" if same_secret(given, self.token) else None
        sid = Request(scope).cookies.get(SESSION_COOKIE)
        return "cookie" if self.sessions.csrf_for(sid) is not None else None

    def check_csrf(self, request: Request, given: str | None) -> None:
        """State changes over the session cookie must carry the session's CSRF token (the
        form field, or the X-CSRF-Token header); a bearer token needs none."""
        if request.state.auth != "cookie":
            return
        expected = self.sessions.csrf_for(request.cookies.get(SESSION_COOKIE))
        if expected is None or not same_secret(given, expected):
            raise Forbidden("missing or wrong CSRF token")

    # ---------------------------------------------------------------- the store

    async def db(self, fn: Callable[[CommandStore], T]) -> T:
        """``fn(store)`` in a worker thread, over a connection opened for this call."""

        def work() -> T:
            handle = self.open_store()
            try:
                return fn(handle.commands)
            finally:
                handle.close()

        return await run_in_threadpool(work)

    def poke(self, store: CommandStore, *messages: str) -> None:
        """Wake running daemons after a change, as the CLI does (a hint only)."""
        for m in messages:
            store.notify(m)


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refused (BodyTooLarge) past ``limit`` bytes: at once on its
    Content-Length, else as soon as the streamed chunks pass it."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise BodyTooLarge
        except ValueError:
            raise BadRequest("invalid Content-Length") from None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def error_status(exc: BaseException) -> int | None:
    """The HTTP status of an error a handler may raise (SPEC §11), None if unexpected."""
    if isinstance(exc, BadRequest):
        return 400
    if isinstance(exc, Forbidden):
        return 403
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Conflict):
        return 409
    if isinstance(exc, BodyTooLarge):
        return 413
    if isinstance(exc, UsageError):
        return 422
    if isinstance(exc, JobctlError):
        return 500
    return None


def error_text(exc: BaseException) -> str:
    if isinstance(exc, BodyTooLarge):
        return f"request body over {MAX_BODY_BYTES} bytes"
    return " ".join(str(exc).split()) or type(exc).__name__


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
    """Pure ASGI middleware: the token check (401) and the security headers on every
    answer. Sets ``request.state.auth`` to ``"bearer"``, ``"cookie"`` or None."""

    def __init__(self, app: ASGIApp, web: Web, login_page: Callable[[Request], Response]) -> None:
        self.app = app
        self.web = web
        self.login_page = login_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers.extend(h for h in SECURITY_HEADERS if h[0] not in names)
                if b"cache-control" not in names:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        auth = self.web.authenticate(scope)
        scope.setdefault("state", {})["auth"] = auth
        if auth is None and not _is_public(scope["method"], scope["path"]):
            if wants_json(scope["path"]):
                response: Response = json_error(401, "missing or wrong token")
                response.headers["www-authenticate"] = "Bearer"
            else:
                response = self.login_page(Request(scope))
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


def create_app(
    open_store: Callable[[], Store], token: str, *, clock: AnyClock | None = None
) -> Starlette:
    """The application over the database ``open_store`` opens (one connection a call)."""
    from . import api as api_routes
    from . import pages

    web = Web(open_store, token, clock or SystemClock())

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if wants_json(request.url.path):
            return json_error(exc.status_code, str(exc.detail).lower())
        return pages.error_page(web, request, exc.status_code, str(exc.detail))

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
        Mount("/static", app=StaticFiles(packages=[("jobctl.web", "static")]), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(Guard, web=web, login_page=lambda r: pages.login_page(web, r))],
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.state.web = web
    return app
