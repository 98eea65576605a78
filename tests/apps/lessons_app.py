"""Test harness: the lesson pages wired as app.py wires them, with one stand-in lab page.

A home page is the default, as in the app, so every lesson keeps its own URL. Only the
why_batch lab is registered, so lessons show both a working lab link and the plain-text
fallback. A test moves between pages by setting st.session_state["goto"] to a url_path.
"""
import streamlit as st

from lessons.views import LAB_URL_PATHS, lesson_pages, progress_sidebar, search_sidebar
from ui import learner


def home() -> None:
    st.title("Home")


def why_batch_lab() -> None:
    st.title("Why batch lab")


learner.begin()
labs = {"why_batch": st.Page(why_batch_lab, title="Why batch lab", icon=":material/science:",
                             url_path=LAB_URL_PATHS["why_batch"])}
pages = [st.Page(home, title="Home", url_path="home", default=True), *lesson_pages(labs),
         *labs.values()]
by_path = {p.url_path: p for p in pages}
page = st.navigation(pages)
goto = st.session_state.pop("goto", None)
if goto:
    st.switch_page(by_path[goto])
search_sidebar()
progress_sidebar()
page.run()
