"""Spreading the load: ``H`` in cron fields and ``--every D --start H``.

The values are checked against the formula written out here, independently of
``jobctl.cronexpr``: ``h = int(sha256(f"{NAME}:{k}").hexdigest()[:16], 16)``.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from conftest import wait_until
from hypothesis import given
from hypothesis import strategies as st
from test_web_api import cli_error

from jobctl.cronexpr import parse_cron, resolve_hashes
from jobctl.errors import UsageError

RANGES = {0: (0, 59), 1: (0, 23), 2: (1, 28), 3: (1, 12), 4: (0, 6)}
NAMES = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=40
)


def _h(name: str, k: int) -> int:
    return int(hashlib.sha256(f"{name}:{k}".encode()).hexdigest()[:16], 16)


def _field(expr: str, k: int) -> str:
    fields = ["*"] * 5
    fields[k] = expr
    return " ".join(fields)


@given(name=NAMES, k=st.integers(0, 4))
def test_plain_h_is_lo_plus_hash_mod_range(name, k):
    lo, hi = RANGES[k]
    got = resolve_hashes(_field("H", k), name).split(" ")[k]
    assert got == str(lo + _h(name, k) % (hi - lo + 1))


@given(name=NAMES, k=st.integers(0, 4), data=st.data())
def test_h_in_a_range_and_with_a_step(name, k, data):
    lo, hi = RANGES[k]
    a = data.draw(st.integers(lo, hi))
    b = data.draw(st.integers(a, hi))
    n = data.draw(st.integers(1, hi - lo + 1))
    h = _h(name, k)
    ranged = resolve_hashes(_field(f"H({a}-{b})", k), name).split(" ")[k]
    assert ranged == str(a + h % (b - a + 1))
    stepped = resolve_hashes(_field(f"H/{n}", k), name)
    start = lo + h % n
    want = set(range(start, hi + 1, n))
    sched = parse_cron(stepped)
    assert [sched.minutes, sched.hours, sched.days, sched.months, sched.weekdays][k] == (
        frozenset(want) if want else frozenset({lo + h % (hi - lo + 1)})
    )
    both = parse_cron(resolve_hashes(_field(f"H({a}-{b})/{n}", k), name))
    want_both = set(range(a + h % n, b + 1, n))
    got_both = [both.minutes, both.hours, both.days, both.months, both.weekdays][k]
    assert got_both == (frozenset(want_both) if want_both else frozenset({a + h % (b - a + 1)}))


def test_every_field_uses_its_own_hash_and_lists_mix():
    name = "nightly-backup"
    got = resolve_hashes("H H H H H", name).split(" ")
    assert got == [
        str(RANGES[k][0] + _h(name, k) % (RANGES[k][1] - RANGES[k][0] + 1)) for k in range(5)
    ]
    mixed = resolve_hashes("0,H(30-39) H(9-17) * * 1-5", name)
    assert mixed == f"0,{30 + _h(name, 0) % 10} {9 + _h(name, 1) % 9} * * 1-5"


def test_h_days_are_restricted_for_the_day_rule():
    # H in day-of-month with a day-of-week list: either matches (vixie rule), as for a number
    sched = parse_cron(resolve_hashes("0 0 H * 1", "x"))
    assert not sched.dom_star and not sched.dow_star


@pytest.mark.parametrize(
    "expr",
    ["H(5-2) * * * *", "H/0 * * * *", "H(0-99) * * * *", "Hx * * * *", "H * * *", "H(a-b) * * * *"],
)
def test_bad_h_forms_are_usage_errors(expr):
    with pytest.raises(UsageError):
        parse_cron(resolve_hashes(expr, "job"))


def test_show_json_next_and_rename_agree_with_the_formula(jobctl):
    jobctl("add", "report", "--cron", "H H * * *", "--tz", "UTC", "--", "true")
    job = jobctl.json("show", "report")
    minute, hour = _h("report", 0) % 60, _h("report", 1) % 24
    assert job["trigger"]["expr"] == "H H * * *"
    assert job["trigger"]["resolved"] == f"{minute} {hour} * * *"
    now = datetime.now(UTC)
    first = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if first <= now:
        first += timedelta(days=1)
    nxt = jobctl.json("next", "report", "-n", "2")
    assert [n if isinstance(n, str) else n["at"] for n in nxt][:1] == [
        first.strftime("%Y-%m-%dT%H:%M:%SZ")
    ]
    shown = jobctl("show", "report").stdout
    assert f"resolved     {minute} {hour} * * *" in shown
    # the resolved line moves none of the others: the command is shown, the state once
    keys = [line.split()[0] for line in shown.splitlines() if line.strip()][:8]
    assert "command" in keys and keys.count("state") == 1, shown
    # renaming a job moves it
    jobctl("edit", "report", "--rename", "summary")
    moved = jobctl.json("show", "summary")["trigger"]["resolved"]
    assert moved == f"{_h('summary', 0) % 60} {_h('summary', 1) % 24} * * *"
    # the file keeps the H text; apply onto an empty database resolves it the same way
    exported = jobctl("export").stdout
    assert 'cron = "H H * * *"' in exported


def test_every_with_start_h_has_the_hashed_phase(jobctl):
    jobctl("add", "poll", "--every", "1h", "--start", "H", "--", "true")
    job = jobctl.json("show", "poll")
    phase = _h("poll", 0) % 3600
    assert job["trigger"]["start"] == (
        datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=phase)
    ).strftime("%Y-%m-%dT%H:%M:%SZ")
    nxt = datetime.fromisoformat(job["next_run_at"].replace("Z", "+00:00"))
    assert int(nxt.timestamp()) % 3600 == phase
    err = cli_error(
        jobctl, "add", "p2", "--every", "1h", "--after-completion", "--start", "H", "--", "true"
    )
    assert "--start H" in err


def test_apply_takes_h_and_start_h(jobctl, tmp_path):
    f = tmp_path / "jobs.toml"
    f.write_text(
        '[jobs.a]\ncron = "H(0-29)/10 * * * *"\ntz = "UTC"\ncommand = "true"\n\n'
        '[jobs.b]\nevery = "10m"\nstart = "H"\ncommand = "true"\n'
    )
    jobctl("apply", str(f))
    a = jobctl.json("show", "a")["trigger"]["resolved"]
    assert a == f"{_h('a', 0) % 10}-29/10 * * * *"
    b = jobctl.json("show", "b")["trigger"]["start"]
    assert b == (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=_h("b", 0) % 600)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def _name_for_minute(minute: int) -> str:
    for i in range(10_000):
        name = f"spread-{i}"
        if _h(name, 0) % 60 == minute:
            return name
    raise AssertionError("no name found")


def test_a_daemon_fires_an_h_job_at_its_resolved_minute(jobctl, start_daemon):
    now = datetime.now(UTC)
    target = (now + timedelta(minutes=1)).replace(second=0, microsecond=0)
    if (target - now).total_seconds() < 5:
        target += timedelta(minutes=1)
    name = _name_for_minute(target.minute)
    jobctl("add", name, "--cron", "H * * * *", "--tz", "UTC", "--catchup", "skip", "--", "true")
    start_daemon()
    runs = wait_until(
        lambda: [r for r in jobctl.json("runs", name) if r["state"] == "succeeded"],
        timeout=150,
        what="the H job's first run",
    )
    assert runs[0]["scheduled_for"] == target.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------- plan


def _job(jobctl, name):
    return jobctl.store().get_job(name)


def test_plan_counts_starts_and_running_runs_per_slot(jobctl):
    from jobctl.loadplan import busiest, plan_slots, suggest_spread

    jobctl("add", "a", "--cron", "0 * * * *", "--tz", "UTC", "--", "true")
    jobctl("add", "b", "--cron", "0 * * * *", "--tz", "UTC", "--", "true")
    jobctl("add", "c", "--cron", "30 * * * *", "--tz", "UTC", "--", "true")
    jobctl("add", "d", "--cron", "0 * * * *", "--tz", "UTC", "--", "true")
    jobctl("pause", "d")
    jobs = [_job(jobctl, n) for n in "abcd"]
    start = datetime(2027, 1, 1, 0, 0, tzinfo=UTC)
    # a lasts 3 minutes and a half: running in its window's slot and the next three
    slots = plan_slots(jobs, {jobs[0].id: 210.0}, start, 2, 60)
    by_at = {s.at: s for s in slots}
    assert by_at[start].starts == 2 and by_at[start].jobs == ("a", "b")
    assert [by_at[start + timedelta(minutes=m)].running for m in range(4)] == [2, 1, 1, 1]
    assert start + timedelta(minutes=4) not in by_at
    assert by_at[start + timedelta(minutes=30)].jobs == ("c",)
    assert len(slots) == 2 * (4 + 1)  # two hours, each: a's four slots and c's one
    assert busiest(slots, 2) == [by_at[start], by_at[start + timedelta(hours=1)]]
    # the paused job neither counts nor moves; only the crowded plain minutes move
    moved = suggest_spread(jobs, slots, 1)
    assert [(j.name, j.trigger.expr) for j in moved] == [("a", "H * * * *"), ("b", "H * * * *")]
    assert suggest_spread(jobs, slots, 2) == []


def test_plan_json_shape(jobctl):
    jobctl("add", "a", "--cron", "15 3 * * *", "--tz", "UTC", "--", "true")
    out = jobctl.json("plan", "--from", "2027-01-01T00:00:00Z", "--hours", "24", "--by", "hour")
    assert out == {
        "slots": [{"at": "2027-01-01T03:00:00Z", "starts": 1, "running": 1, "jobs": ["a"]}]
    }
    text = jobctl("plan", "--from", "2027-01-01T00:00:00Z").stdout
    assert "2027-01-01 03:15" in text and "starts |" in text


def test_plan_suggest_piped_to_apply_spreads_sixty_jobs(jobctl):
    from jobctl.cli import cli as click_cli

    for i in range(60):
        jobctl("add", f"hourly-{i}", "--cron", "0 * * * *", "--tz", "UTC", "--", "true")
    jobctl("add", "daily", "--cron", "@daily", "--tz", "UTC", "--", "true")
    suggested = jobctl("plan", "--suggest").stdout
    assert suggested.count("[jobs.") == 61 and 'cron = "H 0 * * *"' in suggested
    applied = jobctl.runner.invoke(
        click_cli, ["--db", str(jobctl.db), "apply", "-"], input=suggested
    )
    assert applied.exit_code == 0, applied.output
    minutes = {
        jobctl.json("show", f"hourly-{i}")["trigger"]["resolved"].split()[0] for i in range(60)
    }
    assert len(minutes) >= 30
    busiest = max(s["starts"] for s in jobctl.json("plan", "--hours", "1")["slots"])
    assert busiest < 60 / 4
    # nothing crowded is left to move: an empty file and a warning
    again = jobctl("plan", "--suggest", "--max-starts", "5")
    assert "[jobs." not in again.stdout


def test_recent_durations_are_the_newest_succeeded_runs(jobctl, start_daemon):
    jobctl("add", "slow", "--cron", "0 0 1 1 *", "--tz", "UTC", "--", "sleep 0.3")
    jobctl("add", "bad", "--cron", "0 0 1 1 *", "--tz", "UTC", "--retries", "0", "--", "exit 1")
    start_daemon()
    for _ in range(2):
        jobctl("run", "slow", "--wait")
    jobctl("run", "bad", "--wait", ok=False)
    store = jobctl.store()
    slow, bad = store.get_job("slow"), store.get_job("bad")
    got = store.recent_durations([slow.id, bad.id], 20)
    assert set(got) == {slow.id}
    assert len(got[slow.id]) == 2 and all(0.25 < d < 5 for d in got[slow.id])
    assert store.recent_durations([slow.id], 1)[slow.id] == got[slow.id][:1]


def test_h_in_a_schedule_set_resolves_each_cron_member_from_the_name(jobctl, tmp_path):
    from jobctl.triggers import made_by

    jobctl("add", "rep", "--cron", "H 9 * * 1-5", "--cron", "H(0-29) 12 * * 6",
           "--every", "7h", "--tz", "UTC", "--", "true")  # fmt: skip
    job = jobctl.json("show", "rep")
    a, b = _h("rep", 0) % 60, _h("rep", 0) % 30
    assert job["trigger"]["expr"] == "H 9 * * 1-5 | H(0-29) 12 * * 6 | every 7h"
    assert job["trigger"]["resolved"] == f"{a} 9 * * 1-5 | {b} 12 * * 6 | every 7h"
    assert [t["expr"] for t in job["triggers"]][:2] == ["H 9 * * 1-5", "H(0-29) 12 * * 6"]
    assert [t["resolved"] for t in job["triggers"][:2]] == [f"{a} 9 * * 1-5", f"{b} 12 * * 6"]
    # the windows are the resolved members' (and the run names the member as given)
    stored = jobctl.store().get_job("rep")
    nxt = [
        datetime.fromisoformat(t.replace("Z", "+00:00"))
        for t in jobctl.json("next", "rep", "-n", "40")
    ]
    crons = [t for t in nxt if t.minute in (a, b) and t.hour in (9, 12) and t.second == 0]
    assert crons and all(
        made_by(stored.trigger, t) in ("H 9 * * 1-5", "H(0-29) 12 * * 6") for t in crons
    )
    # the file keeps the H text; apply onto an empty database resolves it the same way
    f = tmp_path / "jobs.toml"
    f.write_text(jobctl("export").stdout)
    assert '"H 9 * * 1-5"' in f.read_text()
    from conftest import Jobctl

    other = Jobctl(tmp_path / "other.db")
    other("apply", str(f))
    assert other.json("show", "rep")["trigger"]["resolved"] == job["trigger"]["resolved"]
    other.close()
    # a rename moves the members
    jobctl("edit", "rep", "--rename", "rep2")
    moved = jobctl.json("show", "rep2")["trigger"]["resolved"]
    assert moved.split(" | ")[0] == f"{_h('rep2', 0) % 60} 9 * * 1-5"
