"""Help, completion and bad input through the real error boundary, ``jobctl.cli.main(argv)``
(jobctl(1), EXIT STATUS), and the installed `jobctl` entry point as a process.

Every test uses a real SQLite file in ``tmp_path`` (the ``jobctl`` fixture, from clihelpers.py).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clihelpers import (
    Jobctl,
    assert_one_error_line,
    cli_jobctl,
)

from jobctl.cli import main


@pytest.fixture
def jobctl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Jobctl:
    return cli_jobctl(tmp_path, capsys, monkeypatch)


# ---------------------------------------------------------------------- completion / help / version


@pytest.mark.parametrize(
    ("shell", "marker"), [("bash", "complete"), ("zsh", "compdef"), ("fish", "complete")]
)
def test_completion(jobctl: Jobctl, shell: str, marker: str) -> None:
    r = jobctl.ok("completion", shell)
    assert marker in r.out and "_JOBCTL_COMPLETE" in r.out
    assert r.out.endswith("\n")


def test_completion_bad_shell(jobctl: Jobctl) -> None:
    r = jobctl("completion", "tcsh")
    assert r.code == 2
    assert_one_error_line(r)


def test_version_and_help(jobctl: Jobctl) -> None:
    r = jobctl("--version", db=False)
    assert r.code == 0 and r.out.startswith("jobctl ")
    r = jobctl("--help", db=False)
    assert r.code == 0
    for cmd in (
        "add",
        "edit",
        "list",
        "show",
        "next",
        "runs",
        "logs",
        "run",
        "cancel",
        "pause",
        "resume",
        "rm",
        "retry-dead",
        "prune",
        "status",
        "daemon",
        "completion",
    ):
        assert cmd in r.out


def test_every_command_has_help(jobctl: Jobctl) -> None:
    import click

    from jobctl.cli import cli

    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):  # each command's module, imported as it is named
        cmd = cli.get_command(ctx, name)
        assert cmd is not None and cmd.help, name
        r = jobctl(name, "--help", db=False)
        assert r.code == 0 and "Usage:" in r.out, name


def test_help_speaks_jobctl_not_click(jobctl: Jobctl) -> None:
    # every option's placeholder is jobctl's (N, minute|hour), never click's INTEGER or
    # [minute|hour], in every command's help and so in the man page made from it
    import re

    import click

    from jobctl.cli import cli

    def walk(cmd: click.Command, path: list[str]) -> Iterator[list[str]]:
        yield path
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                yield from walk(sub, [*path, name])

    leaks = re.compile(r"\bINTEGER\b|\bFLOAT\b|\[[a-z]+(\|[a-z]+)+\]|\{[a-z]+(\|[a-z]+)+\}")
    for path in walk(cli, []):
        out = jobctl(*path, "--help", db=False).out
        assert not leaks.search(out), (path, leaks.search(out))
    assert "  --by minute|hour " in jobctl("plan", "--help", db=False).out
    assert "Usage: jobctl rollback [OPTIONS] NAME REVISION" in jobctl("rollback", "--help").out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "--by", "day"], "Error: invalid --by 'day': use minute|hour"),
        (["export", "--format", "yaml"], "Error: invalid --format 'yaml': use toml|json"),
        (["completion", "tcsh"], "Error: invalid SHELL 'tcsh': use bash|zsh|fish"),
        (["daemon", "--log-level", "x"], "Error: invalid --log-level 'x': use debug|info|warning"),
    ],
)
def test_a_word_not_among_an_options_words_is_said_in_jobctls_words(
    jobctl: Jobctl, args: list[str], message: str
) -> None:
    r = jobctl(*args)
    assert (r.code, r.out, r.err) == (2, "", message + "\n")


# ---------------------------------------------------------------------- bad input


BAD_ADD = [
    (["bad name", "--manual"], 2),
    (["-leading", "--manual"], 2),
    (["x" * 65, "--manual"], 2),
    (["ok", "--cron", "* * * * * *"], 2),
    (["ok", "--cron", "5/10 * * * *"], 2),
    (["ok", "--cron", "5-3 * * * *"], 2),
    (["ok", "--cron", "*/0 * * * *"], 2),
    (["ok", "--cron", "61 * * * *"], 2),
    (["ok", "--cron", "@fortnightly"], 2),
    (["ok", "--every", "5q"], 2),
    (["ok", "--every", "0"], 2),
    (["ok", "--every", "-5m"], 2),
    (["ok", "--in", "soon"], 2),
    (["ok", "--at", "tomorrow-ish"], 2),
    (["ok", "--cron", "@daily", "--tz", "Mars/Olympus"], 2),
    (["ok", "--manual", "--env", "NOEQUALS"], 2),
    (["ok", "--manual", "--env", "1A=x"], 2),
    (["ok", "--manual", "--env", "A-B=x"], 2),
    (["ok", "--cron", "@reboot", "--every", "5m"], 2),
    (["ok", "--manual", "--at", "2031-01-01"], 2),
    (["ok"], 2),
    (["ok", "--cron", "@daily", "--after-completion"], 2),
    (["ok", "--cron", "@daily", "--start", "2031-01-01"], 2),
    (["ok", "--manual", "--catchup", "sometimes"], 2),
    (["ok", "--manual", "--overlap", "maybe"], 2),
    (["ok", "--manual", "--retries", "-1"], 2),
    (["ok", "--manual", "--retries", "two"], 2),
    (["ok", "--manual", "--catchup-limit", "0"], 2),
    (["ok", "--manual", "--timeout", "forever"], 2),
    (["ok", "--manual", "--backoff", "0"], 2),
    (["ok", "--manual", "--unknown-flag"], 2),
    (["ok", "--manual", "--cwd", "bad\udcff"], 2),
    (["ok", "--manual", "--cwd", ""], 2),
    (["ok", "--manual", "--shell", ""], 2),
    (["ok", "--at", "2020-01-01T00:00Z"], 2),
    (["ok\udcff", "--manual"], 2),
    (["ok", "--manual", "--description", "caf\udce9"], 2),
    (["dup", "--manual"], 1),
]


@pytest.mark.parametrize(("args", "code"), BAD_ADD)
def test_add_bad_input(jobctl: Jobctl, args: list[str], code: int) -> None:
    jobctl.ok("add", "dup", "--cron", "@daily", "--", "true")
    before = jobctl.json("list")
    r = jobctl("add", *args, "--", "true")
    assert r.code == code, (args, r)
    assert_one_error_line(r)
    assert r.out == ""
    assert jobctl.json("list") == before


@pytest.mark.parametrize("command", [["caf\udce9"], ["echo", "\udcff"], [""], ["   "]])
def test_add_bad_command(jobctl: Jobctl, command: list[str]) -> None:
    r = jobctl("add", "ok", "--manual", "--", *command)
    assert r.code == 2, r
    assert_one_error_line(r)
    assert jobctl.json("list") == []


def test_add_without_command(jobctl: Jobctl) -> None:
    r = jobctl("add", "ok", "--manual")
    assert r.code == 2
    assert_one_error_line(r)


@pytest.mark.parametrize(
    "args",
    [
        ["show", "nope"],
        ["edit", "nope", "--retries", "1"],
        ["rm", "nope"],
        ["pause", "nope"],
        ["resume", "nope"],
        ["run", "nope"],
        ["next", "nope"],
        ["runs", "nope"],
        ["logs", "999"],
        ["cancel", "999"],
        ["retry-dead", "999"],
        ["cancel", "nope"],
    ],
)
def test_not_found_is_exit_1(jobctl: Jobctl, args: list[str]) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    before = (jobctl.json("list"), jobctl.json("runs"))
    r = jobctl(*args)
    assert r.code == 1, r
    assert_one_error_line(r)
    assert (jobctl.json("list"), jobctl.json("runs")) == before


@pytest.mark.parametrize(
    "args",
    [
        ["logs", "not a name"],  # neither a run id nor a job name (jobctl(1), jobctl logs)
        ["logs", "1", "--attempt", "x"],
        ["runs", "--state", "bogus"],
        ["runs", "--limit", "0"],
        ["show", "j", "--limit", "0"],
        ["nosuchcommand"],
        ["list", "--bogus"],
        ["completion"],
    ],
)
def test_usage_errors_are_exit_2(jobctl: Jobctl, args: list[str]) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    before = jobctl.json("list")
    r = jobctl(*args)
    assert r.code == 2, r
    assert_one_error_line(r)
    assert jobctl.json("list") == before


def test_non_utf8_argument_anywhere(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--", "true")
    before = jobctl.json("list")
    for args in (
        ["show", "\udcff"],
        ["run", "j", "--key", "k\udcff"],
        ["edit", "j", "--description", "\udcff"],
        ["next", "--cron", "\udcff"],
    ):
        r = jobctl(*args)
        assert r.code == 2, (args, r)
        assert_one_error_line(r)
    assert jobctl.json("list") == before


def test_no_arguments_prints_help(jobctl: Jobctl) -> None:
    r = jobctl(db=False)
    assert "Usage:" in r.out
    assert r.code in (0, 2)


# ---------------------------------------------------------------------- the installed entry point


def _run_jobctl(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    exe = Path(sys.executable).with_name("jobctl")
    full_env = {**os.environ, "TZ": "UTC", **(env or {})}
    full_env.pop("JOBCTL_DEBUG", None)
    return subprocess.run(
        [str(exe), "--db", str(db), *args],
        capture_output=True,
        env=full_env,
        timeout=30,
        check=False,
    )


def test_entry_point_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    p = _run_jobctl(db, "add", "j", "--cron", "@hourly", "--", "echo", "a b")
    assert p.returncode == 0, p.stderr
    p = _run_jobctl(db, "list", "--json")
    assert p.returncode == 0
    jobs = json.loads(p.stdout)
    assert jobs[0]["command"] == "echo 'a b'"


def test_entry_point_errors(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    p = _run_jobctl(db, "add", "j", "--cron", "5-3 * * * *", "--", "true")
    assert p.returncode == 2
    assert p.stderr.decode().startswith("Error: ") and len(p.stderr.splitlines()) == 1
    assert _run_jobctl(db, "add", "j", "--manual", "--", "true").returncode == 0
    p = _run_jobctl(db, "show", "nope")
    assert p.returncode == 1 and p.stderr.startswith(b"Error: ")


def test_entry_point_non_utf8_bytes(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    exe = Path(sys.executable).with_name("jobctl")
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    p = subprocess.run(
        [
            os.fsencode(str(exe)),
            b"--db",
            os.fsencode(str(db)),
            b"add",
            b"j\xff",
            b"--manual",
            b"--",
            b"true",
        ],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert p.returncode == 2, p
    assert p.stderr.startswith(b"Error: ") and len(p.stderr.splitlines()) == 1
    assert b"Traceback" not in p.stderr


def test_entry_point_broken_pipe(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    exe = Path(sys.executable).with_name("jobctl")
    p = subprocess.run(
        f"{shlex.quote(str(exe))} --help | head -c 1 >/dev/null",
        shell=True,
        capture_output=True,
        timeout=30,
        check=False,
        env={**os.environ, "JOBCTL_DB": str(db)},
    )
    assert b"Traceback" not in p.stderr


def test_logs_on_a_terminal_escapes_control_sequences(capsys):
    from jobctl import output

    output.print_output(b"ok\n\x1b[31mred\x1b[0m\tx\n", tty=True)
    assert capsys.readouterr().out == "ok\n\\x1b[31mred\\x1b[0m\tx\n"
    output.print_output(b"raw\x1b[0m", tty=False)
    assert capsys.readouterr().out == "raw\x1b[0m"


def test_absurd_duration_is_bad_input_not_an_internal_error(tmp_path, capsys):

    with pytest.raises(SystemExit) as e:
        main(["--db", str(tmp_path / "j.db"), "add", "big", "--every", "600000w", "--", "true"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: invalid duration") and "internal" not in err
