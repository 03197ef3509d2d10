"""The dashboard's pages against a long history (docs/benchmarks.md, Dashboard): each page's time as
the server takes it, with ``jobs`` jobs and ``runs_per_job`` finished runs each.

The database is filled through the store's bulk API (``commands.load_copy``, as ``db copy
--history`` fills one): every job fires every 15 minutes, so the last 24 h hold 96 runs of
each; 1 % of runs are dead, and one job in a hundred has its last run dead (those head the
overview). Then a real ``jobctl serve`` answers each page ``reps`` times over one signed-in
session, and the time is read from its ``Server-Timing`` header (the server's own time to
the answer, whole for a page), beside the wall time a client on the same host sees.

``python -m bench.dashboard --jobs 10000 --runs-per-job 1000`` (10 million runs) or smaller;
``--db`` keeps the built file (a second call with the same sizes reuses it).
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

from . import longhistory
from .longhistory import Shape
from .serveproc import ServeProcess
from .stats import median

EVERY = timedelta(minutes=15)
TOKEN = "bench-token-0123456789"


def _last_dead(seed: int) -> bool:
    """One job in a hundred ends dead (those head the overview)."""
    return seed % 100 == 7


def build(db: str, jobs: int, runs_per_job: int, end: datetime) -> float:
    """Fill an empty database through ``load_copy``; returns the seconds it took."""
    from jobctl.models import Job, JobSpec, JobState, Trigger, TriggerKind

    trig = Trigger(TriggerKind.CRON, "UTC", "*/15 * * * *")
    made = []
    for i in range(jobs):
        spec = JobSpec(
            f"job-{i + 1}",
            trig,
            f"/usr/local/bin/task --part {i + 1}",
            description=f"part {i + 1} of the nightly batch",
            keep_runs=max(runs_per_job, 1000),
        )
        made.append(
            Job(i + 1, spec, JobState.ACTIVE, end - timedelta(days=400), end + EVERY, 0, None)
        )
    shape = Shape(end, EVERY, max_ms=30_000, last_dead=_last_dead, costs=True)
    return longhistory.build(db, made, runs_per_job, shape, end)


class Serve(ServeProcess):
    """``jobctl serve`` over ``db`` on a free port, signed in once."""

    def __init__(self, db: str, tmp: Path) -> None:
        super().__init__(db, tmp, TOKEN)
        status, headers, _ = self.request(
            "POST",
            "/login",
            urlencode({"token": TOKEN}).encode(),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert status == 303, status
        self.cookie = headers["set-cookie"].split(";")[0]

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def page(self, path: str) -> tuple[float, float, int]:
        """(server ms, wall ms, bytes) of one GET."""
        t0 = time.perf_counter()
        status, headers, body = self.request("GET", path, headers={"Cookie": self.cookie})
        wall = (time.perf_counter() - t0) * 1000
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body[:300]!r}")
        m = re.search(r"dur=([\d.]+)", headers.get("server-timing", ""))
        assert m, headers
        return float(m.group(1)), wall, len(body)


def pages(jobs: int) -> dict[str, str]:
    """The pages timed: what a person on call opens, with a job and a page far down."""
    mid = max(jobs // 2, 1)
    last_page = max((jobs + 49) // 50, 1)
    return {
        "overview": "/",
        f"overview, page {last_page}": f"/?page={last_page}",
        "overview, search one job": f"/?q=part+{mid}+of",
        "overview, last run dead": "/?last=dead",
        "runs": "/runs",
        "runs, dead": "/runs?state=dead",
        "runs, one job": f"/runs?job=job-{mid}",
        "runs, last hour": "/runs?since=1h",
        "job page": f"/jobs/job-{mid}",
        "timeline": "/timeline",
        f"timeline, page {last_page}": f"/timeline?page={last_page}",
    }


def measure(db: str, jobs: int, reps: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        serve = Serve(db, Path(tmp))
        try:
            out = {}
            for name, path in pages(jobs).items():
                serve.page(path)  # the first read warms the file's pages into memory
                samples = [serve.page(path) for _ in range(reps)]
                out[name] = {
                    "server_ms": median([s[0] for s in samples]),
                    "wall_ms": median([s[1] for s in samples]),
                    "kib": samples[0][2] / 1024,
                }
            return out
        finally:
            serve.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--runs-per-job", type=int, default=1000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--db", default=None, help="the database (kept; built when it has no job)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from jobctl.store import open_store

    end = datetime.now(UTC).replace(second=0, microsecond=0)
    end -= timedelta(minutes=end.minute % 15)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or str(Path(tmp) / "dashboard.db")
        store = open_store(db)
        try:
            info = store.commands.info()
        finally:
            store.close()
        built = None
        if info.jobs == 0:
            built = build(db, args.jobs, args.runs_per_job, end)
            store = open_store(db)
            try:
                info = store.commands.info()
            finally:
                store.close()
        results = measure(db, info.jobs, args.reps)
    report = {
        "backend": info.backend,
        "jobs": info.jobs,
        "runs": info.runs,
        "size_bytes": info.size_bytes,
        "build_seconds": built,
        "pages": results,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{info.backend}: {info.jobs:,} jobs, {info.runs:,} runs, "
        f"{info.size_bytes / 1e9:.2f} GB" + (f", built in {built:.0f} s" if built else "")
    )
    print(f"{'page':<28} {'server ms':>10} {'wall ms':>8} {'KiB':>7}")
    for name, r in results.items():
        print(f"{name:<28} {r['server_ms']:>10.1f} {r['wall_ms']:>8.1f} {r['kib']:>7.0f}")


if __name__ == "__main__":
    main()
