"""Queueing helpers for the queueing lab: the M/M/1 model and Little's Law on a real trace.

Pure functions over numbers and trace tables, no Streamlit. Times in seconds, rates per second.

- M/M/1 (a model, not a measurement): one server, Poisson arrivals at rate lam, exponential
  service at rate mu. Mean time in system W = 1 / (mu - lam), finite only while lam < mu.
- Little's Law (a theorem about any trace): over a window that starts and ends with the
  system empty, the time-averaged number in system L equals throughput lambda times the
  mean time in system W. On a real run it is a consistency check on the measurements.
"""
from __future__ import annotations

import math

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


def littles_law(requests: pd.DataFrame) -> tuple[float, float, float, float]:
    """(L, lambda, W, lambda * W) for the finished requests of a run.

    L      = time-averaged number in system over [first arrival, last departure]
    lambda = requests / that window (arrival rate = throughput: the window starts and ends empty)
    W      = mean time in system (departure - arrival), i.e. mean E2E latency
    Uses the columns arrival_s and finish_s of the finished requests.
    """
    df = finished(requests)
    a, d = num(df, "arrival_s"), num(df, "finish_s")
    ok = ~(np.isnan(a) | np.isnan(d))
    a, d = a[ok], d[ok]
    if len(a) == 0:
        return math.nan, math.nan, math.nan, math.nan
    span = float(d.max() - a.min())
    if span <= 0:
        return math.nan, math.nan, math.nan, math.nan
    L = time_averaged_in_system(a, d)
    lam = len(a) / span
    W = float((d - a).mean())
    return L, lam, W, lam * W


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
