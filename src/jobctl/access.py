"""Secrets and API tokens as they may be shown (README "Secrets", "Tokens"): names, times,
roles and users, never a secret's value nor a token's text.

Apart from :mod:`jobctl.models`: a listing of jobs uses neither, and a command's start pays
for each frozen dataclass it imports (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .models import Role


@dataclass(frozen=True)
class SecretInfo:
    """A secret as it may be shown: its name, when it was last set, the jobs that use it
    (never its value)."""

    name: str
    updated_at: datetime
    used_by: tuple[str, ...]


@dataclass(frozen=True)
class ApiToken:
    """An API token as it is kept: its name and role (the token itself is never kept,
    only its SHA-256)."""

    name: str
    role: Role
    created_at: datetime
    last_used_at: datetime | None
