"""``jobctl import-crontab`` end to end (README, Migrating from crontab): the real CLI on real crontab files."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data" / "crontabs"
JOBCTL = str(Path(sys.executable).parent / "jobctl")


def jobctl(db: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    env["TZ"] = "UTC"
    return subprocess.run(
        [JOBCTL, "--db", str(db), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def listed(db: Path) -> list[dict[str, Any]]:
    proc = jobctl(db, "list", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def imported(db: Path, *args: str, stdin: str | None = None) -> dict[str, Any]:
    proc = jobctl(db, "import-crontab", "--json", *args, stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "jobctl.db"


def test_cronie_example_maps_every_setting(db: Path) -> None:
    report = imported(db, str(DATA / "cronie-example"))
    assert report["errors"] == []
    jobs = {j["name"]: j for j in report["jobs"]}
    assert list(jobs) == [f"cron-{n}" for n in range(1, 7)]
    daily = jobs["cron-1"]
    assert daily["trigger"] == {
        "kind": "cron",
        "expr": "5 0 * * *",
        "tz": "Japan",
        "after_completion": False,
        "resolved": "5 0 * * *",
    }
    assert daily["shell"] == "/bin/sh"
    assert daily["jitter"] == 600
    assert daily["id"] is not None
    assert daily["command"] == "$HOME/bin/daily.job >> $HOME/tmp/out 2>&1"
    assert jobs["cron-3"]["command"] == 'mail -s "It\'s 10pm" joe'
    assert jobs["cron-3"]["stdin"] == "Joe,\n\nWhere are your kids?\n"
    assert jobs["cron-6"]["trigger"]["kind"] == "reboot"
    assert report["env"]["MAILTO"] == "paul"
    assert any("MAILTO" in n["message"] for n in report["notices"])
    assert [j["name"] for j in listed(db)] == list(jobs)


def test_human_output_lists_jobs_and_notices(db: Path) -> None:
    proc = jobctl(db, "import-crontab", str(DATA / "debian-user-example"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 8
    assert lines[0].startswith("added cron-1") and "$HOME/bin/daily.job" in lines[0]
    assert "notice: line 4: MAILTO=paul" in proc.stderr


@pytest.mark.long
def test_reimport_is_a_no_op(db: Path) -> None:
    imported(db, str(DATA / "debian-user-example"))
    before = listed(db)
    again = jobctl(db, "import-crontab", str(DATA / "debian-user-example"))
    assert again.returncode == 0
    assert all(line.startswith("unchanged ") for line in again.stdout.splitlines())
    assert listed(db) == before
    con_rows = _updated_at(db)
    imported(db, str(DATA / "debian-user-example"))
    assert _updated_at(db) == con_rows


def _updated_at(db: Path) -> list[tuple[Any, ...]]:
    import sqlite3

    con = sqlite3.connect(db)
    try:
        return con.execute(
            "SELECT name, updated_at, next_run_at FROM jobs ORDER BY name"
        ).fetchall()
    finally:
        con.close()


def test_broken_file_imports_nothing_and_lists_every_error(db: Path) -> None:
    imported(db, str(DATA / "cronie-example"))
    before = listed(db)
    proc = jobctl(db, "import-crontab", "--prefix", "cron", str(DATA / "broken"))
    assert proc.returncode == 2
    errors = proc.stderr.splitlines()
    assert errors[0].startswith("Error: line 4: ")
    assert [e.split(":")[1] for e in errors] == [f" line {n}" for n in (4, 5, 6, 7, 8, 9, 10)]
    assert proc.stdout == ""
    assert listed(db) == before


def test_broken_file_json_report(db: Path) -> None:
    proc = jobctl(db, "import-crontab", "--json", str(DATA / "broken"))
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["jobs"] == []
    assert [e["line"] for e in report["errors"]] == [4, 5, 6, 7, 8, 9, 10]
    assert proc.stderr.startswith("Error: line 4: ")
    assert listed(db) == []


def test_dry_run_writes_nothing(db: Path) -> None:
    report = imported(db, "--dry-run", str(DATA / "cronie-example"))
    assert len(report["jobs"]) == 6
    assert all(j["id"] is None for j in report["jobs"])
    assert report["jobs"][0]["next_run_at"].endswith("Z")
    assert listed(db) == []


def test_prefix_names_the_jobs(db: Path) -> None:
    report = imported(db, "--prefix", "home", str(DATA / "debian-user-example"))
    assert [j["name"] for j in report["jobs"]] == [f"home-{n}" for n in range(1, 9)]
    imported(db, str(DATA / "debian-user-example"))
    assert len(listed(db)) == 16


def test_bad_prefix_is_a_usage_error(db: Path) -> None:
    proc = jobctl(db, "import-crontab", "--prefix", "no spaces", str(DATA / "cronie-example"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: invalid prefix")


def test_stdin_dash(db: Path) -> None:
    text = "FOO = 'bar baz'\n*/5 * * * * echo hi # not a comment"
    report = imported(db, "-", stdin=text)
    (job,) = report["jobs"]
    assert job["command"] == "echo hi # not a comment"
    assert job["env"] == {"FOO": "bar baz"}
    assert job["trigger"]["tz"] == "UTC"


def test_system_debian_etc_crontab(db: Path) -> None:
    report = imported(db, "--system", str(DATA / "debian-etc-crontab"))
    jobs = report["jobs"]
    assert [j["trigger"]["expr"] for j in jobs] == [
        "17 * * * *",
        "25 6 * * *",
        "47 6 * * 7",
        "52 6 1 * *",
    ]
    assert jobs[0]["command"] == "cd / && run-parts --report /etc/cron.hourly"
    assert all("(user: root)" in j["description"] for j in jobs)
    if getpass.getuser() != "root":
        assert any("runs as root" in n["message"] for n in report["notices"])


def test_cron_d_files_import_with_system(db: Path) -> None:
    for name in ("cron.d-certbot", "cron.d-php", "cron.d-sysstat"):
        report = imported(db, "--system", "--prefix", name.replace("cron.d-", ""), str(DATA / name))
        assert report["errors"] == []
    assert len(listed(db)) == 4


def test_missing_file_is_an_error(db: Path, tmp_path: Path) -> None:
    proc = jobctl(db, "import-crontab", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: cannot read")


def test_not_utf8_is_an_error(db: Path, tmp_path: Path) -> None:
    f = tmp_path / "latin1"
    f.write_bytes(b"* * * * * echo caf\xe9\n")
    proc = jobctl(db, "import-crontab", str(f))
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error:") and "UTF-8" in proc.stderr


def test_no_argument_without_crontab_command(db: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    env["PATH"] = str(tmp_path)  # no crontab here
    proc = subprocess.run(
        [JOBCTL, "--db", str(db), "import-crontab"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: no FILE given")


def test_no_argument_reads_crontab_l(db: Path, tmp_path: Path) -> None:
    fake = tmp_path / "crontab"
    fake.write_text("#!/bin/sh\n[ \"$1\" = -l ] && printf '@daily echo from-crontab\\n'\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
    env["PATH"] = f"{tmp_path}:/usr/bin:/bin"
    proc = subprocess.run(
        [JOBCTL, "--db", str(db), "import-crontab", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["jobs"][0]["command"] == "echo from-crontab"


def test_last_day_and_nth_weekday_import(db: Path) -> None:
    text = "CRON_TZ=UTC\n0 23 L * * echo month-end\n0 9 * * 5#2,1#1 echo meeting\n"
    report = imported(db, "-", stdin=text)
    assert report["errors"] == []
    jobs = {j["name"]: j for j in listed(db)}
    assert jobs["cron-1"]["trigger"]["expr"] == "0 23 L * *"
    assert jobs["cron-2"]["trigger"]["expr"] == "0 9 * * 5#2,1#1"
    assert jobs["cron-1"]["next_run_at"] is not None and jobs["cron-2"]["next_run_at"] is not None
    proc = jobctl(db, "next", "cron-1", "--from", "2025-02-01T00:00Z", "-n", "2", "--json")
    assert json.loads(proc.stdout) == ["2025-02-28T23:00:00Z", "2025-03-31T23:00:00Z"]


def test_percent_stdin_ends_with_a_newline_as_cron_writes_it(db: Path) -> None:
    report = imported(db, "-", stdin="0 * * * * cat \\%\\% % stdin%with%lines\n")
    assert report["jobs"][0]["command"] == "cat %% "
    assert report["jobs"][0]["stdin"] == " stdin\nwith\nlines\n"


@pytest.mark.parametrize("schedule", ["0 0 LW * *", "0 0 ? * *", "0 0 * * 5L", "H 0 * * *"])
def test_other_dialect_extensions_are_reported(db: Path, schedule: str) -> None:
    proc = jobctl(db, "import-crontab", "-", stdin=f"{schedule} true\n")
    assert proc.returncode == 2 and "line 1" in proc.stderr
    assert not db.exists()
