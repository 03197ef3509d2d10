"""Secrets (README "Secrets"): `secret set|list|rm`, a job's `--secret` and `--env-file`,
the masking of a value in the stored output, and the search for a value in everything
that can show a job or a run, on both backends with a real daemon, a real `serve`, the
real HTTP and SMTP receivers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from conftest import wait_until
from receivers import MainCli, http_receiver, smtp_receiver
from webhelpers import TOKEN, Server, token_file

from jobctl.envfile import EnvFileError, parse_env_file
from jobctl.web.api import ROUTES
from jobctl.worker import OutputTail

#: a value that nothing else in a run's life spells
SECRET = "Kq7-sEcReT-vAlUe-93xz"
ROTATED = "Zp4-nEw-SeCrEt-11qq"


@pytest.fixture
def jobctl(db, capsys):
    cli = MainCli(db, capsys)
    yield cli
    cli.close()


# ---------------------------------------------------------------------- pure parts


def test_env_file_is_read_in_systemd_syntax() -> None:
    text = (
        "# a comment\n"
        "; another\n"
        "\n"
        "  PLAIN = value with spaces  \n"
        "SINGLE='keep $HOME \\n as is'\n"
        'DOUBLE="say \\"hi\\" \\\\ \\$x"\n'
        "JOINED=one \\\n"
        "two\n"
        "PLAIN=later wins\n"
    )
    assert parse_env_file(text) == {
        "PLAIN": "later wins",
        "SINGLE": "keep $HOME \\n as is",
        "DOUBLE": 'say "hi" \\ $x',
        "JOINED": "one two",
    }
    bad_lines = (("NOEQUALS\n", 1), ("\n1BAD=x\n", 2), ("A='open\n", 1), ('A="x\n', 1))
    for bad, line in (*bad_lines, ("A=1\nB=x\0C=1\n", 2), ("A='x\0y'\n", 1)):
        with pytest.raises(EnvFileError, match=f"line {line}"):
            parse_env_file(bad)


def test_the_tail_masks_every_value_whole() -> None:
    tail = OutputTail(limit=32, masks=[b"hunter22", b"abc"])  # "abc": too short to mask
    tail.feed(b"pw=hunter22 abc\n")
    assert tail.value() == b"pw=*** abc\n"
    # a value cut by the start of the tail is masked whole, never half shown
    tail = OutputTail(limit=16, masks=[b"hunter22"])
    tail.feed(b"x" * 100 + b"hunter22" + b"y" * 12)
    assert b"hunt" not in tail.value() and b"er22" not in tail.value()
    # while the output goes on, an end that may be the start of a value is held back
    tail = OutputTail(limit=64, masks=[b"hunter22"])
    tail.feed(b"line\nhunt")
    assert tail.value(final=False) == b"line\n"
    tail.feed(b"er22 done")
    assert tail.value(final=False) == b"line\n*** done"
    # nothing fed can outgrow the bounded buffer
    tail.feed(b"z" * 10_000)
    assert len(tail.buf) <= 2 * tail.keep


# ---------------------------------------------------------------------- the commands


def test_secret_set_list_rm(jobctl: MainCli, tmp_path: Path) -> None:
    assert jobctl("secret", "set", "pw", stdin="hunter22\n").stdout == "set secret pw\n"
    f = tmp_path / "v"
    f.write_bytes(b"line one\nline two\n")
    jobctl("secret", "set", "multi", "--from-file", str(f))
    values = {n: v for n, v, _ in jobctl.store().commands.secrets_for_copy()}
    # stdin loses one trailing newline; a file's bytes are kept as they are
    assert values == {"pw": b"hunter22", "multi": b"line one\nline two\n"}
    jobctl("add", "j", "--manual", "--secret", "DB_PASSWORD=pw", "--secret", "multi", "--", "true")
    listed = jobctl.json("secret", "list")
    assert [(s["name"], s["used_by"]) for s in listed] == [("multi", ["j"]), ("pw", ["j"])]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", s["updated_at"]) for s in listed)
    assert jobctl.json("show", "j")["secrets"] == {"DB_PASSWORD": "pw", "multi": "multi"}
    human = jobctl("secret", "list").stdout
    assert "hunter22" not in human and "pw" in human
    # refused while used, naming the job; nothing removed
    r = jobctl("secret", "rm", "pw", ok=False)
    assert r.exit_code == 1 and "j" in r.stderr and r.stderr.startswith("Error: ")
    # edit --secret replaces the list; --no-secrets clears it
    jobctl("edit", "j", "--secret", "X=multi")
    assert jobctl.json("show", "j")["secrets"] == {"X": "multi"}
    assert jobctl("secret", "rm", "pw").stdout == "removed secret pw\n"
    jobctl("edit", "j", "--no-secrets")
    assert jobctl.json("show", "j")["secrets"] == {}
    jobctl("secret", "rm", "multi")
    assert jobctl.json("secret", "list") == []
    assert jobctl("secret", "rm", "multi", ok=False).exit_code == 1


def test_a_value_typed_at_a_terminal_is_not_echoed(db) -> None:
    import os
    import pty
    import sys

    pid, fd = pty.fork()
    if pid == 0:  # the child: jobctl on the terminal
        os.execv(
            sys.executable,
            [sys.executable, "-m", "jobctl", "--db", str(db), "secret", "set", "pw"],
        )
    seen = b""

    def read_until(text: bytes) -> bool:
        nonlocal seen
        try:
            seen += os.read(fd, 4096)
        except OSError:
            return True
        return text in seen

    wait_until(lambda: read_until(b"value of pw: "), 20, what="the prompt")
    os.write(fd, SECRET.encode() + b"\n")
    wait_until(lambda: read_until(b"set secret pw"), 20, what="the answer")
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    assert SECRET.encode() not in seen
    cli = MainCli(db, None)
    try:
        assert [(n, v) for n, v, _ in cli.store().commands.secrets_for_copy()] == [
            ("pw", SECRET.encode())
        ]
    finally:
        cli.close()


def test_bad_secret_input_is_exit_2_and_writes_nothing(jobctl: MainCli, tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * (64 * 1024 + 1))
    nul = tmp_path / "nul"
    nul.write_bytes(b"a\0b")
    for args, stdin in (
        (["secret", "set", "big", "--from-file", str(big)], ""),
        (["secret", "set", "nul", "--from-file", str(nul)], ""),
        (["secret", "set", "bad name"], "v"),
        (["secret", "set", "gone", "--from-file", str(tmp_path / "none")], ""),
        (["add", "j", "--manual", "--secret", "NOPE", "--", "true"], ""),
        (["add", "j", "--manual", "--secret", "1X=a", "--", "true"], ""),
        (["add", "j", "--manual", "--secret", "a", "--no-secrets", "--", "true"], ""),
        # a watched job starts no command: nothing to give a secret or a file to
        (["add", "j", "--watch", "--every", "1h", "--secret", "ok"], ""),
        (["add", "j", "--watch", "--every", "1h", "--env-file", "/etc/x"], ""),
    ):
        r = jobctl(*args, ok=False, stdin=stdin)
        assert r.exit_code == 2, (args, r.output)
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert jobctl.json("secret", "list") == []
    assert jobctl.json("list") == []
    for flags in (["--secret", "ok"], ["--env-file", "/etc/x"]):
        r = jobctl("add", "j", "--watch", "--every", "1h", *flags, ok=False)
        assert f"{flags[0]} is about starting a command: not with --watch" in r.stderr
    jobctl("secret", "set", "ok", "--from-file", str(big.parent / "big"), ok=False)
    (tmp_path / "exact").write_bytes(b"y" * 64 * 1024)  # exactly 64 KiB is allowed
    jobctl("secret", "set", "exact", "--from-file", str(tmp_path / "exact"))


def test_an_env_key_that_looks_secret_is_warned_about(jobctl: MainCli) -> None:
    r = jobctl("add", "j", "--manual", "--env", "PGPASSWORD=x", "--env", "HOME2=y", "--", "true")
    warnings = [line for line in r.stderr.splitlines() if "--env" in line]
    assert warnings == [
        "warning: --env PGPASSWORD is shown by show, export and history; use --secret"
    ]
    r = jobctl("edit", "j", "--env", "gh_token=1", "--env", "My_Api_Key=2", "--env", "Z=3")
    assert [line.split()[2] for line in r.stderr.splitlines() if "--env" in line] == [
        "My_Api_Key",
        "gh_token",
    ]


def test_secrets_and_env_file_go_through_export_and_apply(jobctl: MainCli, tmp_path: Path) -> None:
    jobctl("secret", "set", "pw", stdin=SECRET)
    env_file = tmp_path / "job.env"
    jobctl(
        "add", "j", "--manual", "--secret", "DB_PASSWORD=pw", "--env-file", str(env_file),
        "--", "true",
    )  # fmt: skip
    toml = jobctl("export").stdout
    assert '[jobs.j.secrets]\nDB_PASSWORD = "pw"' in toml
    assert f'env_file = "{env_file}"' in toml
    exported = json.loads(jobctl("export", "--format", "json").stdout)
    assert exported["jobs"]["j"]["secrets"] == {"DB_PASSWORD": "pw"}
    # the file applies to itself as no change; a file naming an unknown secret is exit 2
    assert jobctl("apply", "-", stdin=toml).stdout == ""
    bad = toml.replace('DB_PASSWORD = "pw"', 'DB_PASSWORD = "nope"')
    r = jobctl("apply", "-", stdin=bad, ok=False)
    assert r.exit_code == 2 and "nope" in r.stderr
    changed = toml.replace(f'env_file = "{env_file}"\n', "").replace('"pw"', '"pw"\nX = "pw"')
    out = jobctl("apply", "-", stdin=changed).stdout
    assert out.startswith("~ j: ") and "secrets" in out and "env_file" in out
    job = jobctl.json("show", "j")
    assert job["secrets"] == {"DB_PASSWORD": "pw", "X": "pw"} and job["env_file"] is None


def test_apply_naming_an_unknown_secret_is_a_line_of_the_file(jobctl: MainCli) -> None:
    # as every other invalid value of a job file: the line of the key, every error listed,
    # {errors: [{line, message}]} with --json, exit 2 and nothing written
    jobctl("secret", "set", "pw", stdin=SECRET)
    text = (
        "[jobs.a]\n"
        'every = "1h"\n'
        'command = "true"\n'
        'secrets = { DB = "nope" }\n'
        "\n"
        "[jobs.b]\n"
        "manual = true\n"
        'command = "true"\n'
        "\n"
        "[jobs.b.secrets]\n"
        'OK = "pw"\n'
        'API_KEY = "gone"\n'
    )
    r = jobctl("apply", "-", stdin=text, ok=False)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "Error: line 4: job a: secrets: DB: no secret named nope",
        "Error: line 12: job b: secrets: API_KEY: no secret named gone",
        "nothing was applied",
    ]
    r = jobctl("apply", "--json", "-", stdin=text, ok=False)
    assert r.exit_code == 2
    assert json.loads(r.stdout) == {
        "errors": [
            {"line": 4, "message": "job a: secrets: DB: no secret named nope"},
            {"line": 12, "message": "job b: secrets: API_KEY: no secret named gone"},
        ]
    }
    assert jobctl.json("list") == []
    # --dry-run, which writes nothing, says it too (it printed "+ a", exit 0)
    r = jobctl("apply", "--dry-run", "-", stdin=text, ok=False)
    assert r.exit_code == 2 and r.stdout == ""
    assert "Error: line 4: job a: secrets: DB: no secret named nope" in r.stderr
    # an existing job changed to name an unknown secret is refused the same way
    jobctl("apply", "-", stdin=text.replace('"nope"', '"pw"').replace('"gone"', '"pw"'))
    before = jobctl.json("show", "b")
    r = jobctl("apply", "-", stdin=text.replace('"nope"', '"pw"'), ok=False)
    assert r.exit_code == 2
    assert "Error: line 12: job b: secrets: API_KEY: no secret named gone" in r.stderr
    assert jobctl.json("show", "b")["revision"] == before["revision"]
    assert jobctl.json("show", "b")["secrets"] == {"API_KEY": "pw", "OK": "pw"}


def test_db_copy_copies_the_secrets(jobctl: MainCli, tmp_path: Path) -> None:
    jobctl("secret", "set", "pw", stdin=SECRET)
    jobctl("add", "j", "--manual", "--secret", "DB_PASSWORD=pw", "--", "true")
    target = tmp_path / "copy.db"
    jobctl("db", "copy", "--to", str(target))
    other = MainCli(target, jobctl.capsys)
    try:
        assert [s["used_by"] for s in other.json("secret", "list")] == [["j"]]
        assert [(n, v) for n, v, _ in other.store().commands.secrets_for_copy()] == [
            ("pw", SECRET.encode())
        ]
    finally:
        other.close()


# ---------------------------------------------------------------------- a real daemon


def _sent(jobctl: MainCli, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    def sent() -> list[dict[str, Any]] | None:
        got = jobctl.json("notifications", "--state", "sent")
        return got if len(got) >= n else None

    return wait_until(sent, timeout, what=f"{n} notification(s) sent")


def _sign_in(server: Server) -> str:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    a = server.request(
        "POST", "/login", token=None, headers=form, raw=urlencode({"token": TOKEN}).encode()
    )
    assert a.status == 303
    return a.cookies[0].split(";")[0]


def _api_paths(name: str, run_id: int) -> list[str]:
    """Every GET of the API's route table, its parameters filled in (a new route is read
    here without a change to this test)."""
    paths = []
    for method, path, _ in ROUTES:
        if method != "GET":
            continue
        paths.append(
            path.replace("{name}", name).replace("{run_id:int}", str(run_id)).replace("{id}", "1")
        )
    return paths


def test_a_secret_is_found_only_in_the_file_its_job_wrote(
    jobctl: MainCli, start_daemon, db, tmp_path: Path
) -> None:
    written = tmp_path / "written"
    hook_stdin = tmp_path / "hook-stdin"
    env_file = tmp_path / "job.env"
    env_file.write_text("FROM_FILE='file value'\nDB_PASSWORD=overridden by the secret\n")
    with http_receiver() as rec, smtp_receiver() as box:
        jobctl("secret", "set", "pw", stdin=SECRET + "\n")
        jobctl("notify", "add", "hook", "--webhook", rec.url)
        jobctl("notify", "add", "mail", "--email", "ops@example.org", "--smtp", box.address)
        jobctl(
            "add", "leaky", "--manual", "--retries", "0",
            "--secret", "DB_PASSWORD=pw", "--env-file", str(env_file),
            "--notify", "hook:dead", "--notify", "mail:dead",
            "--on-failure", f"cat > {hook_stdin}",
            "--",
            f'printf %s "$DB_PASSWORD" > {written}; echo "password is $DB_PASSWORD";'
            ' echo "from file: $FROM_FILE"; echo "$DB_PASSWORD" >&2; exit 3',
        )  # fmt: skip
        daemon = start_daemon()
        r = jobctl("run", "leaky", "--wait", "--json", ok=False)
        assert r.exit_code == 1
        run_id = int(json.loads(r.stdout)["id"])
        _sent(jobctl, 2)
        wait_until(lambda: hook_stdin.exists() and hook_stdin.read_text(), 10, what="hook")
        webhook_bodies = json.dumps(rec.bodies())
        emails = [m.as_string() for m in box.messages]
    assert written.read_text() == SECRET  # the job had the value
    logs = jobctl("logs", str(run_id)).stdout
    # the value is masked in the stored output, both times it was written
    assert logs.count("***") == 2 and "password is ***" in logs
    assert "from file: file value" in logs  # the env file was read, and the secret won
    assert "***" in hook_stdin.read_text()
    assert len(emails) == 1 and "password is ***" in emails[0]

    shown: dict[str, str] = {
        "webhook bodies": webhook_bodies,
        "email": emails[0],
        "on-failure stdin": hook_stdin.read_text(),
        "daemon log": daemon.log(),
    }
    for args in (
        ["show", "leaky"],
        ["show", "leaky", "--json"],
        ["list"],
        ["list", "--json"],
        ["export"],
        ["export", "--format", "json"],
        ["history", "leaky"],
        ["history", "leaky", "--json"],
        ["runs"],
        ["runs", "--json"],
        ["inspect", str(run_id)],
        ["inspect", str(run_id), "--json"],
        ["logs", str(run_id)],
        ["logs", "leaky"],
        ["status", "--json"],
        ["notifications", "--json"],
        ["notify", "list", "--json"],
        ["secret", "list"],
        ["secret", "list", "--json"],
        ["db", "info", "--json"],
    ):
        shown["jobctl " + " ".join(args)] = jobctl(*args, ok=False).output

    server = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path)).wait_ready()
    try:
        for path in _api_paths("leaky", run_id):
            a = server.request("GET", path)
            # (a manual job has no windows for coverage: 422)
            assert a.status in (200, 422), (path, a.status, a.text)
            shown[f"GET {path}"] = a.text
        cookie = {"Cookie": _sign_in(server)}
        for page in (
            "/",
            "/?q=leaky",
            "/runs",
            "/timeline",
            "/notifications",
            "/jobs/leaky",
            "/jobs/leaky/delete",
            f"/runs/{run_id}",
            f"/runs/{run_id}/events",
        ):
            a = server.request("GET", page, token=None, headers=cookie)
            assert a.status == 200, (page, a.status)
            shown[f"page {page}"] = a.text
        shown["serve log"] = server.log()
    finally:
        server.close()
    leaks = [where for where, text in shown.items() if SECRET in text]
    assert leaks == []
    # what was searched did show the job and its run (the search looked at real answers)
    assert "leaky" in shown["GET /v1/jobs"] and "password is ***" in shown[f"page /runs/{run_id}"]
    assert '"DB_PASSWORD": "pw"' in shown["jobctl show leaky --json"]
    assert "<code>DB_PASSWORD=pw</code>" in shown["page /jobs/leaky"]


def test_a_rotated_secret_reaches_the_next_attempt(
    jobctl: MainCli, start_daemon, tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    go = tmp_path / "go"
    jobctl("secret", "set", "pw", stdin=SECRET)
    # attempt 1 writes the value, then waits for the test to rotate it, and fails; the
    # retry (a new attempt of the same run, no edit in between) writes what it got
    jobctl(
        "add", "j", "--manual", "--retries", "1", "--backoff", "1s",
        "--secret", "DB_PASSWORD=pw",
        "--", f'echo "$DB_PASSWORD" >> {seen}; echo "got $DB_PASSWORD";'
        f' if [ "$JOBCTL_ATTEMPT" = 1 ]; then while [ ! -e {go} ]; do sleep 0.05; done;'
        " exit 1; fi",
    )  # fmt: skip
    start_daemon()
    run_id = jobctl.json("run", "j")["id"]
    wait_until(lambda: seen.exists() and seen.read_text(), 15, what="attempt 1 to start")
    jobctl("secret", "set", "pw", stdin=ROTATED)
    go.write_text("")
    wait_until(
        lambda: jobctl.json("inspect", str(run_id))["state"] in ("succeeded", "dead"),
        20,
        what="the run to end",
    )
    assert seen.read_text().split() == [SECRET, ROTATED]
    assert jobctl.json("inspect", str(run_id))["state"] == "succeeded"
    for attempt in ("1", "2"):
        out = jobctl("logs", str(run_id), "--attempt", attempt).stdout
        assert out == "got ***\n", (attempt, out)
    # the next run, too, gets the value as it is now
    jobctl("run", "j", "--wait")
    assert seen.read_text().split()[-1] == ROTATED


def test_a_secret_that_is_not_utf8_reaches_the_command_as_its_bytes(
    jobctl: MainCli, start_daemon, tmp_path: Path
) -> None:
    """A secret's value is bytes (binary key material, a Latin-1 password): the attempt
    gets exactly them. The daemon holds such a value with surrogates; the spawner's
    message encoded it strictly, and the daemon died at the attempt's spawn."""
    raw = tmp_path / "key"
    raw.write_bytes(b"caf\xe9\x01")
    jobctl("secret", "set", "key", "--from-file", str(raw))
    jobctl("add", "j", "--manual", "--secret", "KEY=key", "--", 'printf %s "$KEY" | od -An -tx1')
    d = start_daemon()
    run_id = jobctl.json("run", "j")["id"]
    ended = ("succeeded", "failed", "dead")
    wait_until(lambda: jobctl.json("inspect", str(run_id))["state"] in ended, 15, what="the run")
    assert jobctl.json("inspect", str(run_id))["state"] == "succeeded"
    assert jobctl("logs", str(run_id)).stdout.split() == ["63", "61", "66", "e9", "01"]
    assert d.proc.poll() is None


def test_an_env_file_value_with_a_nul_byte_fails_the_attempt(
    jobctl: MainCli, start_daemon, tmp_path: Path
) -> None:
    """An environment cannot hold a NUL byte. One in an env-file's value fails the attempt
    naming the line; it was passed on, and what followed it reached the command as a
    variable of its own (the spawner's message separates variables with NUL)."""
    env_file = tmp_path / "nul.env"
    env_file.write_bytes(b"A=x\0INJECTED=1\n")
    jobctl("add", "j", "--manual", "--retries", "0", "--env-file", str(env_file), "--",
           'echo "${INJECTED:-none}"')  # fmt: skip
    start_daemon()
    run_id = jobctl.json("run", "j")["id"]
    ended = ("succeeded", "failed", "dead")
    wait_until(lambda: jobctl.json("inspect", str(run_id))["state"] in ended, 15, what="the run")
    run = jobctl.json("inspect", str(run_id))
    assert run["state"] == "dead"
    assert run["last_error"] == f"env-file: {env_file}: line 1: a value cannot hold a NUL byte"


def test_a_missing_env_file_fails_the_attempt(jobctl: MainCli, start_daemon, tmp_path) -> None:
    missing = tmp_path / "none.env"
    jobctl("add", "j", "--manual", "--retries", "0", "--env-file", str(missing), "--", "true")
    start_daemon()
    r = jobctl("run", "j", "--wait", ok=False)
    assert r.exit_code == 1
    run = jobctl.json("runs", "j")[0]
    assert run["state"] == "dead"
    assert run["last_error"] == f"env-file: {missing}: No such file or directory"
    # the file changed: the next attempt reads it
    missing.write_text("GREETING=hello\n")
    jobctl("edit", "j", "--command", 'test "$GREETING" = hello')
    assert jobctl.json("run", "j", "--wait")["state"] == "succeeded"


# ---------------------------------------------------------------------- the API


def test_the_secrets_routes(jobctl: MainCli, db, tmp_path: Path) -> None:
    server = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path)).wait_ready()
    try:
        a = server.request("PUT", "/v1/secrets/pw", {"value": SECRET})
        assert a.status == 201 and SECRET not in a.text
        a = server.request("PUT", "/v1/secrets/pw", {"value": ROTATED})
        assert a.status == 200 and ROTATED not in a.text
        assert server.request("PUT", "/v1/secrets/pw", {"value": 3}).status == 422
        assert server.request("PUT", "/v1/secrets/pw", {"value": "a\0b"}).status == 422
        assert server.request("PUT", "/v1/secrets/pw", {"value": "\ud800"}).status == 422
        assert server.request("PUT", "/v1/secrets/bad%20name", {"value": "x"}).status == 422
        a = server.request(
            "POST",
            "/v1/jobs",
            {
                "name": "j",
                "trigger": {"kind": "manual"},
                "command": "true",
                "secrets": {"DB_PASSWORD": "pw"},
            },
        )
        assert a.status == 201 and a.json()["secrets"] == {"DB_PASSWORD": "pw"}
        unknown = {"name": "k", "trigger": {"kind": "manual"}, "command": "true"}
        a = server.request("POST", "/v1/jobs", {**unknown, "secrets": {"X": "nope"}})
        assert a.status == 422 and "nope" in a.json()["error"]
        a = server.request("GET", "/v1/secrets")
        assert a.status == 200
        [listed] = a.json()
        assert listed["name"] == "pw" and listed["used_by"] == ["j"]
        assert set(listed) == {"name", "updated_at", "used_by"}
        assert server.request("DELETE", "/v1/secrets/pw").status == 409
        assert server.request("PATCH", "/v1/jobs/j", {"secrets": {}}).json()["secrets"] == {}
        assert server.request("DELETE", "/v1/secrets/pw").status == 204
        assert server.request("DELETE", "/v1/secrets/pw").status == 404
        assert server.request("GET", "/v1/secrets").json() == []
    finally:
        server.close()
    assert SECRET not in (tmp_path / "serve.log").read_text()
