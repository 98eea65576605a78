"""Chart builders for Batching Lab: DataFrame in, plotly Figure out.

Nothing here imports Streamlit, so every chart can be built and tested without a browser.
The inputs are the engine's CSV tables (see DESIGN.md, "Files a run writes"):

- steps:    step, t_start_s, t_end_s, waiting, running, prefill_tokens, decode_tokens,
            kv_used_blocks, kv_total_blocks, members ("id:phase:tokens ..."), optional preempted
- requests: id, tenant, arrival_s, first_scheduled_s, first_token_s, finish_s, prompt_tokens,
            output_tokens, ttft_s, tpot_s, e2e_s, queue_s, preemptions, status, error, output_text
- marks:    step, t_s, label   (policy changes, e.g. "max_num_seqs 8→2")

Every builder returns a figure with a title, axis labels and a subtitle that says what good
looks like. Empty input gives a valid, empty figure that says "no data yet".

Speed: a live page redraws every chart several times a second, so each builder works on
numpy arrays, draws many cells with one heatmap or one bar trace instead of a trace per
request, and downsamples long series to at most MAX_POINTS points.
"""
from __future__ import annotations

import heapq
import math
import re
import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.compute as pc

MAX_POINTS = 1500  # most points a line trace gets; longer series are downsampled
MAX_GRID_STEPS = 600  # most step columns the batch-membership heatmap draws
SLOT_WARMUP_STEPS = 500  # history replayed before the shown window to place requests in rows
NO_DATA = "no data yet"

# One hue per request (cycled); the darker shade marks a prefill step, the lighter a decode step.
PALETTE = [
    ("#1f4e9c", "#9cbdf0"),  # blue
    ("#b35400", "#f9c07a"),  # orange
    ("#1d7437", "#97dcaa"),  # green
    ("#a11d1d", "#f3a3a3"),  # red
    ("#5a379c", "#c3aef0"),  # purple
    ("#0d6b74", "#8fdce3"),  # teal
    ("#a0306f", "#f2b0d8"),  # pink
    ("#66660f", "#dede8a"),  # olive
    ("#6b472b", "#d6b89c"),  # brown
    ("#394659", "#b3bfd1"),  # slate
]
EMPTY_COLOR = "#e4e4e4"
COLORS = {
    "waiting": "#d62728",
    "running": "#1f77b4",
    "queued": "#b0b0b0",
    "prefill": "#1f4e9c",
    "decode": "#9cbdf0",
    "p50": "#2a9d8f",
    "p95": "#e76f51",
    "points": "#7f7f7f",
    "tokens": "#1f77b4",
    "goodput": "#2ca02c",
    "finished": "#7f7f7f",
    "kv": "#9467bd",
    "bad": "#d62728",
}

# metric column -> (label, time column it is plotted at, unit scale, unit)
METRICS = {
    "ttft_s": ("TTFT", "first_token_s", 1.0, "s"),
    "tpot_s": ("TPOT", "finish_s", 1000.0, "ms"),
    "e2e_s": ("E2E latency", "finish_s", 1.0, "s"),
    "queue_s": ("Queue time", "first_scheduled_s", 1.0, "s"),
}


# ----------------------------------------------------------------------------- helpers


def _layout(title: str, subtitle: str, xlabel: str, ylabel: str, xaxis: dict | None = None,
            yaxis: dict | None = None, shapes=(), annotations=(), **extra) -> dict:
    # Everything goes in at construction: no plotly template (validating one costs ~8 ms
    # per figure, and Streamlit applies its own theme anyway) and no fig.update_*/add_*
    # calls afterwards (each one re-walks the figure and costs milliseconds).
    layout = dict(
        title=dict(text=title, subtitle=dict(text=subtitle)),
        xaxis=dict(title=dict(text=xlabel), **(xaxis or {})),
        yaxis=dict(title=dict(text=ylabel), **(yaxis or {})),
        shapes=list(shapes),
        annotations=list(annotations),
        margin=dict(l=60, r=20, t=80, b=90),
        height=380,
        legend=dict(orientation="h", yref="container", yanchor="bottom", y=0.0,
                    xanchor="left", x=0.0),
        hovermode="closest",
    )
    layout.update(extra)
    return layout


def _empty(title: str, subtitle: str, xlabel: str, ylabel: str) -> go.Figure:
    """A valid figure with no traces and a centred "no data yet" note."""
    hidden = dict(showticklabels=False, showgrid=False, zeroline=False)
    note = dict(text=NO_DATA, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                font=dict(size=16, color="#888"))
    return go.Figure(layout=_layout(title, subtitle, xlabel, ylabel, xaxis=hidden,
                                    yaxis=hidden, annotations=[note]))


def _is_empty(df: pd.DataFrame | None, *columns: str) -> bool:
    return df is None or len(df) == 0 or any(c not in df.columns for c in columns)


def _num(df: pd.DataFrame, col: str) -> np.ndarray:
    """A column as float64 numpy (NaN where missing)."""
    if col not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _downsample_max(x: np.ndarray, ys: list[np.ndarray], max_points: int = MAX_POINTS):
    """Shrink a long series to <= max_points by taking each bucket's max.

    Max (not mean) so that a one-step spike in the queue or KV use stays visible.
    """
    n = len(x)
    if n <= max_points:
        return x, ys
    k = math.ceil(n / max_points)
    starts = np.arange(0, n, k)
    ends = np.minimum(starts + k - 1, n - 1)
    return x[ends], [np.maximum.reduceat(y, starts) for y in ys]


def _stride(n: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """Evenly spaced indices 0..n-1, at most max_points of them, always keeping the last."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(int))


def _marks(marks: pd.DataFrame | None, x_col: str, lo=None, hi=None) -> tuple[list, list]:
    """Policy changes as vertical dashed lines (shapes) with their labels (annotations)."""
    shapes, notes = [], []
    if _is_empty(marks, x_col):
        return shapes, notes
    labels = marks["label"].astype(str) if "label" in marks.columns else [""] * len(marks)
    for x, label in zip(_num(marks, x_col), labels):
        if np.isnan(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
            continue
        shapes.append(dict(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                           line=dict(color="#444", width=1, dash="dash")))
        notes.append(dict(x=x, y=1, xref="x", yref="paper", text=label, showarrow=False,
                          xanchor="left", yanchor="top", font=dict(size=10, color="#444"),
                          bgcolor="rgba(255,255,255,0.7)"))
    return shapes, notes


def _slo_line(value: float, label: str, vertical: bool = False) -> tuple[dict, dict]:
    """A dotted red SLO line (shape) and its label (annotation)."""
    line = dict(color=COLORS["bad"], width=1.5, dash="dot")
    font = dict(size=10, color=COLORS["bad"])
    if vertical:
        return (dict(type="line", xref="x", yref="paper", x0=value, x1=value, y0=0, y1=1, line=line),
                dict(x=value, y=0, xref="x", yref="paper", text=label, showarrow=False,
                     xanchor="left", yanchor="bottom", font=font))
    return (dict(type="line", xref="paper", yref="y", x0=0, x1=1, y0=value, y1=value, line=line),
            dict(x=1, y=value, xref="paper", yref="y", text=label, showarrow=False,
                 xanchor="right", yanchor="bottom", font=font))


def meets_slo(requests: pd.DataFrame, slo_ttft: float | None = None,
              slo_tpot: float | None = None) -> np.ndarray:
    """True for each request whose TTFT and TPOT are within every SLO that is set (seconds).

    A request with a single output token has no TPOT and passes the TPOT check.
    """
    ok = np.ones(len(requests), dtype=bool)
    if slo_ttft is not None:
        ok &= _num(requests, "ttft_s") <= slo_ttft
    if slo_tpot is not None:
        tpot = _num(requests, "tpot_s")
        ok &= np.isnan(tpot) | (tpot <= slo_tpot)
    return ok


def _finished(requests: pd.DataFrame) -> pd.DataFrame:
    if "status" in requests.columns:
        return requests[requests["status"] == "finished"]
    return requests[requests["finish_s"].notna()] if "finish_s" in requests.columns else requests


def _duration(requests: pd.DataFrame | None, steps: pd.DataFrame | None) -> float:
    """Seconds from the first arrival (or first step) to the last step or finish."""
    starts, ends = [], []
    if not _is_empty(requests):
        starts.append(np.nanmin(_num(requests, "arrival_s"), initial=np.inf))
        ends.append(np.nanmax(_num(requests, "finish_s"), initial=-np.inf))
    if not _is_empty(steps):
        starts.append(np.nanmin(_num(steps, "t_start_s"), initial=np.inf))
        ends.append(np.nanmax(_num(steps, "t_end_s"), initial=-np.inf))
    if not starts:
        return float("nan")
    d = max(ends) - min(starts)
    return float(d) if np.isfinite(d) and d > 0 else float("nan")


def _pct(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if len(values) else float("nan")


# ----------------------------------------------------------------------------- batch slots


def parse_members(text) -> list[tuple[str, str, int]]:
    """"r3:prefill:128 r7:decode:1" -> [("r3", "prefill", 128), ("r7", "decode", 1)]."""
    if not isinstance(text, str):
        return []
    out = []
    for item in text.split():
        rid, phase, tokens = item.rsplit(":", 2)
        out.append((rid, phase, int(tokens)))
    return out


def member_counts(steps: pd.DataFrame) -> np.ndarray:
    """How many sequences ran in each step (items in the `members` column)."""
    if _is_empty(steps, "members"):
        return np.zeros(0 if steps is None else len(steps), dtype=np.int64)
    text = pa.array(steps["members"].fillna("").astype(str), type=pa.string())
    text = pc.utf8_trim_whitespace(text)
    # items are single-space separated, so count = spaces + 1 (0 for an empty step)
    spaces = pc.count_substring(text, " ").to_numpy(zero_copy_only=False)
    return np.where(pc.utf8_length(text).to_numpy(zero_copy_only=False) > 0, spaces + 1, 0)


def wasted_slot_steps(steps: pd.DataFrame, max_slots: int) -> int:
    """Empty batch slots summed over every step that ran at least one sequence.

    A step with max_slots=8 and 5 members wastes 3 slot-steps. Idle steps (nothing to run)
    are not counted: an engine with no work is not wasting its batch.
    """
    counts = member_counts(steps)
    busy = counts > 0
    return int(np.clip(max_slots - counts[busy], 0, None).sum())


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
    texts = steps["members"].tolist() if n and "members" in steps.columns else [None] * n
    for i, text in enumerate(texts):
        members = parse_members(text)
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
        steps=_num(steps, "step").astype(np.int64) if n else np.zeros(0, np.int64),
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
    if _is_empty(steps, "step", "members"):
        return _empty(title, good, xlabel, ylabel)
    if not steps["step"].is_monotonic_increasing:
        steps = steps.sort_values("step")
    hi = len(steps)
    if upto_step is not None:
        hi = int(np.searchsorted(_num(steps, "step"), upto_step, side="right"))
    if hi == 0:
        return _empty(title, good, xlabel, ylabel)

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
    shapes, notes = _marks(marks, "step", lo=x[0], hi=x[-1])
    return go.Figure(data=[heat, *legend], layout=_layout(
        title, note, xlabel, ylabel, plot_bgcolor="white", shapes=shapes, annotations=notes,
        xaxis=dict(showgrid=False, zeroline=False),
        yaxis=dict(autorange="reversed", dtick=1 if grid.n_slots <= 32 else None,
                   showgrid=False, zeroline=False),
    ))


# ----------------------------------------------------------------------------- requests


def request_timeline(requests: pd.DataFrame, now_s: float | None = None,
                     limit: int = 200) -> go.Figure:
    """Gantt chart, one row per request: queued -> prefill -> decode.

    Shows the `limit` most recent arrivals up to now_s (default: the latest time in the
    table). Phases still open at now_s are drawn up to now_s, so this works live and while
    scrubbing a replay. Rejected and failed requests get a red x at their arrival.
    """
    title = "Request timeline"
    good = ("Grey = queued, dark = prefill, light = decode. "
            "Good: short grey bars; long grey bars mean requests wait for a slot.")
    xlabel, ylabel = "time (s)", "request"
    if _is_empty(requests, "id", "arrival_s"):
        return _empty(title, good, xlabel, ylabel)
    arrival_all = _num(requests, "arrival_s")
    if now_s is None:
        known = [arrival_all] + [_num(requests, c) for c in
                                 ("first_scheduled_s", "first_token_s", "finish_s")]
        now_s = float(np.nanmax(np.concatenate(known)))
    df = requests[arrival_all <= now_s]
    if len(df) == 0:
        return _empty(title, good, xlabel, ylabel)
    df = df.iloc[np.argsort(_num(df, "arrival_s"), kind="stable")[-limit:]]

    ids = df["id"].astype(str).to_numpy()
    arrival = _num(df, "arrival_s")
    # a phase that has not started yet (NaN or after now) starts "at now" and so has no length
    sched, first, finish = (np.minimum(np.nan_to_num(_num(df, c), nan=now_s), now_s)
                            for c in ("first_scheduled_s", "first_token_s", "finish_s"))
    status = (df["status"].astype(str).to_numpy() if "status" in df.columns
              else np.full(len(df), "finished"))
    bad = np.isin(status, ["rejected", "failed"])
    preempt = _num(df, "preemptions")

    def bar(name, start, end, color):
        length = np.where(bad, np.nan, end - start)
        length[length <= 0] = np.nan
        return go.Bar(
            name=name, orientation="h", y=ids, x=length, base=start, marker_color=color,
            customdata=np.stack([status, np.nan_to_num(preempt)], axis=-1),
            hovertemplate=(f"<b>%{{y}}</b> {name}<br>from %{{base:.2f}} s for %{{x:.3f}} s"
                           "<br>%{customdata[0]}, preempted %{customdata[1]}×<extra></extra>"),
        )

    errors = (df["error"].fillna("").astype(str).to_numpy() if "error" in df.columns
              else np.full(len(df), ""))
    rejected = go.Scatter(
        name="rejected / failed", x=arrival[bad], y=ids[bad], mode="markers",
        marker=dict(symbol="x", size=9, color=COLORS["bad"]),
        customdata=np.stack([status[bad], errors[bad]], axis=-1),
        hovertemplate="<b>%{y}</b> %{customdata[0]} at %{x:.2f} s<br>%{customdata[1]}<extra></extra>",
    )
    return go.Figure(
        data=[bar("queued", arrival, sched, COLORS["queued"]),
              bar("prefill", sched, first, COLORS["prefill"]),
              bar("decode", first, finish, COLORS["decode"]), rejected],
        layout=_layout(title, good, xlabel, ylabel, barmode="overlay", bargap=0.15,
                       height=max(320, min(900, 120 + 12 * len(df))),
                       yaxis=dict(type="category", autorange="reversed",
                                  showticklabels=len(df) <= 60)),
    )


def latency_over_time(requests: pd.DataFrame, metric: str = "ttft_s", slo: float | None = None,
                      marks: pd.DataFrame | None = None, window: int = 50) -> go.Figure:
    """One point per request (TTFT at its first token, TPOT at its finish), with rolling
    p50 and p95 over the last `window` requests, the SLO line and policy-change marks.

    slo is in seconds, like the columns.
    """
    label, time_col, scale, unit = METRICS[metric]
    title = f"{label} over time"
    good = (f"Good: the p95 line stays under the SLO; after a policy change (dashed) "
            f"watch whether p95 bends down.")
    xlabel, ylabel = "time (s)", f"{label} ({unit})"
    if _is_empty(requests, metric, time_col):
        return _empty(title, good, xlabel, ylabel)
    t, y = _num(requests, time_col), _num(requests, metric) * scale
    ok = ~(np.isnan(t) | np.isnan(y))
    if not ok.any():
        return _empty(title, good, xlabel, ylabel)
    order = np.argsort(t[ok], kind="stable")
    t, y = t[ok][order], y[ok][order]
    ids = requests["id"].astype(str).to_numpy()[ok][order] if "id" in requests.columns else None

    rolling = pd.Series(y).rolling(window, min_periods=1)
    p50, p95 = rolling.quantile(0.5).to_numpy(), rolling.quantile(0.95).to_numpy()
    pts = _stride(len(t), 5 * MAX_POINTS)  # WebGL copes with many points, but not unlimited
    line = _stride(len(t))
    shapes, notes = _marks(marks, "t_s")
    if slo is not None:
        shape, note = _slo_line(slo * scale, f"SLO {slo * scale:g} {unit}")
        shapes.append(shape)
        notes.append(note)
    return go.Figure(
        data=[
            go.Scattergl(name="each request", x=t[pts], y=y[pts], mode="markers",
                         marker=dict(size=5, color=COLORS["points"], opacity=0.45),
                         text=None if ids is None else ids[pts],
                         hovertemplate=f"%{{text}}<br>{label} %{{y:.3f}} {unit} at %{{x:.2f}} s"
                                       "<extra></extra>"),
            go.Scatter(name=f"p50 (last {window})", x=t[line], y=p50[line], mode="lines",
                       line=dict(color=COLORS["p50"], width=2)),
            go.Scatter(name=f"p95 (last {window})", x=t[line], y=p95[line], mode="lines",
                       line=dict(color=COLORS["p95"], width=2)),
        ],
        layout=_layout(title, good, xlabel, ylabel, shapes=shapes, annotations=notes),
    )


# ----------------------------------------------------------------------------- steps


def queue_over_time(steps: pd.DataFrame, marks: pd.DataFrame | None = None) -> go.Figure:
    """Waiting vs running requests at the end of each step."""
    title = "Queue: waiting vs running"
    good = ("Good: waiting stays near zero and flat. A waiting line that keeps climbing means "
            "requests arrive faster than the engine finishes them.")
    xlabel, ylabel = "time (s)", "requests"
    if _is_empty(steps, "t_end_s", "waiting", "running"):
        return _empty(title, good, xlabel, ylabel)
    x, (waiting, running) = _downsample_max(
        _num(steps, "t_end_s"), [_num(steps, "waiting"), _num(steps, "running")])
    shapes, notes = _marks(marks, "t_s")
    return go.Figure(
        data=[
            go.Scatter(name="waiting", x=x, y=waiting, mode="lines", line_shape="hv",
                       line=dict(color=COLORS["waiting"], width=2)),
            go.Scatter(name="running", x=x, y=running, mode="lines", line_shape="hv",
                       line=dict(color=COLORS["running"], width=2)),
        ],
        layout=_layout(title, good, xlabel, ylabel, shapes=shapes, annotations=notes),
    )


def throughput_over_time(steps: pd.DataFrame, requests: pd.DataFrame,
                         slo_ttft: float | None = None, slo_tpot: float | None = None,
                         marks: pd.DataFrame | None = None, bin_s: float = 1.0) -> go.Figure:
    """Output tokens/s (left axis) and finished vs goodput requests/s (right axis) per bin.

    Tokens made in a step = its decode tokens + the first tokens of prefills that completed
    in it (a request's first_token_s). Goodput counts requests finishing within every SLO set.
    """
    title = "Throughput and goodput"
    good = ("Good: goodput (green) sits on top of finished req/s (grey); the gap is requests "
            "that finished but too late to count.")
    xlabel, ylabel = "time (s)", "output tokens / s"
    has_steps = not _is_empty(steps, "t_end_s", "decode_tokens")
    has_reqs = not _is_empty(requests, "finish_s")
    if not (has_steps or has_reqs):
        return _empty(title, good, xlabel, ylabel)
    t_step = _num(steps, "t_end_s") if has_steps else np.zeros(0)
    t_first = _num(requests, "first_token_s") if has_reqs else np.zeros(0)
    t_first = t_first[~np.isnan(t_first)]
    fin = _finished(requests) if has_reqs else pd.DataFrame()
    t_fin = _num(fin, "finish_s") if len(fin) else np.zeros(0)
    t_good = t_fin[meets_slo(fin, slo_ttft, slo_tpot)] if len(fin) else np.zeros(0)

    times = np.concatenate([t_step[~np.isnan(t_step)], t_first, t_fin[~np.isnan(t_fin)]])
    if len(times) == 0:
        return _empty(title, good, xlabel, ylabel)
    t0, t1 = float(times.min()), float(times.max())
    while (t1 - t0) / bin_s > MAX_POINTS:  # keep the bin count bounded on long runs
        bin_s *= 2

    n_bins = int((t1 - t0) // bin_s) + 1

    def per_second(t, weights=None):
        ok = ~np.isnan(t)
        idx = ((t[ok] - t0) // bin_s).astype(np.int64)
        w = None if weights is None else weights[ok]
        return np.bincount(idx, weights=w, minlength=n_bins)[:n_bins] / bin_s

    centers = t0 + (np.arange(n_bins) + 0.5) * bin_s
    tokens = per_second(t_first)
    if has_steps:
        tokens = tokens + per_second(t_step, np.nan_to_num(_num(steps, "decode_tokens")))
    slo_text = ", ".join(f"{k} ≤ {v:g} s" for k, v in (("TTFT", slo_ttft), ("TPOT", slo_tpot))
                         if v is not None) or "no SLO set"
    shapes, notes = _marks(marks, "t_s")
    return go.Figure(
        data=[
            go.Scatter(name="output tokens/s", x=centers, y=tokens, mode="lines",
                       line=dict(color=COLORS["tokens"], width=2)),
            go.Scatter(name="finished req/s", x=centers, y=per_second(t_fin), mode="lines",
                       yaxis="y2", line=dict(color=COLORS["finished"], width=1.5, dash="dot")),
            go.Scatter(name=f"goodput req/s ({slo_text})", x=centers, y=per_second(t_good),
                       mode="lines", yaxis="y2", line=dict(color=COLORS["goodput"], width=2)),
        ],
        layout=_layout(title, good + f" Bins of {bin_s:g} s.", xlabel, ylabel,
                       yaxis=dict(rangemode="tozero"),
                       yaxis2=dict(title=dict(text="requests / s"), overlaying="y", side="right",
                                   rangemode="tozero", showgrid=False, tickmode="auto"),
                       margin=dict(l=60, r=60, t=80, b=90), shapes=shapes, annotations=notes),
    )


def kv_usage(steps: pd.DataFrame, marks: pd.DataFrame | None = None) -> go.Figure:
    """KV-cache blocks in use as a share of all blocks, with preemptions marked."""
    title = "KV cache use"
    good = ("Good: high use without touching 100%. Red x = preemption: a request lost its "
            "blocks and must recompute its prompt.")
    xlabel, ylabel = "time (s)", "KV blocks used (%)"
    if _is_empty(steps, "t_end_s", "kv_used_blocks", "kv_total_blocks"):
        return _empty(title, good, xlabel, ylabel)
    t = _num(steps, "t_end_s")
    used, total = _num(steps, "kv_used_blocks"), _num(steps, "kv_total_blocks")
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(total > 0, 100.0 * used / total, np.nan)
    x, (y, used_ds) = _downsample_max(t, [pct, used])
    pre = _num(steps, "preempted") if "preempted" in steps.columns else np.zeros(len(steps))
    hit = np.nan_to_num(pre) > 0
    shapes, notes = _marks(marks, "t_s")
    return go.Figure(
        data=[
            go.Scatter(name="KV used", x=x, y=y, mode="lines", line_shape="hv",
                       line=dict(color=COLORS["kv"], width=2), fill="tozeroy",
                       customdata=used_ds,
                       hovertemplate="%{y:.1f}% (%{customdata:.0f} blocks) at %{x:.2f} s"
                                     "<extra></extra>"),
            go.Scatter(name="preemption", x=t[hit], y=pct[hit], mode="markers",
                       marker=dict(symbol="x", size=9, color=COLORS["bad"]),
                       customdata=pre[hit],
                       hovertemplate="%{customdata:.0f} preempted at %{x:.2f} s<extra></extra>"),
        ],
        layout=_layout(title, good, xlabel, ylabel, yaxis=dict(range=[0, 105]),
                       shapes=shapes, annotations=notes),
    )


# ----------------------------------------------------------------------------- summaries


def headline(requests: pd.DataFrame, steps: pd.DataFrame, slo_ttft: float | None = None,
             slo_tpot: float | None = None, max_slots: int | None = None) -> dict:
    """The numbers for the page's metric strip (vLLM bench semantics, see DESIGN.md).

    Percentiles are over finished requests; throughput = their output tokens / duration;
    goodput = those meeting every SLO set / duration. NaN where there is nothing to measure.
    """
    requests = requests if requests is not None else pd.DataFrame()
    fin = _finished(requests) if len(requests) else requests
    duration = _duration(requests, steps)
    ttft, tpot = _num(fin, "ttft_s"), _num(fin, "tpot_s")
    has_steps = not _is_empty(steps)
    out = {
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p95_s": _pct(ttft, 95),
        "tpot_p50_s": _pct(tpot, 50),
        "tpot_p95_s": _pct(tpot, 95),
        "throughput_tok_s": float(np.nansum(_num(fin, "output_tokens")) / duration),
        "goodput_req_s": float(meets_slo(fin, slo_ttft, slo_tpot).sum() / duration),
        "finished": int(len(fin)),
        "duration_s": duration,
        "waiting_now": int(_num(steps, "waiting")[-1]) if has_steps and "waiting" in steps else 0,
        "running_now": int(_num(steps, "running")[-1]) if has_steps and "running" in steps else 0,
        "wasted_slot_steps": (wasted_slot_steps(steps, max_slots)
                              if has_steps and max_slots else 0),
    }
    return out


def _buckets(values: pd.Series, n: int = 4) -> pd.Series:
    """Split a numeric column into n quantile buckets labelled by their ranges."""
    edges = np.unique(np.nanquantile(values.to_numpy(dtype=float, na_value=np.nan),
                                     np.linspace(0, 1, n + 1)))
    if len(edges) < 2:
        return values.astype(str)
    labels = [f"{edges[i]:g}–{edges[i + 1]:g}" for i in range(len(edges) - 1)]
    return pd.cut(values, edges, labels=labels, include_lowest=True).astype(str)


def cdf(requests: pd.DataFrame, metric: str = "ttft_s", by=None,
        slo: float | None = None) -> go.Figure:
    """Empirical CDF of a per-request metric, one curve per group.

    by: None, a column name (e.g. "tenant"), or a Series aligned with requests. A numeric
    column with many values (e.g. "prompt_tokens") is split into 4 quantile buckets.
    """
    label, _, scale, unit = METRICS.get(metric, (metric, None, 1.0, ""))
    title = f"{label} distribution (CDF)"
    good = ("Read across at 0.95 for p95. Good: curves rise steeply and early; "
            "a long flat tail to the right is the slow minority.")
    xlabel, ylabel = f"{label} ({unit})" if unit else label, "share of requests ≤ x"
    if _is_empty(requests, metric):
        return _empty(title, good, xlabel, ylabel)
    values = pd.Series(_num(requests, metric) * scale, index=requests.index)
    if by is None:
        groups = pd.Series("all", index=requests.index)
    else:
        groups = requests[by] if isinstance(by, str) else pd.Series(by, index=requests.index)
        if pd.api.types.is_numeric_dtype(groups) and groups.nunique() > 8:
            groups = _buckets(groups)
        groups = groups.astype(str)
    traces = []
    for name, vals in values.groupby(groups, sort=True):
        v = np.sort(vals.dropna().to_numpy())
        if len(v) == 0:
            continue
        idx = _stride(len(v), 400)
        traces.append(go.Scatter(
            name=f"{name} (n={len(v)})", x=v[idx], y=(idx + 1) / len(v), mode="lines",
            line_shape="hv",
            hovertemplate=f"{name}: %{{y:.0%}} of requests ≤ %{{x:.3f}} {unit}<extra></extra>"))
    if not traces:
        return _empty(title, good, xlabel, ylabel)
    shapes, notes = [], []
    if slo is not None:
        shape, note = _slo_line(slo * scale, f"SLO {slo * scale:g} {unit}", vertical=True)
        shapes, notes = [shape], [note]
    return go.Figure(data=traces, layout=_layout(
        title, good, xlabel, ylabel, yaxis=dict(range=[0, 1.02], tickformat=".0%"),
        shapes=shapes, annotations=notes))


def bar_compare(df: pd.DataFrame, x: str, y: str, color: str | None = None,
                title: str = "", subtitle: str = "", xlabel: str | None = None,
                ylabel: str | None = None) -> go.Figure:
    """Grouped bars: one bar per x value, one colour per `color` value (e.g. policy runs)."""
    title = title or f"{y} by {x}"
    xlabel, ylabel = xlabel or x, ylabel or y
    if _is_empty(df, x, y) or (color is not None and color not in df.columns):
        return _empty(title, subtitle, xlabel, ylabel)
    if color is None:
        traces = [go.Bar(name=y, x=df[x].astype(str), y=df[y], showlegend=False)]
    else:
        traces = [go.Bar(name=str(key), x=g[x].astype(str), y=g[y])
                  for key, g in df.groupby(color, sort=False)]
    return go.Figure(data=traces, layout=_layout(title, subtitle, xlabel, ylabel,
                                                 xaxis=dict(type="category"), barmode="group"))
