"""One-off diagnostics, not part of ``python -m bench``'s table: each answers one question
about where a figure's time goes and is run by hand.

- ``python -m bench.diagnostics.schedtrace``: one burst under ``perf sched record``, the
  daemon's time line and each spawn's placement (needs ``perf``);
- ``python -m bench.diagnostics.spawn``: what one child costs, ``subprocess.Popen``
  against the worker's ``posix_spawn``.
"""
