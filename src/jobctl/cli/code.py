"""Jobs as code (README, Jobs in git): export, apply, edit -e (called by ``edit``), history,
rollback."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from .base import Choice, Ctx, _complete_jobs, _one_line, cli, int64, pass_ctx, warn_all


@cli.command()
@click.argument("names", nargs=-1, metavar="[NAME...]", shell_complete=_complete_jobs)
@click.option(
    "--format",
    "fmt",
    type=Choice(["toml", "json"]),
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
    calendars = {name: days for name, days, _ in store.calendar_list()}
    document = jobfile.export_document([jobfile.Definition.of(j) for j in jobs], calendars)
    click.echo(jobfile.dumps(document, fmt), nl=False)


def _read_source(source: str) -> str:
    """A job file's text: a path, or ``-`` for stdin."""
    from ..errors import UsageError

    try:
        if source == "-":
            return sys.stdin.read()
        with open(source, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        raise UsageError(f"{source}: not UTF-8 text") from None
    except OSError as e:
        raise UsageError(f"cannot read {source}: {e.strerror}") from None


def _file_errors(e: Any) -> NoReturn:
    """Every problem of a job file, one ``Error:`` line each; exit 2."""
    for problem in e.problems:
        click.echo(f"Error: {_one_line(str(problem))}", err=True)
    click.echo("nothing was applied", err=True)
    sys.exit(2)


def _show_plan(plan: Any, as_json: bool) -> None:
    from .. import output

    if as_json:
        output.print_json(plan.to_json())
    else:
        output.print_lines(plan.lines())


@cli.command()
@click.argument("source", metavar="FILE|-")
@click.option("--prune", is_flag=True, help="Delete the jobs that are not in the file.")
@click.option(
    "--force",
    is_flag=True,
    help="With --prune: delete every job even when the file adds none (an empty file).",
)
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {added, changed, removed} as JSON ({errors: [{line, message}]} on errors).",
)
@pass_ctx
def apply(obj: Ctx, source: str, prune: bool, force: bool, dry_run: bool, as_json: bool) -> None:
    """Make the jobs match a job file (as `export` writes it), all or nothing.

    Prints `+ NAME`, `~ NAME: FIELD OLD -> NEW; ...` and `- NAME` (nothing for unchanged
    jobs). With any error every one is listed (every invalid key of every job), nothing is
    applied, and it exits 2. A --prune that would delete every job and add none is refused
    (exit 1) unless --force is given.
    """
    from .. import applier
    from ..jobfile import FileErrors

    text = _read_source(source)
    now = obj.now()
    store = obj.reader() if dry_run else obj.store()
    try:
        plan = applier.plan_text(store, text, now, prune=prune, force=force)
    except FileErrors as e:
        if as_json:
            from .. import output

            output.print_json(
                {"errors": [{"line": p.line, "message": p.message} for p in e.problems]}
            )
        _file_errors(e)
    warn_all(applier.warnings(plan))
    if not dry_run:
        applier.apply_plan(store, plan, now, source="apply")
        if not plan.empty():
            obj.warn_if_no_daemon()
    _show_plan(plan, as_json)


def edit_in_editor(obj: Ctx, names: tuple[str, ...]) -> None:
    """``edit -e``: the export of those jobs (all when none is named) in $VISUAL, else
    $EDITOR, else vi; what was saved is applied as ``apply`` applies it, a job whose
    table was removed being deleted. Invalid text: the errors, and the file kept."""
    import os
    import shlex
    import subprocess
    import tempfile

    from .. import applier, jobfile
    from ..errors import Conflict, JobctlError

    store = obj.store()
    jobs = [store.get_job(n) for n in dict.fromkeys(names)] if names else store.list_jobs()
    calendars = {name: days for name, days, _ in store.calendar_list()}
    text = jobfile.dumps(
        jobfile.export_document([jobfile.Definition.of(j) for j in jobs], calendars)
    )
    fd, path = tempfile.mkstemp(prefix="jobctl-edit-", suffix=".toml")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        code = subprocess.call([*shlex.split(editor), path])
    except (OSError, ValueError) as e:
        os.unlink(path)
        raise JobctlError(f"cannot start the editor {editor!r}: {e}") from None
    with open(path, encoding="utf-8", errors="replace") as f:
        edited = f.read()
    if code != 0:
        if edited == text:
            os.unlink(path)
            raise JobctlError(f"the editor exited {code}: nothing was changed")
        raise JobctlError(f"the editor exited {code}: nothing was changed (the text is in {path})")
    if edited == text:
        os.unlink(path)
        click.echo("no changes")
        return
    now = obj.now()
    try:
        # a job changed by someone else while the editor was open: applying the text would
        # undo that change, so nothing is applied and the text is kept
        applier.check_unchanged(jobs, store.list_jobs())
        plan = applier.plan_text(store, edited, now, scope=[j.name for j in jobs])
    except jobfile.FileErrors as e:
        for problem in e.problems:
            click.echo(f"Error: {_one_line(str(problem))}", err=True)
        click.echo(f"nothing was changed; the edited text is kept in {path}", err=True)
        sys.exit(2)
    except Conflict as e:
        _kept(e, path)
    warn_all(applier.warnings(plan))
    try:
        applier.apply_plan(store, plan, now, source="cli")
    except Conflict as e:  # changed between the check and the write
        _kept(e, path)
    os.unlink(path)
    if plan.empty():
        click.echo("no changes")
        return
    _show_plan(plan, False)
    obj.warn_if_no_daemon()


def _kept(e: Exception, path: str) -> NoReturn:
    """``edit -e`` refused for a conflict: the reason, where the text is kept; exit 1."""
    click.echo(f"Error: {_one_line(str(e))}", err=True)
    click.echo(f"nothing was applied; the edited text is kept in {path}", err=True)
    sys.exit(1)


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@click.option("--json", "as_json", is_flag=True, help="Print the revisions as JSON.")
@pass_ctx
def history(obj: Ctx, name: str, as_json: bool) -> None:
    """Every change to a job: revision, time, who, from where, and what changed."""
    from .. import output

    revisions = obj.reader().history(name)
    if as_json:
        output.print_json([output.revision_json(r) for r in revisions])
    else:
        output.print_history(revisions)


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@click.argument("revision", type=int64(1))
@pass_ctx
def rollback(obj: Ctx, name: str, revision: int) -> None:
    """Make a job as it was at a revision (itself a new revision)."""
    store = obj.store()
    before = store.get_job(name)
    job = store.rollback_job(name, revision, obj.now())
    if job.revision == before.revision:
        click.echo(f"job {name} is already as at revision {revision}")
    else:
        click.echo(f"rolled back {name} to revision {revision} (now revision {job.revision})")
        obj.warn_if_no_daemon()
