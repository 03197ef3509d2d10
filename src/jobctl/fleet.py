"""The daemons and the maintenance windows as the store reports them: each live daemon
(``status``) and the window in force (``pause --all``).

Apart from :mod:`jobctl.models`: a listing of jobs uses neither, and a command's start pays
for each frozen dataclass it imports (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class DaemonInfo:
    """A live daemon (``status``): its id, pid and host, whether it holds the scheduler
    lease, when it started and last renewed, its wake-up address, boot and tags."""

    id: str
    pid: int
    host: str
    leader: bool
    started_at: datetime
    heartbeat_at: datetime
    wake_address: str | None = None
    boot_id: str | None = None
    #: ``daemon --tag``, with the implicit ``host:HOSTNAME``
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Maintenance:
    """A maintenance window (``pause --all``): from ``since`` until ``until`` (None: until
    ``resume --all``), no attempt starts and every window in it is recorded skipped."""

    since: datetime
    until: datetime | None
    reason: str | None
    who: str | None

    def holds(self, now: datetime) -> bool:
        """Whether it is in force at ``now``."""
        return self.since <= now and (self.until is None or now < self.until)
