"""Run metrics over the trace tables (DataFrames in the requests.csv / steps.csv formats). No Streamlit.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from analysis.membership import wasted_slot_steps
from analysis.style import is_empty, num


def meets_slo(requests: pd.DataFrame, slo_ttft: float | None = None,
              slo_tpot: float | None = None) -> np.ndarray:
    """True for each request whose TTFT and TPOT are within every SLO that is set (seconds).

    A request with a single output token has no TPOT and passes the TPOT check.
    """
    ok = np.ones(len(requests), dtype=bool)
    if slo_ttft is not None:
        ok &= num(requests, "ttft_s") <= slo_ttft
    if slo_tpot is not None:
        tpot = num(requests, "tpot_s")
        ok &= np.isnan(tpot) | (tpot <= slo_tpot)
    return ok


def finished(requests: pd.DataFrame) -> pd.DataFrame:
    if "status" in requests.columns:
        return requests[requests["status"] == "finished"]
    return requests[requests["finish_s"].notna()] if "finish_s" in requests.columns else requests


def duration(requests: pd.DataFrame | None, steps: pd.DataFrame | None) -> float:
    """Seconds from the first arrival (or first step) to the last step or finish."""
    starts, ends = [], []
    if not is_empty(requests):
        starts.append(np.nanmin(num(requests, "arrival_s"), initial=np.inf))
        ends.append(np.nanmax(num(requests, "finish_s"), initial=-np.inf))
    if not is_empty(steps):
        starts.append(np.nanmin(num(steps, "t_start_s"), initial=np.inf))
        ends.append(np.nanmax(num(steps, "t_end_s"), initial=-np.inf))
    if not starts:
        return float("nan")
    d = max(ends) - min(starts)
    return float(d) if np.isfinite(d) and d > 0 else float("nan")


def pct(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if len(values) else float("nan")


def headline(requests: pd.DataFrame, steps: pd.DataFrame, slo_ttft: float | None = None,
             slo_tpot: float | None = None, max_slots: int | None = None) -> dict:
    """The numbers for the page's metric strip (vLLM bench semantics, see DESIGN.md).

    Percentiles are over finished requests; throughput = their output tokens / duration;
    goodput = those meeting every SLO set / duration. NaN where there is nothing to measure.
    """
    requests = requests if requests is not None else pd.DataFrame()
    fin = finished(requests) if len(requests) else requests
    span = duration(requests, steps)
    ttft, tpot = num(fin, "ttft_s"), num(fin, "tpot_s")
    has_steps = not is_empty(steps)
    out = {
        "ttft_p50_s": pct(ttft, 50),
        "ttft_p95_s": pct(ttft, 95),
        "tpot_p50_s": pct(tpot, 50),
        "tpot_p95_s": pct(tpot, 95),
        "throughput_tok_s": float(np.nansum(num(fin, "output_tokens")) / span),
        "goodput_req_s": float(meets_slo(fin, slo_ttft, slo_tpot).sum() / span),
        "finished": int(len(fin)),
        "duration_s": span,
        "waiting_now": int(num(steps, "waiting")[-1]) if has_steps and "waiting" in steps else 0,
        "running_now": int(num(steps, "running")[-1]) if has_steps and "running" in steps else 0,
        "wasted_slot_steps": (wasted_slot_steps(steps, max_slots)
                              if has_steps and max_slots else 0),
    }
    return out
