"""A job's ``--env-file``: systemd's ``EnvironmentFile=`` syntax, read when each attempt
starts (its content is never stored).

``KEY=VALUE`` lines; blank lines and lines starting with ``#`` or ``;`` are skipped;
whitespace around the key and the value is dropped; a value may be in single quotes (taken
as it is) or in double quotes (where ``\\"``, ``\\\\``, ``\\$`` and ``\\``` stand for the
character); a line that ends in a backslash goes on on the next line; a value cannot hold a
NUL byte. An error names the file and the line, never a value.
"""

from __future__ import annotations

import re

from .errors import JobctlError

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: an environment file larger than this is refused (a mistaken path to a big file)
MAX_ENV_FILE_BYTES = 1024 * 1024


class EnvFileError(JobctlError):
    """The file cannot be read or is not in the syntax; the message is what the attempt's
    error says after ``env-file: ``."""


def read_env_file(path: str) -> dict[str, str]:
    """The variables of the file at ``path``. Raises EnvFileError."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_ENV_FILE_BYTES + 1)
    except OSError as e:
        raise EnvFileError(f"{path}: {e.strerror or e}") from None
    if len(data) > MAX_ENV_FILE_BYTES:
        raise EnvFileError(f"{path}: larger than {MAX_ENV_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EnvFileError(f"{path}: not UTF-8") from None
    try:
        return parse_env_file(text)
    except EnvFileError as e:
        raise EnvFileError(f"{path}: {e}") from None


def parse_env_file(text: str) -> dict[str, str]:
    """The variables of an environment file's text, later lines winning. Raises
    EnvFileError naming the line."""
    out: dict[str, str] = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i]
        i += 1
        # a backslash at the end of a line joins the next one (outside single quotes too)
        while line.endswith("\\") and not line.endswith("\\\\") and i < len(lines):
            line = line[:-1] + lines[i]
            i += 1
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        key, sep, value = stripped.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            raise EnvFileError(f"line {number}: not KEY=VALUE")
        if "\0" in value:
            # an environment cannot hold one: the value would end there, and what follows
            # it would reach the command as a variable of its own
            raise EnvFileError(f"line {number}: a value cannot hold a NUL byte")
        out[key] = _value(value.strip(), number)
    return out


def _value(raw: str, number: int) -> str:
    if raw[:1] == "'":
        if len(raw) < 2 or not raw.endswith("'"):
            raise EnvFileError(f"line {number}: a single quote is not closed")
        return raw[1:-1]
    if raw[:1] == '"':
        if len(raw) < 2 or not raw.endswith('"'):
            raise EnvFileError(f"line {number}: a double quote is not closed")
        body = raw[1:-1]
        out = []
        k = 0
        while k < len(body):
            ch = body[k]
            if ch == "\\" and k + 1 < len(body) and body[k + 1] in '"\\$`':
                out.append(body[k + 1])
                k += 2
                continue
            if ch == '"':
                raise EnvFileError(f"line {number}: a double quote is not closed")
            out.append(ch)
            k += 1
        return "".join(out)
    # unquoted: a backslash keeps the character after it
    return re.sub(r"\\(.)", r"\1", raw)
