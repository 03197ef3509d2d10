"""Jobs as code (README, Jobs in git): a job as a table of a TOML (or JSON) file, and back.

One table, :data:`FIELDS`, says everything a job file holds: each entry is one key of a
``[jobs.NAME]`` table (the long flag of ``add`` with ``_`` for ``-``), how its value is
read off a job, its default, and how a file's value is checked and handed to the very
validation ``add`` and ``edit`` use (:func:`jobctl.specs.policy_changes`). ``export``,
``apply``, ``edit -e`` and the revisions' lists of changes are all driven by it, so a new
job setting is one entry here.

Pure functions: no click, no database. Time comes in as ``now``.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import date, datetime, time
from typing import Any

from . import durations, specs, triggers, watching, zones
from .errors import JobctlError, UsageError
from .models import Job, JobSpec, JobState, Limits, Overlap, Trigger, TriggerKind
from .triggers import named


@dataclass(frozen=True)
class Definition:
    """What a job file says about one job: its spec, and whether it is paused."""

    spec: JobSpec
    paused: bool = False

    @classmethod
    def of(cls, job: Job) -> Definition:
        return cls(job.spec, job.state is JobState.PAUSED)


#: a default that no value equals: the key is always written (``tz`` of cron and at
#: jobs, ``start`` of fixed-rate jobs: a file applied on another machine keeps them)
ALWAYS = object()

#: how a file's value is checked, and what it becomes for ``policy_changes``
KINDS = ("str", "int", "bool", "duration", "time", "env", "strings", "codes", "texts", "durations")


@dataclass(frozen=True)
class Field:
    """One key of a job's table.

    ``get`` reads the value off a definition as the file writes it (None: unset, never
    written). ``default`` is the value ``add`` gives when the key is absent (or a function
    of the definition, or :data:`ALWAYS`); a value equal to it is not exported. ``kind``
    checks the file's value (see :data:`KINDS`). ``option`` is the key of
    :func:`jobctl.specs.policy_changes` the value goes through (default: ``key``); None
    for the trigger's keys, which are read together, and for ``command`` and ``paused``.
    """

    key: str
    kind: str
    get: Callable[[Definition], Any]
    default: Any = None
    option: str | None = ""
    #: trigger keys that choose the trigger's kind (exactly one per job)
    chooses_trigger: bool = False

    def default_for(self, d: Definition) -> Any:
        return self.default(d) if callable(self.default) else self.default

    def option_key(self) -> str | None:
        return self.key if self.option == "" else self.option


def _trigger_value(
    kind: TriggerKind, value: Callable[[Trigger], Any]
) -> Callable[[Definition], Any]:
    def get(d: Definition) -> Any:
        t = d.spec.trigger
        return value(t) if t.kind is kind else None

    return get


def _duration(seconds: float | None) -> str | None:
    return None if seconds is None else durations.format_duration(seconds)


def _value(choice: Any) -> Any:
    return None if choice is None else choice.value


def _size(size: int | None) -> str | None:
    return None if size is None else specs.format_size(size)


def _notify(rules: Any) -> list[str]:
    return [f"{r.channel}:{','.join(e.value for e in r.events)}" for r in rules]


def _local_iso(instant: datetime | None, tz: str) -> str | None:
    """An instant as ISO 8601 in the job's zone, with its offset (exact to the µs)."""
    if instant is None:
        return None
    return instant.astimezone(zones.parse_zone(tz)).isoformat()


def _start(d: Definition) -> str | None:
    """A fixed rate's ``start``: its anchor; but when the anchor only sets the phase (the
    instant of add without ``--start``, no window), the first window, one interval later,
    which as a ``start`` given is a window: the same windows on any database the file is
    applied to. (A set of several rates shares one anchor that no start can stand for: its
    anchor is written, and stays no window where the job already has it.)"""
    t = d.spec.trigger
    first = _first_window(t) if t.phase_only else None
    return _local_iso(first or t.anchor, t.tz)


def _set_part(kind: TriggerKind, d: Definition) -> Any:
    """A trigger's ``cron`` or ``every`` value: the text of a lone trigger of that kind;
    of a set, its members of that kind (a string for one, an array for several)."""
    t = d.spec.trigger
    if t.kind is kind:
        return t.expr
    if t.kind is not TriggerKind.SET:
        return None
    texts = [
        m.expr or ""
        if kind is TriggerKind.CRON
        else durations.format_duration(m.every_seconds or 0)
        for m in triggers.members(t)
        if m.kind is kind
    ]
    if not texts:
        return None
    return texts[0] if len(texts) == 1 else texts


def _tz_default(d: Definition) -> Any:
    if d.spec.trigger.kind in (TriggerKind.CRON, TriggerKind.ONCE, TriggerKind.SET):
        return ALWAYS
    return zones.local_zone_name()


def _overlap_default(d: Definition) -> str:
    manual = d.spec.trigger.kind is TriggerKind.MANUAL
    return str((Overlap.ALLOW if manual else Overlap.FORBID).value)


def _retries_default(d: Definition) -> int:
    return 0 if d.spec.watched else int(_spec_default("retries"))


def _grace_default(d: Definition) -> str | None:
    """A watched job's grace is 5m unless given (as ``add --watch`` makes it)."""
    return _duration(watching.DEFAULT_GRACE_SECONDS) if d.spec.watched else None


_D = JobSpec.__dataclass_fields__


def _spec_default(name: str) -> Any:
    f = _D[name]
    return f.default_factory() if callable(f.default_factory) else f.default


FIELDS: tuple[Field, ...] = (
    # the trigger: exactly one of cron, every, at, manual, reboot; then its settings
    # cron and every may be arrays and stand together: a schedule set
    Field("cron", "texts", lambda d: _set_part(TriggerKind.CRON, d), None, None, True),
    Field("every", "durations", lambda d: _set_part(TriggerKind.INTERVAL, d), None, None, True),
    Field(
        "at", "time", lambda d: _local_iso(d.spec.trigger.at, d.spec.trigger.tz), None, None, True
    ),
    Field("manual", "bool", _trigger_value(TriggerKind.MANUAL, lambda t: True), None, None, True),
    Field("reboot", "bool", _trigger_value(TriggerKind.REBOOT, lambda t: True), None, None, True),
    Field("after", "str", _trigger_value(TriggerKind.AFTER, lambda t: t.expr), None, None, True),
    Field(
        "after_completion",
        "bool",
        _trigger_value(TriggerKind.INTERVAL, lambda t: t.after_completion),
        False,
        None,
    ),
    Field("start", "time", lambda d: _start(d), ALWAYS, None),
    Field("tz", "str", lambda d: d.spec.trigger.tz, _tz_default, None),
    Field(
        "active_from",
        "time",
        lambda d: _local_iso(d.spec.trigger.active_from, d.spec.trigger.tz),
        None,
        None,
    ),
    Field(
        "active_until",
        "time",
        lambda d: _local_iso(d.spec.trigger.active_until, d.spec.trigger.tz),
        None,
        None,
    ),
    Field("except", "strings", lambda d: list(d.spec.excepts), [], "except_"),
    Field(
        "except_calendars",
        "strings",
        lambda d: list(d.spec.except_calendars),
        [],
        "except_calendar",
    ),
    # what runs: a command, or (watch = true) nothing here: the work runs elsewhere and
    # pings /ping/KEY (README "Watching jobs that jobctl does not run")
    Field("command", "str", lambda d: None if d.spec.watched else d.spec.command, None, None),
    Field("watch", "bool", lambda d: d.spec.watched, False, None),
    Field("ping_key", "str", lambda d: d.spec.ping_key, None, None),
    Field("description", "str", lambda d: d.spec.description),
    # policies, in the order of `add --help`
    Field("catchup", "str", lambda d: d.spec.catchup.value, _spec_default("catchup").value),
    Field("catchup_limit", "int", lambda d: d.spec.catchup_limit, _spec_default("catchup_limit")),
    Field("overlap", "str", lambda d: d.spec.overlap.value, _overlap_default),
    Field("timeout", "duration", lambda d: _duration(d.spec.timeout_seconds)),
    Field("retries", "int", lambda d: d.spec.retries, _retries_default),
    Field(
        "backoff",
        "duration",
        lambda d: _duration(d.spec.backoff_seconds),
        _duration(_spec_default("backoff_seconds")),
    ),
    Field("priority", "int", lambda d: d.spec.priority, _spec_default("priority")),
    Field(
        "jitter",
        "duration",
        lambda d: _duration(d.spec.jitter_seconds),
        _duration(_spec_default("jitter_seconds")),
    ),
    Field("env", "env", lambda d: dict(d.spec.env), {}),
    # secrets (README "Secrets"): {ENV: secret name}, never a value; the file read at
    # each attempt, never its content
    Field("secrets", "env", lambda d: dict(d.spec.secrets), {}, "secret"),
    Field("env_file", "str", lambda d: d.spec.env_file),
    Field("cwd", "str", lambda d: d.spec.cwd),
    Field("shell", "str", lambda d: d.spec.shell, _spec_default("shell")),
    Field("on_failure", "str", lambda d: d.spec.on_failure),
    Field("stdin", "str", lambda d: d.spec.stdin),
    Field("locks", "strings", lambda d: list(d.spec.locks), [], "lock"),
    Field("on", "strings", lambda d: list(d.spec.on_tags), [], "on"),
    # run policies (README, Run policies and what a run costs)
    Field("deadline", "duration", lambda d: _duration(d.spec.deadline_seconds)),
    Field("pause_after_failures", "int", lambda d: d.spec.pause_after_failures),
    Field("max_running", "int", lambda d: d.spec.max_running),
    Field("ok_exit", "codes", lambda d: list(d.spec.ok_exit), []),
    Field("no_retry_exit", "codes", lambda d: list(d.spec.no_retry_exit), []),
    # limits (jobctl(1), jobctl add: --nice to --files-max)
    Field("nice", "int", lambda d: d.spec.limits.nice),
    Field("io_class", "str", lambda d: _value(d.spec.limits.io_class)),
    Field("memory_max", "str", lambda d: _size(d.spec.limits.memory_max)),
    Field("cpu_max", "duration", lambda d: _duration(d.spec.limits.cpu_max_seconds)),
    Field("files_max", "int", lambda d: d.spec.limits.files_max),
    # retention (README, History: what is kept)
    Field("keep_runs", "int", lambda d: d.spec.keep_runs, _spec_default("keep_runs")),
    Field("keep_for", "duration", lambda d: _duration(d.spec.keep_for_seconds)),
    # notifications (README, Getting told): "CHANNEL:EVENTS" as --notify takes them
    Field("notify", "strings", lambda d: _notify(d.spec.notify), [], "notify"),
    Field("grace", "duration", lambda d: _duration(d.spec.grace_seconds), _grace_default),
    Field("warn_after", "duration", lambda d: _duration(d.spec.warn_after_seconds)),
    # the job's state
    Field("paused", "bool", lambda d: d.paused, False, None),
)

#: :data:`FIELDS` for a set given an ``every`` first
_EVERY_FIRST: tuple[Field, ...] = tuple(
    f for k in ("every", "cron") for f in FIELDS if f.key == k
) + tuple(f for f in FIELDS if f.key not in ("every", "cron"))

BY_KEY: dict[str, Field] = {f.key: f for f in FIELDS}
assert len(BY_KEY) == len(FIELDS), "a key of the job file is in FIELDS twice"
TRIGGER_KEYS = tuple(f.key for f in FIELDS if f.chooses_trigger)


# ---------------------------------------------------------------------- a job -> its table


def _fields(d: Definition) -> Sequence[Field]:
    """:data:`FIELDS`, but ``every`` before ``cron`` for a set given an ``--every`` first:
    the order of the keys is the set's order (the first names a window several make)."""
    t = d.spec.trigger
    if t.kind is not TriggerKind.SET or triggers.members(t)[0].kind is not TriggerKind.INTERVAL:
        return FIELDS
    return _EVERY_FIRST


def full_table(d: Definition) -> dict[str, Any]:
    """Every key of :data:`FIELDS` with its value (None when unset): what changes compare."""
    return {f.key: f.get(d) for f in _fields(d)}


def export_table(d: Definition) -> dict[str, Any]:
    """The job's table as ``export`` writes it: only values that differ from the defaults
    (``tz`` of cron and at jobs and ``start`` of fixed-rate jobs always), in the order of
    :data:`FIELDS`."""
    out: dict[str, Any] = {}
    for f in _fields(d):
        value = f.get(d)
        if value is None:
            continue
        default = f.default_for(d)
        if default is not ALWAYS and value == default:
            continue
        out[f.key] = value
    return out


def stored_table(d: Definition) -> dict[str, Any]:
    """The job's table with every value that is set, defaults included: what a revision
    keeps, so that going back to it does not depend on the defaults of the day (or the
    machine's zone)."""
    return {k: v for k, v in full_table(d).items() if v is not None}


def export_document(
    defs: Sequence[Definition], calendars: Mapping[str, Sequence[date]] | None = None
) -> dict[str, Any]:
    """``{"jobs": {NAME: table}}`` for the definitions, in the order given, and
    ``{"calendars": {NAME: {"dates": [ISO date]}}}`` for the calendars given that they
    use (``except_calendars``)."""
    document: dict[str, Any] = {"jobs": {d.spec.name: export_table(d) for d in defs}}
    used = {name for d in defs for name in d.spec.except_calendars}
    cals = {
        name: {"dates": [day.isoformat() for day in sorted(days)]}
        for name, days in sorted((calendars or {}).items())
        if name in used
    }
    if cals:
        document["calendars"] = cals
    return document


def dumps(document: Mapping[str, Any], fmt: str = "toml") -> str:
    """The document as TOML (written with tomli-w) or as indented JSON."""
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    import tomli_w

    return tomli_w.dumps(document, multiline_strings=True)


def changes(old: Definition | None, new: Definition | None) -> dict[str, list[Any]]:
    """``{KEY: [old, new]}`` for every key whose value differs, in the order of
    :data:`FIELDS`. A job that did not exist (or no longer does) is compared through its
    exported table, so a new job lists the keys a file would hold for it."""
    if old is None or new is None:
        side = export_table(new if new is not None else old)  # type: ignore[arg-type]
        return {k: ([None, v] if old is None else [v, None]) for k, v in side.items()}
    a, b = full_table(old), full_table(new)
    return {k: [a[k], b[k]] for k in a if a[k] != b[k]}


def show_value(value: Any) -> str:
    """A value in a line for people: JSON-like, ``none`` for unset."""
    if value is None:
        return "none"
    return json.dumps(value, ensure_ascii=False)


def describe_changes(fields_changed: Mapping[str, list[Any]]) -> str:
    """``FIELD OLD -> NEW; ...``"""
    return "; ".join(
        f"{k} {show_value(old)} -> {show_value(new)}" for k, (old, new) in fields_changed.items()
    )


# ---------------------------------------------------------------------- a file -> definitions


@dataclass(frozen=True)
class Problem:
    """One error of a job file: the line it is on (None when it has none) and a message."""

    line: int | None
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


class FileErrors(UsageError):
    """A job file with errors: every one is listed, nothing is applied (exit 2)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        n = len(self.problems)
        super().__init__(f"{n} error{'s' if n != 1 else ''} in the job file; nothing was applied")


@dataclass
class ParsedFile:
    """The jobs of a file by name (file order), and every problem found."""

    jobs: dict[str, Definition] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    #: the file's ``[calendars.NAME]`` tables: their dates
    calendars: dict[str, list[date]] = field(default_factory=dict)
    #: where the file's tables and keys sit, for the problems found after parsing
    lines: _Lines | None = None

    def line_of(self, job: str, key: str, sub: str | None = None) -> int | None:
        """The line of key ``key`` of job ``job`` (of ``sub`` in the table ``key`` when
        given), else of the nearest table holding it; None for JSON."""
        if self.lines is None:
            return None
        found = self.lines.key(("jobs", job, key), sub) if sub is not None else None
        return found or self.lines.key(("jobs", job), key)


def parse_text(text: str, now: datetime, existing: Mapping[str, Job] | None = None) -> ParsedFile:
    """Read a job file (TOML, or JSON when it starts with ``{``) into definitions, each
    validated as ``add`` validates its flags. Every problem is collected (never raised),
    with the line of the key it is about where there is one.

    ``existing`` (the stored jobs by name) keeps what a file need not repeat: a fixed-rate
    job without ``start`` keeps its phase, and a one-shot time in the past is accepted
    when it is the job's own (a done one-shot exported and applied again).
    """
    out = ParsedFile()
    stripped = text.lstrip("\ufeff").lstrip()
    if stripped.startswith("{"):
        try:
            document = json.loads(stripped)
        except json.JSONDecodeError as e:
            out.problems.append(Problem(e.lineno, f"invalid JSON: {e.msg} (column {e.colno})"))
            return out
        lines = _Lines("")
    else:
        try:
            document = tomllib.loads(text.lstrip("\ufeff"))
        except tomllib.TOMLDecodeError as e:
            out.problems.append(_toml_problem(str(e), text))
            return out
        lines = _Lines(text)
    out.lines = lines
    if not isinstance(document, dict):
        out.problems.append(Problem(None, "a job file is an object with a jobs table"))
        return out
    for key in document:
        if key not in ("jobs", "calendars"):
            out.problems.append(
                Problem(
                    lines.key((), key),
                    f"unknown key {key!r}: a job file holds only [jobs.NAME] and "
                    "[calendars.NAME] tables",
                )
            )
    _calendars(document.get("calendars", {}), lines, out)
    jobs = document.get("jobs", {})
    if not isinstance(jobs, dict):
        out.problems.append(Problem(lines.key((), "jobs"), "jobs must be a table of jobs"))
        return out
    for name, table in jobs.items():
        where = lines.table(("jobs", name))
        if not isinstance(table, dict):
            out.problems.append(Problem(where, f"job {name}: must be a table"))
            continue
        job_problems: list[Problem] = []
        try:
            specs.check_name(name)
        except UsageError as e:
            job_problems.append(Problem(where, str(e)))
        d = _definition(name, table, now, (existing or {}).get(name), lines, job_problems)
        out.problems.extend(job_problems)
        if d is not None and not job_problems:
            out.jobs[name] = d
    out.problems.sort(key=lambda p: (p.line is None, p.line or 0))
    return out


def _calendars(tables: Any, lines: _Lines, out: ParsedFile) -> None:
    """The file's ``[calendars.NAME] dates = [...]`` into ``out.calendars``."""
    if not isinstance(tables, dict):
        out.problems.append(Problem(lines.key((), "calendars"), "calendars must be a table"))
        return
    for name, table in tables.items():
        where = lines.table(("calendars", name))
        try:
            specs.check_name(name, "calendar name")
            if not isinstance(table, dict) or set(table) != {"dates"}:
                raise UsageError("must be a table with one key, dates")
            days = table["dates"]
            if not isinstance(days, list):
                raise UsageError("dates must be an array of ISO dates")
            texts = [d.isoformat() if isinstance(d, date) else d for d in days]
            if not all(isinstance(t, str) for t in texts):
                raise UsageError("dates must be an array of ISO dates")
            out.calendars[name] = specs.parse_dates(texts, "date")
        except UsageError as e:
            out.problems.append(Problem(where, f"calendar {name}: {e}"))


def definition_from_table(
    name: str, table: Mapping[str, Any], now: datetime, existing: Job | None = None
) -> Definition:
    """One job's table (as a revision keeps it) -> its definition, validated as
    :func:`parse_text` validates a file's. Raises UsageError naming every problem.

    A watched job's revision written before the job file said ``watch`` holds ``command
    = ""`` and no ``watch`` (a job that runs a command never has an empty one): it is read
    as the watched job it was, keeping the job's ping key when it has one."""
    if "watch" not in table and table.get("command") == "":
        table = {k: v for k, v in table.items() if k != "command"} | {"watch": True}
    problems: list[Problem] = []
    d = _definition(name, table, now, existing, _Lines(""), problems)
    if problems or d is None:
        raise UsageError("; ".join(p.message for p in problems) or f"job {name}: invalid")
    return d


_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def _toml_problem(message: str, text: str) -> Problem:
    if message.endswith("(at end of document)"):
        end = message.removesuffix("(at end of document)").strip()
        return Problem(max(1, len(text.splitlines())), f"invalid TOML: {end} (at the end)")
    m = _TOML_AT.search(message)
    if m is None:
        return Problem(None, f"invalid TOML: {message}")
    text = message[: m.start()].strip()
    return Problem(int(m.group(1)), f"invalid TOML: {text} (column {m.group(2)})")


def _checked(f: Field, value: Any) -> Any:
    """The file's value of ``f``, type-checked, in the form the CLI's flag takes."""
    kind = f.kind
    if kind == "str":
        if not isinstance(value, str):
            raise UsageError("must be a string")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError("must be an integer")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise UsageError("must be true or false")
        return value
    if kind == "duration":
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise UsageError('must be a DURATION such as "90m" (or whole seconds)')
        return str(value)
    if kind == "time":
        if isinstance(value, datetime | date) and not isinstance(value, time):
            return value.isoformat()
        if not isinstance(value, str):
            raise UsageError("must be an ISO 8601 time")
        return value
    if kind == "env":
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise UsageError('must be a table of NAME = "value"')
        return [f"{k}={v}" for k, v in value.items()]
    if kind == "strings":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError("must be an array of strings")
        return value
    if kind == "texts":
        if isinstance(value, str):
            return value
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise UsageError("must be a string or an array of strings")
        return value
    if kind == "durations":
        items = value if isinstance(value, list) else [value]
        if not items or any(isinstance(v, bool) or not isinstance(v, int | str) for v in items):
            raise UsageError('must be a DURATION such as "90m", or an array of them')
        return [str(v) for v in items] if isinstance(value, list) else str(value)
    if kind == "codes":
        if isinstance(value, str):
            return value
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise UsageError("must be an array of exit codes")
        return ",".join(str(v) for v in value)
    raise AssertionError(f"unknown kind {kind}")


def _definition(
    name: str,
    table: Mapping[str, Any],
    now: datetime,
    existing: Job | None,
    lines: _Lines,
    problems: list[Problem],
) -> Definition | None:
    path = ("jobs", name)

    def problem(key: str | None, message: str) -> None:
        line = lines.key(path, key) if key else lines.table(path)
        problems.append(Problem(line, f"job {name}: {key + ': ' if key else ''}{message}"))

    given: dict[str, Any] = {}
    for key, value in table.items():
        f = BY_KEY.get(key)
        if f is None:
            problem(key, "unknown key")
            continue
        try:
            given[key] = _checked(f, value)
        except UsageError as e:
            problem(key, str(e))
    changes: dict[str, Any] = {}
    for key, value in given.items():
        opt = BY_KEY[key].option_key()
        if opt is None:
            continue
        try:
            for field_name, field_value in specs.policy_changes({opt: value}).items():
                if field_name == "limits":  # one dict of the Limits fields given
                    changes.setdefault("limits", {}).update(field_value)
                else:
                    changes[field_name] = field_value
        except JobctlError as e:
            problem(key, str(e))
    watch = bool(given.get("watch", False))
    if watch:
        _check_watch(table, problem)
    elif "ping_key" in table:
        problem("ping_key", "goes with watch = true")
    command: str | None = "" if watch else None
    if not watch and "command" not in table:
        problem(None, "command is required")
    elif not watch and "command" in given:
        try:
            command = specs.join_command([specs.check_text(given["command"], "command")])
        except UsageError as e:
            problem("command", str(e))
    trigger = None
    try:
        trigger = _trigger(given, table, now, existing, name, problem)
    except _KeyProblem as e:
        problem(e.key, e.message)
    if watch and trigger is not None:
        try:
            watching.check_watch_trigger(trigger)
        except UsageError:
            key = next(k for k in TRIGGER_KEYS if k in table)
            problem(key, "a watched job takes cron or every (fixed rate)")
    if problems or trigger is None or command is None:
        return None
    if watch:
        changes["retries"] = 0
        changes.setdefault("grace_seconds", watching.DEFAULT_GRACE_SECONDS)
        changes["ping_key"] = given.get("ping_key") or (
            existing.spec.ping_key
            if existing is not None and existing.spec.ping_key is not None
            else watching.new_ping_key()
        )
    if trigger.kind is TriggerKind.MANUAL:
        changes.setdefault("overlap", Overlap.ALLOW)
    if "limits" in changes:
        changes["limits"] = Limits(**changes["limits"])
    try:
        spec = specs.check_policies(
            JobSpec(name=name, trigger=named(trigger, name), command=command, **changes)
        )
    except UsageError as e:
        problem(None, str(e))
        return None
    return Definition(spec, bool(given.get("paused", False)))


#: a watched job as ``add --watch`` makes it: the settings about starting a command it holds
_WATCHED = Definition(
    JobSpec(
        name="watched",
        trigger=Trigger(TriggerKind.INTERVAL, tz="UTC", expr="1h", every_seconds=3600.0),
        command="",
        retries=0,
        ping_key="key",
    )
)


def _check_watch(table: Mapping[str, Any], problem: Callable[[str | None, str], None]) -> None:
    """A watched job's table (``watch = true``) holds no command and no key about starting
    one (``timeout`` stays: how long a started run may go without its end ping), and a
    ``ping_key`` only as ``/ping/KEY`` takes it."""
    if "command" in table:
        problem("command", "a watched job has no command: the work runs elsewhere and pings")
    for key, value in table.items():
        f = BY_KEY.get(key)
        if f is None or f.option_key() not in watching.START_FLAGS:
            continue
        # the value every watched job holds is no setting (a revision keeps them all)
        if value != f.get(_WATCHED):
            problem(key, "it is about starting a command: not with watch = true")
    ping_key = table.get("ping_key")
    if isinstance(ping_key, str):
        try:
            watching.check_ping_key(ping_key)
        except UsageError as e:
            problem("ping_key", str(e))


class _KeyProblem(Exception):
    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def _trigger(
    given: Mapping[str, Any],
    table: Mapping[str, Any],
    now: datetime,
    existing: Job | None,
    name: str,
    problem: Callable[[str | None, str], None],
) -> Trigger | None:
    """The trigger keys of a table -> a validated Trigger (None when a key's type was
    already reported). A bad ``tz`` or a misplaced ``start``/``after_completion`` is
    reported through ``problem`` and the trigger's own key is still checked (in UTC), so
    a bad zone does not hide a bad expression. Raises _KeyProblem."""
    chosen = [k for k in TRIGGER_KEYS if k in table and table[k] is not False]
    if chosen == ["cron", "every"] or (
        len(chosen) == 1 and chosen[0] in ("cron", "every") and isinstance(table[chosen[0]], list)
    ):
        chosen = ["set"]
    if len(chosen) != 1:
        raise _KeyProblem(
            chosen[1] if len(chosen) > 1 else None,
            "give exactly one trigger: "
            + ", ".join(TRIGGER_KEYS)
            + " (cron and every may stand together)"
            + (f" (got {', '.join(chosen)})" if chosen else ""),
        )
    checked = ("tz", "start", "after_completion", "active_from", "active_until", "cron", "every")
    if any(k in table and k not in given for k in checked):
        return None  # a type error, already reported
    trigger = _trigger_kind(chosen[0], given, now, existing, name, problem)
    if trigger is None:
        return None
    if "active_from" in given or "active_until" in given:
        try:
            trigger = specs.with_range(
                trigger,
                specs.TriggerOptions(
                    active_from=given.get("active_from"), active_until=given.get("active_until")
                ),
                now,
            )
        except UsageError as e:
            key = "active_until" if "active_until" in given else "active_from"
            raise _KeyProblem(key, str(e)) from None
    return trigger


def _trigger_kind(
    kind: str,
    given: Mapping[str, Any],
    now: datetime,
    existing: Job | None,
    name: str,
    problem: Callable[[str | None, str], None],
) -> Trigger | None:
    """The trigger of one trigger kind; a bad zone or a misplaced key goes to
    ``problem`` (None is returned) after the kind's own key was checked too. Raises
    _KeyProblem."""
    reported = False
    try:
        tz = specs.check_zone(given["tz"]) if "tz" in given else zones.local_zone_name()
    except UsageError as e:
        problem("tz", str(e))
        tz, reported = "UTC", True
    for key in ("after_completion", "start"):
        if key in given and kind != "every" and not (kind == "set" and "every" in given):
            problem(key, "goes with every")
            reported = True
    trigger = _build_trigger(kind, given, tz, now, existing, name, problem)
    return None if reported else _same_phase(trigger, existing)


def _same_phase(trigger: Trigger, existing: Job | None) -> Trigger:
    """The job's own trigger when its anchor only sets the phase and the file says the
    same: the same rates with ``start`` its first window (as export writes it), or its
    anchor (a file without ``start``, or one exported before): it stays no window, and
    the job as it is."""
    old = existing.trigger if existing is not None else None
    if (
        old is None
        or not old.phase_only
        or trigger.phase_only
        or trigger.anchor is None
        or old.anchor is None
        or (trigger.kind, trigger.expr, trigger.every_seconds)
        != (old.kind, old.expr, old.every_seconds)
    ):
        return trigger
    if trigger.anchor == old.anchor or trigger.anchor == _first_window(old):
        return replace(trigger, anchor=old.anchor, phase_only=True)
    return trigger


def _first_window(t: Trigger) -> datetime | None:
    """The first window of a trigger with one fixed rate (a set's too), else None."""
    rates = [m for m in triggers.members(t) if triggers.is_fixed_rate(m)]
    return triggers.first_window(rates[0]) if len(rates) == 1 else None


def _build_trigger(
    kind: str,
    given: Mapping[str, Any],
    tz: str,
    now: datetime,
    existing: Job | None,
    name: str,
    problem: Callable[[str | None, str], None],
) -> Trigger:
    """The trigger of one trigger kind, read in ``tz``. Raises _KeyProblem (a second
    problem, a bad ``start`` beside a bad ``every``, goes to ``problem``)."""
    value: Any = given.get(kind)
    old = existing.trigger if existing is not None else None
    if kind == "set":
        start = given.get("start")
        if start is None and old is not None and old.anchor is not None:
            start = old.anchor.isoformat()  # a file without start keeps the job's phase
        # the set's order is the keys' (every before cron: the everys come first)
        order = [
            k
            for k in given
            if k in ("cron", "every")
            for _ in ([given[k]] if isinstance(given[k], str) else given[k])
        ]
        try:
            return specs.build_trigger(
                specs.TriggerOptions(
                    cron=given.get("cron"),
                    every=given.get("every"),
                    start=start,
                    tz=tz,
                    order=order,
                ),
                now,
            )
        except UsageError as e:
            raise _KeyProblem("cron" if "cron" in given else "every", str(e)) from None
    try:
        if kind == "cron":
            return specs.build_trigger(specs.TriggerOptions(cron=value, tz=tz), now)
        if kind == "reboot":
            return specs.build_trigger(specs.TriggerOptions(cron="@reboot", tz=tz), now)
        if kind == "manual":
            return specs.build_trigger(specs.TriggerOptions(manual=True, tz=tz), now)
        if kind == "after":
            return specs.build_trigger(specs.TriggerOptions(after=value, tz=tz), now)
    except UsageError as e:
        raise _KeyProblem(kind, str(e)) from None
    if kind == "every":
        after_completion = bool(given.get("after_completion", False))
        start = given.get("start")
        if (
            start is None
            and not after_completion
            and old is not None
            and old.kind is TriggerKind.INTERVAL
            and old.anchor is not None
        ):
            start = old.anchor.isoformat()  # a file without start keeps the job's phase
        hashed = isinstance(start, str) and start.strip().upper() == "H"
        bad_start: _KeyProblem | None = None
        try:
            anchor = (
                durations.parse_time(start, tz, now) if start is not None and not hashed else None
            )
        except UsageError as e:
            bad_start, anchor = _KeyProblem("start", str(e)), None
        try:
            trigger = specs.build_trigger(
                specs.TriggerOptions(
                    every=value,
                    after_completion=after_completion,
                    start="H" if hashed else anchor.isoformat() if anchor is not None else None,
                    tz=tz,
                ),
                now,
                name=name,
            )
        except UsageError as e:
            if bad_start is not None:  # a bad start hides no bad interval: both are said
                problem("start", bad_start.message)
            raise _KeyProblem("every", str(e)) from None
        if bad_start is not None:
            raise bad_start
        return trigger
    try:
        at = durations.parse_time(value, tz, now)
    except UsageError as e:
        raise _KeyProblem("at", str(e)) from None
    own = old is not None and old.kind is TriggerKind.ONCE and old.at == at
    if at <= now and not own:
        raise _KeyProblem("at", f"{value!r} is in the past")
    return Trigger(TriggerKind.ONCE, tz=tz, at=at)


# ---------------------------------------------------------------------- lines of a TOML text


class _Lines:
    """Where tables and keys sit in a TOML text (1-based lines), for error messages.

    Only what a job file written by hand or by ``export`` holds: ``[a.b]`` headers (bare,
    ``"quoted"`` or ``'literal'`` parts) and ``key = …`` lines under them.
    """

    _HEADER = re.compile(r"^\s*\[(?!\[)(.*)\]\s*(?:#.*)?$")
    _KEY = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*=""")

    def __init__(self, text: str) -> None:
        self._tables: dict[tuple[str, ...], int] = {}
        self._keys: dict[tuple[tuple[str, ...], str], int] = {}
        current: tuple[str, ...] = ()
        in_multiline = False
        for number, line in enumerate(text.splitlines(), 1):
            if in_multiline:
                if line.count('"""') % 2 == 1 or line.count("'''") % 2 == 1:
                    in_multiline = False
                continue
            header = self._HEADER.match(line)
            if header:
                current = tuple(_split_dotted(header.group(1)))
                self._tables.setdefault(current, number)
                continue
            key = self._KEY.match(line)
            if key:
                self._keys.setdefault((current, _unquote(key.group(1))), number)
                rest = line[key.end() :]
                if rest.count('"""') % 2 == 1 or rest.count("'''") % 2 == 1:
                    in_multiline = True

    def table(self, path: tuple[str, ...]) -> int | None:
        return self._tables.get(path)

    def key(self, path: tuple[str, ...], key: str) -> int | None:
        return self._keys.get((path, key)) or self._tables.get((*path, key)) or self.table(path)


def _unquote(part: str) -> str:
    part = part.strip()
    if len(part) >= 2 and part[0] == part[-1] == '"':
        try:
            value = json.loads(part)
        except ValueError:
            return part[1:-1]
        return value if isinstance(value, str) else part
    if len(part) >= 2 and part[0] == part[-1] == "'":
        return part[1:-1]
    return part


def _split_dotted(text: str) -> list[str]:
    parts, buf, quote, escaped = [], "", "", False
    for ch in text:
        if quote:
            buf += ch
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            buf += ch
        elif ch == ".":
            parts.append(_unquote(buf))
            buf = ""
        else:
            buf += ch
    parts.append(_unquote(buf))
    return parts


# ---------------------------------------------------------------------- what applying does


@dataclass(frozen=True)
class Change:
    """A stored job the file changes: the job as it is, the definition to make it, and
    ``{KEY: [old, new]}``."""

    job: Job
    new: Definition
    fields: dict[str, list[Any]]

    def spec_changes(self) -> dict[str, Any]:
        """The JobSpec fields to write, as ``edit`` takes them."""
        old, new = self.job.spec, self.new.spec
        return {
            f.name: getattr(new, f.name)
            for f in fields(JobSpec)
            if getattr(old, f.name) != getattr(new, f.name)
        }


@dataclass(frozen=True)
class ApplyPlan:
    """What applying a file does: jobs to add, to change and to delete (by name order of
    the file, then of the database)."""

    added: list[Definition]
    changed: list[Change]
    removed: list[Job]
    #: calendars of the file to create (``+``) or whose dates change (``~``), by name
    calendars: dict[str, tuple[str, list[date]]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed or self.calendars)

    def lines(self) -> list[str]:
        """``+ calendar NAME`` and ``~ calendar NAME``, then ``+ NAME``, ``~ NAME: FIELD
        OLD -> NEW; ...``, ``- NAME`` (jobctl(1), jobctl apply)."""
        out = [f"{mark} calendar {name}" for name, (mark, _) in self.calendars.items()]
        out += [f"+ {d.spec.name}" for d in self.added]
        out += [f"~ {c.job.name}: {describe_changes(c.fields)}" for c in self.changed]
        out += [f"- {j.name}" for j in self.removed]
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "added": [d.spec.name for d in self.added],
            "changed": [{"name": c.job.name, "fields": c.fields} for c in self.changed],
            "removed": [j.name for j in self.removed],
        }
        if self.calendars:
            out["calendars"] = list(self.calendars)
        return out


def plan_apply(
    wanted: Mapping[str, Definition],
    jobs: Sequence[Job],
    *,
    prune: bool = False,
    scope: Sequence[str] | None = None,
    calendars: Mapping[str, Sequence[date]] | None = None,
    stored_calendars: Mapping[str, Sequence[date]] | None = None,
) -> ApplyPlan:
    """What makes the stored ``jobs`` match ``wanted``, and the stored calendars hold the
    dates of the file's ``calendars`` (a calendar not in the file is left alone). Jobs not
    in the file are deleted with ``prune`` (all of them) or when named in ``scope``
    (``edit -e``: the jobs that were in the edited text). A cancelled or done job keeps
    its state; only ``paused`` moves between paused and active."""
    by_name = {j.name: j for j in jobs}
    added, changed = [], []
    for name, d in wanted.items():
        job = by_name.get(name)
        if job is None:
            added.append(d)
            continue
        current = Definition.of(job)
        if job.state in (JobState.CANCELLED, JobState.DONE):
            d = Definition(d.spec, current.paused)
        diff = changes(current, d)
        if diff:
            changed.append(Change(job, d, diff))
    gone = set(by_name) if prune else set(scope or ())
    removed = [by_name[n] for n in sorted(gone) if n in by_name and n not in wanted]
    cals: dict[str, tuple[str, list[date]]] = {}
    stored = stored_calendars or {}
    for name, days in (calendars or {}).items():
        new = sorted(set(days))
        if name not in stored:
            cals[name] = ("+", new)
        elif sorted(set(stored[name])) != new:
            cals[name] = ("~", new)
    return ApplyPlan(added, changed, removed, cals)
