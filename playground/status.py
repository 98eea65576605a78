"""The Playground's status line, in words that describe the run as it is now. No Streamlit.

Counts cover the whole run and always add up: "31 arrived = 15 waiting + 4 running + 12
finished", read where the engine keeps them (engine.metrics.Counts), never summed from a window
of rows. The batch is read against each step's own max_num_seqs, so lowering it from 16 to 4
reads "4 of 4 slots", never "16 of 4": the requests over the new limit go back to the queue
(engine/core/scheduler.py) and are counted there.
"""
from __future__ import annotations

import pandas as pd

from analysis.tables import Tables
from playground.setup import Setup

RATE_OVER_STEPS = 50          # steps/s is measured over this many recent steps


ENDLESS = "endless traffic"   # not "continuous": that word names a batching mode here


def arrived_text(arrived: int, setup: Setup) -> str:
    """'12 of 64', or '12 (endless traffic)' when there is no end to count towards."""
    if setup.endless:
        return f"{arrived:,} ({ENDLESS})"
    return f"{arrived:,} of {setup.num_requests:,}"


def last_change_step(marks: pd.DataFrame, knob: str) -> int | None:
    """The step of the latest mark that changed `knob`, if any."""
    if len(marks) == 0:
        return None
    hits = marks[marks["knobs"].map(lambda names: knob in names)]
    return int(hits["step"].max()) if len(hits) else None


def batch_text(steps: pd.DataFrame, marks: pd.DataFrame, max_num_seqs: int) -> str:
    """The largest batch against the slots in force, over the steps that ran with them (a step
    in progress when the limit changed still ran with the old one). The limit is the latest
    step's own, as the counts beside it are: right after 16 -> 4 the line reads "16 of 16 slots,
    4 from the next step", never "16 of 4"."""
    if len(steps) and "max_num_seqs" in steps.columns and int(steps["max_num_seqs"].iloc[-1]) > 0:
        ran_with = int(steps["max_num_seqs"].iloc[-1])
        if ran_with != max_num_seqs:
            return (f"largest batch: {int(steps['members'].iloc[-1:].map(len).max())} of {ran_with} slots, "
                    f"{max_num_seqs} from the next step")
    since = last_change_step(marks, "max_num_seqs")
    if since is not None:
        steps = steps[steps["step"] >= since]
    if "max_num_seqs" in steps.columns:          # only the latest stretch of steps under this limit
        other = steps["step"][steps["max_num_seqs"] != max_num_seqs]
        steps = steps[steps["step"] > other.max()] if len(other) else steps
    where = f" since the change at step {since:,}" if since is not None else ""
    if len(steps) == 0:
        return f"largest batch{where}: none yet, of {max_num_seqs} slots"
    return f"largest batch{where}: {int(steps['members'].map(len).max())} of {max_num_seqs} slots"


def steps_per_s(steps: pd.DataFrame) -> float | None:
    recent = steps.iloc[-RATE_OVER_STEPS:]
    if len(recent) < 2:
        return None
    span = float(recent["t_end_s"].iloc[-1] - recent["t_start_s"].iloc[0])
    return len(recent) / span if span > 0 else None


def status_text(state: str, tables: Tables, setup: Setup, sent: int, shared: bool = False) -> str:
    """The whole status line (Markdown), e.g. "**Engine: running** · continuous batching · steps: 1,204 · 310 arrived =
    2 waiting + 2 running + 306 finished · largest batch since the change at step 812: 2 of 2
    slots · 9.1 steps/s". `setup`: the one in effect (PlaygroundRun.setup), or the widgets'
    before a run. `sent`: requests this page's workload has sent; `shared`: the engine is a
    shared server's, whose counts cover everyone's requests."""
    steps = tables.steps
    counts = tables.now()
    taken = int(steps["step"].iloc[-1]) + 1 if len(steps) else 0     # steps count from 0, for the whole run
    rate = steps_per_s(steps)
    if shared:
        whose = f"shared engine, everyone's requests: {counts.text()} · yours sent: {arrived_text(sent, setup)}"
    else:
        whose = f"{counts.text()} (of {setup.num_requests:,})" if not setup.endless else \
            f"{counts.text()} ({ENDLESS})"
    mode = getattr(setup.mode, "value", setup.mode)
    return (f"**Engine: {state}** · {mode} batching · steps: {taken:,} · {whose} · "
            f"{batch_text(steps, tables.marks, setup.max_num_seqs)}"
            + (f" · {rate:.1f} steps/s" if rate is not None else ""))
