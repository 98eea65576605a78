"""A learner's work survives a reload and a restart, in a real Chromium (issue: guesses committed a
minute earlier were gone after a full reload of Lesson 1's lab).

The app keeps the learner's id in a cookie (ui/learner.py) and their work in the learners' database
(records/). The test commits both of the why-batch lab's predictions (the simulator's answer then
locks them), reloads the page, then stops the app, closes the browser, starts both again on the same
port and the same browser profile, and finds the locked guesses with their answers each time.
"""
import contextlib
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from test_browser import ARGS, CHROMIUM, OUT, ROOT, free_port, isolated_cache, stop, wait_until
from ui.learner import COOKIE

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Debian's Chromium is not at {CHROMIUM}")
GUESS = "3.5"


@contextlib.contextmanager
def app(cache: Path, db: Path, port: int, log_name: str):
    """`streamlit run app.py` on `port` with this cache and learners' database; stopped afterwards."""
    env = {k: v for k, v in os.environ.items() if k != "BATCHING_LAB_MODEL"}
    env.update(BATCHING_LAB_CACHE=str(cache), BATCHING_LAB_DB=str(db))
    OUT.mkdir(exist_ok=True)
    with open(OUT / log_name, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                                 "--server.port", str(port), "--server.address", "127.0.0.1",
                                 "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2):
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (OUT / log_name).read_text()
                time.sleep(0.3)
        yield url
    finally:
        stop(proc)


@contextlib.contextmanager
def chromium(profile: Path):
    """Chromium with a profile on disk: closing it and opening it again is the same browser."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                       args=ARGS, viewport={"width": 1280, "height": 720})
        try:
            yield context
        finally:
            context.close()


def open_lab(context, url):
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{url}/why_batch")
    page.get_by_role("heading").first.wait_for()
    return page


def locked_guesses(page) -> list[str]:
    """The page's locked predictions, as their lines read."""
    return page.locator("[data-testid=stMarkdownContainer] p", has_text="Your prediction:").all_inner_texts()


def wait_locked(page, what: str) -> list[str]:
    """Both guesses, once both lines read locked. A rerun draws a committed guess first as open
    (its icon "psychology") and then, in the same run, locked: the browser can show one line of
    each, beside captions left from the run before, so the lines' own icons are waited for too."""
    def both():
        lines = locked_guesses(page)
        locks = page.get_by_text("Locked: a result has been shown beside it", exact=False).count()
        return (lines if len(lines) == 2 and locks == 2 and all(x.startswith("lock") for x in lines)
                and any(f"×{GUESS}" in x for x in lines) else None)
    return wait_until(both, timeout=120, what=what,
                      explain=lambda: (locked_guesses(page), page.locator("[data-testid=stException]").all_inner_texts()))


def test_a_committed_prediction_survives_a_reload_and_a_restart(tmp_path):
    shots = OUT / "learner"
    shots.mkdir(parents=True, exist_ok=True)
    profile, db, port = tmp_path / "profile", tmp_path / "learners.sqlite3", free_port()
    with isolated_cache() as cache:
        with app(cache, db, port, "streamlit-learner-1.log") as url, chromium(profile) as context:
            page = open_lab(context, url)
            field = page.get_by_label("Your prediction (×)", exact=True).and_(page.get_by_test_id("stNumberInputField"))
            field.fill(GUESS)
            field.press("Enter")
            page.get_by_role("button", name="Commit my prediction").click()
            page.get_by_text("which will be the knee").first.wait_for()      # the second question
            page.get_by_role("button", name="Commit my prediction").click()      # the first choice offered
            first = wait_locked(page, "both guesses locked beside the simulator's answer")
            cookies = {c["name"]: c["value"] for c in context.cookies()}
            assert COOKIE in cookies, "the learner's id is kept in the browser"
            page.reload()
            assert wait_locked(page, "the locked guesses after a reload") == first
            assert page.get_by_role("button", name="Commit my prediction").count() == 0
            page.screenshot(path=str(shots / "after-reload.png"))
        # the app stopped and the browser closed: start both again, same port, same profile
        with app(cache, db, port, "streamlit-learner-2.log") as url, chromium(profile) as context:
            page = open_lab(context, url)
            assert wait_locked(page, "the locked guesses after a restart") == first
            assert {c["name"]: c["value"] for c in context.cookies()}[COOKIE] == cookies[COOKIE]
            page.screenshot(path=str(shots / "after-restart.png"))
    rows = sqlite3.connect(db).execute("SELECT learner, question, guess, answer_shown, source FROM predictions "
                                       "ORDER BY question").fetchall()
    assert [(r[0], r[1]) for r in rows] == [(cookies[COOKIE], "why_batch"), (cookies[COOKIE], "why_batch_knee")]
    # the answer shown: the simulator's, or this machine's stored measurement where the cache holds one
    assert rows[0][2] == GUESS and all(r[3] and r[4] in ("simulated", "measured") for r in rows), rows
