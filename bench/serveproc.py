"""A real ``jobctl serve`` for the benchmarks that talk to it (``bench.dashboard``,
``bench.pings``): started over a database on a free port of 127.0.0.1, with a token file."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path


class ServeProcess:
    """``jobctl serve`` over ``db`` with ``token``; ``port`` once it says it serves."""

    def __init__(self, db: str, tmp: Path, token: str) -> None:
        token_file = tmp / "token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        self.log = tmp / "serve.log"
        argv = [sys.executable, "-m", "jobctl", "--db", db, "serve", "--listen", "127.0.0.1:0"]
        argv += ["--token-file", str(token_file)]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=out)
        deadline = time.monotonic() + 30
        while True:
            m = re.search(r"serving http://[^:]+:(\d+)/", self.log.read_text())
            if m:
                self.port = int(m.group(1))
                return
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"serve did not start: {self.log.read_text()}")
            time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
