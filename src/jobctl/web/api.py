"""The JSON API under ``/v1`` and ``/metrics`` (README, The dashboard and the HTTP API).

Each handler: parse the request, one call on the store (the method the CLI command
calls), render the CLI's ``--json`` object with :mod:`jobctl.output`. Errors are raised
and turned into ``{"error": …}`` with their status by :func:`jobctl.web.app.api`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .. import output
from ..clock import iso
from ..errors import Conflict, NameTaken, NotFound
from ..specs import check_after
from ..triggers import next_fire
from . import metrics
from .auth import CSRF_HEADER
from .bodies import (
    INT64_MAX,
    backfill_request_from_body,
    if_match_revisions,
    job_changes_from_body,
    job_spec_from_body,
    maintenance_request_from_body,
    parse_json_object,
    query_bool,
    query_int,
    query_notification_state,
    query_since,
    query_state,
    revision_from_body,
    run_request_from_body,
    secret_value_from_body,
)
from .context import Web, read_body

if TYPE_CHECKING:
    from ..models import Job
    from ..store import CommandStore as Store

Handler = Callable[[Web, Request], Awaitable[Response]]

#: how many recent runs ``GET /v1/jobs/{name}`` includes, as ``show``'s default --limit
SHOW_RUNS_LIMIT = 10


# ---------------------------------------------------------------------- shared builders


def job_out(store: Store, job: Job) -> dict[str, Any]:
    """The job object with its real ``last_run``."""
    return output.job_json(job, store.last_runs([job.id]).get(job.id))


def run_detail(store: Store, run_id: int) -> dict[str, Any]:
    """``inspect --json`` of one run, built as ``jobctl inspect`` builds it: the run
    object plus ``attempts`` and ``waiting`` (from the claim's own rules). Raises NotFound."""
    from .. import planner
    from ..clock import SystemClock

    run = store.get_run(run_id)
    attempts = store.get_attempts(run_id)
    waiting = planner.waiting_reason(store.waiting(run_id, SystemClock().now()))
    notes = store.list_notifications(run_id=run_id, limit=100)
    return output.inspect_json(run, attempts, waiting, notes)


def run_id_of(request: Request) -> int:
    run_id: int = request.path_params["run_id"]
    if run_id > INT64_MAX:
        raise NotFound(f"no run with id {run_id}")
    return run_id


async def _json_body(web: Web, request: Request) -> dict[str, Any]:
    web.check_csrf(request, request.headers.get(CSRF_HEADER))
    return parse_json_object(await read_body(request))


async def _no_body(web: Web, request: Request) -> None:
    web.check_csrf(request, request.headers.get(CSRF_HEADER))
    await read_body(request)


# ---------------------------------------------------------------------- jobs


async def list_jobs(web: Web, request: Request) -> Response:
    def read(store: Store) -> list[dict[str, Any]]:
        last = store.last_runs()
        return [output.job_json(j, last.get(j.id)) for j in store.list_jobs()]

    return JSONResponse(await web.db(read))


async def create_job(web: Web, request: Request) -> Response:
    body = await _json_body(web, request)
    now = web.clock.now()
    spec, paused = job_spec_from_body(body, now)

    def write(store: Store) -> dict[str, Any]:
        check_after(spec.name, spec.trigger, store.list_jobs())
        try:
            job = store.add_job(spec, next_fire(spec.trigger, now), now, paused=paused)
        except NameTaken as e:
            raise Conflict(f"{e} (PATCH /v1/jobs/{spec.name} changes it)") from None
        return output.job_json(job, None)

    return JSONResponse(await web.db(write), status_code=201)


async def get_job(web: Web, request: Request) -> Response:
    name = request.path_params["name"]
    limit = query_int(request.query_params.get("limit"), "limit", minimum=1) or SHOW_RUNS_LIMIT

    def read(store: Store) -> dict[str, Any]:
        job = store.get_job(name)
        data = job_out(store, job)
        data["runs"] = [output.run_json(r) for r in store.list_runs(name, limit=limit)]
        return data

    data = await web.db(read)
    return JSONResponse(data, headers={"ETag": etag(data["revision"])})


def etag(revision: int) -> str:
    """A job's entity tag: its revision, which every change to it raises."""
    return f'"{revision}"'


async def patch_job(web: Web, request: Request) -> Response:
    """``edit`` over HTTP; with ``If-Match: "REV"`` (the ETag of a GET) only while the job
    is still at that revision, else 412 and nothing changes."""
    name = request.path_params["name"]
    wanted = if_match_revisions(request.headers.get("if-match"))
    body = await _json_body(web, request)
    now = web.clock.now()

    def write(store: Store) -> dict[str, Any]:
        changes = job_changes_from_body(body, now, store.get_job(name))
        if "trigger" in changes:
            check_after(changes.get("name", name), changes["trigger"], store.list_jobs())
        restart = "trigger" in changes
        nxt = next_fire(changes["trigger"], now) if restart else None
        job = store.edit_job(
            name, changes, now, next_run_at=nxt, restart_schedule=restart, if_revision=wanted
        )
        return job_out(store, job)

    data = await web.db(write)
    return JSONResponse(data, headers={"ETag": etag(data["revision"])})


async def delete_job(web: Web, request: Request) -> Response:
    name = request.path_params["name"]
    force = query_bool(request.query_params.get("force"), "force")
    await _no_body(web, request)

    def write(store: Store) -> None:
        store.delete_job(name, force=force)

    await web.db(write)
    return Response(status_code=204)


def pause_or_resume(store: Store, action: str, name: str, now: datetime) -> Job:
    """``pause NAME`` or ``resume NAME`` (from the next window after ``now``)."""
    if action == "pause":
        return store.pause_job(name, now)
    return store.resume_job(name, next_fire(store.get_job(name).trigger, now), now)


def _job_action(action: str) -> Handler:
    async def handler(web: Web, request: Request) -> Response:
        name = request.path_params["name"]
        await _no_body(web, request)
        now = web.clock.now()

        def write(store: Store) -> dict[str, Any]:
            job = pause_or_resume(store, action, name, now)
            return job_out(store, job)

        return JSONResponse(await web.db(write))

    return handler


async def job_history(web: Web, request: Request) -> Response:
    name = request.path_params["name"]

    def read(store: Store) -> list[dict[str, Any]]:
        return [output.revision_json(r) for r in store.history(name)]

    return JSONResponse(await web.db(read))


async def rollback_job(web: Web, request: Request) -> Response:
    """``{revision}``: the job as it was then (as ``rollback``); 404 for an unknown one."""
    name = request.path_params["name"]
    revision = revision_from_body(await _json_body(web, request))
    now = web.clock.now()

    def write(store: Store) -> dict[str, Any]:
        return job_out(store, store.rollback_job(name, revision, now))

    return JSONResponse(await web.db(write))


async def enqueue_run(web: Web, request: Request) -> Response:
    name = request.path_params["name"]
    req = run_request_from_body(await _json_body(web, request))
    now = web.clock.now()

    def write(store: Store) -> tuple[dict[str, Any], bool]:
        run, created = store.enqueue_run(
            name, now, key=req.key, env=req.env, locks=req.locks, priority=req.priority
        )
        data = output.run_json(run)
        data["created"] = created
        return data, created

    data, created = await web.db(write)
    return JSONResponse(data, status_code=201 if created else 200)


# ---------------------------------------------------------------------- runs


async def list_runs(web: Web, request: Request) -> Response:
    q = request.query_params
    state = query_state(q.get("state"))
    limit = query_int(q.get("limit"), "limit", minimum=1) or 20
    job = q.get("job") or None
    since = query_since(q.get("since"), web.clock.now())

    def read(store: Store) -> list[dict[str, Any]]:
        return [output.run_json(r) for r in store.list_runs(job, state, limit, since=since)]

    return JSONResponse(await web.db(read))


async def get_run(web: Web, request: Request) -> Response:
    run_id = run_id_of(request)
    return JSONResponse(await web.db(lambda store: run_detail(store, run_id)))


async def run_logs(web: Web, request: Request) -> Response:
    run_id = run_id_of(request)
    attempt = query_int(request.query_params.get("attempt"), "attempt")
    _, data = await web.db(lambda store: store.get_output(run_id, attempt))
    return Response(data, media_type="text/plain; charset=utf-8")


async def cancel_run(web: Web, request: Request) -> Response:
    run_id = run_id_of(request)
    await _no_body(web, request)
    now = web.clock.now()

    def write(store: Store) -> dict[str, Any]:
        (run,) = store.cancel_runs([run_id], now)
        return output.run_json(run)

    return JSONResponse(await web.db(write))


async def retry_run(web: Web, request: Request) -> Response:
    run_id = run_id_of(request)
    await _no_body(web, request)
    now = web.clock.now()

    def write(store: Store) -> dict[str, Any]:
        (run,) = store.retry_dead(now, run_ids=[run_id])
        return output.run_json(run)

    return JSONResponse(await web.db(write))


async def backfill(web: Web, request: Request) -> Response:
    """``POST /v1/jobs/{name}/backfill`` with ``{from, to, dry_run?}``: as ``backfill
    --json`` (jobctl(1), jobctl backfill)."""
    from .. import planner
    from ..specs import backfill_windows

    name = request.path_params["name"]
    start, end, dry_run = backfill_request_from_body(await _json_body(web, request))
    now = web.clock.now()

    def write(store: Store) -> dict[str, Any]:
        windows = backfill_windows(store.get_job(name), start, end, now)
        done = store.backfill(name, windows, now, planner.plan_backfill, dry_run=dry_run)
        if dry_run:
            return output.backfill_dry_run_json(done.plan.create, done.requeued, done.plan.left)
        return output.backfill_json(done.created, done.requeued, done.plan.left)

    return JSONResponse(await web.db(write))


async def coverage(web: Web, request: Request) -> Response:
    """``GET /v1/jobs/{name}/coverage?from=&to=``: as ``coverage --json``."""
    from .. import planner
    from ..specs import coverage_windows, excluded_windows

    name = request.path_params["name"]
    q = request.query_params
    start, end = q.get("from") or None, q.get("to") or None
    now = web.clock.now()

    def read(store: Store) -> list[dict[str, Any]]:
        job = store.get_job(name)
        windows = coverage_windows(job, start, end, now)
        runs = store.window_runs(name, windows[0], windows[-1]) if windows else {}
        entries = planner.plan_coverage(windows, runs, excluded_windows(job, windows))
        return output.coverage_json(entries)

    return JSONResponse(await web.db(read))


# ---------------------------------------------------------------------- the system


async def status(web: Web, request: Request) -> Response:
    now = web.clock.now()

    def read(store: Store) -> dict[str, Any]:
        st = store.status(now)
        return {
            "daemons": [output.daemon_json(d) for d in st.daemons],
            "counts": st.counts,
            "next_due_at": iso(st.next_due_at),
            "maintenance": output.maintenance_json(st.maintenance),
        }

    return JSONResponse(await web.db(read))


async def start_maintenance(web: Web, request: Request) -> Response:
    """As ``pause --all [--until] [--reason]``: 200 with the window in force."""
    from .. import zones
    from ..specs import maintenance_window

    until, reason = maintenance_request_from_body(await _json_body(web, request))
    now = web.clock.now()
    end, text = maintenance_window(until, reason, zones.local_zone_name(), now)
    held = await web.db(lambda store: store.start_maintenance(end, text, now))
    return JSONResponse(output.maintenance_json(held))


async def end_maintenance(web: Web, request: Request) -> Response:
    """As ``resume --all``: 204, whether or not a window was in force."""
    await _no_body(web, request)
    now = web.clock.now()
    await web.db(lambda store: store.end_maintenance(now))
    return Response(status_code=204)


# ---------------------------------------------------------------------- notifications


async def list_notifications(web: Web, request: Request) -> Response:
    q = request.query_params
    state = query_notification_state(q.get("state"))
    limit = query_int(q.get("limit"), "limit", minimum=1) or 20
    job = q.get("job") or None

    def read(store: Store) -> list[dict[str, Any]]:
        items = store.list_notifications(job=job, state=state, limit=limit)
        return [output.notification_json(n) for n in items]

    return JSONResponse(await web.db(read))


async def list_channels(web: Web, request: Request) -> Response:
    def read(store: Store) -> list[dict[str, Any]]:
        return [output.channel_json(c) for c in store.list_channels()]

    return JSONResponse(await web.db(read))


async def test_channel(web: Web, request: Request) -> Response:
    """As ``notify test``: 200 ``{"delivered": true}``, 502 with the receiver's error."""
    from starlette.concurrency import run_in_threadpool

    from ..delivery import DeliveryError, test_delivery

    name = request.path_params["name"]
    await _no_body(web, request)
    channel = await web.db(lambda store: store.get_channel(name))
    try:
        await run_in_threadpool(test_delivery, channel, web.clock.now())
    except DeliveryError as e:
        return JSONResponse({"error": f"channel {name}: {e}"}, status_code=502)
    return JSONResponse({"delivered": True})


# ---------------------------------------------------------------------- secrets


async def list_secrets(web: Web, request: Request) -> Response:
    """As ``secret list --json``: never a value."""

    def read(store: Store) -> list[dict[str, Any]]:
        return [output.secret_json(s) for s in store.list_secrets()]

    return JSONResponse(await web.db(read))


async def put_secret(web: Web, request: Request) -> Response:
    """As ``secret set``: 201 when created, 200 when replaced; the answer names the
    secret, never its value."""
    from ..specs import check_name, check_secret_value

    name = check_name(request.path_params["name"], "secret name")
    value = check_secret_value(secret_value_from_body(await _json_body(web, request)))
    now = web.clock.now()
    created = await web.db(lambda store: store.set_secret(name, value, now))
    return JSONResponse({"name": name, "created": created}, status_code=201 if created else 200)


async def delete_secret(web: Web, request: Request) -> Response:
    """As ``secret rm``: 204; 409 while a job uses it; 404 for none."""
    name = request.path_params["name"]
    await _no_body(web, request)
    await web.db(lambda store: store.delete_secret(name))
    return Response(status_code=204)


async def metrics_page(web: Web, request: Request) -> Response:
    now = web.clock.now()
    text = await web.db(lambda store: metrics.render(store, now))
    return Response(text, media_type=metrics.CONTENT_TYPE)


ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/v1/jobs", list_jobs),
    ("POST", "/v1/jobs", create_job),
    ("GET", "/v1/jobs/{name}", get_job),
    ("PATCH", "/v1/jobs/{name}", patch_job),
    ("DELETE", "/v1/jobs/{name}", delete_job),
    ("POST", "/v1/jobs/{name}/pause", _job_action("pause")),
    ("POST", "/v1/jobs/{name}/resume", _job_action("resume")),
    ("POST", "/v1/jobs/{name}/runs", enqueue_run),
    ("GET", "/v1/jobs/{name}/history", job_history),
    ("POST", "/v1/jobs/{name}/rollback", rollback_job),
    ("POST", "/v1/jobs/{name}/backfill", backfill),
    ("GET", "/v1/jobs/{name}/coverage", coverage),
    ("GET", "/v1/runs", list_runs),
    ("GET", "/v1/runs/{run_id:int}", get_run),
    ("GET", "/v1/runs/{run_id:int}/logs", run_logs),
    ("POST", "/v1/runs/{run_id:int}/cancel", cancel_run),
    ("POST", "/v1/runs/{run_id:int}/retry", retry_run),
    ("GET", "/v1/status", status),
    ("POST", "/v1/maintenance", start_maintenance),
    ("DELETE", "/v1/maintenance", end_maintenance),
    ("GET", "/v1/notifications", list_notifications),
    ("GET", "/v1/channels", list_channels),
    ("POST", "/v1/channels/{name}/test", test_channel),
    ("GET", "/v1/secrets", list_secrets),
    ("PUT", "/v1/secrets/{name}", put_secret),
    ("DELETE", "/v1/secrets/{name}", delete_secret),
    ("GET", "/metrics", metrics_page),
]
