"""Streamlit glue: the model once per server process, and whether a browser session is still there.

- `model()` loads the model named by BATCHING_LAB_MODEL (default "smollm2") once per process.
- `step_times()` times a few real decode steps of it on this machine, once per process.
- An engine thread started for a page asks `session_alive()` before every step: once this
  browser tab is closed or reloaded, Streamlit drops its session and the thread stops.
"""
from __future__ import annotations

import logging
import os
import time

import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from engine.model import load_model
from engine.step_times import measure_step_times

MODEL_ENV = "BATCHING_LAB_MODEL"
GONE_GRACE_S = 2.0            # a session missing this long is gone (not a websocket reconnecting)
log = logging.getLogger("batching_lab")


def model_name() -> str:
    return os.environ.get(MODEL_ENV, "smollm2") or "smollm2"


@st.cache_resource(show_spinner=False)
def _load(name: str):
    return load_model(name)


def model():
    """The loaded model, shared by every session of this server process."""
    name = model_name()
    with st.spinner(f"Loading the model ({name}) — once per server, a few seconds…"):
        return _load(name)


@st.cache_resource(show_spinner=False)
def _step_times(name: str) -> dict:
    return measure_step_times(_load(name))


def step_times() -> dict:
    """Measured decode-step times of the loaded model on this machine (once per process)."""
    name = model_name()
    model()
    with st.spinner("Timing a few real decode steps on this machine…"):
        return _step_times(name)


def session_alive(grace_s: float = GONE_GRACE_S):
    """A callable for the engine thread: is this browser session still connected?

    A session missing for less than grace_s counts as alive, so a websocket that drops and
    reconnects (Streamlit resumes the same session) does not kill the run; a closed or reloaded
    tab stays gone and stops it.
    """
    ctx = get_script_run_ctx()
    session_id = ctx.session_id if ctx else None
    if session_id is None or not runtime.exists():
        return lambda: True          # no server (AppTest, a bare script): the heartbeat guards it
    rt = runtime.get_instance()
    missing_since = None

    def alive() -> bool:
        nonlocal missing_since
        if rt.is_active_session(session_id):
            missing_since = None
            return True
        now = time.monotonic()
        missing_since = missing_since or now
        if now - missing_since < grace_s:
            return True
        log.warning("browser session %s is gone: stopping its engine thread", session_id)
        return False

    return alive
