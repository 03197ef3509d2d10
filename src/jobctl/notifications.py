"""Notifications (README, Getting told), the pure part: events, channels, what a user typed, the
text a person reads, the body a receiver gets, which events an attempt's end causes, and when a
failed delivery is tried again.

No database, no network, no clock: time comes in as an argument. Every problem with what
a user typed raises UsageError (exit 2) with one line, before anything is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from .errors import UsageError
from .models import NAME_RE, Event, NotifyRule, RunState


class ChannelKind(str, Enum):
    WEBHOOK = "webhook"
    EMAIL = "email"
    COMMAND = "command"


class NotificationState(str, Enum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    DROPPED = "dropped"


#: a failed delivery is tried again after 10 s, doubling up to 10 min, 10 tries in all
FIRST_RETRY_SECONDS = 10.0
MAX_RETRY_SECONDS = 600.0
MAX_TRIES = 10
#: undelivered notifications older than this are dropped
DROP_AFTER_SECONDS = 7 * 86400.0
WEBHOOK_TIMEOUT_SECONDS = 10.0
COMMAND_TIMEOUT_SECONDS = 30.0
SMTP_TIMEOUT_SECONDS = 30.0
#: an email carries at most this much of the attempt's output
EMAIL_OUTPUT_BYTES = 4096
#: ``anomaly``: the median of at most this many previous succeeded runs, of at least
#: ``ANOMALY_MIN_RUNS``; slower than ``ANOMALY_SLOW``× or faster than ``ANOMALY_FAST``× it,
#: and at least ``ANOMALY_MIN_SECONDS`` away from it
ANOMALY_WINDOW = 20
ANOMALY_MIN_RUNS = 5
ANOMALY_SLOW = 3.0
ANOMALY_FAST = 0.25
ANOMALY_MIN_SECONDS = 1.0


@dataclass(frozen=True)
class Channel:
    """A named destination. ``target`` is the URL, the address or the command."""

    name: str
    kind: ChannelKind
    target: str
    headers: tuple[tuple[str, str], ...] = ()
    smtp: str | None = None
    default_events: tuple[Event, ...] = ()

    @property
    def shown_target(self) -> str:
        """What every output shows of the target: a webhook URL as scheme and host only."""
        if self.kind is ChannelKind.WEBHOOK:
            return shown_url(self.target)
        return self.target


@dataclass(frozen=True)
class Notification:
    """One row of the outbox, as ``notifications`` shows it."""

    id: int
    key: str
    channel: str
    event: Event
    job: str | None
    run_id: int | None
    attempt: int | None
    state: NotificationState
    tries: int
    created_at: datetime
    sent_at: datetime | None
    last_error: str | None
    text: str
    detail: dict[str, Any] | None


@dataclass(frozen=True)
class Outgoing:
    """A notification a daemon leased to send, with its channel (None: it was removed)."""

    note: Notification
    job_id: int | None
    channel: Channel | None


@dataclass(frozen=True)
class Outcome:
    """How one delivery ended: sent (``error`` None), to be tried again at ``retry_at``,
    ``failed`` for good (neither), or ``dropped`` (its channel is gone)."""

    id: int
    error: str | None
    retry_at: datetime | None = None
    dropped: bool = False


@dataclass(frozen=True)
class EventNote:
    """An event an operation caused, before it is fanned out to channels: the store writes
    one outbox row per channel that wants it, in the operation's transaction.

    ``cause`` names what caused it (``run-42-3-dead``); with the channel it is unique, so
    an event is written once for what caused it however often the cause is looked at."""

    event: Event
    cause: str
    text: str
    job_id: int | None = None
    run_id: int | None = None
    attempt: int | None = None
    detail: dict[str, Any] | None = None


# ---------------------------------------------------------------------- what users type


def parse_events(text: str, flag: str) -> tuple[Event, ...]:
    """A comma list of event names (``test`` is not one a job or channel may name)."""
    out: list[Event] = []
    for part in text.split(","):
        word = part.strip()
        try:
            event = Event(word)
        except ValueError:
            event = Event.TEST
        if event is Event.TEST:
            allowed = ",".join(e.value for e in Event if e is not Event.TEST)
            raise UsageError(f"invalid {flag} event {word!r}: use a comma list of {allowed}")
        if event not in out:
            out.append(event)
    return tuple(out)


def parse_notify(value: str) -> NotifyRule:
    """``CHANNEL[:EVENTS]`` -> a rule (the channel's existence is checked by the store)."""
    name, sep, events = value.partition(":")
    check_channel_name(name)
    if not sep:
        return NotifyRule(name)
    return NotifyRule(name, parse_events(events, "--notify"))


def check_channel_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise UsageError(
            f"invalid channel name {name!r}: use letters, digits, '.', '_' and '-' "
            "(first a letter or digit, at most 64)"
        )
    return name


def check_webhook_url(url: str) -> str:
    """An ``http`` or ``https`` URL with a host. The message shows scheme and host only."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError:
        raise UsageError(f"invalid --webhook URL {shown_url(url)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"invalid --webhook URL {shown_url(url)}: use http:// or https://HOST/…")
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise UsageError(f"invalid --webhook URL {shown_url(url)}: it holds spaces")
    if parts.username is not None or parts.password is not None:
        raise UsageError(
            f"invalid --webhook URL {shown_url(url)}: it holds a user and password, which "
            "are never sent from there; give them as --header 'Authorization: …'"
        )
    return url


_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")


def check_address(address: str) -> str:
    if not _ADDRESS.fullmatch(address) or ".." in address:
        raise UsageError(f"invalid --email address {address!r}")
    return address


def parse_header(text: str) -> tuple[str, str]:
    """``'K: V'`` -> (K, V); K an HTTP token, V printable."""
    key, sep, value = text.partition(":")
    key, value = key.strip(), value.strip()
    if not sep or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", key):
        raise UsageError(f"invalid --header {key or text!r}: use 'Name: value'")
    if not value.isprintable():
        raise UsageError(f"invalid --header {key!r}: its value holds control characters")
    return key, value


def parse_smtp(text: str) -> tuple[str, int]:
    """``HOST[:PORT]`` (default port 25) -> (host, port)."""
    host, sep, port_text = text.rpartition(":") if ":" in text else (text, "", "")
    if not sep:
        host = text
    port = 25
    if sep:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise UsageError(f"invalid --smtp {text!r}: use HOST[:PORT]")
        port = int(port_text)
    if not host or any(ch.isspace() for ch in host):
        raise UsageError(f"invalid --smtp {text!r}: use HOST[:PORT]")
    return host.strip("[]"), port


def build_channel(
    name: str,
    *,
    webhook: str | None,
    email: str | None,
    command: str | None,
    headers: Sequence[str] = (),
    smtp: str | None = None,
    default: str | None = None,
) -> Channel:
    """What ``notify add`` was given -> a Channel. Raises UsageError."""
    check_channel_name(name)
    if sum(v is not None for v in (webhook, email, command)) != 1:
        raise UsageError("give exactly one of --webhook, --email or --command")
    if headers and webhook is None:
        raise UsageError("--header goes with --webhook")
    if smtp is not None and email is None:
        raise UsageError("--smtp goes with --email")
    events = parse_events(default, "--default") if default is not None else ()
    if webhook is not None:
        return Channel(
            name,
            ChannelKind.WEBHOOK,
            check_webhook_url(webhook),
            headers=tuple(parse_header(h) for h in headers),
            default_events=events,
        )
    if email is not None:
        if smtp is not None:
            parse_smtp(smtp)
        return Channel(
            name, ChannelKind.EMAIL, check_address(email), smtp=smtp, default_events=events
        )
    assert command is not None
    if not command.strip() or "\x00" in command:
        raise UsageError("--command is empty")
    return Channel(name, ChannelKind.COMMAND, command, default_events=events)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def shown_url(url: str) -> str:
    """A URL as scheme and host (with its port) only: its path, query and user often hold a
    secret. ``https://hooks.example.com/…``; something that is no URL is shown as ``…``."""
    from urllib.parse import urlsplit  # deferred: the CLI's start does not pay for it

    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return "…"
    if not parts.scheme or not host:
        return "…"
    if ":" in host:
        host = f"[{host}]"
    shown = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    rest = url[len(parts.scheme) + 3 :]
    return shown + ("/…" if "/" in rest or "?" in rest or "@" in rest else "")


# ---------------------------------------------------------------------- who is told


def channels_for(
    event: Event, rules: Sequence[NotifyRule], defaults: Iterable[Channel]
) -> list[str]:
    """The channels told about ``event``: the job's own rules, else (a job that names no
    channel) every channel whose default events hold it."""
    if rules:
        return [r.channel for r in rules if event in r.events]
    return [c.name for c in defaults if event in c.default_events]


def possible_finish_events(state: RunState) -> tuple[Event, ...]:
    """The events an attempt's end in ``state`` may cause (:func:`finish_events` decides
    which it does): what the store asks the channels about before it reads the facts."""
    if state is RunState.SUCCEEDED:
        return (Event.SUCCEEDED, Event.RECOVERED, Event.ANOMALY)
    if state is RunState.FAILED:
        return (Event.FAILED,)
    if state is RunState.DEAD:
        return (Event.DEAD,)
    return ()


def finish_events(
    *,
    state: RunState,
    retry_scheduled: bool,
    previous_final: RunState | None,
    duration_seconds: float | None,
    previous_durations: Sequence[float],
) -> list[tuple[Event, dict[str, Any] | None]]:
    """The events an attempt's end causes (README, Getting told: the events), with their detail.

    ``previous_final`` is the state of the job's previous finished run (by window, among
    succeeded and dead); ``previous_durations`` the durations of its previous succeeded
    runs, newest first (at most ``ANOMALY_WINDOW`` are used)."""
    if state is RunState.FAILED and retry_scheduled:
        return [(Event.FAILED, None)]
    if state is RunState.DEAD:
        return [(Event.DEAD, None)]
    if state is not RunState.SUCCEEDED:
        return []
    out: list[tuple[Event, dict[str, Any] | None]] = [(Event.SUCCEEDED, None)]
    if previous_final is RunState.DEAD:
        out.append((Event.RECOVERED, None))
    odd = anomaly(duration_seconds, previous_durations)
    if odd is not None:
        out.append((Event.ANOMALY, odd))
    return out


def anomaly(duration: float | None, previous: Sequence[float]) -> dict[str, Any] | None:
    """``{kind: slow|fast, median, duration}`` when ``duration`` is an anomaly against the
    median of ``previous`` (newest first), else None."""
    window = list(previous[:ANOMALY_WINDOW])
    if duration is None or len(window) < ANOMALY_MIN_RUNS:
        return None
    median = _median(window)
    if abs(duration - median) < ANOMALY_MIN_SECONDS:
        return None
    if duration > ANOMALY_SLOW * median:
        kind = "slow"
    elif duration < ANOMALY_FAST * median:
        kind = "fast"
    else:
        return None
    return {"kind": kind, "median": round(median, 6), "duration": round(duration, 6)}


# ---------------------------------------------------------------------- what is said


def event_text(
    event: Event,
    job: str | None,
    *,
    run_id: int | None = None,
    attempt: int | None = None,
    error: str | None = None,
    duration_seconds: float | None = None,
    detail: dict[str, Any] | None = None,
) -> str:
    """One line for people: ``jobctl: backup dead after 3 attempts: exit 7 (run 42)``."""
    run = f" (run {run_id})" if run_id is not None else ""
    tries = f"{attempt} attempt" + ("" if attempt == 1 else "s") if attempt else ""
    took = f" in {_seconds(duration_seconds)}" if duration_seconds is not None else ""
    d = detail or {}
    if event is Event.DEAD:
        body = f"{job} dead after {tries}" + (f": {error}" if error else "")
    elif event is Event.FAILED:
        body = f"{job} attempt {attempt} failed" + (f": {error}" if error else "") + "; retrying"
    elif event is Event.SUCCEEDED:
        body = f"{job} succeeded{took}"
    elif event is Event.RECOVERED:
        body = f"{job} recovered: succeeded{took} after a dead run"
    elif event is Event.MISSED:
        n = d.get("count", 0)
        body = f"{job} missed {n} window" + ("" if n == 1 else "s")
        if d.get("reason") == "deadline":
            body += " (deadline)"
    elif event is Event.LATE:
        body = f"{job} late: not started {_seconds(d.get('grace'))} after its window"
    elif event is Event.LONG:
        body = f"{job} attempt {attempt} still running after {_seconds(d.get('warn_after'))}"
    elif event is Event.ANOMALY:
        body = (
            f"{job} took {_seconds(d.get('duration'))}, {d.get('kind')} against its median "
            f"of {_seconds(d.get('median'))}"
        )
    elif event is Event.PAUSED:
        body = f"{job} paused after {d.get('failures', 'repeated')} dead runs in a row"
    else:
        body = "test notification"
    return "jobctl: " + " ".join(body.split()) + run


def _seconds(value: Any) -> str:
    if value is None:
        return "?"
    v = float(value)
    return f"{v:.1f}s" if v < 60 else f"{v / 60:.1f}m" if v < 3600 else f"{v / 3600:.1f}h"


def webhook_body(
    *,
    key: str,
    event: Event,
    text: str,
    at: str | None,
    job: dict[str, Any] | None,
    run: dict[str, Any] | None,
    attempt: dict[str, Any] | None,
    detail: dict[str, Any] | None,
) -> dict[str, Any]:
    """The JSON a webhook (and a command, on stdin) gets: job, run and attempt are the
    objects ``--json`` prints, or None."""
    return {
        "key": key,
        "event": event.value,
        "text": text,
        "at": at,
        "job": job,
        "run": run,
        "attempt": attempt,
        "detail": detail,
    }


def email_text(body: dict[str, Any], output: bytes) -> str:
    """An email's plain-text body: the line, the run's fields, the end of its output."""
    lines = [str(body.get("text") or ""), ""]
    job = body.get("job") or {}
    run = body.get("run") or {}
    attempt = body.get("attempt") or {}
    fields = [
        ("event", body.get("event")),
        ("job", job.get("name") or run.get("job")),
        ("run", run.get("id")),
        ("state", run.get("state")),
        ("window", run.get("scheduled_for")),
        ("attempt", attempt.get("attempt") or run.get("attempt")),
        ("exit code", attempt.get("exit_code", run.get("exit_code"))),
        ("error", attempt.get("error") or run.get("last_error")),
        ("duration", attempt.get("duration") or run.get("duration")),
        ("host", attempt.get("host") or run.get("host")),
        ("at", body.get("at")),
        ("key", body.get("key")),
    ]
    lines += [f"{name}: {value}" for name, value in fields if value not in (None, "")]
    if body.get("detail"):
        lines.append(f"detail: {json.dumps(body['detail'], sort_keys=True)}")
    if output:
        lines += ["", f"--- the last {len(output)} bytes of its output ---"]
        lines.append(output.decode("utf-8", "replace"))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- retries


def retry_delay_seconds(tries: int) -> float | None:
    """After ``tries`` failed tries, how long until the next one; None when that was the
    last (the notification is then ``failed``)."""
    if tries >= MAX_TRIES:
        return None
    return float(min(FIRST_RETRY_SECONDS * 2 ** (tries - 1), MAX_RETRY_SECONDS))


def rules_json(rules: Sequence[NotifyRule]) -> list[dict[str, Any]]:
    return [r.to_json() for r in rules]


def rules_from_json(items: Sequence[Any], what: str = "notify") -> tuple[NotifyRule, ...]:
    """``[{channel, events}]`` (events optional, a list or a comma string) -> rules.
    Raises UsageError naming ``what``."""
    out: list[NotifyRule] = []
    for item in items:
        if isinstance(item, str):
            out.append(parse_notify(item))
            continue
        if not isinstance(item, dict) or not isinstance(item.get("channel"), str):
            raise UsageError(f"invalid {what}: each item is {{channel, events}}")
        events = item.get("events")
        if events is None:
            out.append(NotifyRule(check_channel_name(item["channel"])))
            continue
        if isinstance(events, list) and all(isinstance(e, str) for e in events):
            events = ",".join(events)
        if not isinstance(events, str) or not events:
            raise UsageError(f"invalid {what}: events is a list of event names")
        out.append(NotifyRule(check_channel_name(item["channel"]), parse_events(events, what)))
    return tuple(out)
