"""Batch membership: which request sits in which batch slot at each engine step. No Streamlit.

A steps table's `members` column holds, for each step, its (request id, phase, tokens) tuples
(lists, after a trip through JSON).
"""
from __future__ import annotations

import heapq
import re
import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.style import EMPTY_COLOR, PALETTE, empty_figure, is_empty, layout, mark_lines, num

MAX_GRID_STEPS = 600  # most step columns the batch-membership heatmap draws
SLOT_WARMUP_STEPS = 500  # history replayed before the shown window to place requests in rows


def member_counts(steps: pd.DataFrame) -> np.ndarray:
    """How many sequences ran in each step."""
    if is_empty(steps, "members"):
        return np.zeros(0 if steps is None else len(steps), dtype=np.int64)
    return np.fromiter(map(len, steps["members"].tolist()), dtype=np.int64, count=len(steps))


@dataclass
class SlotGrid:
    """Which request sits in which batch slot at each step (rows = steps, columns = slots)."""

    steps: np.ndarray  # engine step number of each row
    names: np.ndarray  # request ids in order of first appearance, then "" (for empty)
    code: np.ndarray  # (n_steps, n_slots) index into names; -1 (the "") where the slot is empty
    phase: np.ndarray  # (n_steps, n_slots) 0 empty, 1 prefill, 2 decode
    tokens: np.ndarray  # (n_steps, n_slots) tokens the request carried in that step

    @property
    def ids(self) -> np.ndarray:
        """(n_steps, n_slots) request id in each cell, "" where the slot is empty."""
        return self.names[self.code]

    @property
    def n_slots(self) -> int:
        return self.code.shape[1]

    def empty_cells(self) -> int:
        return int((self.phase == 0).sum())


def slot_grid(steps: pd.DataFrame, max_slots: int) -> SlotGrid:
    """Give every request a stable row: it keeps its row while it stays in the batch,
    and a joining request takes the lowest free row. Rows are freed before joins,
    so a request can take the row another one left in the same step.

    If a step has more members than max_slots (the policy was raised mid-run) the grid
    grows to fit.
    """
    n = 0 if steps is None else len(steps)
    rows, cols, codes, phases, tokens = [], [], [], [], []
    code_of: dict[str, int] = {}  # request id -> its index in names
    slot_of: dict[str, int] = {}  # request id -> row, for requests in the batch
    free = list(range(max_slots))  # a heap: lowest free row first
    width = max_slots
    per_step = steps["members"].tolist() if n and "members" in steps.columns else [()] * n
    for i, members in enumerate(per_step):
        present = {rid for rid, _, _ in members}
        for rid in [r for r in slot_of if r not in present]:
            heapq.heappush(free, slot_of.pop(rid))
        for rid, phase, tok in members:
            slot = slot_of.get(rid)
            if slot is None:
                if free:
                    slot = heapq.heappop(free)
                else:
                    slot, width = width, width + 1
                slot_of[rid] = slot
            rows.append(i)
            cols.append(slot)
            codes.append(code_of.setdefault(rid, len(code_of)))
            phases.append(1 if phase.startswith("p") else 2)
            tokens.append(tok)
    grid = SlotGrid(
        steps=num(steps, "step").astype(np.int64) if n else np.zeros(0, np.int64),
        names=np.array([*code_of, ""], dtype=str),
        code=np.full((n, width), -1, dtype=np.int64),
        phase=np.zeros((n, width), dtype=np.int8),
        tokens=np.zeros((n, width), dtype=np.int64),
    )
    grid.code[rows, cols] = codes
    grid.phase[rows, cols] = phases
    grid.tokens[rows, cols] = tokens
    return grid


def _color_index(rid: str) -> int:
    """A stable hue per request id: neighbouring numeric ids get different hues."""
    if not rid:
        return 0
    digits = re.findall(r"\d+", rid)
    value = int(digits[-1]) if digits else zlib.crc32(rid.encode())
    return value % len(PALETTE)


def _slot_colorscale() -> list:
    """Discrete colorscale: z=0 empty, z=1+2k prefill of hue k, z=2+2k decode of hue k."""
    colors = [EMPTY_COLOR] + [c for pair in PALETTE for c in pair]
    n = len(colors)
    scale = []
    for i, c in enumerate(colors):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale


_SLOT_SCALE = _slot_colorscale()


def batch_membership(steps: pd.DataFrame, max_slots: int, window: int | None = None,
                     upto_step: int | None = None, marks: pd.DataFrame | None = None,
                     max_steps: int = MAX_GRID_STEPS) -> go.Figure:
    """Who shares each engine step: x = step, y = batch slot, one colour per request.

    window: show only the last N steps (live scrolling); upto_step: replay position.
    At most max_steps columns are drawn; beyond that the latest ones are shown.
    Rows match a replay from step 0 whenever the batch was empty at some point in the
    SLOT_WARMUP_STEPS before the shown window (see slot_grid for the row rule).
    """
    title = "Batch membership: who runs in each step"
    good = ("Darker = prefill, lighter = decode, grey = empty slot. "
            "Good: few grey cells — a grey cell is a slot that did no work.")
    xlabel, ylabel = "engine step", "batch slot"
    if is_empty(steps, "step", "members"):
        return empty_figure(title, good, xlabel, ylabel)
    if not steps["step"].is_monotonic_increasing:
        steps = steps.sort_values("step")
    hi = len(steps)
    if upto_step is not None:
        hi = int(np.searchsorted(num(steps, "step"), upto_step, side="right"))
    if hi == 0:
        return empty_figure(title, good, xlabel, ylabel)

    shown = min(window or max_steps, max_steps)
    lo = max(0, hi - shown)
    # Replay a little history so requests already running at the window's left edge sit in
    # the rows they really had. An idle step empties the batch, so replaying from the last
    # idle step gives exactly the rows a replay from step 0 would.
    start = max(0, lo - SLOT_WARMUP_STEPS)
    idle = np.flatnonzero(member_counts(steps.iloc[start:lo + 1]) == 0)
    if len(idle):
        start += int(idle[-1])
    grid = slot_grid(steps.iloc[start:hi], max_slots)
    keep = slice(lo - start, None)
    code, phase, tokens, x = grid.code[keep], grid.phase[keep], grid.tokens[keep], grid.steps[keep]

    hue = np.array([_color_index(name) for name in grid.names])[code]
    z = np.where(phase == 0, 0, 2 * hue + phase)
    # One hover string per cell, looked up from a small table: plotly deep-copies every
    # string of a text array, so the fewer string arrays the faster the chart.
    labels = np.array([f"{name} {p}" for name in grid.names for p in ("prefill", "decode")]
                      + ["empty slot"])
    label = labels[np.where(phase == 0, -1, 2 * code + phase - 1)]
    gap = 1 if len(x) <= 200 else 0
    heat = go.Heatmap(
        z=z.T, x=x, y=np.arange(grid.n_slots), text=label.T, customdata=tokens.T,
        colorscale=_SLOT_SCALE, zmin=-0.5, zmax=2 * len(PALETTE) + 0.5, showscale=False,
        xgap=gap, ygap=1, name="batch",
        hovertemplate="step %{x} · slot %{y}<br><b>%{text}</b> · %{customdata} tokens"
                      "<extra></extra>",
    )
    legend = [
        go.Scatter(x=[None], y=[None], mode="markers", name=name,
                   marker=dict(symbol="square", size=12, color=color))
        for name, color in [("prefill (darker)", PALETTE[0][0]), ("decode (lighter)", PALETTE[0][1]),
                            ("empty slot", EMPTY_COLOR)]
    ]
    note = good if hi <= shown else f"Showing the last {len(x)} steps. " + good
    shapes, notes = mark_lines(marks, "step", lo=x[0], hi=x[-1])
    return go.Figure(data=[heat, *legend], layout=layout(
        title, note, xlabel, ylabel, plot_bgcolor="white", shapes=shapes, annotations=notes,
        xaxis=dict(showgrid=False, zeroline=False),
        yaxis=dict(autorange="reversed", dtick=1 if grid.n_slots <= 32 else None,
                   showgrid=False, zeroline=False),
    ))
