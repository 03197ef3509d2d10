"""The dashboard as an operations console (README, The dashboard's pages) in headless Chromium: the overview,
search, paging and natural order among 2,000 jobs, retry all dead, a job's chart, delete
with its confirmation, the timeline, the runs across jobs, and parts that refresh by
themselves. Each page is saved as a screenshot under the test's temporary folder."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Jobctl, wait_until
from webhelpers import (
    TOKEN,
    Server,
    browser,
    click_to_a_new_page,
    needs_chromium,
    text_of,
    token_file,
)

pytestmark = needs_chromium
__all__ = ["browser"]


@pytest.fixture
def server(db: Path, tmp_path: Path) -> Iterator[Server]:
    s = Server(db, tmp_path / "serve.log", token_file=token_file(tmp_path))
    try:
        yield s.wait_ready()
    finally:
        s.close()


@pytest.fixture
def shot(browser: Any, tmp_path: Path) -> Any:
    shots = tmp_path / "screenshots"
    shots.mkdir()

    def save(name: str) -> Path:
        path = shots / f"{name}.png"
        assert browser.save_screenshot(str(path))
        assert path.stat().st_size > 1000
        return path

    return save


def sign_in(browser: Any, server: Server) -> None:
    from selenium.webdriver.common.by import By

    browser.get(server.url + "/")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "sign-in").click()
    wait_until(lambda: browser.find_elements(By.ID, "overview"), 15, what="the overview")


def add_jobs(jobctl: Jobctl, names: Sequence[str], *, command: str = "true") -> None:
    """Jobs that never fire during a test (1 January at midnight), in one transaction."""
    from jobctl.models import JobSpec, Trigger, TriggerKind

    now = datetime.now(UTC)
    specs = [
        (
            JobSpec(
                name=n,
                trigger=Trigger(TriggerKind.CRON, "UTC", expr="0 0 1 1 *"),
                command=command,
            ),
            datetime(now.year + 1, 1, 1, tzinfo=UTC),
        )
        for n in names
    ]
    jobctl.store().add_jobs(specs, now)


def history(jobctl: Jobctl, name: str, spans: Sequence[tuple[datetime, float, int]]) -> None:
    """Runs of job ``name`` played through the store as a daemon would: each is enqueued
    at its start, claimed, and finished ``seconds`` later with that exit code."""
    store = jobctl.store()
    for start, seconds, exit_code in spans:
        run, _ = store.enqueue_run(name, start)
        [c], _ = store.claim("test-daemon", "test-host", start, 3600, limit=1)
        assert c.run.id == run.id
        store.finish(
            c.run, c.run.attempt, "test-daemon", start + timedelta(seconds=seconds), exit_code
        )


def rows(browser: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [r.get_attribute("data-job") for r in browser.find_elements(By.CSS_SELECTOR, "tr.job")]


@pytest.mark.long
def test_overview_dead_first_search_paging_natural_order_retry_all_dead(
    browser: Any, server: Server, jobctl: Jobctl, shot: Any
) -> None:
    from selenium.webdriver.common.by import By

    add_jobs(jobctl, [f"job-{i}" for i in range(1, 2000)])
    jobctl("add", "zz-broken", "--manual", "--retries", "0", "--", "exit 3")
    jobctl("add", "needle-finder", "--manual", "--description", "finds the haystack", "--", "true")
    history(jobctl, "zz-broken", [(datetime.now(UTC) - timedelta(minutes=5), 1.0, 3)])
    assert jobctl.json("runs", "zz-broken")[0]["state"] == "dead"

    sign_in(browser, server)
    # the dead job first, then the others by name in natural order, 50 to a page
    names = rows(browser)
    assert len(names) == 50
    assert names[0] == "zz-broken"
    assert "dead" in browser.find_element(By.CSS_SELECTOR, "tr.job.attention .why").text
    assert names[1:] == [f"job-{i}" for i in range(1, 50)]
    assert "2001 jobs" in browser.find_element(By.CSS_SELECTOR, ".summary").text
    # the runs of the last 24 h by state
    dead_count = browser.find_element(By.CSS_SELECTOR, 'a.count[data-state="dead"]')
    assert dead_count.text.split()[0] == "1"
    # dates stay on one line in a 1,400 px window
    when = browser.find_element(
        By.CSS_SELECTOR, 'tr.job[data-job="zz-broken"] td[data-label="last run"] time'
    )
    font = float(
        browser.execute_script("return parseFloat(getComputedStyle(arguments[0]).fontSize)", when)
    )
    assert when.size["height"] < 2 * font  # one line (two would be about 2.4 times the font)
    shot("overview")

    # the next page
    browser.find_element(By.ID, "next-page").click()
    wait_until(lambda: browser.find_element(By.ID, "page-number").text == "2", 15)
    assert rows(browser) == [f"job-{i}" for i in range(50, 100)]
    shot("overview-page-2")

    # a search, server-side, finds one job among 2,001 (by its description here)
    box = browser.find_element(By.ID, "q")
    box.clear()
    box.send_keys("haystack")
    browser.find_element(By.ID, "filter").click()
    wait_until(lambda: "q=haystack" in browser.current_url, 15)
    assert rows(browser) == ["needle-finder"]
    shot("overview-search")

    # the last-run filter
    browser.get(server.url + "/?last=dead")
    assert rows(browser) == ["zz-broken"]

    # retry all dead: the dead run is pending again, the job no longer needs attention
    browser.get(server.url + "/")
    browser.find_element(By.XPATH, "//button[text()='retry all dead']").click()
    wait_until(lambda: jobctl.json("runs", "zz-broken")[0]["state"] == "pending", 15)
    wait_until(lambda: browser.find_elements(By.ID, "overview"), 15)
    assert rows(browser)[0] == "job-1"
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.job.attention")

    # readable in a 400 px window: nothing wider than the window
    browser.set_window_size(400, 900)
    browser.get(server.url + "/")
    width = browser.execute_script("return document.documentElement.scrollWidth")
    inner = browser.execute_script("return window.innerWidth")
    assert width <= inner + 1
    shot("overview-400px")


@pytest.mark.long
def test_job_page_chart_retry_and_delete_with_confirmation(
    browser: Any, server: Server, jobctl: Jobctl, shot: Any
) -> None:
    from selenium.webdriver.common.by import By

    jobctl("add", "chart", "--manual", "--retries", "0", "--", "true")
    t0 = datetime.now(UTC) - timedelta(hours=2)
    spans = [(1.0, 0), (2.0, 0), (3.0, 0), (4.0, 0), (10.0, 7), (2.0, 0), (5.0, 0)]
    history(
        jobctl, "chart", [(t0 + timedelta(minutes=i), s, code) for i, (s, code) in enumerate(spans)]
    )
    runs = jobctl.json("runs", "chart", "--limit", "100")
    assert len(runs) == 7

    sign_in(browser, server)
    browser.get(server.url + "/jobs/chart")
    bars = browser.find_elements(By.CSS_SELECTOR, "svg.durations rect.bar")
    # one bar per run, oldest on the left, coloured by state
    assert [int(b.get_attribute("data-run")) for b in bars] == [r["id"] for r in reversed(runs)]
    seconds = [float(b.get_attribute("data-seconds")) for b in bars]
    assert seconds == pytest.approx([s for s, _ in spans])
    assert ["s-dead" in b.get_attribute("class") for b in bars] == [c != 0 for _, c in spans]
    heights = [float(b.get_attribute("height")) for b in bars]
    assert heights.index(max(heights)) == 4
    median = browser.find_element(By.CSS_SELECTOR, "svg.durations line.median")
    assert float(median.get_attribute("data-seconds")) == pytest.approx(
        statistics.median(s for s, _ in spans)
    )
    assert "median 3.0s" in browser.find_element(By.ID, "job-chart").text
    shot("job")

    # retry its dead runs
    browser.find_element(By.XPATH, "//button[text()='retry dead runs']").click()
    wait_until(lambda: not [r for r in jobctl.json("runs", "chart") if r["state"] == "dead"], 15)

    # a POST from the signed-in page without the CSRF token is refused, and deletes nothing
    for path, body in (("/jobs/chart/delete", "confirm=yes&force=yes"), ("/retry-dead", "")):
        status = browser.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            fetch(arguments[0], {method: 'POST', credentials: 'same-origin',
                  headers: {'Content-Type': 'application/x-www-form-urlencoded'},
                  body: arguments[1]}).then(r => done(r.status), e => done(String(e)));
            """,
            path,
            body,
        )
        assert status == 403
    assert jobctl.json("show", "chart")["name"] == "chart"

    # delete: the first press only asks
    browser.find_element(By.ID, "delete").click()
    wait_until(lambda: browser.find_elements(By.ID, "confirm-delete"), 15)
    assert jobctl.json("show", "chart")["name"] == "chart"
    shot("job-delete-confirm")
    browser.find_element(By.ID, "keep").click()
    wait_until(lambda: browser.current_url.endswith("/jobs/chart"), 15)
    browser.find_element(By.ID, "delete").click()
    wait_until(lambda: browser.find_elements(By.ID, "confirm-delete"), 15)
    browser.find_element(By.ID, "confirm-delete").click()
    wait_until(lambda: "deleted chart" in text_of(browser, "main"), 15)
    assert "chart" not in [j["name"] for j in jobctl.json("list")]


def test_timeline_shows_overlapping_attempts_in_the_browsers_zone(
    browser: Any, server: Server, jobctl: Jobctl, shot: Any
) -> None:
    from selenium.webdriver.common.by import By

    # a zone half an hour off UTC: its hours start at half past UTC hours
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Asia/Kolkata"})
    jobctl("add", "alpha", "--manual", "--retries", "0", "--", "true")
    jobctl("add", "beta", "--manual", "--retries", "0", "--", "true")
    jobctl("add", "gamma", "--manual", "--retries", "0", "--", "true")
    now = datetime.now(UTC)
    history(jobctl, "alpha", [(now - timedelta(hours=3), 3600.0, 0)])
    history(jobctl, "beta", [(now - timedelta(hours=2, minutes=30), 3600.0, 1)])
    history(
        jobctl, "gamma", [(now - timedelta(hours=30), 60.0, 0), (now - timedelta(hours=1), 60.0, 0)]
    )

    sign_in(browser, server)
    browser.get(server.url + "/timeline")
    # (Chromium names the zone by its older name, Asia/Calcutta)
    wait_until(lambda: "Asia/Calcutta" in text_of(browser, "#timeline"), 15, what="the zone")

    def bars(job: str) -> list[Any]:
        return browser.find_elements(By.CSS_SELECTOR, f'svg.timeline rect.bar[data-job="{job}"]')

    (a,), (b,) = bars("alpha"), bars("beta")
    ax1, ax2 = float(a.get_attribute("data-x1")), float(a.get_attribute("data-x2"))
    bx1, bx2 = float(b.get_attribute("data-x1")), float(b.get_attribute("data-x2"))
    assert ax1 < bx1 < ax2 < bx2  # they overlap, alpha first
    assert a.get_attribute("y") != b.get_attribute("y")  # one row a job
    assert "s-succeeded" in a.get_attribute("class")
    assert "s-dead" in b.get_attribute("class")
    assert len(bars("gamma")) == 1  # the attempt of 30 h ago is not in the last 24 h
    marks = browser.find_elements(By.CSS_SELECTOR, "svg.timeline line.hour")
    assert 23 <= len(marks) <= 24
    for m in marks:
        at = datetime.fromisoformat(m.get_attribute("data-at").replace("Z", "+00:00"))
        assert at.minute == 30
    shot("timeline")


def test_runs_across_jobs_with_filters_and_paging(
    browser: Any, server: Server, jobctl: Jobctl, shot: Any
) -> None:
    from selenium.webdriver.common.by import By

    jobctl("add", "one", "--manual", "--retries", "0", "--", "true")
    jobctl("add", "two", "--manual", "--retries", "0", "--", "true")
    now = datetime.now(UTC)
    history(jobctl, "one", [(now - timedelta(minutes=100 - i), 1.0, 0) for i in range(60)])
    history(jobctl, "two", [(now - timedelta(minutes=39 - i), 1.0, i % 2) for i in range(10)])
    history(jobctl, "one", [(now - timedelta(days=3), 1.0, 0)])

    sign_in(browser, server)
    browser.get(server.url + "/runs")

    def shown() -> list[int]:
        return [
            int(r.get_attribute("data-run"))
            for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")
        ]

    everything = [r["id"] for r in jobctl.json("runs", "--limit", "1000")]
    assert shown() == everything[:50]
    shot("runs")
    browser.find_element(By.ID, "next-page").click()
    wait_until(lambda: shown() and shown()[0] == everything[50], 15)
    assert shown() == everything[50:71]
    # filtered by job and state
    browser.get(server.url + "/runs?job=two&state=dead")
    assert shown() == [r["id"] for r in jobctl.json("runs", "two", "--state", "dead")]
    assert len(shown()) == 5
    # by time: the run of three days ago is left out
    browser.get(server.url + "/runs?job=one&since=1d")
    assert len(shown()) == 50
    browser.find_element(By.ID, "next-page").click()
    wait_until(lambda: len(shown()) == 10, 15)
    shot("runs-filtered")
    browser.get(server.url + "/runs?since=yesterday-ish")
    assert "invalid --since" in text_of(browser, "main")


def test_lists_refresh_without_a_full_reload(
    browser: Any, server: Server, jobctl: Jobctl, start_daemon: Any, shot: Any
) -> None:
    from selenium.webdriver.common.by import By

    jobctl("add", "slow", "--manual", "--", "sleep 2")
    sign_in(browser, server)
    start_daemon()
    run_id = jobctl.json("run", "slow")["id"]
    browser.get(server.url + "/runs")
    row = f'tr.run[data-run="{run_id}"]'
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, row), 15)
    assert "succeeded" not in browser.find_element(By.CSS_SELECTOR, row).text
    browser.execute_script("window.__still_this_page = 1")

    def finished_on_page() -> bool:
        try:
            return "succeeded" in browser.find_element(By.CSS_SELECTOR, row).text
        except Exception:
            return False

    wait_until(finished_on_page, 30, what="the finished run on the page")
    assert jobctl.json("runs", "slow")[0]["state"] == "succeeded"
    assert browser.execute_script("return window.__still_this_page") == 1  # no reload
    shot("runs-refreshed")

    # the job's page shows what the run cost, as the daemon recorded it
    from jobctl.web.charts import bytes_text, seconds_text

    run = jobctl.json("inspect", str(run_id))
    assert run["max_rss"] and run["cpu"] is not None
    browser.get(server.url + "/jobs/slow")
    cost = browser.find_element(By.CSS_SELECTOR, f'tr.cost[data-run="{run_id}"]')
    assert cost.find_element(By.CSS_SELECTOR, 'td[data-label="peak memory"]').text == bytes_text(
        run["max_rss"]
    )
    assert cost.find_element(By.CSS_SELECTOR, 'td[data-label="CPU"]').text == seconds_text(
        run["cpu"]
    )
    assert "peak memory median" in browser.find_element(By.ID, "costs").text


def test_edit_the_definition_as_toml_in_the_page(
    browser: Any, server: Server, jobctl: Jobctl, shot: Any
) -> None:
    from selenium.webdriver.common.by import By

    jobctl("add", "tick", "--cron", "0 3 * * *", "--tz", "UTC", "--", "echo tick")
    sign_in(browser, server)
    browser.get(server.url + "/jobs/tick")
    browser.find_element(By.CSS_SELECTOR, "details#definition summary").click()
    box = browser.find_element(By.ID, "toml")
    text = box.get_attribute("value")
    assert "[jobs.tick]" in text and 'cron = "0 3 * * *"' in text
    browser.execute_script(
        "arguments[0].scrollIntoView()", browser.find_element(By.ID, "definition")
    )
    shot("job-edit")

    def submit(new_text: str) -> None:
        area = browser.find_element(By.ID, "toml")
        browser.execute_script("arguments[0].value = arguments[1]", area, new_text)
        click_to_a_new_page(browser, "#apply")

    # a bad edit: every error shown beside the text as sent, nothing changed
    bad = text.replace('cron = "0 3 * * *"', 'cron = "61 * * * *"') + "\nbogus = 1\n"
    submit(bad)
    wait_until(lambda: text_of(browser, "#edit-errors"), 15, what="the errors")
    errors = text_of(browser, "#edit-errors")
    assert "cron" in errors and "bogus" in errors
    assert browser.find_element(By.ID, "toml").get_attribute("value") == bad
    assert jobctl.json("show", "tick")["trigger"]["expr"] == "0 3 * * *"
    browser.execute_script(
        "arguments[0].scrollIntoView()", browser.find_element(By.ID, "definition")
    )
    shot("job-edit-error")
    submit("[jobs.tick\n")
    wait_until(lambda: "line 1" in text_of(browser, "#edit-errors"), 15, what="the TOML error")
    assert jobctl.json("show", "tick")["trigger"]["expr"] == "0 3 * * *"

    # a good one: the schedule changes, as edit -e changes it, and makes a revision
    submit(text.replace('cron = "0 3 * * *"', 'cron = "30 4 * * *"'))
    wait_until(lambda: "applied" in text_of(browser, "#applied"), 15, what="the applied notice")
    assert "cron" in text_of(browser, "#applied")
    assert jobctl.json("show", "tick")["trigger"]["expr"] == "30 4 * * *"
    history = jobctl.json("history", "tick")
    assert history[-1]["source"] == "api" and "cron" in history[-1]["changes"]
    newest = browser.find_element(By.CSS_SELECTOR, "tr.revision")
    assert newest.get_attribute("data-revision") == str(history[-1]["revision"])
    assert "api" in newest.text and "30 4" in newest.text
    browser.execute_script(
        "arguments[0].scrollIntoView()", browser.find_element(By.ID, "definition")
    )
    shot("job-edited")


def test_the_editor_refuses_a_text_made_before_another_change(
    browser: Any, server: Server, jobctl: Jobctl
) -> None:
    """retries 9 set from the command line while the page's editor was open on retries 2:
    applying the page's text would put 2 back. It is refused, naming both revisions, the
    text stays in the editor, and a text made after the change applies."""
    from selenium.webdriver.common.by import By

    jobctl("add", "tick", "--cron", "0 3 * * *", "--tz", "UTC", "--", "echo tick")
    sign_in(browser, server)
    browser.get(server.url + "/jobs/tick")
    browser.find_element(By.CSS_SELECTOR, "details#definition summary").click()
    text = browser.find_element(By.ID, "toml").get_attribute("value")
    jobctl("edit", "tick", "--retries", "9")  # someone else, meanwhile

    def submit(new_text: str) -> None:
        area = browser.find_element(By.ID, "toml")
        browser.execute_script("arguments[0].value = arguments[1]", area, new_text)
        click_to_a_new_page(browser, "#apply")

    mine = text.replace('cron = "0 3 * * *"', 'cron = "30 4 * * *"')
    submit(mine)
    wait_until(lambda: text_of(browser, "#edit-errors"), 15, what="the refusal")
    assert text_of(browser, "#edit-errors") == (
        "job tick changed since the text was made: it was at revision 1, it is at revision 2"
    )
    assert browser.find_element(By.ID, "toml").get_attribute("value") == mine
    shown = jobctl.json("show", "tick")
    assert (shown["retries"], shown["trigger"]["expr"]) == (9, "0 3 * * *")
    # sent again from the same page, it is still the text of revision 1: refused again
    submit(mine + "\n")
    wait_until(lambda: "revision 1" in text_of(browser, "#edit-errors"), 15, what="again")
    assert jobctl.json("show", "tick")["retries"] == 9
    # a fresh page holds revision 2: its text applies, keeping retries 9
    browser.get(server.url + "/jobs/tick")
    browser.find_element(By.CSS_SELECTOR, "details#definition summary").click()
    fresh = browser.find_element(By.ID, "toml").get_attribute("value")
    assert "retries = 9" in fresh
    submit(fresh.replace('cron = "0 3 * * *"', 'cron = "30 4 * * *"'))
    wait_until(lambda: "applied" in text_of(browser, "#applied"), 15, what="the applied notice")
    shown = jobctl.json("show", "tick")
    assert (shown["retries"], shown["trigger"]["expr"]) == (9, "30 4 * * *")


def test_notifications_page_with_test_buttons(
    browser: Any, server: Server, jobctl: Jobctl, shot: Any
) -> None:
    import http.server
    import threading

    from selenium.webdriver.common.by import By

    got: list[tuple[str, dict[str, Any]]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, json.loads(body)))
            self.send_response(200 if self.path == "/ok" else 500)
            self.end_headers()
            self.wfile.write(b"receiver says no" if self.path != "/ok" else b"")

        def log_message(self, *args: Any) -> None:
            pass

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        port = receiver.server_address[1]
        jobctl("notify", "add", "hook", "--webhook", f"http://127.0.0.1:{port}/ok")
        jobctl("notify", "add", "broken", "--webhook", f"http://127.0.0.1:{port}/bad")
        jobctl("add", "told", "--manual", "--retries", "0", "--notify", "hook:dead", "--", "false")
        history(jobctl, "told", [(datetime.now(UTC) - timedelta(minutes=3), 1.0, 1)])

        sign_in(browser, server)
        browser.get(server.url + "/notifications")
        channels = [
            r.get_attribute("data-channel")
            for r in browser.find_elements(By.CSS_SELECTOR, "tr.channel")
        ]
        assert channels == ["broken", "hook"]
        # the dead run's notification, waiting for a daemon to deliver it
        (row,) = browser.find_elements(By.CSS_SELECTOR, "tr.notification")
        assert "dead" in row.text and "told" in row.text and "pending" in row.text
        browser.get(server.url + "/notifications?state=sent")
        assert not browser.find_elements(By.CSS_SELECTOR, "tr.notification")
        browser.get(server.url + "/jobs/told")
        assert browser.find_element(By.ID, "notify").text == "hook: dead"
        browser.get(server.url + "/notifications")
        shot("notifications")

        # a test button that delivers, and one whose receiver refuses
        hook = browser.find_element(By.CSS_SELECTOR, 'tr.channel[data-channel="hook"]')
        hook.find_element(By.XPATH, ".//button[text()='send a test']").click()
        wait_until(lambda: "delivered" in text_of(browser, "#test-result"), 30)
        assert "not delivered" not in text_of(browser, "#test-result")
        assert [(p, b["event"]) for p, b in got] == [("/ok", "test")]
        broken = browser.find_element(By.CSS_SELECTOR, 'tr.channel[data-channel="broken"]')
        broken.find_element(By.XPATH, ".//button[text()='send a test']").click()
        wait_until(lambda: "not delivered" in text_of(browser, "#test-result"), 30)
        assert "500" in text_of(browser, "#test-result")
        shot("notifications-test-failed")
        # the test events are not recorded as notifications
        assert len(browser.find_elements(By.CSS_SELECTOR, "tr.notification")) == 1
        # and the button needs the CSRF token
        status = browser.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            fetch('/channels/hook/test', {method: 'POST', credentials: 'same-origin',
                  headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: ''})
              .then(r => done(r.status), e => done(String(e)));
            """
        )
        assert status == 403
        assert len(got) == 2
    finally:
        receiver.shutdown()
        receiver.server_close()
