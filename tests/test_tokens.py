"""API tokens with roles (README "Tokens"): `token add|list|rm`, and a real `serve` that
lets each role use only its routes: a token of each role against every route of the app's
route table (the API and the dashboard's forms), on both backends."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from conftest import wait_until
from receivers import MainCli, http_receiver
from webhelpers import TOKEN, Server, token_file

from jobctl.web.app import create_app
from jobctl.web.roles import role_for

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
ROLES = ("read", "operate", "admin")
OPEN = ("pending", "leased", "failed")

#: the role every route of the app needs: a route the app gains without an entry here
#: fails test_every_route_has_its_role (HEAD is checked as its GET)
EXPECTED: dict[tuple[str, str], str] = {
    ("GET", "/healthz"): "read",
    ("GET", "/v1/jobs"): "read",
    ("POST", "/v1/jobs"): "admin",
    ("GET", "/v1/jobs/{name}"): "read",
    ("PATCH", "/v1/jobs/{name}"): "admin",
    ("DELETE", "/v1/jobs/{name}"): "admin",
    ("POST", "/v1/jobs/{name}/pause"): "operate",
    ("POST", "/v1/jobs/{name}/resume"): "operate",
    ("POST", "/v1/jobs/{name}/runs"): "operate",
    ("GET", "/v1/jobs/{name}/history"): "read",
    ("POST", "/v1/jobs/{name}/rollback"): "admin",
    ("POST", "/v1/jobs/{name}/backfill"): "operate",
    ("GET", "/v1/jobs/{name}/coverage"): "read",
    ("GET", "/v1/runs"): "read",
    ("GET", "/v1/runs/{run_id:int}"): "read",
    ("GET", "/v1/runs/{run_id:int}/logs"): "read",
    ("POST", "/v1/runs/{run_id:int}/cancel"): "operate",
    ("POST", "/v1/runs/{run_id:int}/retry"): "operate",
    ("GET", "/v1/status"): "read",
    ("GET", "/v1/notifications"): "read",
    ("GET", "/v1/channels"): "read",
    ("POST", "/v1/channels/{name}/test"): "operate",
    ("POST", "/v1/maintenance"): "operate",
    ("DELETE", "/v1/maintenance"): "operate",
    ("GET", "/v1/secrets"): "read",
    ("PUT", "/v1/secrets/{name}"): "admin",
    ("DELETE", "/v1/secrets/{name}"): "admin",
    ("GET", "/metrics"): "read",
    ("POST", "/login"): "read",
    ("POST", "/logout"): "read",
    ("POST", "/jobs/{name}/run"): "operate",
    ("POST", "/jobs/{name}/pause"): "operate",
    ("POST", "/jobs/{name}/resume"): "operate",
    ("GET", "/runs/{run_id:int}"): "read",
    ("GET", "/runs/{run_id:int}/events"): "read",
    ("POST", "/runs/{run_id:int}/cancel"): "operate",
    ("POST", "/runs/{run_id:int}/retry"): "operate",
    ("GET", "/"): "read",
    ("GET", "/runs"): "read",
    ("GET", "/timeline"): "read",
    ("POST", "/retry-dead"): "operate",
    ("GET", "/jobs/{name}"): "read",
    ("GET", "/jobs/{name}/delete"): "read",
    ("POST", "/jobs/{name}/delete"): "admin",
    ("POST", "/jobs/{name}/edit"): "admin",
    ("POST", "/jobs/{name}/retry-dead"): "operate",
    ("GET", "/notifications"): "read",
    ("POST", "/channels/{name}/test"): "operate",
}


def app_routes() -> set[tuple[str, str]]:
    """(method, path) of every route of the application, as its route table has them."""
    app = create_app(lambda: None, "unused")  # type: ignore[arg-type,return-value]
    out = set()
    for route in app.router.routes:
        for method in getattr(route, "methods", None) or ():
            out.add((method, route.path))  # type: ignore[attr-defined]
    return out


def test_every_route_has_its_role() -> None:
    routes = app_routes()
    gets = {("HEAD", path) for method, path in EXPECTED if method == "GET"}
    assert routes == set(EXPECTED) | gets
    for method, path in routes:
        want = EXPECTED[("GET" if method == "HEAD" else method, path)]
        assert role_for(method, path).value == want, (method, path)


# ---------------------------------------------------------------------- token add|list|rm


@pytest.fixture
def jobctl(db, capsys):
    cli = MainCli(db, capsys)
    yield cli
    cli.close()


def test_token_add_prints_it_once_and_keeps_only_its_hash(jobctl: MainCli) -> None:
    r = jobctl("token", "add", "wall", "--role", "read")
    assert r.stderr == "" and r.stdout.count("\n") == 1
    token = r.stdout.strip()
    assert len(token) >= 32 and token.isprintable() and " " not in token
    [listed] = jobctl.json("token", "list")
    assert set(listed) == {"name", "role", "created_at", "last_used_at"}
    assert (listed["name"], listed["role"], listed["last_used_at"]) == ("wall", "read", None)
    assert token not in jobctl("token", "list").stdout
    with jobctl.store().write() as c:
        rows = c.execute("SELECT * FROM api_tokens").fetchall()
    assert len(rows) == 1
    row = [str(v) for v in tuple(rows[0])]
    assert hashlib.sha256(token.encode()).hexdigest() in row
    assert not any(token in v for v in row)
    # a taken name is exit 1; a bad role or name exit 2; nothing is added
    assert jobctl("token", "add", "wall", "--role", "admin", ok=False).exit_code == 1
    assert jobctl("token", "add", "x", "--role", "root", ok=False).exit_code == 2
    assert jobctl("token", "add", "bad name", "--role", "read", ok=False).exit_code == 2
    assert [t["name"] for t in jobctl.json("token", "list")] == ["wall"]
    assert jobctl("token", "rm", "wall").stdout == "removed token wall\n"
    assert jobctl.json("token", "list") == []
    assert jobctl("token", "rm", "wall", ok=False).exit_code == 1


# ---------------------------------------------------------------------- a real serve


class World:
    """The database the requests act on, and what each route needs made afresh."""

    def __init__(self, jobctl: MainCli, receiver_url: str) -> None:
        self.jobctl = jobctl
        self.counter = itertools.count(1)
        jobctl("notify", "add", "c", "--webhook", receiver_url)
        jobctl("secret", "set", "s", stdin="value")
        jobctl("add", "j", "--manual", "--", "echo hello")
        jobctl("add", "ev", "--every", "1h", "--", "true")
        jobctl("add", "f", "--manual", "--retries", "0", "--", "echo failing; exit 3")
        jobctl("add", "w", "--manual", "--paused", "--", "true")
        self.done_run = jobctl.json("run", "j", "--wait")["id"]

    def fresh(self, prefix: str, *flags: str) -> str:
        name = f"{prefix}-{next(self.counter)}"
        self.jobctl("add", name, "--manual", *flags, "--", "true")
        return name

    def dead_run(self) -> int:
        r = self.jobctl("run", "f", "--wait", "--json", ok=False)
        return int(json.loads(r.stdout)["id"])

    def waiting_run(self) -> int:
        return int(self.jobctl.json("run", "w")["id"])

    def revised(self) -> str:
        name = self.fresh("rb")
        self.jobctl("edit", name, "--description", "second")
        return name

    def state(self) -> dict[str, Any]:
        """Everything a request could change, as the CLI reads it, once the daemon has
        run what earlier requests enqueued (the runs of the paused job ``w`` wait)."""
        j = self.jobctl

        def settled() -> list[Any] | None:
            runs = j.json("runs", "--limit", "1000")
            busy = [r for r in runs if r["state"] in OPEN and r["job"] != "w"]
            return None if busy else runs

        runs = wait_until(settled, 30, what="the daemon to run what was enqueued")
        return {
            # each job's settings, state and revision number (a change writes a revision)
            "jobs": j.json("list"),
            "runs": [(r["id"], r["state"], r["attempt"]) for r in runs],
            "secrets": j.json("secret", "list"),
            "channels": j.json("notify", "list"),
            "maintenance": j.json("status")["maintenance"],
        }


Request = tuple[str, Any]  # (path, JSON body or form fields)
#: per route: what to send, made afresh for each try (objects a try changes are new)
Builder = Callable[[World], Request]

NOW = datetime.now(UTC)
API: dict[tuple[str, str], Builder] = {
    ("GET", "/healthz"): lambda w: ("/healthz", None),
    ("GET", "/v1/jobs"): lambda w: ("/v1/jobs", None),
    ("POST", "/v1/jobs"): lambda w: (
        "/v1/jobs",
        {"name": f"new-{next(w.counter)}", "trigger": {"kind": "manual"}, "command": "true"},
    ),
    ("GET", "/v1/jobs/{name}"): lambda w: ("/v1/jobs/j", None),
    ("PATCH", "/v1/jobs/{name}"): lambda w: (
        f"/v1/jobs/{w.fresh('pt')}",
        {"description": "patched"},
    ),
    ("DELETE", "/v1/jobs/{name}"): lambda w: (f"/v1/jobs/{w.fresh('rm')}", None),
    ("POST", "/v1/jobs/{name}/pause"): lambda w: (f"/v1/jobs/{w.fresh('pz')}/pause", None),
    ("POST", "/v1/jobs/{name}/resume"): lambda w: (
        f"/v1/jobs/{w.fresh('rs', '--paused')}/resume",
        None,
    ),
    ("POST", "/v1/jobs/{name}/runs"): lambda w: (f"/v1/jobs/{w.fresh('rn')}/runs", {}),
    ("GET", "/v1/jobs/{name}/history"): lambda w: ("/v1/jobs/j/history", None),
    ("POST", "/v1/jobs/{name}/rollback"): lambda w: (
        f"/v1/jobs/{w.revised()}/rollback",
        {"revision": 1},
    ),
    ("POST", "/v1/jobs/{name}/backfill"): lambda w: (
        "/v1/jobs/ev/backfill",
        {
            "from": (NOW - timedelta(hours=3)).isoformat(),
            "to": (NOW - timedelta(hours=1)).isoformat(),
        },
    ),
    ("GET", "/v1/jobs/{name}/coverage"): lambda w: ("/v1/jobs/ev/coverage", None),
    ("GET", "/v1/runs"): lambda w: ("/v1/runs", None),
    ("GET", "/v1/runs/{run_id:int}"): lambda w: (f"/v1/runs/{w.done_run}", None),
    ("GET", "/v1/runs/{run_id:int}/logs"): lambda w: (f"/v1/runs/{w.done_run}/logs", None),
    ("POST", "/v1/runs/{run_id:int}/cancel"): lambda w: (
        f"/v1/runs/{w.waiting_run()}/cancel",
        None,
    ),
    ("POST", "/v1/runs/{run_id:int}/retry"): lambda w: (f"/v1/runs/{w.dead_run()}/retry", None),
    ("GET", "/v1/status"): lambda w: ("/v1/status", None),
    ("GET", "/v1/notifications"): lambda w: ("/v1/notifications", None),
    ("GET", "/v1/channels"): lambda w: ("/v1/channels", None),
    ("POST", "/v1/channels/{name}/test"): lambda w: ("/v1/channels/c/test", None),
    ("POST", "/v1/maintenance"): lambda w: ("/v1/maintenance", {"reason": "a test"}),
    ("DELETE", "/v1/maintenance"): lambda w: _in_maintenance(w, "/v1/maintenance"),
    ("GET", "/v1/secrets"): lambda w: ("/v1/secrets", None),
    ("PUT", "/v1/secrets/{name}"): lambda w: (
        f"/v1/secrets/new-{next(w.counter)}",
        {"value": "v"},
    ),
    ("DELETE", "/v1/secrets/{name}"): lambda w: (f"/v1/secrets/{_secret(w)}", None),
    ("GET", "/metrics"): lambda w: ("/metrics", None),
}
PAGES: dict[tuple[str, str], Builder] = {
    ("POST", "/jobs/{name}/run"): lambda w: (f"/jobs/{w.fresh('prn')}/run", {}),
    ("POST", "/jobs/{name}/pause"): lambda w: (f"/jobs/{w.fresh('ppz')}/pause", {}),
    ("POST", "/jobs/{name}/resume"): lambda w: (f"/jobs/{w.fresh('prs', '--paused')}/resume", {}),
    ("GET", "/runs/{run_id:int}"): lambda w: (f"/runs/{w.done_run}", None),
    ("GET", "/runs/{run_id:int}/events"): lambda w: (f"/runs/{w.done_run}/events", None),
    ("POST", "/runs/{run_id:int}/cancel"): lambda w: (f"/runs/{w.waiting_run()}/cancel", {}),
    ("POST", "/runs/{run_id:int}/retry"): lambda w: (f"/runs/{w.dead_run()}/retry", {}),
    ("GET", "/"): lambda w: ("/", None),
    ("GET", "/runs"): lambda w: ("/runs", None),
    ("GET", "/timeline"): lambda w: ("/timeline", None),
    ("POST", "/retry-dead"): lambda w: (_with_dead(w, "/retry-dead"), {}),
    ("GET", "/jobs/{name}"): lambda w: ("/jobs/j", None),
    ("GET", "/jobs/{name}/delete"): lambda w: ("/jobs/j/delete", None),
    ("POST", "/jobs/{name}/delete"): lambda w: (
        f"/jobs/{w.fresh('prm')}/delete",
        {"confirm": "yes"},
    ),
    ("POST", "/jobs/{name}/edit"): lambda w: _edit(w),
    ("POST", "/jobs/{name}/retry-dead"): lambda w: (_with_dead(w, "/jobs/f/retry-dead"), {}),
    ("GET", "/notifications"): lambda w: ("/notifications", None),
    ("POST", "/channels/{name}/test"): lambda w: ("/channels/c/test", {}),
}
#: the sign-in and sign-out of a session: any role, tried on their own below
SESSION = {("POST", "/login"), ("POST", "/logout")}


def _secret(w: World) -> str:
    name = f"gone-{next(w.counter)}"
    w.jobctl("secret", "set", name, stdin="x")
    return name


def _in_maintenance(w: World, path: str) -> Request:
    w.jobctl("pause", "--all", "--reason", "a test")
    return path, None


def _with_dead(w: World, path: str) -> str:
    w.dead_run()
    return path


def _edit(w: World) -> Request:
    name = w.fresh("ped")
    text = w.jobctl("export", name).stdout + 'description = "edited"\n'
    revision = w.jobctl.json("show", name)["revision"]  # what the page's form sends
    return f"/jobs/{name}/edit", {"toml": text, "revision": str(revision)}


def _session(server: Server, token: str) -> tuple[dict[str, str], str]:
    """A dashboard session signed in with ``token``: (its cookie header, its CSRF token)."""
    a = server.request(
        "POST", "/login", token=None, headers=FORM, raw=urlencode({"token": token}).encode()
    )
    assert a.status == 303, a.text
    cookie = {"Cookie": a.cookies[0].split(";")[0]}
    home = server.request("GET", "/", token=None, headers=cookie)
    m = re.search(r'name="csrf" value="([^"]+)"', home.text)
    assert m is not None
    return cookie, m.group(1)


def _send(
    server: Server, method: str, path: str, body: Any, page: bool, who: Any
) -> tuple[int, str]:
    if not page:
        a = server.request(method, path, body, token=who)
        return a.status, a.text
    cookie, csrf = who
    if body is None:
        a = server.request(method, path, token=None, headers=cookie)
    else:
        fields = {**body, "csrf": csrf}
        raw = urlencode(fields).encode()
        a = server.request(method, path, token=None, headers={**cookie, **FORM}, raw=raw)
    return a.status, a.text


@pytest.fixture
def served(db, tmp_path: Path) -> Iterator[Server]:
    server = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path)).wait_ready()
    try:
        yield server
    finally:
        server.close()


def test_each_role_against_every_route(jobctl: MainCli, start_daemon, served: Server, db) -> None:
    tokens = {
        role: jobctl("token", "add", f"t-{role}", "--role", role).stdout.strip() for role in ROLES
    }
    with http_receiver() as rec:
        start_daemon()
        world = World(jobctl, rec.url)
        sessions = {role: _session(served, tokens[role]) for role in ROLES}
        tried = set()
        for (method, template), build in [*API.items(), *PAGES.items()]:
            page = (method, template) in PAGES
            needed = ROLES.index(EXPECTED[(method, template)])
            for role in ROLES:
                who = sessions[role] if page else tokens[role]
                path, body = build(world)
                before = world.state() if ROLES.index(role) < needed else None
                status, text = _send(served, method, path, body, page, who)
                if before is not None:
                    assert status == 403, (role, method, path, status, text)
                    if not page:
                        assert json.loads(text) == {
                            "error": f"token t-{role} ({role}) may not {method} {path}"
                        }
                    assert world.state() == before, (role, method, path)
                else:
                    ok = (200, 201, 204) if not page else (200, 303)
                    assert status in ok, (role, method, path, status, text[:300])
                if template == "/v1/maintenance":
                    # no maintenance window is left for the next route's runs to wait in
                    world.jobctl("resume", "--all")
            tried.add((method, template))
    assert tried | SESSION == set(EXPECTED)
    # every token was used, and the server's own token is still admin
    assert all(t["last_used_at"] for t in jobctl.json("token", "list"))
    assert served.request("DELETE", "/v1/jobs/j", token=TOKEN).status == 204


def test_a_change_through_a_token_names_it_in_the_revision(jobctl: MainCli, served: Server) -> None:
    ops = jobctl("token", "add", "ops", "--role", "operate").stdout.strip()
    boss = jobctl("token", "add", "boss", "--role", "admin").stdout.strip()
    jobctl("add", "j", "--manual", "--", "true")
    assert served.request("POST", "/v1/jobs/j/pause", token=ops).status == 200
    assert served.request("PATCH", "/v1/jobs/j", {"description": "x"}, token=boss).status == 200
    assert served.request("POST", "/v1/jobs/j/resume", token=TOKEN).status == 200
    cookie, csrf = _session(served, ops)
    a = served.request(
        "POST",
        "/jobs/j/pause",
        token=None,
        headers={**cookie, **FORM},
        raw=urlencode({"csrf": csrf}).encode(),
    )
    assert a.status == 303
    who = [(r["who"], r["source"]) for r in jobctl.json("history", "j")[1:]]
    assert who == [
        ("token:ops", "api"),
        ("token:boss", "api"),
        ("api", "api"),
        ("token:ops", "api"),
    ]


def test_the_dashboard_shows_only_what_the_role_may_use(jobctl: MainCli, served: Server) -> None:
    jobctl("add", "j", "--manual", "--", "true")
    jobctl("notify", "add", "c", "--command", "true")
    buttons = {
        "read": set(),
        "operate": {"/jobs/j/run", "/jobs/j/pause"},
        "admin": {"/jobs/j/run", "/jobs/j/pause", "/jobs/j/edit", "/jobs/j/delete"},
    }
    for role in ROLES:
        token = jobctl("token", "add", f"t-{role}", "--role", role).stdout.strip()
        cookie, _ = _session(served, token)
        page = served.request("GET", "/jobs/j", token=None, headers=cookie).text
        actions = set(re.findall(r'action="(/jobs/j/[^"]+)"', page))
        actions |= set(re.findall(r'href="(/jobs/j/delete)"', page))
        assert actions == buttons[role], role
        assert f"token t-{role} ({role})" in page
        notes = served.request("GET", "/notifications", token=None, headers=cookie).text
        assert ('action="/channels/c/test"' in notes) == (role != "read")
        confirm = served.request("GET", "/jobs/j/delete", token=None, headers=cookie).text
        assert ('id="confirm-delete"' in confirm) == (role == "admin")


def test_a_removed_token_is_refused_at_once(jobctl: MainCli, served: Server) -> None:
    token = jobctl("token", "add", "gone", "--role", "admin").stdout.strip()
    cookie, _ = _session(served, token)
    assert served.request("GET", "/v1/jobs", token=token).status == 200
    jobctl("token", "rm", "gone")
    assert served.request("GET", "/v1/jobs", token=token).status == 401
    # its dashboard session ends with it
    page = served.request("GET", "/runs", token=None, headers=cookie)
    assert page.status == 401 and 'action="/login"' in page.text
