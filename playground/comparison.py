"""Comparing Playground runs: the run kept behind this one, a before/after table, a summary.

When a new run starts, the one before it stays as the *reference*: a faint grey line on the
TTFT, TPOT, queue and throughput charts, and the "before" column of a table of headline numbers.
"Pin this run" keeps a run as the reference for every run after it, until it is unpinned.
Paused or finished, a few sentences say what changed against the reference, what it did, and
what to try next (analysis/compare.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from analysis import compare, frame_metrics
from analysis.tables import Tables
from playground.setup import Setup

REFERENCE = "pg_reference"


@dataclass(frozen=True)
class Reference:
    tables: Tables
    setup: Setup         # the setup in effect at its end
    headline: dict       # frame_metrics.headline of its tables
    name: str            # "previous run" or "pinned run", as the charts' legends say
    pinned: bool


def headline(tables: Tables, setup: Setup) -> dict:
    return frame_metrics.headline(tables.requests, tables.steps, setup.ttft_slo_s, setup.tpot_slo_s,
                                  setup.max_num_seqs, tables.retired, tables.now())


def reference() -> Reference | None:
    return st.session_state.get(REFERENCE)


def _keep(lab, name: str, pinned: bool) -> None:
    _, tables = lab.read()
    st.session_state[REFERENCE] = Reference(tables, lab.setup, headline(tables, lab.setup), name, pinned)


def keep_previous(lab) -> None:
    """A new run replaces `lab`: it becomes the reference, unless a pinned run is kept."""
    ref = reference()
    if lab is not None and lab.steps_taken > 0 and not (ref is not None and ref.pinned):
        _keep(lab, "previous run", pinned=False)


def pin(lab) -> None:
    _keep(lab, "pinned run", pinned=True)


def unpin() -> None:
    st.session_state.pop(REFERENCE, None)


def _number(x: float, fmt: str = ",.3g") -> str:
    return "—" if pd.isna(x) else format(x, fmt)


def table(ref: Reference, now: dict) -> pd.DataFrame:
    """Headline numbers of the reference and this run, as text of three significant digits."""
    df = compare.before_after(ref.headline, now, names=(ref.name, "this run"))
    for col in (ref.name, "this run", "change"):
        df[col] = df[col].map(_number)
    df["change %"] = df["change %"].map(lambda x: _number(x, "+,.0f") + ("%" if pd.notna(x) else ""))
    return df


def summary(ref: Reference | None, now: dict, setup: Setup, tables: Tables) -> list[str]:
    """What changed against the reference and what it did, then the next experiment; with no
    reference, only the next experiment (there is nothing to compare with)."""
    policy = setup.policy()
    if ref is None:
        return compare.run_summary(now, now, (), policy, tables)[-1:]
    changed = compare.changes_between(ref.setup.policy(), policy, ref.setup.workload(), setup.workload())
    return compare.run_summary(ref.headline, now, changed, policy, tables, names=(ref.name, "this run"))


def panel(lab, tables: Tables, setup: Setup, now: dict, reviewing: bool) -> None:
    """The Compare section: pin buttons, the before/after table and (paused or finished) the
    summary. `setup`: the one in effect for this run; `now`: its headline()."""
    ref = reference()
    st.subheader("Compare runs")
    left, right, _ = st.columns([2, 2, 6])
    left.button("Pin this run", key="pg_pin", icon=":material/push_pin:", width="stretch",
                disabled=lab is None or len(tables.steps) == 0, on_click=lambda: pin(lab),
                help="Keep this run as the grey reference line behind every later run.")
    right.button("Unpin", key="pg_unpin", width="stretch", disabled=ref is None or not ref.pinned,
                 on_click=unpin, help="Go back to comparing with the previous run.")
    if ref is None:
        st.caption("Start another run and this one stays behind it as a faint grey line on the "
                   "TTFT, TPOT, queue and throughput charts, with its numbers beside the new run's.")
    else:
        st.caption(f"This run against the {ref.name} (grey on the charts).")
        st.dataframe(table(ref, now), hide_index=True, width="stretch")
    if reviewing and len(tables.steps):
        st.markdown("**Summary.** " + " ".join(summary(ref, now, setup, tables)))
