"""The API token, the dashboard's sessions and their CSRF tokens (README, The
dashboard and the HTTP API).

No web framework here: plain functions over strings, so ``serve`` can resolve the token
before the server starts and tests can call them directly.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import JobctlError, UsageError

TOKEN_ENV = "JOBCTL_API_TOKEN"
SESSION_COOKIE = "jobctl_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SESSION_SECONDS = 7 * 86400
MAX_SESSIONS = 10_000


#: a token shorter than this can be guessed: ``serve`` warns (the generated one has 43)
MIN_TOKEN_CHARS = 20


@dataclass(frozen=True)
class Token:
    value: str
    #: where a token was generated on this start (``serve`` prints it), else None
    created_at_path: Path | None = None
    source: str = ""
    #: what ``serve`` warns of: a short token, a token file others may read or change
    warnings: tuple[str, ...] = ()


def _token_warnings(token: str, where: str, path: Path | None) -> tuple[str, ...]:
    """A token of fewer than MIN_TOKEN_CHARS characters; a file that users other than
    its owner may read, or anyone but its owner and group may change."""
    out = []
    if len(token) < MIN_TOKEN_CHARS:
        out.append(
            f"the token in {where} has {len(token)} characters: one that short can be "
            f"guessed; use at least {MIN_TOKEN_CHARS} random ones (python3 -c 'import "
            "secrets; print(secrets.token_urlsafe(32))')"
        )
    if path is not None:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            mode = 0
        if mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP):
            out.append(
                f"token file {where} may be read or changed by other users (mode {mode:o}): "
                "chmod 600 it"
            )
    return tuple(out)


def _read_token_file(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"no token file at {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise JobctlError(f"cannot read token file {path}: {getattr(e, 'strerror', e)}") from None
    token = text.strip()
    if not token or any(ch.isspace() for ch in token) or not token.isprintable():
        raise UsageError(f"token file {path} must hold one token: printable, no spaces")
    return token


def resolve_token(token_file: str | None, environ: Mapping[str, str], default_path: Path) -> Token:
    """The token: ``--token-file``, else ``$JOBCTL_API_TOKEN``, else the file at
    ``default_path``, created (mode 0600, folder 0700) with a random token when missing.

    A default file that others may read is refused (JobctlError), never used; a short
    token, or a ``--token-file`` that others may read, is used with ``warnings``.
    """
    if token_file is not None:
        path = Path(token_file).expanduser()
        token = _read_token_file(path)
        return Token(token, source=token_file, warnings=_token_warnings(token, token_file, path))
    env = environ.get(TOKEN_ENV)
    if env is not None:
        token = env.strip()
        if not token or any(ch.isspace() for ch in token) or not token.isprintable():
            raise UsageError(f"{TOKEN_ENV} must hold one token: printable, no spaces")
        return Token(token, source=TOKEN_ENV, warnings=_token_warnings(token, TOKEN_ENV, None))
    if default_path.exists():
        mode = default_path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise JobctlError(
                f"token file {default_path} is open to other users "
                f"(mode {stat.S_IMODE(mode):o}); chmod 600 it"
            )
        return Token(_read_token_file(default_path), source=str(default_path))
    token = secrets.token_urlsafe(32)
    old_umask = os.umask(0o077)
    try:
        default_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(default_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another serve created it just now: use that one
        return Token(_read_token_file(default_path), source=str(default_path))
    except OSError as e:
        raise JobctlError(f"cannot create token file {default_path}: {e.strerror}") from None
    finally:
        os.umask(old_umask)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return Token(token, created_at_path=default_path, source=str(default_path))


def same_secret(given: str | None, expected: str) -> bool:
    """Constant-time comparison (the time does not depend on where they differ)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, else None."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


class Sessions:
    """Dashboard sessions in memory: a random id (the HttpOnly cookie) -> its CSRF token
    and the token it was opened with (None: the server's own; else the SHA-256 of a named
    token, looked up again at each request, so a removed token ends its sessions).

    A restart of ``serve`` signs everyone out. Thread-safe.
    """

    def __init__(self, lifetime_seconds: float = SESSION_SECONDS) -> None:
        self._lifetime = lifetime_seconds
        self._lock = threading.Lock()
        self._by_id: dict[str, tuple[str, float, str | None]] = {}

    def create(self, key: str | None = None) -> tuple[str, str]:
        """A new session opened with the token ``key`` names: (session id, CSRF token)."""
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            if len(self._by_id) >= MAX_SESSIONS:
                self._expire(now)
                if len(self._by_id) >= MAX_SESSIONS:  # drop the oldest
                    oldest = min(self._by_id, key=lambda k: self._by_id[k][1])
                    del self._by_id[oldest]
            self._by_id[sid] = (csrf, now + self._lifetime, key)
        return sid, csrf

    def lookup(self, sid: str | None) -> tuple[str, str | None] | None:
        """(CSRF token, token key) of a live session, else None."""
        if not sid:
            return None
        with self._lock:
            entry = self._by_id.get(sid)
            if entry is None:
                return None
            if entry[1] < time.monotonic():
                del self._by_id[sid]
                return None
            return entry[0], entry[2]

    def csrf_for(self, sid: str | None) -> str | None:
        """The CSRF token of a live session, else None."""
        found = self.lookup(sid)
        return None if found is None else found[0]

    def end(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)

    def _expire(self, now: float) -> None:
        for k in [k for k, (_, exp, _) in self._by_id.items() if exp < now]:
            del self._by_id[k]
