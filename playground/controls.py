"""The Playground's sidebar: the engine choice, presets, workload, policy and SLO widgets, and the link.

Widgets are drawn from the knobs (playground.setup.KNOBS: label, range, help), one per
knob, chosen by its kind: a slider for a number, a toggle for true/false, buttons or a
dropdown for a choice. A new knob on WorkloadSpec or SchedulerPolicy appears here by
itself. Only the special cases are named below.

Widget values live in st.session_state under "pg_<knob>"; on a session's first run they are
filled from the page's query parameters (an address without a setup starts on the Interactive
chat preset, sized to the engine chosen), and after every run the query parameters are
rewritten from them, so the address bar always holds a link that reproduces the setup.
"""
from __future__ import annotations

import re

import streamlit as st

from engine.core.config import SLO_KNOBS

from playground import engines
from playground.capacity import rate_slider_hi
from playground.reattach import TOKEN_PARAM
from playground.setup import KNOBS, POLICY_KNOBS, RANGES, WORKLOAD_KNOBS, Setup, knobs_for
from playground.presets import PRESETS, matching_preset

PREFIX = "pg_"
CUSTOM = "custom"

# The special cases. Two knobs share one from–to slider:
RANGE_LABELS = {"prompt": "Prompt tokens (from – to)", "output": "Output tokens (from – to)",
                "lookup": "N-gram sizes looked up (from – to)"}
IN_RANGE = {name: rng for rng, pair in RANGES.items() for name in pair}
# The names of the setup's widgets (a length range is one widget for two knobs).
WIDGET_NAMES = [name for name in KNOBS if name not in IN_RANGE] + [rng + "_len" for rng in RANGES] + ["engine", "speed"]
# SLO targets judge a run rather than steer it: they get their own section.
SLO_TARGETS = SLO_KNOBS
# A knob that only matters in some setups is greyed out in the others.
ONLY_WHEN = {"max_wait_ms": lambda s: s.mode == "static",
             "long_prefill_token_threshold": lambda s: s.enable_chunked_prefill,
             "num_requests": lambda s: not s.endless,
             **{name: (lambda s: s.speculative_method != "off")
                for name in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max")}}


def _key(name: str) -> str:
    return PREFIX + name


RATE_HI = PREFIX + "rate_hi"            # where the arrival-rate slider ends for the engine chosen
SIZED_FOR = PREFIX + "sized_for"        # the engine choice the sidebar was last sized for
PRESET_INTACT = PREFIX + "preset_intact"  # a preset is chosen and not moved since
# The chosen preset's setup as the sliders took it, and sized_from's note on the step model that sized it
PRESET_SETUP = PREFIX + "preset_setup"
FIRST_PRESET = "interactive_chat"       # what a visit without a setup in its link starts on


def knobs() -> dict:
    """The knobs as the sidebar offers them for the engine chosen (the rate slider's end)."""
    return knobs_for(st.session_state.get(RATE_HI, KNOBS["rate"].hi))


def engine_on_load() -> str:
    """The engine choice this run of the page is for: the link's on a session's first run."""
    if not st.session_state.get(_key("initialised")):
        return engines.from_query(st.query_params.to_dict())[0]
    saved = st.session_state.get(SAVED)
    return st.session_state.get(_key("engine"), saved[1] if saved else engines.REAL)


def size_for(choice: str, step_model) -> None:
    """Fit the sidebar to the engine chosen, before its widgets are drawn: the rate slider's end
    (a simulated GPU serves far more than this machine), and a preset left as it was is sized
    again, since its rate and targets come from the engine's step times."""
    s = st.session_state
    hi_before, s[RATE_HI] = s.get(RATE_HI), rate_slider_hi(step_model)
    # A slider whose end moves is a new widget to Streamlit, which starts it at its minimum unless
    # its value is set again before it is drawn: the learner's rate carries over. (The presenter
    # strip's copy is set from this one each time it is drawn.)
    rate = _key("rate")
    if rate in s and (hi_before != s[RATE_HI] or s[rate] > s[RATE_HI]):
        s[rate] = min(s[rate], s[RATE_HI])
    before, s[SIZED_FOR] = s.get(SIZED_FOR), choice
    if before is not None and before != choice and s.get(PRESET_INTACT):
        _apply_preset(step_model)


def load_setup(setup: Setup, step_model) -> None:
    """Put a setup into the widgets' state (before the widgets are drawn), each value onto its
    slider (a preset sized to a fast machine can ask for more than a slider reaches).
    `step_model`: the engine choice's (engines.sizing_model), which sizes the presets."""
    offered = knobs()
    values = {name: offered[name].clamp(value) for name, value in setup.to_dict().items()}
    for name, value in values.items():
        if name not in IN_RANGE:
            st.session_state[_key(name)] = value
    for rng, (lo, hi) in RANGES.items():
        st.session_state[_key(rng + "_len")] = (values[lo], values[hi])
    pid = matching_preset(setup, step_model)
    st.session_state[_key("preset")] = pid or CUSTOM
    st.session_state[PRESET_SETUP] = (Setup(**values), sized_from(step_model)) if pid else None


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


def current_engine() -> tuple[str, int]:
    """The engine chosen (playground.engines.choices()) and a simulation's speed."""
    s = st.session_state
    return s.get(_key("engine"), engines.REAL), s.get(_key("speed"), engines.SPEED_DEFAULT)


TOKEN = PREFIX + "instructor_token"     # not a link parameter: a token stays out of addresses


def instructor_token() -> str:
    """The instructor token typed for the shared server, or ""."""
    return st.session_state.get(TOKEN, "").strip()


# The setup as the sidebar last drew it. Streamlit forgets a widget's value after any run that
# ends before drawing it (an error or a stop above the sidebar); a slider then comes back at its
# minimum. This copy is not a widget's, so it survives, and init_from_link puts it back.
SAVED = PREFIX + "saved"


def init_from_link(step_model) -> list[str]:
    """On a session's first run: fill the widgets from the query parameters. Returns problems.
    On later runs: put back any widget values Streamlit has forgotten."""
    if st.session_state.get(_key("initialised")):
        saved = st.session_state.get(SAVED)
        if saved is not None and any(_key(name) not in st.session_state for name in WIDGET_NAMES):
            setup, choice, speed = saved
            load_setup(setup, step_model)
            st.session_state[_key("engine")], st.session_state[_key("speed")] = choice, speed
        return []
    params = st.query_params.to_dict()
    if params.keys() & KNOBS.keys():
        setup, problems = Setup.from_query(params, knobs())
    else:           # a plain visit: a preset sized to the engine, not a rate it may not serve
        setup, problems = PRESETS[FIRST_PRESET].setup_for(step_model), []
    load_setup(setup, step_model)
    choice, speed, engine_problems = engines.from_query(params)
    st.session_state[_key("engine")], st.session_state[_key("speed")] = choice, speed
    st.session_state[_key("initialised")] = True
    return problems + engine_problems


def write_link(setup: Setup, run_token: str | None = None, engine: str = engines.REAL,
               speed: int = engines.SPEED_DEFAULT) -> None:
    """The page's address: every setting, the engine (when simulated), and the token of this
    session's run (playground.slot), which lets a reload of this page take the run over."""
    query = setup.to_query() | engines.to_query(engine, speed)
    if run_token:
        query[TOKEN_PARAM] = run_token
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)


def sized_from(step_model) -> str:
    """A short note of how far off the step model that sized a preset was when it did, when it says
    (the model is refit as the engine runs: the Playground's engine note gives its error now)."""
    found = re.search(r"current error (\d+%)", getattr(step_model, "label", ""))
    return f" Sized from this machine's step model when chosen (its error then: {found.group(1)})." if found else ""


def _apply_preset(step_model) -> None:
    """The preset sized to the engine chosen; the learner's seed and traffic kind stay."""
    pid, s = st.session_state[_key("preset")], st.session_state
    if pid in PRESETS:
        mine = {name: s[_key(name)] for name in ("seed", "continuous") if _key(name) in s}
        load_setup(PRESETS[pid].setup_for(step_model).changed(**mine), step_model)


def _number_format(step: float) -> str:
    """A float slider shows as many decimals as its step has: 0.25 -> "%.2f", 50 -> "%.0f"."""
    decimals = len(f"{step:g}".partition(".")[2])
    return f"%.{decimals}f"


def _widget(name: str) -> None:
    """The widget for one knob, chosen by its kind."""
    k, key = knobs()[name], _key(name)
    disabled = name in ONLY_WHEN and not ONLY_WHEN[name](current_setup())
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
    disabled = lo.name in ONLY_WHEN and not ONLY_WHEN[lo.name](current_setup())
    st.slider(RANGE_LABELS[rng], min_value=int(lo.lo), max_value=int(hi.hi), step=int(lo.step),
              key=_key(rng + "_len"), help=f"{lo.help} {hi.help}", disabled=disabled)


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


# ----- presenter mode: the knobs an instructor moves most, on the page itself
# A widget can be drawn once per key, so the strip has widgets of its own ("pgs_<knob>") that
# mirror the sidebar's: each starts from the sidebar's value and, when moved, sets it.
STRIP = ("max_num_seqs", "rate", "mode", "enable_chunked_prefill")
STRIP_PREFIX = "pgs_"


def _from_strip(name: str) -> None:
    st.session_state[_key(name)] = st.session_state[STRIP_PREFIX + name]


def presenter_strip() -> None:
    """max_num_seqs, rate, batching mode and chunked prefill in one row across the page."""
    cols = st.columns([3, 3, 2, 2], vertical_alignment="bottom")
    for col, name in zip(cols, STRIP):
        k, key = knobs()[name], STRIP_PREFIX + name
        st.session_state[key] = st.session_state.get(_key(name), k.default)
        args = dict(key=key, help=k.help, on_change=_from_strip, args=(name,))
        if k.kind == "bool":
            col.toggle(k.label, **args)
        elif k.kind == "choice":
            col.radio(k.label, k.choices, horizontal=True, **args)
        elif k.kind == "int":
            col.slider(k.label, min_value=int(k.lo), max_value=int(k.hi), step=int(k.step), **args)
        else:
            col.slider(k.label, min_value=float(k.lo), max_value=float(k.hi), step=float(k.step),
                       format=_number_format(k.step), **args)


def _engine(run_engine: str | None) -> None:
    """The engine choice and a simulation's speed. `run_engine`: the choice of the run on the page."""
    offered = engines.choices()
    st.selectbox("Engine", list(offered), key=_key("engine"), format_func=offered.get,
                 help="The real SmolLM2 engine on this machine, or a simulation: the same scheduler, "
                      "its step times predicted by a model (this machine's calibrated step model, "
                      "or a roofline model of an H100 serving Llama-3.1-8B), faster than real time. "
                      "When the app is attached to a Batching Lab server, also that shared engine.")
    choice, speed = current_engine()
    if choice == engines.SERVER:
        st.text_input("Instructor token", key=TOKEN, type="password",
                      help="Changing the shared engine's policy needs the token its server printed "
                           "at start. Without it you send your own traffic and watch; the SLO targets "
                           "are yours either way. It applies from the next run.")
    st.slider("Simulation speed", min_value=engines.SPEED_MIN, max_value=engines.SPEED_MAX, step=1,
              key=_key("speed"), format="%dx", disabled=choice in (engines.REAL, engines.SERVER),
              help="Simulated seconds per second; changes apply at once. At 60x an hour of "
                   "queueing passes in a minute. The real engine runs in real time.")
    if run_engine is not None and run_engine != choice:
        st.caption("The engine choice applies to the next run: press Reset, then Start.")


def sidebar(step_model, run_engine: str | None = None) -> Setup:
    """Draw every control in the sidebar, Setup first; return the setup they hold. `step_model`:
    the engine choice's (engines.sizing_model), which sizes the presets' rates and SLO targets;
    `run_engine`: the engine choice of the run on the page (None: no run)."""
    with st.sidebar:
        st.header("Setup")
        _engine(run_engine)
        ids = [CUSTOM, *PRESETS]
        st.selectbox("Preset", ids, key=_key("preset"), on_change=_apply_preset, args=(step_model,),
                     format_func=lambda i: "Custom" if i == CUSTOM else PRESETS[i].title,
                     help="Workloads from lesson 6's table, and one past capacity. Each sets the "
                          "workload, a policy to start from and SLO targets, sized to the engine "
                          "chosen (this machine, or the simulated one); every slider stays yours to move.")
        pid = st.session_state.get(_key("preset"), CUSTOM)
        st.session_state[PRESET_INTACT] = False
        if pid in PRESETS:
            # Against the setup the preset gave when chosen, not against the preset sized anew: this
            # machine's step model is refit after every run, and the learner moved nothing.
            applied, sized, now = *(st.session_state.get(PRESET_SETUP) or (None, "")), current_setup()
            modified = applied is None or applied.changed(seed=now.seed, continuous=now.continuous) != now
            st.session_state[PRESET_INTACT] = not modified
            st.caption(PRESETS[pid].caption + (" *(modified since)*" if modified else "") + sized,
                       help=f"{PRESETS[pid].why} Choosing it sizes its rate and targets from this machine's "
                            f"step model as it is then; now that is {step_model.label}.")

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
                   "reproduce this setup. It also names your run, so a reload continues it.")
    st.session_state[SAVED] = (current_setup(), *current_engine())
    return current_setup()
