"""``python -m bench.schedsets``: ``next -n 1000`` of a schedule set against one trigger
(issue 44's benchmark).

Two jobs in one SQLite file, added through the store as ``jobctl add`` adds them:
``one`` (``--cron '0 9 * * 1-5'``) and ``set`` (that expression, ``--cron '30 12 * * 6'``
and ``--every 7h``, with ``--except-calendar`` of a 50-date calendar). Measured, paired and
alternated rep by rep: the CPU time of the windows' computation in this process
(``triggers.upcoming``, what ``next NAME`` calls), and the CPU time of the whole command
``jobctl next NAME -n 1000 --json`` as a new process (its children's rusage). Prints one
JSON object: the medians, their ratios and every rep.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from .stats import median

COUNT = 1000
CALENDAR_DATES = 50


def build(db: Path, now: datetime) -> None:
    """The two jobs and the calendar, through the store."""
    from jobctl.models import JobSpec
    from jobctl.specs import TriggerOptions, build_trigger
    from jobctl.store import open_store
    from jobctl.triggers import next_fire

    store = open_store(db)
    try:
        days = [date(2027, 1, 1) + timedelta(days=9 * k) for k in range(CALENDAR_DATES)]
        store.commands.calendar_add("holidays", days)
        one = build_trigger(TriggerOptions(cron="0 9 * * 1-5", tz="Europe/Berlin"), now)
        three = build_trigger(
            TriggerOptions(cron=["0 9 * * 1-5", "30 12 * * 6"], every=["7h"], tz="Europe/Berlin"),
            now,
        )
        for name, trigger, cals in (("one", one, ()), ("set", three, ("holidays",))):
            spec = JobSpec(name=name, trigger=trigger, command="true", except_calendars=cals)
            store.commands.add_job(spec, next_fire(trigger, now), now)
    finally:
        store.close()


def in_process(db: Path, name: str, now: datetime) -> float:
    """CPU seconds of the next COUNT windows of a stored job (read once, outside)."""
    from jobctl.store import open_store
    from jobctl.triggers import upcoming

    store = open_store(db)
    try:
        job = store.commands.get_job(name)
    finally:
        store.close()
    t = time.process_time()
    got = upcoming(job, now, COUNT)
    spent = time.process_time() - t
    assert len(got) == COUNT, (name, len(got))
    return spent


def command(db: Path, name: str) -> float:
    """CPU seconds (user + system) of ``jobctl next NAME -n COUNT --json``, a new process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, "-m", "jobctl", "--db", str(db), "next", name, "-n", str(COUNT), "--json"],
        check=True,
        capture_output=True,
    ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert len(json.loads(out)) == COUNT
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.schedsets", description=__doc__)
    p.add_argument("--reps", type=int, default=15, help="paired repetitions (default 15)")
    args = p.parse_args(argv)
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "sets.db"
        build(db, now)
        reps: list[dict[str, Any]] = []
        for k in range(args.reps):
            order = ("one", "set") if k % 2 == 0 else ("set", "one")
            rep: dict[str, Any] = {}
            for name in order:
                rep[f"{name}_windows_ms"] = in_process(db, name, now) * 1000
            for name in order:
                rep[f"{name}_command_ms"] = command(db, name) * 1000
            reps.append(rep)
    result: dict[str, Any] = {
        key: median([r[key] for r in reps])
        for key in ("one_windows_ms", "set_windows_ms", "one_command_ms", "set_command_ms")
    }
    result["windows_ratio"] = median([r["set_windows_ms"] / r["one_windows_ms"] for r in reps])
    result["command_ratio"] = median([r["set_command_ms"] / r["one_command_ms"] for r in reps])
    result["reps"] = reps
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
