"""Where the database lives and how it is created and refused (jobctl(1), OPTIONS, ENVIRONMENT and FILES)."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import StoreView

from jobctl.cli import main
from jobctl.paths import resolve_db_path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(list(args))
    except SystemExit as e:
        code = 0 if e.code is None else int(e.code)
    else:  # pragma: no cover
        pytest.fail("main() returned instead of exiting")
    out, err = capsys.readouterr()
    return code, out, err


def assert_error(err: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "Traceback" not in err


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private HOME and XDG_DATA_HOME, no JOBCTL_DB."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    return tmp_path


@pytest.fixture
def umask0() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def job_names(capsys: pytest.CaptureFixture[str], *db_args: str) -> list[str]:
    code, out, err = run(capsys, *db_args, "list", "--json")
    assert code == 0, err
    return [j["name"] for j in json.loads(out)]


# ---------------------------------------------------------------------- resolution


def test_resolution_order_pure(tmp_path: Path) -> None:
    env = {"JOBCTL_DB": str(tmp_path / "env.db")}
    assert resolve_db_path(str(tmp_path / "opt.db"), env) == tmp_path / "opt.db"
    assert resolve_db_path(None, env) == tmp_path / "env.db"
    assert resolve_db_path(None, {"JOBCTL_DB": ""}).name == "jobctl.db"
    assert resolve_db_path("~/x.db", {}) == Path.home() / "x.db"


def test_default_is_platformdirs_user_data(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "add", "d", "--manual", "--", "true")
    assert code == 0, err
    expected = home / "xdg" / "jobctl" / "jobctl.db"
    assert expected.is_file()
    assert job_names(capsys) == ["d"]


def test_env_beats_default_and_option_beats_env(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env_db = home / "env" / "e.db"
    opt_db = home / "opt" / "o.db"
    monkeypatch.setenv("JOBCTL_DB", str(env_db))
    assert run(capsys, "add", "from-env", "--manual", "--", "true")[0] == 0
    assert run(capsys, "--db", str(opt_db), "add", "from-opt", "--manual", "--", "true")[0] == 0
    assert env_db.is_file() and opt_db.is_file()
    assert not (home / "xdg" / "jobctl" / "jobctl.db").exists()
    assert job_names(capsys) == ["from-env"]
    assert job_names(capsys, "--db", str(opt_db)) == ["from-opt"]
    monkeypatch.delenv("JOBCTL_DB")
    assert job_names(capsys) == []


# ---------------------------------------------------------------------- permissions


def test_file_0600_folder_0700_under_umask_0(
    home: Path, umask0: None, capsys: pytest.CaptureFixture[str]
) -> None:
    db = home / "new" / "deeper" / "j.db"
    code, _, err = run(capsys, "--db", str(db), "add", "j", "--manual", "--", "true")
    assert code == 0, err
    assert mode(db) == 0o600
    assert mode(db.parent) == 0o700
    with StoreView(db) as store:  # an open connection keeps -wal and -shm around
        store.enqueue_run("j", __import__("jobctl.clock").clock.SystemClock().now())
        for suffix in ("-wal", "-shm"):
            side = db.with_name(db.name + suffix)
            assert side.exists(), suffix
            assert mode(side) == 0o600, (suffix, oct(mode(side)))
    # a file created under umask 0 by the default path too
    code, _, err = run(capsys, "add", "j", "--manual", "--", "true")
    assert code == 0, err
    default = home / "xdg" / "jobctl" / "jobctl.db"
    assert mode(default) == 0o600 and mode(default.parent) == 0o700


def test_wal_mode_and_schema_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "j.db"
    assert run(capsys, "--db", str(db), "add", "j", "--manual", "--", "true")[0] == 0
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 1
    finally:
        conn.close()


def test_existing_file_mode_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "j.db"
    assert run(capsys, "--db", str(db), "add", "j", "--manual", "--", "true")[0] == 0
    os.chmod(db, 0o640)
    assert run(capsys, "--db", str(db), "list")[0] == 0
    assert mode(db) == 0o640


# ---------------------------------------------------------------------- refusals


def test_garbage_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "garbage.db"
    data = b"this is not a database\n" * 200
    db.write_bytes(data)
    for args in (["list"], ["add", "j", "--manual", "--", "true"], ["status", "--json"]):
        code, out, err = run(capsys, "--db", str(db), *args)
        assert code == 1, (args, err)
        assert_error(err)
        assert out == ""
    assert db.read_bytes() == data


def test_directory_as_db_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--db", str(tmp_path), "list")
    assert code in (1, 2)
    assert_error(err)


def test_uncreatable_folder_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run(
        capsys, "--db", str(blocker / "sub" / "j.db"), "add", "j", "--manual", "--", "x"
    )
    assert code == 1
    assert_error(err)


READING = [
    ["list"],
    ["list", "--json"],
    ["runs"],
    ["runs", "--json"],
    ["status"],
    ["status", "--json"],
    ["next", "j"],
    ["show", "j"],
    ["logs", "1"],
]


@pytest.mark.parametrize("args", READING)
def test_reading_commands_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    db = tmp_path / "nonexistent" / "sub" / "x.db"
    code, out, err = run(capsys, "--db", str(db), *args)
    assert not db.parent.parent.exists()  # no folder, no file
    assert err.splitlines()[0] == f"warning: no database at {db}"
    if args[0] in ("show", "next", "logs"):  # as on an empty database: not found
        assert code == 1 and err.splitlines()[1].startswith("Error: ")
    else:
        assert code == 0, err
    if args == ["list", "--json"] or args == ["runs", "--json"]:
        assert json.loads(out) == []
    if args == ["status", "--json"]:
        assert json.loads(out)["daemons"] == []


def test_empty_db_option_is_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["list"], ["add", "j", "--manual", "--", "true"]):
        code, _, err = run(capsys, "--db", "", *args)
        assert code == 2, err
        assert_error(err)


def test_newer_schema_is_refused_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "future.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO jobs (name) VALUES ('from-the-future')")
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    data = db.read_bytes()
    for args in (["list", "--json"], ["add", "j", "--manual", "--", "true"], ["status"]):
        code, out, err = run(capsys, "--db", str(db), *args)
        assert code == 1, (args, err)
        assert_error(err)
        assert "99" in err
        assert out == ""
    assert db.read_bytes() == data
    assert not db.with_name(db.name + "-wal").exists()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()


def test_newer_schema_in_wal_mode_is_refused_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "future.db"
    assert run(capsys, "--db", str(db), "add", "j", "--manual", "--", "true")[0] == 0
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    data = db.read_bytes()
    code, _, err = run(capsys, "--db", str(db), "run", "j")
    assert code == 1
    assert_error(err)
    assert db.read_bytes() == data


@pytest.mark.parametrize("scheme", ["POSTGRESQL", "Postgres", "postgresql"])
def test_a_url_in_any_case_is_postgresql_never_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], scheme: str
) -> None:
    # one rule for the whole program: the option, the store and ``db info`` agree that
    # POSTGRESQL://… is a server (unreachable here: exit 1), and no file is made for it
    monkeypatch.chdir(tmp_path)
    url = f"{scheme}://nobody@127.0.0.1:1/jobs"
    assert resolve_db_path(url) == url
    code, _, err = run(capsys, "--db", url, "db", "info")
    assert code == 1, err
    assert "127.0.0.1" in err and "jobs.db" not in err
    assert list(tmp_path.iterdir()) == []
