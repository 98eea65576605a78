"""Streamlit glue shared by the lesson lab pages: the model, the measure / re-measure buttons,
progress bars, the "cached result from this machine" note, and links that reproduce a lab.

Pages stay thin: widgets here and in the page, experiments in labs.lesson_runs, charts in
labs.charts and labs.lesson_charts.
"""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from labs import lesson_runs
from ui import session

PLOT_CONFIG = {"displayModeBar": False}


def model():
    """The loaded model, once per server process (shared with the Playground)."""
    return session.model()


@st.cache_resource(show_spinner=False)
def _ref(name: str):
    return lesson_runs.model_ref(name)


def ref():
    """Enough of the model to find this machine's cached results, without loading weights."""
    return _ref(session.model_name())


# ----------------------------------------------------------------------------- links


def _parse(text: str, default):
    if isinstance(default, bool):
        return text.lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(float(text))
    if isinstance(default, float):
        return float(text)
    if isinstance(default, (list, tuple)):
        kind = type(default[0]) if default else str
        return [kind(x) for x in text.split(",") if x != ""]
    return text


def defaults(values: dict) -> None:
    """Give each widget key its starting value: from the link (?key=value) if it has one, else the
    default. Call before drawing the widgets, and create them with `key=` and no `value=`."""
    for key, default in values.items():
        if key in st.session_state:
            continue
        value = default
        if key in st.query_params:
            try:
                value = _parse(st.query_params[key], default)
            except (TypeError, ValueError):
                value = default
        st.session_state[key] = value


def write_link(keys) -> None:
    """Put the lab's settings in the address bar, so a copied link reproduces the run."""
    for key in keys:
        v = st.session_state.get(key)
        if v is None:
            continue
        text = ",".join(str(x) for x in v) if isinstance(v, (list, tuple)) else str(v)
        if st.query_params.get(key) != text:
            st.query_params[key] = text


# ----------------------------------------------------------------------------- measuring


def measure_buttons(name: str, settings, has_result: bool, label: str, estimate: str) -> str | None:
    """The lab's run button, or, once a result exists, where it came from and a re-measure button.

    Returns "run", "refresh" or None. `settings` identifies the current settings (any value
    with a repr); `estimate` says how long a measurement takes on this machine.
    """
    fresh = st.session_state.get(f"{name}__fresh") == repr(settings)
    if not has_result:
        if st.button(label, key=f"{name}__run", type="primary",
                     help=f"Runs on the real engine on this machine ({estimate}); the result is "
                          "stored, so the next visit shows it at once."):
            return "run"
        st.caption(f"Nothing measured for these settings yet. A run takes {estimate} on this "
                   "machine; the page stays idle until you press the button.")
        return None
    cols = st.columns([4, 1])
    if fresh:
        cols[0].caption("Measured just now on this machine (and stored for the next visit).")
    else:
        cols[0].caption(":material/history: **Cached result from this machine**: measured earlier "
                        "with exactly these settings.")
    if cols[1].button("Re-measure", key=f"{name}__refresh",
                      help=f"Run it again on the engine ({estimate}) and replace the stored result."):
        return "refresh"
    return None


class progress_bar:
    """`with progress_bar("…") as cb: experiment(progress=cb)`: a bar the experiment advances."""

    def __init__(self, text: str):
        self.text = text

    def __enter__(self):
        self.bar = st.progress(0.0, text=self.text)

        def cb(fraction: float, text: str = ""):
            self.bar.progress(max(0.0, min(1.0, float(fraction))), text=text or self.text)
        return cb

    def __exit__(self, *exc):
        self.bar.empty()
        return False


def stored_or_measure(name: str, settings, run, button: str, estimate: str, text: str):
    """A lab's experiment as a page shows it: `run(model, **kw)` is a labs.lesson_runs experiment.

    Returns what is stored for these settings (looked up without loading the model), or None.
    Draws the run / re-measure button; pressing it measures on the loaded model under a progress
    bar and draws the page again (st.rerun does not return), which then finds the stored result.
    """
    got = run(ref(), peek=True)
    action = measure_buttons(name, settings, got is not None, button, estimate)
    if action is not None:
        with progress_bar(text) as cb:
            run(model(), progress=cb, refresh=action == "refresh")
        st.session_state[f"{name}__fresh"] = repr(settings)   # measure_buttons: "measured just now"
        st.rerun()
    return got


# ----------------------------------------------------------------------------- showing numbers


def fmt(value, unit: str = "", digits: int = 2, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
        return "—"
    return f"{value * scale:,.{digits}f} {unit}".strip()


def plot(fig) -> None:
    st.plotly_chart(fig, config=PLOT_CONFIG, width="stretch")


def table(df: pd.DataFrame, **kw) -> None:
    st.dataframe(df, hide_index=True, width="stretch", **kw)


def definitions(text: str) -> None:
    with st.expander("How these numbers are defined"):
        st.markdown(text)


METRIC_DEFINITIONS = """
Definitions follow vLLM's benchmarks; times are on the engine's clock.

- **TTFT** = first token time − arrival time. **TPOT** = (E2E − TTFT) / (output tokens − 1).
- **ITL** = a gap between two consecutive tokens of one request. **E2E** = last token time − arrival time.
- **Output throughput** = output tokens / duration (first arrival to the end of the last step).
- **Goodput** = requests that met every SLO target set / duration.
- **pNN** = the value NN% of requests stay at or under.
"""
