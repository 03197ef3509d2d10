"""The dashboard in headless Chromium (Debian's chromium + chromium-driver), driven by
selenium over a real `jobctl serve` and a real `jobctl daemon`. Each page is saved as a
screenshot under the test's temporary folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import webhelpers
from conftest import Jobctl, wait_until
from webhelpers import TOKEN, Server, browser, needs_chromium, token_file

pytestmark = needs_chromium
__all__ = ["browser"]


@pytest.fixture
def server(db: Path, tmp_path: Path) -> Iterator[Server]:
    s = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path))
    try:
        yield s.wait_ready()
    finally:
        s.close()


@pytest.mark.long
def test_dashboard_in_chromium(
    browser: Any, server: Server, jobctl: Jobctl, start_daemon: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    shots = tmp_path / "screenshots"
    shots.mkdir()

    def shot(name: str) -> None:
        assert browser.save_screenshot(str(shots / f"{name}.png"))

    def text_of(selector: str) -> str:
        return webhelpers.text_of(browser, selector)

    jobctl("add", "greet", "--manual", "--", "echo hello-from-jobctl; sleep 1; echo second-line")
    jobctl("add", "sleeper", "--manual", "--", "echo sleeping; sleep 60")
    for _ in range(2):  # two earlier runs for the strip
        jobctl("cancel", str(jobctl.json("run", "greet")["id"]))
    start_daemon()

    # sign in
    browser.get(server.url + "/")
    assert browser.find_element(By.ID, "token")
    shot("sign-in")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "sign-in").click()
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "tr.job"), 15, what="jobs page")

    # the job and its run strip
    row = browser.find_element(By.CSS_SELECTOR, 'tr.job[data-job="greet"]')
    cells = row.find_elements(By.CSS_SELECTOR, ".strip .cell")
    assert len(cells) == 2
    assert all("s-cancelled" in c.get_attribute("class") for c in cells)
    assert "manual" in row.text
    shot("jobs")

    # the job's page
    row.find_element(By.LINK_TEXT, "greet").click()
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "dl.fields"), 15, what="job page")
    assert "echo hello-from-jobctl" in browser.find_element(By.CSS_SELECTOR, "dl.fields").text
    shot("job")

    # run now: the run page shows the attempt's output as it comes, then the end
    browser.find_element(By.XPATH, "//button[text()='run now']").click()
    wait_until(lambda: "/runs/" in browser.current_url, 15, what="the run page")
    run_id = int(browser.current_url.rstrip("/").rsplit("/", 1)[1])
    wait_until(lambda: "hello-from-jobctl" in text_of("#output"), 30, what="the output on the page")
    shot("run-live")
    wait_until(lambda: text_of("#run-state") == "succeeded", 30, what="succeeded on the page")
    wait_until(lambda: "second-line" in text_of("#output"), 15, what="the whole output")
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "table.attempts"), 15)
    assert jobctl.json("runs", "greet")[0]["id"] == run_id
    assert jobctl.json("runs", "greet")[0]["state"] == "succeeded"
    shot("run-succeeded")

    # cancel a running run
    browser.get(server.url + "/")
    sleeper = browser.find_element(By.CSS_SELECTOR, 'tr.job[data-job="sleeper"]')
    sleeper.find_element(By.XPATH, ".//button[text()='run now']").click()
    wait_until(lambda: "/runs/" in browser.current_url, 15, what="the run page")
    wait_until(lambda: text_of("#run-state") == "leased", 30, what="the run to start")
    wait_until(lambda: browser.find_elements(By.XPATH, "//button[text()='cancel']"), 15)
    browser.find_element(By.XPATH, "//button[text()='cancel']").click()
    wait_until(lambda: text_of("#run-state") == "cancelled", 30, what="cancelled on the page")
    assert jobctl.json("runs", "sleeper")[0]["state"] == "cancelled"
    shot("run-cancelled")

    # a POST from the signed-in page without the CSRF token is refused
    status = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch('/jobs/greet/pause', {method: 'POST', credentials: 'same-origin',
              headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: ''})
          .then(r => done(r.status), e => done(String(e)));
        """
    )
    assert status == 403
    assert jobctl.json("show", "greet")["state"] == "active"
    # the session cookie is out of reach of scripts (HttpOnly)
    assert "jobctl_session" not in browser.execute_script("return document.cookie")
    # pause from the page, with its token
    browser.get(server.url + "/jobs/greet")
    browser.find_element(By.XPATH, "//button[text()='pause']").click()
    wait_until(lambda: jobctl.json("show", "greet")["state"] == "paused", 15, what="paused")
    wait_until(
        lambda: browser.find_elements(By.XPATH, "//button[text()='resume']"), 15, what="resume"
    )
    shot("job-paused")
    for name in ("sign-in", "jobs", "job", "run-live", "run-succeeded", "run-cancelled"):
        assert (shots / f"{name}.png").stat().st_size > 1000
