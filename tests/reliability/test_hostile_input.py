"""Hostile arguments for every command, and broken database files."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rhelpers import assert_clean_failure, cli_main, dump, integrity

from jobctl.cli import cli as click_cli

#: commands that never return (daemon, serve) or touch the system (service) are driven
#: elsewhere (tests/test_daemon.py, tests/test_web_*.py, tests/test_service.py); check
#: exits 0-3 by the Nagios convention, its CRITICAL (2) without an Error: line
#: (tests/test_notify_cli.py); exec runs its COMMAND and exits with that command's code
#: (126 for one that cannot be executed, as a shell does; README "Watching jobs that
#: jobctl does not run"), driven by tests/test_watched_jobs.py
SKIP = {"daemon", "serve", "service", "check", "exec"}
#: every command, each module imported as its command is looked up (the group is lazy)
_CTX = click.Context(click_cli)
COMMANDS = sorted(set(click_cli.list_commands(_CTX)) - SKIP)


WAITING = {"--wait", "--follow"}


def _options(name: str) -> list[str]:
    cmd = click_cli.get_command(_CTX, name)
    assert cmd is not None
    out = []
    for p in cmd.params:
        # not the options that wait for a run to end (no daemon runs here): --follow
        # implies --wait
        out += [o for o in getattr(p, "opts", []) if o.startswith("-") and o not in WAITING]
    return out


OPTIONS = {name: _options(name) for name in COMMANDS}

hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=300, max_size=2000),
    st.binary(max_size=30).map(os.fsdecode),  # not valid UTF-8: surrogate escapes
    st.sampled_from(
        [
            "",
            " ",
            "-",
            "--",
            "0",
            "-1",
            "99999999999999999999",
            "1e309",
            "nan",
            "inf",
            "* * * * *",
            "61 * * * *",
            "*/0 * * * *",
            "5-3 * * * *",
            "@reboot",
            "@yearly",
            "1/5 * * * *",
            "0 0 31 2 *",
            "* * * * * *",
            "Europe/Nowhere",
            "../../etc/passwd",
            "UTC",
            "Mars/Olympus",
            "1h30m",
            "0s",
            "-5m",
            "1w2d",
            "2038-01-19T03:14:08",
            "9999-12-31T23:59:59",
            "0001-01-01",
            "A=",
            "=B",
            "A",
            "A=B=C",
            "\x00",
            "a\nb",
            "[bold]x[/bold]",
            "\x1b[31mred",
            "é" * 64,
            "a" * 65,
            "seed",
            "1",
            "2",
            "3",
        ]
    ),
)


def _argv(name: str) -> st.SearchStrategy[list[str]]:
    token = st.one_of(hostile_text, st.sampled_from(OPTIONS[name] or ["--json"]))
    return st.lists(token, max_size=8).map(lambda xs: [name, *xs])


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    """A database with jobs in every state and runs in several states."""
    db = tmp_path_factory.mktemp("hostile") / "seed.db"
    base = ["--db", str(db)]
    for argv in (
        ["add", "seed", "--every", "1h", "--", "true"],
        ["add", "cron", "--cron", "*/5 * * * *", "--description", "[bold]d", "--", "echo"],
        ["add", "man", "--manual", "--lock", "L", "--", "false"],
        ["add", "paused", "--every", "1d", "--paused", "--", "true"],
        ["run", "man", "--key", "k1"],
        ["run", "seed"],
        ["cancel", "2"],
    ):
        code, _, err = cli_main([*base, *argv])
        assert code == 0, (argv, err)
    return db


@pytest.mark.long
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_command_survives_hostile_arguments(seeded, tmp_path, data):
    name = data.draw(st.sampled_from(COMMANDS), label="command")
    argv = data.draw(_argv(name), label="argv")
    db = tmp_path / "h.db"
    if not db.exists():
        shutil.copy(seeded, db)
    before = dump(db)
    code, out, err = cli_main(["--db", str(db), *argv])
    assert_clean_failure(code, out, err)
    if code != 0:
        assert dump(db) == before, (argv, err)  # a refused command changes nothing


@pytest.mark.parametrize(
    "argv",
    [
        ["service"],
        ["service", "bogus"],
        ["daemon", "--workers", "0"],
        ["daemon", "--lease", "x"],
        ["daemon", "--reserved", "3", "--workers", "2"],
        ["daemon", "--reserved", "1"],
        ["nope"],
        [],
        ["--db"],
        ["add"],
        ["add", "x", "--", "true"],
        ["run", "x", "--wait"],
    ],
)
def test_usage_errors_of_the_other_commands(seeded, tmp_path, argv):
    db = tmp_path / "h.db"
    shutil.copy(seeded, db)
    before = dump(db)
    code, out, err = cli_main(["--db", str(db), *argv])
    assert code in (1, 2) or argv == [], (code, err)
    assert "Traceback" not in out + err and "internal error" not in err
    if code:
        assert any(line.startswith("Error:") for line in err.splitlines()), (argv, out, err)
    assert dump(db) == before


def _cli_subprocess(db: Path, *args: str, **kw):
    return subprocess.run(
        [sys.executable, "-c", "from jobctl.cli import main; main()", "--db", str(db), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        **kw,
    )


def _check_refused(
    db: Path, expect: str, commands=(("list",), ("add", "x", "--manual", "--", "true"), ("daemon",))
):
    raw = db.read_bytes()
    for argv in commands:
        r = _cli_subprocess(db, *argv)
        assert r.returncode == 1, (argv, r.returncode, r.stderr)
        assert r.stderr.startswith("Error:") and "Traceback" not in r.stderr, r.stderr
        assert expect in r.stderr, r.stderr
        assert db.read_bytes() == raw  # never modified


def test_garbage_file(tmp_path):
    db = tmp_path / "garbage.db"
    db.write_bytes(os.urandom(8192))
    db.chmod(0o600)
    _check_refused(db, "not a database")


@pytest.mark.sqlite_only
def test_truncated_file(jobctl, db):
    for i in range(30):
        jobctl("add", f"j{i}", "--every", "1h", "--description", "x" * 3000, "--", "true")
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    raw = db.read_bytes()
    for argv in (("list",), ("show", "j29"), ("add", "y", "--manual", "--", "true"), ("daemon",)):
        r = _cli_subprocess(db, *argv)
        assert r.returncode == 1, (argv, r.stdout, r.stderr)
        assert r.stderr.startswith("Error:") and "Traceback" not in r.stderr, r.stderr
        assert "malformed" in r.stderr or "not a database" in r.stderr, r.stderr
    assert db.read_bytes() == raw


@pytest.mark.sqlite_only
def test_newer_schema_version_is_refused_untouched(jobctl, db):
    jobctl("add", "a", "--manual", "--", "true")
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    _check_refused(db, "newer than this jobctl")


def _as_user(uid, argv):
    """cli_main in a forked child that runs as ``uid`` (the interpreter may be unreadable
    to that user, so no exec)."""
    import json

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            res = cli_main(argv)
            os.write(w, json.dumps(res).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return tuple(json.loads(data))


def test_read_only_folder(tmp_path):
    """As another user, so permissions apply even when the tests run as root."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="jobctl-ro-"))  # outside pytest's 0700 tmp root
    top.chmod(0o755)
    folder = top / "ro"
    folder.mkdir()
    db = folder / "jobctl.db"
    r = _cli_subprocess(db, "add", "a", "--manual", "--", "true")
    assert r.returncode == 0, r.stderr
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for p in (Path(str(db) + "-wal"), Path(str(db) + "-shm")):
        p.unlink(missing_ok=True)
    user = None
    if os.geteuid() == 0:
        os.chown(folder, 65534, 65534)
        os.chown(db, 65534, 65534)
        user = 65534
    db.chmod(0o400)
    folder.chmod(0o500)
    raw = db.read_bytes()
    try:
        for argv in (("list",), ("add", "b", "--manual", "--", "true"), ("run", "a")):
            code, _out, err = _as_user(user, ["--db", str(db), *argv])
            assert "Traceback" not in err and "internal error" not in err, err
            if argv == ("list",) and code == 0:
                continue  # reading may work without the -shm file
            assert code == 1, (argv, err)
            assert err.startswith("Error:"), err
        assert db.read_bytes() == raw
    finally:
        folder.chmod(0o700)
    assert integrity(db) == "ok"
    shutil.rmtree(top)
