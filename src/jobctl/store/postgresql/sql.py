"""The statements of the PostgreSQL backend: the commands' (:mod:`jobctl.store.queries`,
written once for both backends) in psycopg's parameter style with PostgreSQL's fragments.
The daemon's own statements, whose algorithm differs (SKIP LOCKED claims, held locks),
stay with :mod:`.daemon`."""

from __future__ import annotations

import re

from ..queries import Fragments, queries

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def pyformat(sql: str) -> str:
    """SQLite's parameter style (``?``, ``:name``) as psycopg's (``%s``, ``%(name)s``); a
    literal ``%`` is doubled. Fields in braces stay for ``str.format``."""
    sql = sql.replace("%", "%%").replace("?", "%s")
    return _NAMED.sub(r"%(\1)s", sql)


QUERIES = queries(
    Fragments(
        lines_of=lambda column: f"string_agg({column}, E'\\n' ORDER BY {column})",
        for_update=" FOR UPDATE",
        given_ids=" OVERRIDING SYSTEM VALUE",
    )
).translated(pyformat)
