"""Queue length and throughput over time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.frame_metrics import finished, meets_slo
from analysis.style import (COLORS, MAX_POINTS, break_idle_gaps, downsample_max, empty_figure, figure, font_px, ghost_line, is_empty,
                            layout, mark_legend, num, time_marks)
from analysis.tables import Tables


def queue_over_time(steps: pd.DataFrame, marks: pd.DataFrame | None = None, presenter: bool = False,
                    x_range=None, ghost: Tables | None = None,
                    ghost_name: str = "previous run") -> dict:
    """Waiting vs running requests at the end of each step.

    x_range: (lo, hi) seconds to hold the x-axis still. ghost: another run's tables (the
    previous or a pinned run): its waiting line drawn faint grey."""
    title = "Queue: waiting vs running"
    good = ("Good: waiting stays near zero and flat. A waiting line that keeps climbing means "
            "requests arrive faster than the engine finishes them.")
    xlabel, ylabel = "time (s)", "requests"
    if is_empty(steps, "t_end_s", "waiting", "running"):
        return empty_figure(title, good, xlabel, ylabel, presenter)
    x, (waiting, running) = downsample_max(*break_idle_gaps(steps, [num(steps, "waiting"), num(steps, "running")]))
    shapes, notes = time_marks(marks, x, x_range, presenter)
    behind = []
    if ghost is not None and not is_empty(ghost.steps, "t_end_s", "waiting"):
        gx, (gy,) = downsample_max(*break_idle_gaps(ghost.steps, [num(ghost.steps, "waiting")]))
        behind = [ghost_line(gx, gy, f"{ghost_name} (waiting)", line_shape="hv")]
    return figure(
        data=[
            *behind,
            dict(type="scatter", name="waiting", x=x, y=waiting, mode="lines", line_shape="hv",
                 line=dict(color=COLORS["waiting"], width=2)),
            dict(type="scatter", name="running", x=x, y=running, mode="lines", line_shape="hv",
                 line=dict(color=COLORS["running"], width=2, dash="dot")),
            *mark_legend(shapes),
        ],
        layout=layout(title, good, xlabel, ylabel, shapes=shapes, annotations=notes,
                      presenter=presenter, x_range=x_range),
    )


def _per_second(t: np.ndarray, t0: float, bin_s: float, n_bins: int, weights=None) -> np.ndarray:
    """Events at times t counted (or weights summed) per bin of bin_s from t0, per second."""
    ok = ~np.isnan(t)
    idx = ((t[ok] - t0) // bin_s).astype(np.int64)
    w = None if weights is None else weights[ok]
    return np.bincount(idx, weights=w, minlength=n_bins)[:n_bins] / bin_s


def _token_times(steps: pd.DataFrame | None, requests: pd.DataFrame | None):
    """(step end times, decode tokens per step, first-token times): when output tokens appeared."""
    has_steps = not is_empty(steps, "t_end_s", "decode_tokens")
    t_first = num(requests, "first_token_s") if not is_empty(requests, "first_token_s") else np.zeros(0)
    if not has_steps:
        return np.zeros(0), np.zeros(0), t_first[~np.isnan(t_first)]
    return num(steps, "t_end_s"), np.nan_to_num(num(steps, "decode_tokens")), t_first[~np.isnan(t_first)]


def _token_rate(token_times, t0: float, bin_s: float, n_bins: int) -> np.ndarray:
    """Output tokens per second in each bin, from _token_times."""
    t_step, decode, t_first = token_times
    return _per_second(t_first, t0, bin_s, n_bins) + _per_second(t_step, t0, bin_s, n_bins, decode)


def throughput_over_time(steps: pd.DataFrame, requests: pd.DataFrame,
                         slo_ttft: float | None = None, slo_tpot: float | None = None,
                         marks: pd.DataFrame | None = None, bin_s: float = 1.0,
                         presenter: bool = False, x_range=None, ghost: Tables | None = None,
                         ghost_name: str = "previous run") -> dict:
    """Output tokens/s (left axis) and finished vs goodput requests/s (right axis) per bin.

    Tokens made in a step = its decode tokens + the first tokens of prefills that completed
    in it (a request's first_token_s). Goodput counts requests finishing within every SLO set.
    x_range: (lo, hi) seconds to hold the x-axis still. ghost: another run's tables (the
    previous or a pinned run): its output tokens/s drawn faint grey, in the same bins.
    """
    title = "Throughput and goodput"
    good = ("Good: goodput (green) sits on top of finished req/s (grey, dotted); the gap is "
            "requests that finished but too late to count.")
    xlabel, ylabel = "time (s)", "output tokens / s"
    has_reqs = not is_empty(requests, "finish_s")
    made = _token_times(steps, requests)
    t_step, _, t_first = made
    fin = finished(requests) if has_reqs else pd.DataFrame()
    t_fin = num(fin, "finish_s") if len(fin) else np.zeros(0)
    t_good = t_fin[meets_slo(fin, slo_ttft, slo_tpot)] if len(fin) else np.zeros(0)

    times = np.concatenate([t_step[~np.isnan(t_step)], t_first, t_fin[~np.isnan(t_fin)]])
    if len(times) == 0:
        return empty_figure(title, good, xlabel, ylabel, presenter)
    t0, t1 = float(times.min()), float(times.max())
    g_times = np.zeros(0)
    if ghost is not None:   # bins that cover both runs, so the lines compare bin for bin
        g_made = _token_times(ghost.steps, ghost.requests)
        g_times = np.concatenate([g_made[0][~np.isnan(g_made[0])], g_made[2]])
    if len(g_times):
        t0, t1 = min(t0, float(g_times.min())), max(t1, float(g_times.max()))
    while (t1 - t0) / bin_s > MAX_POINTS:  # keep the bin count bounded on long runs
        bin_s *= 2

    n_bins = int((t1 - t0) // bin_s) + 1
    centers = t0 + (np.arange(n_bins) + 0.5) * bin_s
    tokens = _token_rate(made, t0, bin_s, n_bins)
    slo_text = ", ".join(f"{k} ≤ {v:g} s" for k, v in (("TTFT", slo_ttft), ("TPOT", slo_tpot))
                         if v is not None) or "no SLO set"
    shapes, notes = time_marks(marks, times, x_range, presenter)
    behind = []
    if len(g_times):
        behind = [ghost_line(centers, _token_rate(g_made, t0, bin_s, n_bins),
                             f"{ghost_name} (tokens/s)")]
    text = dict(size=font_px(presenter))
    out = layout(title, good + f" Bins of {bin_s:g} s.", xlabel, ylabel, yaxis=dict(rangemode="tozero"),
                 presenter=presenter, x_range=x_range, shapes=shapes, annotations=notes,
                 yaxis2=dict(title=dict(text="requests / s", font=text), overlaying="y", side="right",
                             rangemode="tozero", showgrid=False, tickmode="auto"))
    out["margin"]["r"] = out["margin"]["l"]   # room for the right axis
    return figure(
        data=[
            *behind,
            dict(type="scatter", name="output tokens/s", x=centers, y=tokens, mode="lines",
                 line=dict(color=COLORS["tokens"], width=2)),
            dict(type="scatter", name="finished req/s", x=centers, y=_per_second(t_fin, t0, bin_s, n_bins),
                 mode="lines", yaxis="y2",
                 line=dict(color=COLORS["finished"], width=1.5, dash="dot")),
            dict(type="scatter", name=f"goodput req/s ({slo_text})", x=centers,
                 y=_per_second(t_good, t0, bin_s, n_bins), mode="lines", yaxis="y2",
                 line=dict(color=COLORS["goodput"], width=2, dash="dash")),
            *mark_legend(shapes),
        ],
        layout=out,
    )
