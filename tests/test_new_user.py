"""What a new user tripped on (issue 11): each case fails without its fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from clihelpers import Jobctl

from jobctl import output
from jobctl.cli import completion_script

HUGE = "99999999999999999999"


@pytest.fixture
def jobctl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Jobctl:
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    return Jobctl(tmp_path / "jobctl.db", capsys)


def one_error(err: str) -> None:
    lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "internal error" not in err and "Traceback" not in err


# ---------------------------------------------------------------------- 1 and 14


@pytest.mark.parametrize(
    "args",
    [
        ["add", "j", "--manual", "--retries", HUGE, "--", "true"],
        ["add", "j", "--manual", "--priority", HUGE + "999", "--", "true"],
        ["add", "j", "--manual", "--catchup-limit", HUGE, "--", "true"],
        ["edit", "m", "--priority", "-" + HUGE],
        ["logs", HUGE],
        ["logs", "1", "--attempt", HUGE],
        ["cancel", HUGE],
        ["retry-dead", HUGE],
        ["runs", "--limit", HUGE],
        ["show", "m", "--limit", HUGE],
        ["run", "m", "--priority", HUGE],
        ["next", "--cron", "@daily", "--from", "9999-12-31T23:59:00Z"],
        ["next", "--every", "1h", "--from", "9999-12-31T23:59:00Z"],
        ["add", "j", "--at", "9999-12-31T23:59:00Z", "--", "true"],
        ["add", "j", "--every", HUGE, "--", "true"],
    ],
)
def test_integers_beyond_64_bits_are_invalid_input(jobctl: Jobctl, args: list[str]) -> None:
    jobctl.ok("add", "m", "--manual", "--", "true")
    r = jobctl(*args)
    assert r.code == 2, (args, r)
    one_error(r.err)


# ---------------------------------------------------------------------- 2


def test_edit_rename_to_a_taken_name_says_so(jobctl: Jobctl) -> None:
    jobctl.ok("add", "a", "--manual", "--", "true")
    jobctl.ok("add", "backup", "--manual", "--", "true")
    r = jobctl("edit", "a", "--rename", "backup")
    assert r.code == 1
    assert r.err == "Error: a job named 'backup' already exists\n"
    assert jobctl("edit", "a", "--rename", "a").code == 0  # its own name is no conflict


# ---------------------------------------------------------------------- 4


def _complete(shell: str, words: str, tmp_path: Path) -> str:
    env = {
        **os.environ,
        "_JOBCTL_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        "JOBCTL_DB": str(tmp_path / "none.db"),
    }
    if shell == "fish":
        env["COMP_CWORD"] = "" if words.endswith(" ") else words.split()[-1]
    proc = subprocess.run(
        [sys.executable, "-c", "from jobctl.cli import cli; cli(prog_name='jobctl')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc.stdout


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("jobctl add j --catchup ", {"skip", "once", "all"}),
        ("jobctl edit j --overlap ", {"forbid", "allow", "replace"}),
        ("jobctl runs --state ", {"pending", "leased", "dead", "skipped"}),
        ("jobctl add j --tz Europe/Be", {"Europe/Berlin"}),
        ("jobctl next --tz America/New_", {"America/New_York"}),
    ],
)
def test_completion_offers_choices(tmp_path: Path, words: str, expected: set[str]) -> None:
    lines = _complete("bash", words, tmp_path).splitlines()
    values = {line.split(",", 1)[1] for line in lines if line.startswith("plain,")}
    assert expected <= values, lines
    assert not (tmp_path / "none.db").exists()


def test_fish_keeps_a_description_with_commas_whole() -> None:
    script = completion_script("fish")
    assert 'string split -m 1 "," $completion' in script
    text = (Path(__file__).resolve().parents[1] / "completions" / "jobctl.fish").read_text()
    assert text == script


# ---------------------------------------------------------------------- 5 and 14


def test_tables_in_a_pipe_are_one_line_a_row(jobctl: Jobctl) -> None:
    long_cron = "0,5,10,15,20,25,30,35,40,45,50,55 0,2,4,6,8,10,12,14,16,18,20,22 * * mon-fri"
    jobctl.ok("add", "a-job-with-a-rather-long-name", "--cron", long_cron, "--", "true")
    jobctl.ok("add", "soon", "--in", "5m", "--", "true")
    jobctl.ok("run", "soon")
    for args in (["list"], ["runs"], ["show", "soon"]):
        out = jobctl.ok(*args).out
        lines = out.splitlines()
        assert all(line == line.rstrip() for line in lines), (args, out)
        assert "." not in "".join(c for c in out if c in ".") or all(
            not any(part.count(":") == 2 and "." in part for part in line.split()) for line in lines
        ), out  # no microseconds in times
    listing = jobctl.ok("list").out.splitlines()
    assert len(listing) == 3  # header and one line per job, however long
    assert long_cron in listing[1] or long_cron in listing[2]


def test_plain_table_pads_but_never_trails() -> None:
    lines = output.plain_table(["ID", "LAST ERROR"], [["1", ""], ["22", "exit 3"]])
    assert lines == ["ID  LAST ERROR", "1", "22  exit 3"]


def test_once_schedule_shows_no_microseconds(jobctl: Jobctl) -> None:
    jobctl.ok("add", "soon", "--in", "5m", "--", "true")
    schedule = jobctl.ok("list").out.splitlines()[1]
    assert "." not in schedule.split("at ", 1)[1].split()[0]


# ---------------------------------------------------------------------- 6


def test_edit_every_keeps_after_completion(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--every", "10m", "--after-completion", "--", "true")
    jobctl.ok("edit", "j", "--every", "5m")
    trigger = jobctl.json("show", "j")["trigger"]
    assert trigger["after_completion"] is True and trigger["every"] == 300
    jobctl.ok("edit", "j", "--every", "5m", "--start", "2031-01-01T00:00Z")
    assert jobctl.json("show", "j")["trigger"]["after_completion"] is False


# ---------------------------------------------------------------------- 7


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 */2"])
def test_never_firing_expression_is_accepted_with_a_warning(jobctl: Jobctl, expr: str) -> None:
    r = jobctl("add", "j", "--cron", expr, "--", "true")
    assert r.code == 0
    assert r.err.startswith("warning: ") and "can never fire" in r.err
    assert jobctl.json("show", "j")["next_run_at"] is None
    r = jobctl("next", "--cron", expr)
    assert r.code == 0 and "warning: " in r.err and r.out == "no fire times\n"
    assert "can never fire" not in jobctl("add", "k", "--cron", "0 0 29 2 *", "--", "true").err


# ---------------------------------------------------------------------- 8


def test_empty_zone_is_invalid(jobctl: Jobctl) -> None:
    for args in (
        ["add", "j", "--cron", "@daily", "--tz", "", "--", "true"],
        ["next", "--cron", "@daily", "--tz", ""],
    ):
        r = jobctl(*args)
        assert r.code == 2, args
        one_error(r.err)
    jobctl.ok("add", "c", "--cron", "@daily", "--", "true")
    r = jobctl("edit", "c", "--tz", "")
    assert r.code == 2
    one_error(r.err)


# ---------------------------------------------------------------------- 9


def test_cwd_and_shell_are_checked_at_add_and_edit(jobctl: Jobctl, tmp_path: Path) -> None:
    for args, problem in (
        (["--cwd", str(tmp_path / "missing")], "no such directory"),
        (["--cwd", str(jobctl.db.parent / "file")], "not a directory"),
        (["--shell", str(tmp_path / "nosh")], "no such file"),
        (["--shell", str(jobctl.db.parent / "file")], "not an executable"),
        (["--shell", "no-such-shell-anywhere"], "not found on PATH"),
    ):
        (jobctl.db.parent / "file").write_text("x")
        r = jobctl("add", "j", "--manual", *args, "--", "true")
        assert r.code == 2, (args, r)
        assert problem in r.err and "Error: " in r.err
    jobctl.ok("add", "j", "--manual", "--cwd", str(tmp_path), "--shell", "sh", "--", "true")
    r = jobctl("edit", "j", "--cwd", str(tmp_path / "missing"))
    assert r.code == 2 and "no such directory" in r.err


def test_cwd_that_cannot_be_checked_now_is_a_warning(
    jobctl: Jobctl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobctl import specs

    real_stat = os.stat

    def stat(path: object, *args: object, **kwargs: object) -> object:
        if str(path).startswith("/home/other"):  # as for a non-root user: no access
            raise PermissionError(13, "Permission denied", path)
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(specs.os, "stat", stat)
    r = jobctl("add", "j", "--manual", "--cwd", "/home/other/work", "--", "true")
    assert r.code == 0
    assert r.err.startswith("warning: --cwd '/home/other/work' cannot be checked now")


# ---------------------------------------------------------------------- 15


def test_wording(jobctl: Jobctl) -> None:
    jobctl.ok("add", "m", "--manual", "--", "true")
    run = jobctl.json("run", "m")
    r = jobctl("logs", str(run["id"]))
    assert r.code == 1 and r.err == f"Error: run {run['id']} has no attempts yet\n"
    assert jobctl.ok("retry-dead", "m").out == "0 dead runs back to pending\n"


def test_next_of_a_paused_job_notes_it(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--cron", "0 6 * * *", "--tz", "UTC", "--", "true")
    jobctl.ok("pause", "j")
    r = jobctl("next", "j", "--from", "2030-01-01T00:00Z", "-n", "2")
    assert r.code == 0 and "warning: job j is paused" in r.err
    assert r.out == "2030-01-01 06:00:00 UTC\n2030-01-02 06:00:00 UTC\n"


def test_next_of_an_after_completion_job_shows_no_fixed_rate_times(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--every", "10m", "--after-completion", "--", "true")
    job = jobctl.json("show", "j")
    r = jobctl("next", "j", "--json", "-n", "5")
    assert r.code == 0 and r.json() == [job["next_run_at"]]
    assert "later times follow each run" in r.err


def test_next_human_times_are_local_and_whole_seconds(jobctl: Jobctl) -> None:
    out = jobctl.ok("next", "--every", "90s", "--from", "2030-01-01T00:00:00.123456Z").out
    assert out.splitlines()[0] == "2030-01-01 00:01:30 UTC"
    got = jobctl.json("next", "--every", "90s", "--from", "2030-01-01T00:00Z", "-n", "1")
    assert got == ["2030-01-01T00:01:30Z"]


# ---------------------------------------------------------------------- contract changes


def test_manual_job_overlap_defaults_to_allow(jobctl: Jobctl) -> None:
    jobctl.ok("add", "q", "--manual", "--", "true")
    assert jobctl.json("show", "q")["overlap"] == "allow"
    jobctl.ok("add", "f", "--manual", "--overlap", "forbid", "--", "true")
    assert jobctl.json("show", "f")["overlap"] == "forbid"
    jobctl.ok("add", "c", "--every", "1h", "--", "true")
    assert jobctl.json("show", "c")["overlap"] == "forbid"


@pytest.mark.parametrize("text", ["1.5h", "0.5", "0.000001", "1e3", "-1", "0"])
def test_fractional_or_tiny_durations_are_invalid(jobctl: Jobctl, text: str) -> None:
    r = jobctl("add", "j", "--every", text, "--", "true")
    assert r.code == 2, text
    one_error(r.err)


def test_jitter_may_be_zero(jobctl: Jobctl) -> None:
    jobctl.ok("add", "j", "--manual", "--jitter", "0", "--", "true")
    assert jobctl.json("show", "j")["jitter"] == 0
    assert jobctl("add", "k", "--manual", "--timeout", "0", "--", "true").code == 2
