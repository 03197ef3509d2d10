"""The SQL files each backend ships in ``jobctl/sql/BACKEND/``: ``schema.sql`` (the whole
current schema) and the numbered migrations (``NNNN_*.sql``) that must reproduce it."""

from __future__ import annotations

import functools
from collections.abc import Callable


def migrations(backend: str) -> list[tuple[int, str]]:
    """(version, sql) for every numbered migration of ``backend``, in order."""
    from importlib import resources  # deferred: it pulls in tempfile, zlib, lzma...

    out = []
    for entry in resources.files("jobctl").joinpath("sql", backend).iterdir():
        name = entry.name
        if name[:4].isdigit() and name.endswith(".sql"):
            out.append((int(name[:4]), entry.read_text(encoding="utf-8")))
    out.sort()
    return out


def schema_sql(backend: str) -> str:
    """The whole current schema of ``backend``."""
    from importlib import resources

    return resources.files("jobctl").joinpath("sql", backend, "schema.sql").read_text("utf-8")


def of(backend: str) -> tuple[Callable[[], list[tuple[int, str]]], Callable[[], str]]:
    """``backend``'s :func:`migrations` and :func:`schema_sql`, each taking no argument."""
    return functools.partial(migrations, backend), functools.partial(schema_sql, backend)
