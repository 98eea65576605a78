"""Batching Lab: the Streamlit entry point (`streamlit run app.py`). Navigation only.

Sections: the Playground and home, the labs (course/registry.py: one folder per lesson lab), the
lessons (lessons/pages.py) and an About page. Each page is a small script; the
layout is described in docs/ARCHITECTURE.md.
"""
# First, before torch loads (the pages import it): importing the engine sets how its OpenMP
# threads wait, a short spin and then sleep, so the page and a browser get the cores they need.
import engine  # noqa: F401

from pathlib import Path  # noqa: E402

import streamlit as st  # noqa: E402

from lessons import pages as lesson_pages  # noqa: E402
from lessons import views as lesson_views  # noqa: E402
from ui import learner, page_style  # noqa: E402
from course.registry import LESSON_LABS, PLAYGROUND  # noqa: E402

# The tab icon is a file of the project's: a Material icon or an emoji would be fetched from the web,
# which a classroom's network may not reach.
st.set_page_config(page_title="Batching Lab", page_icon=str(Path(__file__).parent / "assets" / "favicon.png"),
                   layout="wide")


def lab_page(lab) -> st.Page:
    return st.Page(lab.path, title=lab.title, icon=lab.icon, url_path=lab.url_path)


page_style.apply()       # every page's shared style (ui/page_style.py)
learner.begin()        # this browser's learner and what they did before (records/, ui/learner.py), before any page reads it

# A bar across the top: the Playground is its first entry, one click from any page and never
# folded away under "View more", and the sidebar is left to each page (the Playground's Setup).
page = st.navigation({
    "": [lab_page(PLAYGROUND),
         st.Page("app_pages/home.py", title="Home", icon=":material/home:", default=True)],
    "Labs": [lab_page(lab) for lab in LESSON_LABS],
    "Lessons": lesson_pages.pages(),
    "Shared engines": [st.Page("classroom/page.py", title="Classroom", icon=":material/groups:",
                          url_path="classroom"),
                  st.Page("app_pages/external.py", title="Any engine", icon=":material/dns:",
                          url_path="any-engine")],
    "About": [st.Page("app_pages/about.py", title="About this machine", icon=":material/memory:",
                      url_path="about")],
}, position="top")
if page.url_path != PLAYGROUND.url_path:    # the Playground's sidebar holds its Setup alone
    lesson_views.search_sidebar()
    lesson_views.progress_sidebar()
page.run()
