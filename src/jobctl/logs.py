"""The daemon's log: one event a line on stderr, each with a level.

``daemon --log-level`` picks the least level written: ``debug`` (every attempt's start
and success too), ``info`` (the default: what a run ends in other than success, lease
changes, start and stop, and every fault), ``warning`` (faults only). Under systemd
(``JOURNAL_STREAM`` is set) a line has no timestamp (the journal adds its own) and starts
with its syslog priority (``<7>`` debug, ``<6>`` info, ``<4>`` warning, ``<3>`` error), so
``journalctl -p warning`` keeps what matters; elsewhere it starts with the local time,
and a line above info says its level (``warning:``, ``error:``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Mapping
from enum import IntEnum
from typing import Protocol, TextIO


class Level(IntEnum):
    DEBUG = 10
    INFO = 20
    WARNING = 30
    ERROR = 40

    @classmethod
    def named(cls, name: str) -> Level:
        """``debug``, ``info``, ``warning`` or ``error`` -> the level (ValueError else)."""
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"no log level {name!r}") from None


DEBUG, INFO, WARNING, ERROR = Level.DEBUG, Level.INFO, Level.WARNING, Level.ERROR
LEVEL_NAMES = ("debug", "info", "warning")
#: syslog priorities, as sd-daemon(3) reads them at the start of a line
SYSLOG_PRIORITY = {DEBUG: "<7>", INFO: "<6>", WARNING: "<4>", ERROR: "<3>"}
#: what a line says of its level outside the journal (info says nothing)
LEVEL_WORD = {DEBUG: "debug: ", INFO: "", WARNING: "warning: ", ERROR: "error: "}


class LogFn(Protocol):
    """What the daemon and its roles log through: a message and its level."""

    def __call__(self, message: str, level: Level = INFO, /) -> None: ...


class Log:
    """One event a line on stderr, at ``level`` or above (see the module docstring).

    Lines are buffered and written with one flush per loop turn (:meth:`flush`, called
    before the loop sleeps and on exit), not one write and flush per event."""

    def __init__(
        self,
        stream: TextIO | None = None,
        environ: Mapping[str, str] | None = None,
        level: Level = INFO,
    ):
        self.stream = stream or sys.stderr
        env = os.environ if environ is None else environ
        self.journal = "JOURNAL_STREAM" in env
        self.level = level
        self._lines: list[str] = []
        self._stamp_second = -1
        self._stamp = ""

    def __call__(self, message: str, level: Level = INFO, /) -> None:
        if level < self.level:
            return
        if self.journal:
            self._lines.append(SYSLOG_PRIORITY[level] + message)
            return
        second = int(time.time())
        if second != self._stamp_second:
            self._stamp_second = second
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S ", time.localtime(second))
        self._lines.append(self._stamp + LEVEL_WORD[level] + message)

    def flush(self) -> None:
        if not self._lines:
            return
        text = "\n".join(self._lines) + "\n"
        self._lines = []
        with contextlib.suppress(OSError, ValueError):  # a closed stderr must not stop us
            self.stream.write(text)
            self.stream.flush()
