"""``python -m bench.pings``: ``jobctl serve`` answering the Healthchecks ping protocol
under load (issue 45's benchmark): 1,000 pings a second from concurrent clients, with the
latency of each.

A real ``jobctl serve`` process over a SQLite file, and (``--backend postgresql``, or
``both``) over a scratch PostgreSQL cluster as ``bench/postgresql.py`` starts one. ``--jobs``
watched jobs (``--every 1h``); ``--clients`` threads on 127.0.0.1, each with one kept-alive
HTTP connection, send their share of ``--rate`` pings a second for ``--seconds``, on a
fixed schedule (open loop: a ping is sent at its time whatever the answers before it, so a
slow server shows as latency, not as a lower rate). Each job is pinged ``/start`` then
``/`` (success) in turn: every ping is a write. A ping's latency is from its scheduled
send time to the end of its answer, so time spent queued behind a late one counts.

Prints one JSON object per backend: pings sent, answered 200, errors, the achieved rate,
latency p50/p99/max in ms, the CPU a ping of ``serve`` and (PostgreSQL) of the database
server's processes (``/proc``), and the runs recorded (each start-success pair is one run).
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .serveproc import ServeProcess
from .stats import median, percentile, proc_cpu_seconds


def _add_watched(db: str, jobs: int) -> list[str]:
    """``jobs`` watched jobs ``--every 1h`` added through the store, as ``add --watch``
    adds them; their ping keys."""
    from jobctl.models import JobSpec, Trigger, TriggerKind
    from jobctl.store import open_store
    from jobctl.triggers import next_fire
    from jobctl.watching import DEFAULT_GRACE_SECONDS, new_ping_key

    now = datetime.now(UTC)
    trig = Trigger(TriggerKind.INTERVAL, tz="UTC", expr="1h", every_seconds=3600.0, anchor=now)
    specs = [
        JobSpec(
            name=f"w{i}",
            trigger=trig,
            command="",
            retries=0,
            grace_seconds=DEFAULT_GRACE_SECONDS,
            ping_key=new_ping_key(),
        )
        for i in range(jobs)
    ]
    store = open_store(db)
    try:
        store.commands.add_jobs([(s, next_fire(s.trigger, now)) for s in specs], now)
    finally:
        store.close()
    return [s.ping_key for s in specs if s.ping_key is not None]


class Serve(ServeProcess):
    """``jobctl serve`` over ``db`` on a free port of 127.0.0.1."""

    def __init__(self, db: str, tmp: Path) -> None:
        super().__init__(db, tmp, "bench-token-0123456789")


def load(port: int, keys: list[str], rate: float, seconds: float, clients: int) -> dict[str, Any]:
    """Send ``rate`` pings a second for ``seconds`` from ``clients`` threads; the
    latencies (s) of the answered pings and the count of the others."""
    total = int(rate * seconds)
    start = time.monotonic() + 0.5
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients

    # ping i goes at start + i / rate, from client i % clients, to job i // 2 % len(keys):
    # each job's start, then its success
    def client(n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in range(n, total, clients):
            at = start + i / rate
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pair = i // 2
            key = keys[pair % len(keys)]
            path = f"/ping/{key}/start" if i % 2 == 0 else f"/ping/{key}"
            try:
                conn.request("GET", path)
                answer = conn.getresponse()
                answer.read()
                ok = answer.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            if ok:
                latencies[n].append(time.monotonic() - at)
            else:
                errors[n] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - start
    lat = [x for part in latencies for x in part]
    return {"sent": total, "ok": len(lat), "errors": sum(errors), "seconds": took, "lat": lat}


def _runs(db: str) -> dict[str, int]:
    from jobctl.store import open_store

    store = open_store(db)
    try:
        return dict(store.commands.status(datetime.now(UTC)).counts)
    finally:
        store.close()


def measure(
    db: str,
    args: argparse.Namespace,
    tmp: Path,
    server_cpu: Callable[[], float] | None = None,
) -> dict[str, Any]:
    keys = _add_watched(db, args.jobs)
    serve = Serve(db, tmp)
    try:
        # a short warm-up (connections opened, code paths loaded), not counted
        load(serve.port, keys, min(args.rate, 200.0), 1.0, args.clients)
        cpu0 = proc_cpu_seconds(serve.proc.pid)
        db_cpu0 = server_cpu() if server_cpu else 0.0
        got = load(serve.port, keys, args.rate, args.seconds, args.clients)
        cpu = proc_cpu_seconds(serve.proc.pid) - cpu0
        db_cpu = (server_cpu() - db_cpu0) if server_cpu else None
    finally:
        serve.close()
    lat = got.pop("lat")
    return {
        "rate_target": args.rate,
        "clients": args.clients,
        "jobs": args.jobs,
        **got,
        "rate": round(got["ok"] / got["seconds"], 1),
        "p50_ms": round(percentile(lat, 50) * 1000, 2) if lat else None,
        "p99_ms": round(percentile(lat, 99) * 1000, 2) if lat else None,
        "max_ms": round(max(lat) * 1000, 2) if lat else None,
        "median_ms": round(median(lat) * 1000, 2) if lat else None,
        "server_cpu_ms_a_ping": round(cpu / max(got["ok"], 1) * 1000, 3),
        "postgresql_cpu_ms_a_ping": (
            None if db_cpu is None else round(db_cpu / max(got["ok"], 1) * 1000, 3)
        ),
        "runs": _runs(db),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.pings", description=__doc__)
    p.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    p.add_argument("--rate", type=float, default=1000.0, help="pings a second (default 1000)")
    p.add_argument("--seconds", type=float, default=10.0, help="how long (default 10)")
    p.add_argument("--clients", type=int, default=16, help="client threads (default 16)")
    p.add_argument("--jobs", type=int, default=100, help="watched jobs (default 100)")
    args = p.parse_args(argv)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="jobctl-bench-pings-") as d:
        tmp = Path(d)
        if args.backend in ("sqlite", "both"):
            (tmp / "sqlite").mkdir()
            out["sqlite"] = measure(str(tmp / "sqlite" / "jobctl.db"), args, tmp / "sqlite")
        if args.backend in ("postgresql", "both"):
            from .postgresql import _server_cpu, server

            (tmp / "pg").mkdir()
            with server() as srv:
                out["postgresql"] = measure(
                    srv.new_db(), args, tmp / "pg", lambda: _server_cpu(srv)
                )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
