"""``jobctl plan``: the load the jobs' windows put on each minute, and how to spread it
(jobctl(1), jobctl plan)."""

from __future__ import annotations

import click

from .base import Choice, Ctx, cli, int64, pass_ctx, warn


@cli.command()
@click.option("--from", "from_", metavar="TIME", help="Start of the range (default: now).")
@click.option(
    "--hours",
    type=int64(1),
    metavar="N",
    default=24,
    show_default=True,
    help="Length of the range in hours.",
)
@click.option(
    "--by",
    type=Choice(["minute", "hour"]),
    default="minute",
    show_default=True,
    help="The slot windows are counted in.",
)
@click.option("--suggest", is_flag=True, help="Print a job file that moves crowded jobs to H.")
@click.option(
    "--max-starts",
    type=int64(1),
    metavar="N",
    default=5,
    show_default=True,
    help="With --suggest: more starts than this in one slot is crowded.",
)
@click.option("--json", "as_json", is_flag=True, help="Print every slot with a start or a run.")
@pass_ctx
def plan(
    obj: Ctx,
    from_: str | None,
    hours: int,
    by: str,
    suggest: bool,
    max_starts: int,
    as_json: bool,
) -> None:
    """Every window of every active job in the range, counted per minute (or hour), with
    the runs expected to be running in each from each job's median duration (its last 20
    succeeded runs; a job with none counts in its window's slot only). Prints the 10
    busiest slots and a one-line chart.

    --suggest prints a job file, as export writes it, that moves every cron job whose
    minute is a plain number shared by more than --max-starts windows to H in the minute
    field (the other fields kept): `jobctl plan --suggest | jobctl apply -` spreads them.
    """
    from .. import jobfile, loadplan, output, zones
    from ..durations import parse_time
    from ..errors import UsageError

    if hours > 24 * 366:
        raise UsageError("--hours is at most 8784 (a year)")
    store, now = obj.reader(), obj.now()
    start = parse_time(from_, zones.local_zone_name(), now) if from_ else now
    jobs = store.list_jobs()
    active = [j.id for j in jobs if j.state.value == "active"]
    medians = loadplan.median_durations(store.recent_durations(active, loadplan.DURATION_RUNS))
    slot_seconds = loadplan.SLOT_SECONDS[by]
    slots = loadplan.plan_slots(jobs, medians, start, hours, slot_seconds)
    if suggest:
        moved = loadplan.suggest_spread(jobs, slots, max_starts)
        if not moved:
            warn(f"nothing to spread: no {by} has more than {max_starts} cron starts to move")
        document = jobfile.export_document([jobfile.Definition.of(j) for j in moved])
        click.echo(jobfile.dumps(document, "json" if as_json else "toml"), nl=False)
        return
    if as_json:
        output.print_json(output.plan_json(slots))
        return
    line, per_mark, most = loadplan.chart(slots, start, hours, slot_seconds)
    output.print_plan(loadplan.busiest(slots), line, per_mark, most, by, start, hours)
