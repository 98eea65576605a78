"""Lesson pages, glossary page, search and progress, driven through AppTest.

The harness tests/apps/lessons_app.py wires the pages as app.py does, with one stand-in lab
(why_batch); a test switches pages by putting a url_path in session_state["goto"].
"""
import re
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lessons.catalog import FOLDER, find_links, load_glossary, load_lessons
from lessons.views import FOLDER_ENV, LAB_URL_PATHS, LESSON_URL_PREFIX, MAX_HITS, READ_ICON, UNREAD_ICON

APP = str(Path(__file__).parent / "apps" / "lessons_app.py")
LESSONS, _ = load_lessons()
GLOSSARY = load_glossary()
N_CHECKS = sum(len(l.quiz) for l in LESSONS)
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def start() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert not at.exception
    return at


def goto(at: AppTest, url_path: str) -> AppTest:
    at.session_state["goto"] = url_path
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def links(at: AppTest) -> list[str]:
    return [u for m in at.main.markdown for u in MD_LINK.findall(m.value)]


def progress_line(at: AppTest) -> str:
    return next(c.value for c in at.sidebar.caption if c.value.startswith("Lessons read"))


def search_links(at: AppTest) -> list:
    """Sidebar page links that are search results (the progress list sits in an expander)."""
    listed = {id(pl.proto) for pl in at.sidebar.expander[0].get("page_link")}
    return [pl for pl in at.sidebar.get("page_link") if id(pl.proto) not in listed]


@pytest.fixture(scope="module")
def rendered() -> dict[str, AppTest]:
    """Every lesson page and the glossary page, each rendered in its own session (the lessons' worked-example
    numbers worked out first, as the app does on its background thread: ui/lesson_pictures.warm)."""
    from course.numbers import numbers
    from ui.calculators import learner_step_model
    numbers(learner_step_model())
    out = {}
    for lesson in LESSONS:
        out[lesson.id] = goto(start(), LESSON_URL_PREFIX + lesson.id)
    out["glossary"] = goto(start(), "glossary")
    return out


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_every_lesson_page_renders(rendered, lesson):
    at = rendered[lesson.id]
    assert [t.value for t in at.title] == [f"{lesson.order} · {lesson.title}"]
    assert any(f"{lesson.minutes} min read" in c.value for c in at.main.caption)
    assert any(lesson.summary in m.value for m in at.main.markdown)
    body = "\n".join(m.value for m in at.main.markdown)
    assert "## The claim" in body and "$" in body       # formulas go to KaTeX as written
    assert not find_links(body), "every link marker is resolved or reduced to its label"
    assert "{{" not in body, "lab numbers and pictures are resolved, not shown as markers"
    assert [r.value for r in at.radio] == [None] * len(lesson.quiz)
    assert all(r.label.endswith(q.question) for r, q in zip(at.radio, lesson.quiz))
    assert len([b for b in at.button if b.label == "Check"]) == len(lesson.quiz)
    assert [b.label for b in at.button if b.label == "Mark as read"] == ["Mark as read"]
    assert not at.warning, "no lesson problems and no unknown pictures in the shipped lessons"


def test_prev_next_and_try_it_links(rendered):
    def page_links(at):
        return {pl.proto.label: pl.proto.page for pl in at.main.get("page_link")}
    first, last = LESSONS[0], LESSONS[-1]
    first_links = page_links(rendered[first.id])
    assert first_links[f"Next: 2 · {LESSONS[1].title}"] == LESSON_URL_PREFIX + LESSONS[1].id
    assert not any(k.startswith("Previous") for k in first_links)
    # the registered lab gets a button and a body link; the others are plain text
    assert first.labs == ["why_batch"]
    assert first_links["Open the lab: Why batch lab"] == LAB_URL_PATHS["why_batch"]
    assert "/why_batch" in links(rendered[first.id])
    last_links = page_links(rendered[last.id])
    assert last_links[f"Previous: {LESSONS[-2].order} · {LESSONS[-2].title}"] == LESSON_URL_PREFIX + LESSONS[-2].id
    assert last_links["Last lesson done. Review the glossary"] == "glossary"
    assert not any(k.startswith("Open the lab") for k in last_links)
    assert any("is not available in this app yet" in m.value for m in rendered[last.id].main.markdown)
    assert not any(u.startswith("/playground") for u in links(rendered[last.id]))


def test_every_glossary_link_resolves_to_an_anchor(rendered):
    anchors = {h.proto.anchor for h in rendered["glossary"].subheader}
    assert anchors == set(GLOSSARY)
    seen = set()
    for lesson in LESSONS:
        for u in links(rendered[lesson.id]):
            path, _, anchor = u.partition("#")
            if path == "/glossary":
                assert anchor in anchors, f"{lesson.id}: {u}"
                seen.add(anchor)
            else:
                assert path in {"/" + LESSON_URL_PREFIX + l.id for l in LESSONS} | {"/why_batch"}, u
    assert seen >= {i for l in LESSONS for k, i in find_links(l.body) if k == "glossary"}
    # on the glossary page, terms link to terms on the same page
    for u in links(rendered["glossary"]):
        if u.startswith("#"):
            assert u[1:] in anchors, u


def test_glossary_page_terms_see_links_filter_and_selected_term():
    at = goto(start(), "glossary")
    assert len(at.subheader) == len(GLOSSARY)
    see = {pl.proto.page for pl in at.main.get("page_link")}
    assert see == {LESSON_URL_PREFIX + i for t in GLOSSARY.values() for i in t.see}
    at.text_input(key="glossary_filter").input("little").run()
    shown = [h.proto.anchor for h in at.subheader]
    assert "littles-law" in shown and len(shown) < len(GLOSSARY)
    at.text_input(key="glossary_filter").input("").run()
    at.query_params["term"] = "ttft"
    at.run()
    assert any(m.value.startswith(f"**{GLOSSARY['ttft'].term}**") for m in at.main.markdown)


def check(at: AppTest, lesson_id: str, n: int, choice: int | None = None) -> AppTest:
    if choice is not None:
        at.radio(key=f"quiz:{lesson_id}:{n}").set_value(choice)
    at.button(key=f"check:{lesson_id}:{n}").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_check_hints_first_reveals_after_a_second_try_and_scores_only_first_tries():
    lesson = LESSONS[0]
    at = goto(start(), LESSON_URL_PREFIX + lesson.id)
    assert progress_line(at) == f"Lessons read 0/{len(LESSONS)}, checks 0/{N_CHECKS} answered (0 right on the first try)"
    q0, q1, q2 = lesson.quiz[:3]

    check(at, lesson.id, 0)                                           # nothing picked yet
    assert any("Pick an answer" in i.value for i in at.info)
    assert progress_line(at).endswith(f"checks 0/{N_CHECKS} answered (0 right on the first try)")

    check(at, lesson.id, 0, q0.answer)
    assert [s.value for s in at.success] == [f"**Correct.** {q0.explanation}"]
    assert progress_line(at).endswith(f"checks 1/{N_CHECKS} answered (1 right on the first try)")

    wrong = [i for i in range(len(q1.choices)) if i != q1.answer]
    check(at, lesson.id, 1, wrong[0])                                 # a hint, no reveal
    assert len(at.error) == 1 and q1.why[wrong[0]] in at.error[0].value
    assert "The answer is" not in at.error[0].value and q1.explanation not in at.error[0].value
    check(at, lesson.id, 1, wrong[1])                                 # the second wrong try reveals
    assert f"The answer is *{q1.choices[q1.answer]}*" in at.error[0].value and q1.explanation in at.error[0].value
    assert progress_line(at).endswith(f"checks 2/{N_CHECKS} answered (1 right on the first try)")
    at.radio(key=f"quiz:{lesson.id}:1").set_value(q1.answer).run()   # a new pick hides the old verdict
    assert not at.error

    check(at, lesson.id, 2, next(i for i in range(len(q2.choices)) if i != q2.answer))
    assert progress_line(at).startswith(f"Lessons read 1/{len(LESSONS)}, checks 3/"), "all checks answered: read"
    check(at, lesson.id, 2, q2.answer)                                # a retry solves it but does not score
    worked = q2.render(lambda lab, name: None)                        # no lab run here: the worked example
    assert "{=" not in worked.explanation
    assert [s.value for s in at.success] == [f"**Correct.** {q0.explanation}", f"**Correct on try 2.** {worked.explanation}"]
    assert progress_line(at).endswith(f"checks 3/{N_CHECKS} answered (1 right on the first try)")

    # progress and answers survive a trip to another lesson and back
    goto(at, LESSON_URL_PREFIX + LESSONS[1].id)
    assert progress_line(at).startswith(f"Lessons read 1/{len(LESSONS)}, checks 3/")
    marks = {pl.proto.page: pl.proto.icon for pl in at.sidebar.expander[0].get("page_link")}
    assert marks[LESSON_URL_PREFIX + LESSONS[0].id] == READ_ICON
    assert marks[LESSON_URL_PREFIX + LESSONS[1].id] == UNREAD_ICON, "opening a lesson does not mark it read"
    goto(at, LESSON_URL_PREFIX + lesson.id)
    assert at.radio(key=f"quiz:{lesson.id}:0").value == q0.answer
    assert [s.value for s in at.success][0] == f"**Correct.** {q0.explanation}"


def test_mark_as_read_at_the_end_of_a_lesson():
    lesson = LESSONS[1]
    at = goto(start(), LESSON_URL_PREFIX + lesson.id)
    assert progress_line(at).startswith(f"Lessons read 0/{len(LESSONS)}")
    next(b for b in at.button if b.label == "Mark as read").click().run()
    assert progress_line(at).startswith(f"Lessons read 1/{len(LESSONS)}")
    assert not [b for b in at.button if b.label == "Mark as read"]
    marks = {pl.proto.page: pl.proto.icon for pl in at.sidebar.expander[0].get("page_link")}
    assert marks[LESSON_URL_PREFIX + lesson.id] == READ_ICON


def test_choices_are_shuffled_per_learner_and_stable_for_one():
    lesson = LESSONS[0]
    orders = []
    for _ in range(4):
        at = goto(start(), LESSON_URL_PREFIX + lesson.id)
        orders.append(tuple(tuple(r.options) for r in at.radio))
        at.run()
        assert tuple(tuple(r.options) for r in at.radio) == orders[-1], "the same learner sees the same order"
    assert len(set(orders)) > 1, "different sessions see different orders"


def test_search_from_the_sidebar():
    at = start()                                       # the home page: search works on every page
    box = at.sidebar.text_input(key="lesson_search")
    box.input("t").run()
    assert search_links(at) == []
    assert any("at least 2 characters" in c.value for c in at.sidebar.caption)

    at.sidebar.text_input(key="lesson_search").input("ttft").run()
    hits = search_links(at)
    assert 1 <= len(hits) <= MAX_HITS
    assert hits[0].proto.page == "glossary" and hits[0].proto.query_string == "term=ttft"
    assert any(GLOSSARY["ttft"].definition[:40] in c.value for c in at.sidebar.caption)
    assert any(h.proto.page == LESSON_URL_PREFIX + "latency-metrics" for h in hits)

    at.sidebar.text_input(key="lesson_search").input("the").run()
    assert len(search_links(at)) == MAX_HITS
    assert any("more; type more" in c.value for c in at.sidebar.caption)

    at.sidebar.text_input(key="lesson_search").input("zzzz-nothing").run()
    assert search_links(at) == [] and any("No lesson" in c.value for c in at.sidebar.caption)


def test_broken_lesson_is_named_and_the_others_still_render(tmp_path, monkeypatch):
    for p in [*FOLDER.glob("0[2-4]-*.md"), FOLDER / "glossary.md"]:
        shutil.copy(p, tmp_path / p.name)
    (tmp_path / "01-broken.md").write_text("no front matter here\n", encoding="utf-8")
    monkeypatch.setenv(FOLDER_ENV, str(tmp_path))
    lessons, _ = load_lessons(tmp_path)
    for lesson in lessons:
        at = goto(start(), LESSON_URL_PREFIX + lesson.id)
        assert [t.value for t in at.title] == [f"{lesson.order} · {lesson.title}"]
        assert len(at.warning) == 1
        notice = at.warning[0].value
        assert "Lesson problems" in notice and "01-broken.md" in notice and "missing front matter" in notice
        assert progress_line(at).startswith(f"Lessons read 0/3, checks 0/{sum(len(l.quiz) for l in lessons)}")
        # links to lessons that are not in this folder fall back to plain text
        assert all(not u.startswith("/" + LESSON_URL_PREFIX) or u[1 + len(LESSON_URL_PREFIX):] in
                   {l.id for l in lessons} for u in links(at))
    at = goto(start(), "glossary")
    assert "01-broken.md" in at.warning[0].value
    assert {pl.proto.page for pl in at.main.get("page_link")} <= {LESSON_URL_PREFIX + l.id for l in lessons}
    listed = [pl.proto.page for pl in at.sidebar.expander[0].get("page_link")]
    assert listed == [LESSON_URL_PREFIX + l.id for l in lessons]   # the broken lesson has no page


def test_a_question_quotes_the_learners_own_measurement(monkeypatch):
    lesson = next(l for l in LESSONS if l.id == "latency-metrics")
    n, q = next((n, q) for n, q in enumerate(lesson.quiz) if q.measured_with)
    at = goto(start(), LESSON_URL_PREFIX + lesson.id)
    assert at.radio(key=f"quiz:{lesson.id}:{n}").label.endswith(f"{q.measured_without} {q.question}")
    measured = {("slo_goodput", "top_rate"): "8 req/s", ("slo_goodput", "ttft_p95_top_rate"): "3.2 s"}
    monkeypatch.setattr("lessons.quiz.measurement", lambda lab, name: measured.get((lab, name)))
    at.run()
    label = at.radio(key=f"quiz:{lesson.id}:{n}").label
    assert "8 req/s" in label and "3.2 s" in label and q.measured_without not in label


def test_pictures_render_and_an_unknown_one_is_named(tmp_path, monkeypatch):
    for p in [*FOLDER.glob("0[1-2]-*.md"), FOLDER / "glossary.md"]:
        shutil.copy(p, tmp_path / p.name)
    two = tmp_path / "02-static-vs-continuous.md"
    two.write_text(two.read_text(encoding="utf-8").replace("{{place:picture:static_vs_continuous}}", "{{place:picture:no_such_picture}}"),
                   encoding="utf-8")
    monkeypatch.setenv(FOLDER_ENV, str(tmp_path))
    at = goto(start(), LESSON_URL_PREFIX + "static-vs-continuous")
    assert len(at.warning) == 1 and "'no_such_picture' is not available" in at.warning[0].value
    assert any("## Membership decided before every step" in m.value for m in at.main.markdown), "the text around it still shows"
