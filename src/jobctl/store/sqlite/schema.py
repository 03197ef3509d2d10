"""The SQLite schema and its migrations: ``sql/sqlite/schema.sql`` and ``sql/sqlite/NNNN_*.sql``."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from ...errors import SecurityError

SCHEMA_VERSION = 7
BUSY_TIMEOUT_MS = 30_000


def migrations() -> list[tuple[int, str]]:
    """(version, sql) for every numbered migration in ``sql/sqlite/``, in order."""
    from importlib import resources  # deferred: it pulls in tempfile, zlib, lzma...

    out = []
    for entry in resources.files("jobctl").joinpath("sql", "sqlite").iterdir():
        name = entry.name
        if name[:4].isdigit() and name.endswith(".sql"):
            out.append((int(name[:4]), entry.read_text(encoding="utf-8")))
    out.sort()
    return out


def schema_sql() -> str:
    """The whole current schema, as kept in ``sql/schema.sql``."""
    from importlib import resources

    return (
        resources.files("jobctl")
        .joinpath("sql", "sqlite", "schema.sql")
        .read_text(encoding="utf-8")
    )


def split_statements(sql: str) -> list[str]:
    """Split a script into complete statements (so they can run inside one transaction)."""
    stmts: list[str] = []
    buf = ""
    for line in sql.splitlines(keepends=True):
        if not buf and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            stmts.append(buf.strip())
            buf = ""
    if buf.strip():
        stmts.append(buf.strip())
    return stmts


def check_ownership(path: Path) -> None:
    """Refuse a database file or folder that another user owns or others can write.

    Raises SecurityError. Like cron with crontabs: whoever can write the file can run
    commands as its user.
    """
    uid = os.geteuid()
    for p in (path.parent, path):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if st.st_uid != uid:
            raise SecurityError(
                f"refusing to run jobs from {p}: it is owned by uid {st.st_uid}, not {uid}"
            )
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise SecurityError(
                f"refusing to run jobs from {p}: it is writable by group or others (chmod go-w {p})"
            )
