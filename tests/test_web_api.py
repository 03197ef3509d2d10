"""`jobctl serve`: the JSON API and /metrics over a real server process (README, The dashboard and the HTTP API)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Jobctl, wait_until
from webhelpers import TOKEN, Server, token_file

ROUTES = [
    ("GET", "/v1/jobs"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs/x"),
    ("PATCH", "/v1/jobs/x"),
    ("DELETE", "/v1/jobs/x"),
    ("POST", "/v1/jobs/x/pause"),
    ("POST", "/v1/jobs/x/resume"),
    ("POST", "/v1/jobs/x/runs"),
    ("POST", "/v1/jobs/x/backfill"),
    ("GET", "/v1/jobs/x/coverage"),
    ("GET", "/v1/runs"),
    ("GET", "/v1/runs/1"),
    ("GET", "/v1/runs/1/logs"),
    ("POST", "/v1/runs/1/cancel"),
    ("POST", "/v1/runs/1/retry"),
    ("GET", "/v1/status"),
    ("GET", "/metrics"),
]


@pytest.fixture
def server(db: Path, tmp_path: Path) -> Iterator[Server]:
    s = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path))
    try:
        yield s.wait_ready()
    finally:
        s.close()


def job_count(jobctl: Jobctl) -> int:
    return len(jobctl.json("list"))


def cli_error(jobctl: Jobctl, *args: str) -> str:
    """The one-line message the CLI gives for these arguments (exit 2)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    proc = subprocess.run(
        [sys.executable, "-m", "jobctl", "--db", str(jobctl.db), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("Error: "), line
    return line.removeprefix("Error: ")


# ---------------------------------------------------------------------- token rules


def test_healthz_needs_no_token(server: Server) -> None:
    a = server.request("GET", "/healthz", token=None)
    assert (a.status, a.json()) == (200, {"ok": True})


def test_every_route_needs_the_token(server: Server, jobctl: Jobctl) -> None:
    wrong = TOKEN[:-1] + ("x" if TOKEN[-1] != "x" else "y")  # same length, last char differs
    for method, path in ROUTES:
        for token in (None, wrong, "", TOKEN + "extra"):
            a = server.request(
                method, path, {"name": "x"} if method != "GET" else None, token=token
            )
            assert a.status == 401, (method, path, token, a.status)
            assert a.headers["www-authenticate"] == 'Bearer realm="jobctl"', (method, path)
            if path.startswith("/v1/"):
                assert a.json() == {"error": "missing or wrong token"}
        basic = server.request(method, path, token=None, headers={"Authorization": "Basic eDp5"})
        assert basic.status == 401
    assert job_count(jobctl) == 0  # nothing was written by the refused POST


def test_token_from_the_environment(db: Path, tmp_path: Path) -> None:
    s = Server(db, tmp_path / "serve.log", env={"JOBCTL_API_TOKEN": "from-env-123"})
    try:
        s.wait_ready()
        assert s.request("GET", "/v1/jobs", token="from-env-123").status == 200
        assert s.request("GET", "/v1/jobs", token=TOKEN).status == 401
    finally:
        s.close()


def test_a_token_is_generated_0600_and_kept(db: Path, tmp_path: Path) -> None:
    data = tmp_path / "xdg-data"
    env = {"XDG_DATA_HOME": str(data), "HOME": str(tmp_path)}
    path = data / "jobctl" / "api-token"
    s = Server(db, tmp_path / "serve1.log", env=env)
    try:
        s.wait_ready()
        assert f"created an API token in {path}" in s.log()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        token = path.read_text().strip()
        assert len(token) >= 32
        assert s.request("GET", "/v1/jobs", token=token).status == 200
    finally:
        s.close()
    s = Server(db, tmp_path / "serve2.log", env=env)
    try:
        s.wait_ready()
        assert f"the API token is in {path}" in s.log()
        assert path.read_text().strip() == token  # the same token on the next start
        assert s.request("GET", "/v1/jobs", token=token).status == 200
    finally:
        s.close()
    path.chmod(0o644)
    proc = _serve_once(db, env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: ") and "chmod 600" in proc.stderr


def test_a_short_token_or_a_token_file_others_read_is_warned_of(db: Path, tmp_path: Path) -> None:
    """``serve`` uses the token it is given, but says when it can be guessed (under 20
    characters) or read by other users (a --token-file open to them)."""
    weak = token_file(tmp_path, "abcde")
    weak.chmod(0o644)
    s = Server(db, tmp_path / "weak.log", token_file=weak)
    try:
        s.wait_ready()
        log = s.log()
        assert s.request("GET", "/v1/jobs", token="abcde").status == 200
    finally:
        s.close()
    warnings = [line for line in log.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        f"warning: the token in {weak} has 5 characters: one that short can be guessed; use "
        "at least 20 random ones (python3 -c 'import secrets; print(secrets.token_urlsafe(32))')",
        f"warning: token file {weak} may be read or changed by other users (mode 644): "
        "chmod 600 it",
    ]
    assert "abcde" not in log
    s = Server(db, tmp_path / "env.log", env={"JOBCTL_API_TOKEN": "short"})
    try:
        s.wait_ready()
        assert "warning: the token in JOBCTL_API_TOKEN has 5 characters" in s.log()
    finally:
        s.close()


def _serve_once(db: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "jobctl", "--db", str(db), "serve", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=30,
        check=False,
    )


@pytest.mark.long
def test_listen_address_rules(db: Path, tmp_path: Path) -> None:
    tf = token_file(tmp_path)
    for bad in ("nonsense", "127.0.0.1", "127.0.0.1:http", ":8642", "127.0.0.1:70000", "::1:80"):
        proc = _serve_once(db, {}, "--listen", bad, "--token-file", str(tf))
        assert proc.returncode == 2, (bad, proc.stderr)
        assert (
            proc.stderr == f"Error: invalid --listen {bad!r}: use HOST:PORT, e.g. 127.0.0.1:8642\n"
        )
    proc = _serve_once(db, {}, "--token-file", str(tmp_path / "missing"))
    assert (proc.returncode, proc.stderr) == (
        2,
        f"Error: no token file at {tmp_path / 'missing'}\n",
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve_once(db, {}, "--listen", f"127.0.0.1:{port}", "--token-file", str(tf))
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"Error: cannot listen on 127.0.0.1:{port}: ")
    # beyond loopback: it serves, with a warning
    s = Server(db, tmp_path / "wide.log", "--listen", "0.0.0.0:0", token_file=tf)
    try:
        s.wait_ready()
        assert "warning: listening on 0.0.0.0:" in s.log()
        assert "TLS" in s.log()
    finally:
        s.close()
    s = Server(db, tmp_path / "narrow.log", token_file=tf)
    try:
        s.wait_ready()
        assert "warning" not in s.log()
        assert s.stop() == 0  # SIGTERM: a clean exit
    finally:
        s.close()


def test_a_method_a_path_does_not_take_is_405_with_every_method_it_takes(
    server: Server, jobctl: Jobctl
) -> None:
    """RFC 9110: a 405 carries Allow, naming the methods of every route of the path (the
    API has a route a method: GET and POST /v1/jobs are two)."""
    jobctl("add", "x", "--manual", "--", "true")
    run_id = jobctl.json("run", "x")["id"]
    for method, path, allow in (
        ("PUT", "/v1/jobs", "GET, HEAD, POST"),
        ("DELETE", "/v1/jobs", "GET, HEAD, POST"),
        ("POST", "/v1/jobs/x", "DELETE, GET, HEAD, PATCH"),
        ("GET", "/v1/jobs/x/pause", "POST"),
        ("DELETE", f"/v1/runs/{run_id}", "GET, HEAD"),
        ("POST", "/healthz", "GET, HEAD"),
    ):
        a = server.request(method, path)
        assert a.status == 405, (method, path, a.status, a.text)
        assert a.headers.get("allow") == allow, (method, path, a.headers)
        assert a.json() == {"error": "method not allowed"}
    page = server.request("DELETE", "/jobs/x")
    assert page.status == 405 and "GET" in page.headers["allow"].split(", ")
    assert page.headers["content-type"].startswith("text/html")


def test_get_gives_the_revision_as_etag_and_patch_honours_if_match(
    server: Server, jobctl: Jobctl
) -> None:
    """A PATCH made from a GET's answer names the revision it read (If-Match): a change
    written meanwhile is not undone, it is 412 and nothing changes."""
    jobctl("add", "j", "--every", "1h", "--", "true")
    got = server.request("GET", "/v1/jobs/j")
    assert got.headers["etag"] == '"1"' and got.json()["revision"] == 1
    jobctl("edit", "j", "--retries", "9")  # someone else, meanwhile
    stale = server.request("PATCH", "/v1/jobs/j", {"retries": 2}, headers={"If-Match": '"1"'})
    assert stale.status == 412, stale.text
    assert stale.json() == {
        "error": "job 'j' is at revision 2, not 1: it changed since it was read; nothing was "
        "changed"
    }
    assert jobctl.json("show", "j")["retries"] == 9
    fresh = server.request("GET", "/v1/jobs/j").headers["etag"]
    assert fresh == '"2"'
    ok = server.request("PATCH", "/v1/jobs/j", {"retries": 2}, headers={"If-Match": fresh})
    assert ok.status == 200 and ok.json()["retries"] == 2
    assert ok.headers["etag"] == '"3"' and ok.json()["revision"] == 3
    # a list with the revision in it matches; * matches any; a weak tag never does
    listed = server.request("PATCH", "/v1/jobs/j", {"retries": 3}, headers={"If-Match": '"1", "3"'})
    assert listed.status == 200 and listed.headers["etag"] == '"4"'
    assert (
        server.request("PATCH", "/v1/jobs/j", {"retries": 4}, headers={"If-Match": "*"}).status
        == 200
    )
    weak = server.request("PATCH", "/v1/jobs/j", {"retries": 5}, headers={"If-Match": 'W/"5"'})
    assert weak.status == 412
    # without If-Match a PATCH applies as before
    assert server.request("PATCH", "/v1/jobs/j", {"retries": 6}).status == 200
    assert [h["revision"] for h in jobctl.json("history", "j")] == [1, 2, 3, 4, 5, 6]
    assert jobctl.json("show", "j")["retries"] == 6


def test_delete_of_a_job_others_follow_is_409(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "up", "--every", "1h", "--", "true")
    jobctl("add", "down", "--after", "up", "--", "true")
    a = server.request("DELETE", "/v1/jobs/up")
    assert a.status == 409
    assert a.json() == {
        "error": "job 'up' is followed by down (--after): delete it first, or give it another "
        "trigger"
    }
    assert server.request("DELETE", "/v1/jobs/down").status == 204
    assert server.request("DELETE", "/v1/jobs/up").status == 204


def test_no_cors(server: Server) -> None:
    origin = {"Origin": "http://evil.example"}
    a = server.request("GET", "/v1/jobs", headers=origin)
    assert a.status == 200
    assert not any(k.startswith("access-control-") for k in a.headers)
    pre = server.request(
        "OPTIONS",
        "/v1/jobs",
        token=None,
        headers={**origin, "Access-Control-Request-Method": "POST"},
    )
    assert pre.status in (401, 405)
    assert not any(k.startswith("access-control-") for k in pre.headers)


# ---------------------------------------------------------------------- jobs


def test_create_job_gives_the_cli_json(server: Server, jobctl: Jobctl) -> None:
    a = server.request(
        "POST",
        "/v1/jobs",
        {"name": "backup", "trigger": {"kind": "cron", "expr": "30 2 * * *"}, "command": "true"},
    )
    assert a.status == 201, a.text
    created = a.json()
    show = jobctl.json("show", "backup")
    assert server.request("GET", "/v1/jobs/backup").json() == show
    assert {k: v for k, v in show.items() if k != "runs"} == created
    assert server.request("GET", "/v1/jobs").json() == jobctl.json("list")
    # the same object as the CLI builds from the same flags
    jobctl("add", "twin", "--cron", "30 2 * * *", "--", "true")
    twin = jobctl.json("show", "twin")
    for k in ("id", "name", "created_at", "runs"):
        twin.pop(k)
        show.pop(k)
    assert twin == show


def test_create_job_with_every_field(server: Server, jobctl: Jobctl) -> None:
    body = {
        "name": "sync",
        "description": "a <b>nightly</b> sync",
        "trigger": {
            "kind": "interval",
            "expr": "90m",
            "tz": "Europe/Berlin",
            "start": "2030-01-01T00:00:00Z",
        },
        "command": ["rsync", "-a", "src dir", "dst"],
        "stdin": "input",
        "env": {"A": "1", "B": "two words"},
        "cwd": "/tmp",
        "shell": "/bin/bash",
        "paused": True,
        "catchup": "all",
        "catchup_limit": 3,
        "overlap": "allow",
        "timeout": 3600,
        "retries": 4,
        "backoff": "30s",
        "priority": 7,
        "jitter": 5.0,
        "on_failure": "echo failed",
        "locks": ["disk", "net"],
    }
    a = server.request("POST", "/v1/jobs", body)
    assert a.status == 201, a.text
    jobctl(
        "add", "twin", "--every", "90m", "--tz", "Europe/Berlin", "--start",
        "2030-01-01T00:00:00Z", "--stdin", "input", "--env", "A=1", "--env", "B=two words",
        "--cwd", "/tmp", "--shell", "/bin/bash", "--paused", "--catchup", "all",
        "--catchup-limit", "3", "--overlap", "allow", "--timeout", "1h", "--retries", "4",
        "--backoff", "30s", "--priority", "7", "--jitter", "5", "--on-failure", "echo failed",
        "--lock", "net", "--lock", "disk", "--description", "a <b>nightly</b> sync",
        "--", "rsync", "-a", "src dir", "dst",
    )  # fmt: skip
    api, cli = a.json(), jobctl.json("show", "twin")
    for k in ("id", "name", "created_at"):
        api.pop(k)
        cli.pop(k)
    cli.pop("runs")
    assert api == cli
    # a `show --json` object posted back (read-only fields and all) makes the same job
    again = jobctl.json("show", "sync")
    again["name"] = "sync-copy"
    b = server.request("POST", "/v1/jobs", again)
    assert b.status == 201, b.text
    assert b.json()["trigger"] == again["trigger"]
    assert b.json()["env"] == again["env"] and b.json()["locks"] == again["locks"]


def test_a_cron_jobs_show_json_posted_back_makes_the_same_job(
    server: Server, jobctl: Jobctl
) -> None:
    # a cron trigger's JSON carries its read-only resolved expression (each H drawn)
    jobctl("add", "spread", "--cron", "H 3 * * *", "--tz", "Europe/Berlin", "--", "true")
    shown = jobctl.json("show", "spread")
    assert shown["trigger"]["resolved"] != "H 3 * * *"
    a = server.request("POST", "/v1/jobs", {**shown, "name": "spread-copy"})
    assert a.status == 201, a.text
    copy = jobctl.json("show", "spread-copy")
    # the same expression and zone; H is drawn from the new name, as add draws it
    assert copy["trigger"]["expr"] == "H 3 * * *" and copy["trigger"]["tz"] == "Europe/Berlin"
    resolved = copy["trigger"]["resolved"]
    assert "H" not in resolved and resolved.endswith(" 3 * * *")
    # a PATCH of the object shown (but paused, changed by …/pause) is accepted too
    shown.pop("paused")
    b = server.request("PATCH", "/v1/jobs/spread", {**shown, "retries": 5})
    assert b.status == 200, b.text
    assert b.json()["retries"] == 5 and b.json()["trigger"] == shown["trigger"]


@pytest.mark.parametrize(
    ("body", "cli_args"),
    [
        (
            {"name": "j", "trigger": {"kind": "cron", "expr": "61 * * * *"}, "command": "x"},
            ["add", "j", "--cron", "61 * * * *", "--", "x"],
        ),
        (
            {"name": "j", "trigger": {"kind": "cron", "expr": "* * * * *", "tz": "Mars/Base"}},
            ["add", "j", "--cron", "* * * * *", "--tz", "Mars/Base", "--", "x"],
        ),
        (
            {"name": "j", "trigger": {"kind": "interval", "expr": "soon"}, "command": "x"},
            ["add", "j", "--every", "soon", "--", "x"],
        ),
        (
            {"name": "bad name!", "trigger": {"kind": "manual"}, "command": "x"},
            ["add", "bad name!", "--manual", "--", "x"],
        ),
        (
            {"name": "j", "trigger": {"kind": "manual"}, "command": "x", "catchup": "twice"},
            ["add", "j", "--manual", "--catchup", "twice", "--", "x"],
        ),
        (
            {"name": "j", "trigger": {"kind": "manual"}, "command": "x", "timeout": -5},
            ["add", "j", "--manual", "--timeout", "-5", "--", "x"],
        ),
        (
            {"name": "j", "trigger": {"kind": "manual"}, "command": "x", "env": {"1A": "v"}},
            ["add", "j", "--manual", "--env", "1A=v", "--", "x"],
        ),
        (
            {"name": "j", "trigger": {"kind": "once", "expr": "2001-01-01T00:00"}, "command": "x"},
            ["add", "j", "--at", "2001-01-01T00:00", "--", "x"],
        ),
        (
            {"name": "j", "trigger": {"kind": "manual", "after_completion": True}, "command": "x"},
            ["add", "j", "--manual", "--after-completion", "--", "x"],
        ),
        (
            {"name": "j", "trigger": {"kind": "manual"}, "command": "   "},
            ["add", "j", "--manual", "--", "   "],
        ),
    ],
)
def test_invalid_job_is_422_with_the_cli_message(
    server: Server, jobctl: Jobctl, body: dict[str, Any], cli_args: list[str]
) -> None:
    body.setdefault("command", "x")
    a = server.request("POST", "/v1/jobs", body)
    assert a.status == 422, a.text
    assert a.json() == {"error": cli_error(jobctl, *cli_args)}
    assert job_count(jobctl) == 0


def test_invalid_json_shapes(server: Server, jobctl: Jobctl) -> None:
    cases = [
        ({"trigger": {"kind": "manual"}, "command": "x"}, 422, "name is required"),
        ({"name": "j", "command": "x"}, 422, "trigger is required: an object with a kind"),
        ({"name": "j", "trigger": {"kind": "manual"}}, 422, "command is required"),
        (
            {"name": "j", "trigger": {"kind": "hourly"}, "command": "x"},
            422,
            'invalid trigger.kind "hourly": use cron|interval|once|reboot|manual|after|set',
        ),
        (
            {"name": "j", "trigger": {"kind": "manual"}, "command": "x", "retries": "3"},
            422,
            'invalid retries "3": must be an integer',
        ),
        (
            {"name": "j", "trigger": {"kind": "manual"}, "command": "x", "priority": 2**64},
            422,
            f"invalid priority {2**64}: beyond the 64-bit range",
        ),
        (
            {"name": "j", "trigger": {"kind": "manual"}, "command": "x", "colour": "red"},
            422,
            "unknown field 'colour'",
        ),
    ]
    for body, status, message in cases:
        a = server.request("POST", "/v1/jobs", body)
        assert (a.status, a.json()) == (status, {"error": message}), body
    for raw, message in ((b'{"name": ', "malformed JSON"), (b"[1, 2]", "must be a JSON object")):
        a = server.request(
            "POST", "/v1/jobs", raw=raw, headers={"Content-Type": "application/json"}
        )
        assert a.status == 400 and message in a.json()["error"], a.text
    assert job_count(jobctl) == 0


def test_a_body_over_one_mib_is_413(server: Server, jobctl: Jobctl) -> None:
    big = {"name": "big", "trigger": {"kind": "manual"}, "command": "x" * (1024 * 1024)}
    a = server.request("POST", "/v1/jobs", big)
    assert a.status == 413 and "over 1048576 bytes" in a.json()["error"]

    # without a Content-Length (chunked): refused once the chunks pass the cap
    conn = socket.create_connection((server.host, server.port), timeout=30)
    try:
        head = (
            "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\r\n"
        )
        conn.sendall(head.encode())
        chunk = b'{"name": "big", "command": "' + b"y" * 65536
        conn.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        reply = b""
        for _ in range(40):
            piece = b"z" * 65536
            try:
                conn.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            except OSError:
                break
            if b"\r\n\r\n" in reply:
                break
        conn.settimeout(10)
        while b"\r\n\r\n" not in reply:
            data = conn.recv(65536)
            if not data:
                break
            reply += data
    finally:
        conn.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert job_count(jobctl) == 0
    # a body just under the cap is read
    # (in the stdin text: a command that long could never start)
    ok = {
        "name": "fits",
        "trigger": {"kind": "manual"},
        "command": "cat",
        "stdin": "x" * (1024 * 1024 - 200),
    }
    assert server.request("POST", "/v1/jobs", ok).status == 201


def test_conflicts_are_409(server: Server, jobctl: Jobctl) -> None:
    body = {"name": "dup", "trigger": {"kind": "manual"}, "command": "true"}
    assert server.request("POST", "/v1/jobs", body).status == 201
    a = server.request("POST", "/v1/jobs", body)
    assert a.status == 409
    jobctl("add", "dup2", "--manual", "--", "true")
    # a CLI flag means nothing to an API client: it is told the API's way
    assert a.json() == {"error": "a job named 'dup' already exists (PATCH /v1/jobs/dup changes it)"}
    rename = server.request("PATCH", "/v1/jobs/dup", {"name": "dup2"})
    assert (rename.status, rename.json()) == (409, {"error": "a job named 'dup2' already exists"})
    jobctl("cancel", "dup")
    for method, path in (
        ("POST", "/v1/jobs/dup/pause"),
        ("POST", "/v1/jobs/dup/resume"),
        ("POST", "/v1/jobs/dup/runs"),
    ):
        a = server.request(method, path)
        assert a.status == 409, (path, a.text)
    run_id = jobctl.json("run", "dup2")["id"]
    a = server.request("POST", f"/v1/runs/{run_id}/retry")
    assert (a.status, a.json()) == (409, {"error": f"run {run_id} is pending, not dead"})


def test_delete_refused_while_leased_then_forced(
    server: Server, jobctl: Jobctl, start_daemon: Any
) -> None:
    jobctl("add", "long", "--manual", "--", "sleep 60")
    run_id = jobctl.json("run", "long")["id"]
    start_daemon()
    wait_until(lambda: jobctl.json("runs", "long")[0]["state"] == "leased", 15, what="leased")
    a = server.request("DELETE", "/v1/jobs/long")
    assert a.status == 409
    assert a.json() == {"error": "job 'long' has a running run; cancel it first or use --force"}
    assert server.request("DELETE", "/v1/jobs/long?force=maybe").status == 422
    a = server.request("DELETE", "/v1/jobs/long?force=true")
    assert (a.status, a.body) == (204, b"")
    assert server.request("GET", "/v1/jobs/long").status == 404
    assert server.request("GET", f"/v1/runs/{run_id}").status == 404


def test_not_found_is_404(server: Server, jobctl: Jobctl) -> None:
    cases = [
        ("GET", "/v1/jobs/nope", "no job named 'nope'"),
        ("PATCH", "/v1/jobs/nope", "no job named 'nope'"),
        ("DELETE", "/v1/jobs/nope", "no job named 'nope'"),
        ("POST", "/v1/jobs/nope/pause", "no job named 'nope'"),
        ("POST", "/v1/jobs/nope/resume", "no job named 'nope'"),
        ("POST", "/v1/jobs/nope/runs", "no job named 'nope'"),
        ("GET", "/v1/runs?job=nope", "no job named 'nope'"),
        ("GET", "/v1/runs/4242", "no run with id 4242"),
        ("GET", "/v1/runs/4242/logs", "no run with id 4242"),
        ("POST", "/v1/runs/4242/cancel", "no run with id 4242"),
        ("POST", "/v1/runs/4242/retry", "no run with id 4242"),
        ("GET", f"/v1/runs/{2**70}", f"no run with id {2**70}"),
    ]
    for method, path, message in cases:
        body = {"retries": 1} if method == "PATCH" else None
        a = server.request(method, path, body)
        assert (a.status, a.json()) == (404, {"error": message}), (method, path, a.text)
    jobctl("add", "fresh", "--manual", "--", "true")
    run_id = jobctl.json("run", "fresh")["id"]
    a = server.request("GET", f"/v1/runs/{run_id}/logs")
    assert a.status == 404 and a.json()["error"].startswith(f"run {run_id} has no ")
    a = server.request("GET", "/v1/nothing-here")
    assert a.status == 404 and "error" in a.json()
    assert server.request("PUT", "/v1/jobs").status == 405


def test_patch_is_edit(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "nightly", "--cron", "0 3 * * *", "--tz", "UTC", "--", "true")
    jobctl("add", "twin", "--cron", "0 3 * * *", "--tz", "UTC", "--", "true")
    a = server.request(
        "PATCH",
        "/v1/jobs/nightly",
        {"retries": 5, "timeout": "1h", "trigger": {"tz": "Europe/Berlin"}, "command": "date"},
    )
    assert a.status == 200, a.text
    jobctl(
        "edit", "twin", "--retries", "5", "--timeout", "1h", "--tz", "Europe/Berlin",
        "--command", "date",
    )  # fmt: skip
    api, cli = a.json(), jobctl.json("show", "twin")
    assert api == {k: v for k, v in jobctl.json("show", "nightly").items() if k != "runs"}
    for k in ("id", "name", "created_at", "runs"):
        api.pop(k, None)
        cli.pop(k, None)
    assert api == cli
    # the CLI's messages for what edit refuses
    a = server.request("PATCH", "/v1/jobs/nightly", {})
    assert (a.status, a.json()["error"]) == (422, cli_error(jobctl, "edit", "nightly"))
    jobctl("add", "every", "--every", "5m", "--", "true")
    a = server.request("PATCH", "/v1/jobs/every", {"trigger": {"tz": "UTC"}})
    assert (a.status, a.json()["error"]) == (422, cli_error(jobctl, "edit", "every", "--tz", "UTC"))
    a = server.request("PATCH", "/v1/jobs/every", {"backoff": "soon"})
    assert (a.status, a.json()["error"]) == (
        422,
        cli_error(jobctl, "edit", "every", "--backoff", "soon"),
    )
    assert jobctl.json("show", "every")["backoff"] == 10.0  # nothing written
    a = server.request("PATCH", "/v1/jobs/every", {"paused": True})
    assert a.status == 422 and "pause" in a.json()["error"]
    # rename
    a = server.request("PATCH", "/v1/jobs/every", {"name": "often"})
    assert a.status == 200 and a.json()["name"] == "often"
    assert server.request("GET", "/v1/jobs/every").status == 404


def test_pause_and_resume(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "tick", "--every", "1h", "--", "true")
    a = server.request("POST", "/v1/jobs/tick/pause")
    assert a.status == 200 and a.json()["state"] == "paused" and a.json()["paused"] is True
    assert a.json()["next_run_at"] is None
    assert jobctl.json("show", "tick")["state"] == "paused"
    a = server.request("POST", "/v1/jobs/tick/resume")
    assert a.status == 200 and a.json()["state"] == "active"
    assert a.json() == {k: v for k, v in jobctl.json("show", "tick").items() if k != "runs"}


# ---------------------------------------------------------------------- runs


def test_force_a_run_with_keys_and_payload(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "digest", "--manual", "--", "true")
    body = {"key": "u1:2026-12-01", "env": {"USER_ID": "u1"}, "locks": ["mail"], "priority": 5}
    a = server.request("POST", "/v1/jobs/digest/runs", body)
    assert a.status == 201, a.text
    run = a.json()
    assert run["created"] is True and run["run_key"] == "u1:2026-12-01"
    assert run["env"] == {"USER_ID": "u1"} and run["locks"] == ["mail"] and run["priority"] == 5
    again = server.request("POST", "/v1/jobs/digest/runs", body)
    assert again.status == 200
    assert again.json() == {**run, "created": False}
    listed = jobctl.json("runs", "digest")
    assert len(listed) == 1
    assert {k: v for k, v in run.items() if k != "created"} == listed[0]
    # the CLI's --json of `run` gives the same object for the same run
    cli_again = jobctl.json("run", "digest", "--key", "u1:2026-12-01")
    assert cli_again == {**run, "created": False}
    plain = server.request("POST", "/v1/jobs/digest/runs")
    assert plain.status == 201 and plain.json()["reason"] == "manual"
    for bad, args in (
        ({"key": ""}, ["run", "digest", "--key", ""]),
        ({"env": {"no-dash": "v"}}, ["run", "digest", "--env", "no-dash=v"]),
        ({"locks": [""]}, ["run", "digest", "--lock", ""]),
    ):
        a = server.request("POST", "/v1/jobs/digest/runs", bad)
        assert (a.status, a.json()) == (422, {"error": cli_error(jobctl, *args)}), bad
    assert len(jobctl.json("runs", "digest")) == 2


def test_list_runs_with_filters(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "a", "--manual", "--", "true")
    jobctl("add", "b", "--manual", "--", "true")
    ids = [jobctl.json("run", n)["id"] for n in ("a", "b", "a", "a")]
    jobctl("cancel", str(ids[0]))
    assert server.request("GET", "/v1/runs").json() == jobctl.json("runs")
    assert server.request("GET", "/v1/runs?job=a").json() == jobctl.json("runs", "a")
    got = server.request("GET", "/v1/runs?job=a&state=cancelled").json()
    assert [r["id"] for r in got] == [ids[0]]
    assert server.request("GET", "/v1/runs?limit=2").json() == jobctl.json("runs", "--limit", "2")
    a = server.request("GET", "/v1/runs?state=sleeping")
    assert (a.status, a.json()["error"]) == (422, cli_error(jobctl, "runs", "--state", "sleeping"))
    for q in ("limit=0", "limit=x", "limit=-3"):
        assert server.request("GET", f"/v1/runs?{q}").status == 422, q


def test_run_detail_logs_cancel_and_retry(
    server: Server, jobctl: Jobctl, start_daemon: Any
) -> None:
    jobctl("add", "hello", "--manual", "--", "echo 'hello <world>'")
    jobctl("add", "broken", "--manual", "--retries", "0", "--", "echo oops; exit 3")
    jobctl("add", "later", "--manual", "--", "true")
    pending = jobctl.json("run", "later")["id"]
    a = server.request("GET", f"/v1/runs/{pending}")
    assert a.status == 200
    detail = a.json()
    assert detail["attempts"] == []
    assert detail["waiting"]["reason"] == "no_daemon"  # as inspect --json says it
    assert detail == jobctl.json("inspect", str(pending))
    cancel = server.request("POST", f"/v1/runs/{pending}/cancel")
    assert cancel.status == 200 and cancel.json()["state"] == "cancelled"
    assert cancel.json() == jobctl.json("runs", "later")[0]

    ok_id = jobctl.json("run", "hello")["id"]
    dead_id = jobctl.json("run", "broken")["id"]
    start_daemon()

    def final(run_id: int) -> bool:
        return server.request("GET", f"/v1/runs/{run_id}").json()["state"] in ("succeeded", "dead")

    wait_until(lambda: final(ok_id) and final(dead_id), 20, what="both runs to end")
    detail = server.request("GET", f"/v1/runs/{ok_id}").json()
    assert detail["state"] == "succeeded" and detail["waiting"] is None
    assert [a["attempt"] for a in detail["attempts"]] == [1]
    assert detail["attempts"][0]["exit_code"] == 0
    run_only = {
        k: v for k, v in detail.items() if k not in ("attempts", "waiting", "notifications")
    }
    assert run_only == jobctl.json("runs", "hello")[0]
    logs = server.request("GET", f"/v1/runs/{ok_id}/logs")
    assert logs.status == 200 and logs.headers["content-type"].startswith("text/plain")
    assert logs.body == b"hello <world>\n"
    assert server.request("GET", f"/v1/runs/{ok_id}/logs?attempt=1").body == b"hello <world>\n"
    assert server.request("GET", f"/v1/runs/{ok_id}/logs?attempt=7").status == 404
    assert server.request("GET", f"/v1/runs/{ok_id}/logs?attempt=x").status == 422

    assert server.request("GET", f"/v1/runs/{dead_id}").json()["state"] == "dead"
    retry = server.request("POST", f"/v1/runs/{dead_id}/retry")
    assert retry.status == 200 and retry.json()["state"] == "pending"
    assert retry.json()["max_attempts"] == 2
    # cancelling a finished run leaves it as it is, as `cancel ID` does
    done = server.request("POST", f"/v1/runs/{ok_id}/cancel")
    assert done.status == 200 and done.json()["state"] == "succeeded"


def test_status_is_status_json(server: Server, jobctl: Jobctl, start_daemon: Any) -> None:
    jobctl("add", "s", "--every", "1h", "--", "true")
    assert server.request("GET", "/v1/status").json() == jobctl.json("status")
    start_daemon()
    got = server.request("GET", "/v1/status").json()
    assert len(got["daemons"]) == 1 and got["daemons"][0]["leader"] in (True, False)
    assert set(got) == {"daemons", "counts", "next_due_at", "maintenance"}


# ---------------------------------------------------------------------- metrics


def test_metrics_parse_as_prometheus_text(
    server: Server, jobctl: Jobctl, start_daemon: Any
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    jobctl("add", "quick", "--manual", "--", "true")
    jobctl("add", "fails", "--manual", "--retries", "1", "--backoff", "1", "--", "exit 1")
    jobctl("add", "idle", "--manual", "--", "true")
    for _ in range(3):
        jobctl("run", "quick")
    jobctl("run", "fails")
    cancelled = jobctl.json("run", "idle")["id"]
    jobctl("cancel", str(cancelled))
    jobctl("run", "idle")
    start_daemon()
    wait_until(
        lambda: (
            {r["state"] for r in jobctl.json("runs", "quick")} == {"succeeded"}
            and jobctl.json("runs", "fails")[0]["state"] == "dead"
            and jobctl.json("runs", "idle")[0]["state"] == "succeeded"
        ),
        30,
        what="runs to end",
    )
    a = server.request("GET", "/metrics")
    assert a.status == 200 and a.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(a.text)}
    assert set(families) >= {
        "jobctl_runs",
        "jobctl_runs_finished",
        "jobctl_run_duration_seconds",
        "jobctl_daemons",
        "jobctl_missed_windows",
    }
    assert families["jobctl_runs"].type == "gauge"
    gauge = {s.labels["state"]: s.value for s in families["jobctl_runs"].samples}
    counts = jobctl.json("status")["counts"]
    assert gauge == {k: float(v) for k, v in counts.items()}
    finished = {
        (s.labels["job_name"], s.labels["state"]): s.value
        for s in families["jobctl_runs_finished"].samples
        if s.name == "jobctl_runs_finished_total"
    }
    assert finished[("quick", "succeeded")] == 3
    assert finished[("fails", "dead")] == 1
    assert finished[("idle", "cancelled")] == 1
    assert families["jobctl_runs_finished"].type == "counter"
    hist = families["jobctl_run_duration_seconds"]
    assert hist.type == "histogram"
    count = {s.labels["job_name"]: s.value for s in hist.samples if s.name.endswith("_count")}
    assert count == {"quick": 3, "fails": 2, "idle": 1}  # every finished attempt
    inf = {
        s.labels["job_name"]: s.value
        for s in hist.samples
        if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"
    }
    assert inf == count
    assert [s.value for s in families["jobctl_daemons"].samples] == [1]
    missed = {s.labels["job_name"]: s.value for s in families["jobctl_missed_windows"].samples}
    assert missed == {"fails": 0, "idle": 0, "quick": 0}
    # Prometheus keeps `job` for the scrape target and renames a metric's own `job` label
    # to `exported_job`, so a job is `job_name` everywhere
    assert not [s for f in families.values() for s in f.samples if "job" in s.labels]


def test_metrics_count_the_cpu_and_peak_memory_of_runs(
    server: Server, jobctl: Jobctl, start_daemon: Any
) -> None:
    """README, Run policies and what a run costs: jobctl_run_cpu_seconds_total (a counter that prune does not lower) and
    jobctl_run_max_rss_bytes (the last finished run's)."""
    import sys

    from prometheus_client.parser import text_string_to_metric_families

    busy = (
        f"{sys.executable} -c \"import time\nb = b'x' * (64 << 20)\n"
        't = time.process_time()\nwhile time.process_time() - t < 0.3: pass"'
    )
    jobctl("add", "busy", "--manual", "--", busy)
    start_daemon()
    for _ in range(2):
        run_id = jobctl.json("run", "busy")["id"]
        wait_until(lambda r=run_id: jobctl.json("inspect", str(r))["state"] == "succeeded", 30)

    def samples() -> dict[str, float]:
        text = server.request("GET", "/metrics").text
        return {
            s.name: s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.labels.get("job_name") == "busy" and ("cpu" in s.name or "rss" in s.name)
        }

    first = samples()
    assert first["jobctl_run_cpu_seconds_total"] >= 0.6
    assert first["jobctl_run_max_rss_bytes"] >= 64 << 20
    runs = jobctl.json("runs", "busy")
    assert first["jobctl_run_cpu_seconds_total"] == pytest.approx(sum(r["cpu"] for r in runs))
    # retention and prune delete rows, never the counter
    wait_until(
        lambda: jobctl("prune", "--older-than", "1s") and jobctl.json("runs", "busy") == [],
        10,
        what="the runs pruned",
    )
    after = samples()
    assert after["jobctl_run_cpu_seconds_total"] == first["jobctl_run_cpu_seconds_total"]
    assert "jobctl_run_max_rss_bytes" not in after
