"""The dashboard's notifications page (README, Getting told): deliveries with their state,
tries and errors, newest first, filtered by job and state; the channels, each with a button
that sends it a ``test`` event now, as ``notify test`` does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import UsageError
from ..notifications import NotificationState
from .context import Web
from .pages import page_error, read_form, render

if TYPE_CHECKING:
    from ..store import CommandStore as Store

#: the newest deliveries shown
SHOWN = 50


def _state(value: str | None) -> NotificationState | None:
    if not value:
        return None
    try:
        return NotificationState(value)
    except ValueError:
        raise UsageError(
            f"invalid state {value!r}: use " + "|".join(s.value for s in NotificationState)
        ) from None


async def notifications_page(request: Request) -> Response:
    web: Web = request.app.state.web
    q = request.query_params
    try:
        job = (q.get("job") or "").strip() or None
        state = _state(q.get("state"))

        def read(store: Store) -> dict[str, Any]:
            return {
                "notes": store.list_notifications(job=job, state=state, limit=SHOWN),
                "channels": store.list_channels(),
            }

        context = await web.db(read)
    except Exception as e:
        return page_error(request, e)
    return render(
        request,
        "notifications.html",
        params={"job": job or "", "state": state.value if state else ""},
        states=[s.value for s in NotificationState],
        tested=q.get("tested"),
        test_error=q.get("error"),
        shown=SHOWN,
        **context,
    )


async def test_channel(request: Request) -> Response:
    """One ``test`` event to the channel now; back to the page with the outcome."""
    from ..delivery import DeliveryError, test_delivery

    web: Web = request.app.state.web
    name = request.path_params["name"]
    try:
        await read_form(web, request)
        channel = await web.db(lambda store: store.get_channel(name))
    except Exception as e:
        return page_error(request, e)
    target = f"/notifications?tested={quote(name)}"
    try:
        await run_in_threadpool(test_delivery, channel, web.clock.now())
    except DeliveryError as e:
        target += "&error=" + quote(" ".join(str(e).split())[:300])
    return RedirectResponse(target, status_code=303)


def routes() -> list[BaseRoute]:
    return [
        Route("/notifications", notifications_page, methods=["GET"]),
        Route("/channels/{name}/test", test_channel, methods=["POST"]),
    ]
