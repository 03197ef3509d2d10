"""Living with the system: status, daemon, completion, import-crontab, service."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from ..errors import JobctlError, UsageError
from .base import INT64, Choice, Ctx, Integer, JobctlGroup, _one_line, cli, int64, pass_ctx

if TYPE_CHECKING:
    pass

#: more workers than this is a typo, not a machine: each is a process the daemon watches
MAX_WORKERS = 4096


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print status as JSON.")
@pass_ctx
def status(obj: Ctx, as_json: bool) -> None:
    """Daemons (pid, host, leader, heartbeat), run counts by state, next due window."""
    from .. import output
    from ..clock import iso

    st = obj.reader().status(obj.now())
    if as_json:
        output.print_json(
            {
                "daemons": [output.daemon_json(d) for d in st.daemons],
                "counts": st.counts,
                "next_due_at": iso(st.next_due_at),
                "maintenance": output.maintenance_json(st.maintenance),
            }
        )
    else:
        output.print_status(st.daemons, st.counts, st.next_due_at, st.maintenance)


@cli.command()
@click.option(
    "--workers",
    type=Integer(1, MAX_WORKERS),
    metavar="N",
    default=4,
    show_default=True,
    help="Attempts run at once.",
)
@click.option(
    "--reserved",
    type=int64(0),
    metavar="K",
    default=0,
    show_default=True,
    help="Workers kept for runs with priority >= --reserved-priority.",
)
@click.option(
    "--reserved-priority",
    type=INT64,
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
@click.option(
    "--notify-threads",
    type=Integer(1, 64),
    default=4,
    show_default=True,
    help="Notifications sent at once, each on its own delivery thread (off the loop).",
)
@click.option(
    "--notify-retry",
    default="10s",
    show_default=True,
    metavar="DURATION",
    help="A failed delivery's first retry; doubling, at most 60 times this, 10 tries.",
)
@click.option(
    "--tag",
    "tags",
    multiple=True,
    metavar="TAG",
    help="A label jobs' --on may ask for (repeatable); host:HOSTNAME is always carried.",
)
@click.option(
    "--log-level",
    type=Choice(["debug", "info", "warning"]),
    default="info",
    show_default=True,
    help="The least level logged: debug adds every attempt's start and success; "
    "warning keeps faults only.",
)
@pass_ctx
def daemon(
    obj: Ctx,
    workers: int,
    reserved: int,
    reserved_priority: int | None,
    lease: str,
    shutdown_grace: str,
    notify_threads: int,
    notify_retry: str,
    tags: tuple[str, ...],
    log_level: str,
) -> None:
    """Run the scheduler and workers in the foreground; logs to stderr.

    With --tag the daemon claims runs of jobs whose --on asks for that tag; every daemon
    also carries host:HOSTNAME, so `--on host:db1` pins a job to one host. A job without
    --on runs on any daemon."""
    from ..daemon import Daemon, DaemonConfig
    from ..durations import parse_duration
    from ..specs import check_tag

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
        notify_threads=notify_threads,
        notify_retry_seconds=parse_duration(notify_retry),
        tags=tuple(check_tag(t) for t in tags),
    )
    handle = obj.handle()
    handle.check_safe()
    from ..logs import Level, Log

    sys.exit(Daemon(handle, config, log=Log(level=Level.named(log_level))).run())


@cli.command()
@click.argument("shell", type=Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish."""
    click.echo(completion_script(shell), nl=False)


def completion_script(shell: str) -> str:
    from click.shell_completion import get_completion_class

    comp_cls = get_completion_class(shell)
    assert comp_cls is not None
    source = comp_cls(cli, {}, "jobctl", "_JOBCTL_COMPLETE").source()
    if shell == "fish":
        # click splits "plain,VALUE\tHELP" at every comma, cutting a help text at its first
        source = source.replace(
            '(string split "," $completion)', '(string split -m 1 "," $completion)'
        )
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
@click.option("--dry-run", is_flag=True, help="Show what the import would do; write nothing.")
@click.option(
    "--prefix",
    default="cron",
    show_default=True,
    metavar="P",
    help="Jobs are named P-N; a line keeps the job it was imported as, matched by content.",
)
@click.option("--prune", is_flag=True, help="Delete the jobs of the prefix no line matches.")
@click.option(
    "--watch",
    is_flag=True,
    help="Add watched jobs and print the crontab with each command wrapped in "
    "jobctl exec NAME --, to install in place of the old one.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print {jobs, env, notices, errors, actions} as JSON."
)
@pass_ctx
def import_crontab(
    obj: Ctx,
    source: str | None,
    system: bool,
    dry_run: bool,
    prefix: str,
    prune: bool,
    watch: bool,
    as_json: bool,
) -> None:
    """Migrate a crontab: FILE, - for stdin, or (no argument) `crontab -l`.

    A line keeps the job it was imported as (same schedule and command, else same
    command), so editing the crontab and importing it again never moves a job's history
    onto another command. With any error nothing is imported and it exits 2.

    With --watch the work stays in the crontab: each line becomes a watched job, and the
    crontab is printed (on stdout; the summary on stderr) with each command wrapped in
    `jobctl exec NAME --`, which pings its start and end.
    """
    import getpass

    from .. import importer, output

    now = obj.now()
    text = _read_crontab_source(source)
    plan = importer.plan_import(
        text,
        now,
        prefix=prefix,
        system=system,
        current_user=getpass.getuser(),
        sendmail=_sendmail_path(),
        watch=watch,
    )
    if plan.errors:  # nothing is imported: the database is not even opened
        matched = importer.match_jobs(plan.specs, [], prefix)
        rows = importer.preview(plan, matched, now)
    elif dry_run:
        matched = importer.match_jobs(plan.specs, obj.reader().list_jobs(), prefix)
        rows = importer.preview(plan, matched, now)
    else:
        store = obj.store()
        matched = importer.match_jobs(plan.specs, store.list_jobs(), prefix)
        rows = importer.save_import(store, plan, matched, now, prune=prune)
    removed = [] if plan.errors else [j.name for j in matched.removed]
    report = plan.report
    wrapped = None
    if watch and not plan.errors:
        wrapped = importer.wrapped_crontab(text, plan, matched, _exec_prefix(obj), system=system)
    if as_json:
        output.print_json(
            {
                **({"crontab": wrapped} if wrapped is not None else {}),
                "jobs": [_imported_json(row, dry_run) for row in rows],
                "env": report.env,
                "notices": [{"line": n, "message": m} for n, m in report.notices],
                "errors": [{"line": n, "message": m} for n, m in plan.errors],
                "actions": [{"job": row.job.name, "action": row.verb} for row in rows]
                + [{"job": name, "action": "removed", "deleted": prune} for name in removed],
            }
        )
    else:
        for n, m in report.notices:
            click.echo(f"notice: line {n}: {_one_line(m)}", err=True)
        summary = output.print_lines if wrapped is None else _echo_err
        summary(
            [
                f"{row.verb} {row.job.name}  {output.schedule_text(row.job)}  "
                f"{'(watched)' if row.job.spec.watched else row.job.spec.command}"
                for row in rows
            ]
            + [
                f"removed {name}"
                if prune
                else f"removed from the file: {name} (kept; --prune deletes it)"
                for name in removed
            ]
        )
        if wrapped is not None:
            sys.stdout.write(wrapped if wrapped.endswith("\n") else wrapped + "\n")
    if plan.errors:
        for n, m in plan.errors:
            click.echo(f"Error: line {n}: {_one_line(m)}", err=True)
        sys.exit(2)


def _echo_err(lines: list[str]) -> None:
    for line in lines:
        click.echo(line, err=True)


def _exec_prefix(obj: Ctx) -> str:
    """How a crontab line calls ``jobctl exec`` into this database: this jobctl by its
    path (cron's PATH is short) and the --db it was given (cron's environment has no
    JOBCTL_DB)."""
    import shlex
    import shutil

    program = shutil.which("jobctl") or "jobctl"
    db = obj.db_option or os.environ.get("JOBCTL_DB")
    prefix = shlex.quote(program)
    if db:
        prefix += f" --db {shlex.quote(str(db))}"
    return prefix + " exec"


def _imported_json(row: Any, dry_run: bool) -> dict[str, Any]:
    from .. import output

    data = output.job_json(row.job, row.last_run)
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
    from ..paths import resolve_db_path

    location = resolve_db_path(obj.db_option)
    if isinstance(location, str):  # a URL: never write its password into the unit
        from ..store import shown_location

        return shown_location(location)
    return os.path.abspath(location)


@service.command("install")
@click.option("--print", "print_", is_flag=True, help="Only print the unit; write nothing.")
@pass_ctx
def service_install(obj: Ctx, print_: bool) -> None:
    """Write the unit file, then `systemctl --user daemon-reload` and `enable --now`."""
    from .. import service as svc

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
    from .. import service as svc

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
    from .. import output
    from .. import service as svc
    from ..paths import resolve_db_path
    from ..store import open_store

    path = svc.unit_path()
    result = svc.systemctl(["is-active", svc.UNIT_NAME], svc.run_command)
    active = result.stdout.strip() or None
    db = resolve_db_path(obj.db_option)
    daemons = []
    if isinstance(db, str) or db.exists():
        handle = open_store(db, create=False)
        try:
            daemons = handle.commands.live_daemons(obj.now())
        finally:
            handle.close()
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
