"""A real `jobctl serve` process on a free port, and a small HTTP client for it."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until

TOKEN = "test-token-0123456789"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    cookies: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Server:
    """``jobctl --db DB serve --listen 127.0.0.1:0 …`` started in its own session."""

    def __init__(
        self,
        db: Path,
        log: Path,
        *args: str,
        env: dict[str, str] | None = None,
        token_file: Path | None = None,
    ) -> None:
        self.log_path = log
        self._log = open(log, "ab")
        argv = [sys.executable, "-c", "from jobctl.cli import main; main()", "--db", str(db)]
        argv += ["serve", *args]
        if "--listen" not in args:
            argv += ["--listen", "127.0.0.1:0"]
        if token_file is not None:
            argv += ["--token-file", str(token_file)]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCTL_")}
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=self._log, env=full_env, start_new_session=True
        )
        self.host = ""
        self.port = 0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 20.0) -> Server:
        def serving() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}: {self.log()}")
            return bool(re.search(r"serving http://([^/]+):(\d+)/", self.log()))

        wait_until(serving, timeout, what="serve to listen")
        m = re.search(r"serving http://([^/]+):(\d+)/", self.log())
        assert m is not None
        self.host, self.port = m.group(1).strip("[]"), int(m.group(2))
        wait_until(lambda: self._healthy(), timeout, what="GET /healthz")
        return self

    def _healthy(self) -> bool:
        try:
            return self.request("GET", "/healthz", token=None).status == 200
        except OSError:
            return False

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = TOKEN,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Answer:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            payload = resp.read()
            return Answer(
                resp.status,
                {k.lower(): v for k, v in resp.getheaders()},
                payload,
                resp.headers.get_all("set-cookie") or [],
            )
        finally:
            conn.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        finally:
            self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self._log.closed:
            self._log.close()


def text_of(browser: Any, selector: str) -> str:
    """The element's text; "" while it is missing or the page changes under us (an element
    found, then replaced by a refresh before its text is read: "stale", or in Chrome's
    words a node that no longer belongs to the document)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By

    try:
        found = browser.find_elements(By.CSS_SELECTOR, selector)
        return str(found[0].text) if found else ""
    except StaleElementReferenceException:
        return ""
    except WebDriverException as e:
        if "does not belong to the document" in str(e.msg):
            return ""
        raise


def click_to_a_new_page(browser: Any, selector: str, seconds: float = 15) -> None:
    """Click the element (a form's submit button) and wait until the page it loaded has
    replaced this one, so what the test reads next is the answer's, not the page it was
    sent from (which may show the same text: a second refusal of the same edit)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By

    old = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.CSS_SELECTOR, selector).click()

    def replaced() -> bool:
        try:
            return not old.is_enabled()  # (the old page's element answers while it stays)
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            return "does not belong to the document" in str(e.msg)

    wait_until(replaced, seconds, what="the page the click loads")


def token_file(tmp_path: Path, token: str = TOKEN) -> Path:
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


# ---------------------------------------------------------------- headless Chromium

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

needs_chromium = pytest.mark.skipif(
    not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(
        service=Service(executable_path=CHROMEDRIVER, log_output=str(tmp_path / "driver.log")),
        options=options,
    )
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)
