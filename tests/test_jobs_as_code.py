"""Jobs as code (SPEC §15): export, the job file's reading and its errors, the plan of an
apply. The real CLI on a real database of either backend."""

from __future__ import annotations

import io
import json
import sys
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import StoreView

from jobctl import jobfile
from jobctl.cli import main
from jobctl.models import TriggerKind


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


class Cli:
    """The real console entry point (its error boundary included) in-process."""

    def __init__(
        self, db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.db = db
        self.capsys = capsys
        self.monkeypatch = monkeypatch
        self._view: StoreView | None = None

    def __call__(self, *args: str, stdin: str | None = None, ok: bool = True) -> Result:
        self.capsys.readouterr()
        self.monkeypatch.setattr(sys, "stdin", io.StringIO(stdin or ""))
        code: int | str | None = 0
        try:
            main(["--db", str(self.db), *args])
        except SystemExit as e:
            code = e.code
        out, err = self.capsys.readouterr()
        result = Result(0 if code is None else int(code), out, err)
        if ok and result.exit_code != 0:
            raise AssertionError(f"jobctl {' '.join(args)} exited {result.exit_code}: {err}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)

    def store(self) -> StoreView:
        if self._view is None:
            self._view = StoreView(self.db)
        return self._view

    def close(self) -> None:
        if self._view is not None:
            self._view.close()


@pytest.fixture
def jobctl(db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.delenv("VISUAL", raising=False)
    cli = Cli(db, capsys, monkeypatch)
    yield cli
    cli.close()


#: one `add` a trigger kind and a policy: every kind and every policy that exists (SPEC §4,
#: §9, §12, §13, §14, §16). A new job setting gets a line here, so the round trip covers it.
EVERY_JOB: list[list[str]] = [
    ["cron-berlin", "--cron", "0 3 * * 1-5", "--tz", "Europe/Berlin"],
    ["cron-macro", "--cron", "@daily", "--catchup", "all", "--catchup-limit", "3"],
    ["cron-last", "--cron", "0 12 L * *", "--catchup", "skip", "--overlap", "replace"],
    ["rate", "--every", "90m", "--start", "2026-01-01T00:00:00Z", "--timeout", "1h"],
    ["rate-default-start", "--every", "5m", "--retries", "0", "--backoff", "1m"],
    ["delay", "--every", "1h", "--after-completion", "--priority", "-3", "--jitter", "30s"],
    ["once", "--at", "2099-06-01T08:00", "--tz", "America/New_York"],
    ["reboot", "--cron", "@reboot", "--env", "A=1", "--env", "B=two words"],
    ["manual", "--manual", "--lock", "db", "--lock", "host:example.org"],
    ["manual-forbid", "--manual", "--overlap", "forbid", "--paused"],
    [
        "settings",
        "--cron",
        "*/5 * * * *",
        "--cwd",
        "/tmp",
        "--shell",
        "/bin/sh",
        "--on-failure",
        "echo failed",
        "--stdin",
        "line one\nline two",
        "--description",
        'quotes " and \\ and\nnewlines',
    ],
]


def add_every_job(jobctl: Any) -> None:
    for name, *args in EVERY_JOB:
        jobctl("add", name, *args, "--", f"echo {name} 'quoted' \"double\"")


def export(jobctl: Any, *args: str) -> str:
    result = jobctl("export", *args)
    return str(result.stdout)


def test_export_every_kind_and_policy_reads_back_to_the_same_jobs(jobctl: Any) -> None:
    add_every_job(jobctl)
    text = export(jobctl)
    document = tomllib.loads(text)
    assert list(document["jobs"]) == sorted(name for name, *_ in EVERY_JOB)
    jobs = jobctl.store().list_jobs()
    parsed = jobfile.parse_text(text, datetime.now(UTC), {j.name: j for j in jobs})
    assert parsed.problems == []
    for job in jobs:
        assert parsed.jobs[job.name] == jobfile.Definition.of(job), job.name
    assert jobfile.plan_apply(parsed.jobs, jobs, prune=True).empty()
    # the JSON format is the same document
    assert json.loads(export(jobctl, "--format", "json")) == document


def test_export_writes_only_what_differs_from_the_defaults(jobctl: Any) -> None:
    add_every_job(jobctl)
    jobs = tomllib.loads(export(jobctl))["jobs"]
    assert jobs["cron-berlin"] == {
        "cron": "0 3 * * 1-5",
        "tz": "Europe/Berlin",
        "command": "echo cron-berlin 'quoted' \"double\"",
    }
    # tz always for cron and at; start always for fixed-rate jobs
    assert jobs["cron-macro"]["tz"] == "UTC"
    assert jobs["rate"]["start"] == "2026-01-01T00:00:00+00:00"
    assert "start" in jobs["rate-default-start"]
    assert jobs["once"]["at"] == "2099-06-01T08:00:00-04:00"
    assert jobs["once"]["tz"] == "America/New_York"
    assert "tz" not in jobs["manual"] and "tz" not in jobs["reboot"]
    assert jobs["delay"] == {
        "every": "1h",
        "after_completion": True,
        "command": "echo delay 'quoted' \"double\"",
        "priority": -3,
        "jitter": "30s",
    }
    assert jobs["manual"]["locks"] == ["db", "host:example.org"]
    assert "overlap" not in jobs["manual"]  # allow is a manual job's default
    assert jobs["manual-forbid"]["overlap"] == "forbid"
    assert jobs["manual-forbid"]["paused"] is True
    assert jobs["reboot"]["reboot"] is True
    assert jobs["reboot"]["env"] == {"A": "1", "B": "two words"}
    assert jobs["settings"]["stdin"] == "line one\nline two"
    assert "shell" not in jobs["settings"]  # /bin/sh is the default
    # keys in the order of the field table, whatever order the flags came in
    order = [f.key for f in jobfile.FIELDS]
    for table in jobs.values():
        keys = [k for k in table if k in order]
        assert keys == sorted(keys, key=order.index)


def test_export_of_named_jobs_and_unknown_name(jobctl: Any) -> None:
    add_every_job(jobctl)
    assert list(tomllib.loads(export(jobctl, "rate", "manual"))["jobs"]) == ["rate", "manual"]
    result = jobctl("export", "nope", ok=False)
    assert result.exit_code == 1
    assert "nope" in result.stderr
    assert export(jobctl, "rate") == export(jobctl, "rate")  # stable


def test_export_of_an_empty_database_is_empty(jobctl: Any) -> None:
    assert tomllib.loads(export(jobctl)) == {"jobs": {}}


# ---------------------------------------------------------------------- reading a file

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def parse(text: str, existing: dict[str, Any] | None = None) -> jobfile.ParsedFile:
    return jobfile.parse_text(text, NOW, existing)


def test_every_error_is_listed_with_its_line() -> None:
    text = (
        "[jobs.good]\n"  # 1
        'cron = "0 3 * * *"\n'  # 2
        'command = "true"\n'  # 3
        "\n"  # 4
        "[jobs.bad]\n"  # 5
        'every = "5x"\n'  # 6
        'command = "true"\n'  # 7
        "retries = -1\n"  # 8
        "colour = 3\n"  # 9
        'tz = "Mars/Olympus"\n'  # 10
    )
    parsed = parse(text)
    assert [(p.line, p.message.split(":")[0:2]) for p in parsed.problems] == [
        (8, ["job bad", " retries"]),
        (9, ["job bad", " colour"]),
        (10, ["job bad", " tz"]),
    ]
    assert "unknown key" in parsed.problems[1].message
    assert list(parsed.jobs) == ["good"]
    # the duration is reported once the zone is right
    parsed = parse(text.replace("Mars/Olympus", "UTC"))
    assert [p.line for p in parsed.problems] == [6, 8, 9]
    assert "invalid duration '5x'" in parsed.problems[0].message


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[jobs.a]\ncron = 'x\n", 2, "invalid TOML"),
        ('[jobs.a]\ncron = "* * * * *"\ncron = "1 * * * *"\n', 3, "invalid TOML"),
        ('[jobs.a]\ncommand = "true"\n', 1, "give exactly one trigger"),
        ('[jobs.a]\nmanual = true\nreboot = true\ncommand = "x"\n', 3, "got manual, reboot"),
        ("[jobs.a]\nmanual = true\n", 1, "command is required"),
        ('[jobs.a]\nmanual = "yes"\ncommand = "x"\n', 2, "must be true or false"),
        ('[jobs.a]\nmanual = true\ncommand = "x"\nstart = "now"\n', 4, "goes with every"),
        ('[jobs.a]\nmanual = true\ncommand = "x"\nretries = "2"\n', 4, "must be an integer"),
        ('[jobs.a]\nmanual = true\ncommand = "x"\nenv = {A = 1}\n', 4, "NAME"),
        ('[jobs.a]\nmanual = true\ncommand = "x"\n[jobs.a.env]\n"1X" = "y"\n', 4, "--env"),
        ('[jobs.a]\nat = "2026-01-01T00:00"\ncommand = "x"\n', 2, "in the past"),
        ('[jobs."bad name"]\nmanual = true\ncommand = "x"\n', 1, "invalid job name"),
        ('other = 1\n[jobs.a]\nmanual = true\ncommand = "x"\n', 1, "unknown key 'other'"),
        ("jobs = 3\n", 1, "jobs must be a table"),
        ('{"jobs": {"a": {"manual": true}}', 1, "invalid JSON"),
    ],
)
def test_errors(text: str, line: int, words: str) -> None:
    problems = parse(text).problems
    assert problems, text
    assert problems[0].line == line, problems
    assert words in problems[0].message, problems


def test_json_files_are_read_too() -> None:
    parsed = parse('{"jobs": {"a": {"every": 90, "command": "true", "start": "now"}}}')
    assert parsed.problems == []
    trigger = parsed.jobs["a"].spec.trigger
    assert trigger.kind is TriggerKind.INTERVAL and trigger.every_seconds == 90
    assert trigger.anchor == NOW


def test_toml_times_and_whole_seconds_are_accepted() -> None:
    parsed = parse(
        "[jobs.a]\nevery = 3600\nstart = 2026-01-01T00:00:00Z\ncommand = 'true'\n"
        "[jobs.b]\nat = 2099-01-01T08:00:00\ntz = 'Asia/Tokyo'\ncommand = 'true'\n"
    )
    assert parsed.problems == []
    assert parsed.jobs["a"].spec.trigger.anchor == datetime(2026, 1, 1, tzinfo=UTC)
    assert parsed.jobs["b"].spec.trigger.at == datetime(2098, 12, 31, 23, tzinfo=UTC)


def test_a_file_without_start_keeps_the_jobs_phase(jobctl: Any) -> None:
    jobctl("add", "rate", "--every", "1h", "--start", "2026-01-01T00:20:00Z", "--", "true")
    job = jobctl.store().get_job("rate")
    parsed = parse("[jobs.rate]\nevery = '1h'\ncommand = 'true'\n", {"rate": job})
    assert parsed.jobs["rate"].spec == job.spec
    # a new job without start starts now
    assert parse("[jobs.x]\nevery = '1h'\ncommand = 'true'\n").jobs["x"].spec.trigger.anchor == NOW


def test_plan_lines_and_json(jobctl: Any) -> None:
    add_every_job(jobctl)
    jobs = jobctl.store().list_jobs()
    text = export(jobctl).replace('cron = "@daily"', 'cron = "@hourly"')
    text = text.replace("paused = true\n", "")
    text += '\n[jobs.new]\nmanual = true\ncommand = "echo new"\n'
    doc = tomllib.loads(text)
    del doc["jobs"]["reboot"]
    import tomli_w

    parsed = parse(tomli_w.dumps(doc), {j.name: j for j in jobs})
    assert parsed.problems == []
    plan = jobfile.plan_apply(parsed.jobs, jobs)
    assert plan.lines() == [
        "+ new",
        '~ cron-macro: cron "@daily" -> "@hourly"',
        "~ manual-forbid: paused true -> false",
    ]
    plan = jobfile.plan_apply(parsed.jobs, jobs, prune=True)
    assert plan.to_json() == {
        "added": ["new"],
        "changed": [
            {"name": "cron-macro", "fields": {"cron": ["@daily", "@hourly"]}},
            {"name": "manual-forbid", "fields": {"paused": [True, False]}},
        ],
        "removed": ["reboot"],
    }
    # a removed key goes back to its default; the default of a cleared setting is none
    changed = jobfile.plan_apply(
        parse(
            export(jobctl, "rate").replace('timeout = "1h"\n', ""), {j.name: j for j in jobs}
        ).jobs,
        jobs,
    )
    assert changed.lines() == ['~ rate: timeout "1h" -> none']
    assert changed.changed[0].spec_changes() == {"timeout_seconds": None}


# ---------------------------------------------------------------------- import-crontab by content

CRONTAB = "".join(
    f"0 {h} * * * echo {w}\n"
    for h, w in enumerate(["one", "two", "three", "four", "five", "six", "seven", "eight"], 1)
)


def _import(jobctl: Any, tmp_path: Path, text: str, *args: str) -> dict[str, Any]:
    path = tmp_path / "crontab"
    path.write_text(text)
    return dict(json.loads(jobctl("import-crontab", "--json", str(path), *args).stdout))


def _ids(jobctl: Any) -> dict[int, tuple[str, str]]:
    return {j.id: (j.name, j.spec.command) for j in jobctl.store().list_jobs()}


def test_import_matches_lines_to_jobs_by_content(jobctl: Any, tmp_path: Path) -> None:
    first = _import(jobctl, tmp_path, CRONTAB)
    assert [a["job"] for a in first["actions"]] == [f"cron-{n}" for n in range(1, 9)]
    assert {a["action"] for a in first["actions"]} == {"added"}
    before = _ids(jobctl)
    lines = CRONTAB.splitlines(keepends=True)
    edited = [lines[7], *lines[1:7]]  # the first line deleted, the last one moved up
    edited[2] = edited[2].replace("echo three", "echo THREE")  # a command changed
    edited[3] = edited[3].replace("0 4 * * *", "30 4 * * *")  # a schedule changed
    text = "".join(edited)

    dry = _import(jobctl, tmp_path, text, "--dry-run")
    assert dry["actions"] == [
        {"job": "cron-8", "action": "unchanged"},
        {"job": "cron-2", "action": "unchanged"},
        {"job": "cron-9", "action": "added"},
        {"job": "cron-4", "action": "updated"},
        {"job": "cron-5", "action": "unchanged"},
        {"job": "cron-6", "action": "unchanged"},
        {"job": "cron-7", "action": "unchanged"},
        {"job": "cron-1", "action": "removed", "deleted": False},
        {"job": "cron-3", "action": "removed", "deleted": False},
    ]
    assert _ids(jobctl) == before  # the dry run wrote nothing
    human = jobctl("import-crontab", "--dry-run", str(tmp_path / "crontab")).stdout
    assert [line.split()[0:2] for line in human.splitlines()][:4] == [
        ["unchanged", "cron-8"],
        ["unchanged", "cron-2"],
        ["added", "cron-9"],
        ["updated", "cron-4"],
    ]
    assert "removed from the file: cron-1" in human and "removed from the file: cron-3" in human

    _import(jobctl, tmp_path, text)
    after = _ids(jobctl)
    # no job's history moved onto another command; removed lines' jobs stay without --prune
    for job_id, (name, command) in before.items():
        assert after[job_id] == (name, command)
    assert jobctl.store().get_job("cron-4").spec.trigger.expr == "30 4 * * *"
    assert jobctl.store().get_job("cron-9").spec.command == "echo THREE"

    pruned = _import(jobctl, tmp_path, text, "--prune")
    assert [a for a in pruned["actions"] if a["action"] != "unchanged"] == [
        {"job": "cron-1", "action": "removed", "deleted": True},
        {"job": "cron-3", "action": "removed", "deleted": True},
    ]
    assert sorted(n for n, _ in _ids(jobctl).values()) == sorted(
        f"cron-{n}" for n in (2, 4, 5, 6, 7, 8, 9)
    )
    again = _import(jobctl, tmp_path, text, "--prune")
    assert {a["action"] for a in again["actions"]} == {"unchanged"}


def test_import_prune_is_refused_while_a_removed_job_runs(jobctl: Any, tmp_path: Path) -> None:
    _import(jobctl, tmp_path, CRONTAB)
    jobctl("run", "cron-1")
    claimed, _ = jobctl.store().claim("d1", "host", datetime.now(UTC), 60.0)
    assert len(claimed) == 1
    path = tmp_path / "crontab"
    path.write_text("".join(CRONTAB.splitlines(keepends=True)[1:]))
    result = jobctl("import-crontab", str(path), "--prune", ok=False)
    assert result.exit_code == 1
    assert "cron-1" in result.stderr
    assert len(_ids(jobctl)) == 8
