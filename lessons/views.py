"""The lesson pages, the glossary page, search and progress: Streamlit views over lessons/catalog.

app.py wires it up through lessons/pages.py: the lab pages are the st.Page objects of
course/registry.py, keyed by lab id, and every page calls search_sidebar() and progress_sidebar().

URLs: a lesson lives at /lesson-<lesson id> (e.g. /lesson-why-batch), the glossary at /glossary
with one anchor per term (/glossary#ttft), a lab at /<LAB_URL_PATHS[lab id]>. Progress (lessons
read, checks answered) lives in st.session_state and the learners' store (lessons/progress.py), so it
comes back after a reload or a restart; "Start over" forgets it; the quiz is lessons/quiz.py. A body
line `{{place:picture:<id>}}` shows that picture (ui.lesson_pictures), `{{place:calculator:<id>}}` that
calculator (ui.calculators); a `{{number:...}}` is filled in from code (lessons/catalog.py).
Links inside lesson text are Markdown links, which Streamlit opens in a new tab; the buttons
(Try it, previous/next, search results, the lesson list) navigate inside the app and keep progress.

The lessons folder is lessons/ unless the BATCHING_LAB_LESSONS_DIR environment variable names
another one (tests use this to load a broken lesson next to good ones).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import streamlit as st

from lessons import catalog, progress
from lessons.catalog import GlossaryTerm, Lesson, LessonError, render_links, search
from lessons.markers import find_example_numbers, render_numbers, split_pictures, tag_machines
from lessons.quiz import show_quiz
from ui import calculators, learner, lesson_pictures, predict
from ui.machine_tags import badge_for
from course.registry import lab_title
from engine import settings

# A lab page's url_path is its lab id (underscores kept): app.py registers every lab page with
# st.Page(..., url_path=LAB_URL_PATHS[lab_id]), and lesson text links to /<that path>.
LAB_URL_PATHS: dict[str, str] = {lab_id: lab_id for lab_id in catalog.LAB_IDS}
LESSON_URL_PREFIX = "lesson-"          # lesson "why-batch" -> url_path "lesson-why-batch"
GLOSSARY_URL_PATH = "glossary"
FOLDER_ENV = settings.LESSONS_DIR
MAX_HITS = 10
MIN_QUERY = 2

SEARCH_KEY = "lesson_search"
FILTER_KEY = "glossary_filter"
READ_ICON, UNREAD_ICON = ":material/check_circle:", ":material/radio_button_unchecked:"
GLOSSARY_ICON = ":material/menu_book:"


# ---- the catalog, loaded once per change of the files ----------------------------------------

@dataclass(slots=True)
class Site:
    folder: Path
    lessons: list[Lesson]
    problems: list[LessonError]          # lesson files (and the glossary) that failed to load
    glossary: dict[str, GlossaryTerm]

    def lesson(self, lesson_id: str) -> Lesson | None:
        return next((l for l in self.lessons if l.id == lesson_id), None)


_cache: dict[tuple, Site] = {}


def lessons_folder() -> Path:
    return settings.lessons_dir() or Path(catalog.FOLDER)


def load_site() -> Site:
    """Lessons and glossary from the lessons folder; reloaded when a file there changes."""
    folder = lessons_folder()
    gloss_path = folder / "glossary.md"
    if not gloss_path.exists():
        gloss_path = catalog.FOLDER / "glossary.md"
    files = sorted(folder.glob("*.md")) + [gloss_path]
    key = (str(folder),) + tuple((str(p), *_stamp(p)) for p in files)
    site = _cache.get(key)
    if site is None:
        lessons, problems = catalog.load_lessons(folder)
        try:
            glossary = catalog.load_glossary(gloss_path)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            glossary = {}
            problems = problems + [LessonError(gloss_path, f"{gloss_path.name}: {e}")]
        site = Site(folder, lessons, problems, glossary)
        _cache.clear()
        _cache[key] = site
    return site


def _stamp(path: Path) -> tuple[int, int]:
    try:
        s = path.stat()
        return s.st_mtime_ns, s.st_size
    except OSError:
        return -1, -1


# ---- URLs -----------------------------------------------------------------------------------

def lesson_url_path(lesson_id: str) -> str:
    return LESSON_URL_PREFIX + lesson_id


def url(path: str) -> str:
    """An absolute app URL for a page path (and #anchor), honouring server.baseUrlPath."""
    base = (st.get_option("server.baseUrlPath") or "").strip("/")
    return "/" + "/".join(part for part in (base, path) if part)


def _resolvers(site: Site, pages: Mapping[str, st.Page], glossary_page: st.Page,
               labs: Mapping[str, st.Page]):
    """Marker resolvers for render_links. URLs come from the page objects given to st.navigation,
    so a page that became the default (url_path "") still gets the right link."""
    return (lambda i: url(f"{glossary_page.url_path}#{i}") if i in site.glossary else None,
            lambda i: url(labs[i].url_path) if _available(labs.get(i)) else None,
            lambda i: url(pages[i].url_path) if i in pages else None)


def _available(page: st.Page | None) -> bool:
    """Whether a lab page was handed to us and (as far as Streamlit tells) is registered."""
    if page is None:
        return False
    try:   # Streamlit's page registry is internal; if it moves, trust the caller.
        from streamlit.runtime.scriptrunner import get_script_run_ctx
        ctx = get_script_run_ctx()
        return ctx is None or page._script_hash in ctx.pages_manager.get_pages()
    except Exception:
        return True


# ---- progress (per browser session) ---------------------------------------------------------

def progress_counts(lessons: list[Lesson] | None = None) -> dict[str, int]:
    """Lessons read, checks answered and checks right on the first try, out of what the catalog holds now."""
    lessons = load_site().lessons if lessons is None else lessons
    per = [progress.lesson_counts(l.id, len(l.quiz)) for l in lessons]
    return {"read": sum(progress.is_read(l.id) for l in lessons), "lessons": len(lessons),
            "answered": sum(a for a, _ in per), "correct": sum(c for _, c in per),
            "checks": sum(len(l.quiz) for l in lessons)}


# ---- pages ----------------------------------------------------------------------------------

def lesson_pages(lab_pages: Mapping[str, st.Page] | None = None) -> list[st.Page]:
    """One page per lesson (in order), then the glossary page. Call it on every run, before
    st.navigation. lab_pages maps lab ids to the lab pages given to st.navigation; a lab that is
    missing gets plain text instead of a link."""
    site = load_site()
    lesson_pictures.warm()            # the lessons' simulated pictures, drawn once per process in the background
    labs = dict(lab_pages or {})
    pages: dict[str, st.Page] = {}
    glossary = st.Page(lambda: _show_glossary(pages), title="Glossary", icon=GLOSSARY_ICON,
                       url_path=GLOSSARY_URL_PATH)
    for lesson in site.lessons:
        pages[lesson.id] = st.Page(
            lambda lesson_id=lesson.id: _show_lesson(lesson_id, pages, glossary, labs),
            title=f"{lesson.order} · {lesson.title}", url_path=lesson_url_path(lesson.id),
            icon=READ_ICON if progress.is_read(lesson.id) else UNREAD_ICON)
    return [*pages.values(), glossary]


def _pages_for_links(site: Site) -> tuple[dict[str, st.Page], st.Page]:
    """Page objects equal (url_path, title) to lesson_pages' own, for links from the sidebar."""
    pages = lesson_pages()
    return {l.id: p for l, p in zip(site.lessons, pages)}, pages[-1]


def _problems_notice(site: Site) -> None:
    if site.problems:
        lines = "\n".join(f"- `{e.path.name}`: {e.message.removeprefix(e.path.name + ': ')}"
                          for e in site.problems)
        st.warning(f"**Lesson problems** — these files did not load; the rest work as usual.\n\n{lines}",
                   icon=":material/warning:")


def _show_lesson(lesson_id: str, pages: dict[str, st.Page], glossary_page: st.Page,
                 labs: Mapping[str, st.Page]) -> None:
    site = load_site()
    lesson = site.lesson(lesson_id)
    if lesson is None:
        st.error(f"The lesson '{lesson_id}' is no longer in {site.folder}.")
        return
    _problems_notice(site)
    to_glossary, to_lab, to_lesson = _resolvers(site, pages, glossary_page, labs)
    position = [l.id for l in site.lessons].index(lesson.id)
    st.title(f"{lesson.order} · {lesson.title}")
    st.caption(f"Lesson {position + 1} of {len(site.lessons)} · {lesson.minutes} min read")
    st.markdown(f"**{lesson.summary}**")
    terms = [site.glossary[t] for t in lesson.glossary if t in site.glossary]
    if terms:
        with st.expander(f"Terms in this lesson ({len(terms)})", icon=GLOSSARY_ICON):
            for t in terms:
                st.markdown(f"**{t.term}** — " + render_links(t.definition, to_glossary, None, to_lesson))

    step_model = calculators.lesson_step_model()      # the learner's own: the worked examples run on it
    _body(render_numbers(tag_machines(render_links(lesson.body, to_glossary, to_lab, to_lesson), badge_for),
                         _worked_numbers(lesson, step_model)), step_model)

    st.header("Try it", anchor="try-it")
    for lab_id in lesson.labs:
        page = labs.get(lab_id)
        if _available(page):
            st.page_link(page, label=f"Open the lab: {page.title}", icon=page.icon or ":material/science:")
        else:
            st.markdown(f":material/science: The lab *{lab_title(lab_id)}* is not available in this app yet.")

    show_quiz(lesson)
    predict.lesson_summary(lesson.id)
    _read_button(lesson)

    st.divider()
    cols = st.columns(2)
    if position > 0:
        prev = site.lessons[position - 1]
        cols[0].page_link(pages[prev.id], label=f"Previous: {prev.order} · {prev.title}",
                          icon=":material/arrow_back:")
    if position + 1 < len(site.lessons):
        nxt = site.lessons[position + 1]
        cols[1].page_link(pages[nxt.id], label=f"Next: {nxt.order} · {nxt.title}",
                          icon=":material/arrow_forward:")
    else:
        cols[1].page_link(glossary_page, label="Last lesson done. Review the glossary",
                          icon=GLOSSARY_ICON)



def _worked_numbers(lesson: Lesson, step_model) -> dict:
    """The worked-example numbers the lesson quotes, those of runs on `step_model` among them (course/numbers.py;
    seconds of simulation the first time in a process, which ui/lesson_pictures.warm does off the page)."""
    if not find_example_numbers(lesson.body):
        return {}
    from course.numbers import numbers
    with st.spinner("Working out the lesson's examples on this machine's step model…"):
        return numbers(step_model)


def _body(markdown: str, step_model) -> None:
    """The lesson text, with its pictures (on `step_model` where they run on one) and calculators where
    their markers stand."""
    shown = {"picture": (lesson_pictures.PICTURE_IDS, lambda p: lesson_pictures.show_picture(p, step_model)),
             "calculator": (calculators.CALCULATOR_IDS, calculators.show_calculator)}
    for kind, part in split_pictures(markdown):
        if kind == "markdown":
            st.markdown(part)
        elif part in shown[kind][0]:
            shown[kind][1](part)
        else:
            st.warning(f"The {kind} '{part}' is not available; known {kind}s: "
                       f"{', '.join(sorted(shown[kind][0]))}.", icon=":material/image_not_supported:")


def _read_button(lesson: Lesson) -> None:
    """Read status comes from the learner, at the end of the text, not from opening the page."""
    if progress.is_read(lesson.id):
        st.caption(":material/check_circle: You marked this lesson as read (or answered all its checks).")
    else:
        st.button("Mark as read", key=f"read:{lesson.id}", icon=":material/check_circle:",
                  on_click=progress.mark_read, args=(lesson.id,),
                  help="Answering every check above marks it read too.")


def _show_glossary(lesson_pages_by_id: dict[str, st.Page]) -> None:
    site = load_site()
    _problems_notice(site)
    st.title("Glossary")
    st.caption(f"{len(site.glossary)} terms used across the lessons. Lesson text links here.")
    selected = st.query_params.get("term")
    if selected in site.glossary:
        t = site.glossary[selected]
        with st.container(border=True):
            st.markdown(f"**{t.term}**\n\n" + _definition(t, site, lesson_pages_by_id))
            _see_links(t, lesson_pages_by_id, key="selected")
    query = st.text_input("Filter terms", key=FILTER_KEY, placeholder="e.g. latency",
                          type="search", live=True).strip().lower()
    shown = [t for t in site.glossary.values()
             if not query or query in t.term.lower() or query in t.id
             or query in catalog.plain_text(t.definition).lower()]
    if query:
        st.caption(f"{len(shown)} of {len(site.glossary)} terms match.")
    for t in sorted(shown, key=lambda t: t.term.lower()):
        st.subheader(t.term, anchor=t.id)
        st.markdown(_definition(t, site, lesson_pages_by_id))
        for source in t.sources:
            st.caption(f":material/verified: Checked against: {source}")
        _see_links(t, lesson_pages_by_id, key=t.id)


def _definition(term: GlossaryTerm, site: Site, pages: Mapping[str, st.Page]) -> str:
    # Terms link to terms on the same page: a bare #anchor stays in this tab.
    return render_links(term.definition, lambda i: f"#{i}" if i in site.glossary else None, None,
                        lambda i: url(pages[i].url_path) if i in pages else None)


def _see_links(term: GlossaryTerm, pages: dict[str, st.Page], key: str) -> None:
    see = [pages[i] for i in term.see if i in pages]
    if see:
        with st.container(horizontal=True, key=f"see:{key}"):
            st.caption("See:", width="content")
            for page in see:
                st.page_link(page, icon=":material/article:")


# ---- sidebars -------------------------------------------------------------------------------

def search_sidebar() -> None:
    """Search box for lessons and glossary terms; call it on every page, e.g. in app.py."""
    with st.sidebar:
        _search()


@st.fragment
def _search() -> None:
    site = load_site()
    query = st.text_input("Search lessons and glossary", key=SEARCH_KEY, type="search",
                          placeholder="e.g. TTFT, knee, Little", live=True) or ""
    if not query.strip():
        return
    if len(query.strip()) < MIN_QUERY:
        st.caption(f"Type at least {MIN_QUERY} characters.")
        return
    hits = search(query, site.lessons, site.glossary)
    if not hits:
        st.caption("No lesson or glossary term matches.")
        return
    lessons, glossary_page = _pages_for_links(site)
    more = len(hits) - MAX_HITS
    for hit in hits[:MAX_HITS]:
        if hit.kind == "lesson" and hit.id in lessons:
            st.page_link(lessons[hit.id], label=hit.title, icon=":material/article:")
        elif hit.kind == "glossary":
            st.page_link(glossary_page, label=f"{hit.title} (glossary)", icon=GLOSSARY_ICON,
                         query_params={"term": hit.id})
        else:
            continue
        st.caption(_escape_math(hit.snippet))
    if more > 0:
        st.caption(f"{more} more; type more to narrow down.")


def _escape_math(text: str) -> str:
    """A cut snippet may hold half a formula: show its dollar signs literally."""
    return text.replace("$", "\\$") if text.count("$") % 2 else text


def progress_sidebar() -> None:
    """'Lessons read 3/9, checks 5/24 answered' and each lesson's mark; call it on every page."""
    site = load_site()
    c = progress_counts(site.lessons)
    with st.sidebar:
        # The line first, then its bar: a bar above the line read as an unlabelled grey strip.
        st.caption(f"Lessons read {c['read']}/{c['lessons']}, checks {c['answered']}/{c['checks']} "
                   f"answered ({c['correct']} right on the first try)")
        st.progress(c["read"] / c["lessons"] if c["lessons"] else 0.0)
        lessons, _ = _pages_for_links(site)
        with st.expander("Your lessons"):
            for l in site.lessons:
                done, right = progress.lesson_counts(l.id, len(l.quiz))
                st.page_link(lessons[l.id], label=f"{l.order} · {l.title} — checks {done}/{len(l.quiz)}"
                             + (f", {right} right first time" if done else ""),
                             icon=READ_ICON if progress.is_read(l.id) else UNREAD_ICON)
            st.button("Start over", key="learner_start_over", icon=":material/restart_alt:", on_click=learner.start_over,
                      help="Forget this browser's progress, predictions, quiz answers and lab results, here and in "
                           "the app's database, and begin as a new learner.")
