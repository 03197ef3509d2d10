"""Secrets (``secret set|list|rm``) and API tokens (``token add|list|rm``): README
"Secrets" and "Tokens". No command here ever prints a secret's value; ``token add`` prints
its token once, the only time it is shown."""

from __future__ import annotations

import sys

import click

from ..errors import UsageError
from .base import Ctx, JobctlGroup, _complete_choices, _completion_values, cli, pass_ctx


def _complete_secrets(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:  # type: ignore[type-arg]
    from click.shell_completion import CompletionItem

    names = _completion_values(ctx, lambda store: [s.name for s in store.list_secrets()])
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def _complete_tokens(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:  # type: ignore[type-arg]
    from click.shell_completion import CompletionItem

    names = _completion_values(ctx, lambda store: [t.name for t in store.list_tokens()])
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


@cli.group(cls=JobctlGroup)
def secret() -> None:
    """Secrets: values a job's attempts get in their environment, never printed."""


@secret.command("set")
@click.argument("name", shell_complete=_complete_secrets)
@click.option(
    "--from-file",
    metavar="PATH",
    help="Take the value from PATH's bytes (default: stdin, one trailing newline removed).",
)
@pass_ctx
def secret_set(obj: Ctx, name: str, from_file: str | None) -> None:
    """Create or replace secret NAME: its value from stdin or --from-file (at most 64 KiB).

    At a terminal the value is asked for without echo.

    A job's --secret ENV=NAME reads it when each attempt starts: a new value reaches the
    next attempt without an edit.
    """
    from ..specs import check_name, check_secret_value, check_text

    check_name(name, "secret name")
    if from_file is not None:
        check_text(from_file, "--from-file")
        try:
            with open(from_file, "rb") as f:
                value = f.read(64 * 1024 + 1)
        except OSError as e:
            raise UsageError(f"cannot read --from-file {from_file}: {e.strerror or e}") from None
    elif sys.stdin.isatty():
        # typed at a terminal: asked for without echo, so the screen never shows it
        import getpass

        value = getpass.getpass(f"value of {name}: ").encode("utf-8", "surrogateescape")
    else:
        # the bytes as given (a text stream without bytes beneath: its text in UTF-8)
        raw = getattr(sys.stdin, "buffer", None)
        value = raw.read(64 * 1024 + 2) if raw is not None else sys.stdin.read().encode()
        if value.endswith(b"\n"):
            value = value[:-1]
    obj.store().set_secret(name, check_secret_value(value), obj.now())
    click.echo(f"set secret {name}")


@secret.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print [{name, updated_at, used_by}].")
@pass_ctx
def secret_list(obj: Ctx, as_json: bool) -> None:
    """Secrets: name, when last set, the jobs that use them (never a value)."""
    from .. import output

    items = obj.reader().list_secrets()
    if as_json:
        output.print_json([output.secret_json(s) for s in items])
    else:
        output.print_secrets(items)


@secret.command("rm")
@click.argument("name", shell_complete=_complete_secrets)
@pass_ctx
def secret_rm(obj: Ctx, name: str) -> None:
    """Delete a secret (refused while a job uses it)."""
    obj.store().delete_secret(name)
    click.echo(f"removed secret {name}")


@cli.group(cls=JobctlGroup)
def token() -> None:
    """API tokens for `jobctl serve`, each with a role: read, operate or admin."""


@token.command("add")
@click.argument("name")
@click.option(
    "--role",
    required=True,
    metavar="read|operate|admin",
    shell_complete=_complete_choices(["read", "operate", "admin"]),
    help="read: every GET; operate: also run, cancel, retry, pause, resume, backfill, "
    "test a channel; admin: everything.",
)
@pass_ctx
def token_add(obj: Ctx, name: str, role: str) -> None:
    """Create an API token and print it once on stdout; only its SHA-256 is kept."""
    import secrets as random_tokens

    from ..models import Role
    from ..specs import check_name, hash_token

    check_name(name, "token name")
    try:
        chosen = Role(role)
    except ValueError:
        raise UsageError(f"invalid --role {role!r}: use read, operate or admin") from None
    text = "jobctl_" + random_tokens.token_urlsafe(32)
    obj.store().add_token(name, chosen, hash_token(text), obj.now())  # a taken name: exit 1
    click.echo(text)


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of tokens.")
@pass_ctx
def token_list(obj: Ctx, as_json: bool) -> None:
    """API tokens: name, role, when created and last used (never the token)."""
    from .. import output

    items = obj.reader().list_tokens()
    if as_json:
        output.print_json([output.token_json(t) for t in items])
    else:
        output.print_tokens(items)


@token.command("rm")
@click.argument("name", shell_complete=_complete_tokens)
@pass_ctx
def token_rm(obj: Ctx, name: str) -> None:
    """Delete an API token: `serve` refuses it from then on."""
    obj.store().delete_token(name)
    click.echo(f"removed token {name}")
