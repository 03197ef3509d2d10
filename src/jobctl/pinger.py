"""``jobctl exec``'s two halves, without click: the command run in the foreground with its
output passed through (and its tail kept), and a ping sent over HTTP to ``jobctl serve``
(README "Watching jobs that jobctl does not run").
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from .watching import EXEC_OUTPUT_LIMIT_BYTES, Ping, PingKind

#: how long one HTTP ping may take, and how many times a failed one is sent in all
HTTP_TIMEOUT_SECONDS = 10.0
HTTP_TRIES = 3
HTTP_RETRY_DELAY_SECONDS = 0.5


@dataclass(frozen=True)
class Ran:
    """How the wrapped command ended: the exit code to exit with (128 + N for signal N,
    127 for a command that could not be started) and the tail of its merged output."""

    exit_code: int
    output: bytes


def run_passthrough(argv: Sequence[str]) -> Ran:
    """Run ``argv`` in the foreground (stdin inherited), copying its stdout and stderr to
    ours as they come, and keep the last :data:`EXEC_OUTPUT_LIMIT_BYTES` of both merged.
    A command that cannot be started ends 127 (126 when it is not executable), its reason
    on stderr, as a shell says it."""
    try:
        child = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True
        )
    except (FileNotFoundError, PermissionError, OSError) as e:
        code = 126 if isinstance(e, PermissionError) else 127
        message = f"jobctl exec: {argv[0]}: {e.strerror or e}\n".encode()
        sys.stderr.buffer.write(message)
        sys.stderr.flush()
        return Ran(code, message)
    assert child.stdout is not None and child.stderr is not None
    outs = {child.stdout.fileno(): sys.stdout, child.stderr.fileno(): sys.stderr}
    tail = bytearray()
    sel = selectors.DefaultSelector()
    for fd in outs:
        sel.register(fd, selectors.EVENT_READ)
    # a wrapper forwards what would stop the command to the command, and waits for it
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
    try:
        while sel.get_map():
            for key, _ in sel.select():
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                out = outs[key.fd]
                out.buffer.write(chunk)
                out.flush()
                tail += chunk
                if len(tail) > 2 * EXEC_OUTPUT_LIMIT_BYTES:
                    del tail[:-EXEC_OUTPUT_LIMIT_BYTES]
        rc = child.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sel.close()
        child.stdout.close()
        child.stderr.close()
    code = 128 - rc if rc < 0 else rc
    return Ran(code, bytes(tail[-EXEC_OUTPUT_LIMIT_BYTES:]))


def ping_url(base: str, key: str, ping: Ping) -> str:
    """The ``serve`` address of ``ping`` for ``key`` under ``base`` (``http://host:8642``,
    a path prefix kept)."""
    path = {
        PingKind.SUCCESS: "",
        PingKind.START: "/start",
        PingKind.FAIL: "/fail",
        PingKind.LOG: "/log",
        PingKind.EXIT: f"/{ping.exit_code}",
    }[ping.kind]
    url = f"{base.rstrip('/')}/ping/{urllib.parse.quote(key, safe='')}{path}"
    if ping.rid is not None:
        url += "?" + urllib.parse.urlencode({"rid": ping.rid})
    return url


def send_http(base: str, key: str, ping: Ping) -> None:
    """POST ``ping`` (its body as the request's) to ``serve``; tried :data:`HTTP_TRIES`
    times when the server cannot be reached or answers 5xx. Raises OSError with a one-line
    reason when it was not recorded (a 404: no job has that key)."""
    url = ping_url(base, key, ping)
    if not url.startswith(("http://", "https://")):
        raise OSError(f"{base!r} is not an http:// or https:// address")
    last = ""
    for n in range(HTTP_TRIES):
        if n:
            time.sleep(HTTP_RETRY_DELAY_SECONDS * n)
        req = urllib.request.Request(url, data=ping.body, method="POST")
        req.add_header("Content-Type", "text/plain")
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_SECONDS) as answer:
                answer.read()
                return
        except urllib.error.HTTPError as e:
            last = f"{e.code} {e.reason}"
            if e.code < 500:
                break
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            last = str(reason)
    raise OSError(f"ping to {base.rstrip('/')}: {last}")


__all__ = ["Ran", "ping_url", "run_passthrough", "send_http"]
