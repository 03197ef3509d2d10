"""History through the real command line and its error boundary (README, History: what is kept): retention
flags, ``runs --since``, ``list --failing``, ``logs NAME``, ``backfill`` and ``coverage``,
on both backends (the ``db`` fixture).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from clihelpers import Jobctl, assert_one_error_line, make_dead
from conftest import StoreView, finish_one, wait_until

from jobctl.models import RunState
from jobctl.outcomes import AttemptResult, Decision

T0 = datetime(2026, 1, 5, tzinfo=UTC)  # long past: backfill may reach it


@pytest.fixture
def jobctl(db, capsys, monkeypatch) -> Jobctl:
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    return Jobctl(db, capsys)


def z(text: str) -> str:
    return text + "Z"


def run_at(store: StoreView, name: str, at: datetime, code: int | None = 0) -> int:
    """A manual run of window ``at``, claimed and (unless ``code`` is None) finished."""
    run, _ = store.enqueue_run(name, at)
    if code is None:
        return run.id
    claimed, _ = store.claim("d", "h", at, 60, limit=1)
    assert [c.run.id for c in claimed] == [run.id]
    store.finish(claimed[0].run, claimed[0].run.attempt, "d", at + timedelta(seconds=1), code)
    return run.id


# ---------------------------------------------------------------------- retention flags


def test_keep_flags_on_add_edit_show_and_json(jobctl: Jobctl) -> None:
    job = jobctl.ok(
        "add", "k", "--every", "1m", "--keep-runs", "5", "--keep-for", "7d", "--json", "--", "true"
    ).json()
    assert (job["keep_runs"], job["keep_for"]) == (5, 7 * 86400)
    job = jobctl.json("edit", "k", "--keep-runs", "0")
    assert (job["keep_runs"], job["keep_for"]) == (0, 7 * 86400)
    assert "keeps" in jobctl.ok("show", "k").out
    default = jobctl.ok("add", "d", "--every", "1m", "--json", "--", "true").json()
    assert (default["keep_runs"], default["keep_for"]) == (1000, None)


@pytest.mark.parametrize(
    ("flag", "value"), [("--keep-runs", "-1"), ("--keep-for", "1.5h"), ("--keep-for", "0")]
)
def test_bad_keep_values_are_refused_and_nothing_is_written(jobctl: Jobctl, flag, value) -> None:
    r = jobctl("add", "k", "--every", "1m", flag, value, "--", "true")
    assert r.code == 2
    assert_one_error_line(r)
    assert jobctl.json("list") == []


# ---------------------------------------------------------------------- triage by name


def test_runs_since_keeps_windows_at_or_after_the_time(jobctl: Jobctl) -> None:
    jobctl.ok("add", "m", "--manual", "--", "true")
    with jobctl.store() as store:
        ids = [run_at(store, "m", T0 + timedelta(hours=h)) for h in range(4)]
    got = jobctl.json("runs", "--since", z("2026-01-05T02:00:00"))
    assert [r["id"] for r in got] == [ids[3], ids[2]]
    got = jobctl.json("runs", "m", "--since", "2026-01-05T01:00:00", "--state", "succeeded")
    assert [r["id"] for r in got] == [ids[3], ids[2], ids[1]]
    assert jobctl.json("runs", "--since", "1h") == []  # all of them are long past
    r = jobctl("runs", "--since", "yesterday")
    assert r.code == 2
    assert_one_error_line(r)


def test_list_failing_keeps_jobs_whose_last_finished_run_is_dead_or_retrying(
    jobctl: Jobctl,
) -> None:
    for name in ("ok", "dead", "healed", "retrying"):
        jobctl.ok(
            "add", name, "--manual", "--retries", "1" if name == "retrying" else "0", "--", "true"
        )
    with jobctl.store() as store:
        run_at(store, "ok", T0)
        run_at(store, "dead", T0, code=0)
        run_at(store, "dead", T0 + timedelta(hours=1), code=3)
        run_at(store, "healed", T0, code=3)
        run_at(store, "healed", T0 + timedelta(hours=1), code=0)
        run_at(store, "retrying", T0, code=3)  # failed, a retry is scheduled
    assert [j["name"] for j in jobctl.json("list", "--failing")] == ["dead", "retrying"]
    assert "healed" not in jobctl.ok("list", "--failing").out


def test_logs_name_is_the_last_attempt_of_the_most_recent_run_that_has_one(
    jobctl: Jobctl,
) -> None:
    jobctl.ok("add", "l", "--manual", "--", "true")
    with jobctl.store() as store:
        first = run_at(store, "l", T0)
        second, _ = store.enqueue_run("l", T0 + timedelta(hours=1))
        (claimed,), _ = store.claim("d", "h", T0 + timedelta(hours=1), 60)
        finish_one(
            store.daemon,
            second.id,
            claimed.run.attempt,
            "d",
            T0 + timedelta(hours=1, seconds=1),
            AttemptResult(0, output=b"second\n", output_bytes=7),
            Decision(RunState.SUCCEEDED, None),
            job_id=claimed.run.job_id,
        )
        run_at(store, "l", T0 + timedelta(hours=2), code=None)  # pending: no attempt yet
    assert jobctl.ok("logs", "l").out == "second\n"
    assert jobctl.json("logs", "l")["run_id"] == second.id
    assert jobctl.json("logs", str(first))["run_id"] == first
    r = jobctl("logs", "nosuchjob")
    assert r.code == 1
    assert_one_error_line(r)


# ---------------------------------------------------------------------- backfill


def add_hourly(jobctl: Jobctl, name: str = "b", *extra: str) -> None:
    jobctl.ok("add", name, "--cron", "0 * * * *", "--tz", "UTC", *extra, "--", "true")


def test_backfill_creates_each_window_once_and_a_second_call_creates_nothing(
    jobctl: Jobctl,
) -> None:
    add_hourly(jobctl, "b", "--priority", "3", "--lock", "L")
    first = jobctl.json(
        "backfill", "b", "--from", z("2026-01-05T00:00:00"), "--to", z("2026-01-05T06:00:00")
    )
    assert len(first["created"]) == 6 and first["requeued"] == [] and first["left"] == 0
    runs = jobctl.json("runs", "b", "--limit", "100")
    assert sorted(r["scheduled_for"] for r in runs) == [
        z(f"2026-01-05T0{h}:00:00") for h in range(6)
    ]
    assert {(r["reason"], r["state"], r["priority"], tuple(r["locks"])) for r in runs} == {
        ("backfill", "pending", 3, ("L",))
    }
    out = jobctl.ok("backfill", "b", "--from", "2026-01-05T00:00", "--to", "2026-01-05T06:00").out
    assert out.strip() == "backfill b: 0 created, 0 requeued, 6 left alone"
    assert len(jobctl.json("runs", "b", "--limit", "100")) == 6


def test_backfill_dry_run_json_gives_windows_not_run_ids(jobctl: Jobctl) -> None:
    """With --dry-run no run has an id yet: the windows that would get one are
    ``windows``, the runs that would be requeued ``requeued`` (ids)."""
    add_hourly(jobctl)
    span = ("--from", z("2026-01-05T00:00:00"), "--to", z("2026-01-05T03:00:00"))
    dry = jobctl.json("backfill", "b", *span, "--dry-run")
    assert dry == {
        "windows": [z(f"2026-01-05T0{h}:00:00") for h in range(3)],
        "requeued": [],
        "left": 0,
        "dry_run": True,
    }
    assert jobctl.json("runs", "b") == []
    done = jobctl.json("backfill", "b", *span)
    assert set(done) == {"created", "requeued", "left", "dry_run"} and done["dry_run"] is False
    assert sorted(done["created"]) == sorted(r["id"] for r in jobctl.json("runs", "b"))
    assert jobctl.json("backfill", "b", *span, "--dry-run") == {
        "windows": [],
        "requeued": [],
        "left": 3,
        "dry_run": True,
    }


def test_a_fixed_rate_jobs_add_instant_is_no_window(jobctl: Jobctl) -> None:
    """Added at T without --start, an --every 1h job's first window is T + 1h (as next
    says): T is neither shown by coverage nor backfilled. A --start given is a window."""
    from jobctl.models import JobSpec
    from jobctl.specs import TriggerOptions, build_trigger

    added = T0 + timedelta(microseconds=250_000)  # an add instant is no round time
    with jobctl.store() as store:
        trigger = build_trigger(TriggerOptions(every="1h"), added)
        store.add_job(JobSpec(name="rate", trigger=trigger, command="true"), added)
        later = build_trigger(TriggerOptions(every="1h", start=z("2026-01-05T02:00:00")), added)
        store.add_job(JobSpec(name="starts", trigger=later, command="true"), added)
        both = build_trigger(TriggerOptions(cron="30 * * * *", every="1h", tz="UTC"), added)
        store.add_job(JobSpec(name="set", trigger=both, command="true"), added)
    # job JSON's start is the first window, as export writes it: the add instant is none
    assert jobctl.json("show", "rate")["trigger"]["start"] == "2026-01-05T01:00:00.250000Z"
    expected = [f"2026-01-05T0{h}:00:00.250000Z" for h in (1, 2, 3)]
    span = ("--from", z("2026-01-04T22:00:00"), "--to", z("2026-01-05T03:30:00"))
    cov = jobctl.json("coverage", "rate", *span)
    assert [w["scheduled_for"] for w in cov] == expected
    assert len(jobctl.json("coverage", "rate", "--to", z("2026-01-05T03:30:00"))) == 3
    assert jobctl.json("backfill", "rate", *span, "--dry-run")["windows"] == expected
    created = jobctl.json("backfill", "rate", *span)["created"]
    assert sorted(r["scheduled_for"] for r in jobctl.json("runs", "rate")) == expected
    assert len(created) == 3
    # a schedule set's --every member is anchored at the add too
    in_set = [w["scheduled_for"] for w in jobctl.json("coverage", "set", *span)]
    crons = [z("2026-01-04T22:30:00"), z("2026-01-04T23:30:00")]  # before the add: they count
    crons += [z(f"2026-01-05T0{h}:30:00") for h in (0, 1, 2)]
    assert in_set == sorted(expected + crons)
    assert jobctl.json("backfill", "set", *span, "--dry-run")["windows"] == in_set
    # a --start given is a window, after the add (here) or before it (the next test)
    starts = [w["scheduled_for"] for w in jobctl.json("coverage", "starts", *span)]
    assert starts == [z("2026-01-05T02:00:00"), z("2026-01-05T03:00:00")]


def _other_database(tmp_path, request) -> Jobctl:
    """A second, empty database of the suite's backend."""
    from conftest import BACKEND

    if BACKEND == "postgresql":
        dbs = request.getfixturevalue("pg_databases")
        url = dbs.new()
        request.addfinalizer(lambda: dbs.drop(url))
        return Jobctl(url, request.getfixturevalue("capsys"))
    return Jobctl(tmp_path / "other.db", request.getfixturevalue("capsys"))


def test_an_anchor_set_by_edit_or_carried_by_a_file_is_no_window(
    jobctl: Jobctl, tmp_path, request
) -> None:
    """The instant of an edit without --start only sets the phase, as that of an add
    does; and a job exported and applied onto another database keeps that anchor out of
    coverage and backfill there."""
    from jobctl import specs
    from jobctl.models import JobSpec
    from jobctl.specs import TriggerOptions, build_trigger
    from jobctl.triggers import next_fire

    added = T0 + timedelta(microseconds=250_000)
    edited = T0 + timedelta(hours=2, minutes=10, microseconds=500_000)
    with jobctl.store() as store:
        for name, trig in (
            ("rate", TriggerOptions(every="1h")),
            ("set", TriggerOptions(cron="0 * * * *", every="1h", tz="UTC")),
        ):
            spec = JobSpec(name=name, trigger=build_trigger(trig, added), command="true")
            store.add_job(spec, added)
        # edit --every 30m (and a new set) without --start, at `edited`
        for name, trig in (
            ("rate", TriggerOptions(every="30m")),
            ("set", TriggerOptions(cron="15 * * * *", every="45m", tz="UTC")),
        ):
            job = store.get_job(name)
            changes = specs.edit_changes(job, trig, {}, command=None, rename=None, now=edited)
            nxt = next_fire(changes["trigger"], edited)
            store.edit_job(name, changes, edited, next_run_at=nxt, restart_schedule=True)
    span = ("--from", z("2026-01-05T00:00:00"), "--to", z("2026-01-05T05:00:00"))
    after_edit = edited + timedelta(minutes=30)
    rate = [
        (after_edit + k * timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
        for k in range(5)
    ]  # 02:40:00.5 ... 04:40:00.5: not 02:10:00.5, the edit's instant
    in_set = sorted(
        [z(f"2026-01-05T0{h}:15:00") for h in range(5)]
        + [
            (edited + k * timedelta(minutes=45)).isoformat().replace("+00:00", "Z")
            for k in (1, 2, 3)
        ]
    )

    def windows(cli: Jobctl, name: str) -> list[str]:
        cov = [w["scheduled_for"] for w in cli.json("coverage", name, *span)]
        dry = cli.json("backfill", name, *span, "--dry-run")
        assert dry["windows"] == cov, name
        return cov

    assert windows(jobctl, "rate") == rate
    assert windows(jobctl, "set") == in_set
    # export | apply onto another database: the same windows, the anchor none of them
    text = jobctl.ok("export").out
    assert f'start = "{after_edit.isoformat()}"' in text  # the first window, a window
    src = tmp_path / "jobs.toml"
    src.write_text(text)
    assert jobctl.ok("apply", str(src)).out == ""  # its own database: no change
    other = _other_database(tmp_path, request)
    assert other.ok("apply", str(src)).out.splitlines() == ["+ rate", "+ set"]
    assert windows(other, "rate") == rate
    assert windows(other, "set") == in_set
    assert other.ok("export").out == text
    created = other.json("backfill", "rate", *span)["created"]
    assert sorted(r["scheduled_for"] for r in other.json("runs", "rate")) == rate
    assert len(created) == len(rate)


def test_the_instant_of_a_cli_edit_is_no_window(jobctl: Jobctl) -> None:
    # the real edit, now: its instant is past by the time coverage and backfill look
    before = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    jobctl.ok("add", "r", "--cron", "0 0 1 1 *", "--", "true")
    jobctl.ok("edit", "r", "--every", "1h")
    assert jobctl.json("coverage", "r") == []
    jobctl.ok("edit", "r", "--every", "2h", "--every", "3h")  # a set of rates
    assert jobctl.json("coverage", "r") == []
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert jobctl.json("coverage", "r", "--from", before, "--to", now) == []
    assert jobctl.json("backfill", "r", "--from", before, "--to", now, "--dry-run") == {
        "windows": [],
        "requeued": [],
        "left": 0,
        "dry_run": True,
    }


def test_rollback_to_a_revision_from_before_the_flag_keeps_the_add_instant_no_window(
    jobctl: Jobctl,
) -> None:
    """A revision written before a fixed rate's anchor was told apart holds the add
    instant as its start; rolled back to after an edit, that instant stays no window."""
    import json

    from jobctl import specs
    from jobctl.models import JobSpec
    from jobctl.specs import TriggerOptions, build_trigger

    added = T0 + timedelta(microseconds=250_000)
    edited = T0 + timedelta(hours=2, microseconds=500_000)
    with jobctl.store() as store:
        trigger = build_trigger(TriggerOptions(every="1h"), added)
        store.add_job(JobSpec(name="r", trigger=trigger, command="true"), added)
        job = store.get_job("r")
        changes = specs.edit_changes(
            job, TriggerOptions(every="30m"), {}, command=None, rename=None, now=edited
        )
        store.edit_job("r", changes, edited, next_run_at=None, restart_schedule=True)
        with store.write() as c:  # revision 1 as it was written: start, the add instant
            (text,) = c.execute(
                "SELECT definition FROM job_revisions WHERE job_id = ? AND revision = 1",
                (job.id,),
            ).fetchone()
            table = json.loads(text)
            assert table["start"] == "2026-01-05T01:00:00.250000+00:00"
            table["start"] = "2026-01-05T00:00:00.250000+00:00"
            c.execute(
                "UPDATE job_revisions SET definition = ? WHERE job_id = ? AND revision = 1",
                (json.dumps(table), job.id),
            )
    jobctl.ok("rollback", "r", "1")
    span = ("--from", z("2026-01-05T00:00:00"), "--to", z("2026-01-05T03:30:00"))
    expected = [f"2026-01-05T0{h}:00:00.250000Z" for h in (1, 2, 3)]
    assert [w["scheduled_for"] for w in jobctl.json("coverage", "r", *span)] == expected
    assert jobctl.json("backfill", "r", *span, "--dry-run")["windows"] == expected


def test_the_migration_marks_the_anchors_set_without_start(db) -> None:
    """A database from before the flag: an anchor that is the job's add instant or the
    instant of one of its revisions (an edit without --start) only sets the phase; a
    --start given stays a window."""
    from conftest import BACKEND

    from jobctl import specs
    from jobctl.models import JobSpec
    from jobctl.specs import TriggerOptions, build_trigger

    added = T0 + timedelta(microseconds=250_000)
    edited = T0 + timedelta(hours=2, microseconds=500_000)
    with StoreView(db) as store:
        for name, trig in (
            ("added", TriggerOptions(every="1h")),
            ("edited", TriggerOptions(every="1h")),
            ("set", TriggerOptions(cron="0 * * * *", every="1h", tz="UTC")),
            ("starts", TriggerOptions(every="1h", start=z("2026-01-05T01:00:00"))),
        ):
            spec = JobSpec(name=name, trigger=build_trigger(trig, added), command="true")
            store.add_job(spec, added)
        job = store.get_job("edited")
        changes = specs.edit_changes(
            job, TriggerOptions(every="30m"), {}, command=None, rename=None, now=edited
        )
        store.edit_job("edited", changes, edited, next_run_at=None, restart_schedule=True)
        want = {j.name: j.trigger.phase_only for j in store.list_jobs()}
        assert want == {"added": True, "edited": True, "set": True, "starts": False}
        if BACKEND == "postgresql":
            from jobctl.store.postgresql.schema import migrations

            (sql,) = [sql for number, sql in migrations() if number == 13]
            with store.handle.db.conn.transaction():
                store.handle.db.conn.execute(
                    "ALTER TABLE jobctl.jobs DROP COLUMN anchor_phase_only"
                )
                store.handle.db.conn.execute(sql)
        else:
            from jobctl.store.sqlite.schema import migrations, split_statements

            (sql,) = [sql for number, sql in migrations() if number == 15]
            with store.write() as c:
                c.execute("ALTER TABLE jobs DROP COLUMN anchor_phase_only")
                for statement in split_statements(sql):
                    c.execute(statement)
    with StoreView(db) as store:
        assert {j.name: j.trigger.phase_only for j in store.list_jobs()} == want


def test_backfill_requeues_skipped_and_dead_windows_and_leaves_the_rest(jobctl: Jobctl, db) -> None:
    add_hourly(jobctl)
    with jobctl.store() as store:
        job = store.get_job("b")
        with store.write() as c:
            for h, state in ((0, "skipped"), (1, "succeeded")):
                c.execute(
                    "INSERT INTO runs (job_id, scheduled_for, state, skip_reason, reason, "
                    "settings, created_at) VALUES (?, ?, ?, ?, 'schedule', ?, 0)",
                    (
                        job.id,
                        int((T0 + timedelta(hours=h)).timestamp() * 1_000_000),
                        state,
                        "missed" if state == "skipped" else None,
                        '{"command": "true", "shell": "/bin/sh"}',
                    ),
                )
    dead = jobctl.json("run", "b")["id"]
    make_dead(db, dead)  # a manual run: its window is now, outside the range
    r = jobctl.json(
        "backfill", "b", "--from", z("2026-01-05T00:00:00"), "--to", z("2026-01-05T03:00:00")
    )
    assert len(r["created"]) == 1 and len(r["requeued"]) == 1 and r["left"] == 1
    skipped = jobctl.json("inspect", str(r["requeued"][0]))
    assert (skipped["state"], skipped["reason"], skipped["skip_reason"]) == (
        "pending",
        "backfill",
        None,
    )


def test_backfill_dry_run_counts_and_writes_nothing(jobctl: Jobctl) -> None:
    add_hourly(jobctl)
    out = jobctl.ok(
        "backfill", "b", "--from", "2026-01-05", "--to", "2026-01-05T04:00", "--dry-run"
    ).out
    assert out.startswith("backfill b: 4 created, 0 requeued, 0 left alone")
    data = jobctl.json(
        "backfill", "b", "--from", "2026-01-05", "--to", "2026-01-05T04:00", "--dry-run"
    )
    assert data["windows"] == [z(f"2026-01-05T0{h}:00:00") for h in range(4)]
    assert data["dry_run"] is True and "created" not in data
    assert jobctl.json("runs", "b") == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from", "2026-01-05", "--to", "2099-01-01"), "in the future"),
        (("--from", "2024-01-01", "--to", "2026-01-01"), "17544 windows"),
        (("--from", "2026-01-05T05:00", "--to", "2026-01-05T01:00"), "is after --to"),
        (("--from", "soon", "--to", "2026-01-05"), "invalid time"),
    ],
)
def test_backfill_refuses_bad_ranges_and_writes_nothing(jobctl: Jobctl, args, message) -> None:
    add_hourly(jobctl)
    r = jobctl("backfill", "b", *args)
    assert r.code == 2, r
    assert_one_error_line(r)
    assert message in r.err
    assert jobctl.json("runs", "b") == []


@pytest.mark.parametrize(
    "trigger", [("--manual",), ("--every", "1h", "--after-completion"), ("--in", "1h")]
)
def test_backfill_and_coverage_need_a_cron_or_fixed_rate_job(jobctl: Jobctl, trigger) -> None:
    jobctl.ok("add", "x", *trigger, "--", "true")
    for args in (
        ("backfill", "x", "--from", "2026-01-05", "--to", "2026-01-06"),
        ("coverage", "x"),
    ):
        r = jobctl(*args)
        assert r.code == 2
        assert "needs a cron or fixed-rate job" in r.err


def test_backfill_of_an_unknown_job_exits_1(jobctl: Jobctl) -> None:
    r = jobctl("backfill", "nope", "--from", "2026-01-05", "--to", "2026-01-06")
    assert r.code == 1
    assert_one_error_line(r)


# ---------------------------------------------------------------------- coverage


def test_coverage_shows_each_window_with_its_state_or_none(jobctl: Jobctl) -> None:
    add_hourly(jobctl)
    jobctl.ok("backfill", "b", "--from", "2026-01-05T01:00", "--to", "2026-01-05T03:00")
    data = jobctl.json("coverage", "b", "--from", "2026-01-05T00:00", "--to", "2026-01-05T04:00")
    assert [(w["scheduled_for"], w["state"]) for w in data] == [
        (z("2026-01-05T00:00:00"), "none"),
        (z("2026-01-05T01:00:00"), "pending"),
        (z("2026-01-05T02:00:00"), "pending"),
        (z("2026-01-05T03:00:00"), "none"),
    ]
    assert data[0]["run_id"] is None and isinstance(data[1]["run_id"], int)
    out = jobctl.ok("coverage", "b", "--from", "2026-01-05T00:00", "--to", "2026-01-05T04:00").out
    assert out.splitlines()[-1] == "4 windows: 2 pending, 2 none"


def test_coverage_defaults_to_the_last_24_windows(jobctl: Jobctl) -> None:
    add_hourly(jobctl)
    data = jobctl.json("coverage", "b")
    assert len(data) == 24
    assert {w["state"] for w in data} == {"none"}
    times = [w["scheduled_for"] for w in data]
    assert times == sorted(times)
    assert datetime.fromisoformat(times[-1][:-1] + "+00:00") > datetime.now(UTC) - timedelta(
        hours=1
    )


def test_coverage_refuses_more_than_10000_windows(jobctl: Jobctl) -> None:
    jobctl.ok("add", "m", "--cron", "* * * * *", "--", "true")
    r = jobctl("coverage", "m", "--from", "2026-01-01", "--to", "2026-02-01")
    assert r.code == 2
    assert "44640 windows" in r.err


def test_backfill_of_a_fixed_rate_starts_at_its_anchor(jobctl: Jobctl) -> None:
    jobctl.ok("add", "r", "--every", "1h", "--start", "2026-01-05T02:00", "--", "true")
    r = jobctl.json("backfill", "r", "--from", "2026-01-05", "--to", "2026-01-05T05:00")
    assert len(r["created"]) == 3  # 02:00, 03:00, 04:00: none before the anchor


def test_keep_flags_go_through_export_and_apply(jobctl: Jobctl, tmp_path) -> None:
    jobctl.ok("add", "k", "--every", "1m", "--keep-runs", "5", "--keep-for", "2d", "--", "true")
    text = jobctl.ok("export", "k").out
    assert "keep_runs = 5" in text and 'keep_for = "2d"' in text
    assert "keep_runs" not in jobctl.ok("add", "d", "--every", "1m", "--", "true").out
    assert "keep_runs" not in jobctl.ok("export", "d").out  # the default is not written
    path = tmp_path / "jobs.toml"
    path.write_text(text.replace("keep_runs = 5", "keep_runs = 9"))
    jobctl.ok("apply", str(path))
    assert jobctl.json("show", "k")["keep_runs"] == 9


def test_a_backfilled_run_runs_with_its_window_as_jobctl_scheduled_for(
    jobctl: Jobctl, start_daemon, tmp_path
) -> None:
    out = tmp_path / "windows"
    add_hourly(jobctl, "w")
    jobctl.ok("edit", "w", "--command", f'echo "$JOBCTL_SCHEDULED_FOR" >> {out}')
    jobctl.ok("backfill", "w", "--from", "2026-01-05T00:00", "--to", "2026-01-05T02:00")
    start_daemon()
    wait_until(
        lambda: {r["state"] for r in jobctl.json("runs", "w")} == {"succeeded"},
        30,
        what="the backfilled runs to succeed",
    )
    assert sorted(out.read_text().split()) == ["2026-01-05T00:00:00Z", "2026-01-05T01:00:00Z"]
