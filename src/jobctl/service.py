"""The systemd user unit that keeps ``jobctl daemon`` running (README, Running as a systemd user
service).

Pure apart from one thing: :func:`systemctl` runs ``systemctl --user`` through a runner
that the caller passes in (tests pass a fake). Nothing here reads the clock or the
database; the CLI composes these pieces.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

UNIT_NAME = "jobctl.service"

# Characters that need no quoting in a systemd command line (see systemd.service(5),
# "Command lines"); anything else is double-quoted with C-style escapes.
_PLAIN_RE = re.compile(r"^[A-Za-z0-9_@%+=:,./$-]+$")


@dataclass(frozen=True)
class Result:
    """What one command printed and how it exited. ``returncode`` 127: not found."""

    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str]], Result]


def run_command(argv: Sequence[str]) -> Result:
    """The real runner: run ``argv``, capture its output, never raise for a bad exit."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=60)
    except FileNotFoundError as e:
        return Result(127, "", str(e))
    except subprocess.TimeoutExpired:
        return Result(124, "", f"{argv[0]} timed out")
    return Result(proc.returncode, proc.stdout, proc.stderr)


def unit_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/systemd/user/jobctl.service`` (default ``~/.config``)."""
    env = os.environ if environ is None else environ
    config = env.get("XDG_CONFIG_HOME") or ""
    # The XDG spec says a relative XDG_CONFIG_HOME is invalid and must be ignored.
    base = (
        Path(config) if os.path.isabs(config) else Path(env.get("HOME") or Path.home()) / ".config"
    )
    return base / "systemd" / "user" / UNIT_NAME


def quote_arg(arg: str) -> str:
    """One argument as systemd reads it in ``ExecStart=``.

    ``%`` (specifiers) is doubled and ``$`` (variable expansion) is doubled; an argument
    with blanks, quotes, backslashes or control characters is double-quoted with C escapes.
    """
    text = arg.replace("%", "%%").replace("$", "$$")
    if text and _PLAIN_RE.match(text):
        return text
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif not ch.isprintable():
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8"))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def unit_text(executable: str, db_path: str | None = None) -> str:
    """The unit file: ``ExecStart=EXECUTABLE [--db DB] daemon`` with restart on failure.

    ``KillMode=mixed`` sends SIGTERM to the daemon alone, so it can give running attempts
    their shutdown grace before systemd kills what is left of the group.
    """
    argv = [executable, *(["--db", db_path] if db_path else []), "daemon"]
    return (
        "[Unit]\n"
        "Description=jobctl scheduler\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={' '.join(quote_arg(a) for a in argv)}\n"
        "Restart=on-failure\n"
        "RestartSec=5\n"
        "KillMode=mixed\n"
        "TimeoutStopSec=90\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def find_executable(argv0: str, which: Callable[[str], str | None] = shutil.which) -> str | None:
    """The absolute path of the running jobctl: ``argv0`` when it is a jobctl script,
    else ``jobctl`` on PATH; None when neither exists."""
    if argv0 and os.path.basename(argv0) == "jobctl" and os.path.isfile(argv0):
        return os.path.abspath(argv0)
    found = which("jobctl")
    return os.path.abspath(found) if found else None


def systemctl(args: Sequence[str], runner: Runner) -> Result:
    """Run ``systemctl --user ARGS`` through ``runner`` (127 when systemctl is missing)."""
    if shutil.which("systemctl") is None:
        return Result(127, "", "systemctl: command not found")
    return runner(["systemctl", "--user", *args])


NO_MANAGER_HINT = (
    "no systemd user manager is reachable: run `jobctl daemon` under your own supervisor "
    "(a terminal multiplexer, runit, a login script), or, on a systemd machine, log in to a "
    "session (or run `loginctl enable-linger $USER`) and try `jobctl service install` again"
)


def install_calls() -> list[list[str]]:
    """The ``systemctl --user`` calls that load and start the unit, in order."""
    return [["daemon-reload"], ["enable", "--now", UNIT_NAME]]


def uninstall_calls() -> list[list[str]]:
    """The calls that stop and disable the unit (before the file is removed)."""
    return [["disable", "--now", UNIT_NAME]]


def run_calls(calls: Sequence[Sequence[str]], runner: Runner) -> Result | None:
    """Run each call in order; the first failing Result, or None when all succeeded."""
    for call in calls:
        result = systemctl(call, runner)
        if result.returncode != 0:
            return Result(
                result.returncode,
                result.stdout,
                f"systemctl --user {' '.join(call)}: "
                + (" ".join(result.stderr.split()) or f"exit {result.returncode}"),
            )
    return None
