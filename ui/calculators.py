"""The lessons' instant calculators: a lesson line `{{calculator:<id>}}` shows one (lessons/views.py).

- `mm1`: arrival and service rate -> utilization, mean and p99 time in system, and the p99 curve;
- `littles_law`: arrival rate and time in system -> requests inside, L = lambda W;
- `step_time`: batch size -> decode step time, time per token and tokens/s, from this machine's
  step model (its calibrated profile, or the hand-set guess when it has none; no model runs).

The formulas live in analysis.queueing and engine.step_model. Each calculator is a fragment, so
moving its sliders reruns it alone, not the lesson around it. Widget keys start with `calc_`.
"""
from __future__ import annotations

import math

import streamlit as st

from analysis.queueing import (littles_law_in_system, mm1_p99_chart, mm1_time_in_system,
                               mm1_time_in_system_quantile)
from engine import step_fit
from engine.profile import load_profile
from engine.results import cache_dir
from engine.step_model import UNCALIBRATED, StepModel


def _seconds(s: float) -> str:
    return "unstable" if math.isinf(s) else f"{1000 * s:.0f} ms" if s < 1 else f"{s:.2f} s"


@st.fragment
def mm1() -> None:
    with st.container(border=True):
        st.markdown("**Try it: the M/M/1 queue**")
        left, right = st.columns(2)
        lam = left.slider("Arrival rate λ (requests/s)", 0.0, 20.0, 5.0, 0.1, key="calc_mm1_lam")
        mu = right.slider("Service rate μ (requests/s)", 0.5, 20.0, 10.0, 0.1, key="calc_mm1_mu")
        w, p99 = mm1_time_in_system(lam, mu), mm1_time_in_system_quantile(lam, mu, 0.99)
        cols = st.columns(3)
        cols[0].metric("Utilization ρ = λ/μ", f"{lam / mu:.0%}")
        cols[1].metric("Mean time in system W = 1/(μ−λ)", _seconds(w))
        cols[2].metric("p99 time in system = ln(100)·W", _seconds(p99))
        if math.isinf(w):
            st.markdown(":red[**Unstable: the queue grows without end.**] Requests arrive at least as "
                        "fast as they are finished, so there is no steady state and no mean to give.")
        st.plotly_chart(mm1_p99_chart(lam, mu), width="stretch", key="calc_mm1_chart",
                        config={"displaylogo": False})


@st.fragment
def littles_law() -> None:
    with st.container(border=True):
        st.markdown("**Try it: Little's Law**")
        left, right = st.columns(2)
        lam = left.slider("Arrival rate λ (requests/s)", 0.0, 50.0, 20.0, 0.5, key="calc_little_lam")
        w = right.slider("Time in system W (s)", 0.1, 30.0, 2.0, 0.1, key="calc_little_w")
        inside = littles_law_in_system(lam, w)
        st.metric("Requests in the system L = λW", f"{inside:.1f}")
        st.markdown(f"In a serving engine, requests in flight = arrival rate × latency: at {lam:g} requests/s "
                    f"that each take {w:g} s, about {inside:.1f} are inside at once, waiting or in the "
                    "running batch, and each holds its KV cache all that time.")


@st.cache_resource(ttl=60, show_spinner=False)
def _profiled(model_name: str, folder: str):
    """This machine's saved profile of the model (None: none, or stale). `folder` (the results
    cache, where profiles live) is only a cache key: pointing BATCHING_LAB_CACHE elsewhere reads afresh."""
    return load_profile(model_name)


def machine_step_model() -> tuple[StepModel, bool]:
    """This machine's step model as the app runs it: its saved profile, refit from the app's own
    real steps (engine.step_fit: this process's, or the refit stored beside the profile), its label
    saying its current error; and whether it had a profile (else the hand-set guess)."""
    from ui.session import model_name     # it imports torch, which only this calculator needs
    with st.spinner("Reading this machine's step model…"):
        found = _profiled(model_name(), cache_dir())
    if found is None:
        return UNCALIBRATED, False
    key = (found.model, found.dtype, found.device)
    return step_fit.fit_for(key, found.step_model, found.path).current(), True


@st.fragment
def step_time() -> None:
    with st.container(border=True):
        st.markdown("**Try it: decode step time on this machine**")
        left, right = st.columns(2)
        batch = left.slider("Batch size B (sequences in the step)", 1, 64, 8, key="calc_step_batch")
        context = right.slider("Context per sequence (tokens)", 16, 2048, 128, 16, key="calc_step_context")
        model, measured = machine_step_model()
        t, t0 = model.decode_ms(batch, context), model.decode_ms(0, context)
        cols = st.columns(3)
        cols[0].metric("Step time t(B)", f"{t:.1f} ms")
        cols[1].metric("Time per token t(B)/B", f"{t / batch:.2f} ms")
        cols[2].metric("Tokens per second B/t(B)", f"{1000 * batch / t:,.0f}")
        st.markdown(f"$t(B) = t_0 + c\\,B$ with $t_0$ = {t0:.1f} ms, what every step pays, and $c$ = "
                    f"{(t - t0) / batch:.2f} ms per sequence on average up to B = {batch}. "
                    f"Each user still waits the whole t(B) between its own tokens.")
        st.caption(f"Numbers from this machine's step model: {model.label}." if measured else
                   f"This machine has no step model yet, so the numbers are a guess: {model.label}.")


CALCULATORS = {"mm1": mm1, "littles_law": littles_law, "step_time": step_time}
CALCULATOR_IDS = tuple(CALCULATORS)


def show_calculator(calc_id: str) -> None:
    """Draw the calculator `calc_id` (one of CALCULATOR_IDS); an unknown id is a clear error line."""
    if calc_id not in CALCULATORS:
        st.error(f"No calculator named {calc_id!r}: calculators are {', '.join(CALCULATOR_IDS)}.")
        return
    CALCULATORS[calc_id]()
