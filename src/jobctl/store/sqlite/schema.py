"""The SQLite schema and its migrations: ``sql/sqlite/schema.sql`` and ``sql/sqlite/NNNN_*.sql``."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from ...errors import SecurityError
from .. import sqlfiles

SCHEMA_VERSION = 16
BUSY_TIMEOUT_MS = 30_000


#: (version, sql) for every numbered migration in ``sql/sqlite/``, in order; and the whole
#: current schema, as kept in ``sql/sqlite/schema.sql``
migrations, schema_sql = sqlfiles.of("sqlite")


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
