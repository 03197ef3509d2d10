"""``python -m bench.notify``: the burst of 1,000 runs with a webhook channel notifying
``succeeded`` for every run to a receiver on 127.0.0.1, against the same burst without
notifications (issue 31's benchmark).

Prints, as one JSON object, per repetition and as medians: the burst's seconds (from the
instant until the last run finished) with and without the channel, their ratio, and each
notification's delay from its run's end to its arrival at the receiver (p50, p99, max).
The receiver is an ``http.server`` on a thread of this process; it answers 200 at once.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .jobctl_runs import DaemonProc, _add_jobs, _interval_specs, _us
from .stats import median, percentile


class Receiver:
    """Arrival times (s since the epoch) by idempotency key."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                with rec.lock:
                    rec.arrived.setdefault(body["key"], time.time())
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/bench"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def burst(tmp: Path, jobs: int, *, url: str | None, workers: int = 4, lead: float = 3.0) -> dict:
    """One burst of ``jobs`` runs of ``true`` due at one instant; with ``url``, each job
    notifies ``succeeded`` to that webhook. Seconds until the last run finished, and (with
    ``url``) until the last notification was sent, per the database."""
    from jobctl.models import Event, NotifyRule
    from jobctl.notifications import build_channel
    from jobctl.store import open_store

    db = tmp / ("notify.db" if url else "plain.db")
    instant = (datetime.now(UTC) + timedelta(seconds=lead)).replace(microsecond=0)
    specs = _interval_specs("burst", jobs, 3600.0, instant)
    if url:
        store = open_store(db)
        try:
            ch = build_channel("bench", webhook=url, email=None, command=None)
            store.commands.add_channel(ch, datetime.now(UTC))
        finally:
            store.close()
        rule = (NotifyRule("bench", (Event.SUCCEEDED,)),)
        from dataclasses import replace

        specs = [replace(s, notify=rule) for s in specs]
    _add_jobs(db, specs)
    d = DaemonProc(db, workers)
    try:
        ready, _ = d.wait_for(r"scheduling \d+ jobs", 30)
        if ready >= instant.timestamp():
            raise RuntimeError("daemon was not ready before the burst instant; raise lead")
        conn = sqlite3.connect(db)
        deadline = time.monotonic() + 300
        want = "SELECT COUNT(*) FROM runs WHERE state IN ('succeeded','failed','dead')"
        while conn.execute(want).fetchone()[0] < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError("burst: not every run finished")
            time.sleep(0.05)
        if url:
            sent = "SELECT COUNT(*) FROM notifications WHERE state = 'sent'"
            while conn.execute(sent).fetchone()[0] < jobs:
                if time.monotonic() > deadline:
                    raise RuntimeError("burst: not every notification was sent")
                time.sleep(0.05)
        last = conn.execute("SELECT MAX(finished_at) FROM runs").fetchone()[0]
        ends = {}
        if url:
            ends = dict(
                conn.execute(
                    "SELECT n.key, r.finished_at FROM notifications n JOIN runs r "
                    "ON r.id = n.run_id"
                ).fetchall()
            )
        conn.close()
    finally:
        d.stop()
    db.unlink()
    return {"seconds": (last - _us(instant)) / 1e6, "ends": ends}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.notify", description=__doc__)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--lead", type=float, default=8.0, help="seconds to the burst's instant")
    a = p.parse_args(argv)
    plain: list[float] = []
    told: list[float] = []
    delays: list[float] = []
    rec = Receiver()
    try:
        with tempfile.TemporaryDirectory(prefix="jobctl-bench-notify-") as d:
            tmp = Path(d)
            for _ in range(a.reps):
                plain.append(
                    burst(tmp, a.jobs, url=None, workers=a.workers, lead=a.lead)["seconds"]
                )
                rec.arrived.clear()
                res = burst(tmp, a.jobs, url=rec.url, workers=a.workers, lead=a.lead)
                told.append(res["seconds"])
                with rec.lock:
                    arrived = dict(rec.arrived)
                missing = set(res["ends"]) - set(arrived)
                if missing:
                    raise RuntimeError(f"{len(missing)} notifications never arrived")
                delays += [arrived[k] - end / 1e6 for k, end in res["ends"].items()]
    finally:
        rec.close()
    out = {
        "jobs": a.jobs,
        "workers": a.workers,
        "reps": a.reps,
        "plain_seconds": plain,
        "notify_seconds": told,
        "ratio": median(told) / median(plain),
        "delay_p50_s": percentile(delays, 50),
        "delay_p99_s": percentile(delays, 99),
        "delay_max_s": max(delays),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
