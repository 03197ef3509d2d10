"""The PostgreSQL schema and its migrations: ``sql/postgresql/schema.sql`` and ``NNNN_*.sql``.

Migrations run in one transaction under an advisory lock, so two first
starts at once do not race: the second waits, then finds the schema current. A database
whose ``jobctl.schema_version`` is newer than this jobctl knows is refused untouched.
"""

from __future__ import annotations

from typing import Any

from ...errors import StoreError
from .. import sqlfiles

SCHEMA_VERSION = 14
#: the key of the advisory lock held while migrating (any constant; 'jobctl' in ASCII)
MIGRATION_LOCK_KEY = 0x6A6F6263746C


#: (version, sql) for every numbered migration in ``sql/postgresql/``, in order; and the whole
#: current schema, as kept in ``sql/postgresql/schema.sql``
migrations, schema_sql = sqlfiles.of("postgresql")


def current_version(conn: Any) -> int | None:
    """The schema version of the database behind ``conn`` (None: no jobctl schema)."""
    from psycopg.rows import tuple_row

    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute("SELECT to_regclass('jobctl.schema_version')").fetchone()
        if row is None or row[0] is None:
            return None
        row = cur.execute("SELECT version FROM jobctl.schema_version").fetchone()
    return 0 if row is None else int(row[0])


def refuse_newer(version: int | None, location: str) -> None:
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(
            f"database {location} has schema version {version}, newer than this jobctl "
            f"understands ({SCHEMA_VERSION}); upgrade jobctl (the database was not modified)"
        )


def migrate(conn: Any, location: str) -> None:
    """Bring the database to :data:`SCHEMA_VERSION` (``conn`` in autocommit mode).

    The advisory lock is taken *before* the transaction starts (a session lock): a
    transaction that began before the lock was granted could look at the catalog as it
    was before the other migration committed."""
    conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
    try:
        with conn.transaction():
            version = current_version(conn)  # re-read under the lock
            refuse_newer(version, location)
            version = version or 0
            for number, sql in migrations():
                if number <= version:
                    continue
                conn.execute(sql)
                conn.execute("DELETE FROM jobctl.schema_version")
                conn.execute("INSERT INTO jobctl.schema_version (version) VALUES (%s)", (number,))
            conn.execute(
                "INSERT INTO jobctl.scheduler_lease (id, holder, expires_at) "
                "VALUES (1, NULL, 0) ON CONFLICT (id) DO NOTHING"
            )
    finally:
        if not conn.broken:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))


def migrate_url(url: str) -> None:
    """Create or migrate the jobctl schema in the database at ``url``."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn, url)


def schema_dump(conn: Any) -> list[tuple[Any, ...]]:
    """Every object of the ``jobctl`` schema, normalised, for the migration test."""
    from psycopg.rows import tuple_row

    conn = conn.cursor(row_factory=tuple_row)
    out: list[tuple[Any, ...]] = []
    out += conn.execute(
        "SELECT 'column', table_name, column_name, data_type, is_nullable, column_default, "
        "collation_name, is_identity, identity_generation FROM information_schema.columns "
        "WHERE table_schema = 'jobctl' ORDER BY table_name, ordinal_position"
    ).fetchall()
    out += conn.execute(
        "SELECT 'index', tablename, indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = 'jobctl' ORDER BY tablename, indexname"
    ).fetchall()
    out += conn.execute(
        "SELECT 'constraint', conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
        "FROM pg_constraint WHERE connamespace = 'jobctl'::regnamespace "
        "ORDER BY conrelid::regclass::text, conname"
    ).fetchall()
    out += conn.execute(
        "SELECT 'trigger', tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) "
        "FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN "
        "(SELECT oid FROM pg_class WHERE relnamespace = 'jobctl'::regnamespace) ORDER BY tgname"
    ).fetchall()
    out += conn.execute(
        "SELECT 'function', proname, pg_get_functiondef(oid) FROM pg_proc "
        "WHERE pronamespace = 'jobctl'::regnamespace ORDER BY proname"
    ).fetchall()
    return [tuple(r) for r in out]
