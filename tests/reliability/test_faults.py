"""A full disk and SQLITE_BUSY / I/O errors injected at every store call."""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from rhelpers import assert_clean_failure, cli_main, dump, integrity

from jobctl.daemon import Daemon, DaemonConfig
from jobctl.store import open_store
from jobctl.store.sqlite.db import Db


class FaultyConnection:
    """Delegates to a real connection; ``execute`` raises at chosen calls."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        fail_at: int | None = None,
        message: str = "database is locked",
        rate: float = 0.0,
        seed: int = 0,
    ) -> None:
        self._conn = conn
        self.calls = 0
        self.fail_at = fail_at
        self.message = message
        self.rate = rate
        self.rng = random.Random(seed)
        self.failed = 0

    def execute(self, sql, *args):
        self.calls += 1
        if self.calls == self.fail_at or (
            self.rate and self.rng.random() < self.rate and sql.strip().upper() != "ROLLBACK"
        ):
            self.failed += 1
            raise sqlite3.OperationalError(self.message)
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("faults") / "seed.db"
    base = ["--db", str(db)]
    for argv in (
        ["add", "a", "--every", "1h", "--lock", "L", "--", "true"],
        ["add", "b", "--manual", "--", "false"],
        ["run", "b"],
        ["run", "a"],
    ):
        assert cli_main([*base, *argv])[0] == 0
    with Db.open(db) as s, s.write() as c:
        c.execute("UPDATE runs SET state = 'dead' WHERE id = 1")
    return db


COMMANDS = [
    ["add", "new", "--every", "5m", "--env", "K=V", "--lock", "X", "--", "echo hi"],
    ["add", "a", "--replace", "--cron", "0 * * * *", "--", "true"],
    ["edit", "a", "--description", "changed", "--retries", "5"],
    ["run", "a", "--key", "k", "--lock", "Y", "--env", "P=1"],
    ["cancel", "2"],
    ["cancel", "b"],
    ["pause", "a"],
    ["resume", "a"],
    ["rm", "b", "--force"],
    ["retry-dead", "--all"],
    ["prune", "--older-than", "1s"],
    ["list"],
    ["show", "a"],
    ["runs"],
    ["status"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: "-".join(a[:2]))
@pytest.mark.parametrize("message", ["database is locked", "disk I/O error"])
def test_injected_error_at_each_store_call(seeded, tmp_path, monkeypatch, argv, message):
    holder: dict[str, FaultyConnection] = {}
    real_setup = Db._setup

    def setup(self):
        real_setup(self)
        self.conn = holder["conn"] = FaultyConnection(self.conn, holder.get("fail_at"), message)

    monkeypatch.setattr(Db, "_setup", setup)
    db = tmp_path / "f.db"
    n = 1
    while True:
        shutil.copy(seeded, db)
        before = dump(db)
        holder.clear()
        holder["fail_at"] = n
        code, out, err = cli_main(["--db", str(db), *argv])
        assert_clean_failure(code, out, err)
        calls = holder["conn"].calls
        if code == 0 and calls < n:
            break  # nothing failed
        if code == 0:
            n += 1  # the failed call was a hint (the wake-up poke): the change is whole
            continue
        assert message in err, err
        assert dump(db) == before, (argv, n)  # a failed write leaves nothing behind
        assert integrity(db) == "ok"
        n += 1
    assert n > 1


def test_full_disk(seeded, tmp_path, monkeypatch):
    real_setup = Db._setup

    def setup(self):
        real_setup(self)
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        self.conn.execute(f"PRAGMA max_page_count = {pages}")

    monkeypatch.setattr(Db, "_setup", setup)
    db = tmp_path / "full.db"
    shutil.copy(seeded, db)
    before = dump(db)
    big = "x" * 200_000
    for argv in (
        ["add", "huge", "--manual", "--description", big, "--", "true"],
        ["edit", "a", "--description", big],
        ["run", "a", "--key", big[:1000], "--env", "P=" + big],
    ):
        code, out, err = cli_main(["--db", str(db), *argv])
        assert_clean_failure(code, out, err)
        assert code == 1 and "full" in err, err
        assert dump(db) == before
    assert integrity(db) == "ok"


def test_daemon_survives_injected_store_errors(tmp_path, capsys):
    """SQLITE_BUSY at random store calls: the daemon never crashes and keeps serving."""
    db = tmp_path / "d.db"
    out = tmp_path / "ran"
    for name in ("a", "b"):
        code, _, err = cli_main(
            ["--db", str(db), "add", name, "--every", "1s", "--", f"echo $JOBCTL_JOB >> {out}"]
        )
        assert code == 0, err
    store = open_store(db)
    faulty = FaultyConnection(store.db.conn, seed=3)
    store.db.conn = faulty
    daemon = Daemon(
        store,
        DaemonConfig(workers=4, lease_seconds=2, shutdown_grace_seconds=2, reap_strays=False),
    )
    result: dict[str, object] = {}

    def drive():
        time.sleep(1.5)
        faulty.rate = 0.15  # one store call in seven fails
        time.sleep(5)
        faulty.rate = 0.0
        result["mark"] = out.read_text().count("\n") if out.exists() else 0
        time.sleep(3)
        daemon.signal_received = signal.SIGTERM
        import os

        os.write(daemon._sig_w, b"x")

    t = threading.Thread(target=drive)
    t.start()
    try:
        code = daemon.run()
    finally:
        t.join()
    store.close()
    assert code == 0
    assert faulty.failed >= 5
    lines = out.read_text().splitlines()
    # after the faults stopped, both jobs went on firing
    tail = lines[int(result["mark"]) :]
    assert tail.count("a") >= 2 and tail.count("b") >= 2, tail
    assert integrity(db) == "ok"
    assert "Traceback" not in capsys.readouterr().err
