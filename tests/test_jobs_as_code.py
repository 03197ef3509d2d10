"""Jobs as code (README, Jobs in git): export, the job file's reading and its errors, the plan of an
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


#: one `add` a trigger kind and a policy: every kind and every policy that exists (jobctl(1),
#: jobctl add). A new job setting gets a line here, so the round trip covers it.
EVERY_JOB: list[list[str]] = [
    ["cron-berlin", "--cron", "0 3 * * 1-5", "--tz", "Europe/Berlin"],
    ["cron-macro", "--cron", "@daily", "--catchup", "all", "--catchup-limit", "3"],
    ["cron-last", "--cron", "0 12 L * *", "--catchup", "skip", "--overlap", "replace"],
    ["rate", "--every", "90m", "--start", "2026-01-01T00:00:00Z", "--timeout", "1h"],
    ["rate-default-start", "--every", "5m", "--retries", "0", "--backoff", "1m"],
    ["retention", "--cron", "@hourly", "--keep-runs", "50", "--keep-for", "30d"],
    [
        "notified",
        "--cron",
        "@weekly",
        "--notify",
        "ops",
        "--notify",
        "pager:dead,late",
        "--grace",
        "5m",
        "--warn-after",
        "1h",
    ],
    ["delay", "--every", "1h", "--after-completion", "--priority", "-3", "--jitter", "30s"],
    ["once", "--at", "2099-06-01T08:00", "--tz", "America/New_York"],
    ["reboot", "--cron", "@reboot", "--env", "A=1", "--env", "B=two words"],
    ["manual", "--manual", "--lock", "db", "--lock", "host:example.org"],
    ["manual-forbid", "--manual", "--overlap", "forbid", "--paused"],
    ["after-ok", "--after", "cron-berlin", "--overlap", "queue"],
    ["after-states", "--after", "rate:succeeded,dead", "--deadline", "10m"],
    [
        "policies",
        "--every",
        "1h",
        "--overlap",
        "allow",
        "--max-running",
        "3",
        "--pause-after-failures",
        "4",
        "--ok-exit",
        "24,3",
        "--no-retry-exit",
        "75",
    ],
    [
        "limits",
        "--manual",
        "--nice",
        "10",
        "--io-class",
        "idle",
        "--memory-max",
        "512M",
        "--cpu-max",
        "1m",
        "--files-max",
        "256",
    ],
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
    jobctl("notify", "add", "ops", "--command", "true")
    jobctl("notify", "add", "pager", "--command", "true")
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
    assert (jobs["retention"]["keep_runs"], jobs["retention"]["keep_for"]) == (50, "4w2d")
    assert "keep_runs" not in jobs["rate"]  # 1000 is the default
    notified = jobs["notified"]
    assert notified["notify"][1] == "pager:dead,late"
    assert notified["notify"][0].startswith("ops:")
    assert (notified["grace"], notified["warn_after"]) == ("5m", "1h")
    # run policies and limits (README, Run policies and what a run costs)
    assert jobs["after-ok"]["after"] == "cron-berlin"
    assert jobs["after-ok"]["overlap"] == "queue"
    assert (jobs["after-states"]["after"], jobs["after-states"]["deadline"]) == (
        "rate:succeeded,dead",
        "10m",
    )
    policies = jobs["policies"]
    assert (policies["overlap"], policies["max_running"]) == ("allow", 3)
    assert (policies["ok_exit"], policies["no_retry_exit"]) == ([3, 24], [75])
    assert policies["pause_after_failures"] == 4
    assert {k: v for k, v in jobs["limits"].items() if k not in ("manual", "command")} == {
        "nice": 10,
        "io_class": "idle",
        "memory_max": "512M",
        "cpu_max": "1m",
        "files_max": 256,
    }
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
    # every invalid key: a bad zone hides no bad interval (issue 40)
    assert [(p.line, p.message.split(":")[0:2]) for p in parsed.problems] == [
        (6, ["job bad", " every"]),
        (8, ["job bad", " retries"]),
        (9, ["job bad", " colour"]),
        (10, ["job bad", " tz"]),
    ]
    assert "invalid duration '5x'" in parsed.problems[0].message
    assert "unknown key" in parsed.problems[2].message
    assert list(parsed.jobs) == ["good"]
    parsed = parse(text.replace("Mars/Olympus", "UTC"))
    assert [p.line for p in parsed.problems] == [6, 8, 9]


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
        ('[jobs.a]\nreboot = true\ncommand = "x"\nmax_running = 2\n', 1, "--max-running goes"),
        ('[jobs.a]\nmanual = true\ncommand = "x"\nok_exit = [true]\n', 4, "exit codes"),
        ('[jobs.a]\nmanual = true\ncommand = "x"\nok_exit = [300]\n', 4, "ok-exit"),
        ('[jobs.a]\nmanual = true\ncommand = "x"\nmemory_max = "12"\n', 4, "memory_max"),
        ('[jobs.a]\nafter = "b:sometimes"\ncommand = "x"\n', 2, "after"),
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


# ---------------------------------------------------------------------- apply


def revisions(jobctl: Any) -> dict[str, int]:
    return {j.name: j.revision for j in jobctl.store().list_jobs()}


def test_export_then_apply_changes_nothing_and_prints_nothing(jobctl: Any) -> None:
    add_every_job(jobctl)
    jobctl("edit", "rate", "--retries", "4")
    jobctl("pause", "cron-berlin")
    before = revisions(jobctl)
    jobs_before = {j.name: j for j in jobctl.store().list_jobs()}
    text = export(jobctl)
    result = jobctl("apply", "-", stdin=text)
    assert (result.stdout, result.stderr) == ("", "")
    assert json.loads(jobctl("apply", "--json", "--prune", "-", stdin=text).stdout) == {
        "added": [],
        "changed": [],
        "removed": [],
    }
    json_text = export(jobctl, "--format", "json")
    assert jobctl("apply", "--prune", "-", stdin=json_text).stdout == ""
    assert revisions(jobctl) == before
    after = {j.name: j for j in jobctl.store().list_jobs()}
    for name, job in jobs_before.items():
        assert (after[name].spec, after[name].state, after[name].next_run_at) == (
            job.spec,
            job.state,
            job.next_run_at,
        ), name


def test_apply_adds_changes_and_prunes(jobctl: Any, tmp_path: Path) -> None:
    jobctl("add", "keep", "--cron", "0 3 * * *", "--tz", "UTC", "--", "true")
    jobctl("add", "drop", "--manual", "--", "true")
    jobctl("add", "pause-me", "--every", "1h", "--", "true")
    text = export(jobctl, "keep", "pause-me")
    text = text.replace('cron = "0 3 * * *"', 'cron = "0 4 * * *"\nretries = 5')
    text = text.replace("[jobs.pause-me]", "[jobs.pause-me]\npaused = true")
    text += '\n[jobs.new]\nevery = "10m"\ncommand = "echo new"\n'
    path = tmp_path / "jobs.toml"
    path.write_text(text)

    dry = jobctl("apply", "--dry-run", "--prune", str(path)).stdout
    assert dry.splitlines() == [
        "+ new",
        '~ keep: cron "0 3 * * *" -> "0 4 * * *"; retries 2 -> 5',
        "~ pause-me: paused false -> true",
        "- drop",
    ]
    assert jobctl("export").stdout == jobctl("export").stdout
    assert sorted(revisions(jobctl)) == ["drop", "keep", "pause-me"]  # nothing written
    before_next = jobctl.store().get_job("keep").next_run_at

    assert jobctl("apply", str(path)).stdout.splitlines() == dry.splitlines()[:3]
    store = jobctl.store()
    assert sorted(revisions(jobctl)) == ["drop", "keep", "new", "pause-me"]  # no --prune
    keep = store.get_job("keep")
    assert (keep.spec.trigger.expr, keep.spec.retries) == ("0 4 * * *", 5)
    assert keep.next_run_at != before_next  # the new schedule starts now
    assert store.get_job("pause-me").state.value == "paused"
    assert store.get_job("new").spec.trigger.every_seconds == 600
    result = json.loads(jobctl("apply", "--json", "--prune", str(path)).stdout)
    assert result == {"added": [], "changed": [], "removed": ["drop"]}
    assert sorted(revisions(jobctl)) == ["keep", "new", "pause-me"]


def test_apply_with_errors_applies_nothing_and_lists_them_all(jobctl: Any, tmp_path: Path) -> None:
    jobctl("add", "old", "--manual", "--", "true")
    text = (
        "[jobs.good]\n"  # 1
        'cron = "0 3 * * *"\n'  # 2
        'command = "true"\n'  # 3
        "[jobs.bad]\n"  # 4
        'cron = "61 * * * *"\n'  # 5
        'command = "true"\n'  # 6
        'catchup = "sometimes"\n'  # 7
    )
    result = jobctl("apply", "--prune", "-", stdin=text, ok=False)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 2
    assert errors[0].startswith("Error: line 5: job bad: cron:")
    assert errors[1].startswith("Error: line 7: job bad: catchup: invalid --catchup 'sometimes'")
    assert result.stdout == ""
    assert sorted(revisions(jobctl)) == ["old"]
    bad_toml = jobctl("apply", "-", stdin='[jobs.a]\ncron = "x\n', ok=False)
    assert bad_toml.exit_code == 2 and "Error: line 2: invalid TOML" in bad_toml.stderr
    missing = jobctl("apply", str(tmp_path / "nope.toml"), ok=False)
    assert missing.exit_code == 2 and missing.stderr.startswith("Error: cannot read")


def test_apply_reports_every_invalid_key_of_every_job(jobctl: Any) -> None:
    """A bad tz hid a bad cron, a bad start a bad every: each invalid key is its own error,
    and --json prints them on stdout as import-crontab --json does."""
    text = (
        "[jobs.a]\n"  # 1
        'cron = "61 * * * *"\n'  # 2
        'tz = "Nowhere/Land"\n'  # 3
        'command = "true"\n'  # 4
        "retries = -1\n"  # 5
        "[jobs.b]\n"  # 6
        'every = "5q"\n'  # 7
        'start = "zz"\n'  # 8
        'command = "true"\n'  # 9
        "[jobs.c]\n"  # 10
        'cron = "@daily"\n'  # 11
        'start = "2026-01-01"\n'  # 12
        'tz = "Bad/Zone"\n'  # 13
        'command = "true"\n'  # 14
    )
    result = jobctl("apply", "-", stdin=text, ok=False)
    assert result.exit_code == 2 and result.stdout == ""
    expected = [
        (2, "job a: cron: invalid cron expression '61 * * * *'"),
        (3, "job a: tz: unknown time zone 'Nowhere/Land'"),
        (5, "job a: retries: invalid --retries -1"),
        (7, "job b: every: invalid duration '5q'"),
        (8, "job b: start: invalid time 'zz'"),
        (12, "job c: start: goes with every"),
        (13, "job c: tz: unknown time zone 'Bad/Zone'"),
    ]
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == len(expected), result.stderr
    for got, (line, words) in zip(errors, expected, strict=True):
        assert got.startswith(f"Error: line {line}: {words}"), (got, line, words)
    as_json = jobctl("apply", "--json", "-", stdin=text, ok=False)
    assert as_json.exit_code == 2
    listed = json.loads(as_json.stdout)["errors"]
    assert len(listed) == len(expected)
    got = [(e["line"], e["message"][: len(w)]) for e, (_, w) in zip(listed, expected, strict=True)]
    assert got == expected
    assert set(json.loads(as_json.stdout)) == {"errors"}
    assert revisions(jobctl) == {}


def test_apply_prune_of_a_file_that_deletes_every_job_needs_force(jobctl: Any) -> None:
    jobctl("add", "a", "--manual", "--", "true")
    jobctl("add", "b", "--every", "1h", "--", "true")
    for text in ("", "# nothing yet\n"):
        for dry in ([], ["--dry-run"]):
            result = jobctl("apply", "--prune", *dry, "-", stdin=text, ok=False)
            assert result.exit_code == 1 and result.stdout == ""
            assert result.stderr.startswith(
                "Error: --prune would delete every job (2) and add none; nothing was applied: "
                "give --force"
            ), result.stderr
    assert sorted(revisions(jobctl)) == ["a", "b"]
    # a file that keeps one job, or adds one, is a prune like any other
    kept = jobctl("apply", "--prune", "--dry-run", "-", stdin=export(jobctl, "a"))
    assert kept.stdout == "- b\n"
    # without --prune an empty file changes nothing; with --force it deletes every job
    assert jobctl("apply", "-", stdin="").stdout == ""
    assert jobctl("apply", "--prune", "--force", "-", stdin="").stdout == "- a\n- b\n"
    assert revisions(jobctl) == {}
    # and an empty database with an empty file is no refusal
    assert jobctl("apply", "--prune", "-", stdin="").stdout == ""


def test_a_job_others_follow_is_deleted_only_with_them(jobctl: Any) -> None:
    """rm of an --after upstream left its followers dangling, and the export then no
    longer applied to an empty database."""
    jobctl("add", "up", "--every", "1h", "--", "true")
    jobctl("add", "down", "--after", "up", "--", "true")
    jobctl("add", "down2", "--after", "up:dead", "--", "true")
    jobctl("add", "other", "--manual", "--", "true")
    refused = jobctl("rm", "up", ok=False)
    assert refused.exit_code == 1
    assert refused.stderr == (
        "Error: job 'up' is followed by down, down2 (--after): delete them first, or give "
        "them another trigger\n"
    )
    assert sorted(revisions(jobctl)) == ["down", "down2", "other", "up"]
    # apply --prune: refused while a follower stays, all or nothing
    text = export(jobctl, "down") + export(jobctl, "other").replace('"true"', '"echo changed"')
    pruned = jobctl("apply", "--prune", "-", stdin=text, ok=False)
    assert pruned.exit_code == 1
    assert "(down follows up)" in pruned.stderr and "nothing was applied" in pruned.stderr
    assert jobctl.store().get_job("other").spec.command == "true"
    # the same change deleting the followers (or giving them another trigger) is fine
    text = export(jobctl, "other") + export(jobctl, "down2").replace(
        'after = "up:dead"', "manual = true"
    )
    assert jobctl("apply", "--prune", "-", stdin=text).stdout.splitlines() == [
        '~ down2: after "up:dead" -> none; manual none -> true',
        "- down",
        "- up",
    ] or sorted(revisions(jobctl)) == ["down2", "other"]
    assert sorted(revisions(jobctl)) == ["down2", "other"]
    # so an export applies to an empty database
    assert jobctl.store().get_job("down2").spec.trigger.kind is TriggerKind.MANUAL
    jobctl("add", "up", "--every", "1h", "--", "true")
    jobctl("edit", "down2", "--after", "up")
    jobctl("rm", "down2")
    jobctl("rm", "up")
    assert sorted(revisions(jobctl)) == ["other"]


def test_apply_checks_after_jobs_across_the_file(jobctl: Any) -> None:
    jobctl("add", "up", "--manual", "--", "true")
    cycle = '[jobs.a]\nafter = "b"\ncommand = "x"\n[jobs.b]\nafter = "a"\ncommand = "x"\n'
    result = jobctl("apply", "-", stdin=cycle, ok=False)
    assert result.exit_code == 2 and "cycle" in result.stderr
    missing = jobctl("apply", "-", stdin='[jobs.a]\nafter = "nope"\ncommand = "x"\n', ok=False)
    assert missing.exit_code == 2 and "no job named 'nope'" in missing.stderr
    # an upstream job the same file adds is fine
    ok = '[jobs.a]\nafter = "b"\ncommand = "x"\n[jobs.b]\nafter = "up"\ncommand = "x"\n'
    assert jobctl("apply", "-", stdin=ok).stdout == "+ a\n+ b\n"


def test_apply_prune_is_refused_while_a_removed_job_runs(jobctl: Any) -> None:
    jobctl("add", "busy", "--manual", "--", "sleep 100")
    jobctl("add", "other", "--manual", "--", "true")
    jobctl("run", "busy")
    claimed, _ = jobctl.store().claim("d1", "host", datetime.now(UTC), 60.0)
    assert len(claimed) == 1
    text = export(jobctl, "other").replace('"true"', '"echo changed"')
    result = jobctl("apply", "--prune", "-", stdin=text, ok=False)
    assert result.exit_code == 1
    assert "busy" in result.stderr and "nothing was applied" in result.stderr
    assert jobctl.store().get_job("other").spec.command == "true"  # all or nothing
    assert sorted(revisions(jobctl)) == ["busy", "other"]


# ---------------------------------------------------------------------- edit -e


def editor(tmp_path: Path, name: str, code: str) -> str:
    """An editor that is a script: Python ``code`` run on the file's text ``t``; what it
    leaves in ``t`` is saved."""
    script = tmp_path / f"{name}.py"
    script.write_text(
        "import sys\npath = sys.argv[1]\nt = open(path).read()\n"
        + code
        + "\nopen(path, 'w').write(t)\n"
    )
    return f"{sys.executable} {script}"


def test_edit_in_editor_changes_a_schedule(
    jobctl: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobctl("add", "a", "--cron", "0 3 * * *", "--tz", "UTC", "--", "true")
    jobctl("add", "b", "--manual", "--", "true")
    monkeypatch.setenv("EDITOR", editor(tmp_path, "sched", "t = t.replace('0 3 *', '15 3 *')"))
    result = jobctl("edit", "-e", "a")
    assert result.stdout == '~ a: cron "0 3 * * *" -> "15 3 * * *"\n'
    assert jobctl.store().get_job("a").spec.trigger.expr == "15 3 * * *"
    # $VISUAL comes before $EDITOR; a text saved unchanged changes nothing
    monkeypatch.setenv("VISUAL", editor(tmp_path, "same", "pass"))
    assert jobctl("edit", "-e").stdout == "no changes\n"
    assert revisions(jobctl) == {"a": 2, "b": 1}


def test_edit_in_editor_deletes_a_removed_table(
    jobctl: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobctl("add", "a", "--manual", "--", "true")
    jobctl("add", "b", "--manual", "--", "true")
    jobctl("add", "c", "--manual", "--", "true")
    code = "t = t[: t.index('[jobs.b]')]"
    monkeypatch.setenv("EDITOR", editor(tmp_path, "delete", code))
    assert jobctl("edit", "-e", "a", "b").stdout == "- b\n"
    assert sorted(revisions(jobctl)) == ["a", "c"]
    # only the jobs that were opened can be deleted: c was not in the text
    monkeypatch.setenv("EDITOR", editor(tmp_path, "empty", "t = ''"))
    assert jobctl("edit", "-e", "a").stdout == "- a\n"
    assert sorted(revisions(jobctl)) == ["c"]


def test_edit_in_editor_keeps_invalid_text(
    jobctl: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobctl("add", "a", "--cron", "0 3 * * *", "--tz", "UTC", "--", "true")
    monkeypatch.setenv("EDITOR", editor(tmp_path, "broken", "t = t + '\\nretries = = 3\\n'"))
    result = jobctl("edit", "-e", ok=False)
    assert result.exit_code == 2
    assert "invalid TOML" in result.stderr
    kept = Path(result.stderr.strip().rsplit(" ", 1)[1])
    try:
        assert kept.read_text().endswith("retries = = 3\n")
    finally:
        kept.unlink()
    assert revisions(jobctl) == {"a": 1}
    # an editor that fails changes nothing; what it saved is kept
    monkeypatch.setenv("EDITOR", "false")
    failed = jobctl("edit", "-e", ok=False)
    assert failed.exit_code == 1 and "the editor exited 1" in failed.stderr
    crash = "open(path, 'w').write('half')\nsys.exit(3)"
    monkeypatch.setenv("EDITOR", editor(tmp_path, "crash", crash))
    crashed = jobctl("edit", "-e", ok=False)
    assert crashed.exit_code == 1 and "exited 3" in crashed.stderr
    half = Path(crashed.stderr.strip().rstrip(")").rsplit(" ", 1)[1])
    try:
        assert half.read_text() == "half"
    finally:
        half.unlink()
    assert revisions(jobctl) == {"a": 1}
    # and options beside -e are refused
    assert jobctl("edit", "-e", "a", "--retries", "3", ok=False).exit_code == 2
    assert jobctl("edit", ok=False).exit_code == 2


def test_edit_in_editor_refuses_a_text_made_before_another_change(
    jobctl: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone sets retries 9 while the editor is open on retries 2: applying the text
    would put 2 back. Nothing is applied; the error names the job and both revisions, and
    the text is kept."""
    jobctl("add", "a", "--manual", "--", "true")
    jobctl("add", "b", "--manual", "--", "true")
    meanwhile = (
        "import subprocess\n"
        f"subprocess.run([{sys.executable!r}, '-m', 'jobctl', '--db', {str(jobctl.db)!r}, "
        "'edit', 'a', '--retries', '9'], check=True, capture_output=True)\n"
        "t = t.replace('[jobs.b]', '[jobs.b]\\ndescription = \"mine\"')"
    )
    monkeypatch.setenv("EDITOR", editor(tmp_path, "meanwhile", meanwhile))
    result = jobctl("edit", "-e", ok=False)
    assert result.exit_code == 1 and result.stdout == ""
    errors = result.stderr.splitlines()
    assert errors[0] == (
        "Error: job a changed since the text was made: it was at revision 1, it is at revision 2"
    )
    assert errors[1].startswith("nothing was applied; the edited text is kept in ")
    kept = Path(errors[1].rsplit(" ", 1)[1])
    try:
        assert 'description = "mine"' in kept.read_text()
    finally:
        kept.unlink()
    assert jobctl.store().get_job("a").spec.retries == 9  # the other change stands
    assert jobctl.store().get_job("b").spec.description is None  # and nothing was applied
    assert revisions(jobctl) == {"a": 2, "b": 1}
    # a job deleted meanwhile is said too
    gone = (
        "import subprocess\n"
        f"subprocess.run([{sys.executable!r}, '-m', 'jobctl', '--db', {str(jobctl.db)!r}, "
        "'rm', 'b'], check=True, capture_output=True)\n"
        "t = t.replace('command', 'description = \"x\"\\ncommand', 1)"
    )
    monkeypatch.setenv("EDITOR", editor(tmp_path, "gone", gone))
    result = jobctl("edit", "-e", "a", "b", ok=False)
    assert result.exit_code == 1
    assert "job b was deleted since the text was made (at revision 1)" in result.stderr
    Path(result.stderr.strip().rsplit(" ", 1)[1]).unlink()
    assert jobctl.store().get_job("a").spec.description is None


# ---------------------------------------------------------------------- revisions


def test_history_after_add_edit_pause_apply_and_rollback(jobctl: Any) -> None:
    jobctl("add", "job", "--cron", "0 3 * * *", "--tz", "UTC", "--", "echo one")
    jobctl("edit", "job", "--retries", "5")
    jobctl("pause", "job")
    jobctl("resume", "job")
    text = export(jobctl, "job").replace("echo one", "echo two")
    jobctl("apply", "-", stdin=text)
    assert jobctl("rollback", "job", "1").stdout.startswith("rolled back job to revision 1")
    history = json.loads(jobctl("history", "job", "--json").stdout)
    assert [(h["revision"], h["source"]) for h in history] == [
        (1, "cli"),
        (2, "cli"),
        (3, "cli"),
        (4, "cli"),
        (5, "apply"),
        (6, "cli"),
    ]
    who = history[0]["who"]
    assert "@" in who and all(h["who"] == who for h in history)
    assert history[0]["changes"]["cron"] == [None, "0 3 * * *"]
    assert history[1]["changes"] == {"retries": [2, 5]}
    assert history[2]["changes"] == {"paused": [False, True]}
    assert history[3]["changes"] == {"paused": [True, False]}
    assert history[4]["changes"] == {"command": ["echo one", "echo two"]}
    assert history[5]["changes"] == {"command": ["echo two", "echo one"], "retries": [5, 2]}
    assert history[0]["at"].endswith("Z")
    human = jobctl("history", "job").stdout.splitlines()
    assert human[0].split() == ["REV", "AT", "WHO", "SOURCE", "CHANGES"]
    assert human[2].startswith("2  ") and human[2].endswith("retries 2 -> 5")
    assert len(human) == 1 + len(history)
    job = jobctl.store().get_job("job")
    assert (job.spec.command, job.spec.retries, job.revision) == ("echo one", 2, 6)
    # rolling back to what it already is writes nothing
    assert "already" in jobctl("rollback", "job", "6").stdout
    assert jobctl("rollback", "job", "99", ok=False).exit_code == 1
    # rm deletes a job's revisions with it: a new job of that name starts again at 1
    jobctl("rm", "job")
    jobctl("add", "job", "--manual", "--", "true")
    assert [h["revision"] for h in json.loads(jobctl("history", "job", "--json").stdout)] == [1]


def test_a_run_carries_the_revision_its_job_had(jobctl: Any) -> None:
    jobctl("add", "job", "--manual", "--", "true")
    first = json.loads(jobctl("run", "job", "--json").stdout)
    assert first["job_revision"] == 1
    jobctl("edit", "job", "--command", "echo edited")
    second = json.loads(jobctl("run", "job", "--json").stdout)
    assert second["job_revision"] == 2
    runs = {r["id"]: r["job_revision"] for r in json.loads(jobctl("runs", "--json").stdout)}
    assert runs == {first["id"]: 1, second["id"]: 2}


def test_cancel_and_import_write_revisions(jobctl: Any, tmp_path: Path) -> None:
    _import(jobctl, tmp_path, "0 1 * * * echo one\n")
    jobctl("cancel", "cron-1")
    history = json.loads(jobctl("history", "cron-1", "--json").stdout)
    assert [(h["source"], list(h["changes"])[:1]) for h in history] == [
        ("import", ["cron"]),
        ("cli", ["state"]),
    ]
    assert history[1]["changes"] == {"state": ["active", "cancelled"]}


def test_api_history_and_rollback(jobctl: Any, db: Path, tmp_path: Path) -> None:
    from webhelpers import Server, token_file

    jobctl("add", "job", "--cron", "0 3 * * *", "--tz", "UTC", "--", "true")
    server = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path)).wait_ready()
    try:
        a = server.request("PATCH", "/v1/jobs/job", {"retries": 7})
        assert a.status == 200, a.text
        a = server.request("POST", "/v1/jobs/job/pause")
        assert a.status == 200, a.text
        history = server.request("GET", "/v1/jobs/job/history")
        assert history.status == 200
        assert [(h["revision"], h["who"], h["source"], h["changes"]) for h in history.json()][
            1:
        ] == [
            (2, "api", "api", {"retries": [2, 7]}),
            (3, "api", "api", {"paused": [False, True]}),
        ]
        assert history.json() == json.loads(jobctl("history", "job", "--json").stdout)
        a = server.request("POST", "/v1/jobs/job/rollback", {"revision": 1})
        assert a.status == 200, a.text
        assert (a.json()["retries"], a.json()["paused"], a.json()["revision"]) == (2, False, 4)
        assert server.request("POST", "/v1/jobs/job/rollback", {"revision": 9}).status == 404
        assert server.request("POST", "/v1/jobs/nope/rollback", {"revision": 1}).status == 404
        assert server.request("GET", "/v1/jobs/nope/history").status == 404
        bad = server.request("POST", "/v1/jobs/job/rollback", {"revision": "one"})
        assert bad.status == 422
        assert server.request("POST", "/v1/jobs/job/rollback", {}).status == 422
    finally:
        server.close()
