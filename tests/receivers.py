"""Real receivers on 127.0.0.1 for the notification tests: an HTTP server that records
what it was sent and answers from a script, and an SMTP server (aiosmtpd)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Receiver:
    """What the HTTP receiver saw, and how it answers: ``statuses`` are answered in turn
    (then 200); ``delay_seconds`` is slept before each answer."""

    url: str
    statuses: list[int] = field(default_factory=list)
    delay_seconds: float = 0.0
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keys(self) -> list[str]:
        with self.lock:
            return [r.headers.get("Idempotency-Key", "") for r in self.requests]

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r.body for r in self.requests]


@contextmanager
def http_receiver(
    statuses: list[int] | None = None, delay_seconds: float = 0.0, path: str = "/hook/s3cret"
) -> Iterator[Receiver]:
    rec: Receiver | None = None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            assert rec is not None
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            with rec.lock:
                rec.requests.append(
                    Request(self.path, dict(self.headers.items()), json.loads(raw or b"null"))
                )
                status = rec.statuses.pop(0) if rec.statuses else 200
                delay = rec.delay_seconds
            if delay:
                time.sleep(delay)
            try:
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec = Receiver(
        f"http://127.0.0.1:{server.server_address[1]}{path}",
        list(statuses or []),
        delay_seconds,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Mailbox:
    """What the SMTP receiver saw: ``messages`` it accepted, every message it was sent
    (``tried``, the refused ones too), and the ``logins`` (user, password) it took."""

    address: str
    messages: list[Any] = field(default_factory=list)
    tried: list[Any] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)


def free_port(host: str = "127.0.0.1") -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def outward_address() -> str | None:
    """This host's IPv4 address on the way out (not loopback), or None when it has none."""
    import ipaddress
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # a UDP connect sends nothing: it picks a route
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


@contextmanager
def smtp_receiver(
    host: str = "127.0.0.1",
    *,
    auth: bool = False,
    refuse_first: int = 0,
    password: str | None = None,
) -> Iterator[Mailbox]:
    """An aiosmtpd server on ``host`` that keeps every message it receives. ``auth``: it
    offers AUTH without TLS (and never STARTTLS), taking any login, or only ``password``
    when given. ``refuse_first``: that many messages are answered 451 (try again)."""
    from email import message_from_bytes, policy

    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    box = Mailbox("")
    refusals = [refuse_first]

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            msg = message_from_bytes(envelope.content, policy=policy.default)
            box.tried.append(msg)
            if refusals[0] > 0:
                refusals[0] -= 1
                return "451 4.3.0 try again later"
            box.messages.append(msg)
            return "250 OK"

    def authenticator(
        server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        user = data.login.decode() if isinstance(data.login, bytes) else str(data.login)
        secret = data.password.decode() if isinstance(data.password, bytes) else str(data.password)
        if password is not None and secret != password:
            return AuthResult(success=False, handled=False)
        box.logins.append((user, secret))
        return AuthResult(success=True)

    options: dict[str, Any] = {}
    if auth:
        options = {"authenticator": authenticator, "auth_require_tls": False}
    port = free_port(host)
    controller = Controller(Handler(), hostname=host, port=port, **options)
    controller.start()
    try:
        box.address = f"{host}:{port}"
        yield box
    finally:
        controller.stop()


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class MainCli:
    """``jobctl.cli.main(argv)`` in-process, through its real error boundary, on the
    suite's database (a file, or a PostgreSQL URL)."""

    def __init__(self, db: Any, capsys: Any) -> None:
        self.db = db
        self.capsys = capsys
        self._view: Any = None

    def __call__(self, *args: str, ok: bool = True, stdin: str = "") -> CliResult:
        import io
        import sys

        from jobctl.cli import main

        self.capsys.readouterr()
        real_stdin, sys.stdin = sys.stdin, io.StringIO(stdin)
        code: int | str | None = 0
        try:
            main(["--db", str(self.db), *args])
        except SystemExit as e:
            code = e.code
        finally:
            sys.stdin = real_stdin
        out, err = self.capsys.readouterr()
        result = CliResult(0 if code is None else int(code), out, err)
        if ok and result.exit_code != 0:
            raise AssertionError(f"jobctl {' '.join(args)} exited {result.exit_code}: {err}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)

    def store(self) -> Any:
        from conftest import StoreView

        if self._view is None or self._view.closed:
            self._view = StoreView(self.db)
        return self._view

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
