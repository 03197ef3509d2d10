"""`jobctl serve`: the dashboard's sign-in, session cookie, CSRF tokens and escaping, over
HTTP; and the web stack stays out of every other command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from conftest import Jobctl
from webhelpers import TOKEN, Server, token_file

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def server(db: Path, tmp_path: Path) -> Iterator[Server]:
    s = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path))
    try:
        yield s.wait_ready()
    finally:
        s.close()


def sign_in(server: Server) -> tuple[str, str]:
    """(Cookie header value, CSRF token) of a new session."""
    a = server.request(
        "POST", "/login", token=None, headers=FORM, raw=urlencode({"token": TOKEN}).encode()
    )
    assert a.status == 303 and a.headers["location"] == "/"
    (cookie,) = a.cookies
    cookie_value = cookie.split(";")[0]
    home = server.request("GET", "/", token=None, headers={"Cookie": cookie_value})
    m = re.search(r'name="csrf" value="([^"]+)"', home.text)
    assert m is not None
    return cookie_value, m.group(1)


def test_sign_in_sets_a_strict_httponly_cookie(server: Server) -> None:
    a = server.request("GET", "/", token=None)
    assert a.status == 200 and 'action="/login"' in a.text and 'type="password"' in a.text
    wrong = server.request(
        "POST", "/login", token=None, headers=FORM, raw=urlencode({"token": "nope"}).encode()
    )
    assert wrong.status == 401 and wrong.cookies == [] and "wrong token" in wrong.text
    assert wrong.headers["www-authenticate"] == 'Bearer realm="jobctl"'
    ok = server.request(
        "POST",
        "/login",
        token=None,
        headers=FORM,
        raw=urlencode({"token": TOKEN, "next": "/jobs/x"}).encode(),
    )
    assert ok.status == 303 and ok.headers["location"] == "/jobs/x"
    (cookie,) = ok.cookies
    attrs = {p.strip().split("=")[0].lower() for p in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path"} <= attrs
    assert "samesite=strict" in cookie.lower()
    assert TOKEN not in cookie  # the cookie is a session id, not the token
    # an open redirect is not followed
    away = server.request(
        "POST",
        "/login",
        token=None,
        headers=FORM,
        raw=urlencode({"token": TOKEN, "next": "//evil.example/"}).encode(),
    )
    assert away.headers["location"] == "/"


def test_pages_without_a_session_are_401_with_the_sign_in_form(
    server: Server, jobctl: Jobctl
) -> None:
    jobctl("add", "x", "--manual", "--", "true")
    run_id = jobctl.json("run", "x")["id"]
    for path in ("/jobs/x", f"/runs/{run_id}", f"/runs/{run_id}/events"):
        a = server.request("GET", path, token=None)
        assert a.status == 401 and 'action="/login"' in a.text, path
        # RFC 9110: every 401 names how to authenticate, a page's too
        assert a.headers["www-authenticate"] == 'Bearer realm="jobctl"', path
        assert "<td" not in a.text  # no data of the job
    for path in ("/jobs/x/run", "/jobs/x/pause", f"/runs/{run_id}/cancel"):
        a = server.request("POST", path, token=None, headers=FORM, raw=b"")
        assert a.status == 401 and "www-authenticate" in a.headers, path
    bad_cookie = {"Cookie": "jobctl_session=made-up"}
    assert server.request("GET", "/jobs/x", token=None, headers=bad_cookie).status == 401
    assert server.request("GET", "/v1/jobs", token=None, headers=bad_cookie).status == 401
    assert len(jobctl.json("runs", "x")) == 1  # nothing enqueued
    assert jobctl.json("show", "x")["state"] == "active"


def test_state_changes_need_the_csrf_token(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "x", "--every", "1h", "--", "true")
    cookie, csrf = sign_in(server)
    c = {"Cookie": cookie}
    # reading over the cookie works, pages and API alike
    assert server.request("GET", "/jobs/x", token=None, headers=c).status == 200
    assert server.request("GET", "/v1/jobs", token=None, headers=c).status == 200
    # a form without its token, or with another, is refused and changes nothing
    for fields in ({}, {"csrf": "forged"}, {"csrf": csrf[:-1]}):
        a = server.request(
            "POST",
            "/jobs/x/pause",
            token=None,
            headers={**c, **FORM},
            raw=urlencode(fields).encode(),
        )
        assert a.status == 403 and "CSRF" in a.text, fields
    assert jobctl.json("show", "x")["state"] == "active"
    body = {"name": "y", "trigger": {"kind": "manual"}, "command": "true"}
    assert server.request("POST", "/v1/jobs", body, token=None, headers=c).status == 403
    assert [j["name"] for j in jobctl.json("list")] == ["x"]
    # with it
    a = server.request(
        "POST",
        "/jobs/x/pause",
        token=None,
        headers={**c, **FORM},
        raw=urlencode({"csrf": csrf}).encode(),
    )
    assert a.status == 303 and a.headers["location"] == "/jobs/x"
    assert jobctl.json("show", "x")["state"] == "paused"
    a = server.request("POST", "/v1/jobs", body, token=None, headers={**c, "X-CSRF-Token": csrf})
    assert a.status == 201
    a = server.request(
        "POST",
        "/jobs/y/run",
        token=None,
        headers={**c, **FORM},
        raw=urlencode({"csrf": csrf}).encode(),
    )
    run_id = jobctl.json("runs", "y")[0]["id"]
    assert a.status == 303 and a.headers["location"] == f"/runs/{run_id}"
    # a bearer token is no ambient credential: it needs no CSRF token
    assert server.request("POST", "/jobs/x/resume", headers=FORM, raw=b"").status == 303
    assert jobctl.json("show", "x")["state"] == "active"
    # signing out ends the session
    out = server.request(
        "POST", "/logout", token=None, headers={**c, **FORM}, raw=urlencode({"csrf": csrf}).encode()
    )
    assert out.status == 303
    assert server.request("GET", "/jobs/x", token=None, headers=c).status == 401


def test_a_refused_button_shows_the_error(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "gone", "--manual", "--", "true")
    jobctl("cancel", "gone")
    a = server.request("POST", "/jobs/gone/run", headers=FORM, raw=b"")
    assert a.status == 409 and "is cancelled" in a.text
    assert server.request("GET", "/jobs/nope").status == 404
    assert server.request("GET", "/runs/999").status == 404


def test_what_jobs_hold_is_escaped(server: Server, jobctl: Jobctl) -> None:
    evil = "<script>alert(1)</script>"
    jobctl("add", "x", "--manual", "--description", evil, "--", f"echo '{evil}'")
    run_id = jobctl.json("run", "x")["id"]
    for path in ("/", "/jobs/x", f"/runs/{run_id}"):
        a = server.request("GET", path)
        assert a.status == 200
        assert evil not in a.text, path
    assert "&lt;script&gt;" in server.request("GET", "/jobs/x").text
    csp = server.request("GET", "/").headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    # the stylesheet and script come from the server itself
    for asset in ("/static/app.css", "/static/app.js"):
        assert server.request("GET", asset, token=None).status == 200
    page = server.request("GET", "/").text
    assert not re.search(r"(src|href)=\"(https?:)?//", page)


def test_run_events_stream_until_the_run_ends(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "x", "--manual", "--", "true")
    run_id = jobctl.json("run", "x")["id"]
    jobctl("cancel", str(run_id))
    a = server.request("GET", f"/runs/{run_id}/events")
    assert a.status == 200 and a.headers["content-type"].startswith("text/event-stream")
    events = [block for block in a.text.split("\n\n") if block.strip()]
    assert events[-1].startswith("event: end")
    first = json.loads(events[0].split("data: ", 1)[1])
    assert first["state"] == "cancelled" and first["final"] is True


# ---------------------------------------------------------------------- no web stack elsewhere

PROBE = """
import sys
from jobctl.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
web = sorted(m for m in sys.modules
             if m.split(".")[0] in ("starlette", "uvicorn", "jinja2", "anyio", "markupsafe",
                                    "h11") or m.startswith("jobctl.web"))
print("WEB:" + ",".join(web), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["add", "j", "--every", "5m", "--", "true"],
        ["list", "--json"],
        ["show", "j"],
        ["run", "j"],
        ["runs"],
        ["status", "--json"],
        ["next", "--cron", "0 3 * * *"],
        ["serve", "--help"],
    ],
)
def test_other_commands_do_not_import_the_web_stack(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "j.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    if args[0] != "add":
        subprocess.run(
            [sys.executable, "-m", "jobctl", "--db", str(db), "add", "j", "--manual", "--", "true"],
            check=True,
            capture_output=True,
            env=env,
            timeout=30,
        )
    full = ["--db", str(db), *args] if args != ["--version"] else args
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *full],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    line = proc.stderr.strip().splitlines()[-1]
    assert line == "WEB:", (args, proc.stderr)


def test_the_strip_shows_the_last_20_runs_oldest_first(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "many", "--manual", "--", "true")
    jobctl("add", "none", "--manual", "--", "true")
    ids = [jobctl.json("run", "many")["id"] for _ in range(25)]
    jobctl("cancel", str(ids[-1]))
    page = server.request("GET", "/").text
    row = page.split('data-job="many"', 1)[1].split("</tr>", 1)[0]
    cells = re.findall(r'class="cell s-(\w+)" href="/runs/(\d+)"', row)
    assert [int(i) for _, i in cells] == ids[-20:]
    assert cells[-1][0] == "cancelled" and {s for s, _ in cells[:-1]} == {"pending"}
    empty = page.split('data-job="none"', 1)[1].split("</tr>", 1)[0]
    assert 'class="cell' not in empty


def test_the_timeline_shows_the_jobs_that_ran_first(server: Server, jobctl: Jobctl) -> None:
    """80 jobs without an attempt and one with: the first page (50 rows) shows the one
    that ran, first, and the rest after it by name."""
    from datetime import UTC, datetime, timedelta

    from jobctl.models import JobSpec, Trigger, TriggerKind

    now = datetime.now(UTC)
    store = jobctl.store()
    for i in range(80):
        spec = JobSpec(f"idle-{i:02d}", Trigger(TriggerKind.MANUAL, "UTC"), "true")
        store.add_job(spec, now - timedelta(days=2))
    store.add_job(JobSpec("zz-ran", Trigger(TriggerKind.MANUAL, "UTC"), "true"), now)
    run, _ = store.enqueue_run("zz-ran", now - timedelta(hours=2))
    [claimed], _ = store.claim("d1", "h1", now - timedelta(hours=2), 3600, limit=1)
    store.finish(claimed.run, claimed.run.attempt, "d1", now - timedelta(hours=1), 0)
    sid, _ = sign_in(server)
    page = server.request("GET", "/timeline", token=None, headers={"Cookie": sid}).text
    rows = re.findall(r'<text class="row-label"[^>]*>([^<]+)</text>', page)
    assert len(rows) == 50
    assert rows[:3] == ["zz-ran", "idle-00", "idle-01"]
    assert f'data-run="{run.id}"' in page
    second = server.request("GET", "/timeline?page=2", token=None, headers={"Cookie": sid}).text
    rows2 = re.findall(r'<text class="row-label"[^>]*>([^<]+)</text>', second)
    assert rows2 == [f"idle-{i:02d}" for i in range(49, 80)]
