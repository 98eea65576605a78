"""Batching Lab: the Streamlit entry point (`streamlit run app.py`).

Navigation: a home page, the lessons (once lessons/ provides their pages), the labs listed
in labs/index.py, and an About page. Each page is a small script; see DESIGN.md.
"""
import importlib
import importlib.util
import os

# Before torch loads (the pages import it): OpenMP threads waiting at a barrier sleep instead of
# spinning. With the default (spin) policy, an engine thread on a two-core machine whose other
# core is busy (the page refreshing, a browser, another process) spent most of every step
# spinning: measured 0.1-0.5 steps/s instead of 9-11 in the same conditions.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import streamlit as st  # noqa: E402

from labs.index import LABS  # noqa: E402


def _has(module: str) -> bool:
    return importlib.util.find_spec("lessons") is not None and importlib.util.find_spec(module) is not None


def pages_for_lessons() -> list:
    """The "Lessons" section: `lessons/pages.py` provides `pages() -> list[st.Page]`.

    Until that module exists the section is left out (an empty list).
    """
    return list(importlib.import_module("lessons.pages").pages()) if _has("lessons.pages") else []


def lesson_sidebar() -> None:
    """The lessons' search box and reading progress, on every page (when lessons/ has them)."""
    if _has("lessons.views"):
        views = importlib.import_module("lessons.views")
        views.search_sidebar()
        views.progress_sidebar()


st.set_page_config(page_title="Batching Lab", page_icon=":material/view_timeline:", layout="wide")

sections = {"": [st.Page("app_pages/home.py", title="Home", icon=":material/home:", default=True)]}
lessons = pages_for_lessons()
if lessons:
    sections["Lessons"] = lessons
sections["Labs"] = [st.Page(lab.path, title=lab.title, icon=lab.icon, url_path=lab.url_path)
                    for lab in LABS]
sections["About"] = [st.Page("app_pages/about.py", title="About this machine",
                             icon=":material/memory:", url_path="about")]
page = st.navigation(sections)
if lessons:
    lesson_sidebar()
page.run()
