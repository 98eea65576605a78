"""Shared look of every chart: palette, layout, the "no data yet" figure, SLO and policy-change lines,
and the small array helpers the builders use. No Streamlit.

Speed: a live page redraws charts several times a second, so builders work on numpy arrays, draw
many cells with one trace, and downsample long series to at most MAX_POINTS points.
"""
from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go

MAX_POINTS = 1500  # most points a line trace gets; longer series are downsampled
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


def layout(title: str, subtitle: str, xlabel: str, ylabel: str, xaxis: dict | None = None,
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


def empty_figure(title: str, subtitle: str, xlabel: str, ylabel: str) -> go.Figure:
    """A valid figure with no traces and a centred "no data yet" note."""
    hidden = dict(showticklabels=False, showgrid=False, zeroline=False)
    note = dict(text=NO_DATA, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                font=dict(size=16, color="#888"))
    return go.Figure(layout=layout(title, subtitle, xlabel, ylabel, xaxis=hidden,
                                    yaxis=hidden, annotations=[note]))


def is_empty(df: pd.DataFrame | None, *columns: str) -> bool:
    return df is None or len(df) == 0 or any(c not in df.columns for c in columns)


def num(df: pd.DataFrame, col: str) -> np.ndarray:
    """A column as float64 numpy (NaN where missing)."""
    if col not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def downsample_max(x: np.ndarray, ys: list[np.ndarray], max_points: int = MAX_POINTS):
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


def stride(n: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """Evenly spaced indices 0..n-1, at most max_points of them, always keeping the last."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(int))


def mark_lines(marks: pd.DataFrame | None, x_col: str, lo=None, hi=None) -> tuple[list, list]:
    """Policy changes as vertical dashed lines (shapes) with their labels (annotations)."""
    shapes, notes = [], []
    if is_empty(marks, x_col):
        return shapes, notes
    labels = marks["label"].astype(str) if "label" in marks.columns else [""] * len(marks)
    for x, label in zip(num(marks, x_col), labels):
        if np.isnan(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
            continue
        shapes.append(dict(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                           line=dict(color="#444", width=1, dash="dash")))
        notes.append(dict(x=x, y=1, xref="x", yref="paper", text=label, showarrow=False,
                          xanchor="left", yanchor="top", font=dict(size=10, color="#444"),
                          bgcolor="rgba(255,255,255,0.7)"))
    return shapes, notes


def slo_line(value: float, label: str, vertical: bool = False) -> tuple[dict, dict]:
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


MODEL_COLOR = "#555555"  # a model's prediction, drawn beside the measurements
PAIR_COLORS = (COLORS["bad"], COLORS["goodput"])   # two runs compared (chunked prefill off / on): red, green
SUBTITLE_WIDTH = 105   # characters per subtitle line: plotly does not wrap text by itself


def wrapped_layout(title: str, subtitle: str, *args, **kw) -> dict:
    """layout(), with the subtitle wrapped onto lines that fit a half-width chart."""
    lines = textwrap.wrap(subtitle, SUBTITLE_WIDTH)
    out = layout(title, "<br>".join(lines), *args, **kw)
    extra = 14 * max(0, len(lines) - 1)
    out["margin"] = {**out["margin"], "t": out["margin"]["t"] + extra}
    out["height"] = out["height"] + extra
    return out


def vline(x: float, text: str, color: str = "#444", dash: str = "dash") -> tuple[dict, dict]:
    """A labelled vertical line at x (shape, annotation)."""
    return (dict(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                 line=dict(color=color, width=1.5, dash=dash)),
            dict(x=x, y=1, xref="x", yref="paper", text=text, showarrow=False, xanchor="left",
                 yanchor="top", font=dict(size=11, color=color), bgcolor="rgba(255,255,255,0.75)"))
