"""What the handlers of ``jobctl serve`` share (README, The dashboard and the HTTP API):
:class:`Web` (how to open the store, the token, the sessions), the request body reader, and the
errors a handler may raise with the HTTP status each maps to.

Below :mod:`.app` (the application that routes to the handlers) and above :mod:`.api` and
:mod:`.pages` (the handlers), so neither imports the application.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import Scope

from ..clock import FakeClock, SystemClock
from ..errors import Conflict, JobctlError, NotFound, RevisionChanged, UsageError
from ..specs import hash_token
from .auth import SESSION_COOKIE, Sessions, bearer, same_secret
from .bodies import BadRequest
from .roles import ADMIN, CURRENT, Principal, needed_role

if TYPE_CHECKING:
    from ..store import CommandStore, Store
    from ..store.protocol import DashboardReads

T = TypeVar("T")
AnyClock = SystemClock | FakeClock

#: a request body larger than this is refused (413) before any of it reaches the store
MAX_BODY_BYTES = 1024 * 1024


class BodyTooLarge(Exception):
    pass


class Forbidden(Exception):
    """A cookie-authenticated request that changes state without its CSRF token (403)."""


class Web:
    """What every handler shares: how to open the store, the token, the sessions."""

    def __init__(self, open_store: Callable[[], Store], token: str, clock: AnyClock) -> None:
        self.open_store = open_store
        self.token = token
        self.clock = clock
        self.sessions = Sessions()
        #: the application's route table (set when it is built): what each role may use
        self.routes: Sequence[BaseRoute] = ()

    def may(self, principal: Principal | None, method: str, path: str) -> bool:
        """Whether ``principal`` may make the request ``method path`` (README "Tokens")."""
        if principal is None:
            return False
        return principal.role.allows(needed_role(self.routes, method, path))

    # ---------------------------------------------------------------- auth

    async def identify(self, scope: Scope) -> tuple[str | None, Principal | None]:
        """How the request is signed (``"bearer"``, ``"cookie"`` or None) and who it is:
        the server's own token (admin), or a named token of ``jobctl token add`` with its
        role. A bearer token that is given but wrong is refused even with a good cookie."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        given = bearer(headers.get("authorization"))
        if given is not None:
            if same_secret(given, self.token):
                return "bearer", ADMIN
            principal = await self.named_token(hash_token(given))
            return ("bearer", principal) if principal is not None else (None, None)
        session = self.sessions.lookup(Request(scope).cookies.get(SESSION_COOKIE))
        if session is None:
            return None, None
        if session[1] is None:
            return "cookie", ADMIN
        principal = await self.named_token(session[1])
        return ("cookie", principal) if principal is not None else (None, None)

    async def named_token(self, key: str) -> Principal | None:
        """The named token whose SHA-256 is ``key``, as a principal (None: no such token,
        or it was removed)."""
        now = self.clock.now()

        def find() -> Principal | None:
            handle = self.open_store()
            try:
                found = handle.commands.token_for(key, now)
            finally:
                handle.close()
            return None if found is None else Principal(found.role, found.name, key)

        return await run_in_threadpool(find)

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
        return await self.view(lambda store, _: fn(store))

    async def view(self, fn: Callable[[CommandStore, DashboardReads], T]) -> T:
        """``fn(store, dashboard)``: the commands' face and the dashboard's reads of one
        connection, opened for this call, in a worker thread."""

        def work() -> T:
            handle = self.open_store()
            # every change made through the server is the API's, by its token (revisions)
            principal = CURRENT.get()
            handle.commands.who = "api" if principal is None else principal.who
            handle.commands.source = "api"
            try:
                return fn(handle.commands, handle.dashboard)
            finally:
                handle.close()

        return await run_in_threadpool(work)


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
    """The HTTP status of an error a handler may raise (README, The dashboard and the HTTP API),
    None if unexpected."""
    if isinstance(exc, BadRequest):
        return 400
    if isinstance(exc, Forbidden):
        return 403
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, RevisionChanged):  # If-Match named another revision
        return 412
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
