"""Why batch: decode step time and tokens/s against batch size, measured on the real model,
the bend where doubling the batch stops paying, and a straight-line model of the step time."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.style import (
    COLORS,
    MODEL_COLOR,
    empty_figure,
    is_empty,
    vline,
    wrapped_layout,
)
from engine.results import cache_path
from engine.step_times import measure_batch_scaling
from labs.runs import cached, fingerprint

BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128]
CONTEXT = 128     # tokens each sequence holds before the timed steps
STEPS = 8         # timed decode steps per batch size
BEND_GAIN = 1.2   # the bend: the first batch size from which doubling gains less than this


def batch_scaling(model, batch_sizes=BATCH_SIZES, context: int = CONTEXT, steps: int = STEPS, progress=None,
                  refresh: bool = False, peek: bool = False) -> tuple[list[dict], bool] | None:
    """measure_batch_scaling, cached per machine and settings: (rows, was_cached)."""
    sizes = sorted(set(int(b) for b in batch_sizes))
    path = cache_path("scaling", fingerprint(model), sizes, context, steps)
    return cached(path, model, lambda m: measure_batch_scaling(m, sizes, context, steps, progress), refresh, peek)


def scaling_table(rows: list[dict]) -> pd.DataFrame:
    """The measured rows plus the throughput gain per doubling of the batch from each size."""
    df = pd.DataFrame(rows).sort_values("batch").reset_index(drop=True)
    tps, b = df["tokens_per_s"].to_numpy(float), df["batch"].to_numpy(float)
    gain = np.full(len(df), np.nan)
    for i in range(len(df) - 1):
        doublings = math.log2(b[i + 1] / b[i])
        gain[i] = (tps[i + 1] / tps[i]) ** (1 / doublings)
    df["gain_per_doubling"] = gain
    return df


def bend(rows: list[dict], min_gain: float = BEND_GAIN) -> int | None:
    """The smallest measured batch size from which doubling the batch gains less than
    `min_gain` (1.2 = 20%) throughput; None if every measured doubling still gains more."""
    df = scaling_table(rows)
    below = df[df["gain_per_doubling"] < min_gain]
    return int(below["batch"].iloc[0]) if len(below) else None


def linear_fit(rows: list[dict]) -> dict:
    """Least-squares fit step_ms = t0 + c * batch: a model drawn from the measurements.

    Its throughput ceiling is 1000 / c tokens/s and it reaches half of it at batch t0 / c.
    """
    df = pd.DataFrame(rows)
    if len(df) < 2:
        return {"t0_ms": math.nan, "c_ms": math.nan, "ceiling_tok_s": math.nan, "half_batch": math.nan}
    c, t0 = np.polyfit(df["batch"].to_numpy(float), df["step_ms"].to_numpy(float), 1)
    return {"t0_ms": float(t0), "c_ms": float(c),
            "ceiling_tok_s": 1000 / c if c > 0 else math.inf,
            "half_batch": t0 / c if c > 0 else math.inf}


# ----------------------------------------------------------------------------- figures

FIGURE_TEXTS = {   # figure: (title, what good looks like, x axis, y axis)
    "amortization": ("Amortization: one decode step shared by the whole batch",
                     "Good: tokens/s climbs steeply while ms per token falls. Past the bend (dashed) doubling "
                     "the batch buys less than 20% more throughput.",
                     "batch size (sequences in one decode step)", "tokens / s"),
    "step_time": ("Decode step time against batch size",
                  "Good (for batching): a flat start, where extra sequences ride almost free. "
                  "The slope is the per-sequence cost that eventually caps throughput.",
                  "batch size", "step time (ms)"),
}


def amortization(table: pd.DataFrame, bend: int | None = None, fit: dict | None = None) -> go.Figure:
    """Tokens/s (left axis) and ms per token (right axis) against batch size, bend marked."""
    texts = FIGURE_TEXTS["amortization"]
    if is_empty(table, "batch", "tokens_per_s", "ms_per_token"):
        return empty_figure(*texts)
    b = table["batch"].to_numpy(float)
    traces = [
        go.Scatter(name="tokens/s (measured)", x=b, y=table["tokens_per_s"], mode="lines+markers",
                   line=dict(color=COLORS["tokens"], width=2.5),
                   hovertemplate="batch %{x}: %{y:.0f} tokens/s<extra></extra>"),
        go.Scatter(name="ms per token (measured)", x=b, y=table["ms_per_token"], mode="lines+markers",
                   yaxis="y2", line=dict(color=COLORS["p95"], width=2),
                   hovertemplate="batch %{x}: %{y:.2f} ms per token<extra></extra>"),
    ]
    if fit and np.isfinite(fit.get("c_ms", math.nan)) and fit["c_ms"] > 0:
        xs = np.geomspace(b.min(), b.max(), 60)
        traces.append(go.Scatter(
            name=f"model: linear fit t = {fit['t0_ms']:.1f} + {fit['c_ms']:.2f}·B ms",
            x=xs, y=1000 * xs / (fit["t0_ms"] + fit["c_ms"] * xs), mode="lines",
            line=dict(color=MODEL_COLOR, width=1.5, dash="dot"),
            hovertemplate="model, batch %{x:.0f}: %{y:.0f} tokens/s<extra></extra>"))
    marks = [vline(bend, f"bend: from batch {bend}, doubling gains < 20%")] if bend is not None else []
    return go.Figure(data=traces, layout=wrapped_layout(
        *texts, xaxis=dict(type="log", tickvals=b, ticktext=[f"{int(v)}" for v in b]),
        yaxis=dict(rangemode="tozero"),
        yaxis2=dict(title=dict(text="ms per token"), overlaying="y", side="right", rangemode="tozero",
                    showgrid=False),
        margin=dict(l=60, r=60, t=80, b=50), shapes=[s for s, _ in marks], annotations=[n for _, n in marks]))


def step_time(table: pd.DataFrame, fit: dict | None = None) -> go.Figure:
    """Decode step time against batch size, with the straight-line fit drawn as a model."""
    texts = FIGURE_TEXTS["step_time"]
    if is_empty(table, "batch", "step_ms"):
        return empty_figure(*texts)
    b = table["batch"].to_numpy(float)
    traces = [go.Scatter(name="measured", x=b, y=table["step_ms"], mode="lines+markers",
                         line=dict(color=COLORS["running"], width=2.5),
                         hovertemplate="batch %{x}: %{y:.1f} ms a step<extra></extra>")]
    if fit and np.isfinite(fit.get("c_ms", math.nan)):
        traces.append(go.Scatter(name=f"model: {fit['t0_ms']:.1f} + {fit['c_ms']:.2f}·B ms", x=b,
                                 y=fit["t0_ms"] + fit["c_ms"] * b, mode="lines",
                                 line=dict(color=MODEL_COLOR, width=1.5, dash="dot")))
    return go.Figure(data=traces, layout=wrapped_layout(*texts, yaxis=dict(rangemode="tozero")))
