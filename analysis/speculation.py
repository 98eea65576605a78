"""Speculative decoding, step by step: how many drafted tokens each engine step checked, and how
many of them the model accepted or rejected. No Streamlit.

A steps table's `drafts` column holds, for each step, its (request id, drafted, accepted) tuples
(lists, after a trip through JSON); rejected = drafted - accepted, so the two bars of a step always
add up to what it drafted.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.style import empty_figure, figure, is_empty, layout, num

ACCEPTED_COLOR, REJECTED_COLOR = "#2a9d8f", "#e76f51"


def draft_counts(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per step: step, drafts (requests whose guesses were checked), drafted, accepted,
    rejected (tokens)."""
    if is_empty(steps, "step", "drafts"):
        return pd.DataFrame({c: [] for c in ("step", "drafts", "drafted", "accepted", "rejected")})
    per_step = [d if isinstance(d, (tuple, list)) else () for d in steps["drafts"].tolist()]
    drafted = np.array([sum(int(x[1]) for x in d) for d in per_step], dtype=np.int64)
    accepted = np.array([sum(int(x[2]) for x in d) for d in per_step], dtype=np.int64)
    return pd.DataFrame({"step": num(steps, "step").astype(np.int64), "drafts": [len(d) for d in per_step],
                         "drafted": drafted, "accepted": accepted, "rejected": drafted - accepted})


def drafts_by_step(steps: pd.DataFrame, presenter: bool = False) -> dict:
    """Stacked bars: each step's accepted drafted tokens under its rejected ones (their sum: the
    tokens it drafted), and the acceptance over the whole table in the subtitle."""
    title = "Drafted tokens by step: accepted and rejected"
    good = ("Each bar is the tokens guessed ahead (speculative decoding) that a step checked. Good: "
            "mostly accepted, each one a token made without a step of its own; a rejected token cost "
            "its share of the forward pass for nothing.")
    xlabel, ylabel = "engine step", "drafted tokens"
    counts = draft_counts(steps)
    if len(counts) == 0 or counts["drafted"].sum() == 0:
        return empty_figure(title, good + " (Nothing drafted yet: is speculative decoding on?)", xlabel, ylabel,
                            presenter)
    drafted, accepted = int(counts["drafted"].sum()), int(counts["accepted"].sum())
    good = f"{accepted:,} of {drafted:,} drafted tokens accepted ({accepted / drafted:.0%}). " + good
    bars = [dict(type="bar", x=counts["step"], y=counts[col], name=name, marker=dict(color=color),
                 hovertemplate=f"step %{{x}}: %{{y}} {name}<extra></extra>")
            for col, name, color in (("accepted", "accepted", ACCEPTED_COLOR), ("rejected", "rejected", REJECTED_COLOR))]
    return figure(data=bars, layout=layout(title, good, xlabel, ylabel, presenter=presenter, barmode="stack",
                                           plot_bgcolor="white"))
