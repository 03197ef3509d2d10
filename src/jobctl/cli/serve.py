"""``jobctl serve``: the HTTP API and the dashboard (README, The dashboard and the HTTP API). Needs
the web extra."""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import TYPE_CHECKING

import click

from ..errors import JobctlError, UsageError
from .base import Ctx, cli, pass_ctx

if TYPE_CHECKING:
    from ..store import Store

DEFAULT_LISTEN = "127.0.0.1:8642"
WEB_PACKAGES = ("starlette", "uvicorn", "jinja2", "anyio")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8642`` for IPv6) -> (host, port). Raises UsageError."""
    bad = UsageError(f"invalid --listen {text!r}: use HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isascii() or not port_text.isdigit():
        raise bad
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise bad
    port = int(port_text)
    if not host or port > 65535:
        raise bad
    return host, port


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket. Raises JobctlError (exit 1) when it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        raise JobctlError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise JobctlError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(False)
    return sock


@cli.command()
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    metavar="HOST:PORT",
    help="Address to listen on (port 0: any free port). Loopback unless you put TLS in front.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="File holding the API token (default: $JOBCTL_API_TOKEN, else the data dir's "
    "api-token, created on first start). A token under 20 characters, or a file other "
    "users may read, is used with a warning.",
)
@pass_ctx
def serve(obj: Ctx, listen: str, token_file: str | None) -> None:
    """Serve the HTTP API, /metrics and the web dashboard over the database.

    Needs the web extra (pip install 'jobctl[web]'); no daemon needed. Every request but
    GET /healthz needs the token (Authorization: Bearer TOKEN, or the dashboard's sign-in),
    which may do everything, or a token of `jobctl token add`, limited to its role.
    """
    from ..paths import default_db_path
    from ..web.auth import resolve_token

    host, port = parse_listen(listen)
    try:
        from ..web import app as web_app
        from ..web import server
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in WEB_PACKAGES:
            raise JobctlError(
                f"jobctl serve needs the web extra: pip install 'jobctl[web]' (no module {e.name})"
            ) from None
        raise
    token = resolve_token(token_file, os.environ, default_db_path().parent / "api-token")
    location = obj.handle().location  # created (and migrated) now, as the daemon does
    obj.close()
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    for warning in token.warnings:
        click.echo(f"warning: {warning}", err=True)
    if token.created_at_path is not None:
        click.echo(f"jobctl: created an API token in {token.created_at_path}", err=True)
    elif token_file is None and token.source != "JOBCTL_API_TOKEN":
        click.echo(f"jobctl: the API token is in {token.source}", err=True)
    if not is_loopback(host):
        click.echo(
            f"warning: listening on {shown}:{bound_port}, beyond this machine: the token and "
            "the session cookie cross the network in clear unless TLS is in front",
            err=True,
        )

    def open_store() -> Store:
        from ..store import open_store as open_location

        return open_location(location)

    app = web_app.create_app(open_store, token.value)
    click.echo(f"jobctl: serving http://{shown}:{bound_port}/ (database {location})", err=True)
    if not server.run(app, sock):
        raise JobctlError(f"the server on {shown}:{bound_port} could not start")
