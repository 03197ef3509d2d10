"""A throwaway PostgreSQL server for the tests: one per session, a fresh database per test.

The server lives in a temporary folder (data directory and unix socket), listens on a free
port of 127.0.0.1 with ``fsync=off``, and is stopped at the end of the session. A watchdog
process stops it too when the test process dies without cleaning up (SIGKILL, a crash), so
an interrupted run never leaves a server behind.

Under pytest-xdist each worker is a session of its own, so each starts its own server: no
worker waits on another's start, none shares a database name or a connection limit with
another, and a test that restarts its server (tests/test_multihost.py) disturbs no other
worker's tests. A free port is only free when it was looked at: a start that finds it taken
(by a server or a receiver of another worker) tries again on another.

``JOBCTL_TEST_PG=<url>`` (a URL of a role allowed to create databases) uses that server
instead of starting one. A fresh database is ``CREATE DATABASE … TEMPLATE`` a database
migrated once per session (about 20 ms).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

TEMPLATE_DB = "jobctl_test_template"
_counter = itertools.count(1)


class ServerMissing(RuntimeError):
    """No PostgreSQL binaries on this machine (install the Debian package ``postgresql``)."""


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise ServerMissing(
        "PostgreSQL is not installed (apt-get install -y postgresql), and JOBCTL_TEST_PG is not set"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_database(url: str, dbname: str) -> str:
    """``url`` with its database (the path) replaced by ``dbname``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


class LocalServer:
    """A PostgreSQL cluster in a temporary folder, run as the ``postgres`` user under root."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="jobctl-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            # initdb refuses to run as root
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.socket_dir.mkdir()
        if self._as:
            os.chown(self.socket_dir, pwd.getpwnam("postgres").pw_uid, -1)
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._as, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def init(self) -> None:
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        )
        conf = self.data / "postgresql.conf"
        with open(conf, "a") as f:
            f.write(
                f"port = {self.port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.socket_dir}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                "max_connections = 400\nshared_buffers = 32MB\n"
            )

    def start(self) -> None:
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "start"
        )

    def start_on_a_free_port(self, tries: int = 5) -> None:
        """Start the server; when its port was taken between choosing and binding it (another
        worker's server or receiver), choose another and start again."""
        for attempt in range(tries):
            try:
                self.start()
                return
            except subprocess.CalledProcessError:
                log = self.log.read_text(errors="replace") if self.log.exists() else ""
                if "could not bind" not in log or attempt == tries - 1:
                    raise
            self.port = _free_port()
            # a later line of postgresql.conf overrides an earlier one
            with open(self.data / "postgresql.conf", "a") as f:
                f.write(f"port = {self.port}\n")

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: as a crash) and start it again on the same port."""
        self.stop(mode)
        self.start()

    def start_watchdog(self) -> None:
        """A detached shell that stops the server and removes the folder once this process
        is gone, however it ended."""
        pg_ctl = self.bindir / "pg_ctl"
        as_user = " ".join(self._as)
        script = (
            f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; "
            f"{as_user} {pg_ctl} -D {self.data} -m immediate -w stop >/dev/null 2>&1; "
            f"rm -rf {self.root}"
        )
        self._watchdog = subprocess.Popen(
            ["sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def destroy(self) -> None:
        self.stop("immediate")
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()
        shutil.rmtree(self.root, ignore_errors=True)


class TestDatabases:
    """Fresh databases on one server: ``new()`` gives the URL of an empty, migrated one."""

    __test__ = False  # not a test class

    def __init__(self, admin_url: str, server: LocalServer | None = None) -> None:
        self.admin_url = admin_url
        self.server = server
        self.created: list[str] = []
        self._template_ready = False

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def _prepare_template(self) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}"')
        self._admin(f'CREATE DATABASE "{TEMPLATE_DB}"')
        migrate = _template_migrator()
        if migrate is not None:
            migrate(with_database(self.admin_url, TEMPLATE_DB))
        self._template_ready = True

    def new(self, *, migrated: bool = True) -> str:
        """A new database (migrated from the template unless ``migrated`` is False)."""
        if migrated and not self._template_ready:
            self._prepare_template()
        name = f"jobctl_t{os.getpid()}_{next(_counter)}"
        template = TEMPLATE_DB if migrated else "template0"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        self.created.append(name)
        return with_database(self.admin_url, name)

    def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        with contextlib.suppress(Exception):
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        with contextlib.suppress(ValueError):
            self.created.remove(name)

    def close(self) -> None:
        for name in list(self.created):
            with contextlib.suppress(Exception):
                self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        with contextlib.suppress(Exception):
            self._admin(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')


def _template_migrator() -> Callable[[str], None] | None:
    """How to bring an empty database to the current schema (None before the store exists)."""
    try:
        from jobctl.store.postgresql.schema import migrate_url
    except ImportError:
        return None
    return migrate_url


@contextlib.contextmanager
def test_databases() -> Iterator[TestDatabases]:
    """The session's source of fresh databases: ``JOBCTL_TEST_PG`` or a server of our own."""
    external = os.environ.get("JOBCTL_TEST_PG")
    if external:
        dbs = TestDatabases(external)
        try:
            yield dbs
        finally:
            dbs.close()
        return
    server = LocalServer()
    try:
        server.start_watchdog()
        server.init()
        server.start_on_a_free_port()
        _wait_ready(server.url)
        dbs = TestDatabases(server.url, server)
        yield dbs
    finally:
        server.destroy()


test_databases.__test__ = False  # type: ignore[attr-defined]


def _wait_ready(url: str, timeout: float = 30.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


if __name__ == "__main__":  # a manual check: start, make a database, stop
    with test_databases() as dbs:
        print(dbs.new(migrated=False))
        sys.exit(0)
