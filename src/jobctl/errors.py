"""Exception types. Each carries the exit code the CLI maps it to (jobctl(1), EXIT STATUS)."""

from __future__ import annotations


class JobctlError(Exception):
    """Base of every error a user may see. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class UsageError(JobctlError):
    """Bad usage or invalid input: a bad cron expression, duration, zone or name (exit 2)."""

    exit_code = 2


class NotFound(JobctlError):
    """A job or run that does not exist (exit 1)."""


class Conflict(JobctlError):
    """The operation conflicts with the current state, e.g. a name in use (exit 1)."""


class RevisionChanged(Conflict):
    """A job is no longer at the revision a change was made from (exit 1; HTTP 412 for a
    PATCH with If-Match): someone else changed it meanwhile, and applying would undo that."""


class NameTaken(Conflict):
    """A job of that name exists already (exit 1); each caller says how to replace it."""


class StoreError(JobctlError):
    """The database cannot be opened, is corrupt, is too new, or a write failed (exit 1)."""


class SecurityError(JobctlError):
    """The database file or folder is unsafe to run commands from (exit 1)."""
