"""Streamlit glue shared by the lesson lab pages: the measure / re-measure buttons, progress
bars, the "cached result from this machine" note, links that reproduce a lab, and how numbers,
charts and tables are shown.

Pages stay thin: widgets here and in the page; each lab's workload, runs, analysis and figures
in labs/<lab>/experiment.py.
"""
from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from engine import metrics
from ui import session

PLOT_CONFIG = {"displayModeBar": False}


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


def _measure_buttons(name: str, settings, has_result: bool, label: str, estimate: str) -> str | None:
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


class _progress_bar:
    """`with _progress_bar("…") as cb: experiment(progress=cb)`: a bar the experiment advances."""

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


def stored_or_measure(name: str, settings, run, button: str, estimate: str, text: str, stop: bool = True):
    """A lab's experiment as a page shows it: `run(model, **kw)` is one of its experiment.py's runs.

    Returns what is stored for these settings (looked up without loading the model). Draws the
    run / re-measure button; pressing it measures on the loaded model under a progress bar and
    draws the page again (st.rerun does not return), which then finds the stored result. While
    nothing is stored the page ends here (st.stop), or with stop=False this returns None.
    """
    got = run(session.model_name(), peek=True)   # the name is enough to look up stored results
    action = _measure_buttons(name, settings, got is not None, button, estimate)
    if action is not None:
        with _progress_bar(text) as cb:
            run(session.model(), progress=cb, refresh=action == "refresh")
        st.session_state[f"{name}__fresh"] = repr(settings)   # _measure_buttons: "measured just now"
        st.rerun()
    if got is None and stop:
        st.stop()
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


def definitions(text: str, with_metrics: bool = True) -> None:
    """The lab's "How these numbers are defined" box: engine.metrics' definitions, then `text`."""
    with st.expander("How these numbers are defined"):
        st.markdown((metrics.DEFINITIONS if with_metrics else "") + text)
