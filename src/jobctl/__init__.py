"""jobctl: a cron replacement with one SQLite file as the source of truth."""

__version__ = "0.1.0"
