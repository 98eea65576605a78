"""Queue length and throughput over time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished, meets_slo
from analysis.style import (COLORS, MAX_POINTS, downsample_max, empty_figure, is_empty, layout, mark_lines,
                            num)


def queue_over_time(steps: pd.DataFrame, marks: pd.DataFrame | None = None) -> go.Figure:
    """Waiting vs running requests at the end of each step."""
    title = "Queue: waiting vs running"
    good = ("Good: waiting stays near zero and flat. A waiting line that keeps climbing means "
            "requests arrive faster than the engine finishes them.")
    xlabel, ylabel = "time (s)", "requests"
    if is_empty(steps, "t_end_s", "waiting", "running"):
        return empty_figure(title, good, xlabel, ylabel)
    x, (waiting, running) = downsample_max(
        num(steps, "t_end_s"), [num(steps, "waiting"), num(steps, "running")])
    shapes, notes = mark_lines(marks, "t_s")
    return go.Figure(
        data=[
            go.Scatter(name="waiting", x=x, y=waiting, mode="lines", line_shape="hv",
                       line=dict(color=COLORS["waiting"], width=2)),
            go.Scatter(name="running", x=x, y=running, mode="lines", line_shape="hv",
                       line=dict(color=COLORS["running"], width=2)),
        ],
        layout=layout(title, good, xlabel, ylabel, shapes=shapes, annotations=notes),
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
    has_steps = not is_empty(steps, "t_end_s", "decode_tokens")
    has_reqs = not is_empty(requests, "finish_s")
    if not (has_steps or has_reqs):
        return empty_figure(title, good, xlabel, ylabel)
    t_step = num(steps, "t_end_s") if has_steps else np.zeros(0)
    t_first = num(requests, "first_token_s") if has_reqs else np.zeros(0)
    t_first = t_first[~np.isnan(t_first)]
    fin = finished(requests) if has_reqs else pd.DataFrame()
    t_fin = num(fin, "finish_s") if len(fin) else np.zeros(0)
    t_good = t_fin[meets_slo(fin, slo_ttft, slo_tpot)] if len(fin) else np.zeros(0)

    times = np.concatenate([t_step[~np.isnan(t_step)], t_first, t_fin[~np.isnan(t_fin)]])
    if len(times) == 0:
        return empty_figure(title, good, xlabel, ylabel)
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
        tokens = tokens + per_second(t_step, np.nan_to_num(num(steps, "decode_tokens")))
    slo_text = ", ".join(f"{k} ≤ {v:g} s" for k, v in (("TTFT", slo_ttft), ("TPOT", slo_tpot))
                         if v is not None) or "no SLO set"
    shapes, notes = mark_lines(marks, "t_s")
    return go.Figure(
        data=[
            go.Scatter(name="output tokens/s", x=centers, y=tokens, mode="lines",
                       line=dict(color=COLORS["tokens"], width=2)),
            go.Scatter(name="finished req/s", x=centers, y=per_second(t_fin), mode="lines",
                       yaxis="y2", line=dict(color=COLORS["finished"], width=1.5, dash="dot")),
            go.Scatter(name=f"goodput req/s ({slo_text})", x=centers, y=per_second(t_good),
                       mode="lines", yaxis="y2", line=dict(color=COLORS["goodput"], width=2)),
        ],
        layout=layout(title, good + f" Bins of {bin_s:g} s.", xlabel, ylabel,
                       yaxis=dict(rangemode="tozero"),
                       yaxis2=dict(title=dict(text="requests / s"), overlaying="y", side="right",
                                   rangemode="tozero", showgrid=False, tickmode="auto"),
                       margin=dict(l=60, r=60, t=80, b=90), shapes=shapes, annotations=notes),
    )
