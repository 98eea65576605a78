"""Screens a class can trust, in a real browser at a laptop's 1280x720 (and a phone's 390x844):
the classroom's queue chart stops at a pause between bursts and its per-student tables show
every column; the Playground has a chart above the fold after Start and names its batching mode;
the Static vs continuous lab's grids are solid; on a phone no lesson's formula and no link's label
is cut off at the screen's edge. Screenshots go to test-output/ (SCREENS_OUT overrides it), one
per screen.
"""
import os
from pathlib import Path

import numpy as np
import pytest

from test_browser import CHROMIUM, OUT, app_server, browser, open_playground, status_el, wait_until  # noqa: F401  (browser: a fixture)
from test_browser_classroom import TOKEN, classroom, open_page, own_cells  # noqa: F401  (classroom: a fixture)

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Debian's Chromium is not at {CHROMIUM}")
SHOTS = Path(os.environ.get("SCREENS_OUT", OUT))
LAPTOP, PHONE = {"width": 1280, "height": 720}, {"width": 390, "height": 844}


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name))


def clipped_tables(page) -> list[str]:
    """The data tables whose columns run past their box (a horizontal scroll bar hides the last)."""
    return page.locator("[data-testid=stDataFrame]").evaluate_all("""els => els.flatMap(el => {
        const s = el.querySelector('.dvn-scroller');
        return s && s.scrollWidth > s.clientWidth + 1 ? [el.innerText.slice(0, 80) + ' ' + s.scrollWidth + '>' + s.clientWidth] : [];
    })""")


def queue_line(page) -> tuple[np.ndarray, np.ndarray]:
    """The classroom queue chart's running line as drawn: (x, y), null as NaN."""
    xs, ys = page.frame_locator(".st-key-cr_queue iframe").locator(".js-plotly-plot").evaluate(
        "el => { const t = el._fullData.find(t => t.name === 'running'); return [t.x, t.y]; }")
    return np.array(xs, float), np.array([np.nan if v is None else v for v in ys], float)


def test_the_classroom_draws_a_pause_as_a_gap_and_every_column_of_its_tables(classroom, browser):  # noqa: F811
    engine_url, url = classroom
    amy = open_page(browser, url, "amy")
    amy.set_viewport_size(LAPTOP)
    send = amy.get_by_role("button", name="Send a burst of 8")
    send.click()
    wait_until(lambda: own_cells(amy) >= 8, what="amy's first burst")
    # the burst ends, the engine sits idle a while, then a second burst
    wait_until(lambda: "yours: 0 running, 0 waiting" in " ".join(
        amy.locator("[data-testid=stMarkdownContainer]").all_inner_texts()), timeout=240, what="the first burst to finish")
    amy.wait_for_timeout(12_000)     # idle well past 20 usual steps, however slow a busy machine makes them
    send.click()

    def paused_line():
        x, y = queue_line(amy)
        return (x, y) if np.isnan(y).any() and x[-1] > x[np.isnan(y)][0] else None
    x, y = wait_until(paused_line, timeout=120, what="the queue chart after the second burst, with a gap")
    drawn = ~np.isnan(y[:-1]) & ~np.isnan(y[1:])
    assert (np.diff(x)[drawn] < 8).all(), "no line crosses the 12 s pause (a slow step may take a second or two)"
    amy.locator(".st-key-cr_queue").scroll_into_view_if_needed()
    amy.wait_for_timeout(1500)
    shot(amy, "classroom-1280x720.png")
    amy.locator("[data-testid=stDataFrame]").first.scroll_into_view_if_needed()
    amy.wait_for_timeout(1000)
    shot(amy, "classroom-tables-1280x720.png")
    assert not clipped_tables(amy), clipped_tables(amy)
    teacher = open_page(browser, url)
    teacher.set_viewport_size(LAPTOP)
    teacher.get_by_text("Instructor", exact=True).click()
    teacher.locator(".st-key-cr_token input").fill(TOKEN)
    teacher.locator(".st-key-cr_token input").press("Enter")
    teacher.get_by_text("Each student's latest requests").wait_for()
    wait_until(lambda: teacher.locator("[data-testid=stDataFrame]").count() >= 2, what="the per-student tables")
    teacher.get_by_text("Each student's latest requests").scroll_into_view_if_needed()
    teacher.wait_for_timeout(1500)
    shot(teacher, "classroom-teacher-1280x720.png")
    assert not clipped_tables(teacher), clipped_tables(teacher)
    teacher.context.close()
    amy.set_viewport_size(PHONE)
    amy.wait_for_timeout(1500)
    amy.locator(".st-key-cr_membership").scroll_into_view_if_needed()
    shot(amy, "classroom-390x844.png")
    amy.locator("[data-testid=stDataFrame]").first.scroll_into_view_if_needed()
    amy.wait_for_timeout(800)
    shot(amy, "classroom-tables-390x844.png")
    amy.context.close()


@pytest.fixture(scope="module")
def app():
    with app_server() as running:
        yield running


def chart_tops(page) -> list[float]:
    """Where each chart on the page starts (px from the page's top): plotly's own charts and the
    live charts' frames."""
    return page.evaluate("""() => [...document.querySelectorAll(
        '.js-plotly-plot, [data-testid=stPlotlyChart], iframe[title*="live_chart"], iframe')]
        .map(el => el.getBoundingClientRect()).filter(r => r.height > 100).map(r => r.top + window.scrollY)""")


def test_the_playground_shows_a_chart_above_the_fold_and_names_its_batching_mode(app, browser):
    url, _ = app
    context = browser.new_context(viewport=LAPTOP)
    page = open_playground(context, url, mode="static")
    page.get_by_role("button", name="Start", exact=True).click()
    wait_until(lambda: "· static batching ·" in status_el(page).inner_text(), what="the status line naming static batching")
    wait_until(lambda: chart_tops(page), what="a chart on the page")
    page.wait_for_timeout(3000)
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "playground-1280x720.png")
    line = status_el(page).inner_text()
    assert "(continuous)" not in line and "continuous" not in line, line
    assert min(chart_tops(page)) < LAPTOP["height"] - 120, chart_tops(page)
    page.get_by_role("button", name="Reset", exact=True).click()
    context.close()


def white_columns(page, chart) -> int:
    """Pixel columns of a membership grid that are white from its top row to its bottom one,
    between its first step and its last: gaps that hide the grid's grey empty slots."""
    from PIL import Image
    import io
    box = chart.evaluate("""el => { const p = el.querySelector('.js-plotly-plot'), L = p._fullLayout, h = p._fullData[0];
        const xs = h.x, r = p.getBoundingClientRect();
        return {x0: r.left + L.xaxis._offset + L.xaxis.l2p(xs[0] - 0.5), x1: r.left + L.xaxis._offset + L.xaxis.l2p(xs[xs.length - 1] + 0.5),
                y0: r.top + L.yaxis._offset, y1: r.top + L.yaxis._offset + L.yaxis._length, n: xs.length}; }""")
    image = np.asarray(Image.open(io.BytesIO(page.screenshot())).convert("L"), int)
    region = image[int(box["y0"]) + 2:int(box["y1"]) - 2, int(box["x0"]) + 2:int(box["x1"]) - 2]
    return int((region >= 250).all(axis=0).sum())


def test_the_static_vs_continuous_grids_are_solid(app, browser):
    url, _ = app
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(f"{url}/static_vs_continuous?svc_workload=mixed")
    page.get_by_text("Predict first.").first.wait_for()
    for n in range(2):
        page.get_by_role("button", name="Commit my prediction").first.click()
        page.get_by_text("Your prediction:").nth(n).wait_for()
    grids = page.locator("[data-testid=stPlotlyChart]").filter(has=page.locator(".js-plotly-plot"))
    wait_until(lambda: grids.count() >= 2, what="both replay grids")
    page.get_by_text("Replay, moment by moment").scroll_into_view_if_needed()
    page.wait_for_timeout(2000)
    grids.nth(1).scroll_into_view_if_needed()
    page.wait_for_timeout(1000)
    shot(page, "static-vs-continuous-1280x720.png")
    gaps = [white_columns(page, grids.nth(i)) for i in range(2)]
    assert gaps == [0, 0], gaps
    page.get_by_text("Wasted slot-steps (continuous)").first.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    shot(page, "static-vs-continuous-card-1280x720.png")
    context.close()


def test_the_cluster_lab_labels_its_simulated_answers(app, browser):
    url, _ = app
    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    page.set_default_timeout(180_000)
    page.goto(f"{url}/cluster")
    page.get_by_text("Predict first.").first.wait_for()
    page.get_by_role("button", name="Commit my prediction").first.click()
    label = page.locator("[data-testid=stMetric]", has_text="Simulated").first
    label.wait_for()
    label.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    shot(page, "cluster-1280x720.png")
    assert page.locator("[data-testid=stMetricLabel]", has_text="Measured").count() == 0
    context.close()


def cut_off_on_a_phone(page) -> list[str]:
    """Formulas that run past the screen's right edge in a paragraph that does not scroll, and
    link labels wider than their box (the end of either is cut off)."""
    return page.evaluate("""() => [
        ...[...document.querySelectorAll('.katex')].filter(k => {
            const box = k.closest('p, li'), style = box && getComputedStyle(box).overflowX;
            return k.getBoundingClientRect().right > innerWidth + 1 && !['auto', 'scroll'].includes(style);
        }).map(k => 'formula: ' + k.innerText.replace(/\\s+/g, ' ').slice(0, 60)),
        ...[...document.querySelectorAll('[data-testid=stPageLink] p')]
            .filter(p => p.clientWidth > 0 && p.scrollWidth > p.clientWidth + 1)
            .map(p => 'link: ' + p.innerText.slice(0, 60))]""")


def test_no_formula_or_link_is_cut_off_on_a_phone(app, browser):
    """Every lesson and Home at 390 px: a wide formula scrolls in its own box, a long link wraps."""
    from lessons.catalog import load_lessons
    from lessons.views import lesson_url_path
    url, _ = app
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.set_default_timeout(120_000)
    cut = {}
    page.goto(url)
    page.locator("[data-testid=stPageLink]", has_text="14.").first.wait_for()
    cut["home"] = cut_off_on_a_phone(page)
    for lesson in load_lessons()[0]:
        page.goto(f"{url}/{lesson_url_path(lesson.id)}")
        page.get_by_role("button", name="Mark as read").first.wait_for()
        page.wait_for_timeout(500)
        cut[lesson.id] = cut_off_on_a_phone(page)
    context.close()
    assert not {where: what for where, what in cut.items() if what}, cut
