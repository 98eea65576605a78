"""Test harness: the Playground alone, wired as app.py wires it (wide layout, its own sidebar).

For tests of the Playground page that must not depend on the other pages importing.
"""
from pathlib import Path

import engine  # noqa: F401  (as app.py: first, so the engine sets its OpenMP wait before torch loads)

import streamlit as st  # noqa: E402

from course.registry import PLAYGROUND  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
st.set_page_config(page_title="Batching Lab", layout="wide")
st.navigation([st.Page(str(ROOT / PLAYGROUND.path), title=PLAYGROUND.title, url_path=PLAYGROUND.url_path,
                       default=True)], position="top").run()
