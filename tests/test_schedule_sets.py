"""Schedule sets (README, Schedule sets; jobctl(1), SCHEDULE SETS): several --cron and
--every a job, exclusions by cron expression and by calendar, an active range.

The set's windows are held against a reference computed here, independently: croniter
over each expression and plain arithmetic for each fixed rate, merged. The rest drives
the real CLI, the real store (SQLite file or the suite's PostgreSQL) and a real daemon.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import clihelpers
import pytest
from conftest import StoreView, wait_until
from croniter import croniter

from jobctl import planner
from jobctl.models import JobState, RunState, SkipReason, Trigger, TriggerKind
from jobctl.triggers import iter_fires, made_by, next_fire, next_fires

BERLIN = ZoneInfo("Europe/Berlin")


class Out:
    """One command's exit code and output."""

    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.exit_code, self.stdout, self.stderr = code, stdout, stderr
        self.output = stdout + stderr


class Cli:
    """The real CLI through its error boundary (``jobctl.cli.main``), on the test's
    database of either backend."""

    def __init__(self, db: Any, capsys: pytest.CaptureFixture[str]) -> None:
        self.inner = clihelpers.Jobctl(db, capsys)
        self.db = db
        self._view: StoreView | None = None

    def __call__(self, *args: str, ok: bool = True) -> Out:
        r = self.inner(*args)
        if ok:
            assert r.code == 0, (args, r)
        return Out(r.code, r.out, r.err)

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)

    def store(self) -> StoreView:
        if self._view is None:
            self._view = StoreView(self.db)
        return self._view

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None


@pytest.fixture
def jobctl(db: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    cli = Cli(db, capsys)
    yield cli
    cli.close()


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _croniter_fires(expr: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """croniter's fire times of ``expr`` in ``zone`` in (start, end], as UTC."""
    it = croniter(expr, start.astimezone(zone), day_or=True, implement_cron_bug=True)
    out = []
    while True:
        fire = it.get_next(datetime).astimezone(UTC)
        if fire > end:
            return out
        out.append(fire)


# ---------------------------------------------------------------------- windows of a set

# fixed times outside the hours that DST skips or repeats, where croniter and cron(8) agree,
# and one that coincides with another (12:00 is in both "0 12 * * *" and "0 */6 * * *")
SET_CRONS = ["30 9 * * 1-5", "0 12 * * *", "0 */6 * * *", "15 18 1,15 * *"]


def test_set_windows_are_the_merged_windows_of_its_triggers_across_dst() -> None:
    anchor = datetime(2026, 1, 1, 0, 7, tzinfo=UTC)
    every = timedelta(hours=5, minutes=30)
    texts = [*SET_CRONS, "every 5h30m"]
    trigger = Trigger(TriggerKind.SET, tz="Europe/Berlin", expr=" | ".join(texts), anchor=anchor)
    # a year that holds both of Berlin's changes (29 March, 25 October)
    start = datetime(2026, 2, 1, tzinfo=UTC)
    end = datetime(2027, 2, 1, tzinfo=UTC)
    reference: set[datetime] = set()
    for expr in SET_CRONS:
        reference.update(_croniter_fires(expr, BERLIN, start, end))
    k = (start - anchor) // every + 1
    while anchor + k * every <= end:
        reference.add(anchor + k * every)
        k += 1
    expected = sorted(reference)
    got = list(iter_fires(trigger, start, end))
    assert got == expected
    assert len(got) == len(set(got))  # coinciding instants are one window
    # next_fires agrees, and walking next_fire one window at a time too
    assert next_fires(trigger, start, 500) == expected[:500]
    t, walked = start, []
    for _ in range(300):
        nxt = next_fire(trigger, t)
        assert nxt is not None
        walked.append(nxt)
        t = nxt
    assert walked == expected[:300]
    # the windows right around both changes are there, in real (UTC) time
    spring = [
        w for w in got if datetime(2026, 3, 28, tzinfo=UTC) <= w < datetime(2026, 3, 31, tzinfo=UTC)
    ]
    assert datetime(2026, 3, 30, 7, 30, tzinfo=UTC) in spring  # 09:30 CEST, Monday
    assert datetime(2026, 3, 28, 8, 30, tzinfo=UTC) not in spring  # a Saturday
    assert datetime(2026, 10, 26, 8, 30, tzinfo=UTC) in got  # 09:30 CET, Monday


def test_the_first_trigger_given_names_a_coinciding_window() -> None:
    trigger = Trigger(TriggerKind.SET, tz="UTC", expr="0 */6 * * * | 0 12 * * *")
    noon = datetime(2026, 5, 4, 12, tzinfo=UTC)
    assert made_by(trigger, noon) == "0 */6 * * *"
    swapped = Trigger(TriggerKind.SET, tz="UTC", expr="0 12 * * * | 0 */6 * * *")
    assert made_by(swapped, noon) == "0 12 * * *"
    assert made_by(trigger, datetime(2026, 5, 4, 18, tzinfo=UTC)) == "0 */6 * * *"
    assert made_by(trigger, datetime(2026, 5, 4, 18, 1, tzinfo=UTC)) is None


def test_an_active_range_bounds_the_windows() -> None:
    lo = datetime(2026, 6, 1, 10, tzinfo=UTC)
    hi = datetime(2026, 6, 1, 13, tzinfo=UTC)
    trigger = Trigger(
        TriggerKind.SET, tz="UTC", expr="0 * * * * | 30 * * * *", active_from=lo, active_until=hi
    )
    got = next_fires(trigger, datetime(2026, 6, 1, tzinfo=UTC), 50)
    assert got[0] == lo and got[-1] == hi and len(got) == 7
    assert next_fire(trigger, hi) is None


def test_a_calendar_day_whose_midnight_dst_skips_starts_at_the_change() -> None:
    from jobctl.triggers import excluded

    # Santiago moves from 00:00 (-04) to 01:00 (-03) on 6 September 2026
    days = frozenset({date(2026, 9, 6)})
    zone = "America/Santiago"

    def out(*hm: int) -> bool:
        return excluded((), days, zone, datetime(*hm, tzinfo=UTC))

    assert not out(2026, 9, 6, 3, 59)  # 5 Sep 23:59 -04
    assert out(2026, 9, 6, 4, 0)  # 6 Sep 01:00 -03, the day's first instant
    assert out(2026, 9, 7, 2, 59)  # 6 Sep 23:59 -03
    assert not out(2026, 9, 7, 3, 0)  # 7 Sep 00:00 -03
    # an --except expression is read in the zone too
    assert excluded(("59 23 * * *",), frozenset(), zone, datetime(2026, 9, 7, 2, 59, tzinfo=UTC))
    assert not excluded(
        ("59 23 * * *",), frozenset(), zone, datetime(2026, 9, 6, 23, 59, tzinfo=UTC)
    )


# ---------------------------------------------------------------------- the CLI


def _job(jobctl: Any, name: str) -> dict[str, Any]:
    return jobctl.json("show", name)


def test_add_with_several_triggers_shows_the_set(jobctl: Any) -> None:
    jobctl(
        "add", "rep", "--cron", "0 9 * * 1-5", "--cron", "0 12 * * 6", "--every", "90m",
        "--start", "2026-01-01T00:00", "--tz", "Europe/Berlin", "--", "true",
    )  # fmt: skip
    job = _job(jobctl, "rep")
    assert job["trigger"]["kind"] == "set"
    assert job["trigger"]["expr"] == "0 9 * * 1-5 | 0 12 * * 6 | every 1h30m"
    assert job["trigger"]["tz"] == "Europe/Berlin"
    assert [(t["kind"], t["expr"]) for t in job["triggers"]] == [
        ("cron", "0 9 * * 1-5"),
        ("cron", "0 12 * * 6"),
        ("interval", "1h30m"),
    ]
    # one trigger: triggers holds it alone, trigger stays as it was
    jobctl("add", "one", "--cron", "5 4 * * *", "--tz", "UTC", "--", "true")
    one = _job(jobctl, "one")
    assert one["trigger"]["kind"] == "cron"
    assert [t["expr"] for t in one["triggers"]] == ["5 4 * * *"]
    # edit with a trigger flag replaces the whole set
    jobctl("edit", "rep", "--cron", "0 7 * * *")
    job = _job(jobctl, "rep")
    assert job["trigger"]["kind"] == "cron" and job["trigger"]["expr"] == "0 7 * * *"
    jobctl("edit", "rep", "--every", "1h", "--every", "45m")
    assert _job(jobctl, "rep")["trigger"]["expr"] == "every 1h | every 45m"


@pytest.mark.parametrize(
    "args",
    [
        ["--cron", "0 9 * * *", "--at", "2099-01-01T00:00"],
        ["--cron", "0 9 * * *", "--manual"],
        ["--cron", "0 9 * * *", "--cron", "@reboot"],
        ["--every", "1h", "--every", "2h", "--after-completion"],
        ["--cron", "0 9 * * *", "--every", "0"],
        ["--cron", "0 9 * * *", "--except", "61 * * * *"],
        ["--cron", "0 9 * * *", "--except-calendar", "nosuch"],
        ["--cron", "0 9 * * *", "--active-from", "2027-01-02", "--active-until", "2027-01-01"],
        ["--manual", "--active-until", "2027-01-01"],
    ],
)
def test_bad_sets_are_invalid_input(jobctl: Any, args: list[str]) -> None:
    r = jobctl("add", "bad", *args, "--", "true", ok=False)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    assert jobctl.json("list") == []


def test_next_marks_an_excluded_time_and_json_leaves_it_out(jobctl: Any) -> None:
    jobctl(
        "add", "hourly", "--cron", "0 * * * *", "--tz", "UTC", "--except", "0 3 * * *",
        "--", "true",
    )  # fmt: skip
    frm = "2026-07-01T00:30"
    human = jobctl("next", "hourly", "-n", "5", "--from", frm).stdout.splitlines()
    assert [line.endswith("excluded") for line in human] == [False, False, True, False, False]
    assert "03:00" in human[2]
    times = jobctl.json("next", "hourly", "-n", "4", "--from", frm)
    assert times == [
        "2026-07-01T01:00:00Z",
        "2026-07-01T02:00:00Z",
        "2026-07-01T04:00:00Z",
        "2026-07-01T05:00:00Z",
    ]
    jobctl("edit", "hourly", "--no-except")
    assert _job(jobctl, "hourly")["except"] == []
    assert jobctl.json("next", "hourly", "-n", "3", "--from", frm)[2] == "2026-07-01T03:00:00Z"


def test_a_calendar_date_is_read_in_the_jobs_zone(jobctl: Any) -> None:
    jobctl("calendar", "add", "xmas", "2026-12-25")
    # Auckland is UTC+13 in December: its 25th runs from 24 Dec 11:00Z to 25 Dec 11:00Z
    jobctl(
        "add", "nz", "--cron", "0 */6 * * *", "--tz", "Pacific/Auckland",
        "--except-calendar", "xmas", "--", "true",
    )  # fmt: skip
    times = jobctl.json("next", "nz", "-n", "8", "--from", "2026-12-24T00:00Z")
    assert times == [
        "2026-12-24T05:00:00Z",  # 24 Dec 18:00 NZDT
        # 11:00Z, 17:00Z, 23:00Z and 05:00Z are 25 Dec in Auckland: excluded
        "2026-12-25T11:00:00Z",  # 26 Dec 00:00 NZDT
        "2026-12-25T17:00:00Z",
        "2026-12-25T23:00:00Z",
        "2026-12-26T05:00:00Z",
        "2026-12-26T11:00:00Z",
        "2026-12-26T17:00:00Z",
        "2026-12-26T23:00:00Z",
    ]
    # 25 Dec 12:00 UTC is the 26th in Auckland: not excluded, though it is the 25th in UTC
    assert "2026-12-25T17:00:00Z" in times


def test_calendar_add_rm_list(jobctl: Any) -> None:
    r = jobctl("calendar", "add", "hol", "2026-12-25", "2027-01-01")
    assert r.stdout == "calendar hol: 2 dates added\n"
    # what it says is what changed: a date the calendar already holds is not counted
    r = jobctl("calendar", "add", "hol", "2026-12-26", "2026-12-25")
    assert r.stdout == "calendar hol: 1 date added\n"
    jobctl("calendar", "add", "spare", "2026-05-01")
    jobctl("add", "a", "--cron", "0 9 * * *", "--except-calendar", "hol", "--", "true")
    assert jobctl.json("calendar", "list") == [
        {"name": "hol", "dates": ["2026-12-25", "2026-12-26", "2027-01-01"], "used_by": ["a"]},
        {"name": "spare", "dates": ["2026-05-01"], "used_by": []},
    ]
    r = jobctl("calendar", "rm", "hol", ok=False)
    assert r.exit_code == 1 and "a" in r.stderr and r.stderr.startswith("Error: ")
    r = jobctl("calendar", "rm", "hol", "2026-12-26", "2026-07-14")
    assert r.stdout == "calendar hol: 1 date removed\n"
    assert jobctl.json("calendar", "list", "hol")[0]["dates"] == ["2026-12-25", "2027-01-01"]
    jobctl("calendar", "rm", "spare")
    assert [c["name"] for c in jobctl.json("calendar", "list")] == ["hol"]
    assert jobctl("calendar", "rm", "spare", ok=False).exit_code == 1
    assert jobctl("calendar", "add", "hol", "2026-02-30", ok=False).exit_code == 2
    assert jobctl("calendar", "list", "nosuch", ok=False).exit_code == 1
    jobctl("edit", "a", "--no-except")
    jobctl("calendar", "rm", "hol")
    assert jobctl.json("calendar", "list") == []


# ---------------------------------------------------------------------- the scheduler's records


def _fire_at(view: Any, name: str, now: datetime) -> Any:
    job = view.get_job(name)
    due = [(job.id, int(job.next_run_at.timestamp() * 1_000_000))]

    def plan(j: Any, has_leased: bool, has_waiting: bool, maintenance: Any) -> Any:
        return planner.plan_due(
            j, now, missed=False, rng=random.Random(0), has_leased_run=has_leased,
            has_waiting_run=has_waiting, maintenance=maintenance,
        )  # fmt: skip

    return view.daemon.fire(due, now, plan)


def test_an_exclusion_matching_the_coming_minute_is_recorded_skipped(jobctl: Any) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    coming = now + timedelta(minutes=1)
    jobctl(
        "add", "m", "--cron", "* * * * *", "--tz", "UTC",
        "--except", f"{coming.minute} {coming.hour} * * *", "--", "true",
    )  # fmt: skip
    view = jobctl.store()
    assert view.get_job("m").next_run_at == coming
    fired = _fire_at(view, "m", coming)
    assert [w.state for w in fired[0].plan.windows] == [RunState.SKIPPED]
    runs = jobctl.json("runs", "m")
    assert [(r["scheduled_for"], r["state"], r["skip_reason"]) for r in runs] == [
        (_iso(coming), "skipped", "excluded")
    ]
    # the next window runs as usual, and the job moves on past it
    assert view.get_job("m").next_run_at == coming + timedelta(minutes=1)
    _fire_at(view, "m", coming + timedelta(minutes=1))
    states = [(r["scheduled_for"], r["state"]) for r in jobctl.json("runs", "m")]
    assert states[0] == (_iso(coming + timedelta(minutes=1)), "pending")


def test_excluded_windows_missed_while_down_are_excluded_not_missed(jobctl: Any) -> None:
    view = jobctl.store()
    jobctl("calendar", "add", "off", "2026-03-03")
    jobctl(
        "add", "d", "--cron", "0 12 * * *", "--tz", "UTC", "--except-calendar", "off",
        "--catchup", "all", "--", "true",
    )  # fmt: skip
    job = view.get_job("d")
    start = datetime(2026, 3, 1, 12, tzinfo=UTC)
    now = datetime(2026, 3, 5, 13, tzinfo=UTC)
    plan = planner.plan_due(job.moved_to(start), now, missed=True, rng=random.Random(0))
    assert plan is not None
    got = {(w.scheduled_for.day, w.state, w.skip_reason) for w in plan.windows}
    assert (3, RunState.SKIPPED, SkipReason.EXCLUDED) in got
    assert {d for d, s, _ in got if s is RunState.PENDING} == {1, 2, 4, 5}
    assert plan.missed_increment == 0


def test_after_the_active_range_the_job_is_done(jobctl: Any) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    until = now + timedelta(minutes=2)
    jobctl(
        "add", "r", "--cron", "* * * * *", "--tz", "UTC",
        "--active-until", until.strftime("%Y-%m-%dT%H:%M"), "--", "true",
    )  # fmt: skip
    view = jobctl.store()
    _fire_at(view, "r", now + timedelta(minutes=1))
    assert view.get_job("r").state is JobState.ACTIVE
    _fire_at(view, "r", until)
    job = view.get_job("r")
    assert job.state is JobState.DONE and job.next_run_at is None
    assert _job(jobctl, "r")["state"] == "done"
    assert len(jobctl.json("runs", "r")) == 2


def test_a_job_added_or_edited_after_its_active_range_is_done_at_once(jobctl: Any) -> None:
    # no scheduler turn ever comes for a job with no window left: it is done from the start
    past = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    jobctl(
        "add", "gone", "--cron", "* * * * *", "--tz", "UTC", "--active-until", past, "--", "true"
    )
    job = _job(jobctl, "gone")
    assert (job["state"], job["next_run_at"]) == ("done", None)
    assert [j["state"] for j in jobctl.json("list")] == ["done"]
    jobctl("add", "e", "--cron", "* * * * *", "--tz", "UTC", "--", "true")
    jobctl("edit", "e", "--active-until", past)
    assert _job(jobctl, "e")["state"] == "done"
    # a range in the future keeps the job active
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    jobctl("edit", "e", "--active-until", later)
    assert _job(jobctl, "e")["state"] == "active"


def test_coverage_shows_excluded_windows_and_backfill_never_runs_them(jobctl: Any) -> None:
    jobctl(
        "add", "h", "--cron", "0 * * * *", "--tz", "UTC", "--except", "0 2 * * *", "--", "true",
    )  # fmt: skip
    rng = ["--from", "2026-01-01T00:00", "--to", "2026-01-01T04:00"]
    cov = jobctl.json("coverage", "h", *rng)
    assert [(c["state"], c["skip_reason"]) for c in cov] == [
        ("none", None),
        ("none", None),
        ("skipped", "excluded"),
        ("none", None),
    ]
    assert "1 skipped" in jobctl("coverage", "h", *rng).stdout
    done = jobctl.json("backfill", "h", *rng)
    assert len(done["created"]) == 3
    windows = sorted(r["scheduled_for"] for r in jobctl.json("runs", "h"))
    assert "2026-01-01T02:00:00Z" not in windows and len(windows) == 3


# ---------------------------------------------------------------------- jobs as code


def _setup_sets(jobctl: Any) -> None:
    jobctl("calendar", "add", "holidays", "2026-12-25", "2027-01-01")
    jobctl("calendar", "add", "unused", "2026-05-01")
    jobctl(
        "add", "report", "--cron", "0 9 * * 1-5", "--cron", "0 12 * * 6", "--every", "7h",
        "--start", "2026-01-01T00:00", "--tz", "Europe/Berlin", "--except", "30 * * * *",
        "--except-calendar", "holidays", "--active-from", "2026-01-01",
        "--active-until", "2030-01-01T00:00", "--", "echo hi",
    )  # fmt: skip


def test_export_apply_round_trip_of_sets_exclusions_and_calendars(
    jobctl: Any, tmp_path: Path, db: Any
) -> None:
    _setup_sets(jobctl)
    text = jobctl("export").stdout
    assert "[calendars.holidays]" in text and "unused" not in text
    assert 'cron = [\n    "0 9 * * 1-5",\n    "0 12 * * 6",\n]' in text
    src = tmp_path / "jobs.toml"
    src.write_text(text)
    before = _job(jobctl, "report")
    r = jobctl("apply", str(src))
    assert r.stdout == ""
    assert _job(jobctl, "report")["revision"] == before["revision"]
    # the JSON form holds the same
    doc = json.loads(jobctl("export", "--format", "json").stdout)
    assert doc["calendars"] == {"holidays": {"dates": ["2026-12-25", "2027-01-01"]}}
    assert doc["jobs"]["report"]["every"] == "7h"
    assert doc["jobs"]["report"]["except"] == ["30 * * * *"]
    # a calendar's dates changed in the file are applied with the jobs
    src.write_text(text.replace('"2027-01-01"', '"2027-01-06"'))
    assert jobctl("apply", str(src)).stdout.splitlines() == ["~ calendar holidays"]
    assert jobctl.json("calendar", "list", "holidays")[0]["dates"] == ["2026-12-25", "2027-01-06"]


def test_apply_onto_an_empty_database_creates_calendars_and_sets(
    jobctl: Any, tmp_path: Path, request: pytest.FixtureRequest, capsys: Any
) -> None:
    from conftest import BACKEND

    _setup_sets(jobctl)
    text = jobctl("export").stdout
    if BACKEND == "postgresql":
        # a database without even the jobctl schema: apply creates it
        dbs = request.getfixturevalue("pg_databases")
        url = dbs.new(migrated=False)
        request.addfinalizer(lambda: dbs.drop(url))
        other = Cli(url, capsys)
    else:
        other = Cli(tmp_path / "empty.db", capsys)
    try:
        src = tmp_path / "jobs.toml"
        src.write_text(text)
        assert other("apply", str(src)).stdout.splitlines() == ["+ calendar holidays", "+ report"]
        assert other("export").stdout == text
        job = other.json("show", "report")
        want = _job(jobctl, "report")
        for key in (
            "trigger",
            "triggers",
            "except",
            "except_calendars",
            "active_from",
            "active_until",
        ):
            assert job[key] == want[key], key
        assert other.json("calendar", "list") == [
            {"name": "holidays", "dates": ["2026-12-25", "2027-01-01"], "used_by": ["report"]}
        ]
        assert other("apply", str(src)).stdout == ""
    finally:
        other.close()


def test_a_file_naming_an_unknown_calendar_applies_nothing(jobctl: Any, tmp_path: Path) -> None:
    src = tmp_path / "jobs.toml"
    src.write_text(
        '[jobs.a]\ncron = ["0 9 * * *", "0 10 * * *"]\ntz = "UTC"\n'
        'except_calendars = ["nosuch"]\ncommand = "true"\n'
    )
    r = jobctl("apply", str(src), ok=False)
    assert r.exit_code == 2 and "nosuch" in r.stderr
    assert jobctl.json("list") == []


# ---------------------------------------------------------------------- a daemon


def test_a_daemon_runs_a_two_trigger_job_once_per_window(
    jobctl: Any, start_daemon: Any, tmp_path: Path
) -> None:
    out = tmp_path / "fires"
    now = datetime.now(UTC)
    start = (now + timedelta(seconds=3)).replace(microsecond=0)
    jobctl(
        "add", "pair", "--every", "2s", "--every", "3s", "--start", _iso(start),
        "--overlap", "allow", "--catchup", "skip", "--",
        f'echo "$JOBCTL_SCHEDULED_FOR $JOBCTL_TRIGGER" >> {out}',
    )  # fmt: skip
    start_daemon()
    # windows at +2, +3, +4, +6 (both), +8, +9, +10, +12 (both) seconds from start
    last = start + timedelta(seconds=12)

    def lines() -> list[str]:
        return out.read_text().splitlines() if out.exists() else []

    wait_until(
        lambda: any(line.startswith(_iso(last)) for line in lines()),
        40,
        what="the window 12 s after the start",
    )
    wait_until(
        lambda: all(r["state"] == "succeeded" for r in jobctl.json("runs", "pair")),
        20,
        what="every run to end",
    )
    got = [line.split(" ", 1) for line in lines()]
    windows = [w for w, _ in got]
    assert len(windows) == len(set(windows)), "a window ran twice"
    seen = {datetime.strptime(w, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC): t for w, t in got}
    expected = {start + timedelta(seconds=s) for s in (2, 3, 4, 6, 8, 9, 10, 12)}
    assert expected <= set(seen)
    assert seen[start + timedelta(seconds=6)] == "every 2s"  # both: the first given
    assert seen[start + timedelta(seconds=12)] == "every 2s"
    assert seen[start + timedelta(seconds=9)] == "every 3s"
    runs = [r for r in jobctl.json("runs", "pair", "--limit", "100")]
    assert len({r["scheduled_for"] for r in runs}) == len(runs)


def test_the_set_keeps_the_order_its_triggers_were_given_in(
    jobctl: Any, db: Any, tmp_path: Path
) -> None:
    # click hands a command its --cron values, then its --every values: the order given is
    # the set's all the same, through show, export, apply, history and rollback, and the API
    jobctl(
        "add", "mix", "--every", "1h", "--cron", "0 * * * *", "--cron", "30 * * * *",
        "--start", "2026-01-01T00:00", "--tz", "UTC", "--", "true",
    )  # fmt: skip
    job = _job(jobctl, "mix")
    assert job["trigger"]["expr"] == "every 1h | 0 * * * * | 30 * * * *"
    assert [t["kind"] for t in job["triggers"]] == ["interval", "cron", "cron"]
    assert made_by(jobctl.store().get_job("mix").trigger, datetime(2026, 5, 4, 9, tzinfo=UTC)) == (
        "every 1h"
    )
    text = jobctl("export", "mix").stdout
    assert text.index("every = ") < text.index("cron = ") < text.index("start = ")
    src = tmp_path / "mix.toml"
    src.write_text(text)
    assert jobctl("apply", str(src)).stdout == ""  # unchanged
    # edit replaces the set in the order of its flags, interleaved too
    jobctl("edit", "mix", "--cron", "*/5 * * * *", "--every", "10m", "--cron", "0 0 * * *")
    assert _job(jobctl, "mix")["trigger"]["expr"] == "*/5 * * * * | every 10m | 0 0 * * *"
    # a file's order is its keys' order; onto an empty database too
    other = Cli(tmp_path / "other.db", jobctl.inner.capsys)
    try:
        other("apply", str(src))
        assert _job(other, "mix")["trigger"]["expr"] == "every 1h | 0 * * * * | 30 * * * *"
    finally:
        other.close()
    # rollback goes back to the order of that revision
    jobctl("rollback", "mix", "1")
    assert _job(jobctl, "mix")["trigger"]["expr"] == "every 1h | 0 * * * * | 30 * * * *"
    # the API takes the order of trigger.expr
    from webhelpers import Server, token_file

    server = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path)).wait_ready()
    try:
        body = {
            "name": "api",
            "trigger": {"kind": "set", "expr": "every 2h | 0 */2 * * *", "tz": "UTC"},
            "command": "true",
        }
        r = server.request("POST", "/v1/jobs", body)
        assert r.status == 201, r.text
        assert [t["kind"] for t in r.json()["triggers"]] == ["interval", "cron"]
    finally:
        server.close()


def test_a_coinciding_window_runs_named_by_the_trigger_given_first(
    jobctl: Any, start_daemon: Any, tmp_path: Path
) -> None:
    # a backfilled window at 10:00, made by both: the daemon's run is told the --every
    out = tmp_path / "trigger"
    jobctl(
        "add", "mix", "--every", "1h", "--cron", "0 * * * *", "--start", "2026-01-01T00:00",
        "--tz", "UTC", "--", f'echo "$JOBCTL_TRIGGER" > {out}',
    )  # fmt: skip
    got = jobctl.json("backfill", "mix", "--from", "2026-01-01T10:00", "--to", "2026-01-01T10:01")
    assert len(got["created"]) == 1
    start_daemon()
    wait_until(lambda: out.exists() and out.read_text().strip(), 30, what="the backfilled run")
    assert out.read_text() == "every 1h\n"


def test_plan_counts_every_trigger_of_a_set_and_no_excluded_window(jobctl: Any) -> None:
    jobctl(
        "add", "s", "--cron", "0 3 * * *", "--cron", "0 5 * * *", "--cron", "0 3 * * *",
        "--every", "12h", "--start", "2027-01-01T01:00Z", "--tz", "UTC",
        "--except", "0 5 * * *", "--", "true",
    )  # fmt: skip
    out = jobctl.json("plan", "--from", "2027-01-01T00:00:00Z", "--hours", "24", "--by", "hour")
    assert [(s["at"], s["starts"]) for s in out["slots"]] == [
        ("2027-01-01T01:00:00Z", 1),
        ("2027-01-01T03:00:00Z", 1),  # given twice: one window
        ("2027-01-01T13:00:00Z", 1),  # 05:00 is excluded
    ]


def test_db_copy_takes_the_calendars_and_the_sets(jobctl: Any, tmp_path: Path, capsys: Any) -> None:
    _setup_sets(jobctl)
    target = tmp_path / "copy.db"
    jobctl("db", "copy", "--to", str(target))
    other = Cli(target, capsys)
    try:
        assert other.json("calendar", "list") == jobctl.json("calendar", "list")
        assert other("export").stdout == jobctl("export").stdout
        frm = ["-n", "40", "--from", "2026-12-20T00:00Z"]
        assert other.json("next", "report", *frm) == jobctl.json("next", "report", *frm)
        assert "2026-12-25" not in " ".join(other.json("next", "report", *frm))
    finally:
        other.close()


def test_show_says_what_is_excluded_and_when_the_job_is_active(jobctl: Any) -> None:
    _setup_sets(jobctl)
    lines = jobctl("show", "report").stdout.splitlines()
    assert "schedule     0 9 * * 1-5 | 0 12 * * 6 | every 7h (Europe/Berlin)" in lines
    assert "except       30 * * * *" in lines
    assert "calendars    holidays" in lines
    assert "active       from 2026-01-01 00:00:00 CET until 2030-01-01 00:00:00 CET" in lines


def test_the_api_creates_a_set_from_the_json_a_job_shows(
    jobctl: Any, db: Any, tmp_path: Path
) -> None:
    from webhelpers import Server, token_file

    _setup_sets(jobctl)
    shown = _job(jobctl, "report")
    server = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path)).wait_ready()
    try:
        body = {
            "name": "copy",
            "trigger": {
                "kind": "set",
                "expr": shown["trigger"]["expr"],
                "tz": shown["trigger"]["tz"],
                "start": shown["trigger"]["start"],
            },
            "except": shown["except"],
            "except_calendars": shown["except_calendars"],
            "active_from": shown["active_from"],
            "active_until": shown["active_until"],
            "command": "echo hi",
        }
        r = server.request("POST", "/v1/jobs", body)
        assert r.status == 201, r.text
        made = r.json()
        keys = ("trigger", "triggers", "except", "except_calendars", "active_from", "active_until")
        for key in keys:
            assert made[key] == shown[key], key
        # PATCH: a new end of the range, the set kept
        r = server.request("PATCH", "/v1/jobs/copy", {"active_until": "2031-01-01T00:00:00Z"})
        assert r.status == 200, r.text
        assert r.json()["active_until"] == "2031-01-01T00:00:00Z"
        assert r.json()["trigger"] == shown["trigger"]
        bad = dict(body, name="bad", except_calendars=["nosuch"])
        assert server.request("POST", "/v1/jobs", bad).status == 422  # invalid input
    finally:
        server.close()


def test_a_calendar_change_reaches_the_jobs_that_use_it(jobctl: Any) -> None:
    jobctl("calendar", "add", "off", "2026-08-01")
    jobctl(
        "add", "daily", "--cron", "0 12 * * *", "--tz", "UTC", "--except-calendar", "off",
        "--", "true",
    )  # fmt: skip
    frm = ["-n", "3", "--from", "2026-08-01T00:00Z"]
    assert jobctl.json("next", "daily", *frm)[0] == "2026-08-02T12:00:00Z"
    jobctl("calendar", "add", "off", "2026-08-02")
    assert jobctl.json("next", "daily", *frm)[0] == "2026-08-03T12:00:00Z"
    # the scheduler reads the job's own copy of the dates: a fire records it excluded
    view = jobctl.store()
    job = view.get_job("daily")
    assert date(2026, 8, 2) in job.except_dates
    plan = planner.plan_due(
        job.moved_to(datetime(2026, 8, 2, 12, tzinfo=UTC)),
        datetime(2026, 8, 2, 12, tzinfo=UTC),
        missed=False,
        rng=random.Random(0),
    )
    assert plan is not None
    assert [(w.state, w.skip_reason) for w in plan.windows] == [
        (RunState.SKIPPED, SkipReason.EXCLUDED)
    ]
    jobctl("calendar", "rm", "off", "2026-08-01", "2026-08-02")
    assert jobctl.json("next", "daily", *frm)[0] == "2026-08-01T12:00:00Z"
