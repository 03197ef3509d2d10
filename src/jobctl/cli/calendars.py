"""Named calendars of dates (``calendar add|rm|list``) that jobs exclude with
``--except-calendar``."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

import click

from ..errors import NotFound, UsageError
from .base import Ctx, JobctlGroup, _completion_values, cli, pass_ctx

if TYPE_CHECKING:
    from ..store import CommandStore


def _complete_calendars(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:  # type: ignore[type-arg]
    from click.shell_completion import CompletionItem

    names = _completion_values(ctx, lambda store: [c[0] for c in store.calendar_list()])
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


@cli.group(cls=JobctlGroup)
def calendar() -> None:
    """Named calendars of dates: a job's windows on them are skipped (--except-calendar)."""


@calendar.command("add")
@click.argument("name")
@click.argument("dates", nargs=-1, required=True, metavar="DATE...")
@pass_ctx
def calendar_add(obj: Ctx, name: str, dates: tuple[str, ...]) -> None:
    """Create calendar NAME with these ISO dates (2026-12-25), or add them to it. The jobs
    that use it skip those dates from their next window on."""
    from ..specs import check_name, parse_dates

    days = parse_dates(dates)
    check_name(name, "calendar name")
    store = obj.store()
    before = _dates_of(store, name)
    store.calendar_add(name, days)
    click.echo(f"calendar {name}: {_dates(len(set(days) - before))} added")


@calendar.command("rm")
@click.argument("name", shell_complete=_complete_calendars)
@click.argument("dates", nargs=-1, metavar="[DATE...]")
@pass_ctx
def calendar_rm(obj: Ctx, name: str, dates: tuple[str, ...]) -> None:
    """Remove these dates from calendar NAME or, with none, the calendar (refused while a
    job uses it)."""
    from ..specs import parse_dates

    days = parse_dates(dates)
    store = obj.store()
    before = _dates_of(store, name) if days else set()
    store.calendar_rm(name, days)
    click.echo(
        f"calendar {name}: {_dates(len(set(days) & before))} removed" if days else f"removed {name}"
    )


def _dates(n: int) -> str:
    return f"{n} date" if n == 1 else f"{n} dates"


def _dates_of(store: CommandStore, name: str) -> set[date]:
    """The dates calendar ``name`` holds now (none when there is no such calendar), so
    add and rm say how many they changed, not how many were given."""
    try:
        rows = store.calendar_list(name)
    except NotFound:
        return set()
    return {d for _, days, _ in rows for d in days}


@calendar.command("list")
@click.argument("name", required=False, shell_complete=_complete_calendars)
@click.option("--json", "as_json", is_flag=True, help="Print [{name, dates, used_by}].")
@pass_ctx
def calendar_list(obj: Ctx, name: str | None, as_json: bool) -> None:
    """The calendars (or the one named): their dates and the jobs that use them."""
    from .. import output

    if name is not None and not name:
        raise UsageError("the calendar name is empty")
    rows = obj.reader().calendar_list(name)
    if as_json:
        output.print_json(output.calendars_json(rows))
    else:
        output.print_calendars(rows)
