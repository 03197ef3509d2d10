"""The command group, the shared options and the context every command gets."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import __version__

if TYPE_CHECKING:
    from ..store import CommandStore, Store


# ---------------------------------------------------------------------- plumbing


def _one_line(text: str) -> str:
    return " ".join(text.split())


class Ctx:
    def __init__(self, db: str | None) -> None:
        self.db_option = db
        self._store: Store | None = None

    def handle(self) -> Store:
        """The open database (both faces); created and migrated on first use (for commands
        that write, and the daemon)."""
        if self._store is None:
            from ..paths import resolve_db_path
            from ..store import open_store

            self._store = open_store(resolve_db_path(self.db_option))
        return self._store

    def store(self) -> CommandStore:
        """The commands' face of the database, created on first use."""
        return self.handle().commands

    def reader(self) -> CommandStore:
        """The database for a command that only reads: a missing one is never created.

        It is answered as an empty database, with ``warning: no database at PATH`` on
        stderr (jobctl(1), DESCRIPTION).
        """
        if self._store is None:
            from ..paths import resolve_db_path
            from ..store import open_store

            path = resolve_db_path(self.db_option)
            if isinstance(path, str):  # a PostgreSQL URL: is the jobctl schema there?
                from ..errors import NotFound
                from ..store import shown_location

                try:
                    self._store = open_store(path, create=False)
                except NotFound:
                    warn(f"no database at {shown_location(path)}")
                    self._store = open_store(":memory:")
            elif path.exists():
                self._store = open_store(path, create=False)
            else:
                warn(f"no database at {path}")
                self._store = open_store(":memory:")
        return self._store.commands

    def now(self) -> datetime:
        from ..clock import SystemClock

        return SystemClock().now()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def warn_if_no_daemon(self) -> None:
        """After a command enqueued or edited: say so when no daemon is live to act on it
        (jobctl(1), WATCHING A RUN); the command still succeeds. The change is committed by now, so
        a database error here is only a missing hint: it never fails the command."""
        from ..errors import StoreError

        try:
            live = self.store().live_daemons(self.now())
        except StoreError:
            return
        if not live:
            warn(NO_DAEMON_WARNING)


NO_DAEMON_WARNING = "no daemon is running; start one with jobctl daemon"

pass_ctx = click.make_pass_decorator(Ctx)


def warn(message: str) -> None:
    """One ``warning: …`` line on stderr."""
    click.echo(f"warning: {_one_line(message)}", err=True)


class InvalidValue(click.BadParameter):
    """A bad option value said in jobctl's words (``invalid --retries 'cpu': use a whole
    number``), without click's ``Invalid value for '--retries':`` before it."""

    def format_message(self) -> str:
        return self.message


class Integer(click.IntRange):
    """An integer from ``minimum`` to ``maximum`` (inclusive). Its range shows in ``--help``
    in words (``at least 1``, ``1 to 64``; nothing when any 64-bit integer will do), and a
    bad value is one jobctl sentence naming the option."""

    name = "integer"

    def __init__(self, minimum: int = -(2**63), maximum: int = 2**63 - 1) -> None:
        super().__init__(minimum, maximum)

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str | None:
        # an option's N, not click's INTEGER; an argument keeps its name (REVISION)
        return "N" if isinstance(param, click.Option) else None

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        what = _param_name(param)
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            text = str(value).strip()
            body = text[1:] if text[:1] in "+-" else text
            if not (body.isascii() and body.isdigit()):
                raise InvalidValue(f"invalid {what} {str(value)!r}: use a whole number")
            n = int(text)
        assert self.min is not None and self.max is not None
        if n < -(2**63) or n > 2**63 - 1:
            raise InvalidValue(f"invalid {what} {n}: beyond the 64-bit integer range")
        if n < self.min:
            raise InvalidValue(f"invalid {what} {n}: must be at least {self.min}")
        if n > self.max:
            raise InvalidValue(f"invalid {what} {n}: must be at most {self.max}")
        return n

    def _describe_range(self) -> str:
        low = self.min if self.min is not None and self.min > -(2**63) else None
        high = self.max if self.max is not None and self.max < 2**63 - 1 else None
        if low is not None and high is not None:
            return f"{low} to {high}"
        if low is not None:
            return f"at least {low}"
        if high is not None:
            return f"at most {high}"
        return ""


class Choice(click.Choice):  # type: ignore[type-arg]
    """One of a few words, shown as ``a|b`` in ``--help``; a bad one is one jobctl sentence
    (``invalid --by 'day': use minute|hour``), as ``--catchup`` says it."""

    def __init__(self, choices: Sequence[str]) -> None:
        super().__init__(list(choices))

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        return "|".join(str(c) for c in self.choices)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value in self.choices:
            return value
        words = "|".join(str(c) for c in self.choices)
        raise InvalidValue(f"invalid {_param_name(param)} {str(value)!r}: use {words}")


def _param_name(param: click.Parameter | None) -> str:
    """``--retries`` for an option (its longest name), ``RUN_ID`` for an argument."""
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    if param is not None:
        return param.human_readable_name
    return "value"


INT64 = Integer()
"""Any integer option: beyond the 64-bit range is invalid input (jobctl(1), EXIT STATUS)."""


def int64(minimum: int) -> Integer:
    """An integer option from ``minimum`` up to the 64-bit limit."""
    return Integer(minimum)


def _complete_choices(values: list[str]) -> Callable[..., list[Any]]:
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(v) for v in values if v.startswith(incomplete)]

    return complete


def _complete_zones(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from zoneinfo import available_timezones

    from click.shell_completion import CompletionItem

    return [CompletionItem(z) for z in sorted(available_timezones()) if z.startswith(incomplete)]


def complete_states(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from ..models import RunState

    return _complete_choices([s.value for s in RunState])(ctx, param, incomplete)


def _completion_values(ctx: click.Context, read: Callable[[Any], list[Any]]) -> list[Any]:
    """What ``read(store)`` gives on the database the command line names; [] on any
    problem (completion never creates a database nor prints an error)."""
    try:
        from ..paths import resolve_db_path
        from ..store import open_store

        path = resolve_db_path(ctx.find_root().params.get("db"))
        if isinstance(path, Path) and not path.exists():
            return []
        handle = open_store(path, create=False)
        try:
            return read(handle.commands)
        finally:
            handle.close()
    except Exception:
        return []


def _complete_jobs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    names = _completion_values(ctx, lambda store: store.job_names())
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def _complete_runs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    runs = _completion_values(ctx, lambda store: store.list_runs(limit=50))
    return [
        CompletionItem(str(r.id), help=f"{r.job_name} {r.state.value}")
        for r in runs
        if str(r.id).startswith(incomplete)
    ]


class JobctlGroup(click.Group):
    """A group whose commands list in the order they are written (help, completion).

    ``lazy`` names the module of each command not registered yet, in that order: the
    module is imported only when its command is looked up (click's "lazily loading
    subcommands"), so a start pays for the module of the command it runs and no other
    (docs/benchmarks.md: the CLI against ``import click``). Help and completion look up
    every command, and so import every module."""

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.lazy, *(name for name in self.commands if name not in self.lazy)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            importlib.import_module(self.lazy[cmd_name])  # its decorators register it
        return self.commands.get(cmd_name)


#: every command of ``jobctl``, in help order, with the module that registers it
COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(
        ("add", "edit", "list", "show", "next", "pause", "resume", "rm"), "jobctl.cli.jobs"
    ),
    **dict.fromkeys(("notify", "notifications", "check"), "jobctl.cli.notify"),
    **dict.fromkeys(
        ("runs", "logs", "inspect", "run", "cancel", "retry-dead", "prune"), "jobctl.cli.runs"
    ),
    **dict.fromkeys(("secret", "token"), "jobctl.cli.secrets"),
    **dict.fromkeys(
        ("status", "daemon", "completion", "import-crontab", "service"), "jobctl.cli.system"
    ),
    **dict.fromkeys(("ping", "exec"), "jobctl.cli.watch"),
    # jobs as code, then the database's own commands
    **dict.fromkeys(("export", "apply", "history", "rollback"), "jobctl.cli.code"),
    "db": "jobctl.cli.db",
    # the history commands, planning, calendars, and `serve` last
    **dict.fromkeys(("backfill", "coverage"), "jobctl.cli.history"),
    "plan": "jobctl.cli.plan",
    "calendar": "jobctl.cli.calendars",
    "serve": "jobctl.cli.serve",
}


@click.group(
    cls=JobctlGroup,
    lazy=COMMAND_MODULES,
    context_settings={"help_option_names": ["-h", "--help"]},
)
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
    if db is not None and not db.strip():
        raise click.BadParameter("give a database path", param_hint="'--db'")
    ctx.obj = Ctx(db)
    ctx.call_on_close(ctx.obj.close)


# ---------------------------------------------------------------------- shared options


def trigger_options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option(
            "--cron",
            multiple=True,
            metavar="EXPR",
            help="5-field cron expression, a macro like @daily, or @reboot; repeatable, "
            "with --every too (the windows of all of them).",
        ),
        click.option(
            "--every",
            multiple=True,
            metavar="DURATION",
            help="Fixed rate: windows at start + k·DURATION; repeatable.",
        ),
        click.option(
            "--after-completion",
            is_flag=True,
            default=None,
            help="With --every: the next window is DURATION after the previous run ends.",
        ),
        click.option(
            "--start",
            metavar="TIME",
            help="With --every: the first window (default: one interval from now); H: a phase "
            "chosen from the job's name.",
        ),
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
            shell_complete=_complete_zones,
            help="IANA zone the job's cron expressions, --except, calendar dates and naive "
            "times are read in (default: local).",
        ),
        click.option(
            "--after",
            metavar="JOB[:STATES]",
            shell_complete=_complete_jobs,
            help="Run when a run of JOB ends in STATES (comma list of succeeded, dead, "
            "cancelled; default succeeded), for that run's window.",
        ),
        click.option(
            "--active-from",
            metavar="TIME",
            help="No window before TIME (ISO 8601, naive = the job's zone; '' clears it).",
        ),
        click.option(
            "--active-until",
            metavar="TIME",
            help="No window after TIME; then the job is done ('' clears it).",
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
            shell_complete=_complete_choices(["skip", "once", "all"]),
            help="Missed windows: skip, run once, or run all (default once).",
        ),
        click.option(
            "--catchup-limit",
            type=INT64,
            metavar="N",
            help="With --catchup all: at most N missed windows run (default 6).",
        ),
        click.option(
            "--overlap",
            metavar="forbid|allow|replace|queue",
            shell_complete=_complete_choices(["forbid", "allow", "replace", "queue"]),
            help="A window while a run is leased: skip it, run both, replace, or let one "
            "wait (default forbid; allow for --manual).",
        ),
        click.option(
            "--timeout", metavar="DURATION", help="Kill the attempt's process group after DURATION."
        ),
        click.option(
            "--retries",
            type=INT64,
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
            type=INT64,
            metavar="N",
            help="Higher runs first among due runs (default 0).",
        ),
        click.option(
            "--jitter",
            metavar="DURATION",
            help="Start each window a random delay in [0, DURATION) late (0: none).",
        ),
        click.option(
            "--env",
            multiple=True,
            metavar="KEY=VALUE",
            help="Environment variable for the command (repeatable).",
        ),
        click.option(
            "--secret",
            multiple=True,
            metavar="ENV=NAME",
            help="Set ENV to the secret NAME's value, read when each attempt starts "
            "(repeatable; NAME alone means NAME=NAME); on edit it replaces the list.",
        ),
        click.option("--no-secrets", is_flag=True, default=None, help="Give the job no secret."),
        click.option(
            "--env-file",
            metavar="PATH",
            help="Read KEY=VALUE lines (systemd's EnvironmentFile= syntax) from PATH when "
            "each attempt starts; --env and --secret win over it.",
        ),
        click.option("--no-env-file", is_flag=True, default=None, help="Read no environment file."),
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
        click.option(
            "--on",
            "on",
            multiple=True,
            metavar="TAG",
            help="Only a daemon carrying this tag runs the job (repeatable: every tag; "
            "host:NAME is each daemon's own; on edit it replaces the set).",
        ),
        click.option("--anywhere", is_flag=True, help="Clear --on: any daemon runs the job."),
        click.option(
            "--deadline",
            metavar="DURATION",
            help="A run not started within DURATION of its window is skipped (manual runs "
            "are exempt).",
        ),
        click.option(
            "--pause-after-failures",
            type=INT64,
            metavar="N",
            help="Pause the job after N runs in a row end dead (0: never).",
        ),
        click.option(
            "--max-running",
            type=INT64,
            metavar="N",
            help="With --overlap allow: at most N runs at once, across all daemons (0: no cap).",
        ),
        click.option(
            "--ok-exit",
            metavar="CODES",
            help="Exit codes that count as success besides 0 (comma list, 1-255).",
        ),
        click.option(
            "--no-retry-exit",
            metavar="CODES",
            help="Exit codes after which the run is dead at once, whatever retries are left.",
        ),
        click.option(
            "--nice", type=INT64, metavar="N", help="Run the attempt at niceness N (0 to 19)."
        ),
        click.option(
            "--io-class",
            metavar="best-effort|idle",
            shell_complete=_complete_choices(["best-effort", "idle"]),
            help="I/O scheduling class of the attempt's processes.",
        ),
        click.option(
            "--memory-max",
            metavar="SIZE",
            help="Address space a process of the attempt may use (1M and up: K, M, G, T).",
        ),
        click.option(
            "--cpu-max",
            metavar="DURATION",
            help="CPU time a process of the attempt may use; then it fails with cpu limit.",
        ),
        click.option("--files-max", type=INT64, metavar="N", help="Open files a process may hold."),
        click.option(
            "--keep-runs",
            type=INT64,
            metavar="N",
            help="Keep the N most recent finished runs; older ones are deleted (default 1000).",
        ),
        click.option(
            "--keep-for",
            metavar="DURATION",
            help="Delete finished runs whose window is older than DURATION (default: no limit).",
        ),
        click.option(
            "--notify",
            multiple=True,
            metavar="CHANNEL[:EVENTS]",
            help="Tell CHANNEL about EVENTS (comma list; default "
            "dead,recovered,missed,late,anomaly,paused); repeatable; on edit it replaces "
            "the list.",
        ),
        click.option(
            "--no-notify",
            is_flag=True,
            default=None,
            help="Name no channel (the channels with --default are told).",
        ),
        click.option(
            "--except",
            "except_",
            multiple=True,
            metavar="EXPR",
            help="A window whose minute matches this cron expression (in the job's zone) is "
            "skipped (excluded); repeatable; on edit it replaces the list.",
        ),
        click.option(
            "--except-calendar",
            multiple=True,
            metavar="NAME",
            help="A window on a date of calendar NAME (in the job's zone) is skipped; "
            "repeatable; on edit it replaces the list.",
        ),
        click.option(
            "--no-except",
            is_flag=True,
            default=None,
            help="Clear --except and --except-calendar.",
        ),
        click.option(
            "--grace",
            metavar="DURATION",
            help="A run not started by its window + DURATION is late.",
        ),
        click.option(
            "--warn-after",
            metavar="DURATION",
            help="An attempt still running after DURATION is long.",
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
    "secret",
    "no_secrets",
    "env_file",
    "no_env_file",
    "cwd",
    "shell",
    "on_failure",
    "stdin",
    "description",
    "lock",
    "on",
    "anywhere",
    "deadline",
    "pause_after_failures",
    "max_running",
    "ok_exit",
    "no_retry_exit",
    "nice",
    "io_class",
    "memory_max",
    "cpu_max",
    "files_max",
    "keep_runs",
    "keep_for",
    "notify",
    "no_notify",
    "grace",
    "warn_after",
    "except_",
    "except_calendar",
    "no_except",
)
TRIGGER_KEYS = (
    "cron",
    "every",
    "after_completion",
    "start",
    "at",
    "in_",
    "manual",
    "tz",
    "after",
    "active_from",
    "active_until",
)


#: where :class:`TriggerOrder` leaves the set's flags in the order given
_ORDER = "jobctl.trigger_order"


class TriggerOrder(click.Command):
    """``add`` and ``edit``: click groups a repeated option's values by option, so
    ``--every 1h --cron '0 * * * *'`` would reach the command as its crons, then its
    everys; the set's order is the order given (the first names a window several make,
    ``JOBCTL_TRIGGER``). The parser's own record of each option met, in order, is kept in
    ``ctx.meta`` for :func:`_split` (a bad command line is left for click to report)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            _, _, met = self.make_parser(ctx).parse_args(args=list(args))
        except click.UsageError:
            met = []
        ctx.meta[_ORDER] = [p.name for p in met if p.name in ("cron", "every")]
        return super().parse_args(ctx, args)


def _split(kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from ..specs import TriggerOptions

    trig = TriggerOptions(**{k: kwargs.pop(k) for k in TRIGGER_KEYS})
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(_ORDER):
        trig.order = list(ctx.meta[_ORDER])
    trig.after_completion = bool(trig.after_completion)
    trig.manual = bool(trig.manual)
    policies = {k: kwargs.pop(k) for k in POLICY_KEYS}
    return trig, policies


def _emit_job(obj: Ctx, job: Any, as_json: bool, verb: str) -> None:
    from .. import output

    if as_json:
        output.print_json(output.job_json(job, None))
    else:
        nxt = output.local_time(job.next_run_at) if job.next_run_at else "-"
        lines = [f"{verb} job {job.name}; next run: {nxt}"]
        if job.spec.ping_key is not None:
            lines.append(f"ping: /ping/{job.spec.ping_key}")
        output.print_lines(lines)


def warn_all(messages: list[str]) -> None:
    for message in messages:
        warn(message)
