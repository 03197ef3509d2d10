"""Watched jobs (issue 45; README "Watching jobs that jobctl does not run"): ``add
--watch``, the Healthchecks ping protocol on a real ``jobctl serve`` driven by the real
``curl`` binary exactly as Healthchecks documents it, ``jobctl ping``, ``jobctl exec`` as a
crontab wrapper, a real daemon turning a silent window ``late`` then ``dead`` with the
webhook receiver told both, and ``import-crontab --watch`` on a realistic crontab.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import BACKEND, wait_until
from receivers import MainCli, http_receiver
from webhelpers import TOKEN, Server, browser, needs_chromium, text_of, token_file

from jobctl.crontab import parse_crontab

__all__ = ["browser"]  # the headless Chromium fixture, used by the dashboard's test

CURL = shutil.which("curl")
needs_curl = pytest.mark.skipif(CURL is None, reason="no curl binary")


def _key(jobctl: Any, name: str) -> str:
    key = jobctl.json("show", name)["ping_key"]
    assert isinstance(key, str) and len(key) == 36
    return key


def _runs(jobctl: Any, name: str) -> list[dict[str, Any]]:
    return list(jobctl.json("runs", name, "--limit", "100"))


def _inspect(jobctl: Any, run_id: int) -> dict[str, Any]:
    return dict(jobctl.json("inspect", str(run_id)))


def _jobctl_argv(db: Path) -> list[str]:
    return [sys.executable, "-c", "from jobctl.cli import main; main()", "--db", str(db)]


@pytest.fixture
def jobctl(db: Path, capsys: Any) -> Iterator[MainCli]:
    """The CLI in-process through its real error boundary (``Error: …`` and exit codes)."""
    cli = MainCli(db, capsys)
    yield cli
    cli.close()


@pytest.fixture
def server(db: Path, tmp_path: Path) -> Iterator[Server]:
    s = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path))
    try:
        yield s.wait_ready()
    finally:
        s.close()


# ---------------------------------------------------------------------- add --watch


def test_add_watch_gives_a_ping_key_no_command_and_refuses_start_flags(jobctl) -> None:
    r = jobctl("add", "nightly", "--watch", "--cron", "0 3 * * *", "--timeout", "1h")
    key = _key(jobctl, "nightly")
    assert f"ping: /ping/{key}" in r.stdout
    job = jobctl.json("show", "nightly")
    assert job["watch"] is True and job["command"] is None
    assert job["grace"] == 300 and job["timeout"] == 3600
    shown = jobctl("show", "nightly").stdout
    assert f"ping         /ping/{key}" in shown and "command" not in shown
    keys = [line.split()[0] for line in shown.splitlines() if line.strip()]
    assert keys.count("grace") == 1 and keys.count("state") == 1, shown
    # another watched job gets another key
    jobctl("add", "hourly", "--watch", "--every", "1h", "--grace", "10m")
    assert _key(jobctl, "hourly") != key and jobctl.json("show", "hourly")["grace"] == 600
    for bad in (
        ["--retries", "3"],
        ["--env", "A=1"],
        ["--on-failure", "true"],
        ["--lock", "db"],
        ["--memory-max", "1G"],
        ["--on", "gpu"],
    ):
        r = jobctl("add", "bad", "--watch", "--every", "1h", *bad, ok=False)
        assert r.exit_code == 2 and "not with --watch" in r.output, r.output
    r = jobctl("add", "bad", "--watch", "--manual", ok=False)
    assert r.exit_code == 2 and "--cron EXPR or --every" in r.output
    r = jobctl("add", "bad", "--watch", "--every", "1h", "--", "echo hi", ok=False)
    assert r.exit_code == 2 and "takes no COMMAND" in r.output
    r = jobctl("add", "bad", "--every", "1h", ok=False)
    assert r.exit_code == 2 and "COMMAND" in r.output
    assert [j["name"] for j in jobctl.json("list")] == ["hourly", "nightly"]
    r = jobctl("edit", "hourly", "--on", "gpu", ok=False)
    assert r.exit_code == 2 and "--on is about starting a command" in r.output, r.output
    assert jobctl.json("show", "hourly")["on"] == []


def test_the_api_makes_a_watched_job_from_its_show_json_and_refuses_as_add_and_edit(
    jobctl, server
) -> None:
    # a show --json object posted back (read-only fields and all) makes the same job
    jobctl("add", "nightly", "--watch", "--cron", "0 3 * * *", "--grace", "10m", "--timeout", "1h")
    shown = jobctl.json("show", "nightly")
    a = server.request("POST", "/v1/jobs", {**shown, "name": "nightly-copy"})
    assert a.status == 201, a.text
    copy = jobctl.json("show", "nightly-copy")
    assert copy["watch"] is True and copy["command"] is None
    assert copy["ping_key"] not in (None, shown["ping_key"])
    ignore = ("id", "name", "ping_key", "created_at", "runs", "next_run_at")
    assert {k: v for k, v in copy.items() if k not in ignore} == {
        k: v for k, v in shown.items() if k not in ignore
    }
    # add --watch's refusals, with its messages; nothing written
    base = {"name": "bad", "trigger": {"kind": "interval", "expr": "1h"}, "watch": True}
    for extra, message in (
        ({"retries": 3}, "--retries is about starting a command: not with --watch"),
        ({"env": {"A": "1"}}, "--env is about starting a command: not with --watch"),
        ({"command": "true"}, "a watched job takes no command: the work runs elsewhere and pings"),
        ({"trigger": {"kind": "manual"}}, "--watch takes --cron EXPR or --every DURATION"),
    ):
        a = server.request("POST", "/v1/jobs", {**base, **extra})
        assert (a.status, a.json()) == (422, {"error": message}), extra
    # PATCH refuses what edit refuses for a watched job, and watch is not changed
    for body, message in (
        ({"retries": 3}, "--retries is about starting a command: not with --watch"),
        ({"command": "true"}, "job 'nightly' is watched: it has no command"),
        ({"trigger": {"kind": "manual"}}, "--watch takes --cron EXPR or --every DURATION"),
        ({"watch": False}, "watch is set when a job is created, not changed"),
    ):
        a = server.request("PATCH", "/v1/jobs/nightly", body)
        assert (a.status, a.json()) == (422, {"error": message}), body
    jobctl("add", "plain", "--manual", "--", "true")
    a = server.request("PATCH", "/v1/jobs/plain", {"watch": True})
    assert (a.status, a.json()) == (
        422,
        {"error": "watch is set when a job is created, not changed"},
    )
    assert [j["name"] for j in jobctl.json("list")] == ["nightly", "nightly-copy", "plain"]
    assert jobctl.json("show", "nightly") == {
        **shown,
        "runs": jobctl.json("show", "nightly")["runs"],
    }
    # what a watched job may change still changes
    del shown["paused"]  # changed by …/pause
    a = server.request("PATCH", "/v1/jobs/nightly", {**shown, "grace": 60})
    assert a.status == 200, a.text
    assert a.json()["grace"] == 60 and a.json()["watch"] is True


# ---------------------------------------------------------------------- serve and curl


def _curl(*args: str) -> subprocess.CompletedProcess[str]:
    assert CURL is not None
    return subprocess.run([CURL, *args], capture_output=True, text=True, timeout=60)


def _hc(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """The line Healthchecks documents: ``curl -fsS -m 10 --retry 5 -o /dev/null URL``."""
    return _curl("-fsS", "-m", "10", "--retry", "5", "-o", "/dev/null", *extra, url)


@needs_curl
def test_curl_as_healthchecks_documents_it_on_every_route(jobctl, server) -> None:
    jobctl("add", "etl", "--watch", "--every", "1h")
    base = f"{server.url}/ping/{_key(jobctl, 'etl')}"

    # start (GET), then success (GET): one run, leased then succeeded, with a duration
    assert _hc(f"{base}/start").returncode == 0
    [run] = _runs(jobctl, "etl")
    assert (run["state"], run["reason"]) == ("leased", "watch")
    assert _inspect(jobctl, run["id"])["attempts"][0]["host"] == "127.0.0.1"
    assert _hc(base).returncode == 0
    run = _inspect(jobctl, run["id"])
    assert run["state"] == "succeeded" and run["attempts"][0]["duration"] >= 0

    # start by HEAD, a log line by POST, then exit code 7 by POST with its output
    assert _hc(f"{base}/start", "-I").returncode == 0
    assert _hc(f"{base}/log", "--data-raw", "step 1 of 2\n").returncode == 0
    assert _hc(f"{base}/7", "--data-raw", "disk full\n").returncode == 0
    newest = _runs(jobctl, "etl")[0]
    assert (newest["state"], newest["exit_code"], newest["last_error"]) == ("dead", 7, "exit 7")
    assert jobctl("logs", str(newest["id"])).stdout == "step 1 of 2\ndisk full\n"

    # /fail, and /0 (a success), each without a start: a run of its own each
    assert _hc(f"{base}/fail", "-X", "POST").returncode == 0
    assert _runs(jobctl, "etl")[0]["last_error"] == "fail ping"
    assert _hc(f"{base}/0", "-I").returncode == 0
    assert _runs(jobctl, "etl")[0]["state"] == "succeeded"

    # rid ties each end to its start when two runs overlap
    assert _hc(f"{base}/start?rid=a").returncode == 0
    assert _hc(f"{base}/start?rid=b").returncode == 0
    assert _hc(f"{base}/fail?rid=a").returncode == 0
    by_key = {r["run_key"]: r for r in _runs(jobctl, "etl") if r["run_key"]}
    assert (by_key["a"]["state"], by_key["b"]["state"]) == ("dead", "leased")
    assert _hc(f"{base}?rid=b").returncode == 0
    assert {r["state"] for r in _runs(jobctl, "etl")} == {"succeeded", "dead"}

    # no token is needed, but the key is: an unknown one is a 404 (curl -f exits 22)
    unknown = _curl("-sS", "-m", "10", f"{server.url}/ping/no-such-key")
    assert unknown.stdout == "not found"
    assert _hc(f"{server.url}/ping/no-such-key").returncode == 22
    assert _hc(f"{base}/256").returncode == 22
    ok = _curl("-sS", "-m", "10", "-D", "-", base)
    assert ok.stdout.startswith("HTTP/1.1 200") and ok.stdout.endswith("\n\nOK")
    assert "text/plain" in ok.stdout
    # and the rest of the API still wants its token
    assert _curl("-s", "-o", "/dev/null", "-w", "%{http_code}", f"{server.url}/v1/jobs").stdout == (
        "401"
    )


# ---------------------------------------------------------------------- jobctl ping


def test_jobctl_ping_writes_start_and_exit_with_stdin_as_output(jobctl, db) -> None:
    jobctl("add", "report", "--watch", "--every", "1h")
    argv = _jobctl_argv(db)
    subprocess.run([*argv, "ping", "report", "--start"], check=True, stdin=subprocess.DEVNULL)
    [run] = _runs(jobctl, "report")
    assert run["state"] == "leased" and run["attempt"] == 1
    subprocess.run(
        [*argv, "ping", "report", "--exit", "3"], check=True, input=b"no rows\n", timeout=60
    )
    got = _inspect(jobctl, run["id"])
    assert (got["state"], got["exit_code"], got["last_error"]) == ("dead", 3, "exit 3")
    [attempt] = got["attempts"]
    assert attempt["host"] == "ping" and attempt["duration"] > 0
    assert jobctl("logs", str(run["id"])).stdout == "no rows\n"
    r = jobctl("ping", "report", "--exit", "300", ok=False)
    assert r.exit_code == 2
    # one kind of ping a call: two are invalid input, and nothing is recorded
    for two in (["--start", "--fail"], ["--log", "--exit", "0"], ["--fail", "--exit", "4"]):
        r = jobctl("ping", "report", *two, ok=False)
        assert r.exit_code == 2 and r.output.startswith("Error: give at most one of"), r.output
    assert [r["id"] for r in _runs(jobctl, "report")] == [run["id"]]
    r = jobctl("ping", "nope", ok=False)
    assert r.exit_code == 1 and "no job named 'nope'" in r.output
    jobctl("add", "plain", "--every", "1h", "--", "true")
    r = jobctl("ping", "plain", ok=False)
    assert r.exit_code == 1 and "not watched" in r.output


# ---------------------------------------------------------------------- exec


def test_exec_refuses_no_command_and_ends_126_or_127_for_one_it_cannot_start(
    jobctl, db, tmp_path
) -> None:
    # exec exits with its command's code, so tests/reliability/test_hostile_input.py
    # leaves it out; its own bad input and a command that cannot start are here
    jobctl("add", "sync", "--watch", "--every", "1h")
    argv = _jobctl_argv(db)
    for args, code in (
        (["sync"], 2),
        (["sync", "--"], 2),
        (["sync", "--", str(tmp_path / "missing")], 127),
        (["sync", "--", str(tmp_path)], 126),  # a directory: not executable
        (["", ""], 126),  # an unknown job warns; the command still runs (and cannot)
    ):
        r = subprocess.run([*argv, "exec", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == code, (args, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        if code == 2:
            assert r.stderr.startswith("Error: "), r.stderr
    assert all(run["state"] == "dead" for run in _runs(jobctl, "sync"))
    assert len(_runs(jobctl, "sync")) == 2


def test_exec_wraps_a_failing_and_a_succeeding_command(jobctl, db) -> None:
    jobctl("add", "sync", "--watch", "--every", "1h")
    argv = _jobctl_argv(db)
    failing = subprocess.run(
        [
            *argv,
            "exec",
            "sync",
            "--",
            "sh",
            "-c",
            "echo copied 3; echo lost 1 >&2; sleep 0.3; exit 4",
        ],
        capture_output=True,
        timeout=60,
    )
    assert failing.returncode == 4
    assert failing.stdout == b"copied 3\n" and failing.stderr == b"lost 1\n"
    [run] = _runs(jobctl, "sync")
    got = _inspect(jobctl, run["id"])
    assert (got["state"], got["exit_code"]) == ("dead", 4)
    assert got["attempts"][0]["duration"] >= 0.3
    assert jobctl("logs", str(run["id"])).stdout == "copied 3\nlost 1\n"

    ok = subprocess.run([*argv, "exec", "sync", "--", "echo", "all good"], capture_output=True)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, b"all good\n", b"")
    newest = _runs(jobctl, "sync")[0]
    assert newest["id"] != run["id"] and newest["state"] == "succeeded"
    assert jobctl("logs", str(newest["id"])).stdout == "all good\n"

    # a ping that cannot be made warns and never changes the exit code
    lost = subprocess.run([*argv, "exec", "nope", "--", "sh", "-c", "exit 5"], capture_output=True)
    assert lost.returncode == 5
    assert b"warning: jobctl exec: start ping not recorded: no job named 'nope'" in lost.stderr
    far = subprocess.run(
        [*argv, "exec", "x", "--url", "http://127.0.0.1:9", "--", "true"], capture_output=True
    )
    assert far.returncode == 0 and far.stderr.count(b"warning: jobctl exec:") == 2


def test_exec_gives_every_word_after_name_to_the_command(jobctl, db, server) -> None:
    # `exec NAME echo -h` printed exec's help and ran nothing (exit 0): a crontab line
    # silently not run. Every word after NAME is COMMAND's, but --url right after NAME.
    jobctl("add", "sync", "--watch", "--every", "1h")
    argv = _jobctl_argv(db)

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*argv, "exec", *args], capture_output=True, timeout=60)

    for args, out in (
        (["sync", "echo", "-h"], b"-h\n"),
        (["sync", "printf", "%s\\n", "--help"], b"--help\n"),
        (["sync", "sh", "-c", 'echo "$@"', "sh", "--url", "u"], b"--url u\n"),
        (["sync", "--", "echo", "--url", "u"], b"--url u\n"),
    ):
        r = run(*args)
        assert (r.returncode, r.stdout, r.stderr) == (0, out, b""), args
    assert [x["state"] for x in _runs(jobctl, "sync")] == ["succeeded"] * 4
    # --url after NAME (as the README writes it), with = too, or before NAME
    for args in (
        ["sync", "--url", server.url, "--", "true"],
        ["sync", f"--url={server.url}", "true"],
        ["--url", server.url, "sync", "true"],
    ):
        r = run(*args)
        assert (r.returncode, r.stderr) == (0, b""), (args, r.stderr)
        newest = _runs(jobctl, "sync")[0]
        assert _inspect(jobctl, newest["id"])["attempts"][0]["host"] == "127.0.0.1", args
    assert len(_runs(jobctl, "sync")) == 7
    # ping takes at most one of its flags, and says so
    r = jobctl("ping", "sync", "--start", "--fail", ok=False)
    assert r.exit_code == 2
    assert r.stderr == (
        "Error: give at most one of --start, --fail, --log and --exit (got --start, --fail)\n"
    )


def test_exec_with_url_pings_serve_by_key(jobctl, db, server, tmp_path) -> None:
    jobctl("add", "remote", "--watch", "--every", "1h")
    key = _key(jobctl, "remote")
    # another host: no database here, only the address of serve and the key
    r = subprocess.run(
        [*_jobctl_argv(tmp_path / "absent.db"), "exec", key, "--", "sh", "-c", "echo x; exit 9"],
        capture_output=True,
        env={"JOBCTL_PING_URL": server.url, "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert (r.returncode, r.stdout, r.stderr) == (9, b"x\n", b"")
    [run] = _runs(jobctl, "remote")
    assert (run["state"], run["exit_code"]) == ("dead", 9)
    assert jobctl("logs", str(run["id"])).stdout == "x\n"
    assert not (tmp_path / "absent.db").exists()
    # a host that reaches the database may name the job, as the line without --url does
    r = subprocess.run(
        [*_jobctl_argv(db), "exec", "remote", "--url", server.url, "--", "sh", "-c", "exit 0"],
        capture_output=True,
        timeout=60,
    )
    assert (r.returncode, r.stderr) == (0, b""), r.stderr
    newest = _runs(jobctl, "remote")[0]
    assert (newest["state"], _inspect(jobctl, newest["id"])["attempts"][0]["host"]) == (
        "succeeded",
        "127.0.0.1",
    )


# ---------------------------------------------------------------------- the daemon


def test_a_daemon_turns_a_silent_window_late_then_dead_and_a_late_success_recovers(
    jobctl, start_daemon
) -> None:
    with http_receiver() as rec:
        jobctl("notify", "add", "ops", "--webhook", rec.url)
        jobctl(
            "add",
            "silent",
            "--watch",
            "--every",
            "3s",
            "--grace",
            "1s",
            "--timeout",
            "1s",
            "--notify",
            "ops:late,dead,recovered",
        )
        start_daemon()

        def told(event: str) -> list[dict[str, Any]]:
            return [b for b in rec.bodies() if b["event"] == event]

        def late_then_dead() -> int | None:
            late = {b["run"]["id"] for b in told("late")}
            dead = {b["run"]["id"] for b in told("dead")}
            both = sorted(late & dead)
            return both[0] if both else None

        run_id = wait_until(late_then_dead, 30, what="late then dead for one window")
        jobctl("pause", "silent")
        dead = _inspect(jobctl, run_id)
        assert (dead["state"], dead["last_error"], dead["reason"]) == ("dead", "no ping", "watch")
        # never claimed: a claim would have made an attempt
        assert dead["attempts"] == [] and dead["attempt"] == 0
        [late] = [b for b in told("late") if b["run"]["id"] == run_id]
        [gone] = [b for b in told("dead") if b["run"]["id"] == run_id]
        assert late["job"]["name"] == gone["job"]["name"] == "silent"
        assert "no ping" in gone["text"]
        # no window of the watched job was ever run by the daemon
        assert all(r["attempt"] == 0 for r in _runs(jobctl, "silent") if r["state"] != "dead")

        # the work was only late: its success ping ends the newest dead window succeeded
        for r in _runs(jobctl, "silent"):
            if r["state"] == "pending":
                jobctl("cancel", str(r["id"]))
        newest_dead = next(r for r in _runs(jobctl, "silent") if r["state"] == "dead")
        jobctl("ping", "silent")
        assert _inspect(jobctl, newest_dead["id"])["state"] == "succeeded"
        wait_until(
            lambda: any(b["run"]["id"] == newest_dead["id"] for b in told("recovered")),
            20,
            what="recovered",
        )


# ---------------------------------------------------------------------- import-crontab


CRONTAB = r"""# m h  dom mon dow   command
SHELL=/bin/bash
MAILTO=""
PATH=/usr/local/bin:/usr/bin:/bin
CRON_TZ=Europe/Berlin

*/5 * * * * /usr/local/bin/sync-feeds --quiet >> /var/log/feeds.log 2>&1
30 2 * * *	pg_dump -Fc app > /backups/app-$(date +\%F).dump && echo "it's done"
@daily      find /tmp/uploads -mtime +7 -delete # clean old uploads
0 9 * * 1-5 mail -s "standup" team@example.com%Standup in 5 minutes%-- bot
"""


def test_import_crontab_watch_prints_a_crontab_that_parses_back_wrapped(
    jobctl, db, tmp_path
) -> None:
    src = tmp_path / "crontab"
    src.write_text(CRONTAB)
    r = jobctl("import-crontab", "--watch", str(src))
    printed = r.stdout
    jobs = {j["name"]: j for j in jobctl.json("list")}
    assert sorted(jobs) == ["cron-1", "cron-2", "cron-3", "cron-4"]
    assert all(j["watch"] and j["ping_key"] for j in jobs.values())
    assert jobs["cron-2"]["trigger"]["expr"] == "30 2 * * *"
    assert jobs["cron-2"]["trigger"]["tz"] == "Europe/Berlin"

    before = parse_crontab(CRONTAB, validate_cron=lambda _: None)
    after = parse_crontab(printed, validate_cron=lambda _: None)
    assert not after.errors
    assert after.env == before.env
    assert len(after.jobs) == len(before.jobs) == 4
    for old, new in zip(before.jobs, after.jobs, strict=True):
        assert (new.line, new.cron, new.tz, new.stdin) == (old.line, old.cron, old.tz, old.stdin)
        words = shlex.split(new.command)
        assert words[1:5] == ["--db", str(db), "exec", old.name]
        assert Path(words[0]).name == "jobctl"
        assert words[5:] == ["--", "/bin/bash", "-c", old.command]

    # the wrapped line runs the command as cron would, and its runs are watched
    line = after.jobs[1]
    done = subprocess.run(
        ["/bin/sh", "-c", line.command],
        capture_output=True,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode != 0  # no pg_dump here: the shell says so, and the run is dead
    [run] = _runs(jobctl, "cron-2")
    assert run["state"] == "dead" and run["exit_code"] == done.returncode

    # a second import of the same file changes nothing, keys included
    again = jobctl("import-crontab", "--watch", "--json", str(src))
    data = __import__("json").loads(again.stdout)
    assert {a["action"] for a in data["actions"]} == {"unchanged"}
    assert data["crontab"] == printed
    assert {j["name"]: j["ping_key"] for j in jobctl.json("list")} == {
        n: j["ping_key"] for n, j in jobs.items()
    }


def test_import_crontab_watch_refuses_reboot_lines_and_imports_nothing(jobctl, tmp_path) -> None:
    src = tmp_path / "crontab"
    src.write_text("@reboot /usr/local/bin/warm-cache\n0 * * * * true\n")
    r = jobctl("import-crontab", "--watch", str(src), ok=False)
    assert r.exit_code == 2 and "@reboot line cannot be watched" in r.output
    assert jobctl.json("list") == []


# ---------------------------------------------------------------------- the dashboard


@needs_chromium
@needs_curl
def test_the_dashboard_shows_a_watched_job_and_the_curl_line_that_pings_it(
    jobctl: MainCli, server: Server, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    jobctl("add", "etl", "--watch", "--cron", "0 3 * * *")
    jobctl("add", "greet", "--every", "1h", "--", "echo hi")
    key = _key(jobctl, "etl")
    browser.get(server.url + "/")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "sign-in").click()
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "tr.job"), 15, what="jobs page")
    assert text_of(browser, 'tr.job[data-job="etl"] .watched') == "watched"
    assert browser.find_elements(By.CSS_SELECTOR, 'tr.job[data-job="greet"] .watched') == []
    # a watched job is pinged, never run from here
    buttons = browser.find_elements(By.CSS_SELECTOR, 'tr.job[data-job="etl"] button')
    assert "run now" not in [b.text for b in buttons]
    browser.get(server.url + "/jobs/etl")
    line = wait_until(lambda: text_of(browser, "#ping-curl"), 15, what="the curl line")
    assert line == f"curl -fsS -m 10 --retry 5 -o /dev/null {server.url}/ping/{key}"
    assert "jobctl exec etl -- COMMAND" in text_of(browser, "#ping")
    # the settings of starting a command are not shown: a watched job starts none
    shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "dl.fields dt")]
    assert "grace" in shown and "retries" not in shown and "limits" not in shown
    # the line as the page gives it pings the job
    argv = shlex.split(line)
    assert subprocess.run([CURL or "curl", *argv[1:]], timeout=60).returncode == 0
    assert [r["state"] for r in _runs(jobctl, "etl")] == ["succeeded"]


def test_a_daemon_records_watched_windows_it_never_claims_and_check_is_not_late(
    jobctl, start_daemon
) -> None:
    jobctl("add", "ci", "--watch", "--every", "1s", "--grace", "1h")
    jobctl("add", "other", "--every", "1h", "--", "true")
    start_daemon()

    def recorded() -> list[dict[str, Any]]:
        # windows that passed before the daemon took the lease were not watched: skipped
        return [r for r in _runs(jobctl, "ci") if r["state"] != "skipped"]

    wait_until(lambda: len(recorded()) >= 3, 20, what="three windows recorded")
    runs = recorded()
    # recorded by the scheduler-lease holder, and never claimed: no attempt, no lease
    assert {(r["state"], r["reason"], r["attempt"]) for r in runs} == {("pending", "watch", 0)}
    assert {r["skip_reason"] for r in _runs(jobctl, "ci") if r["state"] == "skipped"} <= {"missed"}
    got = _inspect(jobctl, runs[-1]["id"])
    assert got["attempts"] == [] and got["waiting"]["reason"] == "ping"
    # check: a watched run waits for its pings, not for a daemon
    ok = jobctl("check", "--late", "1s", ok=False)
    assert ok.exit_code == 0, ok.output
    # it is pinged, never run, and its settings are those of a watched job
    r = jobctl("run", "ci", ok=False)
    assert r.exit_code == 1 and "watched" in r.output
    r = jobctl("edit", "ci", "--retries", "2", ok=False)
    assert r.exit_code == 2 and "not with --watch" in r.output
    jobctl("edit", "ci", "--grace", "2h")
    assert jobctl.json("show", "ci")["grace"] == 7200
    # a start ping takes the newest recorded window's run
    jobctl("ping", "ci", "--start")
    leased = [r for r in _runs(jobctl, "ci") if r["state"] == "leased"]
    assert (
        len(leased) == 1 and leased[0]["scheduled_for"] <= _runs(jobctl, "ci")[0]["scheduled_for"]
    )


def test_pinged_runs_are_judged_for_anomaly_as_any_job(jobctl) -> None:
    jobctl("notify", "add", "ops", "--webhook", "http://127.0.0.1:9/hook")
    jobctl("add", "quick", "--watch", "--every", "1h", "--notify", "ops:anomaly")
    for _ in range(5):  # five runs of a few milliseconds
        jobctl("ping", "quick", "--start")
        jobctl("ping", "quick")
    assert jobctl.json("notifications") == []
    jobctl("ping", "quick", "--start")
    time.sleep(1.3)  # a run over 1 s away from a median of milliseconds: slow
    jobctl("ping", "quick")
    [note] = jobctl.json("notifications")
    slow = _runs(jobctl, "quick")[0]
    assert (note["event"], note["run_id"], note["job"]) == ("anomaly", slow["id"], "quick")
    assert slow["state"] == "succeeded" and slow["duration"] >= 1.3


# ---------------------------------------------------------------------- jobs as code


@pytest.fixture
def other_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A second, empty database of the suite's backend."""
    if BACKEND == "postgresql":
        dbs = request.getfixturevalue("pg_databases")
        url = dbs.new()
        yield url
        dbs.drop(url)
    else:
        yield tmp_path / "other.db"


def _without_ping_keys(text: str) -> str:
    return "".join(line for line in text.splitlines(True) if not line.startswith("ping_key ="))


def test_export_then_apply_keeps_watched_jobs_and_their_ping_keys(jobctl, other_db, capsys) -> None:
    jobctl("add", "nightly", "--watch", "--cron", "0 3 * * *", "--timeout", "1h")
    jobctl("add", "ci", "--watch", "--every", "1h", "--grace", "10m", "--paused")
    keys = {n: _key(jobctl, n) for n in ("nightly", "ci")}
    text = jobctl("export").stdout
    # a watched job's table: watch, its key, its schedule and policies; no command and
    # none of a watched job's own defaults (retries 0, grace 5m)
    assert "watch = true" in text and f'ping_key = "{keys["nightly"]}"' in text
    assert "command" not in text and "retries" not in text and 'grace = "5m"' not in text
    assert 'grace = "10m"' in text and 'timeout = "1h"' in text and "paused = true" in text
    revisions = {j["name"]: j["revision"] for j in jobctl.json("list")}

    # onto the same database: nothing changes, nothing is printed
    assert jobctl("apply", "-", stdin=text).stdout == ""
    # nor without the keys: a watched job of the file keeps the key its pingers use
    assert jobctl("apply", "-", stdin=_without_ping_keys(text)).stdout == ""
    assert {j["name"]: j["revision"] for j in jobctl.json("list")} == revisions
    assert {n: _key(jobctl, n) for n in keys} == keys

    # onto an empty database: the same watched jobs, the same keys (so the same URLs)
    other = MainCli(other_db, capsys)
    try:
        assert other("apply", "-", stdin=text).stdout.split() == ["+", "ci", "+", "nightly"]
        assert other("export").stdout == text
        for name in keys:
            job, copy = jobctl.json("show", name), other.json("show", name)
            for field in ("watch", "ping_key", "command", "grace", "timeout", "retries"):
                assert copy[field] == job[field], field
            assert copy["trigger"]["expr"] == job["trigger"]["expr"]
            assert copy["state"] == job["state"]
        # its pings land there
        other("ping", "nightly")
        assert [r["state"] for r in _runs(other, "nightly")] == ["succeeded"]
        # a new watched job written without a key gets one of its own
        other("apply", "-", stdin='[jobs.new]\nevery = "30m"\nwatch = true\n')
        new = other.json("show", "new")
        assert new["watch"] and new["ping_key"] not in keys.values() and new["grace"] == 300
    finally:
        other.close()


def test_apply_refuses_a_watched_table_with_start_keys_or_a_taken_ping_key(jobctl) -> None:
    jobctl("add", "nightly", "--watch", "--cron", "0 3 * * *")
    _key(jobctl, "nightly")
    bad = (
        '[jobs.a]\nevery = "1h"\nwatch = true\nretries = 2\nenv = { A = "1" }\n'
        'command = "true"\n'
        '[jobs.b]\nevery = "1h"\nping_key = "abc"\ncommand = "true"\n'
        "[jobs.c]\nmanual = true\nwatch = true\n"
        '[jobs.d]\nevery = "1h"\nwatch = true\nping_key = "not a key"\n'
    )
    r = jobctl("apply", "-", stdin=bad, ok=False)
    assert r.exit_code == 2, r.output
    for said in (
        "line 4: job a: retries: it is about starting a command: not with watch = true",
        "line 5: job a: env: it is about starting a command",
        "line 6: job a: command: a watched job has no command",
        "line 9: job b: ping_key: goes with watch = true",
        "line 12: job c: manual: a watched job takes cron or every",
        "line 17: job d: ping_key: invalid ping_key",
    ):
        assert said in r.output, (said, r.output)
    # another job's key would make one URL ping two jobs
    copy = jobctl("export", "nightly").stdout.replace("[jobs.nightly]", "[jobs.copy]")
    r = jobctl("apply", "-", stdin=copy, ok=False)
    assert r.exit_code == 2 and "job copy: ping_key: it is the key of job nightly" in r.output
    assert [j["name"] for j in jobctl.json("list")] == ["nightly"]


def test_a_watched_job_rolls_back_and_states_its_defaults_in_a_file(jobctl) -> None:
    jobctl("add", "ci", "--watch", "--every", "1h")
    key = _key(jobctl, "ci")
    jobctl("edit", "ci", "--grace", "10m")
    # a revision keeps every value, those of starting a command at a watched job's own
    jobctl("rollback", "ci", "1")
    job = jobctl.json("show", "ci")
    assert (job["watch"], job["ping_key"], job["grace"], job["retries"]) == (True, key, 300, 0)
    # a file may say them too; any other value is a setting a watched job has not
    text = jobctl("export", "ci").stdout + 'retries = 0\nshell = "/bin/sh"\n'
    assert jobctl("apply", "-", stdin=text).stdout == ""
    r = jobctl("apply", "-", stdin=text.replace("retries = 0", "retries = 1"), ok=False)
    assert r.exit_code == 2 and "job ci: retries: it is about starting a command" in r.output


def test_a_watched_job_rolls_back_to_a_revision_from_before_the_file_said_watch(jobctl) -> None:
    # revisions written before the job file had watch and ping_key kept a watched job as
    # command = "" (and retries 0); rollback to one refused it as an empty command
    import json

    jobctl("add", "ci", "--watch", "--every", "1h", "--grace", "10m")
    key = _key(jobctl, "ci")
    jobctl("edit", "ci", "--grace", "20m", "--description", "later")
    store = jobctl.store()
    job_id = store.get_job("ci").id
    with store.write() as c:
        rows = c.execute(
            "SELECT revision, definition FROM job_revisions WHERE job_id = ?", (job_id,)
        ).fetchall()
        for revision, text in rows:
            table = json.loads(text)
            assert table.pop("watch") is True and table.pop("ping_key") == key
            table["command"] = ""
            c.execute(
                "UPDATE job_revisions SET definition = ? WHERE job_id = ? AND revision = ?",
                (json.dumps(table), job_id, revision),
            )
    jobctl("rollback", "ci", "1")
    job = jobctl.json("show", "ci")
    assert (job["watch"], job["ping_key"], job["command"]) == (True, key, None)
    assert (job["grace"], job["description"], job["retries"]) == (600, None, 0)
    assert jobctl.json("history", "ci")[-1]["changes"] == {
        "description": ["later", None],
        "grace": ["20m", "10m"],
    }
    jobctl("rollback", "ci", "2")
    job = jobctl.json("show", "ci")
    assert (job["watch"], job["ping_key"], job["grace"]) == (True, key, 1200)
    # its pings still reach it
    jobctl("ping", "ci")
    assert [r["state"] for r in jobctl.json("runs", "ci")] == ["succeeded"]


def test_rollback_to_a_ping_key_another_job_holds_now_is_refused(jobctl) -> None:
    # ci was watched at /ping/KEY, then made a job that runs here; another watched job
    # took that key: going back to revision 1 would give one key to two jobs
    jobctl("add", "ci", "--watch", "--every", "1h")
    key = _key(jobctl, "ci")
    jobctl("add", "ci", "--replace", "--every", "1h", "--", "true")
    jobctl("apply", "-", stdin=f'[jobs.other]\nevery = "1h"\nwatch = true\nping_key = "{key}"\n')
    before = jobctl.json("show", "ci")["revision"]
    r = jobctl("rollback", "ci", "1", ok=False)
    assert r.exit_code == 1
    assert r.stderr == (
        f"Error: revision 1 of job ci pings at /ping/{key}, which is job other's now: "
        "nothing was changed\n"
    )
    assert jobctl.json("show", "ci")["revision"] == before
    assert _key(jobctl, "other") == key
    # once the other job lets the key go, the rollback makes ci watched at it again
    jobctl("rm", "other")
    jobctl("rollback", "ci", "1")
    assert _key(jobctl, "ci") == key


# ---------------------------------------------------------------------- retry-dead


def test_retry_dead_refuses_a_watched_run_its_pings_end(jobctl, server) -> None:
    jobctl("add", "etl", "--watch", "--every", "1h", "--grace", "1m", "--timeout", "1m")
    jobctl("ping", "etl", "--start")
    [run] = _runs(jobctl, "etl")
    # its end ping never came: the scheduler-lease holder ends it dead
    jobctl.store().settle_watched(datetime.now(UTC) + timedelta(hours=1))
    assert (_inspect(jobctl, run["id"])["state"], _inspect(jobctl, run["id"])["last_error"]) == (
        "dead",
        "no ping",
    )
    # back to pending, its window's limit long passed, it would only end dead again
    r = jobctl("retry-dead", str(run["id"]), ok=False)
    assert r.exit_code == 1 and f"Error: run {run['id']} is watched" in r.output, r.output
    r = jobctl("retry-dead", "etl", ok=False)
    assert r.exit_code == 1 and "Error: job 'etl' is watched" in r.output, r.output
    assert jobctl("retry-dead", "--all").stdout == "0 dead runs back to pending\n"
    r = server.request("POST", f"/v1/runs/{run['id']}/retry")
    assert r.status == 409 and "is watched" in r.json()["error"]
    assert _inspect(jobctl, run["id"])["state"] == "dead"
    # what ends it is its success ping, late
    jobctl("ping", "etl")
    assert _inspect(jobctl, run["id"])["state"] == "succeeded"


# ---------------------------------------------------------------------- pings written together


def test_pings_written_together_keep_each_pings_meaning(jobctl, db) -> None:
    """What ``serve`` does under load: many pings of many jobs in one transaction (their
    jobs read together, more keys than one read takes), each as if written alone: a first
    start takes its window, a second start in the same window makes a run of its own, each
    end ends the newest started run, and an unknown key fails only its own ping."""
    from jobctl.errors import NotFound
    from jobctl.store import open_store
    from jobctl.store.watch import KEYS_AT_ONCE
    from jobctl.watching import Ping, PingKind

    names = [f"w{i}" for i in range(KEYS_AT_ONCE + 8)]
    for name in names:
        jobctl("add", name, "--watch", "--every", "1h", "--start", "2026-01-01T00:00:00Z")
    keys = {name: _key(jobctl, name) for name in names}
    start, success = Ping(PingKind.START), Ping(PingKind.SUCCESS)
    # past the next top of the hour: the latest window is after every job was added
    now = datetime.now(UTC).replace(minute=30, second=0, microsecond=0) + timedelta(hours=1)
    window = now.replace(minute=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    pings = [(start, keys[n], "h1") for n in names]
    pings += [(success, keys[n], "h1") for n in names[:4]]
    pings += [(start, "no-such-key", "h1")]
    pings += [(start, keys[n], "h2") for n in names[:2]]  # a second start: runs overlap
    pings += [(Ping(PingKind.EXIT, exit_code=3), keys[names[0]], "h2")]
    store = open_store(str(db))
    try:
        got = store.commands.ping_many(pings, now)
    finally:
        store.close()
    assert len(got) == len(pings)
    assert isinstance(got[len(names) + 4], NotFound)
    assert all(isinstance(x, int) for i, x in enumerate(got) if i != len(names) + 4)

    # w0: the window's run, succeeded; then a run of its own, ended by exit 3
    first, own = sorted(_runs(jobctl, "w0"), key=lambda r: r["id"])
    assert (first["scheduled_for"], first["state"]) == (window, "succeeded")
    assert own["scheduled_for"] != window
    assert (own["state"], own["exit_code"]) == ("dead", 3)
    assert [a["host"] for a in _inspect(jobctl, own["id"])["attempts"]] == ["h2"]
    # w1: the window's run succeeded, a run of its own leased on h2
    states = sorted((r["state"], r["scheduled_for"] == window) for r in _runs(jobctl, "w1"))
    assert states == [("leased", False), ("succeeded", True)]
    # the rest: the window's run, started once, leased with one attempt
    for name in names[4:]:
        [run] = _runs(jobctl, name)
        assert (run["state"], run["scheduled_for"]) == ("leased", window)
        assert [a["attempt"] for a in _inspect(jobctl, run["id"])["attempts"]] == [1]
