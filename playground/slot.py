"""This browser session's Playground run: one LabRun, kept in st.session_state.

A run's engine thread asks ui.session.session_alive() before every step, so a closed or
reloaded tab stops it; a heartbeat from the page (LabRun.heartbeat) is the second guard.
"""
from __future__ import annotations

import streamlit as st

from playground.run import LabRun
from playground.setup import Setup
from ui import session

RUN_KEY = "lab_run"
HEARTBEAT_TIMEOUT_S = 300     # a run whose page has not refreshed for this long stops by itself


def run() -> LabRun | None:
    return st.session_state.get(RUN_KEY)


def new_run(setup: Setup) -> LabRun:
    """A fresh run for this session (stopping any previous one)."""
    reset_run()
    lab = LabRun(setup, session.model(), is_alive=session.session_alive(),
                 idle_timeout_s=HEARTBEAT_TIMEOUT_S)
    st.session_state[RUN_KEY] = lab
    return lab


def reset_run() -> None:
    lab = st.session_state.pop(RUN_KEY, None)
    if lab is not None:
        lab.stop()
