"""The command line: parse, call the store, render. The only click user.

``base`` holds the group and the shared options; ``jobs``, ``runs``, ``system`` and the
other modules the commands, each a thin shell over one store call. The group knows each
command's module (:data:`~.base.COMMAND_MODULES`) and imports it only when that command
runs (or help and completion list it).

Heavy modules (rich, the store) are imported inside the commands that need
them, so ``jobctl --version`` starts fast. One error boundary (:func:`main`) turns
every JobctlError and click usage error into a single ``Error: …`` line and its exit code.
"""

from __future__ import annotations

import os
import sys

import click

from ..errors import JobctlError
from .base import Ctx, _one_line, cli

__all__ = ["Ctx", "cli", "completion_script", "main"]


def completion_script(shell: str) -> str:
    """The completion script of ``shell`` (bash, zsh, fish), as ``jobctl completion`` prints."""
    from .system import completion_script as script

    return script(shell)


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


if __name__ == "__main__":  # pragma: no cover
    main()
