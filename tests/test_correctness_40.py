"""What a new user and outside validators found (issue 40), command-line cases: each fails
without its fix. They run on the suite's backend (``JOBCTL_TEST_BACKEND``)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from clihelpers import Jobctl

from jobctl.cli import cli as click_cli


@pytest.fixture
def cli(db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Jobctl:
    """The real CLI through its error boundary, on the suite's backend."""
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    return Jobctl(db, capsys)


def one_error(err: str, expected: str) -> None:
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert lines == [f"Error: {expected}"], err


# ---------------------------------------------------------------------- 21: edit --cron ''


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("--cron", "the cron expression is empty"),
        ("--every", "the interval is empty"),
        ("--at", "the time is empty"),
        ("--in", "the delay is empty"),
        ("--after", "the --after job is empty"),
    ],
)
def test_an_empty_trigger_says_so_in_edit_as_in_add(cli: Jobctl, flag: str, said: str) -> None:
    """``edit j --cron ''`` is an empty expression, not an absent flag ('nothing to change')."""
    cli.ok("add", "j", "--cron", "@daily", "--", "true")
    before = cli.json("show", "j")
    for r in (cli("edit", "j", flag, ""), cli("add", "k", flag, " ", "--", "true")):
        assert r.code == 2
        one_error(r.err, said)
    assert cli.json("show", "j") == before
    assert [j["name"] for j in cli.json("list")] == ["j"]


# ---------------------------------------------------------------------- 24: click's voice


def _commands() -> list[tuple[list[str], click.Command]]:
    out: list[tuple[list[str], click.Command]] = []

    def walk(path: list[str], cmd: click.Command) -> None:
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):  # the top group loads its commands lazily
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                walk([*path, name], sub)

    walk([], click_cli)
    return out


def test_help_says_integer_ranges_in_words(cli: Jobctl) -> None:
    """No ``[-9223372036854775808<=x<=9223372036854775807]`` after an integer option: a
    range shows only where it says something (``1 to 4096``, ``at least 1``)."""
    for path, _ in _commands():
        r = cli(*path, "--help", db=False)
        assert r.code == 0, path
        flat = " ".join(r.out.split())
        assert "<=x" not in flat and "x<=" not in flat, (path, r.out)
        assert "9223372036854775807" not in flat.replace(" ", ""), path
    daemon = " ".join(cli("daemon", "--help", db=False).out.split())
    assert "[default: 4; 1 to 4096]" in daemon
    assert "at least 1" in " ".join(cli("runs", "--help", db=False).out.split())


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["add", "j", "--every", "1h", "--retries", "cpu", "--", "true"],
            "invalid --retries 'cpu': use a whole number",
        ),
        (
            ["add", "j", "--every", "1h", "--priority", "1.5", "--", "true"],
            "invalid --priority '1.5': use a whole number",
        ),
        (
            ["add", "j", "--every", "1h", "--retries", "99999999999999999999", "--", "true"],
            "invalid --retries 99999999999999999999: beyond the 64-bit integer range",
        ),
        (["runs", "--limit", "0"], "invalid --limit 0: must be at least 1"),
        (["runs", "--limit", "ten"], "invalid --limit 'ten': use a whole number"),
        (["daemon", "--workers", "5000"], "invalid --workers 5000: must be at most 4096"),
        (["logs", "1", "--attempt", "x"], "invalid --attempt 'x': use a whole number"),
    ],
)
def test_a_bad_integer_is_said_in_jobctls_words(cli: Jobctl, args: list[str], said: str) -> None:
    r = cli(*args)
    assert r.code == 2
    one_error(r.err, said)
    assert cli.json("list") == []


def test_history_has_a_header_row(cli: Jobctl) -> None:
    cli.ok("add", "j", "--manual", "--", "true")
    cli.ok("edit", "j", "--retries", "4")
    lines = cli.ok("history", "j").out.splitlines()
    assert lines[0].split() == ["REV", "AT", "WHO", "SOURCE", "CHANGES"]
    assert [line.split()[0] for line in lines[1:]] == ["1", "2"]
    assert lines[2].endswith("retries 2 -> 4")


def test_inspect_name_is_the_jobs_latest_run_as_logs_name(cli: Jobctl, start_daemon) -> None:
    cli.ok("add", "j", "--manual", "--", "echo one")
    r = cli("inspect", "j")
    assert r.code == 1
    one_error(r.err, "job 'j' has no run yet")
    waiting = cli.json("run", "j")["id"]
    # no attempt yet: the newest run, with why it waits
    shown = cli.json("inspect", "j")
    assert shown["id"] == waiting and shown["waiting"]["reason"] == "no_daemon"
    start_daemon()
    cli.json("run", "j", "--wait")
    last = cli.json("run", "j", "--wait")["id"]
    assert cli.json("inspect", "j") == cli.json("inspect", str(last))
    assert cli.json("inspect", "j")["attempts"][0]["output_bytes"] == 4
    assert cli.json("logs", "j")["run_id"] == last
    human = cli.ok("inspect", "j").out
    assert human.splitlines()[0].split() == ["run", str(last)]
    for bad, code in (("bad name", 2), ("nosuch", 1)):
        r = cli("inspect", bad)
        assert r.code == code, (bad, r)


# ---------------------------------------------------------------------- 17: show NAME


def test_show_names_the_channels_the_grace_and_the_warn_after(cli: Jobctl) -> None:
    cli.ok("notify", "add", "ops", "--command", "true")
    cli.ok("notify", "add", "mail", "--email", "ops@example.org", "--smtp", "127.0.0.1:25")
    cli.ok("add", "told", "--every", "1h", "--", "true")
    cli.ok(
        "edit",
        "told",
        "--notify",
        "ops:dead,late",
        "--notify",
        "mail",
        "--grace",
        "10m",
        "--warn-after",
        "90m",
    )
    fields = _show_fields(cli, "told")
    assert fields["notify"] == "ops:dead,late; mail:dead,recovered,missed,late,anomaly,paused"
    assert (fields["grace"], fields["warn after"]) == ("10m", "1h30m")
    cli.ok("add", "quiet", "--manual", "--", "true")
    fields = _show_fields(cli, "quiet")
    assert fields["notify"] == "- (channels with --default)"
    assert (fields["grace"], fields["warn after"]) == ("-", "-")


def _show_fields(cli: Jobctl, name: str) -> dict[str, str]:
    head = cli.ok("show", name).out.split("\n\n", 1)[0]
    return {k: v.strip() for k, _, v in (line.partition("  ") for line in head.splitlines())}
