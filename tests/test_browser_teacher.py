"""The teacher's view on the Classroom page, in a real Chromium: three students type their names,
do some of lesson 1 and its lab, and the teacher (with the instructor token) sees each one's
progress by lesson and downloads it as CSV. Without the token, or with a wrong one, nothing shows.
"""
import csv
import io
import os

import pytest

from lessons.catalog import load_lessons
from test_browser import CHROMIUM, ROOT, browser, isolated_cache, wait_until  # noqa: F401  (browser: a fixture)
from test_browser_classroom import TOKEN, engine_and_app

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Debian's Chromium is not at {CHROMIUM}")
SHOTS = ROOT.parent / "shots-53"
LESSON_1 = load_lessons()[0][0]


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "learners.sqlite3"
    with isolated_cache() as cache:
        with engine_and_app("teacher", BATCHING_LAB_CACHE=str(cache), BATCHING_LAB_DB=str(db)) as (_, app_url):
            yield app_url, db


def student(browser, url, name):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{url}/classroom")
    page.locator(".st-key-cr_name input").fill(name)
    page.locator(".st-key-cr_name input").press("Enter")
    page.get_by_role("button", name="Send a burst of 8").wait_for()       # the name is taken
    return context, page


def answer_first_check(page, url):
    """Lesson 1's first quiz question, answered right, and Check."""
    q = LESSON_1.quiz[0]
    page.goto(f"{url}/lesson-{LESSON_1.id}")
    page.get_by_text(q.choices[q.answer], exact=True).click()
    page.locator(f".st-key-check-{LESSON_1.id}-0 button").click()       # the key, its colons made dashes
    page.locator("[data-testid=stAlert]").filter(has_text="Correct.").first.wait_for()


def commit_lab_predictions(page, url):
    page.goto(f"{url}/why_batch")
    for _ in range(2):
        page.get_by_role("button", name="Commit my prediction").first.click()
        page.wait_for_timeout(1500)
    wait_until(lambda: page.get_by_text("Locked: a result has been shown").count() == 2, timeout=120,
               what="both lab guesses locked")


def teacher_table(page) -> list[list[str]]:
    """The progress table's rows, read from the CSV download (the table itself is drawn on a canvas)."""
    with page.expect_download() as got:
        page.locator(".st-key-cr_class_csv button").click()
    with open(got.value.path(), encoding="utf-8") as f:
        return list(csv.reader(io.StringIO(f.read())))


def test_the_teacher_sees_each_students_progress_and_downloads_it(classroom, browser):
    url, db = classroom
    ada, ada_page = student(browser, url, "Ada")
    answer_first_check(ada_page, url)
    commit_lab_predictions(ada_page, url)
    ben, ben_page = student(browser, url, "Ben")
    ben_page.goto(f"{url}/lesson-{LESSON_1.id}")
    ben_page.get_by_role("button", name="Mark as read").click()
    ben_page.get_by_text("Lessons read 1/").wait_for()
    cy, cy_page = student(browser, url, "Cy")

    teacher = browser.new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True)
    page = teacher.new_page()
    page.set_default_timeout(120_000)
    page.goto(f"{url}/classroom")
    page.get_by_text("Instructor", exact=True).click()
    page.locator(".st-key-cr_token input").fill("not-the-token")
    page.locator(".st-key-cr_token input").press("Enter")
    page.get_by_text("The class's progress needs the instructor token").wait_for()
    assert page.locator(".st-key-cr_class_csv button").count() == 0
    page.locator(".st-key-cr_token input").fill(TOKEN)
    page.locator(".st-key-cr_token input").press("Enter")
    table = page.locator(".st-key-cr_class [data-testid=stDataFrame]")
    table.wait_for()
    table.scroll_into_view_if_needed()
    page.wait_for_timeout(1000)
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / "teacher-table-1280x720.png"))
    rows = teacher_table(page)
    (SHOTS / "class-progress.csv").write_text("\n".join(",".join(r) for r in rows) + "\n")
    header, body = rows[0], rows[1:]
    assert header == ["student", "lesson", "read", "predictions made", "revealed", "close", "quiz answered",
                      "quiz right first try"]
    by = {(r[0], r[1]): r for r in body}
    lesson1 = next(r[1] for r in body if r[0] == "Ada")
    assert lesson1.startswith("1 · ")
    assert by[("Ada", lesson1)][2:5] == ["no", "2", "2"] and by[("Ada", lesson1)][6:] == [
        f"1 of {len(LESSON_1.quiz)}", "1"], "one check, right on the first try"
    assert by[("Ben", lesson1)][2:5] == ["yes", "0", "0"] and by[("Ben", lesson1)][6].startswith("0 of ")
    assert by[("Cy", "—")][2] == "—", "a student who has done nothing yet still has a row"
    assert sorted({r[0] for r in body}) == ["Ada", "Ben", "Cy"]

    page.get_by_role("button", name="Reset for a new class").click()
    page.get_by_role("button", name="Remove every name").click()
    page.get_by_text("No student has typed a name yet.").wait_for()
    page.screenshot(path=str(SHOTS / "teacher-after-reset-1280x720.png"))
    for c in (ada, ben, cy, teacher):
        c.close()
