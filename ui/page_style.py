"""The style every page of the app shares, set once by app.py."""
from __future__ import annotations

import streamlit as st

# On a phone's narrow screen a formula wider than the text scrolls sideways in its own box (2 px
# above and below for glyphs that reach past their line), and a link's label wraps onto a second
# line: Streamlit keeps both on one line, cut off at the edge.
APP_STYLE = """<style>
[data-testid='stMarkdownContainer'] p:has(.katex) { overflow-x: auto; overflow-y: hidden; padding-block: 2px; }
[data-testid='stPageLink'] p { white-space: normal; }
</style>"""


def apply() -> None:
    st.html(APP_STYLE)
