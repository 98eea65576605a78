"""Streamlit glue: the model once per server process, and whether a browser session is still there.

- `model()` loads the model named by BATCHING_LAB_MODEL (default "smollm2") once per process.
- `step_times()` times a few real decode steps of it on this machine, once per process.
- `session_connected()` tells whether this browser tab is still connected; a Playground run
  outlives it for a grace period (playground.reattach), so a reload takes the run over.
"""
from __future__ import annotations


import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from engine.model.model import load_model
from engine.sim.step_times import measure_step_times
from engine import settings

MODEL_ENV = settings.MODEL


def model_name() -> str:
    return settings.model_name()


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


def session_connected():
    """A callable: is this browser session connected right now?

    Asked by playground.reattach, which keeps a run whose session is gone for a grace period
    (a reload, or a websocket that drops and reconnects, resumes within it). Without a server
    (AppTest, a bare script) it always answers yes: the run's heartbeat guards it there.
    """
    ctx = get_script_run_ctx()
    session_id = ctx.session_id if ctx else None
    if session_id is None or not runtime.exists():
        return lambda: True
    rt = runtime.get_instance()
    return lambda: rt.is_active_session(session_id)
