"""Helpers shared by the reliability tests (the fixtures come from tests/conftest.py)."""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from jobctl import cli


def cli_main(argv: list[str]) -> tuple[int, str, str]:
    """Run ``jobctl.cli.main(argv)`` in-process: (exit code, stdout, stderr)."""
    out, err = io.BytesIO(), io.BytesIO()
    fake_out = io.TextIOWrapper(out, encoding="utf-8", errors="replace", write_through=True)
    fake_err = io.TextIOWrapper(err, encoding="utf-8", errors="replace", write_through=True)
    old = sys.stdout, sys.stderr, sys.stdin
    sys.stdout, sys.stderr = fake_out, fake_err
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")
    code: Any = 0
    try:
        cli.main(argv)
    except SystemExit as e:
        code = e.code
    finally:
        sys.stdout, sys.stderr, sys.stdin = old
    if code is None:
        code = 0
    return (
        int(code) if isinstance(code, int) else 1,
        out.getvalue().decode("utf-8", "replace"),
        err.getvalue().decode("utf-8", "replace"),
    )


def dump(db: Path | str) -> list[str]:
    """The database's whole content as SQL text (for "unchanged" checks)."""
    if isinstance(db, str):  # a PostgreSQL URL (JOBCTL_TEST_BACKEND=postgresql)
        return _pg_dump(db)
    conn = sqlite3.connect(db)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def _pg_dump(url: str) -> list[str]:
    import psycopg

    out: list[str] = []
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'jobctl' "
            "ORDER BY table_name"
        ).fetchall()
        for (table,) in tables:
            rows = conn.execute(f"SELECT * FROM jobctl.{table} ORDER BY 1, 2").fetchall()
            out += [f"{table} {row!r}" for row in rows]
    return out


def integrity(db: Path | str) -> str:
    if isinstance(db, str):
        # the server enforces the foreign keys; check what a crash could still break
        import psycopg

        with psycopg.connect(db) as conn:
            bad = conn.execute(
                "SELECT count(*) FROM jobctl.runs r WHERE r.state = 'leased' AND "
                "NOT EXISTS (SELECT 1 FROM jobctl.attempts a WHERE a.run_id = r.id "
                "AND a.attempt = r.attempt)"
            ).fetchone()
        return "ok" if bad == (0,) else f"leased runs without their attempt: {bad[0]}"
    conn = sqlite3.connect(db)
    try:
        ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        return ok if not fk else f"foreign keys: {fk}"
    finally:
        conn.close()


def children(pid: int, *, keeper: bool = False) -> list[int]:
    """The children of ``pid``; a daemon's keeper (test_keeper.py) and spawner
    (jobctl.spawner), the children it keeps all along, only with ``keeper``."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    return out if keeper else [c for c in out if not _is_keeper(c)]


def _is_keeper(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().endswith((b"/keeper.py\0", b"/spawner.py\0"))
    except OSError:
        return False


def zombies_of(pid: int) -> list[int]:
    out = []
    for c in children(pid):
        with contextlib.suppress(OSError), open(f"/proc/{c}/stat") as f:
            if f.read().split(") ")[1][0] == "Z":
                out.append(c)
    return out


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def assert_clean_failure(code: int, out: str, err: str) -> None:
    """Exit 0/1/2; on failure an ``Error:`` line; never a traceback or an internal error."""
    assert code in (0, 1, 2), (code, out, err)
    assert "Traceback" not in out + err, err
    assert "internal error" not in err, err
    if code != 0:
        assert any(line.startswith("Error:") for line in err.splitlines()), (code, out, err)
