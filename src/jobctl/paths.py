"""Where the database lives (jobctl(1), OPTIONS and FILES): ``--db`` › ``JOBCTL_DB`` › the
user data dir."""

from __future__ import annotations

import os
from pathlib import Path


def default_db_path() -> Path:
    """``platformdirs.user_data_path("jobctl") / "jobctl.db"``."""
    import platformdirs

    return Path(platformdirs.user_data_path("jobctl")) / "jobctl.db"


#: the schemes of a PostgreSQL URL (libpq's), in any case
POSTGRESQL_SCHEMES = ("postgresql://", "postgres://")


def is_db_url(location: str | Path) -> bool:
    """A PostgreSQL URL (README, Many hosts on PostgreSQL) rather than a file path: the one
    rule of the whole program. The scheme is matched in any case (``POSTGRESQL://h/db`` is
    a URL, as libpq reads it); a ``Path`` is always a file."""
    return isinstance(location, str) and location.lower().startswith(POSTGRESQL_SCHEMES)


def db_url(location: str) -> str:
    """A PostgreSQL URL with its scheme in lower case, as libpq accepts it."""
    scheme, sep, rest = location.partition("://")
    return scheme.lower() + sep + rest


def resolve_db_path(cli_value: str | None, environ: dict[str, str] | None = None) -> Path | str:
    """First match wins: the ``--db`` option, then ``JOBCTL_DB``, then the default.
    A PostgreSQL URL is returned as it is (a str); anything else is a file path."""
    env = os.environ if environ is None else environ
    value = cli_value or env.get("JOBCTL_DB")
    if value and is_db_url(value):
        return value
    if value:
        return Path(value).expanduser()
    return default_db_path()
