"""The statements of the PostgreSQL backend: the commands' (:mod:`jobctl.store.queries`,
written once for both backends) in psycopg's parameter style with PostgreSQL's fragments.
The daemon's own statements, whose algorithm differs (SKIP LOCKED claims, held locks),
stay with :mod:`.daemon`."""

from __future__ import annotations

from ..dialect import pyformat
from ..queries import Fragments, queries

QUERIES = queries(
    Fragments(
        lines_of=lambda column: f"string_agg({column}, E'\\n' ORDER BY {column})",
        for_update=" FOR UPDATE",
        given_ids=" OVERRIDING SYSTEM VALUE",
        tags_within=lambda need, have: f"({have})::jsonb @> ({need})::jsonb",
        # a lateral subquery the planner cannot flatten (OFFSET 0): a nested loop over the
        # attempts' primary key, never a hash of every attempt (which it picked for some
        # pages of jobs at 1 million runs: 300 ms, and more with every run kept)
        attempts_of_each_run="CROSS JOIN LATERAL (SELECT a.run_id, a.attempt, a.started_at, "
        "a.finished_at FROM attempts a WHERE a.run_id = runs.id OFFSET 0) a",
    )
).translated(pyformat)
