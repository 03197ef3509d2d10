"""Commands on a job's history of windows (jobctl(1), jobctl backfill and jobctl coverage)."""

from __future__ import annotations

import click

from .base import Ctx, _complete_jobs, cli, pass_ctx


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@click.option("--from", "from_", required=True, metavar="TIME", help="First window (included).")
@click.option("--to", "to", required=True, metavar="TIME", help="End of the range (excluded).")
@click.option("--dry-run", is_flag=True, help="Count what would be done; write nothing.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {created, requeued, left} (run ids); with --dry-run {windows, requeued, left}.",
)
@pass_ctx
def backfill(obj: Ctx, name: str, from_: str, to: str, dry_run: bool, as_json: bool) -> None:
    """Run the windows of [--from, --to) that did not run: a window with no run gets one,
    a skipped or dead one runs again; every other window is left alone, so a second call
    does nothing.

    Cron and fixed-rate jobs only; --to at most now; at most 10,000 windows a call. The
    runs follow the job's overlap, locks and priority, oldest window first.
    """
    from .. import output, planner
    from ..specs import backfill_windows

    store, now = obj.store(), obj.now()
    windows = backfill_windows(store.get_job(name), from_, to, now)
    done = store.backfill(name, windows, now, planner.plan_backfill, dry_run=dry_run)
    if not dry_run and (done.created or done.requeued):
        obj.warn_if_no_daemon()
    if as_json:
        if dry_run:
            data = output.backfill_dry_run_json(done.plan.create, done.requeued, done.plan.left)
        else:
            data = output.backfill_json(done.created, done.requeued, done.plan.left)
        output.print_json(data)
    else:
        created = len(done.plan.create) if dry_run else len(done.created)
        line = output.backfill_line(name, created, len(done.requeued), done.plan.left)
        output.print_lines([line + (" (dry run: nothing written)" if dry_run else "")])


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@click.option("--from", "from_", metavar="TIME", help="First window (default: the last 24).")
@click.option("--to", "to", metavar="TIME", help="End of the range, excluded (default: now).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of windows.")
@pass_ctx
def coverage(obj: Ctx, name: str, from_: str | None, to: str | None, as_json: bool) -> None:
    """Every window of the job's trigger in [--from, --to) with its run's state, or none
    where no row is kept, then a summary line. Default: the last 24 windows up to now."""
    from .. import output, planner
    from ..specs import coverage_windows, excluded_windows

    store = obj.reader()
    job = store.get_job(name)
    windows = coverage_windows(job, from_, to, obj.now())
    runs = store.window_runs(name, windows[0], windows[-1]) if windows else {}
    entries = planner.plan_coverage(windows, runs, excluded_windows(job, windows))
    if as_json:
        output.print_json(output.coverage_json(entries))
    else:
        output.print_coverage(entries, job.trigger.tz)
