"""Completions and the man page are generated from the CLI and must not drift (scripts/gen_docs.py)."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from jobctl.cli import cli

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gen_docs.py"
GENERATED = [
    "completions/jobctl.bash",
    "completions/_jobctl",
    "completions/jobctl.fish",
    "man/jobctl.1",
]
MAN = ROOT / "man" / "jobctl.1"


def roff(text: str) -> str:
    return text.replace("\\", "\\e").replace("-", "\\-")


def commands() -> Iterator[tuple[str, click.Command, click.Context]]:
    def walk(
        group: click.Group, ctx: click.Context
    ) -> Iterator[tuple[str, click.Command, click.Context]]:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None
            sub = click.Context(cmd, info_name=name, parent=ctx, **cmd.context_settings)
            yield sub.command_path, cmd, sub
            if isinstance(cmd, click.Group):
                yield from walk(cmd, sub)

    yield from walk(cli, click.Context(cli, info_name="jobctl", **cli.context_settings))


def options(cmd: click.Command, ctx: click.Context) -> Iterator[click.Option]:
    help_option = cmd.get_help_option(ctx)
    for p in cmd.get_params(ctx):
        if isinstance(p, click.Option) and p is not help_option:
            yield p


def test_generated_files_are_in_sync(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    for rel in GENERATED:
        committed = ROOT / rel
        assert committed.exists(), f"{rel} is missing: run `python scripts/gen_docs.py`"
        assert committed.read_text() == (tmp_path / rel).read_text(), (
            f"{rel} is out of date: run `python scripts/gen_docs.py`"
        )


def test_every_command_has_help() -> None:
    missing = [name for name, cmd, _ in commands() if not (cmd.help or "").strip()]
    assert missing == []


def test_every_option_has_help() -> None:
    missing = [
        f"{name} {opt.opts[0]}"
        for name, cmd, ctx in commands()
        for opt in options(cmd, ctx)
        if not (opt.help or "").strip()
    ]
    assert missing == []


def test_man_page_covers_every_command_and_option() -> None:
    text = MAN.read_text()
    for name, cmd, ctx in commands():
        assert f'.SS "{roff(name)}"' in text, name
        for opt in options(cmd, ctx):
            for flag in [*opt.opts, *opt.secondary_opts]:
                assert roff(flag) in text, f"{name} {flag}"
    for opt in options(cli, click.Context(cli, info_name="jobctl")):
        assert roff(opt.opts[0]) in text


def test_man_page_has_the_sections() -> None:
    text = MAN.read_text()
    for section in (
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "COMMANDS",
        "EXIT STATUS",
        "ENVIRONMENT",
        "FILES",
        "CATCH\\-UP AND DST",
        "SEE ALSO",
    ):
        assert f"\n.SH {section}\n" in text, section
    for var in (
        "JOBCTL_DB",
        "JOBCTL_JOB",
        "JOBCTL_RUN_ID",
        "JOBCTL_ATTEMPT",
        "JOBCTL_SCHEDULED_FOR",
        "JOBCTL_CATCHUP_FROM",
        "JOBCTL_RUN_KEY",
        "JOBCTL_STATE",
        "JOBCTL_ERROR",
        "JOURNAL_STREAM",
    ):
        assert var in text, var
    assert text.isascii()
    assert not any(line.startswith(("'", ". ")) for line in text.splitlines())


def test_man_page_keeps_mandoc_lints_rules() -> None:
    """What ``mandoc -Tlint`` checks, in Python so the suite needs no mandoc: a .TH with a
    date (YYYY-MM-DD), no paragraph macro right after a section heading, no filled text
    line over 80 bytes, no blank line, no trailing space."""
    lines = MAN.read_text().splitlines()
    [th] = [line for line in lines if line.startswith(".TH ")]
    fields = shlex.split(th)
    assert fields[:3] == [".TH", "JOBCTL", "1"] and len(fields) == 6, th
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", fields[3]), th
    nofill = False
    for n, (before, line) in enumerate(itertools.pairwise(["", *lines]), 1):
        assert line.strip() and line == line.rstrip(), f"line {n}: blank or trailing space"
        if before.startswith((".SH ", ".SS ")):
            assert line not in (".PP", ".LP", ".P"), f"line {n}: {line} after {before}"
        if line in (".nf", ".fi"):
            nofill = line == ".nf"
        if not (line.startswith(".") or nofill or before == ".TP"):
            assert len(line.encode()) <= 80, f"line {n} is {len(line.encode())} bytes: {line}"


def test_man_page_renders_without_warnings() -> None:
    if shutil.which("groff"):
        argv = ["groff", "-man", "-Tutf8", "-ww", "-z", str(MAN)]
    elif shutil.which("man"):
        argv = ["man", "--warnings", "-l", str(MAN)]
    else:
        pytest.skip("neither groff nor man is installed")
    env = {**os.environ, "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_completion_scripts_call_back_into_jobctl() -> None:
    assert "_JOBCTL_COMPLETE=bash_complete" in (ROOT / "completions/jobctl.bash").read_text()
    assert "_JOBCTL_COMPLETE=zsh_complete" in (ROOT / "completions/_jobctl").read_text()
    assert "_JOBCTL_COMPLETE=fish_complete" in (ROOT / "completions/jobctl.fish").read_text()


def test_job_names_complete_from_the_database(tmp_path: Path) -> None:
    jobctl = str(Path(sys.executable).parent / "jobctl")
    db = str(tmp_path / "j.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    for name in ("backup", "beta", "other"):
        subprocess.run(
            [jobctl, "--db", db, "add", name, "--manual", "--", "true"],
            check=True,
            capture_output=True,
            env=env,
            timeout=30,
        )
    env.update(
        _JOBCTL_COMPLETE="bash_complete", COMP_WORDS=f"jobctl --db {db} show b", COMP_CWORD="4"
    )
    proc = subprocess.run(
        [jobctl], capture_output=True, text=True, env=env, timeout=30, check=False
    )
    assert proc.stdout.split() == ["plain,backup", "plain,beta"]


def test_the_benchmarks_page_is_a_results_page() -> None:
    # how each figure is taken, the current figures and what bounds them: the history of
    # past passes stays in git, not in the page
    page = (Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md").read_text()
    assert len(page.splitlines()) < 300
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings == [
        "## How each figure is taken",
        "## Current figures",
        "## What bounds each ratio",
    ]
