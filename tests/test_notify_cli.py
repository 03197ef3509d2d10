"""Channels, a job's notify flags, ``notifications`` and ``check`` from the command line
(README, Getting told), on both backends."""

from __future__ import annotations

import json

import pytest
from receivers import MainCli, http_receiver, smtp_receiver

SECRET_URL = "https://hooks.example.com/services/T000/B000/s3cretpath"


@pytest.fixture
def jobctl(db, capsys):
    cli = MainCli(db, capsys)
    yield cli
    cli.close()


def test_channels_add_list_rm_and_the_url_is_never_shown_whole(jobctl) -> None:
    r = jobctl("notify", "add", "ops", "--webhook", SECRET_URL, "--header", "X-T: 1")
    assert "s3cret" not in r.output and "https://hooks.example.com/…" in r.output
    jobctl(
        "notify",
        "add",
        "mail",
        "--email",
        "ops@example.org",
        "--smtp",
        "127.0.0.1:2525",
        "--default",
        "dead,late",
    )
    jobctl("notify", "add", "hook", "--command", "cat > /dev/null")
    listed = jobctl.json("notify", "list")
    assert listed == [
        {"name": "hook", "kind": "command", "target": "cat > /dev/null", "default_events": []},
        {
            "name": "mail",
            "kind": "email",
            "target": "ops@example.org",
            "default_events": ["dead", "late"],
        },
        {
            "name": "ops",
            "kind": "webhook",
            "target": "https://hooks.example.com/…",
            "default_events": [],
        },
    ]
    assert "s3cret" not in jobctl("notify", "list").output
    r = jobctl("notify", "add", "ops", "--command", "true", ok=False)
    assert r.exit_code == 1 and "exists" in r.output
    jobctl("notify", "add", "ops", "--command", "true", "--replace")
    jobctl("notify", "rm", "ops")
    assert [c["name"] for c in jobctl.json("notify", "list")] == ["hook", "mail"]
    r = jobctl("notify", "rm", "ops", ok=False)
    assert r.exit_code == 1 and "no channel" in r.output


@pytest.mark.parametrize(
    "args",
    [
        ["notify", "add", "x", "--webhook", "ftp://h.example/s3cret"],
        ["notify", "add", "x", "--webhook", "not a url"],
        ["notify", "add", "x", "--email", "nobody"],
        ["notify", "add", "x", "--email", "a@b.c", "--smtp", "h:0"],
        ["notify", "add", "x", "--command", "true", "--default", "dead,bogus"],
        ["notify", "add", "bad name", "--command", "true"],
        ["notify", "add", "x"],
        ["add", "j", "--every", "1h", "--notify", "nosuch", "--", "true"],
        ["add", "j", "--every", "1h", "--notify", "hook:dead,nope", "--", "true"],
        ["add", "j", "--every", "1h", "--grace", "1.5h", "--", "true"],
        ["add", "j", "--every", "1h", "--warn-after", "-1", "--", "true"],
        ["add", "j", "--every", "1h", "--notify", "hook", "--no-notify", "--", "true"],
    ],
)
def test_bad_input_is_one_error_line_exit_2_and_nothing_written(jobctl, args) -> None:
    jobctl("notify", "add", "hook", "--command", "true")
    before = (jobctl.json("notify", "list"), jobctl.json("list"))
    r = jobctl(*args, ok=False)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), r.stderr
    assert "s3cret" not in r.stderr
    assert (jobctl.json("notify", "list"), jobctl.json("list")) == before


def test_job_flags_in_add_edit_and_json(jobctl) -> None:
    jobctl("notify", "add", "a", "--command", "true")
    jobctl("notify", "add", "b", "--command", "true")
    job = json.loads(
        jobctl(
            "add",
            "j",
            "--every",
            "1h",
            "--notify",
            "a",
            "--notify",
            "b:dead,succeeded",
            "--grace",
            "5m",
            "--warn-after",
            "1h",
            "--json",
            "--",
            "true",
        ).stdout
    )
    assert job["notify"] == [
        {"channel": "a", "events": ["dead", "recovered", "missed", "late", "anomaly", "paused"]},
        {"channel": "b", "events": ["dead", "succeeded"]},
    ]
    assert (job["grace"], job["warn_after"]) == (300, 3600)
    job = jobctl.json("edit", "j", "--notify", "b:late")
    assert job["notify"] == [{"channel": "b", "events": ["late"]}]
    shown = jobctl.json("show", "j")
    assert shown["notify"] == job["notify"] and shown["grace"] == 300
    r = jobctl("notify", "rm", "b", ok=False)
    assert r.exit_code == 1 and "j" in r.stderr
    assert jobctl.json("edit", "j", "--no-notify")["notify"] == []
    jobctl("notify", "rm", "b")


def test_jobs_as_code_keep_notify_grace_and_warn_after(jobctl) -> None:
    jobctl("notify", "add", "ops", "--command", "true")
    jobctl(
        "add",
        "a",
        "--every",
        "1h",
        "--notify",
        "ops:dead,late",
        "--grace",
        "5m",
        "--warn-after",
        "1h",
        "--",
        "true",
    )
    text = jobctl("export").stdout
    assert 'notify = [\n    "ops:dead,late",\n]' in text
    assert 'grace = "5m"' in text and 'warn_after = "1h"' in text
    assert jobctl("apply", "-", stdin=text).stdout == ""  # export | apply - changes nothing
    r = jobctl("apply", "-", stdin=text.replace("ops:dead,late", "nosuch:dead"), ok=False)
    assert r.exit_code == 2 and "no channel named nosuch" in r.stderr
    assert jobctl.json("show", "a")["notify"] == [{"channel": "ops", "events": ["dead", "late"]}]


def test_notify_test_delivers_to_a_webhook_and_an_smtp_server(jobctl) -> None:
    with http_receiver() as rec, smtp_receiver() as box:
        jobctl("notify", "add", "web", "--webhook", rec.url)
        jobctl("notify", "add", "mail", "--email", "ops@example.org", "--smtp", box.address)
        jobctl("notify", "test", "web")
        jobctl("notify", "test", "mail")
        [req] = rec.requests
        assert req.body["event"] == "test" and req.headers["Idempotency-Key"] == req.body["key"]
        [msg] = box.messages
        assert msg["Subject"].startswith("jobctl: test notification")
    # not recorded
    assert jobctl.json("notifications") == []


def test_a_webhook_url_with_a_user_and_password_is_refused(jobctl) -> None:
    """urllib never sends a URL's user and password: such a channel could never be
    delivered, so it is invalid input, and the error names neither."""
    for url in ("https://bot:pa55word@hooks.example.com/s3cret", "http://bot@h.example:81/x"):
        r = jobctl("notify", "add", "x", "--webhook", url, ok=False)
        assert r.exit_code == 2 and r.stdout == ""
        assert r.stderr.startswith("Error: invalid --webhook URL http"), r.stderr
        assert "user and password" in r.stderr and "--header 'Authorization: …'" in r.stderr
        assert "pa55word" not in r.stderr and "bot" not in r.stderr
    assert jobctl.json("notify", "list") == []


def test_smtp_auth_is_refused_in_clear_off_this_host_by_notify_test(jobctl, monkeypatch) -> None:
    from receivers import outward_address

    address = outward_address()
    if address is None:
        pytest.skip("this host has no address beyond loopback")
    monkeypatch.setenv("JOBCTL_SMTP_USER", "mailer")
    monkeypatch.setenv("JOBCTL_SMTP_PASSWORD", "hunter2")
    with smtp_receiver(address, auth=True) as far, smtp_receiver(auth=True) as near:
        jobctl("notify", "add", "far", "--email", "ops@example.org", "--smtp", far.address)
        jobctl("notify", "add", "near", "--email", "ops@example.org", "--smtp", near.address)
        r = jobctl("notify", "test", "far", ok=False)
        jobctl("notify", "test", "near")
        assert far.logins == [] and far.tried == []
        assert near.logins == [("mailer", "hunter2")] and len(near.messages) == 1
    assert r.exit_code == 1 and "offers no STARTTLS" in r.stderr
    assert "only over TLS or to a loopback address" in r.stderr


def test_notify_test_reports_the_receivers_error(jobctl) -> None:
    with http_receiver(statuses=[500]) as rec:
        jobctl("notify", "add", "web", "--webhook", rec.url)
        r = jobctl("notify", "test", "web", ok=False)
    assert r.exit_code == 1 and "HTTP 500" in r.stderr and "/hook/" not in r.stderr
    assert jobctl("notify", "test", "nosuch", ok=False).exit_code == 1


def test_notifications_filters(jobctl) -> None:
    assert jobctl.json("notifications") == []
    r = jobctl("notifications", "--state", "bogus", ok=False)
    assert r.exit_code == 2
    assert jobctl("notifications", "--job", "nosuch", ok=False).exit_code == 1


# ---------------------------------------------------------------------- jobctl check


def _check(jobctl, *args: str) -> tuple[int, str, dict]:
    line = jobctl("check", *args, ok=False)
    js = jobctl("check", "--json", *args, ok=False)
    assert line.exit_code == js.exit_code
    return line.exit_code, line.stdout.strip(), json.loads(js.stdout)


def test_check_critical_without_a_daemon(jobctl) -> None:
    jobctl("add", "j", "--every", "1h", "--", "true")
    code, line, js = _check(jobctl)
    assert code == 2 and line.startswith("JOBCTL CRITICAL - no live daemon |")
    assert "daemons=0" in line
    assert js["state"] == "CRITICAL" and js["code"] == 2 and js["daemons"] == 0
    assert js["leader"] is None


def test_check_ok_and_warning_with_a_daemon(jobctl, start_daemon) -> None:
    from conftest import wait_until

    start_daemon()
    jobctl("add", "j", "--every", "1h", "--", "true")
    wait_until(lambda: _check(jobctl)[0] == 0, 10, what="a leader")
    code, line, js = _check(jobctl)
    assert line.startswith("JOBCTL OK - 1 daemon(s), leader on ")
    assert js["leader"] and js["dead"] == 0
    jobctl("add", "bad", "--manual", "--retries", "0", "--", "exit 3")
    jobctl("run", "bad", "--wait", ok=False)
    code, line, js = _check(jobctl)
    assert code == 1 and "1 dead run(s) in the last 24h" in line and js["dead"] == 1
    assert "dead=1;" in line


def test_check_unknown_when_the_database_cannot_be_read(tmp_path) -> None:
    from click.testing import CliRunner

    from jobctl.cli import cli

    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"this is not a database" * 100)
    bad.chmod(0o600)
    r = CliRunner().invoke(cli, ["--db", str(bad), "check"])
    assert r.exit_code == 3 and r.stdout.startswith("JOBCTL UNKNOWN - ")
    r = CliRunner().invoke(cli, ["--db", str(tmp_path / "none.db"), "check", "--json"])
    assert r.exit_code == 3 and json.loads(r.stdout)["state"] == "UNKNOWN"
