"""Watched jobs (README "Watching jobs that jobctl does not run"): ``ping`` writes a ping
straight into the database; ``exec`` wraps a crontab line's command and pings its start
and end, into the database or over HTTP to ``serve``."""

from __future__ import annotations

import os
import re
import sys

import click

from ..errors import JobctlError, UsageError
from .base import Ctx, Integer, _complete_jobs, cli, pass_ctx, warn


@cli.command()
@click.argument("name", shell_complete=_complete_jobs)
@click.option("--start", is_flag=True, help="The work started.")
@click.option("--fail", is_flag=True, help="The work failed.")
@click.option("--log", is_flag=True, help="Add the body to the output; no end.")
@click.option(
    "--exit",
    "exit_code",
    type=Integer(0, 255),
    metavar="N",
    help="The work ended with exit code N (0 is success).",
)
@click.option("--rid", metavar="ID", help="Ties a start to its end when runs overlap.")
@pass_ctx
def ping(
    obj: Ctx,
    /,
    name: str,
    start: bool,
    fail: bool,
    log: bool,
    exit_code: int | None,
    rid: str | None,
) -> None:
    """Ping the watched job NAME as /ping/KEY does, straight into the database.

    At most one of --start, --fail, --log and --exit; without one: the work succeeded.
    Standard input, when it is not a terminal, is the body (the attempt's output; at most
    100 KB kept).
    """
    from ..watching import CLI_HOST, PingKind, make_ping

    given = [f for f, on in (("--start", start), ("--fail", fail), ("--log", log)) if on]
    if exit_code is not None:
        given.append("--exit")
    if len(given) > 1:
        raise UsageError(
            f"give at most one of --start, --fail, --log and --exit (got {', '.join(given)})"
        )
    kind = given[0][2:] if given and exit_code is None else None
    what = PingKind.EXIT if exit_code is not None else PingKind(kind or "success")
    body = _stdin_body()
    p = make_ping(what, exit_code=exit_code, rid=rid, body=body)
    obj.store().ping(p, obj.now(), name=name, host=CLI_HOST)


def _stdin_body() -> bytes:
    """Standard input when it is not a terminal (a pipe, a file), else nothing."""
    stream = sys.stdin
    if stream is None or stream.isatty():
        return b""
    raw = getattr(stream, "buffer", None)
    return raw.read() if raw is not None else stream.read().encode()


@cli.command(
    "exec",
    # what follows NAME is COMMAND's, but for --url right after NAME: `exec NAME echo -h`
    # runs echo -h (click took -h for its own help and ran nothing)
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("name", shell_complete=_complete_jobs)
@click.option(
    "--url",
    metavar="URL",
    help="Ping over HTTP to jobctl serve at URL (http://host:8642; also JOBCTL_PING_URL); "
    "NAME is then the job's ping key, or its name where this host reaches the database.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_ctx
def exec_(obj: Ctx, /, name: str, url: str | None, command: tuple[str, ...]) -> None:
    """Run COMMAND here as a crontab line's wrapper, and ping the watched job NAME:
    `jobctl exec NAME [--url URL] -- COMMAND...`.

    Pings start, then success or the exit code with the last 64 KiB of the output, which
    is passed through; exits with COMMAND's exit code. A ping that cannot be made prints a
    warning and never changes the exit code. The pings go into the database, or with
    --url over HTTP to `jobctl serve`. Every word after NAME (but --url) is COMMAND's.
    """
    from ..pinger import run_passthrough, send_http
    from ..watching import CLI_HOST, PingKind, make_ping, new_rid

    url, command = _url_after_name(url, command)
    if command[:1] == ("--",):
        command = command[1:]
    if not command:
        raise UsageError("give the COMMAND to run after --")
    base = url or os.environ.get("JOBCTL_PING_URL") or None
    key = _ping_key(obj, name) if base is not None else name
    rid = new_rid()

    def send(kind: PingKind, code: int | None = None, body: bytes = b"") -> None:
        p = make_ping(kind, exit_code=code, rid=rid, body=body)
        try:
            if base is not None:
                send_http(base, key, p)
            else:
                obj.store().ping(p, obj.now(), name=name, host=CLI_HOST)
        except (JobctlError, OSError) as e:
            warn(f"jobctl exec: {kind.value} ping not recorded: {e}")

    send(PingKind.START)
    ran = run_passthrough(command)
    code = min(ran.exit_code, 255)
    if code == 0:
        send(PingKind.SUCCESS, body=ran.output)
    else:
        send(PingKind.EXIT, code, body=ran.output)
    obj.close()
    sys.exit(code)


def _url_after_name(url: str | None, words: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """``exec NAME --url URL -- COMMAND``: a --url right after NAME (click hands every word
    after NAME to COMMAND) -> (url, the rest)."""
    while words and words[0] != "--":
        if words[0] == "--url" and len(words) > 1:
            url, words = words[1], words[2:]
        elif words[0].startswith("--url="):
            url, words = words[0][len("--url=") :], words[1:]
        else:
            break
    return url, words


_UUID_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def _ping_key(obj: Ctx, name: str) -> str:
    """What ``exec NAME --url`` pings: a ping key as it is (a host without the database
    knows only the key), else the key of the watched job NAME when this host reaches the
    database, else NAME as given (serve then answers 404, said as a warning)."""
    if _UUID_RE.fullmatch(name):
        return name
    try:
        key = obj.reader().get_job(name).spec.ping_key
    except (JobctlError, OSError):
        return name
    return key or name
