"""Shared helpers: deadline polling, the real CLI in-process, a real daemon process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from jobctl.cli import cli as click_cli
from jobctl.store import open_store


def finish_one(
    daemon_store: Any,
    run_id: int,
    attempt: int,
    daemon_id: str,
    now: Any,
    result: Any,
    decision: Any,
    job_id: int = 0,
) -> Any:
    """Record one attempt's end as a daemon's turn does (nothing claimed)."""
    from jobctl.store.values import FinishItem

    res = daemon_store.record_and_claim(
        daemon_id,
        "host",
        now,
        30.0,
        finishes=[FinishItem(run_id, attempt, result, decision, job_id=job_id)],
        started=[],
        limit=0,
        low_limit=None,
        reserved_priority=None,
        on_expired=lambda e: None,
    )
    return res.finished[0]


def wait_until(
    cond: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02, what: str = "condition"
) -> Any:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class _PgSql:
    """The SQLite-style access a few tests use (``?`` marks, tuple rows), on PostgreSQL."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        from psycopg.rows import tuple_row

        cur = self._conn.cursor(row_factory=tuple_row)
        return cur.execute(sql.replace("?", "%s"), params)


@contextlib.contextmanager
def _pg_write(db: Any) -> Any:
    with db.write():
        yield _PgSql(db.conn)


class Daemons:
    """The daemon faces of several daemons on one database, addressed by id, as a test
    plays them: ``record_and_claim("d1", "host", now, 30, ...)`` is the face of daemon
    ``d1`` on ``host`` (opened once, with a 30 s lease) recording and claiming at ``now``.
    What names no daemon (firing, the schedule, upkeep) goes to a default face."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.faces: dict[str, Any] = {}

    def face(
        self,
        daemon_id: str = "test-daemon",
        host: str = "host",
        lease: float = 30.0,
        pid: int = 1,
        boot_id: str = "boot",
        tags: tuple[str, ...] = (),
    ) -> Any:
        from jobctl.store.values import DaemonIdentity

        identity = DaemonIdentity(daemon_id, host, pid, boot_id, float(lease), tags=tags)
        face = self.faces.get(daemon_id)
        if face is None or face.identity != identity:
            face = self.faces[daemon_id] = self.handle.open_daemon(identity)
        return face

    def record_and_claim(
        self,
        daemon_id: str,
        host: str,
        now: Any,
        lease: float,
        tags: tuple[str, ...] = (),
        **kw: Any,
    ) -> Any:
        return self.face(daemon_id, host, lease, tags=tags).record_and_claim(now, **kw)

    def register_daemon(
        self, daemon_id: str, pid: int, host: str, boot_id: str, now: Any, lease: float
    ) -> None:
        self.face(daemon_id, host, lease, pid, boot_id).register_daemon(now)

    def heartbeat(
        self,
        daemon_id: str,
        now: Any,
        lease: float,
        *,
        want_leader: bool,
        held: Any,
        host: str,
        pid: int,
        boot_id: str,
    ) -> Any:
        face = self.face(daemon_id, host, lease, pid, boot_id)
        return face.heartbeat(now, want_leader=want_leader, held=held)

    def open_waker(self, daemon_id: str) -> Any:
        return self.face(daemon_id).open_waker()

    def next_claim_at(self, daemon_id: str, now: Any) -> Any:
        return self.face(daemon_id).next_claim_at(now)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.face(), name)


class StoreView:
    """Both faces of one open store, for tests that play a command and a daemon at once.

    Unknown attributes come from the commands' face, then the daemon's. ``add_job`` computes
    the first window as the CLI does; ``claim`` and ``finish`` decide as a daemon would.
    """

    def __init__(self, location: Any) -> None:
        self.handle = open_store(location)
        self.closed = False
        self.commands = self.handle.commands
        self.daemon = Daemons(self.handle)

    @property
    def conn(self) -> Any:
        if self.handle.backend == "postgresql":
            return _PgSql(self.handle.db.conn)
        return self.handle.db.conn

    def write(self) -> Any:
        if self.handle.backend == "postgresql":
            return _pg_write(self.handle.db)
        return self.handle.db.write()

    def add_job(self, spec: Any, now: Any, **kw: Any) -> Any:
        from jobctl.triggers import next_fire

        return self.commands.add_job(spec, next_fire(spec.trigger, now), now, **kw)

    def claim(
        self,
        daemon: str,
        host: str,
        now: Any,
        lease: float,
        limit: int = 10,
        tags: tuple[str, ...] = (),
    ) -> tuple[list[Any], list[Any]]:
        from jobctl import planner

        res = self.daemon.record_and_claim(
            daemon,
            host,
            now,
            lease,
            tags,
            finishes=[],
            started=[],
            limit=limit,
            low_limit=None,
            reserved_priority=None,
            on_expired=lambda e: planner.decide_expired(
                e.attempt, e.max_attempts, e.cancel_requested
            ),
        )
        return res.claimed, [r for r, _ in res.ended]

    def finish(self, run: Any, attempt: int, daemon: str, now: Any, exit_code: int = 0) -> Any:
        import random

        from jobctl import planner
        from jobctl.outcomes import AttemptResult

        result = AttemptResult(exit_code)
        decision = planner.decide(run, attempt, result, now, random.Random(0))
        return finish_one(self.daemon, run.id, attempt, daemon, now, result, decision)

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self.commands, name)
        except AttributeError:
            return getattr(self.daemon, name)

    def close(self) -> None:
        self.handle.close()
        self.closed = True

    def __enter__(self) -> StoreView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Jobctl:
    """Runs the real CLI in-process against one database file."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.runner = CliRunner()
        self._view: StoreView | None = None

    def __call__(self, *args: str, ok: bool = True) -> Any:
        result = self.runner.invoke(
            click_cli, ["--db", str(self.db), *args], catch_exceptions=False
        )
        if ok and result.exit_code != 0:
            raise AssertionError(
                f"jobctl {' '.join(args)} exited {result.exit_code}: {result.output}"
            )
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)

    def store(self) -> StoreView:
        """One open store per test, closed at its end (a server connection is not left
        to the garbage collector)."""
        if self._view is None or self._view.closed:
            self._view = StoreView(self.db)
        return self._view

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None


# ---------------------------------------------------------------- the backend switch
# JOBCTL_TEST_BACKEND=postgresql: the ``db`` fixture is a fresh PostgreSQL database (a URL)
# instead of a file path, so the same tests run on both backends. Tests marked
# ``sqlite_only`` (WAL, file modes, the file's permissions) are skipped there.

BACKEND = os.environ.get("JOBCTL_TEST_BACKEND", "sqlite")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: the test is about the SQLite file itself")
    config.addinivalue_line("markers", "postgresql: the test needs a PostgreSQL server")
    config.addinivalue_line(
        "markers", "long: the test takes many seconds; it is started before the short ones"
    )
    if BACKEND not in ("sqlite", "postgresql"):
        raise pytest.UsageError(f"JOBCTL_TEST_BACKEND must be sqlite or postgresql, not {BACKEND}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The long tests first: with the workers handed one test at a time (pyproject's
    # --maxschedchunk 1), they start side by side at once and the short ones fill in
    # around them, so the run does not end with one worker still in a long test while the
    # others are idle. The order among the rest is unchanged.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    if BACKEND != "postgresql":
        return
    skip = pytest.mark.skip(reason="about the SQLite file (JOBCTL_TEST_BACKEND=postgresql)")
    for item in items:
        if "sqlite_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pg_databases() -> Any:
    """Fresh PostgreSQL databases on the session's server (see tests/pg.py). Where no
    server can be had, a failure in CI or with JOBCTL_TEST_BACKEND=postgresql, else a skip."""
    from pg import ServerMissing, test_databases

    try:
        ctx = test_databases()
        dbs = ctx.__enter__()
    except (ServerMissing, ModuleNotFoundError) as e:
        if os.environ.get("CI") or BACKEND == "postgresql":
            raise
        pytest.skip(f"no PostgreSQL server: {e}")
    try:
        yield dbs
    finally:
        ctx.__exit__(None, None, None)


@pytest.fixture
def pg_url(pg_databases: Any) -> Any:
    """The URL of a fresh, migrated PostgreSQL database, dropped after the test."""
    url = pg_databases.new()
    yield url
    pg_databases.drop(url)


@pytest.fixture
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if BACKEND == "postgresql":
        return request.getfixturevalue("pg_url")
    return tmp_path / "jobctl.db"


@pytest.fixture
def jobctl(db: Path) -> Any:
    j = Jobctl(db)
    yield j
    j.close()


class DaemonProc:
    def __init__(self, db: Path, log: Path, args: list[str], env: dict[str, str] | None) -> None:
        self.log_path = log
        self._log = open(log, "ab")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from jobctl.cli import main; main()",
                "--db",
                str(db),
                "daemon",
                *args,
            ],
            stdout=self._log,
            stderr=self._log,
            env=full_env,
            start_new_session=True,
        )
        self.pid = self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 10.0) -> None:
        wait_until(lambda: text in self.log(), timeout, what=f"daemon log line {text!r}")

    def terminate(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.close()

    def close(self) -> None:
        if not self._log.closed:
            self._log.close()


@pytest.fixture
def start_daemon(db: Path, tmp_path: Path):
    procs: list[DaemonProc] = []

    def start(*args: str, env: dict[str, str] | None = None, ready: bool = True) -> DaemonProc:
        log = tmp_path / f"daemon{len(procs)}.log"
        d = DaemonProc(db, log, ["--lease", "2s", "--shutdown-grace", "2s", *args], env)
        procs.append(d)
        if ready:
            d.wait_log("started")
        return d

    yield start
    for d in procs:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
        d.close()
        # never leave a daemon's children behind
        try:
            os.killpg(d.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def proc_state(pid: int) -> str | None:
    """The process's state letter from ``/proc`` (``Z`` for a zombie), None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0]
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return proc_state(pid) not in (None, "Z")
