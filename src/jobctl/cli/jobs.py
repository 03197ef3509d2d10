"""Commands on jobs: add, edit, list, show, next, pause, resume, rm."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..errors import Conflict, NameTaken, UsageError
from .base import (
    Ctx,
    Integer,
    TriggerOrder,
    _complete_jobs,
    _complete_zones,
    _emit_job,
    _split,
    cli,
    int64,
    pass_ctx,
    policy_options,
    trigger_options,
    warn,
    warn_all,
)

if TYPE_CHECKING:
    pass


# ---------------------------------------------------------------------- job commands


@cli.command(cls=TriggerOrder, context_settings={"ignore_unknown_options": False})
@click.argument("name")
@trigger_options
@policy_options
@click.option("--paused", is_flag=True, help="Create the job paused.")
@click.option("--replace", "replace_", is_flag=True, help="Overwrite a job of the same name.")
@click.option(
    "--watch",
    is_flag=True,
    help="Watch work that runs elsewhere: no COMMAND; it pings /ping/KEY (see jobctl ping).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@click.argument("command", nargs=-1)
@pass_ctx
def add(
    obj: Ctx,
    /,
    name: str,
    command: tuple[str, ...],
    paused: bool,
    replace_: bool,
    watch: bool,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Create a job: NAME, its trigger (several --cron and --every make one set), policies,
    then -- COMMAND.

    One COMMAND argument is a shell string; several are shell-quoted and joined. With
    --watch, no COMMAND: the job gets a ping key and its windows are recorded as runs that
    pings start and end (--grace, default 5m; --timeout: how long a started run may go
    without its end ping).
    """
    from ..specs import (
        build_spec,
        check_after,
        check_start_settings,
        secret_looking_env,
        trigger_warnings,
    )

    trig, policies = _split(kwargs)
    now = obj.now()
    from ..triggers import next_fire

    if watch:
        from ..watching import build_watch_spec

        if command:
            raise UsageError("--watch takes no COMMAND: the work runs elsewhere and pings")
        spec = build_watch_spec(name, trig, policies, now)
    elif not command:
        raise UsageError("give the COMMAND after -- (or --watch for work that runs elsewhere)")
    else:
        spec = build_spec(name, trig, policies, command, now)
    warn_all(trigger_warnings(spec.trigger) + check_start_settings(spec.cwd, spec.shell))
    warn_all(secret_looking_env(spec.env))
    if trig.after is not None:
        check_after(spec.name, spec.trigger, obj.store().list_jobs())
    try:
        job = obj.store().add_job(
            spec, next_fire(spec.trigger, now), now, paused=paused, replace_existing=replace_
        )
    except NameTaken as e:
        raise Conflict(f"{e} (use --replace)") from None
    obj.warn_if_no_daemon()
    _emit_job(obj, job, as_json, "replaced" if replace_ else "added")


@cli.command(cls=TriggerOrder)
@click.argument("names", nargs=-1, metavar="NAME", shell_complete=_complete_jobs)
@click.option(
    "-e",
    "--editor",
    "in_editor",
    is_flag=True,
    help="Edit the jobs named (all when none is) as a job file in $VISUAL or $EDITOR. "
    "A job changed by someone else while the editor was open refuses the text (exit 1, "
    "naming both revisions; the text is kept).",
)
@trigger_options
@policy_options
@click.option("--command", "new_command", metavar="COMMAND", help="A new shell command.")
@click.option("--rename", metavar="NEW", help="A new name.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@pass_ctx
def edit(
    obj: Ctx,
    /,
    names: tuple[str, ...],
    in_editor: bool,
    new_command: str | None,
    rename: str | None,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Change a job. Runs already created keep their settings.

    `--every D` alone keeps a fixed-delay job fixed-delay; `--tz` alone changes the zone of a
    cron job. `edit -e [NAME...]` opens the jobs' job file in $VISUAL, else $EDITOR, else vi,
    and applies what was saved as `apply` does (a table removed deletes its job).
    """
    from .. import specs

    if in_editor:
        given = [k for k, v in kwargs.items() if v not in (None, (), False)]
        if given or new_command is not None or rename is not None or as_json:
            raise UsageError("-e takes only job names: the options are edited in the file")
        from .code import edit_in_editor

        edit_in_editor(obj, names)
        return
    if len(names) != 1:
        raise UsageError("give one job NAME (or -e to edit jobs as a file in $EDITOR)")
    name = names[0]
    trig, policies = _split(kwargs)
    now = obj.now()
    store = obj.store()
    current = store.get_job(name)
    if current.spec.watched:
        from ..watching import check_watch_trigger, refuse_start_flags

        refuse_start_flags(policies)
        if new_command is not None:
            raise UsageError(f"job {name!r} is watched: it has no command")
    changes = specs.edit_changes(
        current, trig, policies, command=new_command, rename=rename, now=now
    )
    if current.spec.watched and "trigger" in changes:
        check_watch_trigger(changes["trigger"])
    if "trigger" in changes:
        warn_all(specs.trigger_warnings(changes["trigger"]))
        specs.check_after(changes.get("name", name), changes["trigger"], store.list_jobs())
    warn_all(specs.check_start_settings(changes.get("cwd"), changes.get("shell")))
    warn_all(specs.secret_looking_env(changes.get("env") or {}))
    from ..triggers import next_fire

    restart = "trigger" in changes
    nxt = next_fire(changes["trigger"], now) if restart else None
    job = store.edit_job(name, changes, now, next_run_at=nxt, restart_schedule=restart)
    obj.warn_if_no_daemon()
    _emit_job(obj, job, as_json, "edited")


@cli.command("list")
@click.option(
    "--failing",
    is_flag=True,
    help="Only jobs whose last finished run is dead or whose last attempt failed.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of jobs.")
@pass_ctx
def list_(obj: Ctx, failing: bool, as_json: bool) -> None:
    """Jobs: name, schedule, next run, last run state, state."""
    from .. import output

    store = obj.reader()
    jobs = store.list_jobs()
    last = store.last_runs()
    if failing:
        ids = store.failing_jobs()
        jobs = [j for j in jobs if j.id in ids]
    if as_json:
        output.print_json([output.job_json(j, last.get(j.id)) for j in jobs])
    else:
        output.print_jobs(jobs, last)


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@click.option(
    "--limit",
    type=int64(1),
    default=10,
    show_default=True,
    help="Recent runs to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the job and its runs as JSON.")
@pass_ctx
def show(obj: Ctx, name: str, limit: int, as_json: bool) -> None:
    """One job in full, with its recent runs."""
    from .. import output

    store = obj.reader()
    job = store.get_job(name)
    runs = store.list_runs(name, limit=limit)
    if as_json:
        data = output.job_json(job, store.last_runs([job.id]).get(job.id))
        data["runs"] = [output.run_json(r) for r in runs]
        output.print_json(data)
    else:
        output.print_job(job, runs)


@cli.command("next")
@click.argument("name", required=False, shell_complete=_complete_jobs)
@click.option(
    "--cron", multiple=True, metavar="EXPR", help="A cron expression instead of a job; repeatable."
)
@click.option(
    "--every",
    multiple=True,
    metavar="DURATION",
    help="An interval instead of a job (anchored at --from); repeatable, with --cron too.",
)
@click.option(
    "--tz",
    metavar="ZONE",
    shell_complete=_complete_zones,
    help="With --cron: the zone (default local).",
)
@click.option(
    "-n",
    "count",
    type=Integer(1, 10000),
    default=5,
    show_default=True,
    help="How many fire times.",
)
@click.option(
    "--from", "from_", metavar="TIME", help="Fire times strictly after TIME (default now)."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of times.")
@pass_ctx
def next_(
    obj: Ctx,
    name: str | None,
    cron: tuple[str, ...],
    every: tuple[str, ...],
    tz: str | None,
    count: int,
    from_: str | None,
    as_json: bool,
) -> None:
    """The next N fire times, computed exactly as the daemon fires them (DST included)."""
    from .. import durations, output, triggers
    from ..clock import iso
    from ..specs import TriggerOptions, build_trigger, trigger_warnings

    now = obj.now()
    if (name is not None and (cron or every)) or (name is None and not (cron or every)):
        raise UsageError("give a job NAME, --cron EXPR or --every DURATION")
    if name is not None:
        job = obj.reader().get_job(name)
        trigger = job.trigger
        after = durations.parse_time(from_, trigger.tz, now) if from_ else now
        marked = triggers.upcoming(job, after, count, with_excluded=not as_json)
        times = [t for t, _ in marked]
        excluded = {t for t, out in marked if out}
        if trigger.kind.value == "after":
            warn(f"job {job.name} follows {trigger.expr}: it runs when a run of that job ends")
        elif job.state.value == "paused":
            warn(f"job {job.name} is paused: these are the times it would fire once resumed")
        elif job.state.value != "active":
            warn(f"job {job.name} is {job.state.value}: it fires no more")
        elif triggers.is_fixed_delay(trigger):
            warn(f"job {job.name} runs {triggers.describe(trigger)}: later times follow each run")
    else:
        trigger = build_trigger(
            TriggerOptions(cron=cron, every=every, tz=tz, start=from_ if every else None), now
        )
        warn_all(trigger_warnings(trigger))
        after = durations.parse_time(from_, trigger.tz, now) if from_ else now
        times = triggers.next_fires(trigger, after, count)
        excluded = set()
    if as_json:
        output.print_json([iso(x) for x in times])
    elif trigger.kind.value == "after":
        output.print_lines([f"follows {trigger.expr}"])
    elif not times:
        output.print_lines(["no fire times"])
    else:
        output.print_lines(
            [
                output.local_time(x, trigger.tz) + ("  excluded" if x in excluded else "")
                for x in times
            ]
        )


def _one_or_all(name: str | None, every: bool, flags: dict[str, object]) -> None:
    from ..errors import UsageError

    if every and name is not None:
        raise UsageError("give a job name or --all, not both")
    if not every and name is None:
        raise UsageError("give a job name, or --all for a maintenance window")
    given = [flag for flag, value in flags.items() if value is not None]
    if given and not every:
        raise UsageError(f"{given[0]} goes with --all")


@cli.command()
@click.argument("name", required=False, shell_complete=_complete_jobs)
@click.option("--all", "every", is_flag=True, help="Start a maintenance window: nothing starts.")
@click.option("--until", metavar="TIME", help="With --all: when the window ends by itself.")
@click.option("--reason", metavar="TEXT", help="With --all: why, shown by status and check.")
@pass_ctx
def pause(obj: Ctx, name: str | None, every: bool, until: str | None, reason: str | None) -> None:
    """Stop a job firing (its windows are neither run nor recorded).

    --all starts a maintenance window instead: no daemon starts an attempt (running ones go
    on; pending and manual runs wait), and every window of every job that falls in it is
    recorded skipped (maintenance), so nothing catches up afterwards. It lasts until
    --until or `resume --all`; a second `pause --all` moves its end.
    """
    from .. import output, zones
    from ..specs import maintenance_window

    _one_or_all(name, every, {"--until": until, "--reason": reason})
    if name is not None:
        job = obj.store().pause_job(name, obj.now())
        click.echo(f"paused {job.name}")
        return
    now = obj.now()
    end, text = maintenance_window(until, reason, zones.local_zone_name(), now)
    held = obj.store().start_maintenance(end, text, now)
    output.print_lines([output.maintenance_line(held)])


@cli.command()
@click.argument("name", required=False, shell_complete=_complete_jobs)
@click.option("--all", "every", is_flag=True, help="End the maintenance window now.")
@pass_ctx
def resume(obj: Ctx, name: str | None, every: bool) -> None:
    """Restart a paused job from its next future window; --all ends a maintenance window
    (the windows that fell in it stay skipped)."""
    from .. import output
    from ..triggers import next_fire

    _one_or_all(name, every, {})
    store, now = obj.store(), obj.now()
    if name is None:
        ended = store.end_maintenance(now)
        output.print_lines(
            ["no maintenance window was in force"]
            if ended is None
            else [f"maintenance ended (it began {output.local_time(ended.since)})"]
        )
        return
    job = store.resume_job(name, next_fire(store.get_job(name).trigger, now), now)
    obj.warn_if_no_daemon()
    output.print_lines([f"resumed {job.name}; next run: {output.local_time(job.next_run_at)}"])


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@click.option("--force", is_flag=True, help="Delete even while a run is leased.")
@pass_ctx
def rm(obj: Ctx, name: str, force: bool) -> None:
    """Delete a job and its whole history.

    Refused (exit 1) while other jobs follow it with --after: delete them first, or give
    them another trigger.
    """
    job = obj.store().delete_job(name, force=force)
    click.echo(f"removed {job.name}")
