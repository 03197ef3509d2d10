"""``db info`` and ``db copy`` (jobctl(1), jobctl db): the database itself, on either backend."""

from __future__ import annotations

import sys
from typing import Any

import click

from .base import Ctx, JobctlGroup, cli, pass_ctx


@cli.group(cls=JobctlGroup)
def db() -> None:
    """The database itself: what it holds, and a copy of it into another one."""


def _info(obj: Ctx) -> Any:
    """The database's DbInfo, or that of an empty one (with a warning) when it does not
    exist: a read creates nothing."""
    from ..errors import NotFound
    from ..paths import is_db_url, resolve_db_path
    from ..store import open_store, shown_location
    from ..store.values import DbInfo

    location = resolve_db_path(obj.db_option)
    try:
        handle = open_store(location, create=False)
    except NotFound:
        shown = shown_location(location)
        print(f"warning: no database at {shown}", file=sys.stderr)
        backend = "postgresql" if is_db_url(location) else "sqlite"
        return DbInfo(backend, shown, 0, 0, 0, 0)
    try:
        return handle.commands.info()
    finally:
        handle.close()


@db.command("info")
@click.option(
    "--json", "as_json", is_flag=True, help="Print {backend, location, schema_version, ...}."
)
@pass_ctx
def db_info(obj: Ctx, as_json: bool) -> None:
    """Backend, location (a URL without its password), schema version, jobs, runs, size."""
    from dataclasses import asdict

    from .. import output

    info = _info(obj)
    if as_json:
        output.print_json(asdict(info))
        return
    output.print_lines([f"{k}: {v}" for k, v in asdict(info).items()])


@db.command("copy")
@click.option(
    "--to", "target", required=True, metavar="DB", help="The database to fill (path or URL)."
)
@click.option("--history", is_flag=True, help="Copy every run and attempt too.")
@click.option(
    "--force",
    is_flag=True,
    help="With --history: copy even while a daemon runs on the source.",
)
@pass_ctx
def db_copy(obj: Ctx, target: str, history: bool, force: bool) -> None:
    """Copy every job (and every secret) into another database of either backend, all or nothing.

    Refused when the target holds any job. The copies get new ids; without --history
    they have no runs, no last run and no missed windows. With --history it is refused
    while a daemon runs on the source (its leased runs would be copied mid-run), unless
    --force.
    """
    from ..errors import Conflict, UsageError
    from ..paths import resolve_db_path
    from ..store import open_store, read_copy, shown_location

    if not target:
        raise UsageError("--to needs a database path or URL")
    source = obj.handle()
    if history and not force:
        live = source.commands.live_daemons(obj.now())
        if live:
            hosts = ", ".join(sorted({f"pid {d.pid} on {d.host}" for d in live}))
            raise Conflict(
                f"a daemon runs on the source ({hosts}): the runs it holds would be copied "
                "as leased mid-run; stop it first, or give --force"
            )
    jobs = read_copy(source.commands, history=history)
    to = resolve_db_path(target)
    dest = open_store(to)
    try:
        if dest.location == source.location and dest.backend == source.backend:
            raise UsageError("--to names the database being copied")
        secrets = source.commands.secrets_for_copy()
        calendars = {name: days for name, days, _ in source.commands.calendar_list()}
        count = dest.commands.load_copy(
            jobs, obj.now(), history=history, secrets=secrets, calendars=calendars
        )
    finally:
        dest.close()
    runs = sum(len(j.runs) for j in jobs)
    shown = shown_location(target)
    what = f"{count} jobs" + (f" and {runs} runs" if history else "")
    click.echo(f"copied {what} to {shown}")
