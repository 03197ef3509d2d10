"""crontab(5) parsing for ``import-crontab`` (README, Migrating from crontab).

A pure function of the file's text: no clock, no database, no user lookup. It follows
vixie cron and cronie:

- blank lines and lines whose first non-blank character is ``#`` are ignored; ``\\n``
  and ``\\r\\n`` line endings are accepted and the last line needs no newline;
- ``NAME = value`` lines apply positionally, to the job lines *below* them; the value
  loses its surrounding blanks and one pair of matching quotes, and is never expanded;
- a job line is five schedule fields or an ``@`` macro, then (``system=True``) a user
  field, then the command; fields are separated by any run of blanks and tabs;
- in the command the first unescaped ``%`` starts the job's stdin, later unescaped
  ``%`` in it become newlines, and ``\\%`` is a literal ``%``; a ``#`` after the command
  is part of the command.

Nothing is raised for a bad line: every problem is collected in ``CrontabReport.errors``
with its 1-based line number, and parsing goes on so that one import shows them all.
Things that map with a difference (MAILTO, a foreign user) are listed in ``notices``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from .cronexpr import MACROS as SCHEDULE_MACROS
from .cronexpr import REBOOT
from .errors import UsageError
from .models import NAME_RE
from .zones import zone_exists

MACROS = frozenset(SCHEDULE_MACROS) | {REBOOT}
"""The ``@`` words a crontab line may start with: the schedule macros and ``@reboot``."""

# Variables cron itself consumes; they map to job settings, not to the job's environment.

SECONDS_PER_MINUTE = 60

_ENV_RE = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=(.*)$")
# Looks like an assignment but the name is not one jobctl can pass on (e.g. ``FOO-BAR=1``).
_BAD_ENV_RE = re.compile(r"^[ \t]*([^ \t=0-9*@][^ \t=]*)[ \t]*=")
_BLANKS_RE = re.compile(r"[ \t]+")
# A token that can only be a schedule field (a seconds or year field when it is the sixth).
_NUMERIC_FIELD_RE = re.compile(r"^[0-9*][0-9*/,-]*$")
# What a schedule field may contain; a token with anything else (a path) is the command.
_FIELD_RE = re.compile(r"^(?:@[a-z]+|[0-9A-Za-z*?][0-9A-Za-z*/,#?-]*)$")
_USER_RE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.@-]*\$?$")


@dataclass(frozen=True)
class ImportedJob:
    """One job line of a crontab, mapped onto jobctl's job settings.

    ``cron`` is the schedule as written (five fields joined by single spaces, or the
    macro); ``tz`` is the ``CRON_TZ`` in force (None: the machine's local zone);
    ``jitter_seconds`` is cronie's ``RANDOM_DELAY`` in seconds; ``cwd`` is the ``HOME``
    assigned above the job, since cron starts every job in ``$HOME`` (None: jobctl's
    default, which is also ``$HOME``).
    """

    line: int
    name: str
    cron: str
    tz: str | None
    command: str
    stdin: str | None
    env: dict[str, str]
    shell: str | None
    jitter_seconds: float
    on_failure: str | None
    description: str
    user: str | None
    cwd: str | None = None


@dataclass(frozen=True)
class CrontabReport:
    """The result of parsing one crontab.

    ``jobs`` are in file order. ``env`` holds every assignment seen, the last value of
    each name winning, special variables included. ``notices`` and ``errors`` are
    ``(line, message)`` pairs in file order; any error means the caller imports nothing.
    """

    jobs: list[ImportedJob] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notices: list[tuple[int, str]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class _Settings:
    """What the assignments seen so far put in force for the job lines below."""

    env: dict[str, str] = field(default_factory=dict)
    shell: str | None = None
    tz: str | None = None
    jitter_seconds: float = 0.0
    on_failure: str | None = None


def parse_crontab(
    text: str,
    *,
    prefix: str = "cron",
    system: bool = False,
    current_user: str | None = None,
    sendmail: str | None = None,
    validate_cron: Callable[[str], str | None],
) -> CrontabReport:
    """Parse crontab ``text`` into jobs, notices and errors (see the module docstring).

    Jobs are named ``f"{prefix}-{n}"`` where ``n`` counts, from 1, every line that is
    neither blank, comment nor assignment (lines in error keep their number too), so the
    same file always gives the same names. ``validate_cron`` receives each schedule
    (``"*/5 * * * *"`` or ``"@daily"``) and returns an error message or None.
    ``system=True`` reads the ``/etc/crontab`` format with a user field; jobctl never
    switches users, so a user other than ``current_user`` gets a notice. ``sendmail``
    is the path of a sendmail binary, or None when there is none: ``MAILTO`` then
    cannot be honoured and a notice says so.

    Raises ``UsageError`` only when ``prefix`` cannot make valid job names.
    """
    if len(prefix) > 54 or not NAME_RE.fullmatch(f"{prefix}-1"):
        raise UsageError(f"invalid prefix {prefix!r}: job names must match {NAME_RE.pattern}")
    report = CrontabReport()
    settings = _Settings()
    ordinal = 0
    text = text.removeprefix("\ufeff")
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        stripped = line.strip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        match = _ENV_RE.match(line)
        if match:
            _assign(match.group(1), match.group(2), number, settings, report, sendmail)
            continue
        bad_env = _BAD_ENV_RE.match(line)
        if bad_env:
            report.errors.append(
                (number, f"{bad_env.group(1)!r} is not a valid environment variable name")
            )
            continue
        ordinal += 1
        job = _parse_job(
            line,
            number,
            f"{prefix}-{ordinal}",
            settings,
            report,
            system=system,
            current_user=current_user,
            validate_cron=validate_cron,
        )
        if job is not None:
            report.jobs.append(job)
    return report


def _assign(
    name: str,
    raw_value: str,
    number: int,
    settings: _Settings,
    report: CrontabReport,
    sendmail: str | None,
) -> None:
    """Apply one ``NAME=value`` line to the settings in force below it."""
    value = _unquote(raw_value.strip(" \t"))
    report.env[name] = value
    if name == "SHELL":
        settings.shell = value or None
    elif name == "CRON_TZ":
        if value and not zone_exists(value):
            report.errors.append((number, f"CRON_TZ={value}: unknown time zone"))
        settings.tz = value or None
    elif name == "RANDOM_DELAY":
        if not value:
            settings.jitter_seconds = 0.0
        elif value.isdigit():
            settings.jitter_seconds = float(int(value) * SECONDS_PER_MINUTE)
        else:
            report.errors.append(
                (number, f"RANDOM_DELAY={value}: must be a whole number of minutes")
            )
    elif name == "MAILTO":
        if not value:
            settings.on_failure = None
            report.notices.append((number, "MAILTO is empty: mail is off, nothing is mailed"))
        elif sendmail is None:
            settings.on_failure = None
            report.notices.append(
                (number, f"MAILTO={value}: sendmail not found, failures will not be mailed")
            )
        else:
            settings.on_failure = mail_command(value, sendmail)
            report.notices.append((number, f"MAILTO={value}: failures are mailed with sendmail"))
    else:
        settings.env[name] = value


def _unquote(value: str) -> str:
    """Strip one pair of matching surrounding quotes, as cron does; blanks inside stay."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def mail_command(address: str, sendmail: str) -> str:
    """A POSIX sh ``--on-failure`` command that mails stdin (the output tail) to ``address``.

    The subject names ``$JOBCTL_JOB`` and ``$JOBCTL_STATE``, which jobctl sets when it
    runs the command. ``address`` and ``sendmail`` are shell-quoted; recipients come from
    the ``To:`` header (``sendmail -t``), and ``-i`` keeps a line holding a lone ``.``
    from ending the message.
    """
    header = "To: %s\\nSubject: jobctl: %s %s\\nContent-Type: text/plain; charset=UTF-8\\n\\n"
    return (
        f'{{ printf \'{header}\' {shlex.quote(address)} "$JOBCTL_JOB" "$JOBCTL_STATE"; cat; }}'
        f" | {shlex.quote(sendmail)} -t -i"
    )


def _parse_job(
    line: str,
    number: int,
    name: str,
    settings: _Settings,
    report: CrontabReport,
    *,
    system: bool,
    current_user: str | None,
    validate_cron: Callable[[str], str | None],
) -> ImportedJob | None:
    """Parse one job line; on a problem append it to ``report.errors`` and return None."""
    body = line.lstrip(" \t")
    first = body.split(None, 1)[0]
    if first.startswith("@"):
        if first not in MACROS:
            hint = " (use jobctl add --every)" if first == "@every" else ""
            known = " ".join(sorted(MACROS))
            report.errors.append((number, f"unknown macro {first}{hint}; known: {known}"))
            return None
        schedule_count = 1
    elif first[0] in "0123456789*":
        schedule_count = 5
    else:
        report.errors.append((number, "not a job line or a NAME=value line"))
        return None

    leading = schedule_count + (1 if system else 0)
    # maxsplit keeps the command's own blanks and tabs exactly as written.
    parts = _BLANKS_RE.split(body, maxsplit=leading)
    found = next(
        (i for i, token in enumerate(parts[:schedule_count]) if not _FIELD_RE.match(token)),
        min(len(parts), schedule_count),
    )
    if found < schedule_count:
        report.errors.append(
            (number, f"expected 5 schedule fields and a command, found {found} field(s)")
        )
        return None
    if len(parts) <= leading or not parts[leading].strip(" \t"):
        if system and len(parts) <= schedule_count:
            report.errors.append((number, "missing user and command"))
        else:
            report.errors.append((number, "missing command"))
        return None
    cron = " ".join(parts[:schedule_count])
    rest = parts[schedule_count:]
    sixth = rest[0].split(None, 1)[0]
    if schedule_count == 5 and _NUMERIC_FIELD_RE.match(sixth):
        report.errors.append(
            (
                number,
                f"6 schedule fields ({cron} {sixth}): seconds or year fields are not supported",
            )
        )
        return None
    problem = validate_cron(cron)
    if problem is not None:
        report.errors.append((number, f"bad schedule {cron!r}: {problem}"))
        return None

    user: str | None = None
    description = f"imported from crontab line {number}"
    if system:
        user = rest[0]
        if not _USER_RE.match(user):
            report.errors.append(
                (number, f"{user!r} is not a user name; the system format is SCHEDULE USER COMMAND")
            )
            return None
        description += f" (user: {user})"
        if user != current_user:
            runs_as = current_user or "the current user"
            report.notices.append(
                (number, f"runs as {user} in the system crontab; jobctl runs it as {runs_as}")
            )
    command_text = rest[-1]
    if not system and command_text.split(None, 1)[0] == "root":
        report.notices.append(
            (number, "the command starts with 'root': if this is a system crontab, use --system")
        )
    command, stdin = split_percent(command_text)
    if not command.strip(" \t"):
        report.errors.append((number, "missing command (only stdin after %)"))
        return None
    return ImportedJob(
        line=number,
        name=name,
        cron=cron,
        tz=settings.tz,
        command=command,
        stdin=stdin,
        env=dict(settings.env),
        shell=settings.shell,
        jitter_seconds=settings.jitter_seconds,
        on_failure=settings.on_failure,
        description=description,
        user=user,
        cwd=settings.env.get("HOME"),
    )


def split_percent(text: str) -> tuple[str, str | None]:
    """Split a crontab command at its first unescaped ``%`` into (command, stdin).

    In both parts ``\\%`` becomes ``%``; in stdin every other unescaped ``%`` becomes a
    newline, and a newline ends non-empty stdin without one (as cron: ``cat %a%b`` gives
    ``"a\\nb\\n"``). A backslash escapes only the next character (``\\\\%`` is a
    backslash pair followed by an unescaped ``%``), and backslashes not before ``%`` are
    kept. stdin is None when there is no unescaped ``%``.
    """
    command: list[str] = []
    stdin: list[str] | None = None
    out = command
    escaped = False
    for ch in text:
        if escaped:
            escaped = False
            if ch == "%":
                out[-1] = "%"
                continue
        elif ch == "\\":
            escaped = True
        elif ch == "%":
            if stdin is None:
                stdin = []
                out = stdin
            else:
                out.append("\n")
            continue
        out.append(ch)
    if stdin is None:
        return "".join(command), None
    text = "".join(stdin)
    # vixie cron's do_command: a newline after the last character unless it is one
    return "".join(command), text + "\n" if text and not text.endswith("\n") else text


def _first_percent(text: str) -> int | None:
    """Where the first unescaped ``%`` of a command is (as :func:`split_percent` reads
    it), or None."""
    escaped = False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "%":
            return i
    return None


def wrap_commands(
    text: str,
    wrapped: dict[int, str],
    *,
    system: bool = False,
) -> str:
    """``text`` with the command of each job line ``n`` in ``wrapped`` replaced by
    ``wrapped[n]`` (a command as the shell reads it: each ``%`` in it is escaped as
    ``\\%`` here), its schedule, user field and stdin (what follows the first unescaped
    ``%``) kept as written; every other line is kept as it is. Line ``n`` must be a job
    line that :func:`parse_crontab` read without error."""
    lines = text.removeprefix("\ufeff").split("\n")
    for number, command in wrapped.items():
        raw = lines[number - 1]
        cr = "\r" if raw.endswith("\r") else ""
        line = raw.removesuffix("\r")
        body = line.lstrip(" \t")
        leading = (1 if body.startswith("@") else 5) + (1 if system else 0)
        command_text = _BLANKS_RE.split(body, maxsplit=leading)[-1]
        head = line[: len(line) - len(command_text)]
        cut = _first_percent(command_text)
        stdin_text = "" if cut is None else command_text[cut:]
        lines[number - 1] = head + command.replace("%", "\\%") + stdin_text + cr
    return "\n".join(lines)
