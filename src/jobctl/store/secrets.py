"""Secrets and API tokens in the database (README "Secrets", "Tokens"), written once for
both backends.

A secret's value is written by :meth:`Secrets.set_secret` and read back by one
thing only: :func:`secret_values`, which a daemon calls when an attempt starts. Nothing
else here returns a value. A token is kept as the SHA-256 of its text: the text is shown
once, by the command that made it, and never again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..access import ApiToken, SecretInfo
from ..clock import from_us, to_us
from ..errors import Conflict, NameTaken, NotFound, UsageError
from ..models import Role
from .dialect import Dialect

if TYPE_CHECKING:  # for the annotations: the outbox's module is not a listing's to load
    from .outbox import Sql

SECRET_BY_NAME = "SELECT name FROM secrets WHERE name = ?"
SECRET_VALUES = "SELECT name, value FROM secrets WHERE name IN ({marks})"
SECRETS_ALL = "SELECT name, updated_at FROM secrets ORDER BY name"
INSERT_SECRET = """
INSERT INTO secrets (name, value, updated_at) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
"""
DELETE_SECRET = "DELETE FROM secrets WHERE name = ?"
#: the jobs that name a secret: few have any, and the names are read from their JSON
JOBS_WITH_SECRETS = "SELECT name, secrets FROM jobs WHERE secrets <> '{}' ORDER BY name"

TOKENS_ALL = "SELECT name, role, created_at, last_used_at FROM api_tokens ORDER BY name"
TOKEN_BY_NAME = "SELECT name FROM api_tokens WHERE name = ?"
TOKEN_BY_HASH = "SELECT name, role, created_at, last_used_at FROM api_tokens WHERE sha256 = ?"
INSERT_TOKEN = "INSERT INTO api_tokens (name, role, sha256, created_at) VALUES (?, ?, ?, ?)"
DELETE_TOKEN = "DELETE FROM api_tokens WHERE name = ?"
TOUCH_TOKEN = "UPDATE api_tokens SET last_used_at = ? WHERE name = ?"
#: a token's ``last_used_at`` is written again after this long
TOUCH_EVERY_SECONDS = 60


def _users(db: Dialect, q: Sql, c: Any = None) -> dict[str, list[str]]:
    """secret name -> the jobs that name it, in name order."""
    rows = c.execute(q(JOBS_WITH_SECRETS)).fetchall() if c is not None else None
    if rows is None:
        rows = db.read(q(JOBS_WITH_SECRETS))
    out: dict[str, list[str]] = {}
    for r in rows:
        for secret in sorted(set(json.loads(r["secrets"]).values())):
            out.setdefault(secret, []).append(r["name"])
    return out


def check_secrets(c: Any, q: Sql, secrets: Mapping[str, str], job: str) -> None:
    """Inside a job's write: every secret it names exists (UsageError, exit 2)."""
    for name in sorted(set(secrets.values())):
        if c.execute(q(SECRET_BY_NAME), (name,)).fetchone() is None:
            raise UsageError(f"invalid --secret of job {job}: no secret named {name}")


def secret_values(db: Dialect, q: Sql, names: Iterable[str]) -> dict[str, bytes]:
    """The values of the secrets ``names`` that exist (a missing one is left out): what a
    daemon reads when an attempt starts, and nothing else may call."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    rows = db.read(q(SECRET_VALUES).format(marks=db.marks(len(wanted))), wanted)
    return {r["name"]: bytes(r["value"]) for r in rows}


def _token(r: Any) -> ApiToken:
    last = r["last_used_at"]
    return ApiToken(
        r["name"],
        Role(r["role"]),
        from_us(r["created_at"]),
        None if last is None else from_us(last),
    )


class Secrets:
    """What the commands ask about secrets and tokens: a collaborator the commands' face
    holds and calls from its own methods, so its writes are retried with the face's."""

    def __init__(self, db: Dialect, q: Sql) -> None:
        self.db = db
        self._q = q

    # ------------------------------------------------------------------ secrets

    def set_secret(self, name: str, value: bytes, now: datetime) -> bool:
        """Create or replace the secret ``name``; True when it was created."""
        from ..specs import check_secret_value  # here: a listing never loads the parsers

        check_secret_value(value)
        with self.db.write() as c:
            created = c.execute(self._q(SECRET_BY_NAME), (name,)).fetchone() is None
            c.execute(self._q(INSERT_SECRET), (name, value, to_us(now)))
            return created

    def list_secrets(self) -> list[SecretInfo]:
        """Every secret: name, when it was last set, the jobs that use it; never a value."""
        users = _users(self.db, self._q)
        return [
            SecretInfo(r["name"], from_us(r["updated_at"]), tuple(users.get(r["name"], ())))
            for r in self.db.read(self._q(SECRETS_ALL))
        ]

    def delete_secret(self, name: str) -> None:
        """Delete a secret. NotFound when there is none; Conflict (naming them) while a
        job uses it."""
        with self.db.write() as c:
            if c.execute(self._q(SECRET_BY_NAME), (name,)).fetchone() is None:
                raise NotFound(f"no secret named {name!r}")
            users = _users(self.db, self._q, c).get(name)
            if users:
                raise Conflict(
                    f"secret {name!r} is used by {', '.join(users)}; "
                    "remove it from them first (edit --secret or --no-secrets)"
                )
            c.execute(self._q(DELETE_SECRET), (name,))

    # ------------------------------------------------------------------ tokens

    def add_token(self, name: str, role: Role, sha256: str, now: datetime) -> ApiToken:
        """Keep a new token's SHA-256 (hex) under ``name``. NameTaken when the name is."""
        with self.db.write() as c:
            if c.execute(self._q(TOKEN_BY_NAME), (name,)).fetchone() is not None:
                raise NameTaken(f"a token named {name!r} already exists")
            c.execute(self._q(INSERT_TOKEN), (name, role.value, sha256, to_us(now)))
        return ApiToken(name, role, from_us(to_us(now)), None)

    def list_tokens(self) -> list[ApiToken]:
        return [_token(r) for r in self.db.read(self._q(TOKENS_ALL))]

    def delete_token(self, name: str) -> None:
        with self.db.write() as c:
            if c.execute(self._q(TOKEN_BY_NAME), (name,)).fetchone() is None:
                raise NotFound(f"no token named {name!r}")
            c.execute(self._q(DELETE_TOKEN), (name,))

    def token_for(self, sha256: str, now: datetime) -> ApiToken | None:
        """The token whose text has this SHA-256 (hex), else None. Its ``last_used_at``
        is moved to ``now`` when it is a minute old or more (a write at most once a
        minute a token, not one a request)."""
        rows = self.db.read(self._q(TOKEN_BY_HASH), (sha256,))
        if not rows:
            return None
        found = _token(rows[0])
        last = found.last_used_at
        if last is None or (now - last).total_seconds() >= TOUCH_EVERY_SECONDS:
            with self.db.write() as c:
                c.execute(self._q(TOUCH_TOKEN), (to_us(now), found.name))
        return found

    def secrets_for_copy(self) -> list[tuple[str, bytes, datetime]]:
        """Every secret with its value, for ``db copy`` alone (into another database)."""
        rows = self.db.read(self._q("SELECT name, value, updated_at FROM secrets ORDER BY name"))
        return [(r["name"], bytes(r["value"]), from_us(r["updated_at"])) for r in rows]


def load_secrets(c: Any, q: Sql, secrets: Sequence[tuple[str, bytes, datetime]]) -> None:
    """Inside ``db copy``'s write: the secrets of the source, as they are."""
    for name, value, updated_at in secrets:
        c.execute(q(INSERT_SECRET), (name, value, to_us(updated_at)))
