"""The Playground's sidebar: presets, workload, policy and SLO widgets, and the link.

Widgets are drawn from playground.knobs (labels, ranges, help). Their values live in
st.session_state under "pg_<knob>"; on a session's first run they are filled from the
page's query parameters, and after every run the query parameters are rewritten from
them, so the address bar always holds a link that reproduces the setup.
"""
from __future__ import annotations

import streamlit as st

from playground.knobs import KNOBS
from playground.setup import Setup
from playground.presets import PRESETS, matching_preset

PREFIX = "pg_"
RANGES = {"prompt": ("prompt_lo", "prompt_hi"), "output": ("output_lo", "output_hi")}
CUSTOM = "custom"


def _key(name: str) -> str:
    return PREFIX + name


def load_setup(setup: Setup) -> None:
    """Put a setup into the widgets' state (before the widgets are drawn)."""
    values = setup.to_dict()
    in_ranges = {name for pair in RANGES.values() for name in pair}
    for name, value in values.items():
        if name not in in_ranges:
            st.session_state[_key(name)] = value
    for rng, (lo, hi) in RANGES.items():
        st.session_state[_key(rng + "_len")] = (values[lo], values[hi])
    st.session_state[_key("preset")] = matching_preset(setup) or CUSTOM


def current_setup() -> Setup:
    """The setup the widgets hold now."""
    s = st.session_state
    values = {}
    for name in Setup.__dataclass_fields__:
        if _key(name) in s:
            values[name] = s[_key(name)]
    for rng, (lo, hi) in RANGES.items():
        if _key(rng + "_len") in s:
            values[lo], values[hi] = s[_key(rng + "_len")]
    return Setup(**values)


def init_from_link() -> list[str]:
    """On a session's first run: fill the widgets from the query parameters. Returns problems."""
    if st.session_state.get(_key("initialised")):
        return []
    setup, problems = Setup.from_query(st.query_params.to_dict())
    load_setup(setup)
    st.session_state[_key("initialised")] = True
    return problems


def write_link(setup: Setup) -> None:
    query = setup.to_query()
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)


def _apply_preset() -> None:
    pid = st.session_state[_key("preset")]
    if pid in PRESETS:
        seed = st.session_state.get(_key("seed"), 0)
        load_setup(PRESETS[pid].setup.changed(seed=seed))


def _slider(name: str, disabled: bool = False, fmt: str | None = None):
    k = KNOBS[name]
    num = float if k.kind == "float" else int
    return st.slider(k.label, min_value=num(k.lo), max_value=num(k.hi), step=num(k.step),
                     key=_key(name), help=k.help, disabled=disabled, format=fmt)


def _range(rng: str):
    lo, hi = RANGES[rng]
    a, b = KNOBS[lo], KNOBS[hi]
    label = "Prompt tokens (from – to)" if rng == "prompt" else "Output tokens (from – to)"
    return st.slider(label, min_value=int(a.lo), max_value=int(b.hi), step=int(a.step),
                     key=_key(rng + "_len"), help=f"{a.help} {b.help}")


def _select(name: str, horizontal: bool = False):
    k = KNOBS[name]
    if horizontal:
        return st.radio(k.label, k.choices, key=_key(name), help=k.help, horizontal=True)
    return st.selectbox(k.label, k.choices, key=_key(name), help=k.help)


def sidebar() -> Setup:
    """Draw every control in the sidebar; return the setup they hold."""
    with st.sidebar:
        st.header("Setup")
        ids = [CUSTOM, *PRESETS]
        st.selectbox("Preset", ids, key=_key("preset"), on_change=_apply_preset,
                     format_func=lambda i: "Custom" if i == CUSTOM else PRESETS[i].title,
                     help="Workloads from lesson 6's table. Each sets the workload, a policy to "
                          "start from and SLO targets together; every slider stays yours to move.")
        pid = st.session_state.get(_key("preset"), CUSTOM)
        if pid in PRESETS:
            modified = matching_preset(current_setup()) != pid
            st.caption(PRESETS[pid].why + (" *(modified since)*" if modified else ""))

        with st.expander("Workload", expanded=True):
            st.caption("Changes apply to requests arriving from now on.")
            _slider("rate", fmt="%.1f")
            _slider("burstiness", fmt="%.2f")
            _select("prompt_kind")
            _range("prompt")
            _select("output_kind")
            _range("output")
            _slider("tenants")
            _slider("num_requests")
            k = KNOBS["seed"]
            st.number_input(k.label, min_value=int(k.lo), max_value=int(k.hi), step=1,
                            key=_key("seed"), help=k.help)

        with st.expander("Policy", expanded=True):
            st.caption("Changes apply to the running engine at its next step.")
            _select("mode", horizontal=True)
            static = st.session_state.get(_key("mode")) == "static"
            _slider("max_num_seqs")
            _slider("max_wait_ms", disabled=not static, fmt="%.0f")
            _slider("max_num_batched_tokens")
            k = KNOBS["enable_chunked_prefill"]
            st.toggle(k.label, key=_key("enable_chunked_prefill"), help=k.help)
            chunked = bool(st.session_state.get(_key("enable_chunked_prefill")))
            _slider("long_prefill_token_threshold", disabled=not chunked)
            _select("order")
            _slider("kv_capacity_tokens")
            _slider("max_waiting")

        with st.expander("SLO targets", expanded=True):
            st.caption("Used for goodput and drawn as red dotted lines on the charts.")
            _slider("ttft_slo_s", fmt="%.2f")
            _slider("tpot_slo_s", fmt="%.2f")

        st.caption("The page address holds every setting and the seed: copy it to share or "
                   "reproduce this setup.")
    return current_setup()
