"""Queueing helpers for the queueing lab: the M/M/1 model and Little's Law on a real trace.

Pure functions over numbers and trace tables, no Streamlit. Times in seconds, rates per second.

- M/M/1 (a model, not a measurement): one server, Poisson arrivals at rate lam, exponential
  service at rate mu. Mean time in system W = 1 / (mu - lam), finite only while lam < mu.
- Little's Law (L = lambda W) checked on a window cut from the middle of a run. L comes from
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

from analysis.frame_metrics import finished
from analysis.style import num


def mm1_time_in_system(lam, mu):
    """Mean time in system of an M/M/1 queue, W = 1 / (mu - lam); inf where lam >= mu.

    Works on scalars and numpy arrays alike.
    """
    lam = np.asarray(lam, dtype=float)
    mu = np.asarray(mu, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(lam < mu, 1.0 / (mu - lam), np.inf)
    return float(w) if w.ndim == 0 else w


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
