"""``db copy`` into a SQLite file: the whole copy in one ``BEGIN IMMEDIATE`` transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...errors import Conflict
from ..protocol import CopiedJob
from ..transfer import attempt_columns, job_columns, run_columns
from .db import Db


def _insert(c: Any, table: str, cols: dict[str, Any]) -> int:
    names = ", ".join(cols)
    marks = ", ".join(f":{k}" for k in cols)
    return int(c.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", cols).lastrowid)


def load_copy(db: Db, jobs: Sequence[CopiedJob], now: datetime, *, history: bool) -> int:
    """Insert every job (and its runs and attempts) with new ids, all or nothing.
    Refused (Conflict) when the file already holds a job. Returns how many jobs."""
    with db.write() as c:
        held = c.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
        if held:
            raise Conflict(f"the target database holds {held} jobs; db copy fills an empty one")
        for copied in jobs:
            job_id = _insert(c, "jobs", job_columns(copied, now, history=history))
            for cr in copied.runs:
                run_id = _insert(c, "runs", run_columns(cr.run, job_id))
                for lock in cr.run.locks:
                    c.execute("INSERT INTO run_locks (run_id, name) VALUES (?, ?)", (run_id, lock))
                for a in cr.attempts:
                    _insert(c, "attempts", attempt_columns(a, run_id))
    return len(jobs)
