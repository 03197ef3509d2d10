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
    address: str
    messages: list[Any] = field(default_factory=list)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def smtp_receiver() -> Iterator[Mailbox]:
    """An aiosmtpd server on 127.0.0.1 that keeps every message it receives."""
    from email import message_from_bytes, policy

    from aiosmtpd.controller import Controller

    box = Mailbox("")

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            box.messages.append(message_from_bytes(envelope.content, policy=policy.default))
            return "250 OK"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        box.address = f"127.0.0.1:{port}"
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
