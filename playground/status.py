"""The Playground's status line, in words that describe the run as it is now. No Streamlit.

Counts cover the whole run (the window's rows plus what left it). The largest batch is read
over the steps since max_num_seqs last changed (the scheduler never runs more than the limit
in force), so lowering it from 8 to 2 reads "2 of 2 slots", never "8 of 2".
"""
from __future__ import annotations

import pandas as pd

from analysis.tables import Tables
from engine import metrics
from playground.setup import Setup

RATE_OVER_STEPS = 50          # steps/s is measured over this many recent steps


def arrived_text(arrived: int, setup: Setup) -> str:
    """'12 of 64', or '12 (continuous)' when there is no end to count towards."""
    if setup.endless:
        return f"{arrived:,} (continuous)"
    return f"{arrived:,} of {setup.num_requests:,}"


def last_change_step(marks: pd.DataFrame, knob: str) -> int | None:
    """The step of the latest mark that changed `knob` (marks with a "knobs" column), if any."""
    if len(marks) == 0 or "knobs" not in marks.columns:
        return None
    hits = marks[marks["knobs"].map(lambda names: knob in names)]
    return int(hits["step"].max()) if len(hits) else None


def batch_text(steps: pd.DataFrame, marks: pd.DataFrame, max_num_seqs: int) -> str:
    """The largest batch against the slots in force, over the steps that ran with them."""
    since = last_change_step(marks, "max_num_seqs")
    if since is not None:
        steps = steps[steps["step"] >= since]
    where = f" since the change at step {since:,}" if since is not None else ""
    if len(steps) == 0:
        return f"largest batch{where}: none yet, of {max_num_seqs} slots"
    return f"largest batch{where}: {int(steps['running'].max())} of {max_num_seqs} slots"


def steps_per_s(steps: pd.DataFrame) -> float | None:
    recent = steps.iloc[-RATE_OVER_STEPS:]
    if len(recent) < 2:
        return None
    span = float(recent["t_end_s"].iloc[-1] - recent["t_start_s"].iloc[0])
    return len(recent) / span if span > 0 else None


def status_text(state: str, tables: Tables, setup: Setup, arrived: int) -> str:
    """The whole status line (Markdown), e.g. "**Engine: running** · steps: 1,204 · arrived:
    310 (continuous) · finished: 298 · rejected: 0 · largest batch since the change at step
    812: 2 of 2 slots · 9.1 steps/s". `setup`: the one in effect (PlaygroundRun.setup), or the widgets' before a run."""
    steps, reqs, old = tables.steps, tables.requests, tables.retired
    status = reqs["status"] if len(reqs) else pd.Series(dtype=str)
    finished = int((status == "finished").sum()) + old.count("finished")
    unserved = int(status.isin(metrics.UNSERVED).sum()) + sum(map(old.count, metrics.UNSERVED))
    rate = steps_per_s(steps)
    return (f"**Engine: {state}** · steps: {len(steps) + old.steps:,} · arrived: "
            f"{arrived_text(arrived, setup)} · finished: {finished:,} · rejected: {unserved:,} · "
            f"{batch_text(steps, tables.marks, setup.max_num_seqs)}"
            + (f" · {rate:.1f} steps/s" if rate is not None else ""))
