"""procrastinate's side of ``python -m bench --only postgresql``, one process per role.

``python -m bench.pg_peer URL schema``: install procrastinate's schema in database URL.
``python -m bench.pg_peer URL worker N``: a worker with concurrency N that runs the task
``true`` (``sh -c true`` through ``subprocess``: the work a jobctl attempt of ``true``
does) until SIGTERM; it prints ``ready`` once its worker row is written.
``python -m bench.pg_peer URL defer N``: defer N jobs in one batch; prints the seconds.
``python -m bench.pg_peer URL latency N``: defer one job at a time, wait for it to end,
print the ms from its ``deferred`` event to its ``started`` event, one line each.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import procrastinate


def make_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="true")
    def run_true() -> None:
        subprocess.run(["sh", "-c", "true"], check=True)

    return app


async def _worker(app: procrastinate.App, concurrency: int) -> None:
    async with app.open_async():
        task = asyncio.create_task(
            app.run_worker_async(concurrency=concurrency, wait=True, listen_notify=True)
        )
        conn = app.connector
        while True:  # ready once the worker has registered itself
            rows = await conn.execute_query_all_async("SELECT id FROM procrastinate_workers")
            if rows:
                break
            await asyncio.sleep(0.02)
        print("ready", flush=True)
        await task


async def _defer(app: procrastinate.App, n: int) -> float:
    async with app.open_async():
        t0 = time.perf_counter()
        await app.tasks["true"].batch_defer_async(*({} for _ in range(n)))
        return time.perf_counter() - t0


async def _latency(app: procrastinate.App, n: int) -> list[float]:
    out = []
    async with app.open_async():
        conn = app.connector
        for _ in range(n):
            job_id = await app.tasks["true"].defer_async()
            deadline = time.monotonic() + 30
            while True:
                rows = await conn.execute_query_all_async(
                    "SELECT type::text AS type, at FROM procrastinate_events WHERE job_id = %(id)s",
                    id=job_id,
                )
                at = {r["type"]: r["at"] for r in rows}
                if "succeeded" in at or "failed" in at:
                    out.append((at["started"] - at["deferred"]).total_seconds() * 1000)
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("procrastinate: a job did not end in 30 s")
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)
    return out


def main(argv: list[str]) -> None:
    url, mode = argv[0], argv[1]
    app = make_app(url)
    if mode == "schema":
        with app.open():
            app.schema_manager.apply_schema()
    elif mode == "worker":
        asyncio.run(_worker(app, int(argv[2])))
    elif mode == "defer":
        print(asyncio.run(_defer(app, int(argv[2]))))
    elif mode == "latency":
        for v in asyncio.run(_latency(app, int(argv[2]))):
            print(v)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
