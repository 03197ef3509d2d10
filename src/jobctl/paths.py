"""Where the database lives (SPEC §2): ``--db`` › ``JOBCTL_DB`` › the user data dir."""

from __future__ import annotations

import os
from pathlib import Path


def default_db_path() -> Path:
    """``platformdirs.user_data_path("jobctl") / "jobctl.db"``."""
    import platformdirs

    return Path(platformdirs.user_data_path("jobctl")) / "jobctl.db"


def resolve_db_path(cli_value: str | None, environ: dict[str, str] | None = None) -> Path:
    """First match wins: the ``--db`` option, then ``JOBCTL_DB``, then the default."""
    env = os.environ if environ is None else environ
    if cli_value:
        return Path(cli_value).expanduser()
    if env.get("JOBCTL_DB"):
        return Path(env["JOBCTL_DB"]).expanduser()
    return default_db_path()
