"""Sending one notification to one channel (README, Getting told): a webhook POST, an email, a
command.

Each call blocks until the receiver answered or its timeout passed, so the daemon calls it
from its delivery threads, never from its loop; ``notify test`` calls it in the
foreground. A failure raises :class:`DeliveryError` with one line that never holds a
webhook's path (its secret): only its scheme and host.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import smtplib
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
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
    except (OSError, ValueError) as e:
        raise DeliveryError(f"{where}: {e.__class__.__name__}") from None
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
    msg["Message-ID"] = make_msgid(idstring=str(body["key"]), domain="jobctl")
    msg["X-Jobctl-Key"] = str(body["key"])
    msg["X-Jobctl-Event"] = str(body["event"])
    msg.set_content(text or str(body.get("text") or ""))
    if channel.smtp:
        host, port = parse_smtp(channel.smtp)
        try:
            with smtplib.SMTP(host, port, timeout=SMTP_TIMEOUT_SECONDS) as smtp:
                smtp.ehlo()
                if smtp.has_extn("starttls"):
                    smtp.starttls()
                    smtp.ehlo()
                user = environ.get("JOBCTL_SMTP_USER")
                if user:
                    smtp.login(user, environ.get("JOBCTL_SMTP_PASSWORD", ""))
                smtp.send_message(msg)
        except smtplib.SMTPResponseException as e:
            raise DeliveryError(f"smtp {host}:{port} answered {e.smtp_code}") from None
        except smtplib.SMTPException as e:
            raise DeliveryError(f"smtp {host}:{port}: {e.__class__.__name__}") from None
        except OSError as e:
            raise DeliveryError(f"smtp {host}:{port}: {e.strerror or e}") from None
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
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DeliveryError(f"sendmail: {e.__class__.__name__}") from None
    if done.returncode != 0:
        raise DeliveryError(f"sendmail exited {done.returncode}")


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
    with guard:  # the stray sweep waits: it never sees the child before its pid is known
        proc = _start(channel.target, env)
        if on_pid is not None:
            on_pid(proc.pid, True)
    try:
        try:
            proc.communicate(json.dumps(body).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.wait()
            raise DeliveryError(f"command killed after {timeout:g}s") from None
        finally:
            kill_group(proc.pid)  # what it left in its group goes with it
    finally:
        if on_pid is not None:
            on_pid(proc.pid, False)
    if proc.returncode != 0:
        status = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        raise DeliveryError(f"command ended {status}")


def _start(command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
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
