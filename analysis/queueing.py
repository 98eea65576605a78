"""Queueing helpers for the queueing lab and the lessons' calculators: the M/M/1 model and
Little's Law, as formulas and on a real trace.

Pure functions over numbers and trace tables, and one chart; no Streamlit. Times in seconds,
rates per second.

- M/M/1 (a model, not a measurement): one server, Poisson arrivals at rate lam, exponential
  service at rate mu. Mean time in system W = 1 / (mu - lam), finite only while lam < mu. The
  time in system is exponential with rate mu - lam, so its q-quantile is -ln(1 - q) W.
- Little's Law, L = lambda W for any stable system whatever its arrivals and service, and the law
  checked on a window cut from the middle of a run. L comes from
  the engine's own per-step counters (waiting + running); lambda and W come from the requests
  that arrived in the window, from their own timestamps. The two sides are measured
  independently, so a miscounting engine or broken timestamps make the check fail.
  On a finite window the law holds only up to its edges: requests already inside when the
  window opens add to L but not to lambda W, and requests still inside when it closes add their
  whole stay to W but only part of it to L. `LittleCheck.edge` is that difference, worked out
  from the timestamps, and the check allows for it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished
from analysis.style import COLORS, MODEL_COLOR, empty_figure, num, vline, layout


def mm1_time_in_system(lam, mu):
    """Mean time in system of an M/M/1 queue, W = 1 / (mu - lam); inf where lam >= mu.

    Works on scalars and numpy arrays alike.
    """
    lam = np.asarray(lam, dtype=float)
    mu = np.asarray(mu, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(lam < mu, 1.0 / (mu - lam), np.inf)
    return float(w) if w.ndim == 0 else w


def mm1_time_in_system_quantile(lam, mu, q: float = 0.99):
    """The q-quantile of an M/M/1 queue's time in system, -ln(1 - q) / (mu - lam); inf where lam >= mu.

    The time in system is exponential with rate mu - lam, so p99 = ln(100) W, about 4.6 W.
    """
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q}")
    return -math.log1p(-q) * mm1_time_in_system(lam, mu)


def littles_law_in_system(lam: float, w: float) -> float:
    """Little's Law: mean number in the system L = lambda W (lambda per second, W in seconds)."""
    if lam < 0 or w < 0:
        raise ValueError(f"the arrival rate and the time in system cannot be negative (got {lam}, {w})")
    return lam * w


def mm1_p99_chart(lam: float, mu: float) -> go.Figure:
    """The M/M/1 p99 time in system against utilization for service rate mu, the mean beside
    it, and the point for arrival rate lam marked (or a line at 100% when lam >= mu)."""
    texts = ("M/M/1: p99 time in system as utilization rises",
             f"A model, not a measurement, for μ = {mu:g} req/s. Good: stay left of where the curve turns steep.",
             "utilization ρ = λ / μ", "time in system (s)")
    if not mu > 0 or not lam >= 0:
        return go.Figure(empty_figure(*texts))
    now = lam / mu
    rho = np.linspace(0, 0.99, 199)
    p99 = mm1_time_in_system_quantile(rho * mu, mu)
    traces = [go.Scatter(name="p99 time in system", x=rho, y=p99, mode="lines",
                         line=dict(color=COLORS["p95"], width=2.5),
                         hovertemplate="ρ %{x:.0%}: p99 %{y:.2f} s<extra></extra>"),
              go.Scatter(name="mean time in system W", x=rho, y=mm1_time_in_system(rho * mu, mu), mode="lines",
                         line=dict(color=MODEL_COLOR, width=1.5, dash="dash"),
                         hovertemplate="ρ %{x:.0%}: mean %{y:.2f} s<extra></extra>")]
    shapes, notes = [], []
    if now < 1:
        p99_now = mm1_time_in_system_quantile(lam, mu)
        traces.append(go.Scatter(name=f"your λ: ρ = {now:.0%}", x=[now], y=[p99_now], mode="markers",
                                 marker=dict(color=COLORS["bad"], size=12),
                                 hovertemplate="ρ %{x:.0%}: p99 %{y:.2f} s<extra></extra>"))
    else:
        shape, note = vline(1.0, f"your λ: ρ = {now:.0%}, unstable", color=COLORS["bad"])
        shapes, notes = [shape], [note]
    # the curve runs off to infinity at 100%: show it up to 90% busy, or up to the marked point
    top = 1.15 * mm1_time_in_system_quantile(min(max(now, 0.9), 0.98) * mu, mu)
    return go.Figure(data=traces, layout=layout(
        *texts, xaxis=dict(range=[0, 1.02], tickformat=".0%"), yaxis=dict(range=[0, top]),
        shapes=shapes, annotations=notes))


def time_averaged_in_system(arrivals, departures, t0: float | None = None,
                            t1: float | None = None) -> float:
    """Time-averaged number of requests in the system over [t0, t1].

    N(t) = arrivals up to t - departures up to t. The average is the area under N(t) divided
    by the window length; the area is the sum of each request's time inside the window.
    The window defaults to [first arrival, last departure].
    """
    a = np.asarray(arrivals, dtype=float)
    d = np.asarray(departures, dtype=float)
    if a.shape != d.shape:
        raise ValueError("arrivals and departures must have the same length")
    if len(a) == 0:
        return math.nan
    if np.any(d < a):
        raise ValueError("a request cannot depart before it arrives")
    t0 = float(a.min()) if t0 is None else float(t0)
    t1 = float(d.max()) if t1 is None else float(t1)
    if t1 <= t0:
        return math.nan
    inside = np.clip(np.minimum(d, t1) - np.maximum(a, t0), 0.0, None)
    return float(inside.sum() / (t1 - t0))


def time_averaged_from_steps(steps: pd.DataFrame, t0: float, t1: float) -> float:
    """Time-averaged (waiting + running) from the engine's own per-step counters over [t0, t1].

    An independent estimate of L: each step's counts are weighted by its duration, and time
    with no step (the engine idle) counts as an empty system.
    """
    if steps is None or len(steps) == 0 or t1 <= t0:
        return math.nan
    start, end = num(steps, "t_start_s"), num(steps, "t_end_s")
    n = np.nan_to_num(num(steps, "waiting")) + np.nan_to_num(num(steps, "running"))
    dur = np.clip(np.minimum(end, t1) - np.maximum(start, t0), 0.0, None)
    return float((n * dur).sum() / (t1 - t0))


MIDDLE_SHARE = 0.5     # the check's window: the middle half of the run
TOLERANCE = 0.1        # how far (as a share of L) the engine's count may sit from the timestamps'


@dataclass(frozen=True, slots=True)
class LittleCheck:
    """Little's Law on one window [t0, t1] of a run."""
    t0: float
    t1: float
    arrivals: int          # requests that arrived in the window
    lam: float             # arrivals / window length
    W: float               # mean time in system (finish - arrival) of those requests
    L: float               # time-averaged waiting + running, from the engine's step records
    edge: float            # L - lambda W due to the window's edges alone (from the timestamps)

    @property
    def lam_W(self) -> float:
        return self.lam * self.W

    @property
    def expected_L(self) -> float:
        """What the timestamps say L must be: lambda W plus the edge effect."""
        return self.lam_W + self.edge

    @property
    def gap(self) -> float:
        """(L - expected L) / expected L: near 0 when the engine's counters agree."""
        return (self.L - self.expected_L) / self.expected_L if self.expected_L > 0 else math.nan

    def holds(self, tolerance: float = TOLERANCE) -> bool:
        return abs(self.gap) <= tolerance


def middle_window(requests: pd.DataFrame, share: float = MIDDLE_SHARE) -> tuple[float, float]:
    """The middle `share` of [first arrival, last finish] of the finished requests."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    df = finished(requests)
    a, d = num(df, "arrival_s"), num(df, "finish_s")
    if len(a) == 0:
        return math.nan, math.nan
    start, end = float(np.nanmin(a)), float(np.nanmax(d))
    cut = (end - start) * (1 - share) / 2
    return start + cut, end - cut


def littles_law_window(requests: pd.DataFrame, steps: pd.DataFrame, t0: float, t1: float) -> LittleCheck | None:
    """Little's Law over [t0, t1]: L from the engine's counters, lambda and W from the requests
    that arrived in the window. None when the window is empty or nobody arrived in it."""
    if not t1 > t0:
        return None
    df = finished(requests)
    a, d = num(df, "arrival_s"), num(df, "finish_s")
    ok = ~(np.isnan(a) | np.isnan(d))
    a, d = a[ok], d[ok]
    came = (a >= t0) & (a < t1)
    if not came.any():
        return None
    lam, W = float(came.sum()) / (t1 - t0), float((d[came] - a[came]).mean())
    # the timestamps' own time-average over the window differs from lambda W only by the edges
    edge = time_averaged_in_system(a, d, t0, t1) - lam * W
    return LittleCheck(t0=t0, t1=t1, arrivals=int(came.sum()), lam=lam, W=W,
                       L=time_averaged_from_steps(steps, t0, t1), edge=edge)
