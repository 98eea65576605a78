"""The real thing: Debian's Chromium, driven by Playwright, against `streamlit run app.py`.

The server runs the default model (SmolLM2-135M). One test starts a run, watches the batch
chart grow, moves max_num_seqs and finds the change marked on the chart, saves a screenshot
(test-output/playground.png), then reloads and checks the old engine thread stopped. The other
runs two browser sessions at once and checks each engine follows only its own settings.
"""
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test-output"
# Small workloads, so SmolLM2 on two CPU cores shows many steps within seconds.
SMALL = {"rate": "0", "num_requests": "24", "prompt_lo": "32", "prompt_hi": "48",
         "output_lo": "200", "output_hi": "300"}

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"Debian's Chromium is not installed at {CHROMIUM} "
                                       "(apt-get install chromium, or `make chromium`)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """`streamlit run app.py` on a free port with the default model; stopped afterwards."""
    port = free_port()
    OUT.mkdir(exist_ok=True)
    log_path = OUT / "streamlit-server.log"
    env = {k: v for k, v in os.environ.items() if k != "BATCHING_LAB_MODEL"}   # the default model
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1",
             "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                    if r.read() == b"ok":
                        break
            except OSError:
                pass
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "streamlit did not come up"
            time.sleep(0.3)
        yield url, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


# ----------------------------------------------------------------------------- page helpers


def open_playground(context, url, **query):
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(f"{url}/playground?{urlencode({**SMALL, **query})}")
    status_el(page).wait_for()
    return page


def status_el(page):
    return page.locator("[data-testid=stMarkdownContainer] p", has_text="Engine:").first


def status(page) -> dict:
    text = status_el(page).inner_text()
    m = re.search(r"Engine: ([\w ]+?) · steps: (\d+) .* largest batch: (\d+) of (\d+) slots", text)
    assert m, text
    return {"state": m[1], "steps": int(m[2]), "largest": int(m[3]), "slots": int(m[4])}


BATCH_CHART = ".st-key-pg_batch .js-plotly-plot"   # the batch-membership chart's plot


def chart_steps(page) -> int:
    """How many step columns the batch-membership heatmap draws right now."""
    return page.eval_on_selector_all(
        BATCH_CHART, "els => Math.max(0, ...els.map(el => (el._fullData && el._fullData[0] &&"
                     " el._fullData[0].x) ? el._fullData[0].x.length : 0))")


def chart_marks(page) -> list[str]:
    return page.eval_on_selector_all(
        BATCH_CHART, "els => els.flatMap(el => ((el._fullLayout && el._fullLayout.annotations)"
                     " || []).map(a => a.text))")


def wait_until(fn, timeout=90, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = fn()
        except Exception:          # the element is being redrawn: try again
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def engines_running(context, url) -> int:
    page = context.new_page()
    page.goto(f"{url}/about")
    text = page.locator("li", has_text="Engines running on this server").first.inner_text(timeout=90_000)
    page.close()
    return int(re.search(r"Engines running on this server: (\d+)", text)[1])


def click_slider(page, key: str, value: int, lo: int, hi: int) -> int:
    """One click on the slider's track where `value` sits (one change, one rerun); returns
    the value the slider took."""
    track = page.locator(f".st-key-{key} [role=group] > div").first
    box = track.bounding_box()
    page.mouse.click(box["x"] + box["width"] * (value - lo) / (hi - lo), box["y"] + box["height"] / 2)
    thumb = page.locator(f".st-key-{key} input[type=range]")
    return wait_until(lambda: int(thumb.input_value()) != hi and int(thumb.input_value()),
                      timeout=10, what="the slider to move")


# ----------------------------------------------------------------------------- tests


def test_live_run_slider_change_marker_screenshot_and_reload(server, browser):
    url, log_path = server
    context = browser.new_context(viewport={"width": 1500, "height": 2600})
    page = open_playground(context, url, max_num_seqs="16")
    assert status(page)["state"] == "idle"

    page.get_by_role("button", name="Start").click()
    first = wait_until(lambda: chart_steps(page) >= 3 and chart_steps(page), what="first steps")
    wait_until(lambda: chart_steps(page) > first, what="the batch chart to gain steps")
    assert status(page)["state"] == "running"

    seqs = click_slider(page, "pg_max_num_seqs", 4, 1, 64)
    assert 1 <= seqs < 16
    wait_until(lambda: f"max_num_seqs 16→{seqs}" in chart_marks(page), what="the change marker")
    wait_until(lambda: status(page)["slots"] == seqs, what="the status to show the new slots")
    time.sleep(1.5)                                  # a few steps under the new policy
    OUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUT / "playground.png"))
    assert (OUT / "playground.png").stat().st_size > 20_000

    # Reloading gives a fresh session; the old session's engine thread must stop.
    page.reload()
    status_el(page).wait_for()
    assert status(page)["state"] == "idle"
    wait_until(lambda: engines_running(context, url) == 0, timeout=60,
               what="the reloaded page's old engine thread to stop")
    assert "is gone: stopping its engine thread" in log_path.read_text()
    context.close()


def test_two_sessions_run_their_own_engines(server, browser):
    url, _ = server
    ctx_a, ctx_b = (browser.new_context(viewport={"width": 1400, "height": 1400}) for _ in range(2))
    page_a = open_playground(ctx_a, url, max_num_seqs="2")
    page_b = open_playground(ctx_b, url, max_num_seqs="6")
    page_a.get_by_role("button", name="Start").click()
    page_b.get_by_role("button", name="Start").click()
    wait_until(lambda: status(page_a)["steps"] >= 6 and status(page_b)["steps"] >= 6,
               what="both engines to take steps")
    a, b = status(page_a), status(page_b)
    assert a["slots"] == 2 and a["largest"] == 2, a      # 24 requests at once: batches fill
    assert b["slots"] == 6 and b["largest"] == 6, b
    assert engines_running(ctx_a, url) == 2

    # Pausing one leaves the other running.
    page_a.get_by_role("button", name="Pause").click()
    wait_until(lambda: status(page_a)["state"] == "paused", what="A to pause")
    a_steps, b_steps = status(page_a)["steps"], status(page_b)["steps"]
    wait_until(lambda: status(page_b)["steps"] >= b_steps + 3, what="B to go on")
    time.sleep(0.6)
    assert status(page_a)["steps"] == a_steps and status(page_a)["state"] == "paused"

    # Closing a page stops its engine.
    ctx_a.close()
    ctx_b.close()
    probe = browser.new_context()
    wait_until(lambda: engines_running(probe, url) == 0, timeout=60,
               what="closed pages' engines to stop")
    probe.close()
