"""The dashboard: server-rendered pages, forms that change state, live output (README, The
dashboard's pages).

Pages are Jinja2 templates with autoescaping, so nothing a job or its output holds is
ever read as HTML. Every form that changes state carries the session's CSRF token. A
running attempt's output reaches the run page as server-sent events
(``/runs/ID/events``), polled from the store every half second.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote

import anyio
import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from .. import output
from ..durations import format_duration
from ..errors import JobctlError, NotFound
from ..models import FINISHED_RUN_STATES, RunState
from ..specs import hash_token
from ..zones import local_zone_name, zone_exists
from .api import pause_or_resume, run_detail, run_id_of
from .auth import CSRF_FIELD, SESSION_COOKIE, SESSION_SECONDS, same_secret
from .bodies import BadRequest, query_int
from .charts import bytes_text, seconds_text
from .context import Forbidden, Web, error_status, error_text, read_body

if TYPE_CHECKING:
    from ..store import CommandStore as Store

#: how often the live output stream re-reads the store, and sends a keep-alive comment
EVENTS_POLL_SECONDS = 0.5
EVENTS_KEEPALIVE_SECONDS = 15.0

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("jobctl.web", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def relative(dt: datetime | None, now: datetime) -> str:
    """``in 4m``, ``3h ago``, ``now``: the largest unit, rounded down."""
    if dt is None:
        return ""
    seconds = (dt - now).total_seconds()
    s = abs(seconds)
    if s < 1:
        return "now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            text = f"{int(s // size)}{unit}"
            break
    return f"in {text}" if seconds > 0 else f"{text} ago"


def _duration(start: datetime | None, end: datetime | None, now: datetime) -> str:
    if start is None:
        return ""
    seconds = ((end or now) - start).total_seconds()
    if seconds < 60:
        return f"{max(seconds, 0):.1f}s"
    return format_duration(int(seconds))


#: the browser's IANA zone, set by the dashboard's script; dates are shown in it
TZ_COOKIE = "jobctl_tz"


def zone_name(request: Request) -> str:
    """The zone dates are shown in: the browser's (its cookie) when valid, else the
    machine's local zone."""
    given = request.cookies.get(TZ_COOKIE)
    if given and zone_exists(given):
        return given
    return local_zone_name()


@jinja2.pass_context
def _local(context: Any, dt: datetime | None) -> str:
    return output.local_time(dt, context.get("tz"))


_env.filters["local"] = _local
_env.filters["dur"] = format_duration
_env.filters["limits"] = output.limits_text
_env.filters["schedule"] = output.schedule_text
_env.globals["relative"] = relative
_env.globals["duration"] = _duration
_env.globals["seconds"] = lambda s: "-" if s is None else seconds_text(s)
_env.globals["size"] = lambda b: "-" if b is None else bytes_text(b)


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    web: Web = request.app.state.web
    sid = request.cookies.get(SESSION_COOKIE)
    csrf = web.sessions.csrf_for(sid) if request.state.auth == "cookie" else None
    principal = getattr(request.state, "principal", None)
    page = _env.get_template(template).render(
        request=request,
        csrf=csrf,
        csrf_field=CSRF_FIELD,
        signed_in=request.state.auth is not None,
        # only the buttons and forms the token's role may use are shown (README "Tokens")
        may=lambda method, path: web.may(principal, method, path),
        principal=principal,
        now=web.clock.now(),
        tz=zone_name(request),
        **context,
    )
    return HTMLResponse(page, status_code=status_code)


def login_page(
    web: Web,
    request: Request,
    status_code: int | None = None,
    error: str | None = None,
    target: str | None = None,
) -> HTMLResponse:
    """The sign-in form: 200 at ``/``, 401 anywhere else without a session; after
    signing in the browser goes back to the page it asked for (``target``)."""
    path = request.url.path
    if target is None:
        target = path + (f"?{request.url.query}" if request.url.query else "")
        if request.method != "GET" or path.endswith("/events"):
            target = "/"  # a form post or a stream is no page to come back to
    if status_code is None:
        status_code = 200 if path == "/" else 401
    request.state.auth = None
    return render(request, "login.html", status_code, next=_safe_next(target), error=error)


def error_page(web: Web, request: Request, status_code: int, message: str) -> HTMLResponse:
    if not hasattr(request.state, "auth"):
        request.state.auth = None
    return render(request, "error.html", status_code, status=status_code, message=message)


def _safe_next(target: str) -> str:
    """Only a path on this server (never ``//host`` or a scheme) may be redirected to."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


async def read_form(web: Web, request: Request, *, csrf: bool = True) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (capped), its CSRF token checked."""
    body = await read_body(request)
    try:
        fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("malformed form") from None
    if csrf:
        web.check_csrf(request, fields.get(CSRF_FIELD))
    return fields


def page_error(request: Request, e: Exception) -> Response:
    status = error_status(e)
    if status is None:
        raise e
    return error_page(request.app.state.web, request, status, error_text(e))


# ---------------------------------------------------------------------- sign-in


async def login(request: Request) -> Response:
    web: Web = request.app.state.web
    try:
        fields = await read_form(web, request, csrf=False)
    except Exception as e:
        return page_error(request, e)
    target = _safe_next(fields.get("next", "/"))
    given = fields.get("token", "").strip()
    key = None
    if not same_secret(given, web.token):
        # a named token of `jobctl token add`: the session keeps its role
        named = await web.named_token(hash_token(given)) if given else None
        if named is None:
            return login_page(web, request, 401, "wrong token", target)
        key = named.key
    sid, _ = web.sessions.create(key)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        sid,
        max_age=int(SESSION_SECONDS),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    web: Web = request.app.state.web
    try:
        await read_form(web, request)
    except Exception as e:
        return page_error(request, e)
    web.sessions.end(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


# ---------------------------------------------------------------------- pages


def _run_context(store: Store, run_id: int, attempt: int | None) -> dict[str, Any]:
    detail = run_detail(store, run_id)
    run = store.get_run(run_id)
    try:
        shown, data = store.get_output(run_id, attempt)
    except NotFound:
        if attempt is not None:
            raise
        shown, data = None, b""
    return {
        "run": run,
        "detail": detail,
        "attempts": store.get_attempts(run_id),
        "shown": shown,
        "output_text": data.decode("utf-8", "replace"),
        "final": run.state in FINISHED_RUN_STATES,
        "cancellable": run.state in (RunState.PENDING, RunState.FAILED, RunState.LEASED)
        and not run.cancel_requested,
        "job": store.get_job(run.job_name),
    }


async def run_page(request: Request) -> Response:
    web: Web = request.app.state.web
    try:
        run_id = run_id_of(request)
        attempt = query_int(request.query_params.get("attempt"), "attempt")
        context = await web.db(lambda store: _run_context(store, run_id, attempt))
    except Exception as e:
        return page_error(request, e)
    live = not context["final"] and attempt is None
    return render(request, "run.html", live=live, **context)


def _snapshot(store: Store, run_id: int) -> dict[str, Any]:
    """What the run page shows live: state, attempt, the last attempt's output tail."""
    try:
        run = store.get_run(run_id)
    except NotFound:
        return {"state": "gone", "final": True}
    try:
        att, data = store.get_output(run_id)
        attempt, output_bytes = att.attempt, att.output_bytes
    except NotFound:
        attempt, output_bytes, data = 0, 0, b""
    return {
        "state": run.state.value,
        "attempt": attempt,
        "cancel_requested": run.cancel_requested,
        "output_bytes": output_bytes,
        "output": data.decode("utf-8", "replace"),
        "final": run.state in FINISHED_RUN_STATES,
    }


async def run_events(request: Request) -> Response:
    """Server-sent events: ``output`` (the snapshot, each time it changes) until the run
    is final, then ``end``."""
    web: Web = request.app.state.web
    try:
        run_id = run_id_of(request)
    except Exception as e:
        return page_error(request, e)

    async def stream() -> AsyncIterator[str]:
        last: dict[str, Any] | None = None
        quiet = 0.0
        while True:
            snap = await web.db(lambda store: _snapshot(store, run_id))
            if snap != last:
                yield f"event: output\ndata: {json.dumps(snap)}\n\n"
                last, quiet = snap, 0.0
            elif quiet >= EVENTS_KEEPALIVE_SECONDS:
                yield ": keep-alive\n\n"
                quiet = 0.0
            if snap["final"]:
                yield "event: end\ndata: {}\n\n"
                return
            await anyio.sleep(EVENTS_POLL_SECONDS)
            quiet += EVENTS_POLL_SECONDS

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


# ---------------------------------------------------------------------- buttons


def _action(kind: str, verb: str) -> Any:
    """A form POST that changes state, then a 303 back to a page."""

    async def endpoint(request: Request) -> Response:
        web: Web = request.app.state.web
        now = web.clock.now()
        try:
            await read_form(web, request)
            if kind == "job":
                name = request.path_params["name"]
                target = await web.db(lambda store: _job_verb(web, store, verb, name, now))
            else:
                run_id = run_id_of(request)
                target = await web.db(lambda store: _run_verb(web, store, verb, run_id, now))
        except (JobctlError, BadRequest, Forbidden) as e:
            return page_error(request, e)
        except Exception as e:
            if error_status(e) is None:
                raise
            return page_error(request, e)
        return RedirectResponse(target, status_code=303)

    return endpoint


def _job_verb(web: Web, store: Store, verb: str, name: str, now: datetime) -> str:
    if verb == "run":
        run, _ = store.enqueue_run(name, now)
        return f"/runs/{run.id}"
    job = pause_or_resume(store, verb, name, now)
    return f"/jobs/{quote(job.name)}"


def _run_verb(web: Web, store: Store, verb: str, run_id: int, now: datetime) -> str:
    if verb == "cancel":
        store.cancel_runs([run_id], now)
    else:
        store.retry_dead(now, run_ids=[run_id])
    return f"/runs/{run_id}"


def routes(web: Web) -> list[BaseRoute]:
    return [
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/jobs/{name}/run", _action("job", "run"), methods=["POST"]),
        Route("/jobs/{name}/pause", _action("job", "pause"), methods=["POST"]),
        Route("/jobs/{name}/resume", _action("job", "resume"), methods=["POST"]),
        Route("/runs/{run_id:int}", run_page, methods=["GET"]),
        Route("/runs/{run_id:int}/events", run_events, methods=["GET"]),
        Route("/runs/{run_id:int}/cancel", _action("run", "cancel"), methods=["POST"]),
        Route("/runs/{run_id:int}/retry", _action("run", "retry"), methods=["POST"]),
    ]
