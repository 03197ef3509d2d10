"""The command line: parse, call the store, render. The only click user.

Heavy modules (rich, croniter, the store) are imported inside the commands that need
them, so ``jobctl --version`` starts fast. One error boundary (:func:`main`) turns every
JobctlError and click usage error into a single ``Error: …`` line and its exit code.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from .errors import JobctlError, UsageError

if TYPE_CHECKING:
    from .store import Store

FINAL_STATES = ("succeeded", "dead", "cancelled", "skipped")


# ---------------------------------------------------------------------- plumbing


class Ctx:
    def __init__(self, db: str | None) -> None:
        self.db_option = db
        self._store: Store | None = None

    def store(self) -> Store:
        if self._store is None:
            from .paths import resolve_db_path
            from .store import Store

            self._store = Store.open(resolve_db_path(self.db_option))
        return self._store

    def now(self) -> datetime:
        from .clock import SystemClock

        return SystemClock().now()

    def poke(self, message: str) -> None:
        """Tell running daemons that something changed (a hint; the table is the truth)."""
        from .wake import poke

        store = self.store()
        poke(store.wake_addresses(self.now()), message)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


pass_ctx = click.make_pass_decorator(Ctx)


def _complete_jobs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    try:
        root = ctx.find_root()
        db = root.params.get("db")
        from .paths import resolve_db_path
        from .store import Store

        path = resolve_db_path(db)
        if not path.exists():
            return []
        with Store.open(path, create=False) as store:
            names = store.job_names()
    except Exception:
        return []
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def _complete_runs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    try:
        root = ctx.find_root()
        from .paths import resolve_db_path
        from .store import Store

        path = resolve_db_path(root.params.get("db"))
        if not path.exists():
            return []
        with Store.open(path, create=False) as store:
            runs = store.list_runs(limit=50)
    except Exception:
        return []
    return [
        CompletionItem(str(r.id), help=f"{r.job_name} {r.state.value}")
        for r in runs
        if str(r.id).startswith(incomplete)
    ]


class JobctlGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=JobctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="Database file (default: $JOBCTL_DB, else the user data dir's jobctl/jobctl.db).",
)
@click.version_option(__version__, "--version", prog_name="jobctl", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
    """jobctl: a cron replacement that never loses a run and shows every run it made.

    One SQLite file holds the jobs, their runs and every attempt; `jobctl daemon` fires
    and runs them; every other command reads or edits the file directly.
    """
    ctx.obj = Ctx(db)
    ctx.call_on_close(ctx.obj.close)


# ---------------------------------------------------------------------- shared options


def trigger_options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option(
            "--cron",
            metavar="EXPR",
            help="5-field cron expression, a macro like @daily, or @reboot.",
        ),
        click.option(
            "--every", metavar="DURATION", help="Fixed rate: windows at start + k·DURATION."
        ),
        click.option(
            "--after-completion",
            is_flag=True,
            default=None,
            help="With --every: the next window is DURATION after the previous run ends.",
        ),
        click.option("--start", metavar="TIME", help="With --every: the anchor (default: now)."),
        click.option("--at", metavar="TIME", help="One shot at an ISO 8601 time (naive = --tz)."),
        click.option("--in", "in_", metavar="DURATION", help="One shot DURATION from now."),
        click.option(
            "--manual",
            is_flag=True,
            default=None,
            help="Never fires by itself; runs come from `jobctl run`.",
        ),
        click.option(
            "--tz",
            metavar="ZONE",
            help="IANA zone the cron expression is read in (default: local).",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def policy_options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option(
            "--catchup",
            metavar="skip|once|all",
            help="Missed windows: skip, run once, or run all (default once).",
        ),
        click.option(
            "--catchup-limit",
            type=int,
            metavar="N",
            help="With --catchup all: at most N missed windows run (default 6).",
        ),
        click.option(
            "--overlap",
            metavar="forbid|allow|replace",
            help="A window while a run is leased: skip it, run both, or replace (default forbid).",
        ),
        click.option(
            "--timeout", metavar="DURATION", help="Kill the attempt's process group after DURATION."
        ),
        click.option(
            "--retries",
            type=int,
            metavar="N",
            help="Retry a failed attempt up to N times (default 2).",
        ),
        click.option(
            "--backoff",
            metavar="DURATION",
            help="Retry k waits min(backoff·2^(k-1), 1h), jittered (default 10s).",
        ),
        click.option(
            "--priority",
            type=int,
            metavar="N",
            help="Higher runs first among due runs (default 0).",
        ),
        click.option(
            "--jitter",
            metavar="DURATION",
            help="Start each window a random delay in [0, DURATION) late.",
        ),
        click.option(
            "--env",
            multiple=True,
            metavar="KEY=VALUE",
            help="Environment variable for the command (repeatable).",
        ),
        click.option("--cwd", metavar="DIR", help="Working directory (default $HOME)."),
        click.option(
            "--shell", metavar="PATH", help="Shell that runs the command (default /bin/sh)."
        ),
        click.option(
            "--on-failure", metavar="COMMAND", help="Shell command run once when a run ends dead."
        ),
        click.option("--stdin", metavar="TEXT", help="Text fed to the command's standard input."),
        click.option("--description", metavar="TEXT", help="A note shown by `show`."),
        click.option(
            "--lock", multiple=True, metavar="NAME", help="Every run holds this lock (repeatable)."
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


POLICY_KEYS = (
    "catchup",
    "catchup_limit",
    "overlap",
    "timeout",
    "retries",
    "backoff",
    "priority",
    "jitter",
    "env",
    "cwd",
    "shell",
    "on_failure",
    "stdin",
    "description",
    "lock",
)
TRIGGER_KEYS = ("cron", "every", "after_completion", "start", "at", "in_", "manual", "tz")


def _split(kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from .specs import TriggerOptions

    trig = TriggerOptions(**{k: kwargs.pop(k) for k in TRIGGER_KEYS})
    trig.after_completion = bool(trig.after_completion)
    trig.manual = bool(trig.manual)
    policies = {k: kwargs.pop(k) for k in POLICY_KEYS}
    return trig, policies


def _emit_job(obj: Ctx, job: Any, as_json: bool, verb: str) -> None:
    from . import output

    if as_json:
        output.print_json(output.job_json(job, None))
    else:
        nxt = output.local_time(job.next_run_at) if job.next_run_at else "-"
        output.print_lines([f"{verb} job {job.name}; next run: {nxt}"])


# ---------------------------------------------------------------------- job commands


@cli.command(context_settings={"ignore_unknown_options": False})
@click.argument("name")
@trigger_options
@policy_options
@click.option("--paused", is_flag=True, help="Create the job paused.")
@click.option("--replace", "replace_", is_flag=True, help="Overwrite a job of the same name.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@click.argument("command", nargs=-1, required=True)
@pass_ctx
def add(
    obj: Ctx,
    name: str,
    command: tuple[str, ...],
    paused: bool,
    replace_: bool,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Create a job: NAME, one trigger, policies, then -- COMMAND.

    One COMMAND argument is a shell string; several are shell-quoted and joined.
    """
    from .specs import build_spec

    trig, policies = _split(kwargs)
    now = obj.now()
    spec = build_spec(name, trig, policies, command, now, paused=paused)
    job = obj.store().add_job(spec, now, replace_existing=replace_)
    obj.poke(f"job:{job.id}")
    _emit_job(obj, job, as_json, "replaced" if replace_ else "added")


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@trigger_options
@policy_options
@click.option("--command", "new_command", metavar="COMMAND", help="A new shell command.")
@click.option("--rename", metavar="NEW", help="A new name.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@pass_ctx
def edit(
    obj: Ctx, name: str, new_command: str | None, rename: str | None, as_json: bool, **kwargs: Any
) -> None:
    """Change a job. Runs already created keep their settings."""
    from .specs import build_trigger, check_name, check_text, policy_changes

    trig, policies = _split(kwargs)
    now = obj.now()
    store = obj.store()
    changes = policy_changes(policies)
    if trig.given():
        changes["trigger"] = build_trigger(trig, now)
    elif trig.tz or trig.after_completion or trig.start:
        current = store.get_job(name).trigger
        if current.kind.value != "cron" or trig.after_completion or trig.start:
            raise UsageError("--tz, --start and --after-completion need their trigger flag too")
        from dataclasses import replace as dc_replace

        from .durations import parse_zone

        parse_zone(check_text(trig.tz or "", "--tz"))
        changes["trigger"] = dc_replace(current, tz=trig.tz)
    if new_command is not None:
        from .specs import join_command

        changes["command"] = join_command([new_command])
    if rename is not None:
        changes["name"] = check_name(rename)
    if not changes:
        raise UsageError("nothing to change: give a trigger, a policy, --command or --rename")
    job = store.edit_job(name, changes, now)
    obj.poke(f"job:{job.id}")
    _emit_job(obj, job, as_json, "edited")


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of jobs.")
@pass_ctx
def list_(obj: Ctx, as_json: bool) -> None:
    """Jobs: name, schedule, next run, last run state, state."""
    from . import output

    store = obj.store()
    jobs = store.list_jobs()
    last = store.last_runs()
    if as_json:
        output.print_json([output.job_json(j, last.get(j.id)) for j in jobs])
    else:
        output.print_jobs(jobs, last)


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Recent runs to show.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the job and its runs as JSON.")
@pass_ctx
def show(obj: Ctx, name: str, limit: int, as_json: bool) -> None:
    """One job in full, with its recent runs."""
    from . import output

    store = obj.store()
    job = store.get_job(name)
    runs = store.list_runs(name, limit=limit)
    last = store.last_runs([job.id]).get(job.id)
    if as_json:
        data = output.job_json(job, last)
        data["runs"] = [output.run_json(r) for r in runs]
        output.print_json(data)
    else:
        output.print_job(job, runs)


@cli.command("next")
@click.argument("name", required=False, shell_complete=_complete_jobs)
@click.option("--cron", metavar="EXPR", help="A cron expression instead of a job.")
@click.option(
    "--every", metavar="DURATION", help="An interval instead of a job (anchored at --from)."
)
@click.option("--tz", metavar="ZONE", help="With --cron: the zone (default local).")
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1, max=10000),
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
    cron: str | None,
    every: str | None,
    tz: str | None,
    count: int,
    from_: str | None,
    as_json: bool,
) -> None:
    """The next N fire times, computed exactly as the daemon fires them (DST included)."""
    from . import durations, output, triggers
    from .clock import iso
    from .specs import TriggerOptions, build_trigger

    now = obj.now()
    if sum(x is not None for x in (name, cron, every)) != 1:
        raise UsageError("give a job NAME, --cron EXPR or --every DURATION")
    if name is not None:
        trigger = obj.store().get_job(name).trigger
    else:
        trigger = build_trigger(
            TriggerOptions(cron=cron, every=every, tz=tz, start=from_ if every else None), now
        )
    zone = trigger.tz
    after = durations.parse_time(from_, zone, now) if from_ else now
    times = []
    t = after
    for _ in range(count):
        nt = triggers.next_fire(trigger, t)
        if nt is None:
            break
        times.append(nt)
        t = nt
    if as_json:
        output.print_json([iso(x) for x in times])
    elif not times:
        output.print_lines(["no fire times"])
    else:
        from zoneinfo import ZoneInfo

        z = ZoneInfo(zone)
        output.print_lines([x.astimezone(z).isoformat() for x in times])


@cli.command()
@click.argument("name", required=False, shell_complete=_complete_jobs)
@click.option("--state", metavar="STATE", help="Only runs in this state.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="At most N runs."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of runs.")
@pass_ctx
def runs(obj: Ctx, name: str | None, state: str | None, limit: int, as_json: bool) -> None:
    """Runs, newest first."""
    from . import output
    from .models import RunState

    st = None
    if state is not None:
        try:
            st = RunState(state)
        except ValueError:
            raise UsageError(
                f"invalid --state {state!r}: use " + "|".join(s.value for s in RunState)
            ) from None
    rows = obj.store().list_runs(name, st, limit)
    if as_json:
        output.print_json([output.run_json(r) for r in rows])
    else:
        output.print_runs(rows)


@cli.command()
@click.argument("run_id", type=int, shell_complete=_complete_runs)
@click.option("--attempt", type=int, metavar="K", help="Which attempt (default: the last).")
@click.option("--json", "as_json", is_flag=True, help="Print the attempt with its output as JSON.")
@pass_ctx
def logs(obj: Ctx, run_id: int, attempt: int | None, as_json: bool) -> None:
    """The captured output (last 64 KiB of stdout+stderr) of an attempt."""
    from . import output

    att, data = obj.store().get_output(run_id, attempt)
    if as_json:
        d = output.attempt_json(att)
        d["output"] = data.decode("utf-8", "replace")
        output.print_json(d)
    else:
        output.print_output(data, tty=sys.stdout.isatty())


@cli.command("run")
@click.argument("name", shell_complete=_complete_jobs)
@click.option("--wait", is_flag=True, help="Block until the run ends; exit 0 only if it succeeded.")
@click.option("--key", metavar="K", help="Idempotency key: one run per (job, key).")
@click.option(
    "--env", multiple=True, metavar="KEY=VALUE", help="Payload for this run (repeatable)."
)
@click.option("--lock", multiple=True, metavar="NAME", help="A lock this run holds (repeatable).")
@click.option(
    "--priority", type=int, metavar="N", help="Priority of this run (default: the job's)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@pass_ctx
def run_(
    obj: Ctx,
    name: str,
    wait: bool,
    key: str | None,
    env: tuple[str, ...],
    lock: tuple[str, ...],
    priority: int | None,
    as_json: bool,
) -> None:
    """Force a run now and print its id."""
    from . import output
    from .specs import check_lock_name, check_text, parse_env_pairs

    if key is not None:
        check_text(key, "--key")
        if not key or len(key) > 1024:
            raise UsageError("invalid --key: 1 to 1024 characters")
    payload = parse_env_pairs(env)
    locks = [check_lock_name(lk) for lk in lock]
    store = obj.store()
    run, created = store.enqueue_run(
        name, obj.now(), key=key, env=payload, locks=locks, priority=priority
    )
    if created:
        obj.poke(f"run:{run.id}")
    if wait:
        if not store.live_daemons(obj.now()):
            click.echo("jobctl: no daemon is running; waiting for one to start", err=True)
        run = _wait_for(store, run.id)
    if as_json:
        data = output.run_json(run)
        data["created"] = created
        output.print_json(data)
    else:
        output.print_lines([str(run.id)] if not wait else [f"{run.id} {run.state.value}"])
    if wait and run.state.value != "succeeded":
        sys.exit(1)


def _wait_for(store: Store, run_id: int) -> Any:
    delay = 0.02
    while True:
        run = store.get_run(run_id)
        if run.state.value in FINAL_STATES:
            return run
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


@cli.command()
@click.argument(
    "targets", nargs=-1, required=True, metavar="RUN_ID... | NAME", shell_complete=_complete_jobs
)
@click.option("--json", "as_json", is_flag=True, help="Print the affected runs as JSON.")
@pass_ctx
def cancel(obj: Ctx, targets: tuple[str, ...], as_json: bool) -> None:
    """Cancel runs by id, or a job by NAME (its open runs, and the job for good)."""
    from . import output

    store = obj.store()
    now = obj.now()
    if all(t.isdigit() for t in targets):
        runs = store.cancel_runs([int(t) for t in targets], now)
        obj.poke("run:cancel")
        if as_json:
            output.print_json([output.run_json(r) for r in runs])
        else:
            output.print_lines(
                [
                    f"run {r.id}: {'cancelling' if r.state.value == 'leased' else r.state.value}"
                    for r in runs
                ]
            )
        return
    if len(targets) != 1:
        raise UsageError("give run ids, or one job NAME")
    from .specs import check_name

    job, ids = store.cancel_job(check_name(targets[0]), now)
    obj.poke(f"job:{job.id}")
    if as_json:
        output.print_json([output.run_json(store.get_run(i)) for i in ids])
    else:
        output.print_lines([f"job {job.name} cancelled ({len(ids)} open runs cancelled)"])


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@pass_ctx
def pause(obj: Ctx, name: str) -> None:
    """Stop a job firing (its windows are neither run nor recorded)."""
    job = obj.store().pause_job(name, obj.now())
    obj.poke(f"job:{job.id}")
    click.echo(f"paused {job.name}")


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@pass_ctx
def resume(obj: Ctx, name: str) -> None:
    """Restart a paused job from its next future window."""
    from . import output

    job = obj.store().resume_job(name, obj.now())
    obj.poke(f"job:{job.id}")
    output.print_lines([f"resumed {job.name}; next run: {output.local_time(job.next_run_at)}"])


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@click.option("--force", is_flag=True, help="Delete even while a run is leased.")
@pass_ctx
def rm(obj: Ctx, name: str, force: bool) -> None:
    """Delete a job and its whole history."""
    job = obj.store().delete_job(name, force=force)
    obj.poke(f"job:{job.id}")
    click.echo(f"removed {job.name}")


@cli.command("retry-dead")
@click.argument("targets", nargs=-1, metavar="[NAME | RUN_ID...]", shell_complete=_complete_jobs)
@click.option("--all", "all_", is_flag=True, help="Every dead run of every job.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@pass_ctx
def retry_dead(obj: Ctx, targets: tuple[str, ...], all_: bool, as_json: bool) -> None:
    """Dead runs back to pending with a fresh set of attempts."""
    from . import output

    store = obj.store()
    now = obj.now()
    if all_ and targets:
        raise UsageError("give --all, a NAME, or run ids, not several")
    if all_:
        runs = store.retry_dead(now, all_jobs=True)
    elif targets and all(t.isdigit() for t in targets):
        runs = store.retry_dead(now, run_ids=[int(t) for t in targets])
    elif len(targets) == 1:
        runs = store.retry_dead(now, job_name=targets[0])
    else:
        raise UsageError("give a job NAME, run ids, or --all")
    if runs:
        obj.poke("run:retry")
    if as_json:
        output.print_json([output.run_json(r) for r in runs])
    else:
        output.print_lines([f"{len(runs)} dead runs back to pending"])


@cli.command()
@click.option(
    "--older-than", required=True, metavar="DURATION", help="Delete finished runs older than this."
)
@pass_ctx
def prune(obj: Ctx, older_than: str) -> None:
    """Delete finished runs (and their attempts) older than DURATION."""
    from .durations import parse_duration

    seconds = parse_duration(older_than)
    n = obj.store().prune(obj.now() - timedelta(seconds=seconds))
    click.echo(f"pruned {n} runs")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print status as JSON.")
@pass_ctx
def status(obj: Ctx, as_json: bool) -> None:
    """Daemons (pid, host, leader, heartbeat), run counts by state, next due window."""
    from . import output
    from .clock import iso

    st = obj.store().status(obj.now())
    if as_json:
        output.print_json(
            {
                "daemons": [output.daemon_json(d) for d in st.daemons],
                "counts": st.counts,
                "next_due_at": iso(st.next_due_at),
            }
        )
    else:
        output.print_status(st.daemons, st.counts, st.next_due_at)


@cli.command()
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Attempts run at once.",
)
@click.option(
    "--reserved",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Workers kept for runs with priority >= --reserved-priority.",
)
@click.option(
    "--reserved-priority",
    type=int,
    metavar="P",
    help="Runs below P may hold at most workers-reserved workers.",
)
@click.option(
    "--lease",
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="Lease on runs and on the scheduler; renewed every third.",
)
@click.option(
    "--shutdown-grace",
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="On SIGTERM, how long running attempts may finish.",
)
@pass_ctx
def daemon(
    obj: Ctx,
    workers: int,
    reserved: int,
    reserved_priority: int | None,
    lease: str,
    shutdown_grace: str,
) -> None:
    """Run the scheduler and workers in the foreground; logs to stderr."""
    from .daemon import Daemon, DaemonConfig
    from .durations import parse_duration
    from .store import check_ownership

    if reserved >= workers and reserved > 0:
        raise UsageError("--reserved must be less than --workers")
    if reserved and reserved_priority is None:
        raise UsageError("--reserved needs --reserved-priority")
    config = DaemonConfig(
        workers=workers,
        reserved=reserved,
        reserved_priority=reserved_priority,
        lease_seconds=parse_duration(lease),
        shutdown_grace_seconds=parse_duration(shutdown_grace),
    )
    store = obj.store()
    check_ownership(store.path)
    sys.exit(Daemon(store, config).run())


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish."""
    click.echo(completion_script(shell), nl=False)


def completion_script(shell: str) -> str:
    from click.shell_completion import get_completion_class

    comp_cls = get_completion_class(shell)
    assert comp_cls is not None
    source = comp_cls(cli, {}, "jobctl", "_JOBCTL_COMPLETE").source()
    return source if source.endswith("\n") else source + "\n"


# ---------------------------------------------------------------------- living with the system


def _read_crontab_source(source: str | None) -> str:
    """The text of FILE, of stdin for ``-``, or of ``crontab -l`` when no FILE is given."""
    import shutil
    import subprocess

    if source == "-":
        data = sys.stdin.buffer.read()
        what = "standard input"
    elif source is not None:
        try:
            with open(source, "rb") as fh:
                data = fh.read()
        except OSError as e:
            raise UsageError(f"cannot read {source}: {e.strerror or e}") from None
        what = source
    else:
        crontab_cmd = shutil.which("crontab")
        if crontab_cmd is None:
            raise UsageError(
                "no FILE given and no `crontab` command found: give FILE, or - for stdin"
            )
        proc = subprocess.run([crontab_cmd, "-l"], capture_output=True, check=False)
        if proc.returncode != 0:
            raise JobctlError(
                "crontab -l failed: "
                + (proc.stderr.decode("utf-8", "replace").strip() or f"exit {proc.returncode}")
            )
        data = proc.stdout
        what = "crontab -l"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} is not valid UTF-8") from None


def _sendmail_path() -> str | None:
    import shutil

    found = shutil.which("sendmail")
    if found:
        return found
    return "/usr/sbin/sendmail" if os.path.exists("/usr/sbin/sendmail") else None


@cli.command("import-crontab")
@click.argument("source", required=False, metavar="[FILE | -]")
@click.option(
    "--system",
    is_flag=True,
    help="System format (/etc/crontab, /etc/cron.d): a user field before the command.",
)
@click.option("--dry-run", is_flag=True, help="Show what would be imported; write nothing.")
@click.option(
    "--prefix",
    default="cron",
    show_default=True,
    metavar="P",
    help="Jobs are named P-N, N the job's ordinal in the file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print {jobs, env, notices, errors} as JSON.")
@pass_ctx
def import_crontab(
    obj: Ctx, source: str | None, system: bool, dry_run: bool, prefix: str, as_json: bool
) -> None:
    """Migrate a crontab: FILE, - for stdin, or (no argument) `crontab -l`.

    With any error nothing is imported and it exits 2. Importing the same file again
    changes nothing.
    """
    import getpass

    from . import crontab, output, triggers
    from .specs import spec_from_crontab

    report = crontab.parse_crontab(
        _read_crontab_source(source),
        prefix=prefix,
        system=system,
        current_user=getpass.getuser(),
        sendmail=_sendmail_path(),
        validate_cron=triggers.validate_cron_expr,
    )
    now = obj.now()
    errors = list(report.errors)
    specs = []
    for job in report.jobs:
        try:
            specs.append(spec_from_crontab(job, now))
        except JobctlError as e:
            errors.append((job.line, str(e)))
    errors.sort(key=lambda e: e[0])
    if errors or dry_run:
        jobs = (
            [(_unsaved_job(spec, now), None, "would import") for spec in specs]
            if not errors
            else []
        )
    else:
        jobs = _save_imported(obj, specs, now)
    if as_json:
        output.print_json(
            {
                "jobs": [_imported_json(job, last, dry_run) for job, last, _ in jobs],
                "env": report.env,
                "notices": [{"line": n, "message": m} for n, m in report.notices],
                "errors": [{"line": n, "message": m} for n, m in errors],
            }
        )
    else:
        for n, m in report.notices:
            click.echo(f"notice: line {n}: {_one_line(m)}", err=True)
        output.print_lines(
            [
                f"{verb} {job.name}  {output.schedule_text(job)}  {job.spec.command}"
                for job, _, verb in jobs
            ]
        )
    if errors:
        for n, m in errors:
            click.echo(f"Error: line {n}: {_one_line(m)}", err=True)
        sys.exit(2)


def _save_imported(obj: Ctx, specs: list[Any], now: datetime) -> list[tuple[Any, Any, str]]:
    """Write every spec in one transaction; (job, last run, what happened) per job."""
    store = obj.store()
    existing = set(store.job_names())
    saved = store.add_jobs(specs, now)
    if any(changed for _, changed in saved):
        obj.poke("all")
    last = store.last_runs([job.id for job, _ in saved])
    return [
        (
            job,
            last.get(job.id),
            "unchanged" if not changed else "updated" if job.name in existing else "added",
        )
        for job, changed in saved
    ]


def _unsaved_job(spec: Any, now: datetime) -> Any:
    """The Job a spec would become if it were written now (id 0: not stored)."""
    from .models import Job, JobState
    from .triggers import next_fire

    return Job(
        id=0,
        spec=spec,
        state=JobState.ACTIVE,
        created_at=now,
        schedule_from=now,
        next_run_at=next_fire(spec.trigger, now),
        last_window_at=None,
        missed_total=0,
        last_boot_id=None,
    )


def _imported_json(job: Any, last: Any, dry_run: bool) -> dict[str, Any]:
    from . import output

    data = output.job_json(job, last)
    if dry_run:
        data["id"] = None
    return data


@cli.group(cls=JobctlGroup)
def service() -> None:
    """The systemd user service that keeps `jobctl daemon` running."""


def _service_db_path(obj: Ctx) -> str | None:
    """The database to name in ExecStart: only when --db or JOBCTL_DB chose it."""
    if not (obj.db_option or os.environ.get("JOBCTL_DB")):
        return None
    from .paths import resolve_db_path

    return os.path.abspath(resolve_db_path(obj.db_option))


@service.command("install")
@click.option("--print", "print_", is_flag=True, help="Only print the unit; write nothing.")
@pass_ctx
def service_install(obj: Ctx, print_: bool) -> None:
    """Write the unit file, then `systemctl --user daemon-reload` and `enable --now`."""
    from . import service as svc

    executable = svc.find_executable(sys.argv[0])
    if executable is None:
        raise JobctlError("cannot find the jobctl executable: put jobctl on PATH")
    text = svc.unit_text(executable, _service_db_path(obj))
    if print_:
        click.echo(text, nl=False)
        return
    path = svc.unit_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    click.echo(f"wrote {path}")
    failure = svc.run_calls(svc.install_calls(), svc.run_command)
    if failure is not None:
        raise JobctlError(
            f"{failure.stderr}; {svc.NO_MANAGER_HINT} (the unit file stays at {path})"
        )
    click.echo(f"enabled and started {svc.UNIT_NAME}")


@service.command("uninstall")
@pass_ctx
def service_uninstall(obj: Ctx) -> None:
    """`systemctl --user disable --now`, remove the unit file, daemon-reload."""
    from . import service as svc

    path = svc.unit_path()
    if not path.exists():
        click.echo(f"{svc.UNIT_NAME} is not installed (no {path})")
        return
    failure = svc.run_calls(svc.uninstall_calls(), svc.run_command)
    path.unlink()
    click.echo(f"removed {path}")
    if failure is None:
        failure = svc.run_calls([["daemon-reload"]], svc.run_command)
    if failure is not None:
        raise JobctlError(f"{failure.stderr}; stop any `jobctl daemon` still running yourself")
    click.echo(f"stopped and disabled {svc.UNIT_NAME}")


@service.command("status")
@click.option(
    "--json", "as_json", is_flag=True, help="Print {unit_file, installed, active, daemons} as JSON."
)
@pass_ctx
def service_status(obj: Ctx, as_json: bool) -> None:
    """Whether the unit is installed and active, and the daemons the database knows."""
    from . import output
    from . import service as svc
    from .paths import resolve_db_path
    from .store import Store

    path = svc.unit_path()
    result = svc.systemctl(["is-active", svc.UNIT_NAME], svc.run_command)
    active = result.stdout.strip() or None
    db = resolve_db_path(obj.db_option)
    daemons = []
    if db.exists():
        with Store.open(db, create=False) as store:
            daemons = store.live_daemons(obj.now())
    if as_json:
        output.print_json(
            {
                "unit_file": str(path),
                "installed": path.exists(),
                "active": active,
                "daemons": [output.daemon_json(d) for d in daemons],
            }
        )
        return
    output.print_lines(
        [
            f"unit file: {path} ({'installed' if path.exists() else 'not installed'})",
            f"systemd: {active or 'unknown (' + _one_line(result.stderr or 'no answer') + ')'}",
            f"live daemons: {len(daemons)}",
            *(
                f"  pid {d.pid} on {d.host}{' (leader)' if d.leader else ''}, "
                f"heartbeat {output.local_time(d.heartbeat_at)}"
                for d in daemons
            ),
        ]
    )


# ---------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    """The console script: one error boundary, one exit code."""
    args = sys.argv[1:] if argv is None else argv
    try:
        for a in args:
            a.encode("utf-8")
    except UnicodeEncodeError:
        click.echo("Error: an argument is not valid UTF-8", err=True)
        sys.exit(2)
    if any("\0" in a for a in args):  # no real argv holds one; paths and sqlite refuse it
        click.echo("Error: an argument contains a NUL character", err=True)
        sys.exit(2)
    try:
        rv = cli.main(args=args, prog_name="jobctl", standalone_mode=False)
    except JobctlError as e:
        click.echo(f"Error: {_one_line(str(e))}", err=True)
        sys.exit(e.exit_code)
    except click.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:
            click.echo(e.ctx.get_help())
            click.echo("Error: missing command", err=True)
            sys.exit(2)
        click.echo(f"Error: {_one_line(e.format_message())}", err=True)
        sys.exit(2)
    except click.ClickException as e:
        click.echo(f"Error: {_one_line(e.format_message())}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("Error: aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("Error: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    except Exception as e:  # the boundary: no traceback reaches a user
        if os.environ.get("JOBCTL_DEBUG"):
            raise
        click.echo(f"Error: internal error: {type(e).__name__}: {_one_line(str(e))}", err=True)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    main()
