"""The pure part of notifications (README, Getting told): what users type, who is told, which events
an attempt's end causes, the text, the retries."""

from __future__ import annotations

import pytest

from jobctl.errors import UsageError
from jobctl.models import DEFAULT_EVENTS, Event, NotifyRule, RunState
from jobctl.notifications import (
    Channel,
    ChannelKind,
    anomaly,
    build_channel,
    channels_for,
    event_text,
    finish_events,
    parse_notify,
    possible_finish_events,
    retry_delay_seconds,
    rules_from_json,
    shown_url,
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.example.com/services/T000/B000/XXXX", "https://hooks.example.com/…"),
        ("http://127.0.0.1:8080/x?token=1", "http://127.0.0.1:8080/…"),
        ("https://user:pw@example.com", "https://example.com/…"),
        ("https://example.com", "https://example.com"),
        ("http://[::1]:9/a", "http://[::1]:9/…"),
        ("not a url", "…"),
    ],
)
def test_a_url_is_shown_as_scheme_and_host(url: str, shown: str) -> None:
    assert shown_url(url) == shown


def test_parse_notify() -> None:
    assert parse_notify("ops") == NotifyRule("ops", DEFAULT_EVENTS)
    assert parse_notify("ops:dead,late").events == (Event.DEAD, Event.LATE)
    for bad in ("ops:nope", "ops:", "ops:test", "bad name", ""):
        with pytest.raises(UsageError):
            parse_notify(bad)


def test_build_channel_refuses_bad_input_and_hides_the_url() -> None:
    ch = build_channel(
        "ops", webhook="https://h.example/p/secret", email=None, command=None, default="dead"
    )
    assert ch.kind is ChannelKind.WEBHOOK and ch.default_events == (Event.DEAD,)
    assert ch.shown_target == "https://h.example/…"
    with pytest.raises(UsageError) as err:
        build_channel("ops", webhook="ftp://h.example/secret", email=None, command=None)
    assert "secret" not in str(err.value)
    for kwargs in (
        {"webhook": None, "email": "not-an-address", "command": None},
        {"webhook": None, "email": None, "command": None},
        {"webhook": "https://a.b/", "email": "a@b.c", "command": None},
        {"webhook": None, "email": "a@b.c", "command": None, "smtp": "host:99999"},
        {"webhook": "https://a.b/", "email": None, "command": None, "headers": ["nocolon"]},
        {"webhook": None, "email": None, "command": "true", "default": "dead,bogus"},
    ):
        with pytest.raises(UsageError):
            build_channel("x", **kwargs)  # type: ignore[arg-type]


def test_channels_for_uses_the_jobs_rules_else_the_defaults() -> None:
    defaults = [
        Channel("a", ChannelKind.COMMAND, "true", default_events=(Event.DEAD,)),
        Channel("b", ChannelKind.COMMAND, "true"),
    ]
    assert channels_for(Event.DEAD, [], defaults) == ["a"]
    assert channels_for(Event.LATE, [], defaults) == []
    rules = [NotifyRule("b", (Event.SUCCEEDED,))]
    assert channels_for(Event.DEAD, rules, defaults) == []
    assert channels_for(Event.SUCCEEDED, rules, defaults) == ["b"]


def test_finish_events() -> None:
    def ev(**kw: object) -> list[Event]:
        args = {
            "state": RunState.SUCCEEDED,
            "retry_scheduled": False,
            "previous_final": None,
            "duration_seconds": 1.0,
            "previous_durations": [],
        }
        args.update(kw)
        return [e for e, _ in finish_events(**args)]  # type: ignore[arg-type]

    assert ev() == [Event.SUCCEEDED]
    assert ev(previous_final=RunState.DEAD) == [Event.SUCCEEDED, Event.RECOVERED]
    assert ev(state=RunState.FAILED, retry_scheduled=True) == [Event.FAILED]
    assert ev(state=RunState.DEAD) == [Event.DEAD]
    assert ev(state=RunState.CANCELLED) == []
    assert ev(duration_seconds=40.0, previous_durations=[10.0] * 5) == [
        Event.SUCCEEDED,
        Event.ANOMALY,
    ]


def test_every_event_an_end_causes_is_one_it_may_cause() -> None:
    # the store asks the channels about possible_finish_events before reading the facts
    # finish_events needs: an event it leaves out would never be written
    for state in RunState:
        for retry in (False, True):
            for previous in (None, RunState.DEAD, RunState.SUCCEEDED):
                got = finish_events(
                    state=state,
                    retry_scheduled=retry,
                    previous_final=previous,
                    duration_seconds=40.0,
                    previous_durations=[10.0] * 5,
                )
                assert {e for e, _ in got} <= set(possible_finish_events(state)), state
    assert possible_finish_events(RunState.CANCELLED) == ()


def test_anomaly() -> None:
    assert anomaly(40.0, [10.0] * 4) is None  # fewer than 5 runs
    assert anomaly(40.0, [10.0] * 5) == {"kind": "slow", "median": 10.0, "duration": 40.0}
    assert anomaly(2.0, [10.0] * 5) == {"kind": "fast", "median": 10.0, "duration": 2.0}
    assert anomaly(25.0, [10.0] * 5) is None  # under 3x
    assert anomaly(0.5, [0.1] * 5) is None  # 5x, but under 1 s away
    # only the 20 most recent count
    assert anomaly(40.0, [10.0] * 20 + [100.0] * 30)["kind"] == "slow"  # type: ignore[index]


def test_retry_delays() -> None:
    assert [retry_delay_seconds(t) for t in range(1, 11)] == [
        10,
        20,
        40,
        80,
        160,
        320,
        600,
        600,
        600,
        None,
    ]


def test_event_text() -> None:
    assert (
        event_text(Event.DEAD, "backup", run_id=42, attempt=3, error="exit 7")
        == "jobctl: backup dead after 3 attempts: exit 7 (run 42)"
    )
    assert event_text(Event.MISSED, "b", detail={"count": 1}) == "jobctl: b missed 1 window"
    assert "\n" not in event_text(Event.FAILED, "b", attempt=1, error="exit\n3")


def test_rules_from_json() -> None:
    assert rules_from_json([{"channel": "a"}, {"channel": "b", "events": ["dead"]}, "c:late"]) == (
        NotifyRule("a"),
        NotifyRule("b", (Event.DEAD,)),
        NotifyRule("c", (Event.LATE,)),
    )
    with pytest.raises(UsageError):
        rules_from_json([{"channel": "a", "events": ["nope"]}])
