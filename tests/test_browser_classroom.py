"""A classroom in a real browser: `python -m engine serve` (SmolLM2) and the app attached to it,
an instructor and two students in three browser contexts (Debian's Chromium, Playwright).

Each student's burst shows up outlined in the one shared batch chart; a student's policy
change is refused; the instructor's change shows as a marker on everyone's chart. A page opened
before the server answers draws its Instructor panel once it does.
"""
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import pytest

from engine.cli.launch import launched, start
from test_browser import ARGS, CHROMIUM, OUT, ROOT, free_port, isolated_cache, wait_until

TOKEN = "teacher-secret"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Debian's Chromium is not at {CHROMIUM}")
MEMBERSHIP = ".st-key-cr_membership iframe"     # the shared batch chart, drawn in ui/live_chart's frame


def started(cmd, env, health, log_name):
    log = open(OUT / log_name, "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(health, timeout=2):
                return proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (OUT / log_name).read_text()
            time.sleep(0.5)


@pytest.fixture(scope="module")
def classroom():
    with isolated_cache() as cache:
        yield from _classroom(cache)


def _classroom(cache):
    with engine_and_app("classroom", BATCHING_LAB_CACHE=str(cache)) as (engine_url, app_url):
        yield engine_url, app_url + "/classroom"


@contextlib.contextmanager
def engine_and_app(name: str, **more_env):
    """`engine serve` (SmolLM2) on a free port and the app attached to it: (engine URL, app URL).
    Their output goes to OUT/NAME-engine.log and OUT/NAME-app.log."""
    OUT.mkdir(exist_ok=True)
    engine_port, app_port = free_port(), free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    env = {**os.environ, "BATCHING_LAB_INSTRUCTOR_TOKEN": TOKEN, "BATCHING_LAB_ENGINE_URL": engine_url,
           "PYTHONPATH": str(ROOT), **more_env}
    with launched(["--device", "cpu", "--trusted-client", "127.0.0.1"], port=engine_port, env=env,
                  log=OUT / f"{name}-engine.log", timeout_s=120):
        app = started([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                       "--server.port", str(app_port), "--server.address", "127.0.0.1",
                       "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
                      env, f"http://127.0.0.1:{app_port}/_stcore/health", f"{name}-app.log")
        try:
            yield engine_url, f"http://127.0.0.1:{app_port}"
        finally:
            app.terminate()
            try:
                app.wait(timeout=20)
            except subprocess.TimeoutExpired:      # a loaded machine: do not leave it running
                app.kill()
                app.wait()


def open_page(browser, url, name=""):
    """A page of the classroom, drawn to its end (the Instructor panel is its last part), with
    `name` typed in if given. The tests' clicks come after a page has finished drawing, as a
    person's would, not the instant a button appears mid-run.

    On a loaded machine a page has been seen without its Instructor panel for minutes after its
    name was typed, though every full run of the page draws it: as in streamlit/streamlit#13634,
    where the frontend drops what a full run drew when a fragment's run follows at once. A person
    reloads; so does this, once, and the learner's name comes back with it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    page = browser.new_context(viewport={"width": 1400, "height": 1800}).new_page()
    page.set_default_timeout(90_000)
    page.goto(url)
    page.locator(".st-key-cr_name input").wait_for()
    if name:
        page.locator(".st-key-cr_name input").fill(name)
        page.locator(".st-key-cr_name input").press("Enter")
        page.get_by_role("button", name="Send a burst of 8").wait_for()
    try:
        page.get_by_text("Instructor", exact=True).wait_for(timeout=45_000)
    except PlaywrightTimeout:
        print(f"the Instructor panel did not show within 45 s on {name or 'the teacher'}'s page: reloaded")
        page.reload()
        page.get_by_text("Instructor", exact=True).wait_for()
    if name:
        assert page.locator(".st-key-cr_name input").input_value() == name     # kept over the reload
    return page


def chart(page, js: str):
    return page.frame_locator(MEMBERSHIP).locator(".js-plotly-plot").evaluate_all(f"els => els.map(el => {js})")


def own_cells(page) -> int:
    counts = chart(page, "(el._fullData || []).filter(t => t.name === 'your requests (dot)')"
                         ".reduce((n, t) => n + t.x.length, 0)")
    return max(counts, default=0)


def seen_by(page, engine_url) -> str:
    """What a stuck wait could see: the server's requests by tenant and status, the dots and
    traces on the page's batch chart, and the page's warnings, captions and exceptions."""
    with urllib.request.urlopen(engine_url + "/lab/requests?limit=500", timeout=10) as r:
        rows = json.load(r)["requests"]
    by = Counter(f"{row['tenant']}:{row['status']}" for row in rows)
    try:
        traces = chart(page, "(el._fullData || []).map(t => t.name)")
    except Exception as exc:
        traces = f"no chart ({type(exc).__name__})"
    notes = [t[:160] for t in page.locator("[data-testid='stAlert'], [data-testid='stCaptionContainer'], "
                                           "[data-testid='stException']").all_inner_texts()]
    return f"server {dict(by)}; dots {own_cells(page)}; chart traces {traces}; page says {notes}"


def marks(page) -> list[str]:
    return [t for texts in chart(page, "((el._fullLayout && el._fullLayout.annotations) || []).map(a => a.text)")
            for t in texts]


def apply_max_num_seqs(page, token: str, value: int) -> None:
    page.get_by_text("Instructor", exact=True).click()
    page.locator(".st-key-cr_token input").fill(token)
    page.locator(".st-key-cr_token input").press("Enter")
    box = page.locator(".st-key-cr_knob_max_num_seqs input")
    box.fill(str(value))
    page.get_by_role("button", name="Apply to the engine").click()


def policy(engine_url) -> dict:
    with urllib.request.urlopen(engine_url + "/lab/policy") as r:
        return json.load(r)


def test_two_students_and_an_instructor_share_one_engine(classroom):
    from playwright.sync_api import sync_playwright
    engine_url, url = classroom
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        teacher = open_page(browser, url)
        amy, bob = open_page(browser, url, "amy"), open_page(browser, url, "bob")
        for student in (amy, bob):
            student.get_by_role("button", name="Send a burst of 8").click()
        for student in (amy, bob):
            wait_until(lambda: own_cells(student) >= 8, what="the student's requests in the shared chart (a dot each)",
                       explain=lambda: seen_by(student, engine_url))
        labels = "(el._fullData[0].text || []).flat()"
        # cells read "student · request phase": each student's name on their own requests
        wait_until(lambda: len({t.rsplit(" ", 1)[0] for t in sum(chart(teacher, labels), [])
                                if t.startswith(("amy · chatcmpl-", "bob · chatcmpl-"))}) >= 16,
                   what="both bursts on the teacher's chart")
        legend = "(el._fullData || []).filter(t => t.mode === 'markers' && t.name && t.marker).map(t => [t.name, t.marker.color])"
        # each page draws the board of its own latest refresh, so amy's may be a refresh behind the teacher's
        named = wait_until(lambda: (lambda n: n if {"amy (you)", "bob"} <= set(n) else None)(dict(sum(chart(amy, legend), []))),
                           what="both students named in amy's legend")
        assert named["amy (you)"] != named["bob"]   # a colour each

        apply_max_num_seqs(amy, "", 2)
        wait_until(lambda: amy.get_by_text("401").count() > 0, what="the student's change to be refused")
        assert policy(engine_url)["max_num_seqs"] == 16

        apply_max_num_seqs(teacher, TOKEN, 4)
        wait_until(lambda: policy(engine_url)["max_num_seqs"] == 4, what="the instructor's change")
        # The marker stands at the step the change applies from: it shows once the engine runs
        # that step, so the class keeps it busy (the first bursts may have finished by now).
        bob.get_by_role("button", name="Send a burst of 8").click()
        for page in (teacher, amy, bob):
            wait_until(lambda: "max_num_seqs 16→4" in marks(page), what="the change marker on every chart")
        amy.screenshot(path=str(OUT / "classroom.png"))
        browser.close()


def test_the_playground_attached_to_the_server_draws_the_shared_engine(classroom):
    """The Playground's engine choice "shared": Start sends this page's traffic to the server over
    HTTP, and the page draws the shared engine's steps, which hold this page's requests."""
    from playwright.sync_api import sync_playwright
    from test_browser import chart_steps, open_playground, status
    engine_url, url = classroom
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        page = open_playground(context, url.removesuffix("/classroom"), engine="server", continuous="1",
                               rate="2", output_lo="20", output_hi="40")
        assert page.get_by_role("button", name="Step once").is_disabled()   # nobody here owns its steps
        page.get_by_role("button", name="Start", exact=True).click()
        wait_until(lambda: chart_steps(page) >= 5, what="the shared engine's steps on the chart")
        assert page.get_by_text("runs one engine for everyone attached to it").count() == 1
        seen = []
        for _ in range(20):                                  # 20 samples over 10 s: it keeps moving
            seen.append((status(page)["steps"], chart_steps(page)))
            page.wait_for_timeout(500)
        assert all(drawn > 0 for _, drawn in seen), seen
        assert seen[-1][0] > seen[0][0], seen
        with urllib.request.urlopen(engine_url + "/lab/requests?limit=500") as r:
            tenants = {row["tenant"] for row in json.load(r)["requests"]}
        assert any(t.startswith("playground-") for t in tenants), tenants
        page.screenshot(path=str(OUT / "playground-shared.png"))
        page.get_by_role("button", name="Reset", exact=True).click()
        browser.close()


ANY_ENGINE_CHARTS = ("ext_timeline", "ext_gauges_chart", "ext_ttft_s_chart", "ext_tpot_s_chart", "ext_itl_s_chart")


def test_the_any_engine_charts_update_in_place_without_blank_frames(classroom):
    """The Any engine page, connected to the server, sending a load: over 20 s (40 samples) each of its
    five live charts always shows what it drew (no blank frame, as a chart redrawn from scratch shows),
    and the page's number of plots stays the same."""
    from playwright.sync_api import sync_playwright
    from test_browser import DRAWN, PLOTS
    engine_url, url = classroom
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        page.set_default_timeout(90_000)
        page.goto(url.removesuffix("/classroom") + "/any-engine")
        page.get_by_role("button", name="Connect").click()
        page.get_by_text("Connected to").wait_for()
        page.locator(".st-key-ext_num_requests input").fill("400")
        page.locator(".st-key-ext_rate input").fill("2")
        page.locator(".st-key-ext_rate input").press("Enter")
        page.get_by_role("button", name="Send this load").click()

        def drawn(key):
            return page.frame_locator(f".st-key-{key} iframe").locator(".js-plotly-plot").evaluate(DRAWN)
        wait_until(lambda: all(drawn(k) > 0 for k in ANY_ENGINE_CHARTS), timeout=180,
                   what="every chart's first points", explain=lambda: {k: drawn(k) for k in ANY_ENGINE_CHARTS})
        blank, plots = {k: 0 for k in ANY_ENGINE_CHARTS}, set()
        for _ in range(40):
            plots.add(page.evaluate(PLOTS))
            for k in ANY_ENGINE_CHARTS:
                blank[k] += drawn(k) == 0
            page.wait_for_timeout(500)
        page.screenshot(path=str(OUT / "any-engine.png"), full_page=True)
        page.get_by_role("button", name="Stop sending").click()
        browser.close()
    assert sum(blank.values()) == 0, f"samples (of 40) with a blank chart: {blank}"
    assert len(plots) == 1, f"the number of plots changed: {plots}"


def test_a_page_opened_before_the_server_answers_gets_its_instructor_panel_once_it_does():
    """The teacher opens the Classroom, then starts the server: the page waits for the engine's first
    answer, then draws everything, the Instructor panel included (it is drawn with the first board)."""
    from playwright.sync_api import sync_playwright
    engine_port, app_port = free_port(), free_port()
    engine_url = f"http://127.0.0.1:{engine_port}"
    env = {**os.environ, "BATCHING_LAB_INSTRUCTOR_TOKEN": TOKEN, "BATCHING_LAB_ENGINE_URL": engine_url,
           "PYTHONPATH": str(ROOT)}
    procs = [started([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                      "--server.port", str(app_port), "--server.address", "127.0.0.1",
                      "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
                     env, f"http://127.0.0.1:{app_port}/_stcore/health", "classroom-late-app.log")]
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
            page.set_default_timeout(90_000)
            page.goto(f"http://127.0.0.1:{app_port}/classroom")
            page.get_by_text("cannot reach the engine").first.wait_for()
            assert page.get_by_text("Instructor", exact=True).count() == 0
            engine = start(["--model", "tiny", "--device", "cpu", "--trusted-client", "127.0.0.1"], port=engine_port,
                           env=env, log=OUT / "classroom-late-engine.log")
            procs.append(engine.process)
            engine.wait_until_up(120)
            page.get_by_text("Instructor", exact=True).wait_for(timeout=60_000)
            page.get_by_text("Instructor", exact=True).click()
            page.locator(".st-key-cr_token input").wait_for()
            browser.close()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
