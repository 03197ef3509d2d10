"""The README's tour works on any machine: its first job, added and run as the tour says,
succeeds through a real daemon (issue 29 item 11: it once needed `restic`, exit 127)."""

from __future__ import annotations

import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def tour_commands() -> list[list[str]]:
    """The `$ jobctl …` lines of the tour's first console block, as argv (comments off)."""
    tour = README.read_text().split("\n## A short tour\n", 1)[1]
    block = tour.split("```console\n", 1)[1].split("\n```", 1)[0]
    return [
        shlex.split(line.removeprefix("$ "), comments=True)
        for line in block.splitlines()
        if line.startswith("$ jobctl ")
    ]


def test_the_tour_is_found() -> None:
    commands = tour_commands()
    assert commands[0][:2] == ["jobctl", "add"]
    assert any(c[1] == "run" and "--wait" in c for c in commands)


def test_the_tours_first_job_succeeds_through_a_real_daemon(jobctl, start_daemon, db, tmp_path):
    commands = tour_commands()
    add = commands[0]
    name = add[2]
    run = next(c for c in commands if c[1:3] == ["run", name] and "--wait" in c)
    jobctl(*add[1:])
    jobctl("edit", name, "--retries", "0")  # a failure ends the run at once, not after retries
    start_daemon(env={"HOME": str(tmp_path)})
    result = jobctl(*run[1:], ok=False)
    runs = jobctl.json("runs", name)
    assert [r["state"] for r in runs] == ["succeeded"], (runs, result.output)
    assert result.exit_code == 0, result.output
    [attempt] = jobctl.json("inspect", str(runs[0]["id"]))["attempts"]
    assert attempt["exit_code"] == 0 and attempt["output_bytes"] > 0
