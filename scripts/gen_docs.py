#!/usr/bin/env python3
"""Generate the shell completions and the man page from jobctl's click command tree.

    python scripts/gen_docs.py [--out DIR]

writes ``completions/jobctl.bash``, ``completions/_jobctl``, ``completions/jobctl.fish``
and ``man/jobctl.1`` under DIR (default: the repository root). The output depends only
on the command tree and the package version, never on the date or the machine, so
``tests/test_docs.py`` can regenerate it and fail when the committed files drift.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import click

from jobctl import __version__
from jobctl.cli import cli, completion_script

ROOT = Path(__file__).resolve().parent.parent

COMPLETIONS = {"bash": "jobctl.bash", "zsh": "_jobctl", "fish": "jobctl.fish"}

#: the date in the man page's .TH line: that of the release the page describes, bumped
#: with jobctl.__version__ (a constant, so the page depends on neither the day nor the
#: machine it is generated on)
PAGE_DATE = "2026-12-06"
#: mandoc -Tlint's limit for an input text line
ROFF_LINE_BYTES = 80

# ---------------------------------------------------------------------- roff


def esc(text: str) -> str:
    """Text -> roff text: backslashes, hyphens as \\-, non-ASCII as \\[uXXXX].

    Leading dots and apostrophes are guarded per line by :func:`lines`.
    """
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\e")
        elif ch == "-":
            out.append("\\-")
        elif ord(ch) > 127:
            out.append(f"\\[u{ord(ch):04X}]")
        else:
            out.append(ch)
    return "".join(out)


def inline(text: str) -> str:
    """Escape ``text`` and show `backticked` spans in bold."""
    parts = text.split("`")
    return "".join(f"\\fB{esc(p)}\\fR" if i % 2 and p else esc(p) for i, p in enumerate(parts))


def guard(line: str) -> str:
    """A text line that roff must not read as a request (leading ``.`` or ``'``)."""
    return "\\&" + line if line.startswith((".", "'")) else line


def paragraphs(text: str) -> Iterator[str]:
    """A help text's paragraphs, each joined into one line (click's ``\\b`` dropped)."""
    for para in re.split(r"\n\s*\n", text.strip()):
        para = para.replace("\b", "").strip()
        if para:
            yield " ".join(para.split())


def prose(text: str) -> list[str]:
    out: list[str] = []
    for para in paragraphs(text):
        out += [".PP", guard(inline(para))]
    return out


# ---------------------------------------------------------------------- the command tree


def walk(
    group: click.Group, ctx: click.Context
) -> Iterator[tuple[str, click.Command, click.Context]]:
    """(full name, command, context) for every command under ``group``, in help order."""
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx, **cmd.context_settings)
        yield (sub.command_path, cmd, sub)
        if isinstance(cmd, click.Group):
            yield from walk(cmd, sub)


def option_records(cmd: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    """(option string, help) for each option but --help."""
    out = []
    help_option = cmd.get_help_option(ctx)
    for param in cmd.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden or param is help_option:
            continue
        record = param.get_help_record(ctx)
        if record is not None:
            out.append(record)
    return out


def usage(cmd: click.Command, ctx: click.Context) -> str:
    pieces = cmd.collect_usage_pieces(ctx)
    return " ".join([ctx.command_path, *pieces])


def command_section(name: str, cmd: click.Command, ctx: click.Context) -> list[str]:
    out = [f'.SS "{esc(name)}"', ".nf", guard(f"\\fB{esc(usage(cmd, ctx))}\\fR"), ".fi"]
    out += prose(cmd.help or "")
    for opts, help_text in option_records(cmd, ctx):
        out += [".TP", guard(f"\\fB{esc(opts)}\\fR"), guard(inline(" ".join(help_text.split())))]
    return out


# ---------------------------------------------------------------------- fixed sections

DESCRIPTION = """
jobctl is a cron replacement for one user on one machine. One SQLite file holds the
truth: the jobs (templates), the runs (one per job and firing window) and every attempt
of every run, with its exit code and the last 64 KiB of its output.

`jobctl daemon` is the clock and the dispatcher: it turns due windows into runs, claims
them under a lease, runs each command in its own process group, retries failures with
backoff and records the result. Every other command edits or reads the database
directly, so the command line works whether or not a daemon is running. Any number of
daemons may share one database; one of them holds the scheduler lease.

A job has exactly one trigger: `--cron EXPR` (5 fields, names, macros, `@reboot`),
`--every DURATION` (fixed rate, or with `--after-completion` fixed delay), `--at TIME`
or `--in DURATION` (one shot), or `--manual` (runs only from `jobctl run`). A DURATION
is `90`, `90s`, `5m`, `1h30m`, `2d` or `1w`: whole numbers with units, a bare number is
seconds, at least 1s (`--jitter` may be 0) and at most 100 years.

A cron EXPR has the fields minute, hour, day-of-month, month and day-of-week, with `*`,
lists, ranges, steps over a range and names. Two extensions: `L` alone in day-of-month
is the month's last day, and `D#N` in day-of-week is the Nth weekday D of the month (N
1 to 5; `5#2` is the second Friday; it may stand in a list). When neither day field
starts with `*` a day matches either field (`L` and `D#N` count as restricted), else
both. Seconds and year fields, `?`, `W`, `N/step` without a range and wrapping ranges
are invalid. An expression that can never fire is accepted with a warning.

Spreading the load: in any field `H` stands for one value of the field's range chosen
from the job's name, so a thousand jobs at `H * * * *` do not all start on the hour.
`H(A-B)` is one value in A to B, `H/N` every N from an offset chosen from the name,
`H(A-B)/N` the same within A to B. The ranges are minute 0-59, hour 0-23, day-of-month
1-28 (every month has the day), month 1-12 and day-of-week 0-6. The value for field k (0
minute to 4 day-of-week) is taken from `h = int(sha256("NAME:k").hexdigest()[:16], 16)`:
`H` is `lo + h % (hi - lo + 1)` and `H/N` starts at `lo + h % N`. It is the same on every
host, version and in `jobctl next`; renaming a job moves it. The job keeps the text with
`H` (`export` writes it); `show` and the JSON's `trigger.resolved` give the expression
with numbers. An `H` day field counts as restricted for the day rule. `--every D --start
H` gives a fixed-rate job the phase `h % D` seconds after 1970-01-01T00:00Z (k = 0).

A command that only reads (`list`, `show`, `next NAME`, `runs`, `logs`, `inspect`,
`status`) never
creates a database: on a missing one it answers as for an empty one after a `warning:`
line. When standard output is not a terminal, tables are one line a row, never wrapped.

Every reading command takes `--json`: times are ISO 8601 strings in UTC with Z,
durations are numbers of seconds, absent values are null. Errors are one line on
standard error starting with `Error:`.
"""

DAEMON = """
`jobctl daemon` runs in the foreground and logs to standard error. On SIGTERM or SIGINT
it stops claiming, gives running attempts `--shutdown-grace` to finish, then kills their
process groups and puts their runs back to pending (the interrupted attempt does not use
up a retry), and exits 0.

A daemon that is killed outright (SIGKILL, the OOM killer) runs no shutdown, so at start
it starts a keeper: a small process (`python -I -S .../jobctl/keeper.py`, in its own
process group) that holds one end of a pipe and shares a table with the daemon (a memory
file), in which the daemon names the process group of each attempt it starts and takes
out each one that ends. When the daemon dies, however it dies, the pipe ends and the
keeper kills every attempt's process group still named, then
exits; so nothing of the dead daemon's attempts runs on while another daemon runs those
runs again. The keeper ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT (a stop is the
daemon's to act on), never kills a group whose id was reused, and holds none of the
daemon's files or sockets. A daemon whose keeper is killed starts another. A grandchild
that left its attempt's process group (`setsid`, as `ssh-agent` does) is not the
keeper's: the daemon, a child subreaper, inherits it, leaves it be while the attempt
it came from runs (its environment names the run), and kills it once that attempt has
ended.

Attempts are started by the spawner (`python -I -S .../jobctl/spawner.py`, in its own
process group), a small process the daemon starts once, so that the memory the kernel
counts for an attempt (`max_rss`) is the command's own and not the daemon's. It clones
each attempt as a child of the daemon, which watches and reaps it. On x86-64, once
started, the spawner hands itself over to a loop of machine code and unmaps the
interpreter: each clone holds none of its memory (`true` records about 1 MiB), and a
spawn costs the spawner a few hundredths of a millisecond. Elsewhere, or where memory may not be made executable, the
clone is a copy of the spawner (`true`: about 6 MiB). Where the spawner cannot run, the
daemon logs why and starts attempts itself; their `max_rss` is then null unless the
command used more than the daemon's own peak.

Its log is one line an event. At `--log-level info` (the default) that is the start and
the stop, each change of the scheduler lease, each attempt that failed and each run that
ended other than succeeded, and each fault; `debug` adds every attempt's start and
success, `warning` keeps the faults alone. Under systemd (`JOURNAL_STREAM` is set) a line
has no timestamp and starts with its syslog priority (`<3>` a dead run, `<4>` a fault or a
failed attempt, `<6>` info, `<7>` debug), so `journalctl --user -u jobctl -p warning`
shows what needs a look; elsewhere a line starts with the local time, and a warning or an
error says so.
"""

EXIT_STATUS = [
    ("0", "Success."),
    (
        "1",
        "An operation failed: a job or run not found, a conflict, a database error, a "
        "run waited on with `run --wait` that did not succeed, or a systemd call of "
        "`service` that failed.",
    ),
    (
        "2",
        "Bad usage or invalid input: an unknown option, a bad cron expression, duration, "
        "zone or job name, or any error in a crontab given to `import-crontab` (nothing "
        "is imported).",
    ),
]

ENVIRONMENT = [
    ("JOBCTL_DB", "The database file when `--db` is not given."),
    ("TZ", "The machine's local zone, the default of `--tz`."),
    ("XDG_DATA_HOME", "Where the default database lives."),
    ("XDG_CONFIG_HOME", "Where `service install` writes the unit file."),
    ("JOBCTL_DEBUG", "When set, an internal error shows its traceback."),
    (
        "JOBCTL_PING_URL",
        "The address of `jobctl serve` (`http://host:8642`) that `jobctl exec` pings when "
        "`--url` is not given.",
    ),
    (
        "JOURNAL_STREAM",
        "Set by systemd when standard error goes to the journal; the daemon "
        "then leaves the timestamps off its log lines and starts each with its syslog "
        "priority.",
    ),
]

COMMAND_ENVIRONMENT = [
    ("JOBCTL_JOB", "The job's name."),
    ("JOBCTL_RUN_ID", "The run's id, stable across retries: the idempotency key."),
    ("JOBCTL_ATTEMPT", "The attempt number, from 1."),
    ("JOBCTL_SCHEDULED_FOR", "The window the run stands for, ISO 8601 UTC."),
    ("JOBCTL_CATCHUP_FROM", "For a catch-up run: the earliest missed window it stands for."),
    ("JOBCTL_RUN_KEY", "For a keyed run (`run --key`): its key."),
    (
        "JOBCTL_TRIGGER",
        "For a window of the schedule: the text of the trigger that made it (a cron "
        "expression, or every DURATION for a fixed rate; the first given when several "
        "triggers of a set fall on one instant: the order of the flags on the command line, "
        "of trigger.expr in the API, or of the `cron` and `every` keys in a job file, which "
        "`export` writes in the set's order).",
    ),
    ("JOBCTL_STATE", "For the `--on-failure` command: the run's final state (dead)."),
    (
        "JOBCTL_ERROR",
        "For the `--on-failure` command: the last attempt's error "
        "(exit 3, signal 9, timeout, lost).",
    ),
]

FILES = [
    (
        "$XDG_DATA_HOME/jobctl/jobctl.db",
        "The default database (~/.local/share/jobctl/jobctl.db on Linux), mode 0600 in a "
        "0700 folder, in WAL mode.",
    ),
    (
        "$XDG_CONFIG_HOME/systemd/user/jobctl.service",
        "The systemd user unit written by `service install` (~/.config/systemd/user/ by default).",
    ),
]

CATCHUP_AND_DST = """
The scheduler records a window up to 0.25 seconds before its time, decided as at its
time: its run is pending (waiting: not_due) until the instant and is claimed then, and
the job's next_run_at has already moved on. A window whose job has a run going, or whose
job has `--overlap replace`, is decided at its time instead. `pause`, `edit` and
`cancel` of a job take back a window recorded early whose time has not come (after an
edit it comes again, with the job as edited).

A window is missed when its time passed while no scheduler held the lease: the daemon was
down or the machine was asleep (a loop that wakes more than 60 seconds after it planned
to counts the gap as missed). A window that is only late because the machine was busy is
not missed; it runs.

When a daemon takes the scheduler lease, the missed windows of each job since its last
recorded window are handled by the job's `--catchup` policy. With `skip`, every missed
window is recorded skipped (skip_reason missed) and the next run is the next future
window. With `once` (the default), one pending run is made for the most recent missed
window, with catchup_from the earliest one, and the others are recorded skipped. With
`all`, the `--catchup-limit` (default 6) most recent missed windows become pending runs,
oldest first, and older ones are recorded skipped. At most the 100 most recent missed
windows of a job are written as skipped rows; the job's missed_total counts all of them.
Windows of a paused job are neither run nor recorded; `resume` starts from the next
future window.

A cron expression is read in the job's zone (`--tz`, default the machine's local zone),
and daylight-saving time follows cron(8). A job at a fixed time that falls in a skipped
hour fires once, right after the change. A fixed time in a repeated hour fires once, not
twice. A job with * (or a step over *) in the minute or hour field fires by real elapsed
time through both changes. `jobctl next` shows the fire times exactly as the daemon
computes them, DST included.

When both day-of-month and day-of-week are restricted, either one matching is enough;
a day field whose text starts with * (as */2) counts as unrestricted, so the two are
then both required, as in vixie cron and cronie.
"""


SECRETS_AND_TOKENS = """
A secret is a value kept in the database (`jobctl secret set NAME`, the value on standard
input or `--from-file PATH`) and never printed: no command, page, API answer, export,
revision, notification or log line holds it. A job's `--secret ENV=NAME` sets ENV to the
value when each attempt starts, so a new `secret set` reaches the next attempt without an
edit; every occurrence of the value (4 bytes or more) in the attempt's output is replaced
by `***` before the output is stored. `--env-file PATH` reads KEY=VALUE lines (systemd's
EnvironmentFile= syntax) at each attempt; the file is never stored, and one that cannot be
read fails the attempt with error `env-file: REASON`. The environment is the daemon's, then
the file's, then `--env`, then the run's payload, then the secrets. The value lives in the
database file (mode 0600) or in the PostgreSQL schema `jobctl`: whoever can read those can
read it.

`jobctl token add NAME --role read|operate|admin` prints a token for `jobctl serve` once;
only its SHA-256 is kept. read: every GET and `/metrics`; operate: also run, cancel,
retry, pause, resume (a job, or all of them), backfill and test a channel; admin:
everything. A request beyond the
role answers 403 and changes nothing; a change made with a token is recorded in its
revision as `token:NAME`.
"""

SCHEDULE_SETS = """
`--cron` and `--every` may each be given more than once, and together: the job's windows
are the union of its triggers' windows, and two triggers that fall on the same instant make
one window (one run). `--at`, `--in`, `--manual`, `--after` and `@reboot` stand alone. An
`edit` with any trigger flag replaces the whole set. In job JSON, `triggers` lists the
trigger objects (one for a single trigger) and `trigger` of a set is kind set with expr the
triggers' texts joined with " | ". In a job file, `cron` and `every` take a string or an
array of strings. The scheduler keeps one entry a job: the next window of a set is the
least of its triggers' next windows.

`--except EXPR` (repeatable) is a cron expression read in the job's zone: a window whose
minute matches it does not run. `--except-calendar NAME` (repeatable) names a calendar: a
window on any of its dates, in the job's zone, does not run. Such a window is recorded
skipped with skip_reason excluded when its time comes; it is neither missed nor caught up,
`next` marks it excluded (`next --json` leaves it out), `coverage` shows it skipped and
`backfill` never runs it. `--no-except` clears both.

`jobctl calendar add NAME DATE...` creates a calendar of ISO dates or adds to it; `calendar
rm NAME [DATE...]` removes dates, or the calendar when none are given (refused while a job
uses it, naming the jobs); `calendar list [NAME] [--json]` shows each calendar's dates and
the jobs that use it. A change applies from the next window on. `export` writes the
calendars its jobs use as `[calendars.NAME] dates = [...]`, and `apply` creates or updates
them with the jobs.

`--active-from TIME` and `--active-until TIME` (ISO 8601, naive in the job's zone; an
empty value clears one) bound the job's windows: a time before or after the range is no
window at all (not recorded, not caught up), and after the last one the job is done.
"""


WATCHING = """
The daemon stores a running attempt's output tail at most once a second while it
changes, and at its end, so `jobctl logs RUN_ID` shows a running attempt's output from any
host, and a daemon killed mid-attempt loses at most its last second. `jobctl logs RUN_ID
--follow` prints what is stored, then new output within 2 seconds of the command writing
it, across retries (a line `--- attempt K ---` on standard error before each new attempt),
and exits 0 when the run has ended; it reads the database only.

`jobctl run NAME --wait` prints `run ID enqueued` on standard error at once, a live status
line (state, attempt, elapsed time) when standard error is a terminal, and one closing
line such as `run 42 succeeded in 3.2s` or `run 42 dead after 3 attempts: exit 7`.
`--follow` also streams the output to standard output. Ctrl-C stops only the waiting: the
run goes on (`jobctl cancel 42` stops it) and jobctl exits 130.

`jobctl inspect RUN_ID` shows a run, each of its attempts (start, end, duration, exit
code, error, output bytes, host, pid), how its `--on-failure` command ended, and why a
pending or failed run waits, judged by the same rules as the daemon's claim: paused (its
job is paused), no_daemon (no live daemon), not_due or backoff (until a time), lock (a
lock it needs is held by another run), overlap (a leased run of the same job, with
`--overlap forbid` or `replace`), max_running (as many runs of the job as its
`--max-running` are running), tags (no live daemon carries every tag of the job's
`--on`), maintenance (a `pause --all` window is in force; until when), ping (a watched
job's run: its work runs elsewhere and it waits for its start ping), or workers (due and
free, every worker that could take it busy).

`add`, `edit`, `run` and `resume` warn on standard error when no daemon is running, and
still succeed.
"""


WATCHED = """
A watched job (`add NAME --watch --cron EXPR` or `--every D`) has a schedule but no
command: something else runs the work (a crontab on another host, a CI pipeline) and
pings jobctl in the protocol of Healthchecks.io, so an existing `curl` line needs only a
new address. `show` prints its `/ping/KEY`; the key is the secret, and no token is needed.

`jobctl serve` answers GET, POST and HEAD on `/ping/KEY` (success), `/ping/KEY/start`,
`/ping/KEY/fail`, `/ping/KEY/log` and `/ping/KEY/N` (exit code N, 0 to 255), each with an
optional `?rid=ID` that ties a start to its end when runs overlap: 200 `OK`, or 404 `not
found` for an unknown key. A POST body (at most 100 KB kept) is the attempt's output;
`log` adds to it. `jobctl ping NAME` does the same straight into the database.

The scheduler-lease holder records each window as a run (reason watch) that no daemon
claims. A start ping leases the run of the latest window at or before now; an end ping
ends the started run (by rid, else the latest started, else the latest pending)
succeeded, or dead with its exit code. A run not started by its window + `--grace`
(default 5m) is late; one still without its end ping at window + grace + `--timeout`
(else the period to the next window) ends dead with error `no ping`, and a success ping
for it later makes it succeeded and sends recovered. A watched run is not retried:
`retry-dead` refuses one (exit 1), and `retry-dead --all` leaves them alone.

`export` writes a watched job with `watch = true` and its `ping_key`, so `export | apply
-` keeps the URLs that ping it, onto the same database or a new one. A file may leave
`ping_key` out (the key is a secret): `apply` then keeps the key of the job it changes, or
makes one for a job it adds (the API always makes a new key).

`jobctl exec NAME -- COMMAND` wraps a crontab line: it pings start, runs COMMAND in the
foreground with its output passed through, pings success or its exit code with the last
64 KiB of output, and exits with the command's exit code. A ping that cannot be made
prints a warning and never changes the exit code. With `--url` (or JOBCTL_PING_URL) it
pings `serve` over HTTP and NAME is the job's ping key (or its name, where the database
is reachable). `import-crontab --watch FILE` adds
a watched job for each line and prints the crontab with each command wrapped in `jobctl
exec NAME --`, to install in place of the old one.
"""


def tagged(items: list[tuple[str, str]], bold: bool = True) -> list[str]:
    out = []
    for tag, text in items:
        shown = f"\\fB{esc(tag)}\\fR" if bold else esc(tag)
        out += [".TP", guard(shown), guard(inline(text))]
    return out


def man_page() -> str:
    root = click.Context(cli, info_name="jobctl", **cli.context_settings)
    out = [
        '.\\" Generated by scripts/gen_docs.py from the click command tree. Do not edit.',
        f'.TH JOBCTL 1 {PAGE_DATE} "jobctl {esc(__version__)}" "User Commands"',
        ".SH NAME",
        "jobctl \\- a cron replacement that never loses a run and shows every run it made",
        ".SH SYNOPSIS",
        ".nf",
        "\\fBjobctl\\fR [\\fB\\-\\-db\\fR \\fIPATH\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        "\\fBjobctl \\-\\-version\\fR",
        "\\fBjobctl \\-\\-help\\fR",
        ".fi",
        ".SH DESCRIPTION",
        *prose(DESCRIPTION),
        ".SH OPTIONS",
    ]
    out += [
        line
        for opts, help_text in option_records(cli, root)
        for line in (
            ".TP",
            guard(f"\\fB{esc(opts)}\\fR"),
            guard(inline(" ".join(help_text.split()))),
        )
    ]
    out += [
        ".TP",
        "\\fB\\-h\\fR, \\fB\\-\\-help\\fR",
        "Show the help of jobctl or of a command, and exit.",
    ]
    out.append(".SH COMMANDS")
    for name, cmd, ctx in walk(cli, root):
        out += command_section(name, cmd, ctx)
    out += [".SH EXIT STATUS", *tagged(EXIT_STATUS)]
    out += [
        ".SH ENVIRONMENT",
        *tagged(ENVIRONMENT),
        ".PP",
        "A job's command runs with the daemon's environment, then the job's "
        "\\fB\\-\\-env\\fR pairs, then these:",
        *tagged(COMMAND_ENVIRONMENT),
    ]
    out += [".SH FILES", *tagged(FILES, bold=False)]
    out += [".SH THE DAEMON", *prose(DAEMON)]
    out += [".SH CATCH\\-UP AND DST", *prose(CATCHUP_AND_DST)]
    out += [".SH SCHEDULE SETS", *prose(SCHEDULE_SETS)]
    out += [".SH WATCHING A RUN", *prose(WATCHING)]
    out += [".SH SECRETS AND TOKENS", *prose(SECRETS_AND_TOKENS)]
    out += [".SH WATCHED JOBS", *prose(WATCHED)]
    out += [
        ".SH SEE ALSO",
        "\\fBcrontab\\fR(5), \\fBcron\\fR(8), \\fBsystemd.timer\\fR(5), "
        "\\fBsystemd.service\\fR(5), \\fBloginctl\\fR(1)",
    ]
    return "\n".join(tidy(out)) + "\n"


def tidy(lines: list[str]) -> list[str]:
    """What mandoc -Tlint asks of the page: no paragraph macro right after a section
    heading (the heading starts a paragraph), and no filled text line longer than 80 bytes
    (wrapped at spaces; a tag line after .TP and the lines of .nf blocks stay whole)."""
    out: list[str] = []
    nofill = False
    for i, line in enumerate(lines):
        if line == ".PP" and out and out[-1].startswith((".SH ", ".SS ")):
            continue
        if line in (".nf", ".fi"):
            nofill = line == ".nf"
        is_tag = i > 0 and lines[i - 1] == ".TP"
        if line.startswith(".") or nofill or is_tag or len(line) <= ROFF_LINE_BYTES:
            out.append(line)
            continue
        # 2 bytes spare for the \& that guards a piece starting with a dot
        out += [guard(p) for p in wrap(line.removeprefix("\\&"), ROFF_LINE_BYTES - 2)]
    return out


def wrap(line: str, width: int = ROFF_LINE_BYTES) -> list[str]:
    """A roff text line broken at spaces into lines of at most ``width`` bytes (a word
    longer than that stays whole); an escaped space (``\\ ``) is never a break."""
    pieces: list[str] = []
    current = ""
    for word in re.split(r"(?<!\\) +", line):
        if current and len(current) + 1 + len(word) > width:
            pieces.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        pieces.append(current)
    return pieces


# ---------------------------------------------------------------------- main


def generate() -> dict[str, str]:
    """Relative path -> content of every generated file."""
    files = {f"completions/{name}": completion_script(shell) for shell, name in COMPLETIONS.items()}
    files["man/jobctl.1"] = man_page()
    return files


def write(out_dir: Path) -> list[Path]:
    written = []
    for rel, text in generate().items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="output root (default: the repo)")
    args = parser.parse_args()
    for path in write(args.out):
        print(path)


if __name__ == "__main__":
    main()
