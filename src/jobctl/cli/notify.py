"""Notifications (README, Getting told): channels (``notify``), deliveries (``notifications``) and
the monitoring plugin (``check``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from ..errors import JobctlError, UsageError
from .base import (
    Ctx,
    JobctlGroup,
    _complete_choices,
    _completion_values,
    cli,
    int64,
    pass_ctx,
    warn,
)

if TYPE_CHECKING:
    from ..checks import CheckResult

EVENT_WORDS = "failed,dead,succeeded,recovered,missed,late,long,anomaly,paused"


def _complete_channels(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:  # type: ignore[type-arg]
    from click.shell_completion import CompletionItem

    names = _completion_values(ctx, lambda store: [c.name for c in store.list_channels()])
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


@cli.group(cls=JobctlGroup)
def notify() -> None:
    """Channels: where notifications go (webhook, email, command)."""


@notify.command("add")
@click.argument("name")
@click.option(
    "--webhook",
    metavar="URL",
    help="POST each notification as JSON to URL (no user:password@ in it: give credentials "
    "as --header 'Authorization: …').",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="'K: V'",
    help="With --webhook: a header sent with each POST (repeatable).",
)
@click.option("--email", metavar="ADDRESS", help="Mail each notification to ADDRESS.")
@click.option(
    "--smtp",
    metavar="HOST[:PORT]",
    help="With --email: the SMTP server (default: sendmail -t). STARTTLS when it offers it; "
    "AUTH ($JOBCTL_SMTP_USER, $JOBCTL_SMTP_PASSWORD) only over TLS or to a loopback address.",
)
@click.option(
    "--command",
    metavar="COMMAND",
    help="Run COMMAND with /bin/sh, the notification's JSON on its stdin.",
)
@click.option(
    "--default",
    "default",
    metavar="EVENTS",
    help=f"Tell this channel about EVENTS ({EVENT_WORDS}) for every job that names no "
    "channel of its own.",
)
@click.option("--replace", "replace_", is_flag=True, help="Overwrite a channel of that name.")
@pass_ctx
def notify_add(
    obj: Ctx,
    name: str,
    webhook: str | None,
    headers: tuple[str, ...],
    email: str | None,
    smtp: str | None,
    command: str | None,
    default: str | None,
    replace_: bool,
) -> None:
    """Create a channel NAME: one of --webhook, --email or --command."""
    from ..delivery import sendmail_path
    from ..notifications import build_channel

    ch = build_channel(
        name,
        webhook=webhook,
        email=email,
        command=command,
        headers=headers,
        smtp=smtp,
        default=default,
    )
    if email is not None and smtp is None and sendmail_path() is None:
        warn("no --smtp given and no sendmail on this host: mail cannot be sent from here")
    obj.store().add_channel(ch, obj.now(), replace=replace_)
    verb = "replaced" if replace_ else "added"
    click.echo(f"{verb} channel {ch.name} ({ch.kind.value} {ch.shown_target})")


@notify.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of channels.")
@pass_ctx
def notify_list(obj: Ctx, as_json: bool) -> None:
    """Channels: name, kind, target (a webhook as scheme and host only), default events."""
    from .. import output

    channels = obj.reader().list_channels()
    if as_json:
        output.print_json([output.channel_json(c) for c in channels])
    else:
        output.print_channels(channels)


@notify.command("rm")
@click.argument("name", shell_complete=_complete_channels)
@pass_ctx
def notify_rm(obj: Ctx, name: str) -> None:
    """Delete a channel; its undelivered notifications are dropped."""
    dropped = obj.store().delete_channel(name, obj.now())
    extra = f"; {dropped} undelivered notification(s) dropped" if dropped else ""
    click.echo(f"removed channel {name}{extra}")


@notify.command("test")
@click.argument("name", shell_complete=_complete_channels)
@pass_ctx
def notify_test(obj: Ctx, name: str) -> None:
    """Deliver one test notification now: exit 0 when delivered, 1 with the error."""
    from ..delivery import DeliveryError, test_delivery

    channel = obj.reader().get_channel(name)
    try:
        test_delivery(channel, obj.now())
    except DeliveryError as e:
        raise JobctlError(f"channel {name}: {e}") from None
    click.echo(f"delivered a test notification to {name} ({channel.shown_target})")


@cli.command()
@click.option("--job", metavar="NAME", help="Only the notifications of this job.")
@click.option(
    "--state",
    metavar="pending|sent|failed|dropped",
    shell_complete=_complete_choices(["pending", "sent", "failed", "dropped"]),
    help="Only notifications in this state.",
)
@click.option(
    "--limit", type=int64(1), default=20, show_default=True, help="How many, newest first."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@pass_ctx
def notifications(obj: Ctx, job: str | None, state: str | None, limit: int, as_json: bool) -> None:
    """Deliveries, newest first: channel, event, job, run, state, tries, error."""
    from .. import output
    from ..notifications import NotificationState

    wanted = None
    if state is not None:
        try:
            wanted = NotificationState(state)
        except ValueError:
            raise UsageError(
                f"invalid --state {state!r}: use pending|sent|failed|dropped"
            ) from None
    items = obj.reader().list_notifications(job=job, state=wanted, limit=limit)
    if as_json:
        output.print_json([output.notification_json(n) for n in items])
    else:
        output.print_notifications(items)


def _print_check(result: CheckResult, as_json: bool) -> None:
    from .. import output

    if as_json:
        output.print_json(result.to_json())
    else:
        click.echo(result.line())


class PluginCommand(click.Command):
    """A command in the monitoring-plugin convention: bad usage (an unknown option, an
    invalid value) is the plugin's ``UNKNOWN`` on stdout with exit 3, never click's exit 2,
    which a monitoring system reads as ``CRITICAL``."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: object,
    ) -> click.Context:
        from .. import checks
        from .base import _one_line

        as_json = "--json" in args  # read first: the parser consumes the list
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as e:
            _print_check(checks.unknown(_one_line(e.format_message())), as_json)
            raise click.exceptions.Exit(checks.CheckState.UNKNOWN.value) from None


@cli.command(cls=PluginCommand)
@click.option(
    "--late",
    metavar="DURATION",
    default="5m",
    show_default=True,
    help="CRITICAL when a due run that a daemon could take waits unclaimed longer than this.",
)
@click.option(
    "--since",
    metavar="DURATION",
    default="24h",
    show_default=True,
    help="WARNING for a dead run or a failed notification this recent.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_ctx
def check(obj: Ctx, late: str, since: str, as_json: bool) -> None:
    """A monitoring plugin (Nagios convention): one line with perfdata, exit 0 OK,
    1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad usage of check too).

    A run held back by its own rules (a lock, overlap, --max-running, a paused job) is
    not late."""
    from .. import checks
    from ..durations import parse_duration
    from ..paths import resolve_db_path

    try:
        late_seconds = parse_duration(late)
        since_seconds = parse_duration(since)
    except UsageError as e:  # bad usage is the plugin's UNKNOWN (see PluginCommand)
        _print_check(checks.unknown(str(e)), as_json)
        sys.exit(checks.CheckState.UNKNOWN.value)
    try:
        path = resolve_db_path(obj.db_option)
        if not isinstance(path, str) and not path.exists():
            raise JobctlError(f"no database at {path}")
        from ..store import open_store

        handle = open_store(path, create=False)
        try:
            facts = handle.commands.check_facts(obj.now(), late_seconds, since_seconds)
        finally:
            handle.close()
        result = checks.judge(facts, late_text=late, since_text=since)
    except JobctlError as e:
        result = checks.unknown(f"cannot read the database: {e}")
    _print_check(result, as_json)
    sys.exit(result.code)
