"""The dashboard as an operations console (README, The dashboard's pages): the overview, the runs
across jobs, a job's page with its chart, the timeline, deleting a job after a confirmation,
retrying dead runs.

Each page reads through :class:`~jobctl.store.protocol.DashboardReads`, ranks and pages with
:mod:`jobctl.web.triage`, draws with :mod:`jobctl.web.charts`. The parts of a page that
change (marked ``data-refresh``) are re-read by the page's script every few seconds.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from .. import applier, jobfile
from ..clock import from_us, to_us
from ..durations import parse_since
from ..errors import JobctlError, RevisionChanged, UsageError
from ..models import JobState, RunState, natural_key
from ..zones import parse_zone
from . import charts, triage
from .api import SHOW_RUNS_LIMIT
from .bodies import BadRequest, query_int, query_state
from .context import Web
from .pages import login_page, page_error, read_form, render, zone_name

if TYPE_CHECKING:
    from ..store import CommandStore as Store
    from ..store.protocol import DashboardReads

STRIP_RUNS = 20
JOB_PAGE_RUNS = 50
CHART_RUNS = 100
COST_RUNS = 10
REVISIONS_SHOWN = 20
OVERVIEW_HOURS = 24
TIMELINE_HOURS = 24


def _page_number(request: Request) -> int:
    return query_int(request.query_params.get("page"), "page", minimum=1) or 1


def _choice(value: str | None, allowed: list[str], what: str) -> str | None:
    if not value:
        return None
    if value not in allowed:
        raise UsageError(f"invalid {what} {value!r}: use " + "|".join(allowed))
    return value


LAST_CHOICES = ["attention", "none", *(s.value for s in RunState if s is not RunState.SKIPPED)]


def _link(path: str, params: dict[str, Any]) -> str:
    """``path`` with the non-empty ``params`` as its query."""
    kept = {k: v for k, v in params.items() if v not in (None, "") and (k != "page" or v != 1)}
    return path + ("?" + urlencode(kept) if kept else "")


# ---------------------------------------------------------------------- the overview


async def home(request: Request) -> Response:
    web: Web = request.app.state.web
    if request.state.auth is None:
        return login_page(web, request)
    q = request.query_params
    try:
        query = (q.get("q") or "").strip() or None
        job_state = _choice(q.get("state"), [s.value for s in JobState], "state")
        last = _choice(q.get("last"), LAST_CHOICES, "last")
        number = _page_number(request)
    except UsageError as e:
        return page_error(request, e)
    now = web.clock.now()

    def read(store: Store, reads: DashboardReads) -> dict[str, Any]:
        job_state_filter = JobState(job_state) if job_state else None
        facts = reads.job_facts(query, job_state_filter, now - timedelta(hours=OVERVIEW_HOURS))
        ranked = triage.rank(facts, now, last_state=last)
        page = triage.page_of(ranked, number)
        ids = [r.facts.id for r in page.items]
        jobs = {j.id: j for j in reads.jobs_by_ids(ids)}
        counts = reads.run_counts_since(now - timedelta(hours=OVERVIEW_HOURS))
        return {
            "page": page,
            "jobs": jobs,
            "last": reads.last_runs(ids),
            "strips": reads.recent_runs(ids, STRIP_RUNS),
            "counts": counts,
            "daemons": store.live_daemons(now),
            "busy": reads.busy_workers(),
            "attention_total": sum(1 for r in ranked if r.attention),
            "dead_jobs": sum(1 for r in ranked if "dead" in r.attention),
            "any_jobs": bool(facts) or bool(query or job_state),
        }

    context = await web.view(read)
    params = {"q": query or "", "state": job_state or "", "last": last or ""}
    page = context["page"]
    return render(
        request,
        "overview.html",
        params=params,
        states=[s.value for s in RunState],
        job_states=[s.value for s in JobState],
        last_choices=LAST_CHOICES,
        prev_link=_link("/", {**params, "page": page.number - 1}) if page.number > 1 else None,
        next_link=_link("/", {**params, "page": page.number + 1})
        if page.number < page.pages
        else None,
        hours=OVERVIEW_HOURS,
        deleted=q.get("deleted"),
        **context,
    )


# ---------------------------------------------------------------------- runs across jobs


_BEFORE = re.compile(r"(-?\d{1,19})\.(\d{1,19})")


def _before(text: str | None) -> tuple[datetime, int] | None:
    """The cursor of the next page: ``WINDOW_US.RUN_ID`` of the last run shown."""
    if not text:
        return None
    m = _BEFORE.fullmatch(text)
    if m is None:
        raise UsageError(f"invalid before {text!r}")
    try:
        return from_us(int(m.group(1))), int(m.group(2))
    except (OverflowError, ValueError):
        raise UsageError(f"invalid before {text!r}") from None


async def runs_list(request: Request) -> Response:
    web: Web = request.app.state.web
    q = request.query_params
    now = web.clock.now()
    try:
        job = (q.get("job") or "").strip() or None
        state = query_state(q.get("state") or None)
        since_text = (q.get("since") or "").strip()
        since = parse_since(since_text, zone_name(request), now) if since_text else None
        before = _before(q.get("before"))
        runs = await web.view(
            lambda _, reads: reads.runs_page(job, state, since, before, triage.PAGE_SIZE + 1)
        )
    except (JobctlError, ValueError) as e:
        return page_error(request, e)
    more = len(runs) > triage.PAGE_SIZE
    runs = runs[: triage.PAGE_SIZE]
    params = {"job": job or "", "state": state.value if state else "", "since": since_text}
    older = None
    if more:
        last = runs[-1]
        older = _link("/runs", {**params, "before": f"{to_us(last.scheduled_for)}.{last.id}"})
    return render(
        request,
        "runs.html",
        runs=runs,
        params=params,
        states=[s.value for s in RunState],
        older_link=older,
        newest_link=_link("/runs", params) if before else None,
    )


# ---------------------------------------------------------------------- a job


def _job_context(store: Store, reads: DashboardReads, name: str) -> dict[str, Any]:
    job = store.get_job(name)
    finished = reads.finished_runs(job.id, CHART_RUNS)
    return {
        "job": job,
        "last": reads.last_runs([job.id]).get(job.id),
        "runs": store.list_runs(name, limit=JOB_PAGE_RUNS),
        "chart": charts.duration_chart(finished),
        "costs": charts.costs(finished),
        "cost_runs": finished[:COST_RUNS],
        "dead": len(reads.runs_page(name, RunState.DEAD, None, None, 1)),
        "definition": jobfile.dumps(jobfile.export_document([jobfile.Definition.of(job)])),
        "revisions": list(reversed(store.history(name)))[:REVISIONS_SHOWN],
        "describe": jobfile.describe_changes,
    }


async def job_page(request: Request) -> Response:
    web: Web = request.app.state.web
    name = request.path_params["name"]
    try:
        context = await web.view(lambda store, reads: _job_context(store, reads, name))
    except Exception as e:
        return page_error(request, e)
    return render(
        request,
        "job.html",
        show_runs=SHOW_RUNS_LIMIT,
        edit_errors=[],
        applied=request.query_params.get("applied"),
        **context,
    )


async def edit_definition(request: Request) -> Response:
    """The job's definition edited as TOML in its page, applied as ``edit -e`` applies
    it (the same plan: a removed table deletes the job; any error changes nothing and the
    page shows every error beside the text as it was sent)."""
    web: Web = request.app.state.web
    name = request.path_params["name"]
    now = web.clock.now()
    try:
        fields = await read_form(web, request)
        text = fields.get("toml", "")
        made_at = _revision_field(fields.get("revision"))

        def write(store: Store, reads: DashboardReads) -> dict[str, Any]:
            job = store.get_job(name)

            def refused(errors: list[str], status: int) -> dict[str, Any]:
                context = _job_context(store, reads, name)
                context.update(definition=text, edit_errors=errors, made_at=made_at, status=status)
                return context

            try:
                # the text was made at one revision: applied to another, it would undo
                # what changed in between (as edit -e, the text stays in the page)
                applier.check_unchanged([replace(job, revision=made_at)], [job])
                plan = applier.plan_text(store, text, now, scope=[name])
            except jobfile.FileErrors as e:
                return refused([str(p) for p in e.problems], 422)
            except RevisionChanged as e:
                return refused([str(e)], 409)
            try:
                applier.apply_plan(store, plan, now, source="api")
            except RevisionChanged as e:
                return refused([str(e)], 409)
            gone = any(j.name == name for j in plan.removed)
            return {"target": "/" if gone else f"/jobs/{quote(name)}", "lines": plan.lines()}

        result = await web.view(write)
    except Exception as e:
        return page_error(request, e)
    if "target" not in result:
        status = result.pop("status")
        return render(
            request, "job.html", status, show_runs=SHOW_RUNS_LIMIT, applied=None, **result
        )
    applied = "; ".join(result["lines"]) or "no changes"
    target = result["target"]
    key = "deleted" if target == "/" else "applied"
    return RedirectResponse(_link(target, {key: name if key == "deleted" else applied[:500]}), 303)


def _revision_field(value: str | None) -> int:
    """The editor form's ``revision``: the job's revision when its text was made."""
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 19:
        raise BadRequest("the form lacks the revision its text was made from")
    return int(value)


async def delete_page(request: Request) -> Response:
    """The confirmation step: GET shows it, a POST without ``confirm`` shows it again; only
    a POST with ``confirm=yes`` and the CSRF token deletes."""
    web: Web = request.app.state.web
    name = request.path_params["name"]
    try:
        fields = await read_form(web, request) if request.method == "POST" else {}
        if fields.get("confirm") == "yes":
            force = fields.get("force") == "yes"

            def write(store: Store) -> str:
                return store.delete_job(name, force=force).name

            deleted = await web.db(write)
            return RedirectResponse(_link("/", {"deleted": deleted}), status_code=303)

        def read(store: Store, reads: DashboardReads) -> dict[str, Any]:
            job = store.get_job(name)
            leased = reads.runs_page(name, RunState.LEASED, None, None, 1)
            return {"job": job, "leased": bool(leased)}

        context = await web.view(read)
    except Exception as e:
        return page_error(request, e)
    return render(request, "delete.html", **context)


async def retry_dead(request: Request) -> Response:
    """Every dead run of one job (``/jobs/NAME/retry-dead``) or of all jobs (``/retry-dead``)
    back to pending, as ``retry-dead`` does."""
    web: Web = request.app.state.web
    name = request.path_params.get("name")
    now = web.clock.now()
    try:
        await read_form(web, request)

        def write(store: Store) -> None:
            if name is None:
                store.retry_dead(now, all_jobs=True)
            else:
                store.retry_dead(now, job_name=name)

        await web.db(write)
    except Exception as e:
        return page_error(request, e)
    return RedirectResponse("/" if name is None else f"/jobs/{quote(name)}", status_code=303)


# ---------------------------------------------------------------------- the timeline


async def timeline(request: Request) -> Response:
    web: Web = request.app.state.web
    q = request.query_params
    now = web.clock.now()
    try:
        query = (q.get("q") or "").strip() or None
        number = _page_number(request)
        zone = parse_zone(zone_name(request))
    except UsageError as e:
        return page_error(request, e)
    start = now - timedelta(hours=TIMELINE_HOURS)

    def read(store: Store, reads: DashboardReads) -> dict[str, Any]:
        # the jobs with bars first: a page of empty rows would hide the one that ran
        active = reads.timeline_job_ids(start, now)
        names = sorted(
            reads.job_names(query), key=lambda row: (row[0] not in active, natural_key(row[1]))
        )
        page = triage.page_of(names, number)
        rows = page.items
        bars = reads.timeline([job_id for job_id, _ in rows], start, now)
        return {"page": page, "rows": rows, "bars": bars}

    context = await web.view(read)
    page = context["page"]
    params = {"q": query or ""}
    svg = charts.timeline_svg(context["rows"], context["bars"], start, now, now, zone)
    return render(
        request,
        "timeline.html",
        svg=svg,
        bars=len(context["bars"]),
        page=page,
        params=params,
        hours=TIMELINE_HOURS,
        prev_link=_link("/timeline", {**params, "page": page.number - 1})
        if page.number > 1
        else None,
        next_link=_link("/timeline", {**params, "page": page.number + 1})
        if page.number < page.pages
        else None,
    )


def routes(web: Web) -> list[BaseRoute]:
    del web
    return [
        Route("/", home, methods=["GET"]),
        Route("/runs", runs_list, methods=["GET"]),
        Route("/timeline", timeline, methods=["GET"]),
        Route("/retry-dead", retry_dead, methods=["POST"]),
        Route("/jobs/{name}", job_page, methods=["GET"]),
        Route("/jobs/{name}/delete", delete_page, methods=["GET", "POST"]),
        Route("/jobs/{name}/edit", edit_definition, methods=["POST"]),
        Route("/jobs/{name}/retry-dead", retry_dead, methods=["POST"]),
    ]
