"""This browser session's Playground run: one PlaygroundRun, kept in st.session_state.

A run's engine thread asks ui.session.session_alive() before every step, so a closed or
reloaded tab stops it and frees its KV pool; a heartbeat from the page (PlaygroundRun.heartbeat) is
the second guard. Starting a new run closes the session's previous one first.

Each run holds its own KV pool (16,384 tokens: ~375 MB for SmolLM2) and step buffers, about
half a GB in all, beside the model the server loads once. MAX_ENGINES (default 4, ~2 GB of
runs next to a ~1.2 GB server) caps how many a server holds at once; the CPU they share
would not run more at a watchable speed anyway.
"""
from __future__ import annotations

import os

import streamlit as st

from playground.run import PlaygroundRun, engine_threads
from playground.setup import Setup
from ui import session

RUN_KEY = "lab_run"
HEARTBEAT_TIMEOUT_S = 300     # a run whose page has not refreshed for this long stops by itself
MAX_ENGINES_ENV = "BATCHING_LAB_MAX_ENGINES"


def max_engines() -> int:
    value = os.environ.get(MAX_ENGINES_ENV, "4")
    if not (value.isdigit() and int(value) >= 1):
        raise ValueError(f"{MAX_ENGINES_ENV} is {value!r}: it must be a whole number, 1 or more")
    return int(value)


def run() -> PlaygroundRun | None:
    return st.session_state.get(RUN_KEY)


def new_run(setup: Setup) -> PlaygroundRun:
    """A fresh run for this session (closing any previous one). Refused, with a ValueError the
    page shows, when the server already holds its most runs."""
    reset_run()
    active, most = engine_threads(), max_engines()
    if active >= most:
        raise ValueError(f"{active} runs are active on this server (at most {most}, set by "
                         f"{MAX_ENGINES_ENV}); stop one or wait.")
    lab = PlaygroundRun(setup, session.model(), is_alive=session.session_alive(),
                 idle_timeout_s=HEARTBEAT_TIMEOUT_S)
    st.session_state[RUN_KEY] = lab
    return lab


def reset_run() -> None:
    lab = st.session_state.pop(RUN_KEY, None)
    if lab is not None:
        lab.close()
