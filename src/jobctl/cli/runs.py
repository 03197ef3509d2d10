"""Commands on runs: runs, logs, run, cancel, retry-dead, prune."""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from ..errors import UsageError
from ..models import FINISHED_RUN_STATES
from .base import (
    INT64,
    Ctx,
    _complete_jobs,
    _complete_runs,
    cli,
    complete_states,
    int64,
    pass_ctx,
)

if TYPE_CHECKING:
    from ..store import CommandStore


@cli.command()
@click.argument("name", required=False, shell_complete=_complete_jobs)
@click.option(
    "--state", metavar="STATE", shell_complete=complete_states, help="Only runs in this state."
)
@click.option("--limit", type=int64(1), default=20, show_default=True, help="At most N runs.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of runs.")
@pass_ctx
def runs(obj: Ctx, name: str | None, state: str | None, limit: int, as_json: bool) -> None:
    """Runs, newest first."""
    from .. import output
    from ..models import RunState

    st = None
    if state is not None:
        try:
            st = RunState(state)
        except ValueError:
            raise UsageError(
                f"invalid --state {state!r}: use " + "|".join(s.value for s in RunState)
            ) from None
    rows = obj.reader().list_runs(name, st, limit)
    if as_json:
        output.print_json([output.run_json(r) for r in rows])
    else:
        output.print_runs(rows)


@cli.command()
@click.argument("run_id", type=int64(0), shell_complete=_complete_runs)
@click.option("--attempt", type=INT64, metavar="K", help="Which attempt (default: the last).")
@click.option("--json", "as_json", is_flag=True, help="Print the attempt with its output as JSON.")
@pass_ctx
def logs(obj: Ctx, run_id: int, attempt: int | None, as_json: bool) -> None:
    """The captured output (last 64 KiB of stdout+stderr) of an attempt."""
    from .. import output

    att, data = obj.reader().get_output(run_id, attempt)
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
    "--priority", type=INT64, metavar="N", help="Priority of this run (default: the job's)."
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
    from .. import output
    from ..specs import check_lock_name, check_text, parse_env_pairs

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


def _wait_for(store: CommandStore, run_id: int) -> Any:
    delay = 0.02
    while True:
        run = store.get_run(run_id)
        if run.state in FINISHED_RUN_STATES:
            return run
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _run_ids(targets: tuple[str, ...]) -> list[int]:
    """Run ids typed on the command line; beyond 64 bits is invalid input."""
    from ..specs import check_int

    return [check_int(int(t), "run id", 0) for t in targets]


@cli.command()
@click.argument(
    "targets", nargs=-1, required=True, metavar="RUN_ID... | NAME", shell_complete=_complete_jobs
)
@click.option("--json", "as_json", is_flag=True, help="Print the affected runs as JSON.")
@pass_ctx
def cancel(obj: Ctx, targets: tuple[str, ...], as_json: bool) -> None:
    """Cancel runs by id, or a job by NAME (its open runs, and the job for good)."""
    from .. import output

    store = obj.store()
    now = obj.now()
    if all(t.isdigit() for t in targets):
        runs = store.cancel_runs(_run_ids(targets), now)
        obj.poke("run:cancel")
        for job_id in sorted({r.job_id for r in runs}):
            obj.poke(f"job:{job_id}")  # a fixed-delay job moves on when its run ends
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
    from ..specs import check_name

    job, ids = store.cancel_job(check_name(targets[0]), now)
    obj.poke(f"job:{job.id}")
    if as_json:
        output.print_json([output.run_json(store.get_run(i)) for i in ids])
    else:
        output.print_lines([f"job {job.name} cancelled ({len(ids)} open runs cancelled)"])


@cli.command("retry-dead")
@click.argument("targets", nargs=-1, metavar="[NAME | RUN_ID...]", shell_complete=_complete_jobs)
@click.option("--all", "all_", is_flag=True, help="Every dead run of every job.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@pass_ctx
def retry_dead(obj: Ctx, targets: tuple[str, ...], all_: bool, as_json: bool) -> None:
    """Dead runs back to pending with a fresh set of attempts."""
    from .. import output

    store = obj.store()
    now = obj.now()
    if all_ and targets:
        raise UsageError("give --all, a NAME, or run ids, not several")
    if all_:
        runs = store.retry_dead(now, all_jobs=True)
    elif targets and all(t.isdigit() for t in targets):
        runs = store.retry_dead(now, run_ids=_run_ids(targets))
    elif len(targets) == 1:
        runs = store.retry_dead(now, job_name=targets[0])
    else:
        raise UsageError("give a job NAME, run ids, or --all")
    if runs:
        obj.poke("run:retry")
    if as_json:
        output.print_json([output.run_json(r) for r in runs])
    else:
        n = len(runs)
        output.print_lines([f"{n} dead run{'' if n == 1 else 's'} back to pending"])


@cli.command()
@click.option(
    "--older-than", required=True, metavar="DURATION", help="Delete finished runs older than this."
)
@pass_ctx
def prune(obj: Ctx, older_than: str) -> None:
    """Delete finished runs (and their attempts) older than DURATION."""
    from ..durations import parse_duration

    seconds = parse_duration(older_than)
    n = obj.store().prune(obj.now() - timedelta(seconds=seconds))
    click.echo(f"pruned {n} runs")
