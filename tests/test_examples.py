"""The shipped examples work as their README section says, with a real daemon."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import wait_until

ROOT = Path(__file__).resolve().parents[1]


def _env(db: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["JOBCTL_DB"] = str(db)
    env.update(extra)
    return env


def _sh(script: str, env: dict[str, str], *args: str, stdin: str | None = None) -> None:
    subprocess.run(
        ["sh", str(ROOT / script), *args],
        env=env,
        check=True,
        input=stdin,
        text=True,
        capture_output=True,
    )


def test_digest_example(jobctl, start_daemon, db, tmp_path):
    outbox = tmp_path / "outbox"
    env = _env(db, DIGEST_USERS="alice bob broken-carol", DIGEST_OUTBOX=str(outbox))
    _sh("examples/digest/setup.sh", env)
    assert jobctl.json("show", "digest-fanout")["trigger"]["expr"] == "0 8 * * *"
    jobctl("edit", "digest", "--backoff", "1s")  # a minute is too long for a test
    start_daemon(env={k: env[k] for k in ("PATH", "DIGEST_USERS", "DIGEST_OUTBOX")})
    for _ in range(2):  # a retried fan-out enqueues nothing twice
        assert jobctl("run", "digest-fanout", "--wait").exit_code == 0

    def done():
        runs = jobctl.json("runs", "digest")
        return len(runs) == 3 and all(r["state"] in ("succeeded", "dead") for r in runs)

    wait_until(done, 20, what="digests delivered")
    states = {r["env"]["USER_ID"]: r["state"] for r in jobctl.json("runs", "digest")}
    assert states == {"alice": "succeeded", "bob": "succeeded", "broken-carol": "dead"}
    assert len((outbox / "alice").read_text().splitlines()) == 1
    assert len((outbox / "bob").read_text().splitlines()) == 1


def test_crawler_example(jobctl, start_daemon, db, tmp_path):
    env = _env(db, CRAWL_DRY_RUN="1", CRAWL_DIR=str(tmp_path / "crawl"))
    _sh("examples/crawler/setup.sh", env)
    urls = "\n".join(
        [
            "https://a.example/1",
            "https://a.example/2",
            "https://b.example/1",
            "!https://b.example/urgent",
            "https://a.example/1",
        ]
    )
    _sh("examples/crawler/enqueue.sh", env, stdin=urls + "\n")
    runs = jobctl.json("runs", "fetch")
    assert len(runs) == 4  # the duplicate URL was enqueued once
    urgent = next(r for r in runs if r["run_key"].endswith("urgent"))
    assert urgent["priority"] == 10 and urgent["locks"] == ["host:b.example"]
    start_daemon(env={k: env[k] for k in ("PATH", "CRAWL_DRY_RUN", "CRAWL_DIR")})
    wait_until(lambda: all(r["state"] == "succeeded" for r in jobctl.json("runs", "fetch")), 20)
    assert len(list((tmp_path / "crawl").iterdir())) == 4
