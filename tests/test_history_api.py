"""History through a real ``jobctl serve`` (README, History: what is kept): ``since`` on ``/v1/runs``, backfill
and coverage, retention fields in job bodies, and counters that a ``prune`` never lowers
in ``/metrics``; on both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import Jobctl, StoreView
from webhelpers import Server, token_file

T0 = datetime(2026, 1, 5, tzinfo=UTC)


@pytest.fixture
def server(db: Path, tmp_path: Path) -> Iterator[Server]:
    s = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path))
    try:
        yield s.wait_ready()
    finally:
        s.close()


def finish_runs(db: Path, name: str, codes: list[int]) -> list[int]:
    """Manual runs of ``name``, an hour apart from T0, claimed and ended with ``codes``."""
    ids = []
    with StoreView(db) as store:
        for i, code in enumerate(codes):
            at = T0 + timedelta(hours=i)
            run, _ = store.enqueue_run(name, at)
            (claimed,), _ = store.claim("d", "h", at, 60)
            store.finish(claimed.run, claimed.run.attempt, "d", at + timedelta(seconds=2), code)
            ids.append(run.id)
    return ids


def test_runs_since_is_the_clis(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "m", "--manual", "--", "true")
    finish_runs(jobctl.db, "m", [0, 0, 0])
    got = server.request("GET", "/v1/runs?since=2026-01-05T01:00:00Z").json()
    assert got == jobctl.json("runs", "--since", "2026-01-05T01:00:00Z")
    assert len(got) == 2
    assert server.request("GET", "/v1/runs?since=1h").json() == []
    bad = server.request("GET", "/v1/runs?since=soon")
    assert bad.status == 422 and "--since" in bad.json()["error"]


def test_backfill_and_coverage(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "b", "--cron", "0 * * * *", "--tz", "UTC", "--", "true")
    body = {"from": "2026-01-05T00:00:00Z", "to": "2026-01-05T03:00:00Z"}
    dry = server.request("POST", "/v1/jobs/b/backfill", {**body, "dry_run": True})
    assert dry.status == 200
    assert dry.json() == {
        "windows": [f"2026-01-05T0{h}:00:00Z" for h in range(3)],
        "requeued": [],
        "left": 0,
        "dry_run": True,
    }
    assert jobctl.json("runs", "b") == []
    first = server.request("POST", "/v1/jobs/b/backfill", body).json()
    assert len(first["created"]) == 3 and first["left"] == 0
    ids = sorted(r["id"] for r in jobctl.json("runs", "b"))
    assert sorted(first["created"]) == ids
    again = server.request("POST", "/v1/jobs/b/backfill", body).json()
    assert (again["created"], again["requeued"], again["left"]) == ([], [], 3)
    cov = server.request(
        "GET", "/v1/jobs/b/coverage?from=2026-01-04T23:00:00Z&to=2026-01-05T03:00:00Z"
    ).json()
    assert cov == jobctl.json(
        "coverage", "b", "--from", "2026-01-04T23:00:00Z", "--to", "2026-01-05T03:00:00Z"
    )
    assert [w["state"] for w in cov] == ["none", "pending", "pending", "pending"]
    assert len(server.request("GET", "/v1/jobs/b/coverage").json()) == 24


def test_a_job_shown_and_posted_back_keeps_its_windows(server: Server, jobctl: Jobctl) -> None:
    """POST /v1/jobs takes a job as show --json gives it: a fixed rate added without
    --start, posted back under another name, has the same windows, its add instant none
    of them (the JSON's start is its first window)."""
    from jobctl.models import JobSpec
    from jobctl.specs import TriggerOptions, build_trigger

    added = T0 + timedelta(microseconds=250_000)
    with StoreView(jobctl.db) as store:
        for name, trig in (
            ("rate", TriggerOptions(every="1h")),
            ("set", TriggerOptions(cron="30 * * * *", every="1h", tz="UTC")),
        ):
            spec = JobSpec(name=name, trigger=build_trigger(trig, added), command="true")
            store.add_job(spec, added)
    span = "from=2026-01-04T22:00:00Z&to=2026-01-05T03:30:00Z"
    for name in ("rate", "set"):
        shown = jobctl.json("show", name)
        body = {"name": f"{name}-copy", "trigger": shown["trigger"], "command": "true"}
        r = server.request("POST", "/v1/jobs", body)
        assert r.status == 201, r.text
        assert r.json()["trigger"] == shown["trigger"]

        def windows(job: str) -> list[str]:
            got = server.request("GET", f"/v1/jobs/{job}/coverage?{span}")
            assert got.status == 200, got.text
            return [w["scheduled_for"] for w in got.json()]

        assert windows(f"{name}-copy") == windows(name)
        assert "2026-01-05T00:00:00.250000Z" not in windows(name)
        assert "2026-01-05T01:00:00.250000Z" in windows(name)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"from": "2026-01-05T00:00:00Z", "to": "2099-01-01T00:00:00Z"}, 422),
        ({"from": "2024-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, 422),
        ({"from": "2026-01-05T00:00:00Z"}, 422),
        ({"from": 5, "to": "2026-01-05T00:00:00Z"}, 422),
        ({"from": "2026-01-05", "to": "2026-01-06", "dry_run": "yes"}, 422),
        ({"from": "2026-01-05", "to": "2026-01-06", "extra": 1}, 422),
    ],
)
def test_bad_backfill_bodies_write_nothing(server: Server, jobctl: Jobctl, body, status) -> None:
    jobctl("add", "b", "--cron", "0 * * * *", "--tz", "UTC", "--", "true")
    a = server.request("POST", "/v1/jobs/b/backfill", body)
    assert a.status == status, a.text
    assert jobctl.json("runs", "b") == []


def test_backfill_and_coverage_of_no_such_job_are_404(server: Server) -> None:
    body = {"from": "2026-01-05T00:00:00Z", "to": "2026-01-05T03:00:00Z"}
    assert server.request("POST", "/v1/jobs/nope/backfill", body).status == 404
    assert server.request("GET", "/v1/jobs/nope/coverage").status == 404


def test_keep_fields_in_job_bodies(server: Server, jobctl: Jobctl) -> None:
    body = {"name": "k", "trigger": {"kind": "interval", "expr": "1m"}, "command": "true"}
    made = server.request("POST", "/v1/jobs", {**body, "keep_runs": 7, "keep_for": "2d"})
    assert made.status == 201, made.text
    assert (made.json()["keep_runs"], made.json()["keep_for"]) == (7, 172800)
    patched = server.request("PATCH", "/v1/jobs/k", {"keep_runs": 3})
    assert (patched.json()["keep_runs"], patched.json()["keep_for"]) == (3, 172800)
    assert server.request("PATCH", "/v1/jobs/k", {"keep_runs": -1}).status == 422


def _finished_total(server: Server) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    families = {
        f.name: f for f in text_string_to_metric_families(server.request("GET", "/metrics").text)
    }
    out = {
        (s.labels["job_name"], s.labels["state"]): s.value
        for s in families["jobctl_runs_finished"].samples
        if s.name == "jobctl_runs_finished_total"
    }
    hist = families["jobctl_run_duration_seconds"]
    for s in hist.samples:
        if s.name.endswith("_count"):
            out[(s.labels["job_name"], "attempts")] = s.value
    gauge = {s.labels["state"]: s.value for s in families["jobctl_runs"].samples}
    out[("*", "kept succeeded")] = gauge["succeeded"]
    return out


def test_counters_never_go_down_when_prune_deletes_the_rows(server: Server, jobctl: Jobctl) -> None:
    jobctl("add", "f1", "--manual", "--retries", "0", "--", "true")
    finish_runs(jobctl.db, "f1", [0, 0, 0, 7])
    before = _finished_total(server)
    assert before[("f1", "succeeded")] == 3 and before[("f1", "dead")] == 1
    assert before[("f1", "attempts")] == 4 and before[("*", "kept succeeded")] == 3
    jobctl("prune", "--older-than", "1s")
    assert jobctl.json("runs", "f1") == []
    after = _finished_total(server)
    assert after[("f1", "succeeded")] == 3 and after[("f1", "dead")] == 1
    assert after[("f1", "attempts")] == 4
    assert after[("*", "kept succeeded")] == 0  # the gauge is the rows there are
