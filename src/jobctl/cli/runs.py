"""Commands on runs: runs, logs, inspect, run, cancel, retry-dead, prune."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ..errors import NotFound, UsageError
from .base import (
    INT64,
    Ctx,
    _complete_jobs,
    _complete_runs,
    cli,
    complete_states,
    int64,
    pass_ctx,
    warn,
)

if TYPE_CHECKING:
    from ..models import Attempt, Run
    from ..output import OutputStream
    from ..store import CommandStore


@cli.command()
@click.argument("name", required=False, shell_complete=_complete_jobs)
@click.option(
    "--state", metavar="STATE", shell_complete=complete_states, help="Only runs in this state."
)
@click.option(
    "--since",
    metavar="D|TIME",
    help="Only runs whose window is at or after TIME, or DURATION ago (2h, 3d).",
)
@click.option("--limit", type=int64(1), default=20, show_default=True, help="At most N runs.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of runs.")
@pass_ctx
def runs(
    obj: Ctx, name: str | None, state: str | None, since: str | None, limit: int, as_json: bool
) -> None:
    """Runs, newest first."""
    from .. import output, zones
    from ..durations import parse_since
    from ..models import RunState

    after = parse_since(since, zones.local_zone_name(), obj.now()) if since else None

    st = None
    if state is not None:
        try:
            st = RunState(state)
        except ValueError:
            raise UsageError(
                f"invalid --state {state!r}: use " + "|".join(s.value for s in RunState)
            ) from None
    rows = obj.reader().list_runs(name, st, limit, since=after)
    if as_json:
        output.print_json([output.run_json(r) for r in rows])
    else:
        output.print_runs(rows)


@cli.command()
@click.argument("target", metavar="RUN_ID|NAME", shell_complete=_complete_runs)
@click.option("--attempt", type=INT64, metavar="K", help="Which attempt (default: the last).")
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Then print new output as it comes, across retries, until the run ends.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the attempt with its output as JSON.")
@pass_ctx
def logs(obj: Ctx, target: str, attempt: int | None, follow: bool, as_json: bool) -> None:
    """The captured output (last 64 KiB of stdout+stderr) of an attempt.

    RUN_ID is a run's id (only digits); NAME a job, whose most recent run that has an
    attempt is shown.

    With --follow it prints what is stored, then new output within 2 s of the command
    writing it; before each new attempt a line `--- attempt K ---` goes to stderr; it exits
    0 when the run has ended. It reads the database only, so it works with no daemon on
    this host.
    """
    from .. import output

    if follow and as_json:
        raise UsageError("--follow and --json cannot be combined")
    run_id = _run_of(obj.reader(), target)
    if follow:
        _follow_logs(obj.reader(), run_id, attempt)
        return
    att, data = obj.reader().get_output(run_id, attempt)
    if as_json:
        d = output.attempt_json(att)
        d["output"] = data.decode("utf-8", "replace")
        output.print_json(d)
    else:
        output.print_output(data, tty=sys.stdout.isatty())


@cli.command()
@click.argument("target", metavar="RUN_ID|NAME", shell_complete=_complete_runs)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the run with its attempts and waiting."
)
@pass_ctx
def inspect(obj: Ctx, target: str, as_json: bool) -> None:
    """One run in full: its attempts (start, end, duration, exit code, error, output
    bytes, host, pid), how its on-failure command ended, and why it waits.

    RUN_ID is a run's id (only digits); NAME a job, whose most recent run that has an
    attempt is shown, as logs NAME shows its output (when none has one yet, its newest
    run, with why it waits).

    A pending or failed run waits for one reason: paused (its job is paused), no_daemon,
    not_due or backoff (until a time), lock (held by another run), overlap (a leased run of
    the same job), max_running (its --max-running runs are running), or workers (due and
    free, every worker that could take it busy).
    """
    from .. import output, planner

    store, now = obj.reader(), obj.now()
    run_id = _inspected_run(store, target)
    run = store.get_run(run_id)
    attempts = store.get_attempts(run_id)
    waiting = planner.waiting_reason(store.waiting(run_id, now))
    if as_json:
        notes = store.list_notifications(run_id=run_id, limit=100)
        output.print_json(output.inspect_json(run, attempts, waiting, notes))
    else:
        output.print_inspect(run, attempts, waiting, now)


@cli.command("run")
@click.argument("name", shell_complete=_complete_jobs)
@click.option("--wait", is_flag=True, help="Block until the run ends; exit 0 only if it succeeded.")
@click.option(
    "-f", "--follow", is_flag=True, help="Wait, and stream the run's output as logs --follow."
)
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
    follow: bool,
    key: str | None,
    env: tuple[str, ...],
    lock: tuple[str, ...],
    priority: int | None,
    as_json: bool,
) -> None:
    """Force a run now and print its id.

    With --wait: `run ID enqueued` on stderr at once, a live status line on a terminal, and
    one closing line with the outcome (`run 42 dead after 3 attempts: exit 7`). Ctrl-C
    stops only the waiting (exit 130); the run goes on.
    """
    from .. import output
    from ..models import JobState, RunState
    from ..specs import check_lock_name, check_text, parse_env_pairs

    if key is not None:
        check_text(key, "--key")
        if not key or len(key) > 1024:
            raise UsageError("invalid --key: 1 to 1024 characters")
    if follow and as_json:
        raise UsageError("--follow and --json cannot be combined")
    wait = wait or follow
    payload = parse_env_pairs(env)
    locks = [check_lock_name(lk) for lk in lock]
    store = obj.store()
    paused = store.get_job(name).state is JobState.PAUSED  # read first: nothing written yet
    run, created = store.enqueue_run(
        name, obj.now(), key=key, env=payload, locks=locks, priority=priority
    )
    # with --wait, Ctrl-C stops only the waiting from the moment the run is said to exist
    # (the daemon may claim it at once, before the waiting proper begins)
    interrupted: list[int] = []
    with _sigint_as_flag(interrupted) if wait else contextlib.nullcontext():
        if wait:
            said = "enqueued" if created else f"already exists (key {key})"
            click.echo(output.safe(f"run {run.id} {said}"), err=True)
        obj.warn_if_no_daemon()
        if paused:
            warn(f"job {name} is paused: run {run.id} waits until jobctl resume {name}")
        if wait:
            run = _wait_for(store, run, obj, interrupted, follow=follow)
    if interrupted:  # before the waiting, where no handler could be set (not the main thread)
        _stop_waiting(run)
    if as_json:
        data = output.run_json(run)
        data["created"] = created
        output.print_json(data)
    elif not wait:
        output.print_lines([str(run.id)])
    elif not follow:
        output.print_lines([f"{run.id} {run.state.value}"])
    if wait and run.state is not RunState.SUCCEEDED:
        sys.exit(1)


#: how often a follower or a waiter reads the store
FOLLOW_POLL_SECONDS = 0.25


@dataclass(frozen=True)
class Step:
    run: Run
    #: the run is final and every byte stored of its last attempt was shown
    done: bool


class Follower:
    """Shows a run's stored output as it grows, attempt after attempt (``logs --follow``).

    Each :meth:`step` reads the run, then the output of the attempt being shown; a later
    attempt number means the shown one ended (a run is claimed again only after its end,
    tail included, was written), so its rest is shown and ``--- attempt K ---`` goes to
    stderr before the next. Only :class:`CommandStore` reads, so it works on any backend
    and from any host.
    """

    def __init__(
        self, store: CommandStore, run_id: int, attempt: int | None, stream: OutputStream
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.attempt = attempt  # the attempt being shown; None until the first exists
        self.stream = stream
        self.shown_bytes = 0  # of self.attempt's output_bytes, what was shown

    def step(self) -> Step:
        from ..models import FINISHED_RUN_STATES

        run = self.store.get_run(self.run_id)
        final = run.state in FINISHED_RUN_STATES
        last = run.attempt
        if self.attempt is None:
            if last == 0:
                return Step(run, final)
            self.attempt = last
        while True:
            try:
                att, data = self.store.get_output(self.run_id, self.attempt)
            except NotFound:
                if self.attempt >= last:
                    return Step(run, final)
                att, data = None, b""  # no row for it (pruned): go on to the next
            if att is not None:
                self._show(att, data)
            if self.attempt >= last:
                return Step(run, final)
            self.stream.end()
            self.attempt += 1
            self.shown_bytes = 0
            click.echo(f"--- attempt {self.attempt} ---", err=True)

    def _show(self, att: Attempt, data: bytes) -> None:
        new = att.output_bytes - self.shown_bytes
        if new <= 0:
            return
        if new > len(data):
            # more than the kept tail was written since the last read
            click.echo(f"--- {new - len(data)} bytes not kept ---", err=True)
            new = len(data)
        self.stream.write(data[len(data) - new :])
        self.shown_bytes = att.output_bytes


def _follow_logs(store: CommandStore, run_id: int, attempt: int | None) -> None:
    """``logs --follow``: until the run is final; Ctrl-C ends it quietly (exit 130)."""
    from .. import output
    from ..models import FINISHED_RUN_STATES

    run = store.get_run(run_id)  # NotFound before anything is printed
    if attempt is not None and (
        attempt < 1 or attempt <= run.attempt or run.state in FINISHED_RUN_STATES
    ):
        store.get_output(run_id, attempt)  # only a later attempt of a live run may come
    follower = Follower(store, run_id, attempt, output.OutputStream(tty=sys.stdout.isatty()))
    try:
        while not follower.step().done:
            time.sleep(FOLLOW_POLL_SECONDS)
    except KeyboardInterrupt:
        sys.exit(130)


def _on_sigint(handler: Any) -> Any:
    """Set ``handler`` for SIGINT; the one it replaces, or None where signals cannot be
    set (not the main thread: Ctrl-C then comes as KeyboardInterrupt)."""
    try:
        return signal.signal(signal.SIGINT, handler)
    except ValueError:
        return None


@contextlib.contextmanager
def _sigint_as_flag(interrupted: list[int]) -> Iterator[None]:
    """Ctrl-C only appended to ``interrupted`` while inside (read between two looks at
    the store: an interrupt that landed inside a read of the database, a PostgreSQL query
    cancelled and its connection reset, could leave a waiter hanging or end it with a
    database error instead of 130); where no handler can be set (not the main thread) it
    comes as KeyboardInterrupt, appended too."""
    previous = _on_sigint(lambda signum, frame: interrupted.append(signum))
    try:
        yield
    except KeyboardInterrupt:
        interrupted.append(signal.SIGINT)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _wait_for(
    store: CommandStore, run: Run, obj: Ctx, interrupted: list[int], *, follow: bool
) -> Run:
    """Wait until the run is final or ``interrupted`` holds a Ctrl-C (see
    :func:`_sigint_as_flag`); a status line on a terminal, the output with ``follow``;
    then one closing line on stderr. Ctrl-C: the run goes on, exit 130."""
    from .. import output
    from ..models import FINISHED_RUN_STATES

    follower = (
        Follower(store, run.id, None, output.OutputStream(tty=sys.stdout.isatty()))
        if follow
        else None
    )
    status = None
    if not follow and sys.stderr.isatty():
        status = output.StatusLine()
    started = time.monotonic()
    delay = 0.02
    try:
        while not interrupted:
            if follower is not None:
                step = follower.step()
                run, done = step.run, step.done
            else:
                run = store.get_run(run.id)
                done = run.state in FINISHED_RUN_STATES
            if done:
                break
            if status is not None:
                status.update(_status_text(store, run, obj, time.monotonic() - started))
            time.sleep(delay)
            delay = min(delay * 1.5, FOLLOW_POLL_SECONDS)
    except KeyboardInterrupt:
        interrupted.append(signal.SIGINT)
    if status is not None:
        status.stop()
    if interrupted:
        _stop_waiting(run)
    click.echo(output.safe(output.outcome_line(run)), err=True)
    return run


def _stop_waiting(run: Run) -> NoReturn:
    """Ctrl-C while waiting: the run goes on, exit 130."""
    click.echo(f"run {run.id} goes on without waiting; jobctl cancel {run.id} stops it", err=True)
    sys.exit(130)


def _status_text(store: CommandStore, run: Run, obj: Ctx, elapsed: float) -> str:
    from .. import output, planner
    from ..models import RunState

    parts = [f"run {run.id} {run.state.value}"]
    if run.attempt:
        parts.append(
            f"attempt {run.attempt - run.attempt_base} of {run.max_attempts - run.attempt_base}"
        )
    if run.state in (RunState.PENDING, RunState.FAILED):
        waiting = planner.waiting_reason(store.waiting(run.id, obj.now()))
        if waiting is not None:
            parts.append(f"waiting: {waiting.reason.value}")
    parts.append(output.human_duration(elapsed))
    return " · ".join(parts)


def _run_of(store: CommandStore, target: str) -> int:
    """``logs`` and ``inspect`` ``RUN_ID|NAME``: digits are a run id; a name is its job's
    most recent run that has an attempt (jobctl(1), jobctl logs). Raises NotFound,
    UsageError."""
    from ..specs import check_int, check_name

    if target.isdigit():
        return check_int(int(target), "run id", 0)
    return store.last_attempted_run(check_name(target)).id


def _inspected_run(store: CommandStore, target: str) -> int:
    """``inspect RUN_ID|NAME``: as :func:`_run_of`, but a job none of whose runs has an
    attempt yet gives its newest run (a pending run is worth inspecting: it says why it
    waits). Raises NotFound, UsageError."""
    from ..errors import NotFound

    try:
        return _run_of(store, target)
    except NotFound:
        if target.isdigit():
            raise
        newest = store.list_runs(target, None, 1)
        if not newest:
            raise NotFound(f"job {target!r} has no run yet") from None
        return newest[0].id


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
