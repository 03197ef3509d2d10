"""Many CLI processes writing one database at once (README, Guarantees: A crash).

Every write is ``BEGIN IMMEDIATE`` with a busy timeout, so concurrent writers wait their
turn instead of failing with "database is locked".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKERS = 6
JOBS_PER_WORKER = 20

# One worker: the installed console script (looked up as pip installed it), called once per
# command with a fresh argv, in its own OS process with its own connections. Starting 240
# interpreters would take a minute on two busy cores; 6 interpreters * 40 calls is the same
# contention on the file.
WORKER = r"""
import sys
from importlib.metadata import entry_points
(ep,) = [e for e in entry_points(group="console_scripts") if e.name == "jobctl"]
main = ep.load()
db, w, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def call(*args):
    try:
        main(["--db", db, *args])
    except SystemExit as e:
        if e.code not in (0, None):
            sys.exit(10 + int(e.code))
for i in range(n):
    call("add", f"w{w}-j{i}", "--every", "1h", "--overlap", "allow", "--", f"echo {w} {i}")
    call("run", f"w{w}-j{i}", "--key", f"k{i}")
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JOBCTL_DB", "JOBCTL_DEBUG")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # let the children share compiled bytecode
    env["TZ"] = "UTC"
    return env


def _jobctl() -> Path:
    exe = Path(sys.executable).with_name("jobctl")
    assert exe.exists(), exe
    return exe


def _check_db(db: Path, workers: int, per_worker: int) -> None:
    exe, env = _jobctl(), _env()
    listed = subprocess.run(
        [str(exe), "--db", str(db), "list", "--json"],
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    jobs = json.loads(listed.stdout)
    names = {j["name"] for j in jobs}
    assert len(jobs) == workers * per_worker
    assert names == {f"w{w}-j{i}" for w in range(workers) for i in range(per_worker)}
    runs = subprocess.run(
        [str(exe), "--db", str(db), "runs", "--limit", "1000", "--json"],
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    run_rows = json.loads(runs.stdout)
    assert len(run_rows) == workers * per_worker
    assert len({r["id"] for r in run_rows}) == len(run_rows)
    assert {r["job"] for r in run_rows} == names
    assert all(r["state"] == "pending" and r["reason"] == "manual" for r in run_rows)


def _check_outputs(results: list[tuple[int, bytes, bytes]], per_worker: int) -> None:
    for code, out, err in results:
        assert b"locked" not in err, err.decode()
        assert code == 0, err.decode()
        # no daemon runs here: each add and run warns so (jobctl(1), WATCHING A RUN), and says nothing else
        no_daemon = b"warning: no daemon is running; start one with jobctl daemon"
        assert [line for line in err.splitlines() if line != no_daemon] == [], err.decode()
        lines = out.decode().splitlines()
        assert len(lines) == 2 * per_worker
        assert all(line.startswith("added job ") for line in lines[0::2])
        assert all(line.isdigit() for line in lines[1::2])


@pytest.mark.long
def test_six_processes_add_and_run_at_once(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(db), str(w), str(JOBS_PER_WORKER)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in range(WORKERS)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        results.append((p.returncode, out, err))
    _check_outputs(results, JOBS_PER_WORKER)
    _check_db(db, WORKERS, JOBS_PER_WORKER)


@pytest.mark.long
def test_six_jobctl_executables_at_once_on_a_new_file(tmp_path: Path) -> None:
    """The real executable, one process per command, racing to create the file too."""
    per_worker = 1
    db = tmp_path / "new" / "shared.db"
    script = (
        'i=0; while [ "$i" -lt "$N" ]; do '
        '"$JOBCTL" --db "$DB" add "w$W-j$i" --every 1h -- true || exit 10; '
        '"$JOBCTL" --db "$DB" run "w$W-j$i" --key "k$i" || exit 11; '
        "i=$((i + 1)); done"
    )
    procs = [
        subprocess.Popen(
            ["sh", "-c", script],
            env={
                **_env(),
                "JOBCTL": str(_jobctl()),
                "DB": str(db),
                "W": str(w),
                "N": str(per_worker),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in range(WORKERS)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        results.append((p.returncode, out, err))
    _check_outputs(results, per_worker)
    _check_db(db, WORKERS, per_worker)


@pytest.mark.long
def test_connections_racing_to_create_one_file_all_get_in(tmp_path: Path) -> None:
    # eight connections opening a new file at once: SQLite answers "database is locked"
    # at once (no busy wait) to some of those that meet another creating it or switching
    # it to WAL; the set-up is tried again until the busy timeout, so none fails (this
    # failed a few times in 1,600 opens before)
    import threading

    from jobctl.errors import StoreError
    from jobctl.store.sqlite.db import Db

    errors: list[str] = []
    for r in range(200):
        path = tmp_path / f"{r}.db"

        def open_it(path: Path = path) -> None:
            try:
                Db.open(path).close()
            except StoreError as e:
                errors.append(str(e))

        threads = [threading.Thread(target=open_it) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_a_folder_made_by_another_process_after_the_check_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # six executables on a new file in a new folder: one of them made the folder between
    # another's look for it and its mkdir, which failed with "File exists" (seen in CI)
    from jobctl.store.sqlite.db import Db

    folder = tmp_path / "new"
    path = folder / "shared.db"
    exists = Path.exists

    def not_yet(self: Path) -> bool:
        if self == folder and not exists(folder):  # the other process makes it now
            folder.mkdir(mode=0o700)
            return False
        return exists(self)

    monkeypatch.setattr(Path, "exists", not_yet)
    Db.open(path).close()
    assert exists(path)
