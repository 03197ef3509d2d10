"""``jobctl check``: the state of a jobctl installation for a monitoring system, in the
Nagios plugin convention (jobctl(1), jobctl check). Pure: the facts come from the store.

One line ``JOBCTL STATE - summary | perfdata`` and exit 0 ``OK``, 1 ``WARNING``,
2 ``CRITICAL``, 3 ``UNKNOWN``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

DEFAULT_LATE_SECONDS = 300.0
DEFAULT_SINCE_SECONDS = 86400.0


class CheckState(Enum):
    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


@dataclass(frozen=True)
class CheckFacts:
    """What the store read: live daemons, the scheduler-lease holder's host (None when no
    live daemon holds it), runs due and unclaimed for more than ``--late``, runs that ended
    ``dead`` and notifications that ``failed`` within ``--since``."""

    daemons: int
    leader: str | None
    late: int
    dead: int
    failed_notifications: int
    #: when a maintenance window in force (``pause --all``) ends: it holds every run, so
    #: none is late; None when there is none, ``"resume --all"`` when it has no end
    maintenance_until: str | None = None


@dataclass(frozen=True)
class CheckResult:
    state: CheckState
    summary: str
    facts: CheckFacts | None

    @property
    def code(self) -> int:
        return self.state.value

    def line(self) -> str:
        head = f"JOBCTL {self.state.name} - {self.summary}"
        f = self.facts
        if f is None:
            return head
        perf = (
            f"daemons={f.daemons};;1:;0 late={f.late};;0;0 dead={f.dead};0;;0 "
            f"failed_notifications={f.failed_notifications};0;;0"
        )
        return f"{head} | {perf}"

    def to_json(self) -> dict[str, Any]:
        f = self.facts
        return {
            "state": self.state.name,
            "code": self.code,
            "summary": self.summary,
            "daemons": f.daemons if f else None,
            "leader": f.leader if f else None,
            "late": f.late if f else None,
            "dead": f.dead if f else None,
            "failed_notifications": f.failed_notifications if f else None,
        }


def judge(facts: CheckFacts, *, late_text: str, since_text: str) -> CheckResult:
    """The worst state the facts show, with what made it so first in the summary."""
    critical: list[str] = []
    if facts.daemons == 0:
        critical.append("no live daemon")
    elif facts.leader is None:
        critical.append("no daemon holds the scheduler lease")
    if facts.late:
        critical.append(f"{facts.late} due run(s) unclaimed for more than {late_text}")
    warning: list[str] = []
    if facts.dead:
        warning.append(f"{facts.dead} dead run(s) in the last {since_text}")
    if facts.failed_notifications:
        warning.append(
            f"{facts.failed_notifications} failed notification(s) in the last {since_text}"
        )
    # a maintenance window is said, never judged: it is what someone asked for
    note = (
        [] if facts.maintenance_until is None else [f"maintenance until {facts.maintenance_until}"]
    )
    if critical:
        return CheckResult(CheckState.CRITICAL, "; ".join(critical + warning + note), facts)
    if warning:
        return CheckResult(CheckState.WARNING, "; ".join(warning + note), facts)
    leader = f", leader on {facts.leader}" if facts.leader else ""
    summary = "; ".join([f"{facts.daemons} daemon(s){leader}", *note])
    return CheckResult(CheckState.OK, summary, facts)


def unknown(reason: str) -> CheckResult:
    return CheckResult(CheckState.UNKNOWN, " ".join(reason.split()), None)
