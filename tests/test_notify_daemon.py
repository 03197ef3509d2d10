"""Notifications delivered by a real daemon to a real receiver on 127.0.0.1 (README, Getting told):
every event, the outbox's retries and key, a channel removed, a daemon killed mid-send,
and the API. Both backends."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from receivers import MainCli, http_receiver, smtp_receiver
from webhelpers import Server, token_file

#: the shortest retry a test waits for (a whole second, the least DURATION)
FAST = ("--notify-retry", "1s")


@pytest.fixture
def jobctl(db, capsys):
    cli = MainCli(db, capsys)
    yield cli
    cli.close()


def _notes(jobctl: Any, *args: str) -> list[dict]:
    return jobctl.json("notifications", "--limit", "100", *args)


def _sent(jobctl: Any, n: int, timeout: float = 20.0) -> list[dict]:
    return wait_until(
        lambda: (got := _notes(jobctl, "--state", "sent")) and len(got) >= n and got,
        timeout,
        what=f"{n} notification(s) sent",
    )


def test_a_dead_run_is_told_once_with_body_headers_and_its_record(jobctl, start_daemon) -> None:
    with http_receiver() as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url, "--header", "X-Team: infra")
        jobctl(
            "add",
            "backup",
            "--manual",
            "--retries",
            "0",
            "--notify",
            "ops",
            "--",
            "echo boom; exit 7",
        )
        start_daemon()
        r = jobctl("run", "backup", "--wait", ok=False)
        assert r.exit_code == 1
        [n] = _sent(jobctl, 1)
        [req] = rec.requests
    body = req.body
    assert body["event"] == "dead" and body["key"] == n["key"]
    assert body["text"] == f"jobctl: backup dead after 1 attempt: exit 7 (run {n['run_id']})"
    assert body["job"]["name"] == "backup" and body["run"]["id"] == n["run_id"]
    assert body["run"]["state"] == "dead" and body["attempt"]["exit_code"] == 7
    # the job object is show's: its last run is the run told about
    assert body["job"]["last_run"]["id"] == n["run_id"]
    assert body["job"]["last_run"]["state"] == "dead"
    assert req.headers["Idempotency-Key"] == n["key"]
    assert req.headers["X-Team"] == "infra"
    assert req.headers["Content-Type"] == "application/json"
    assert (n["channel"], n["event"], n["job"], n["tries"], n["attempt"]) == (
        "ops",
        "dead",
        "backup",
        1,
        1,
    )
    assert n["sent_at"] and n["last_error"] is None
    inspected = jobctl.json("inspect", str(n["run_id"]))
    assert [x["key"] for x in inspected["notifications"]] == [n["key"]]
    # the events the job did not ask for were not written
    assert len(_notes(jobctl)) == 1


def test_500_500_200_is_three_requests_one_key_tries_3(jobctl, start_daemon) -> None:
    with http_receiver(statuses=[500, 500]) as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl("add", "j", "--manual", "--retries", "0", "--notify", "ops:dead", "--", "exit 1")
        start_daemon(*FAST)
        jobctl("run", "j", "--wait", ok=False)
        [n] = _sent(jobctl, 1)
        keys = rec.keys()
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0] == n["key"]
    assert (n["state"], n["tries"]) == ("sent", 3)


def test_a_receiver_that_never_answers_in_time_fails_after_its_tries(jobctl, start_daemon):
    """Every try fails (500): the notification is failed after its tries, the metric counts
    it, and check warns."""
    with http_receiver(statuses=[500] * 20) as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl("add", "j", "--manual", "--retries", "0", "--notify", "ops:dead", "--", "exit 1")
        # 1 s doubling: 10 tries take 1+2+...+256 s; a store-level check of the schedule
        # is in test_notifications.py, here only the first tries and their error
        start_daemon(*FAST)
        jobctl("run", "j", "--wait", ok=False)
        wait_until(lambda: len(rec.requests) >= 2, 15, what="a retry")
    [n] = _notes(jobctl)
    assert n["state"] == "pending" and n["tries"] >= 1
    assert "HTTP 500" in n["last_error"] and "/hook/" not in n["last_error"]


def test_a_channel_removed_before_delivery_sends_nothing(jobctl) -> None:
    """The run ends dead through the store (no daemon, so nothing is delivered), then
    the channel goes: its notification is dropped and a daemon sends nothing."""
    from jobctl.models import JobSpec, Trigger, TriggerKind

    with http_receiver() as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url, "--default", "dead")
        from jobctl.clock import SystemClock

        store = jobctl.store()
        now = SystemClock().now()
        job = store.add_job(
            JobSpec("j", Trigger(TriggerKind.MANUAL, tz="UTC"), "exit 1", retries=0), now
        )
        store.enqueue_run(job.name, now)
        (claimed,), _ = store.claim("d1", "h", now, 30)
        store.finish(claimed.run, claimed.run.attempt, "d1", now, exit_code=1)
        [n] = _notes(jobctl)
        assert (n["state"], n["event"]) == ("pending", "dead")
        r = jobctl("notify", "rm", "ops")
        assert "1 undelivered notification(s) dropped" in r.output
        [n] = _notes(jobctl)
        assert n["state"] == "dropped" and n["last_error"] == "channel removed"
        assert rec.requests == []


@pytest.mark.long
def test_sigkill_mid_send_is_delivered_after_a_restart_with_the_same_key(
    jobctl, start_daemon
) -> None:
    """Ten notifications; a daemon killed each time a request reaches a slow receiver
    (mid-send: it has not answered) until every notification was asked for once: after the
    restarts every notification is sent, none lost, each under one key."""
    notes = 10
    with http_receiver(delay_seconds=1.5) as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl("add", "j", "--manual", "--retries", "0", "--notify", "ops:dead", "--", "exit 1")
        for _ in range(notes):
            jobctl("run", "j")
        seen, kills = 0, 0
        d = start_daemon("--notify-threads", "1")
        # counted from before each start: a request the new daemon makes at once is its
        # first, never one to let finish (a slow kill only lets a send through)
        while len(set(rec.keys())) < notes and kills < 2 * notes:
            wait_until(lambda s=seen: len(rec.requests) > s, 30, what=f"request {seen + 1}")
            os.kill(d.pid, signal.SIGKILL)
            d.proc.wait()
            kills += 1
            seen = len(rec.requests)
            d = start_daemon("--notify-threads", "1")
        sent = _sent(jobctl, notes, timeout=90)
        keys = rec.keys()
    assert len(sent) == notes and {n["key"] for n in sent} <= set(keys)
    # a key seen more than once was a repeat of a killed send, never a new key
    assert len(set(keys)) == notes
    assert len(keys) > notes, (kills, keys)  # some killed send was made again


def test_email_over_smtp_end_to_end(jobctl, start_daemon) -> None:
    with smtp_receiver() as box:
        jobctl("notify", "add", "mail", "--email", "ops@example.org", "--smtp", box.address)
        jobctl(
            "add",
            "backup",
            "--manual",
            "--retries",
            "0",
            "--notify",
            "mail:dead",
            "--",
            "echo disk full; exit 7",
        )
        start_daemon()
        jobctl("run", "backup", "--wait", ok=False)
        [n] = _sent(jobctl, 1)
        [msg] = box.messages
    assert msg["Subject"] == f"jobctl: backup dead after 1 attempt: exit 7 (run {n['run_id']})"
    assert msg["Message-ID"] == f"<{n['key']}@jobctl>"
    text = msg.get_content()
    assert "disk full" in text and "state: dead" in text


def test_an_email_tried_twice_is_one_message_id(jobctl, start_daemon) -> None:
    """The receiver refuses the first try (451): the retry carries the same Message-ID,
    so a mail system that got both keeps one."""
    with smtp_receiver(refuse_first=1) as box:
        jobctl("notify", "add", "mail", "--email", "ops@example.org", "--smtp", box.address)
        jobctl("add", "j", "--manual", "--retries", "0", "--notify", "mail:dead", "--", "exit 7")
        start_daemon(*FAST)
        jobctl("run", "j", "--wait", ok=False)
        [n] = _sent(jobctl, 1)
        tried = [m["Message-ID"] for m in box.tried]
    assert n["tries"] == 2 and tried == [f"<{n['key']}@jobctl>"] * 2


def test_a_command_channels_error_is_the_line_it_wrote_on_stderr(jobctl, start_daemon) -> None:
    jobctl("notify", "add", "pager", "--command", "echo 'pager: quota spent' >&2; exit 4")
    jobctl("add", "j", "--manual", "--retries", "0", "--notify", "pager:dead", "--", "exit 1")
    start_daemon(*FAST)
    jobctl("run", "j", "--wait", ok=False)
    wait_until(lambda: _notes(jobctl)[0]["last_error"], 20, what="a failed try")
    assert _notes(jobctl)[0]["last_error"] == "command ended exit 4: pager: quota spent"


def test_command_channel_end_to_end(jobctl, start_daemon, tmp_path: Path) -> None:
    out = tmp_path / "told"
    jobctl(
        "notify",
        "add",
        "sh",
        "--command",
        f'echo "$JOBCTL_EVENT $JOBCTL_JOB $JOBCTL_RUN_ID" >> {out}',
    )
    jobctl("add", "j", "--manual", "--notify", "sh:succeeded", "--", "true")
    start_daemon()
    run = jobctl.json("run", "j", "--wait")
    _sent(jobctl, 1)
    assert out.read_text().split() == ["succeeded", "j", str(run["id"])]


def test_failed_recovered_and_succeeded(jobctl, start_daemon, tmp_path: Path) -> None:
    marker = tmp_path / "m"
    with http_receiver() as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl(
            "add",
            "flaky",
            "--manual",
            "--retries",
            "1",
            "--backoff",
            "1s",
            "--notify",
            "ops:failed,dead,recovered,succeeded",
            "--",
            f"test -f {marker}",
        )
        start_daemon()
        jobctl("run", "flaky", "--wait", ok=False)  # fails twice: failed, then dead
        marker.touch()
        jobctl("run", "flaky", "--wait")  # succeeds after a dead run: recovered
        _sent(jobctl, 4)
        events = [b["event"] for b in rec.bodies()]
    assert sorted(events) == ["dead", "failed", "recovered", "succeeded"]


def test_anomaly_from_the_median_of_previous_runs(jobctl, start_daemon, tmp_path: Path):
    slow = tmp_path / "slow"
    with http_receiver() as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl(
            "add",
            "j",
            "--manual",
            "--notify",
            "ops:anomaly",
            "--",
            f"if [ -f {slow} ]; then sleep 1.5; fi",
        )
        start_daemon()
        for _ in range(5):
            jobctl("run", "j", "--wait")
        assert _notes(jobctl) == []
        slow.touch()
        jobctl("run", "j", "--wait")
        [n] = _sent(jobctl, 1)
        [body] = rec.bodies()
    assert n["event"] == "anomaly" and body["detail"]["kind"] == "slow"
    assert body["detail"]["median"] < 1.0


def test_late_and_long(jobctl, start_daemon) -> None:
    with http_receiver() as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl("add", "waits", "--manual", "--grace", "1s", "--notify", "ops:late", "--", "true")
        jobctl(
            "add", "slow", "--manual", "--warn-after", "1s", "--notify", "ops:long", "--", "sleep 4"
        )
        start_daemon()
        jobctl("pause", "waits")
        jobctl("run", "waits")  # waits while paused: not started by its window + 1 s
        jobctl("run", "slow")
        sent = _sent(jobctl, 2, timeout=20)
        by_event = {n["event"]: n for n in sent}
    assert set(by_event) == {"late", "long"}
    assert by_event["late"]["job"] == "waits" and by_event["long"]["job"] == "slow"
    assert by_event["long"]["attempt"] == 1
    assert len(rec.requests) == 2  # each once, though looked at again and again


def test_missed_windows_are_one_event(jobctl, start_daemon) -> None:
    with http_receiver() as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url, "--default", "missed")
        jobctl("add", "tick", "--every", "1s", "--catchup", "skip", "--", "true")
        time.sleep(3.5)  # windows pass while no scheduler runs
        start_daemon()
        [n] = _sent(jobctl, 1)
        [body] = rec.bodies()
    assert n["event"] == "missed" and body["detail"]["count"] >= 2
    assert body["detail"]["first"] < body["detail"]["last"]


def test_metrics_count_sent_notifications(jobctl, start_daemon, db, tmp_path: Path) -> None:
    with http_receiver() as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl("add", "j", "--manual", "--notify", "ops:succeeded", "--", "true")
        start_daemon()
        jobctl("run", "j", "--wait")
        jobctl("run", "j", "--wait")
        _sent(jobctl, 2)
    s = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path))
    try:
        s.wait_ready()
        text = s.request("GET", "/metrics").text
    finally:
        s.close()
    assert 'jobctl_notifications_total{channel="ops",event="succeeded",state="sent"} 2' in text


# ---------------------------------------------------------------------- the API


@pytest.fixture
def server(db: Path, tmp_path: Path):
    s = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path))
    try:
        yield s.wait_ready()
    finally:
        s.close()


def test_api_channels_notifications_and_test(server, jobctl) -> None:
    with http_receiver(statuses=[200, 503]) as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url + "?token=s3cret")
        a = server.request("GET", "/v1/channels")
        assert a.status == 200 and a.json() == jobctl.json("notify", "list")
        assert "s3cret" not in a.text and "/hook/" not in a.text
        a = server.request("POST", "/v1/channels/ops/test")
        assert (a.status, a.json()) == (200, {"delivered": True})
        a = server.request("POST", "/v1/channels/ops/test")
        assert a.status == 502 and "HTTP 503" in a.json()["error"]
        assert "s3cret" not in a.text
    assert server.request("POST", "/v1/channels/nosuch/test").status == 404
    a = server.request("GET", "/v1/notifications?state=sent&limit=5")
    assert (a.status, a.json()) == (200, [])
    assert server.request("GET", "/v1/notifications?state=bogus").status == 422
    assert server.request("GET", "/v1/notifications?job=nosuch").status == 404


def test_api_job_bodies_take_notify_grace_and_warn_after(server, jobctl) -> None:
    jobctl("notify", "add", "ops", "--command", "true")
    body = {
        "name": "j",
        "trigger": {"kind": "manual"},
        "command": "true",
        "notify": [{"channel": "ops", "events": ["dead", "late"]}],
        "grace": "5m",
        "warn_after": 60,
    }
    a = server.request("POST", "/v1/jobs", body)
    assert a.status == 201, a.text
    job = a.json()
    assert job["notify"] == [{"channel": "ops", "events": ["dead", "late"]}]
    assert (job["grace"], job["warn_after"]) == (300, 60)
    a = server.request("PATCH", "/v1/jobs/j", {"notify": []})
    assert a.status == 200 and a.json()["notify"] == []
    bad = server.request("POST", "/v1/jobs", {**body, "name": "k", "notify": [{"channel": "no"}]})
    assert bad.status == 422 and "no channel named no" in bad.json()["error"]
    assert [j["name"] for j in jobctl.json("list")] == ["j"]


@pytest.mark.long
def test_a_hanging_receiver_delays_no_run(jobctl, start_daemon) -> None:
    """Each delivery hangs 6 s on one delivery thread: runs are claimed, run and finished
    meanwhile as if nothing were told, and the deliveries follow one by one."""
    with http_receiver(delay_seconds=6) as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl("add", "j", "--manual", "--notify", "ops:succeeded", "--", "true")
        start_daemon("--notify-threads", "1")
        t0 = time.monotonic()
        for _ in range(3):
            jobctl("run", "j", "--wait")
        took = time.monotonic() - t0
        wait_until(lambda: len(rec.requests) >= 1, 10, what="the first delivery under way")
        assert took < 6, took  # three runs inside the first delivery's hang
        _sent(jobctl, 3, timeout=60)


def _one_dead_run(jobctl: Any, channel_command: str) -> tuple[Any, Any]:
    """A command channel told of every death, and one run of ``j`` that died, played
    through the store as daemon ``d1`` does: (the store, the time it ended)."""
    from jobctl.clock import SystemClock

    jobctl("notify", "add", "ops", "--command", channel_command, "--default", "dead")
    jobctl("add", "j", "--manual", "--retries", "0", "--", "exit 1")
    store = jobctl.store()
    now = SystemClock().now()
    store.enqueue_run("j", now)
    (claimed,), _ = store.claim("d1", "h", now, 30)
    store.finish(claimed.run, claimed.run.attempt, "d1", now, exit_code=1)
    return store, now


def test_a_delivery_out_of_tries_is_failed_counted_and_warned(jobctl) -> None:
    """Through the store as a daemon drives it: a failed try with no retry left (the
    notifier gives none after the tenth, see test_retry_delays) makes it failed, the
    counter behind jobctl_notifications_total counts it, and check says so."""
    from jobctl.notifications import Outcome

    store, now = _one_dead_run(jobctl, "exit 1")
    d = store.daemon.face("d1", "h")
    (out,), _ = d.exchange_notifications(now, [], limit=4, lease_seconds=60)
    d.exchange_notifications(now, [Outcome(out.note.id, "exit 1")], limit=0, lease_seconds=60)
    [n] = _notes(jobctl)
    assert (n["state"], n["tries"], n["last_error"]) == ("failed", 1, "exit 1")
    r = jobctl("check", ok=False)
    assert r.exit_code == 2  # no daemon: critical, and the failed notification said too
    assert "1 failed notification(s) in the last 24h" in r.stdout
    assert [c for c in store.notification_counts()] == [("ops", "dead", "failed", 1)]


def test_a_lease_held_by_a_gone_daemon_is_due_when_that_daemon_expires(jobctl) -> None:
    """A daemon killed mid-send holds its delivery for the long delivery lease, but only
    while its own row lives: the daemon that takes over is told to look again when that
    row expires, not when the delivery lease would have ended (90 s of silence under load
    in CI before this)."""
    store, now = _one_dead_run(jobctl, "true")
    killed = store.daemon.face("d1", "h", lease=2)
    killed.register_daemon(now)
    (out,), _ = killed.exchange_notifications(now, [], limit=1, lease_seconds=90)
    other = store.daemon.face("d2", "h", lease=2)
    other.register_daemon(now)
    nothing, due = other.exchange_notifications(now, [], limit=4, lease_seconds=90)
    assert nothing == [] and due is not None
    assert now < due <= now + timedelta(seconds=3)  # d1's row expires at now + 2 s
    later = now + timedelta(seconds=2, milliseconds=1)
    (again,), _ = other.exchange_notifications(later, [], limit=4, lease_seconds=90)
    assert again.note.key == out.note.key  # the same notification, under the same key


def test_a_send_under_way_does_not_hold_a_stopping_daemon(jobctl, start_daemon) -> None:
    """SIGTERM while a delivery hangs on its receiver: the daemon exits without waiting
    for it (the next daemon sends it again, with the same key)."""
    with http_receiver(delay_seconds=20) as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl("add", "j", "--manual", "--notify", "ops:succeeded", "--", "true")
        d = start_daemon()
        jobctl("run", "j", "--wait")
        wait_until(lambda: rec.requests, 10, what="the delivery under way")
        t0 = time.monotonic()
        assert d.terminate() == 0
        assert time.monotonic() - t0 < 8
        [n] = _notes(jobctl)
        assert n["state"] == "pending"
