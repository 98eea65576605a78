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
    """Every lesson page and the glossary page, each rendered in its own session."""
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
    body = next(m.value for m in at.main.markdown if "## The claim" in m.value)
    assert "$" in body                                  # formulas go to KaTeX as written
    assert not find_links(body), "every link marker is resolved or reduced to its label"
    assert [r.value for r in at.radio] == [None] * len(lesson.quiz)
    assert [r.label.split("** ", 1)[1] for r in at.radio] == [q.question for q in lesson.quiz]
    assert len([b for b in at.button if b.label == "Check"]) == len(lesson.quiz)
    assert not at.warning, "no lesson problems with the shipped lessons"


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


def test_answering_a_check_shows_the_explanation_and_updates_progress():
    lesson = LESSONS[0]
    at = goto(start(), LESSON_URL_PREFIX + lesson.id)
    assert progress_line(at) == f"Lessons read 1/{len(LESSONS)}, checks 0/{N_CHECKS} answered (0 correct)"
    q0, q1 = lesson.quiz[0], lesson.quiz[1]

    at.button(key=f"check:{lesson.id}:0").click().run()           # nothing picked yet
    assert any("Pick an answer" in i.value for i in at.info)
    assert progress_line(at).endswith(f"checks 0/{N_CHECKS} answered (0 correct)")

    at.radio(key=f"quiz:{lesson.id}:0").set_value(q0.answer)
    at.button(key=f"check:{lesson.id}:0").click().run()
    assert [s.value for s in at.success] == [f"**Correct.** {q0.explanation}"]
    assert progress_line(at).endswith(f"checks 1/{N_CHECKS} answered (1 correct)")

    wrong = (q1.answer + 1) % len(q1.choices)
    at.radio(key=f"quiz:{lesson.id}:1").set_value(wrong)
    at.button(key=f"check:{lesson.id}:1").click().run()
    assert len(at.error) == 1 and q1.explanation in at.error[0].value
    assert q1.choices[q1.answer] in at.error[0].value
    assert progress_line(at).endswith(f"checks 2/{N_CHECKS} answered (1 correct)")

    at.radio(key=f"quiz:{lesson.id}:1").set_value(q1.answer).run()  # a new pick hides the old verdict
    assert not at.error

    # progress and answers survive a trip to another lesson and back
    goto(at, LESSON_URL_PREFIX + LESSONS[1].id)
    assert progress_line(at).startswith(f"Lessons read 2/{len(LESSONS)}, checks 2/")
    marks = {pl.proto.page: pl.proto.icon for pl in at.sidebar.expander[0].get("page_link")}
    assert marks[LESSON_URL_PREFIX + LESSONS[0].id] == READ_ICON
    assert marks[LESSON_URL_PREFIX + LESSONS[2].id] == UNREAD_ICON
    goto(at, LESSON_URL_PREFIX + lesson.id)
    assert at.radio(key=f"quiz:{lesson.id}:0").value == q0.answer
    assert [s.value for s in at.success] == [f"**Correct.** {q0.explanation}"]
    assert progress_line(at).startswith(f"Lessons read 2/{len(LESSONS)}, checks 2/")


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
        assert progress_line(at).startswith(f"Lessons read 1/3, checks 0/{sum(len(l.quiz) for l in lessons)}")
        # links to lessons that are not in this folder fall back to plain text
        assert all(not u.startswith("/" + LESSON_URL_PREFIX) or u[1 + len(LESSON_URL_PREFIX):] in
                   {l.id for l in lessons} for u in links(at))
    at = goto(start(), "glossary")
    assert "01-broken.md" in at.warning[0].value
    assert {pl.proto.page for pl in at.main.get("page_link")} <= {LESSON_URL_PREFIX + l.id for l in lessons}
    listed = [pl.proto.page for pl in at.sidebar.expander[0].get("page_link")]
    assert listed == [LESSON_URL_PREFIX + l.id for l in lessons]   # the broken lesson has no page
