"""Who may do what through ``jobctl serve`` (README "Tokens"): the role each route needs,
and who a request is.

Every ``GET`` (and ``HEAD``) needs ``read``; the routes that run, cancel, retry, pause,
resume (one job, or all of them: a maintenance window), backfill or test a channel need
``operate``; every other change needs ``admin``.
A route that is not named in :data:`OPERATE_ROUTES` therefore needs ``admin`` to change
anything: a new route is closed until it is opened here.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.routing import BaseRoute, Match, Route

from ..models import Role

#: (method, route path) of the changes a token of role ``operate`` may make
OPERATE_ROUTES = frozenset(
    {
        # the API
        ("POST", "/v1/jobs/{name}/runs"),
        ("POST", "/v1/jobs/{name}/pause"),
        ("POST", "/v1/jobs/{name}/resume"),
        ("POST", "/v1/jobs/{name}/backfill"),
        ("POST", "/v1/runs/{run_id:int}/cancel"),
        ("POST", "/v1/runs/{run_id:int}/retry"),
        ("POST", "/v1/channels/{name}/test"),
        # pause --all and resume --all: pausing and resuming, every job at once
        ("POST", "/v1/maintenance"),
        ("DELETE", "/v1/maintenance"),
        # the dashboard's buttons
        ("POST", "/jobs/{name}/run"),
        ("POST", "/jobs/{name}/pause"),
        ("POST", "/jobs/{name}/resume"),
        ("POST", "/jobs/{name}/retry-dead"),
        ("POST", "/retry-dead"),
        ("POST", "/runs/{run_id:int}/cancel"),
        ("POST", "/runs/{run_id:int}/retry"),
        ("POST", "/channels/{name}/test"),
    }
)
#: what any signed-in role may post: its own session
SESSION_ROUTES = frozenset({("POST", "/login"), ("POST", "/logout")})

#: what the request being answered is done as (set by the guard; read where a change is
#: written, to name its revision's author)
CURRENT: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "jobctl_principal", default=None
)


@dataclass(frozen=True)
class Principal:
    """Who a request is: ``serve``'s own token (``name`` None, role admin) or a named token
    of ``token add``; ``key`` is the SHA-256 a session keeps to find the token again."""

    role: Role
    name: str | None = None
    key: str | None = None

    @property
    def who(self) -> str:
        """Who its revisions name: ``api`` for serve's own token, else ``token:NAME``."""
        return "api" if self.name is None else f"token:{self.name}"

    @property
    def label(self) -> str:
        return "the server's token" if self.name is None else f"token {self.name}"


ADMIN = Principal(Role.ADMIN)


def role_for(method: str, route_path: str) -> Role:
    """The role a request to the route ``route_path`` (as the route table writes it) with
    ``method`` needs."""
    if method in ("GET", "HEAD") or (method, route_path) in SESSION_ROUTES:
        return Role.READ
    if (method, route_path) in OPERATE_ROUTES:
        return Role.OPERATE
    return Role.ADMIN


def route_path(routes: Sequence[BaseRoute], method: str, path: str) -> str | None:
    """The path, as the route table writes it, of the route that answers ``method path``
    (None: no route does, or a mount such as the static files)."""
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    for route in routes:
        if isinstance(route, Route):
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return route.path
    return None


def needed_role(routes: Sequence[BaseRoute], method: str, path: str) -> Role:
    """The role ``method path`` needs (a path no route answers needs ``read``: it is a
    404, a 405 or a static file, and changes nothing)."""
    template = route_path(routes, method, path)
    if template is None:
        return Role.READ if method in ("GET", "HEAD") else Role.ADMIN
    return role_for(method, template)


def refusal(principal: Principal, method: str, path: str) -> str:
    """The one line a request beyond its role is answered with (403)."""
    return f"{principal.label} ({principal.role.value}) may not {method} {path}"
