"""Reviewing a paused run: its tables as they stood at the end of one chosen step. No Streamlit.

The Playground's review shows the headline, the batch chart, the queue and the request
timeline at a chosen step. They all read the same tables, so rewinding the tables rewinds them
all: keep the steps up to that step, the requests that had arrived by its end, and undo what
happened to each request after it (a request that finished later was still running or waiting
then, and had made fewer tokens).
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from analysis.tables import Tables
from engine.core.request import Status

# Request columns that are only known once the request has finished.
_AT_FINISH = ["finish_s", "tpot_s", "e2e_s"]


def step_end(tables: Tables, step: int) -> float:
    """The engine clock at the end of `step` (which must be one the tables hold)."""
    row = tables.steps.loc[tables.steps["step"] == step, "t_end_s"]
    if len(row) == 0:
        raise ValueError(f"step {step} is not among the steps this run keeps "
                         f"({_held(tables.steps)})")
    return float(row.iloc[0])


def _held(steps: pd.DataFrame) -> str:
    return f"{int(steps['step'].iloc[0])}–{int(steps['step'].iloc[-1])}" if len(steps) else "none yet"


def tokens_after(steps: pd.DataFrame) -> Counter:
    """Decode tokens each request made in these steps (a decode member makes one token)."""
    made = Counter()
    for members in steps["members"]:
        made.update(rid for rid, phase, _ in members if phase.startswith("d"))
    return made


def _tpot_so_far(reqs: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """TPOT over the tokens each request had made by the last of `steps` (its latest token came at
    the end of the last step it decoded in); NaN before its second token."""
    last_token = {}
    for t_end, members in zip(steps["t_end_s"], steps["members"]):
        for rid, phase, _ in members:
            if phase.startswith("d"):
                last_token[rid] = t_end
    first = pd.to_numeric(reqs["first_token_s"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    last = np.array([last_token.get(rid, np.nan) for rid in reqs["id"]], dtype=float)
    n = reqs["output_tokens"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n >= 2, (last - first) / (n - 1), np.nan)


def tables_at(tables: Tables, step: int) -> Tables:
    """`tables` as they stood at the end of `step`."""
    t = step_end(tables, step)
    steps = tables.steps[tables.steps["step"] <= step]
    later = tables.steps[tables.steps["step"] > step]
    reqs = tables.requests
    reqs = reqs[pd.to_numeric(reqs["arrival_s"], errors="coerce") <= t].copy()

    def after(col):            # True where `col` happened after t, or has not happened yet
        v = pd.to_numeric(reqs[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        return ~(v <= t)

    open_then = after("finish_s")
    no_token_then = after("first_token_s")
    unscheduled_then = after("first_scheduled_s")
    made = tokens_after(later)
    undone = reqs["id"].map(lambda rid: made.get(rid, 0)).to_numpy() + no_token_then.astype(int)
    tokens = pd.to_numeric(reqs["output_tokens"], errors="coerce").fillna(0).to_numpy()
    reqs["output_tokens"] = np.where(open_then, np.maximum(tokens - undone, 0), tokens).astype(int)
    reqs.loc[open_then, _AT_FINISH] = np.nan
    if "tpot_so_far_s" in reqs.columns:
        reqs["tpot_so_far_s"] = np.where(open_then, _tpot_so_far(reqs, steps), reqs["tpot_so_far_s"])
    reqs.loc[no_token_then, ["first_token_s", "ttft_s"]] = np.nan
    reqs.loc[unscheduled_then, ["first_scheduled_s", "queue_s"]] = np.nan
    reqs.loc[open_then, "status"] = np.where(unscheduled_then[open_then], Status.WAITING.value,
                                             Status.RUNNING.value)
    marks = tables.marks[pd.to_numeric(tables.marks["t_s"], errors="coerce") <= t]
    return Tables(steps, reqs, marks, tables.retired)
