"""Sending one notification to one channel (README, Getting told): a webhook POST, an email, a
command.

Each call blocks until the receiver answered or its timeout passed, so the daemon calls it
from its delivery threads, never from its loop; ``notify test`` calls it in the
foreground. A failure raises :class:`DeliveryError` with one line that never holds a
webhook's path (its secret): only its scheme and host.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import shutil
import smtplib
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from . import __version__
from .clock import iso
from .models import Event
from .notifications import (
    COMMAND_TIMEOUT_SECONDS,
    SMTP_TIMEOUT_SECONDS,
    WEBHOOK_TIMEOUT_SECONDS,
    Channel,
    ChannelKind,
    email_text,
    parse_smtp,
    shown_url,
    webhook_body,
)
from .reaper import kill_group


class DeliveryError(Exception):
    """The receiver did not take it: one line, safe to store and print."""


#: a command channel's child: the caller is told its pid while it runs (the daemon's
#: stray reaper must leave it alone) and when it was reaped
PidHook = Callable[[int, bool], None]


def deliver(
    channel: Channel,
    body: dict[str, Any],
    *,
    email_text: str = "",
    environ: Mapping[str, str] | None = None,
    on_pid: PidHook | None = None,
    spawn_lock: AbstractContextManager[Any] | None = None,
    webhook_timeout: float = WEBHOOK_TIMEOUT_SECONDS,
    command_timeout: float = COMMAND_TIMEOUT_SECONDS,
) -> None:
    """Deliver ``body`` (the webhook JSON of README, Getting told) to ``channel``; returns when it
    was taken. ``email_text`` is the plain-text body of an email. Raises DeliveryError."""
    env = dict(os.environ if environ is None else environ)
    if channel.kind is ChannelKind.WEBHOOK:
        post_webhook(channel, body, timeout=webhook_timeout)
    elif channel.kind is ChannelKind.EMAIL:
        send_email(channel, body, email_text, env)
    else:
        run_command(
            channel, body, env, timeout=command_timeout, on_pid=on_pid, spawn_lock=spawn_lock
        )


def post_webhook(channel: Channel, body: dict[str, Any], *, timeout: float) -> None:
    data = json.dumps(body).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": f"jobctl/{__version__}",
        "Idempotency-Key": str(body["key"]),
    }
    for k, v in channel.headers:
        headers[k] = v
    request = urllib.request.Request(channel.target, data=data, headers=headers, method="POST")
    where = shown_url(channel.target)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            status = response.status
            response.read(65536)
    except urllib.error.HTTPError as e:
        e.close()
        raise DeliveryError(f"{where} answered HTTP {e.code}") from None
    except TimeoutError:
        raise DeliveryError(f"{where}: no answer within {timeout:g}s") from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, TimeoutError):
            raise DeliveryError(f"{where}: no answer within {timeout:g}s") from None
        text = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
        raise DeliveryError(f"{where}: {text}") from None
    except OSError as e:
        text = _sentence(e.strerror or "") or "the connection failed"
        raise DeliveryError(f"{where}: {text}") from None
    except ValueError:  # its text holds the whole URL, path and all
        raise DeliveryError(f"{where}: the URL cannot be requested") from None
    except http.client.HTTPException:
        raise DeliveryError(f"{where} answered with something that is not HTTP") from None
    if not 200 <= status < 300:
        raise DeliveryError(f"{where} answered HTTP {status}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not a delivery: only a 2xx answer is."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def send_email(
    channel: Channel, body: dict[str, Any], text: str, environ: Mapping[str, str]
) -> None:
    """One plain-text message to the channel's address: over SMTP to ``--smtp``
    (STARTTLS when offered, AUTH from ``JOBCTL_SMTP_USER``/``JOBCTL_SMTP_PASSWORD``), else
    through ``sendmail -t``."""
    msg = EmailMessage()
    sender = environ.get("JOBCTL_SMTP_FROM") or f"jobctl@{socket.gethostname()}"
    msg["From"] = sender
    msg["To"] = channel.target
    msg["Subject"] = str(body.get("text") or "jobctl")
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    # one notification is one message however often it is tried: a receiver drops a repeat
    msg["Message-ID"] = f"<{body['key']}@jobctl>"
    msg["X-Jobctl-Key"] = str(body["key"])
    msg["X-Jobctl-Event"] = str(body["event"])
    msg.set_content(text or str(body.get("text") or ""))
    if channel.smtp:
        _send_smtp(channel.smtp, msg, environ)
        return
    sendmail = sendmail_path()
    if sendmail is None:
        raise DeliveryError("no --smtp server and no sendmail on this host")
    try:
        done = subprocess.run(
            [sendmail, "-t", "-oi"],
            input=msg.as_bytes(),
            capture_output=True,
            timeout=SMTP_TIMEOUT_SECONDS,
            env=dict(environ),
        )
    except subprocess.TimeoutExpired:
        raise DeliveryError(f"sendmail: no answer within {SMTP_TIMEOUT_SECONDS:g}s") from None
    except OSError as e:
        raise DeliveryError(f"sendmail could not start: {e.strerror or e}") from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").splitlines()
        last = next((_sentence(line) for line in reversed(said) if line.strip()), "")
        raise DeliveryError(f"sendmail exited {done.returncode}" + (f": {last}" if last else ""))


def _send_smtp(server: str, msg: EmailMessage, environ: Mapping[str, str]) -> None:
    """Send ``msg`` to ``server`` (``HOST[:PORT]``): STARTTLS when the server offers it;
    AUTH only over TLS or to a loopback address, since a password sent in clear to another
    host can be read on the way. Raises DeliveryError with one readable sentence."""
    host, port = parse_smtp(server)
    where = f"smtp {host}:{port}"
    user = environ.get("JOBCTL_SMTP_USER")
    try:
        with smtplib.SMTP(host, port, timeout=SMTP_TIMEOUT_SECONDS) as smtp:
            smtp.ehlo()
            tls = smtp.has_extn("starttls")
            if tls:
                smtp.starttls()
                smtp.ehlo()
            if user:
                if not tls and not _is_loopback(smtp.sock):
                    raise DeliveryError(
                        f"{where} offers no STARTTLS and is not on this host: the "
                        "JOBCTL_SMTP_USER password is sent only over TLS or to a loopback "
                        "address, so nothing was sent"
                    )
                if not smtp.has_extn("auth"):
                    raise DeliveryError(
                        f"{where} offers no AUTH, but JOBCTL_SMTP_USER is set: unset it "
                        "or use a server that takes a login"
                    )
                smtp.login(user, environ.get("JOBCTL_SMTP_PASSWORD", ""))
            smtp.send_message(msg)
    except smtplib.SMTPRecipientsRefused as e:
        refused = "; ".join(
            f"{rcpt}: {_smtp_answer(code, text)}" for rcpt, (code, text) in e.recipients.items()
        )
        raise DeliveryError(f"{where} refused the recipient ({refused})") from None
    except smtplib.SMTPAuthenticationError as e:
        raise DeliveryError(
            f"{where} refused the login of JOBCTL_SMTP_USER: "
            f"{_smtp_answer(e.smtp_code, e.smtp_error)}"
        ) from None
    except smtplib.SMTPResponseException as e:
        raise DeliveryError(f"{where} answered {_smtp_answer(e.smtp_code, e.smtp_error)}") from None
    except smtplib.SMTPServerDisconnected:
        raise DeliveryError(f"{where} closed the connection before the mail was sent") from None
    except smtplib.SMTPException as e:
        raise DeliveryError(f"{where}: {_sentence(str(e)) or 'the SMTP exchange failed'}") from None
    except TimeoutError:
        raise DeliveryError(f"{where}: no answer within {SMTP_TIMEOUT_SECONDS:g}s") from None
    except OSError as e:
        raise DeliveryError(f"{where}: {_sentence(e.strerror or str(e))}") from None


def _is_loopback(sock: socket.socket | None) -> bool:
    """Whether the connected peer is this host's loopback (127.0.0.0/8, ::1, or one of
    them mapped into IPv6): judged by the address connected to, not by the name given."""
    if sock is None:
        return False
    try:
        address = ipaddress.ip_address(sock.getpeername()[0])
    except (OSError, ValueError):
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _smtp_answer(code: int, text: bytes | str) -> str:
    """An SMTP reply as ``550 mailbox unavailable``: code and text, on one line."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return f"{code} {_sentence(text)}".strip()


def _sentence(text: str, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def sendmail_path() -> str | None:
    for candidate in ("/usr/sbin/sendmail", "/usr/lib/sendmail"):
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("sendmail")


def run_command(
    channel: Channel,
    body: dict[str, Any],
    environ: Mapping[str, str],
    *,
    timeout: float,
    on_pid: PidHook | None,
    spawn_lock: AbstractContextManager[Any] | None = None,
) -> None:
    """``/bin/sh -c COMMAND`` with the body on stdin and ``JOBCTL_EVENT``, ``JOBCTL_JOB``,
    ``JOBCTL_RUN_ID``, ``JOBCTL_NOTIFICATION_KEY``; exit 0 is delivered; its whole process
    group is killed after ``timeout``."""
    env = dict(environ)
    job = body.get("job") or {}
    run = body.get("run") or {}
    env["JOBCTL_EVENT"] = str(body["event"])
    env["JOBCTL_JOB"] = str(job.get("name") or "")
    env["JOBCTL_RUN_ID"] = "" if run.get("id") is None else str(run["id"])
    env["JOBCTL_NOTIFICATION_KEY"] = str(body["key"])
    guard = spawn_lock if spawn_lock is not None else contextlib.nullcontext()
    # stderr goes to a file, not a pipe: a child the command left behind holding the pipe
    # would keep the delivery waiting until the timeout
    with tempfile.TemporaryFile() as errors:
        with guard:  # the stray sweep waits: it never sees the child before its pid is known
            proc = _start(channel.target, env, errors)
            if on_pid is not None:
                on_pid(proc.pid, True)
        try:
            try:
                proc.communicate(json.dumps(body).encode(), timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_group(proc.pid)
                proc.wait()
                raise DeliveryError(f"command killed after {timeout:g}s" + _said(errors)) from None
            finally:
                kill_group(proc.pid)  # what it left in its group goes with it
        finally:
            if on_pid is not None:
                on_pid(proc.pid, False)
        if proc.returncode != 0:
            code = proc.returncode
            status = f"signal {-code}" if code < 0 else f"exit {code}"
            raise DeliveryError(f"command ended {status}" + _said(errors))


#: how much of a failed command's stderr is read for its last line
COMMAND_STDERR_TAIL_BYTES = 4096


def _said(errors: Any) -> str:
    """``: LINE``, the last non-blank line the command wrote on stderr, or ''."""
    size = errors.seek(0, os.SEEK_END)
    errors.seek(max(0, size - COMMAND_STDERR_TAIL_BYTES))
    lines = errors.read().decode("utf-8", "replace").splitlines()
    last = next((_sentence(line) for line in reversed(lines) if line.strip()), "")
    return f": {last}" if last else ""


def _start(command: str, env: dict[str, str], stderr: Any) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        raise DeliveryError(f"command could not start: {e.strerror or e}") from None


def test_delivery(
    channel: Channel, now: datetime, environ: Mapping[str, str] | None = None
) -> None:
    """``notify test``: one ``test`` event to ``channel`` now, in the foreground (not
    recorded, not counted). Raises DeliveryError."""
    key = f"test-{uuid.uuid4().hex}"
    body = webhook_body(
        key=key,
        event=Event.TEST,
        text=f"jobctl: test notification from {socket.gethostname()} to channel {channel.name}",
        at=iso(now),
        job=None,
        run=None,
        attempt=None,
        detail=None,
    )
    deliver(channel, body, email_text=email_text(body, b""), environ=environ)
