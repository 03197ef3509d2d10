"""``GET /metrics``: the Prometheus text format (version 0.0.4), from three reads.

The counters are read from the tallies the schema keeps apart from the rows (README, History: what
is kept), so neither retention nor ``prune`` ever lowers them; the ``jobctl_runs`` gauge is the
rows there are now. No read scans the runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ..models import RunState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: the histogram's upper bounds in seconds (+Inf is added)
DURATION_BUCKETS_SECONDS = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600)
FINISHED_STATES = (RunState.SUCCEEDED, RunState.DEAD, RunState.CANCELLED)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _le(bound: float) -> str:
    return repr(float(bound))


def render(store: Any, now: datetime) -> str:
    """Every metric of ``/metrics`` as one text page (README, The dashboard and the HTTP
    API)."""
    counters = store.run_counters()
    histogram = store.attempt_duration_histogram(DURATION_BUCKETS_SECONDS)
    status = store.status(now)
    daemons = len(status.daemons)
    by_state = {s.value: 0 for s in RunState}
    by_state.update(status.counts)
    finished: dict[tuple[str, str], int] = {}
    missed: dict[str, int] = {}
    counted = {s.value for s in FINISHED_STATES}
    for job, missed_total, state, ended in counters:
        missed[job] = missed_total
        if state in counted and ended:
            finished[(job, state)] = ended
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(samples)

    family(
        "jobctl_runs",
        "gauge",
        "Runs in the database by state.",
        (f'jobctl_runs{{state="{s}"}} {n}' for s, n in by_state.items()),
    )
    family(
        "jobctl_runs_finished_total",
        "counter",
        "Runs that ended succeeded, dead or cancelled, by job.",
        (
            f'jobctl_runs_finished_total{{job_name="{_label(job)}",state="{state}"}} {n}'
            for (job, state), n in sorted(finished.items())
        ),
    )
    samples = []
    for job, cumulative, count, total in histogram:
        j = _label(job)
        for bound, c in zip(DURATION_BUCKETS_SECONDS, cumulative, strict=True):
            samples.append(
                f'jobctl_run_duration_seconds_bucket{{job_name="{j}",le="{_le(bound)}"}} {c}'
            )
        samples.append(f'jobctl_run_duration_seconds_bucket{{job_name="{j}",le="+Inf"}} {count}')
        samples.append(f'jobctl_run_duration_seconds_sum{{job_name="{j}"}} {_num(total)}')
        samples.append(f'jobctl_run_duration_seconds_count{{job_name="{j}"}} {count}')
    family(
        "jobctl_run_duration_seconds",
        "histogram",
        "Duration of every finished attempt, by job.",
        samples,
    )
    costs = store.run_costs_by_job()
    family(
        "jobctl_run_cpu_seconds_total",
        "counter",
        "CPU seconds (user + system) of every finished attempt, by job.",
        (
            f'jobctl_run_cpu_seconds_total{{job_name="{_label(job)}"}} {_num(cpu)}'
            for job, cpu, _ in costs
            if cpu is not None
        ),
    )
    family(
        "jobctl_run_max_rss_bytes",
        "gauge",
        "Largest resident set of the last finished run's last attempt, by job.",
        (
            f'jobctl_run_max_rss_bytes{{job_name="{_label(job)}"}} {rss}'
            for job, _, rss in costs
            if rss is not None
        ),
    )
    family("jobctl_daemons", "gauge", "Live daemons.", [f"jobctl_daemons {daemons}"])
    family(
        "jobctl_missed_windows_total",
        "counter",
        "Windows missed while no scheduler ran that did not run, by job.",
        (
            f'jobctl_missed_windows_total{{job_name="{_label(job)}"}} {n}'
            for job, n in sorted(missed.items())
        ),
    )
    family(
        "jobctl_notifications_total",
        "counter",
        "Notifications delivered (sent) or given up (failed), by channel and event.",
        (
            f'jobctl_notifications_total{{channel="{_label(channel)}",event="{event}",'
            f'state="{state}"}} {n}'
            for channel, event, state, n in store.notification_counts()
        ),
    )
    return "\n".join(lines) + "\n"
