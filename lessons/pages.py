"""The "Lessons" navigation section for app.py: `pages()` -> the lesson pages and the glossary.

A thin adapter over lessons.views. Lab links point at the pages listed in course/registry.py
(their url_path is the lab id, see LAB_URL_PATHS).
The search box and progress panel are separate: call views.search_sidebar() and
views.progress_sidebar() on every run.
"""
from __future__ import annotations

import streamlit as st

from lessons.views import LAB_URL_PATHS, lesson_pages
from course.registry import LABS


def lab_pages() -> dict[str, st.Page]:
    """Lab id -> st.Page equal to the one app.py registers from course/registry.py."""
    ids = {path: lab_id for lab_id, path in LAB_URL_PATHS.items()}
    return {ids[lab.url_path]: st.Page(lab.path, title=lab.title, icon=lab.icon, url_path=lab.url_path)
            for lab in LABS if lab.url_path in ids}


def pages() -> list[st.Page]:
    return lesson_pages(lab_pages())
