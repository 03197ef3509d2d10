"""``python -m bench.diagnostics.spawn``: what one child costs, Popen against the worker's
posix_spawn.

Runs ``sh -c true`` N times with W in flight, three ways, each driven by one selector
the way the daemon drives its children (output pipe and pidfd registered, output
drained, the group killed, the child reaped):

- ``raw``: ``os.posix_spawn`` + ``os.wait`` and nothing else (the machine's floor);
- ``popen``: ``subprocess.Popen`` as the worker used it (new session, stdin /dev/null,
  merged stdout+stderr pipe, cwd, ``close_fds``) plus a pidfd;
- ``posix_spawn``: ``jobctl.worker.Child.start`` spawning itself;
- ``spawner``: ``jobctl.worker.Child.start`` through the daemon's spawner (attempts cloned
  from a small process, so their ``max_rss`` is their own), whose CPU is counted with
  this process's.

Prints, per way, the median over the repetitions of the wall time, the wall time per
child, the time the loop was blocked inside the spawn call per child (with a
``vfork``-style spawn, until the child has exec'd), this process's CPU per child (and the
spawner's), and the children's own CPU per child.
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from jobctl.models import RunSettings
from jobctl.spawner import Spawner
from jobctl.worker import Child, mark_inherited_fds_cloexec

from ..stats import median

SH = "/bin/sh"
ARGS = [SH, "-c", "true"]


def _raw(children: int, width: int, env: dict[str, str]) -> tuple[float, float, float]:
    running = started = 0
    blocked = 0.0
    c0 = time.process_time()
    t0 = time.perf_counter()
    while started < children or running:
        while running < width and started < children:
            s = time.perf_counter()
            os.posix_spawn(SH, ARGS, env)
            blocked += time.perf_counter() - s
            running += 1
            started += 1
        os.wait()
        running -= 1
    return time.perf_counter() - t0, blocked, time.process_time() - c0


class _PopenChild:
    """The previous worker's spawn (subprocess.Popen), with the same event handling."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ARGS,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=env.get("HOME") or "/",
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        self.pid = self.proc.pid
        self.pidfd: int | None = os.pidfd_open(self.pid)
        assert self.proc.stdout is not None
        self.output_fd: int | None = self.proc.stdout.fileno()
        os.set_blocking(self.output_fd, False)
        self.returncode: int | None = None

    def on_output(self) -> bool:
        assert self.output_fd is not None
        while True:
            try:
                data = os.read(self.output_fd, 65536)
            except BlockingIOError:
                return True
            if not data:
                self._close()
                return False

    def on_exit(self) -> None:
        assert self.pidfd is not None
        os.killpg(self.pid, signal.SIGKILL)
        self.returncode = self.proc.wait()
        os.close(self.pidfd)
        self.pidfd = None
        if self.output_fd is not None:
            self.on_output()
            self._close()

    def _close(self) -> None:
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.output_fd = None

    @property
    def finished(self) -> bool:
        return self.returncode is not None and self.output_fd is None


def _driven(start: Callable[[], Any], children: int, width: int) -> tuple[float, float, float]:
    """Seconds for ``children`` spawns, ``width`` in flight; seconds blocked spawning; CPU
    seconds of this process."""
    sel = selectors.DefaultSelector()
    running = started = 0
    blocked = 0.0
    c0 = time.process_time()
    t0 = time.perf_counter()
    while started < children or running:
        while running < width and started < children:
            s = time.perf_counter()
            child = start()
            blocked += time.perf_counter() - s
            sel.register(child.output_fd, selectors.EVENT_READ, ("output", child))
            sel.register(child.pidfd, selectors.EVENT_READ, ("exit", child))
            running += 1
            started += 1
        for key, _ in sel.select():
            if sel.get_map().get(key.fd) is not key:  # closed earlier in this batch
                continue
            kind, child = key.data
            if kind == "output":
                if not child.on_output():
                    sel.unregister(key.fd)
            else:
                sel.unregister(key.fd)
                if child.output_fd is not None:
                    sel.unregister(child.output_fd)
                child.on_exit()
            if child.finished:
                running -= 1
    sel.close()
    return time.perf_counter() - t0, blocked, time.process_time() - c0


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _cpu_of(pid: int | None) -> float:
    """The CPU seconds of a live process of ours (0 when there is none)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.diagnostics.spawn", description=__doc__)
    p.add_argument("--children", type=int, default=1000)
    p.add_argument("--width", type=int, default=4, help="children in flight")
    p.add_argument("--repeat", type=int, default=3, help="runs of each way (median shown)")
    a = p.parse_args(argv)
    mark_inherited_fds_cloexec()
    env = dict(os.environ)
    settings = RunSettings("true", SH, None, {}, None, None, 10.0, None)
    spawner = Spawner()
    spawner.start()
    ways: dict[str, Callable[[], tuple[float, float, float]]] = {
        "raw": lambda: _raw(a.children, a.width, env),
        "popen": lambda: _driven(lambda: _PopenChild(env), a.children, a.width),
        "posix_spawn": lambda: _driven(
            lambda: Child.start(settings, env, time.monotonic()), a.children, a.width
        ),
        "spawner": lambda: _driven(
            lambda: Child.start(settings, env, time.monotonic(), spawner=spawner),
            a.children,
            a.width,
        ),
    }
    results: dict[str, list[tuple[float, float, float, float]]] = {w: [] for w in ways}
    for _ in range(a.repeat):  # interleaved, so a noisy moment hits every way alike
        for name, run in ways.items():
            c0, s0 = _children_cpu(), _cpu_of(spawner.pid)
            wall, blocked, cpu = run()
            spawner_cpu = _cpu_of(spawner.pid) - s0
            results[name].append((wall, blocked, cpu + spawner_cpu, _children_cpu() - c0))
    spawner.stop()
    print(f"{a.children} x sh -c true, {a.width} in flight, median of {a.repeat}")
    print(
        f"{'way':<12} {'wall s':>7} {'ms/child':>9} {'blocked ms/child':>17} {'cpu ms/child':>13}"
        f" {'child cpu ms':>13}"
    )
    for name, runs in results.items():
        wall, blocked, cpu, child = (median([r[k] for r in runs]) for k in range(4))
        n = a.children
        print(
            f"{name:<12} {wall:>7.3f} {wall * 1000 / n:>9.3f} {blocked * 1000 / n:>17.3f} "
            f"{cpu * 1000 / n:>13.3f} {child * 1000 / n:>13.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
