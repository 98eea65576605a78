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

from analysis.style import (EMPTY_COLOR, REQUEST_COLORS, empty_figure, figure, font_px, ink_on, is_empty, layout,
                            mark_legend, mark_lines, num)

MAX_GRID_STEPS = 600  # most step columns the batch-membership heatmap draws
SLOT_WARMUP_STEPS = 500  # history replayed before the shown window to place requests in rows
# Cells get a request-id label only where it fits. The page's width is not known here, so the
# fit assumes a plot area this wide; hover shows the id in every cell whatever the width.
PLOT_WIDTH_PX = 900
ROW_PX = 22              # target height of one batch-slot row
INKS = np.array([ink_on(c) for c in REQUEST_COLORS])   # text and marks drawn on each colour
INK_COLORS = ("black", "white")


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
    cached: np.ndarray = None  # (n_steps, n_slots) prompt tokens a prefix-cache hit saved it, as it started
    drafted: np.ndarray = None   # (n_steps, n_slots) tokens guessed ahead and checked in that step (speculation)
    accepted: np.ndarray = None  # (n_steps, n_slots) of them, those the model agreed with; the rest were rejected

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
    rows, cols, codes, phases, tokens, cached, drafted, accepted = [], [], [], [], [], [], [], []
    code_of: dict[str, int] = {}  # request id -> its index in names
    slot_of: dict[str, int] = {}  # request id -> row, for requests in the batch
    free = list(range(max_slots))  # a heap: lowest free row first
    width = max_slots
    per_step = steps["members"].tolist() if n and "members" in steps.columns else [()] * n
    hits = steps["prefix_hits"].tolist() if n and "prefix_hits" in steps.columns else [()] * n
    drafts = steps["drafts"].tolist() if n and "drafts" in steps.columns else [()] * n
    # The live page rebuilds this every refresh over hundreds of steps: a step that keeps the
    # previous step's batch (most decode steps) reuses its rows and codes.
    ids, step_cols, step_codes = [], [], []     # the previous step's request ids, their rows and codes
    for i, members in enumerate(per_step):
        step_ids = [m[0] for m in members]
        if step_ids != ids:      # someone joined or left
            present = set(step_ids)
            for rid in [r for r in slot_of if r not in present]:
                heapq.heappush(free, slot_of.pop(rid))
            for rid in step_ids:
                if rid not in slot_of:
                    if free:
                        slot_of[rid] = heapq.heappop(free)
                    else:
                        slot_of[rid], width = width, width + 1
            ids, step_cols = step_ids, [slot_of[rid] for rid in step_ids]
            step_codes = [code_of.setdefault(rid, len(code_of)) for rid in step_ids]
        rows += [i] * len(step_ids)
        cols += step_cols
        codes += step_codes
        phases += [1 if phase[:1] == "p" else 2 for _, phase, _ in members]
        tokens += [tok for _, _, tok in members]
        hit = dict(hits[i]) if isinstance(hits[i], (tuple, list)) and hits[i] else None
        cached += [hit.get(rid, 0) for rid in step_ids] if hit else [0] * len(step_ids)
        checked = {d[0]: (d[1], d[2]) for d in drafts[i]} if isinstance(drafts[i], (tuple, list)) else {}
        drafted += [checked.get(rid, (0, 0))[0] for rid in step_ids]
        accepted += [checked.get(rid, (0, 0))[1] for rid in step_ids]
    grid = SlotGrid(
        steps=num(steps, "step").astype(np.int64) if n else np.zeros(0, np.int64),
        names=np.array([*code_of, ""], dtype=str),
        code=np.full((n, width), -1, dtype=np.int64),
        phase=np.zeros((n, width), dtype=np.int8),
        tokens=np.zeros((n, width), dtype=np.int64),
        cached=np.zeros((n, width), dtype=np.int64),
        drafted=np.zeros((n, width), dtype=np.int64),
        accepted=np.zeros((n, width), dtype=np.int64),
    )
    cells = (np.asarray(rows, dtype=np.intp), np.asarray(cols, dtype=np.intp))
    grid.code[cells] = codes
    grid.phase[cells] = phases
    grid.tokens[cells] = tokens
    grid.cached[cells] = cached
    grid.drafted[cells] = drafted
    grid.accepted[cells] = accepted
    return grid


def _preferred_hue(rid: str) -> int:
    """A request's own hue: its number (the last digits in its id) modulo the palette, so
    requests that arrive one after another prefer different hues, and a request keeps its
    hue while the window scrolls."""
    digits = re.findall(r"\d+", rid)
    value = int(digits[-1]) if digits else zlib.crc32(rid.encode())
    return value % len(REQUEST_COLORS)


def request_hues(code: np.ndarray, names: np.ndarray) -> np.ndarray:
    """A palette index for every request (index into names; -1 for those not in the window).

    The rule, requests taken in order of first appearance in the window (code: steps x slots):
    each takes the first hue, counting on from its preferred one, that no earlier request in
    the window has. So a window of at most len(REQUEST_COLORS) requests never repeats a hue.
    When every hue is taken, a request takes the first hue whose latest holder left the batch
    before it joined, so requests in the batch together still differ; if even that fails (more
    requests at once than hues) the first hue whose latest holder is not in a neighbouring slot,
    and its label and hover tell it apart from the other holders.
    """
    hues = np.full(len(names), -1, dtype=np.int64)
    flat = code.ravel()
    seen = flat >= 0
    if not seen.any():
        return hues
    rows, slots = np.divmod(np.flatnonzero(seen), code.shape[1])
    present = flat[seen]
    ids, first_at = np.unique(present, return_index=True)
    _, last_from_end = np.unique(present[::-1], return_index=True)
    first_row, last_row = rows[first_at], rows[len(rows) - 1 - last_from_end]
    n = len(REQUEST_COLORS)
    used = [False] * n
    busy_until = [-1] * n     # last row of the latest request given each hue
    held_in = [-9] * n        # the slot of the latest request given each hue
    joined = sorted(zip(first_row.tolist(), slots[first_at].tolist(), ids.tolist(), last_row.tolist()))
    for row, slot, c, last in joined:
        pref = _preferred_hue(str(names[c]))
        order = [(pref + j) % n for j in range(n)]
        hue = next((h for h in order if not used[h]), None)
        if hue is None:
            hue = next((h for h in order if busy_until[h] < row), None)
        if hue is None:
            hue = next((h for h in order if abs(held_in[h] - slot) > 1), pref)
        used[hue] = True
        busy_until[hue] = max(busy_until[hue], last)
        held_in[hue] = slot
        hues[c] = hue
    return hues


def _slot_colorscale() -> list:
    """Discrete colorscale: z=0 empty slot, z=1+k the request colour k."""
    colors = [EMPTY_COLOR, *REQUEST_COLORS]
    n = len(colors)
    scale = []
    for i, c in enumerate(colors):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale


_SLOT_SCALE = _slot_colorscale()


def _runs(code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stretches of one request in one slot (code: slots x steps): (slot, first column, length)."""
    padded = np.concatenate([code, np.full((code.shape[0], 1), -2)], axis=1).ravel()
    starts = np.flatnonzero(np.r_[True, padded[1:] != padded[:-1]])
    lengths = np.diff(np.r_[starts, len(padded)])
    keep = padded[starts] >= 0
    slot, col = np.divmod(starts[keep], code.shape[1] + 1)
    return slot, col, lengths[keep]


HIT_MARK = dict(symbol="diamond", color="white", line=dict(color="black", width=1.5))
DRAFT_MARK = dict(symbol="triangle-up", color="white", line=dict(color="black", width=1.5))
ALL_REJECTED_MARK = dict(symbol="triangle-down", color="black", line=dict(color="white", width=1))


def _legend(phase: np.ndarray, shapes: list, hits: bool = False, drafts: tuple[bool, bool] = (False, False)) -> list:
    """One legend entry for each kind of thing drawn, drawn the way the chart draws it."""
    entries = [
        ("prefix-cache hit (◆): prompt tokens not computed", hits, dict(size=10, **HIT_MARK)),
        ("drafts checked, some accepted (△)", drafts[0], dict(size=10, **DRAFT_MARK)),
        ("drafts checked, all rejected (▼)", drafts[1], dict(size=10, **ALL_REJECTED_MARK)),
        ("prefill step (╱)", (phase == 1).any(), dict(symbol="line-ne", size=12,
                                                       line=dict(color="black", width=2))),
        ("decode step (plain)", (phase == 2).any(), dict(symbol="square", size=12, color="white",
                                                          line=dict(color="#555", width=1))),
        ("empty slot", (phase == 0).any(), dict(symbol="square", size=12, color=EMPTY_COLOR)),
    ]
    return [dict(type="scatter", x=[None], y=[None], mode="markers", name=name, marker=marker, hoverinfo="skip")
            for name, drawn, marker in entries if drawn] + mark_legend(shapes)


def owner_hues(names: np.ndarray, owners: dict, hue_of: dict) -> np.ndarray:
    """A palette index per request (index into names) from its owner's hue; -1 for "" and for a
    request whose owner has no hue (drawn in OTHER_HUE)."""
    return np.array([hue_of.get(owners.get(str(n)), OTHER_HUE) if n else -1 for n in names], dtype=np.int64)


OTHER_HUE = len(REQUEST_COLORS) - 1      # requests of no one named: the palette's last colour


MIN_GAPPED_PX = 8          # a row at least this tall keeps a one-pixel gap under it


def batch_membership(steps: pd.DataFrame, max_slots: int, window: int | None = None,
                     upto_step: int | None = None, marks: pd.DataFrame | None = None,
                     max_steps: int = MAX_GRID_STEPS, presenter: bool = False,
                     owners: dict | None = None, owner_hue: dict | None = None) -> dict:
    """Who shares each engine step: x = step, y = batch slot, one colour per request.

    owners (request id -> owner, e.g. a student's name) and owner_hue (owner -> palette index):
    one colour per owner instead, cells labelled with the owner's name, and a legend that names
    every owner drawn (a classroom).

    window: show the last N steps (live scrolling); upto_step: replay position. The x-axis
    always spans the whole window (or the whole table, up to max_steps columns), from the first
    step on, so it never rescales while the run fills it. Rows match a replay from step 0
    whenever the batch was empty at some point in the SLOT_WARMUP_STEPS before the shown
    window (see slot_grid for the row rule); colours follow request_hues.
    """
    title = "Batch membership by step"
    good = ("One colour per request (hover or label: its id); ╱\u00a0=\u00a0prefill step, plain = "
            "decode step, grey = empty slot (blank: above that step's max_num_seqs). Good: few grey cells — "
            "a grey cell is a slot that did no work.")
    xlabel, ylabel = "engine step", "batch slot"
    if is_empty(steps, "step", "members"):
        return empty_figure(title, good, xlabel, ylabel, presenter)
    if not steps["step"].is_monotonic_increasing:
        steps = steps.sort_values("step")
    hi = len(steps)
    if upto_step is not None:
        hi = int(np.searchsorted(num(steps, "step"), upto_step, side="right"))
    if hi == 0:
        return empty_figure(title, good, xlabel, ylabel, presenter)

    columns = min(window or len(steps), max_steps)
    lo = max(0, hi - columns)
    # Replay a little history so requests already running at the window's left edge sit in
    # the rows they really had. An idle step empties the batch, so replaying from the last
    # idle step gives exactly the rows a replay from step 0 would.
    start = max(0, lo - SLOT_WARMUP_STEPS)
    idle = np.flatnonzero(member_counts(steps.iloc[start:lo + 1]) == 0)
    if len(idle):
        start += int(idle[-1])
    # Each step's own limit, where the table records it: the rows are the most slots any step
    # shown had, and a step's rows above its own limit are no slot at all (left blank), so
    # lowering max_num_seqs does not draw empty slots that no longer exist.
    limits = None
    if "max_num_seqs" in steps.columns:
        shown_limits = num(steps.iloc[lo:hi], "max_num_seqs")
        if len(shown_limits) and (shown_limits > 0).all():
            limits, max_slots = shown_limits.astype(np.int64), int(shown_limits.max())
    grid = slot_grid(steps.iloc[start:hi], max_slots)
    keep = slice(lo - start, None)
    code, phase, tokens, x = grid.code[keep], grid.phase[keep], grid.tokens[keep], grid.steps[keep]
    cached, drafted, accepted = grid.cached[keep], grid.drafted[keep], grid.accepted[keep]

    by_owner = owners is not None
    if by_owner:
        owner_hue = owner_hue or {}
        hue = owner_hues(grid.names, owners, owner_hue)[code]
        shown = np.array([owners.get(str(n), "other") if n else "" for n in grid.names], dtype=str)
        title, good = (title, "One colour per student (hover: the request); ╱\u00a0=\u00a0prefill step, plain = "
                       "decode step, grey = empty slot. Good: few grey cells.")
    else:
        hue = request_hues(code, grid.names)[code]      # -1 (empty) where code is -1
        shown = grid.names
    z = np.where(phase == 0, 0, hue + 1).astype(float)
    if limits is not None:                   # no slot: above the step's own max_num_seqs
        z[(np.arange(grid.n_slots)[None, :] >= limits[:, None]) & (phase == 0)] = np.nan
    # One hover string per cell, looked up from a small table: plotly deep-copies every
    # string of a text array, so the fewer string arrays the faster the chart.
    labels = np.array([(f"{who} · {name} {p}" if by_owner else f"{name} {p}")
                       for name, who in zip(grid.names, shown) for p in ("prefill", "decode")]
                      + ["empty slot"])
    label = labels[np.where(phase == 0, -1, 2 * code + phase - 1)]
    px = font_px(presenter)
    # In presenter mode the chart fits a projector's screen under the page's controls.
    plot_h = max(160, min(250, ROW_PX * grid.n_slots)) if presenter else max(220, min(520, ROW_PX * grid.n_slots))
    cell_w, cell_h = PLOT_WIDTH_PX / columns, plot_h / grid.n_slots
    # No gap between steps: a gap is a fixed pixel, and where a cell is a few pixels wide (a long run,
    # a narrow column, a zoomed-out view) the gaps become white stripes that hide the grey empty
    # slots. Slots keep a one-pixel gap only where a row is tall enough for it not to show as stripes.
    heat = dict(
        type="heatmap", z=z.T, x=x, y=np.arange(grid.n_slots), text=label.T, customdata=tokens.T,
        colorscale=_SLOT_SCALE, zmin=-0.5, zmax=len(REQUEST_COLORS) + 0.5, showscale=False,
        xgap=0, ygap=1 if cell_h >= MIN_GAPPED_PX else 0, name="batch", showlegend=False,
        hovertemplate="step %{x} · slot %{y}<br><b>%{text}</b> · %{customdata} tokens"
                      "<extra></extra>",
    )
    # Prefill cells get a diagonal stroke in the ink of their colour: told apart without colour.
    # Each ink gets its own trace: plotly checks a colour array point by point, slowly.
    pre_step, pre_slot = np.nonzero(phase == 1)
    ink = INKS[hue[pre_step, pre_slot]]
    mark_px = max(6.0, min(cell_w, cell_h, 16.0))
    prefill = [dict(type="scatter", x=x[pre_step[ink == c]], y=pre_slot[ink == c], mode="markers",
                    hoverinfo="skip", showlegend=False,
                    marker=dict(symbol="line-ne", size=mark_px, line=dict(color=c, width=2)))
               for c in INK_COLORS]
    # A request's id on each stretch of decode cells wide and tall enough to hold it.
    slot, col, length = _runs(np.where(phase == 2, code, -1).T)
    name = shown[code.T[slot, col]]
    fits = (length * cell_w >= np.char.str_len(name) * 0.62 * px + 4) & (cell_h >= px + 2)
    slot, col, length, name = slot[fits], col[fits], length[fits], name[fits]
    ink, mid = INKS[hue.T[slot, col]], x[col] + (length - 1) / 2
    ids = [dict(type="scatter", x=mid[ink == c], y=slot[ink == c], text=name[ink == c], mode="text",
                hoverinfo="skip", showlegend=False, textfont=dict(size=px, color=c))
           for c in INK_COLORS]
    # A request that found its prompt's first blocks in the prefix cache: a diamond on the step
    # it started, and in its hover the tokens it did not compute.
    hit_step, hit_slot = np.nonzero(cached > 0)
    hit_marks = [dict(type="scatter", x=x[hit_step], y=hit_slot, mode="markers", showlegend=False,
                      marker=dict(size=max(6.0, min(cell_w, cell_h, 12.0)), **HIT_MARK),
                      text=[f"{grid.names[code[i, j]]}: {cached[i, j]} prompt tokens from the prefix cache, "
                            f"{tokens[i, j]} computed" for i, j in zip(hit_step, hit_slot)],
                      hovertemplate="step %{x} · slot %{y}<br>%{text}<extra></extra>")] if len(hit_step) else []
    # Speculative decoding: a triangle on each cell whose request had drafts checked in that step,
    # white and up where the model accepted some, black and down where it rejected them all; its hover gives the counts.
    drafts = []
    for some, mark in ((True, DRAFT_MARK), (False, ALL_REJECTED_MARK)):
        d_step, d_slot = np.nonzero((drafted > 0) & ((accepted > 0) == some))
        if len(d_step):
            drafts.append(dict(
                type="scatter", x=x[d_step], y=d_slot, mode="markers", showlegend=False,
                marker=dict(size=max(6.0, min(cell_w, cell_h, 12.0)), **mark),
                text=[f"{grid.names[code[i, j]]}: {drafted[i, j]} drafted, {accepted[i, j]} accepted, "
                      f"{drafted[i, j] - accepted[i, j]} rejected; {accepted[i, j] + 1} new tokens"
                      for i, j in zip(d_step, d_slot)],
                hovertemplate="step %{x} · slot %{y}<br>%{text}<extra></extra>"))
    if presenter:                  # one line, readable from the back of the room
        good = ("One colour per student" if by_owner else "One colour per request") + \
            "; ╱\u00a0=\u00a0prefill, plain = decode, grey = empty slot."
    note = good if hi <= columns else f"Showing the last {len(x)} steps. " + good
    x_first = int(x[0])
    shapes, notes = mark_lines(marks, "step", lo=x_first - 0.5, hi=x_first + columns - 0.5,
                               presenter=presenter)
    out = layout(
        title, note, xlabel, ylabel, plot_bgcolor="white", shapes=shapes, annotations=notes,
        presenter=presenter, x_range=(x_first - 0.5, x_first + columns - 0.5),
        xaxis=dict(showgrid=False, zeroline=False),
        yaxis=dict(range=[grid.n_slots - 0.5, -0.5], dtick=1 if cell_h >= px + 2 else None,
                   showgrid=False, zeroline=False))
    out["height"] = plot_h + out["margin"]["t"] + out["margin"]["b"]
    legend = _legend(phase, shapes, bool(hit_marks),
                     (bool(((drafted > 0) & (accepted > 0)).any()), bool(((drafted > 0) & (accepted == 0)).any())))
    if by_owner:                             # the students drawn, each in their colour
        drawn = sorted({str(shown[c]) for c in np.unique(code[code >= 0])})
        legend = [dict(type="scatter", x=[None], y=[None], mode="markers", name=who, hoverinfo="skip",
                       marker=dict(symbol="square", size=12,
                                   color=REQUEST_COLORS[owner_hue.get(who, OTHER_HUE)]))
                  for who in drawn] + legend
    return figure(data=[heat, *prefill, *ids, *hit_marks, *drafts, *legend], layout=out)
