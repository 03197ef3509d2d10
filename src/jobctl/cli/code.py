"""Jobs as code (SPEC §15): export, apply."""

from __future__ import annotations

import click

from .base import Ctx, _complete_jobs, cli, pass_ctx


@cli.command()
@click.argument("names", nargs=-1, metavar="[NAME...]", shell_complete=_complete_jobs)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["toml", "json"]),
    default="toml",
    show_default=True,
    help="TOML, or the same document as JSON.",
)
@pass_ctx
def export(obj: Ctx, names: tuple[str, ...], fmt: str) -> None:
    """Print jobs (all, or those named) as a job file: one [jobs.NAME] table a job.

    Only values that differ from the defaults are written, but tz always for cron and at
    jobs and start for fixed-rate jobs. `jobctl apply` reads it back.
    """
    from .. import jobfile

    store = obj.reader()
    if names:
        jobs = [store.get_job(n) for n in dict.fromkeys(names)]
    else:
        jobs = store.list_jobs()
    document = jobfile.export_document([jobfile.Definition.of(j) for j in jobs])
    click.echo(jobfile.dumps(document, fmt), nl=False)
