"""This browser session's Playground run: one PlaygroundRun, kept in st.session_state and in the
process-wide registry (playground.reattach) under a token that the page's address carries.

A reload opens a new session on the same address: `run()` finds the token there and takes
the run over, so it goes on where it was. A run whose page is gone for good (the tab closed)
is closed after the registry's grace period and its KV pool freed; a heartbeat from the page
(PlaygroundRun.heartbeat) is the second guard. Starting a new run closes the session's previous one.

Each run holds its own KV pool (16,384 tokens: ~375 MB for SmolLM2) and step buffers, about
half a GB in all, beside the model the server loads once. MAX_ENGINES (default 4, ~2 GB of
runs next to a ~1.2 GB server) caps how many a server holds at once, runs waiting to be taken
over after a reload included; the CPU they share would not run more at a watchable speed anyway.
"""
from __future__ import annotations

import secrets
import time
from functools import partial

import streamlit as st

from playground.reattach import RUNS, TOKEN_PARAM
from playground import engines
from engine.runs.live import engine_threads
from playground.run import PlaygroundRun
from playground.setup import Setup
from ui import session
from engine import settings

RUN_KEY = "lab_run"
TOKEN_KEY = "lab_run_token"
HEARTBEAT_TIMEOUT_S = 300     # a run whose page has not refreshed for this long stops by itself
TAKEOVER_WAIT_S = 1.5         # after a reload, how long the old session may take to disconnect


def run() -> PlaygroundRun | None:
    """This session's run; on a session's first visit, the run its address names, if that run
    is waiting to be taken over (its page was reloaded)."""
    lab = st.session_state.get(RUN_KEY)
    if lab is None and TOKEN_KEY not in st.session_state:
        st.session_state[TOKEN_KEY] = None           # look at the address once per session
        token = st.query_params.get(TOKEN_PARAM)
        if token:
            lab = _take_over(token)
    return lab


def _take_over(token: str) -> PlaygroundRun | None:
    connected = session.session_connected()
    deadline = time.monotonic() + TAKEOVER_WAIT_S
    lab = RUNS.take_over(token, connected)
    while lab is None and token in RUNS and time.monotonic() < deadline:
        time.sleep(0.1)                              # the reloaded page's session may still be closing
        lab = RUNS.take_over(token, connected)
    if lab is not None:
        st.session_state[RUN_KEY], st.session_state[TOKEN_KEY] = lab, token
        lab.heartbeat()
    return lab


def token() -> str | None:
    """The token of this session's run, for the page's address (controls.write_link)."""
    return st.session_state.get(TOKEN_KEY) if run() is not None else None


def new_run(setup: Setup, engine_choice: str = engines.REAL,
            speed: float = engines.SPEED_DEFAULT, token: str = "") -> PlaygroundRun:
    """A fresh run for this session (closing any previous one), on the engine chosen
    (playground.engines). Refused, with a ValueError the page shows, when the server already
    holds its most runs."""
    reset_run()
    active, most = engine_threads(), settings.max_engines()
    if active >= most and engine_choice != engines.SERVER:    # a shared server's run holds no engine here
        raise ValueError(f"{active} runs are active on this server (at most {most}, set by "
                         f"{settings.MAX_ENGINES}); stop one or wait.")
    key = RUNS.new_token()
    # On the shared server this session's requests carry a tenant of their own; `token`: the
    # instructor token typed in the sidebar
    seat = engines.Seat(engines.server_url(), f"playground-{secrets.token_hex(3)}", token)
    lab = PlaygroundRun(setup, session.model(), is_alive=partial(RUNS.keeps, key),
                        idle_timeout_s=HEARTBEAT_TIMEOUT_S, engine_choice=engine_choice, speed=speed,
                        seat=seat)
    RUNS.add(key, lab, session.session_connected())
    st.session_state[RUN_KEY], st.session_state[TOKEN_KEY] = lab, key
    return lab


def reset_run() -> None:
    lab = st.session_state.pop(RUN_KEY, None)
    key, st.session_state[TOKEN_KEY] = st.session_state.get(TOKEN_KEY), None
    if key:
        RUNS.forget(key)
    if lab is not None:
        lab.close()
