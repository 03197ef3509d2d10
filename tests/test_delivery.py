"""Delivering one notification to a real receiver on 127.0.0.1 (README, Getting told): a webhook to an
HTTP server, an email to an SMTP server (aiosmtpd), a command through /bin/sh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from receivers import http_receiver, smtp_receiver

from jobctl import __version__
from jobctl.delivery import DeliveryError, deliver
from jobctl.models import Event
from jobctl.notifications import (
    Channel,
    ChannelKind,
    webhook_body,
)


def _body(key: str = "k-1") -> dict:
    return webhook_body(
        key=key,
        event=Event.DEAD,
        text="jobctl: backup dead after 3 attempts: exit 7 (run 42)",
        at="2026-12-03T10:00:00Z",
        job={"name": "backup"},
        run={"id": 42},
        attempt=None,
        detail=None,
    )


def test_webhook_gets_the_body_and_the_headers() -> None:
    with http_receiver() as rec:
        ch = Channel("ops", ChannelKind.WEBHOOK, rec.url, headers=(("X-Token", "abc"),))
        deliver(ch, _body())
        [req] = rec.requests
    assert req.path == "/hook/s3cret"
    assert req.body["key"] == "k-1" and req.body["event"] == "dead"
    assert req.body["text"].startswith("jobctl: backup dead")
    assert set(req.body) == {"key", "event", "text", "at", "job", "run", "attempt", "detail"}
    assert req.headers["Content-Type"] == "application/json"
    assert req.headers["Idempotency-Key"] == "k-1"
    assert req.headers["User-Agent"] == f"jobctl/{__version__}"
    assert req.headers["X-Token"] == "abc"


def test_webhook_error_names_the_status_and_never_the_path() -> None:
    with http_receiver(statuses=[500]) as rec:
        ch = Channel("ops", ChannelKind.WEBHOOK, rec.url)
        with pytest.raises(DeliveryError) as err:
            deliver(ch, _body())
    assert "HTTP 500" in str(err.value)
    assert "s3cret" not in str(err.value) and "127.0.0.1" in str(err.value)


def test_webhook_that_hangs_times_out() -> None:
    with http_receiver(delay_seconds=3) as rec:
        ch = Channel("ops", ChannelKind.WEBHOOK, rec.url)
        with pytest.raises(DeliveryError) as err:
            deliver(ch, _body(), webhook_timeout=0.5)
    assert "no answer within 0.5s" in str(err.value)
    assert "s3cret" not in str(err.value)


def test_webhook_refused_connection() -> None:
    from receivers import free_port

    ch = Channel("ops", ChannelKind.WEBHOOK, f"http://127.0.0.1:{free_port()}/x/secret")
    with pytest.raises(DeliveryError) as err:
        deliver(ch, _body())
    assert "secret" not in str(err.value)


def test_email_over_smtp() -> None:
    with smtp_receiver() as box:
        ch = Channel("mail", ChannelKind.EMAIL, "ops@example.org", smtp=box.address)
        deliver(ch, _body("key-7"), email_text="run 42\n\noutput:\nboom\n")
        [msg] = box.messages
    assert msg["To"] == "ops@example.org"
    assert msg["Subject"] == "jobctl: backup dead after 3 attempts: exit 7 (run 42)"
    assert msg["Message-ID"] == "<key-7@jobctl>"
    assert "boom" in msg.get_content()


def test_the_message_id_is_the_same_on_every_try_and_parses_strictly() -> None:
    """A retried notification is one message: a receiver that refused the first try sees
    the same Message-ID, ``<KEY@jobctl>``, on the second."""
    from email import message_from_bytes, policy

    with smtp_receiver(refuse_first=1) as box:
        ch = Channel("mail", ChannelKind.EMAIL, "ops@example.org", smtp=box.address)
        with pytest.raises(DeliveryError, match=r"answered 451 4\.3\.0 try again later"):
            deliver(ch, _body("0123abcd"))
        deliver(ch, _body("0123abcd"))
        assert len(box.tried) == 2 and len(box.messages) == 1
    ids = [m["Message-ID"] for m in box.tried]
    assert ids == ["<0123abcd@jobctl>"] * 2
    strict = message_from_bytes(box.tried[1].as_bytes(), policy=policy.strict)
    assert strict["Message-ID"].defects == () and strict["Message-ID"] == ids[0]


AUTH_ENV = {"JOBCTL_SMTP_USER": "mailer", "JOBCTL_SMTP_PASSWORD": "hunter2"}


def test_smtp_auth_goes_to_a_loopback_server_without_tls() -> None:
    with smtp_receiver(auth=True) as box:
        ch = Channel("mail", ChannelKind.EMAIL, "ops@example.org", smtp=box.address)
        deliver(ch, _body(), environ=AUTH_ENV)
        assert box.logins == [("mailer", "hunter2")] and len(box.messages) == 1


def test_smtp_auth_is_never_sent_in_clear_to_another_host() -> None:
    """A server on this host's outward address that offers AUTH but no STARTTLS: the
    password would cross the network in clear, so nothing is sent, and the error says why."""
    from receivers import outward_address

    address = outward_address()
    if address is None:
        pytest.skip("this host has no address beyond loopback")
    with smtp_receiver(address, auth=True) as box:
        ch = Channel("mail", ChannelKind.EMAIL, "ops@example.org", smtp=box.address)
        with pytest.raises(DeliveryError) as err:
            deliver(ch, _body(), environ=AUTH_ENV)
        assert box.logins == [] and box.tried == []
        # without a login to send, the same server takes the mail
        deliver(ch, _body(), environ={})
        assert len(box.messages) == 1
    text = str(err.value)
    assert text.startswith(f"smtp {box.address} offers no STARTTLS"), text
    assert "only over TLS or to a loopback address" in text and "hunter2" not in text


def test_smtp_errors_are_sentences_not_class_names() -> None:
    with smtp_receiver() as plain:  # offers no AUTH at all
        ch = Channel("mail", ChannelKind.EMAIL, "ops@example.org", smtp=plain.address)
        with pytest.raises(DeliveryError) as no_auth:
            deliver(ch, _body(), environ=AUTH_ENV)
    with smtp_receiver(auth=True, password="right") as box:
        ch = Channel("mail", ChannelKind.EMAIL, "ops@example.org", smtp=box.address)
        with pytest.raises(DeliveryError) as refused:
            deliver(ch, _body(), environ=AUTH_ENV)
    assert str(no_auth.value).startswith(
        f"smtp {plain.address} offers no AUTH, but JOBCTL_SMTP_USER is set"
    )
    assert str(refused.value).startswith(f"smtp {box.address} refused the login of")
    assert "535" in str(refused.value)
    for err in (no_auth.value, refused.value):
        assert "Error" not in str(err) and "SMTP" not in str(err).replace("SMTP_", "")


def test_email_to_a_server_that_is_not_there() -> None:
    from receivers import free_port

    ch = Channel("mail", ChannelKind.EMAIL, "ops@example.org", smtp=f"127.0.0.1:{free_port()}")
    with pytest.raises(DeliveryError) as err:
        deliver(ch, _body())
    assert "smtp 127.0.0.1" in str(err.value)


def test_command_gets_the_body_on_stdin_and_the_variables(tmp_path: Path) -> None:
    out = tmp_path / "got"
    ch = Channel(
        "cmd",
        ChannelKind.COMMAND,
        f'cat > {out}; echo "$JOBCTL_EVENT $JOBCTL_JOB $JOBCTL_RUN_ID $JOBCTL_NOTIFICATION_KEY" >> {out}',
    )
    seen: list[tuple[int, bool]] = []
    deliver(ch, _body("k-9"), on_pid=lambda pid, alive: seen.append((pid, alive)))
    body, line = out.read_text().rsplit("}", 1)
    assert json.loads(body + "}")["key"] == "k-9"
    assert line.strip() == "dead backup 42 k-9"
    assert [alive for _, alive in seen] == [True, False]


def test_command_failure_and_timeout(tmp_path: Path) -> None:
    with pytest.raises(DeliveryError, match="exit 3"):
        deliver(Channel("c", ChannelKind.COMMAND, "exit 3"), _body())
    said = "echo first >&2; echo 'pager: no route to host' >&2; echo; exit 4"
    with pytest.raises(DeliveryError) as err:
        deliver(Channel("c", ChannelKind.COMMAND, said), _body())
    assert str(err.value) == "command ended exit 4: pager: no route to host"
    with pytest.raises(DeliveryError, match="killed after 0.3s"):
        deliver(Channel("c", ChannelKind.COMMAND, "sleep 30"), _body(), command_timeout=0.3)
