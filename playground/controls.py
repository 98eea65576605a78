"""The Playground's sidebar: presets, workload, policy and SLO widgets, and the link.

Widgets are drawn from the knobs (playground.setup.KNOBS: label, range, help), one per
knob, chosen by its kind: a slider for a number, a toggle for true/false, buttons or a
dropdown for a choice. A new knob on WorkloadSpec or SchedulerPolicy appears here by
itself. Only the special cases are named below.

Widget values live in st.session_state under "pg_<knob>"; on a session's first run they are
filled from the page's query parameters, and after every run the query parameters are
rewritten from them, so the address bar always holds a link that reproduces the setup.
"""
from __future__ import annotations

import streamlit as st

from engine.workload import LENGTH_RANGES

from playground.setup import KNOBS, POLICY_KNOBS, WORKLOAD_KNOBS, Setup
from playground.presets import PRESETS, matching_preset

PREFIX = "pg_"
CUSTOM = "custom"

# The special cases. Two knobs share one from–to slider:
RANGES = LENGTH_RANGES
RANGE_LABELS = {"prompt": "Prompt tokens (from – to)", "output": "Output tokens (from – to)"}
IN_RANGE = {name: rng for rng, pair in RANGES.items() for name in pair}
# SLO targets judge a run rather than steer it: they get their own section.
SLO_TARGETS = ("ttft_slo_s", "tpot_slo_s")
# A knob that only matters when another knob has a given value is greyed out otherwise.
ONLY_WHEN = {"max_wait_ms": ("mode", "static"),
             "long_prefill_token_threshold": ("enable_chunked_prefill", True)}


def _key(name: str) -> str:
    return PREFIX + name


def load_setup(setup: Setup) -> None:
    """Put a setup into the widgets' state (before the widgets are drawn)."""
    values = setup.to_dict()
    for name, value in values.items():
        if name not in IN_RANGE:
            st.session_state[_key(name)] = value
    for rng, (lo, hi) in RANGES.items():
        st.session_state[_key(rng + "_len")] = (values[lo], values[hi])
    st.session_state[_key("preset")] = matching_preset(setup) or CUSTOM


def current_setup() -> Setup:
    """The setup the widgets hold now."""
    s = st.session_state
    values = {}
    for name in KNOBS:
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


def _number_format(step: float) -> str:
    """A float slider shows as many decimals as its step has: 0.25 -> "%.2f", 50 -> "%.0f"."""
    decimals = len(f"{step:g}".partition(".")[2])
    return f"%.{decimals}f"


def _widget(name: str) -> None:
    """The widget for one knob, chosen by its kind."""
    k, key = KNOBS[name], _key(name)
    disabled = False
    if name in ONLY_WHEN:
        other, needed = ONLY_WHEN[name]
        disabled = st.session_state.get(_key(other)) != needed
    if k.kind == "bool":
        st.toggle(k.label, key=key, help=k.help, disabled=disabled)
    elif k.kind == "choice" and len(k.choices) <= 2:
        st.radio(k.label, k.choices, key=key, help=k.help, horizontal=True, disabled=disabled)
    elif k.kind == "choice":
        st.selectbox(k.label, k.choices, key=key, help=k.help, disabled=disabled)
    elif k.kind == "int":
        st.slider(k.label, min_value=int(k.lo), max_value=int(k.hi), step=int(k.step), key=key,
                  help=k.help, disabled=disabled)
    else:
        st.slider(k.label, min_value=float(k.lo), max_value=float(k.hi), step=float(k.step),
                  key=key, help=k.help, disabled=disabled, format=_number_format(k.step))


def _range(rng: str) -> None:
    lo, hi = (KNOBS[name] for name in RANGES[rng])
    st.slider(RANGE_LABELS[rng], min_value=int(lo.lo), max_value=int(hi.hi), step=int(lo.step),
              key=_key(rng + "_len"), help=f"{lo.help} {hi.help}")


def _seed() -> None:
    k = KNOBS["seed"]
    st.number_input(k.label, min_value=int(k.lo), max_value=int(k.hi), step=1, key=_key("seed"),
                    help=k.help)


def _widgets(names) -> None:
    """One widget per knob, in the order the dataclass declares them."""
    for name in names:
        if name == "seed":
            _seed()
        elif name in IN_RANGE:
            if name == RANGES[IN_RANGE[name]][0]:    # drawn once, where its 'from' knob stands
                _range(IN_RANGE[name])
        else:
            _widget(name)


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
            _widgets(WORKLOAD_KNOBS)

        with st.expander("Policy", expanded=True):
            st.caption("Changes apply to the running engine at its next step.")
            _widgets(name for name in POLICY_KNOBS if name not in SLO_TARGETS)

        with st.expander("SLO targets", expanded=True):
            st.caption("Used for goodput and drawn as red dotted lines on the charts.")
            _widgets(SLO_TARGETS)

        st.caption("The page address holds every setting and the seed: copy it to share or "
                   "reproduce this setup.")
    return current_setup()
