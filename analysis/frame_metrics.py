"""The run's metrics over its trace tables (DataFrames in the requests.csv / steps.csv formats).

Every number comes from engine.metrics' definitions, so a page's headline and the CLI's
summary.json agree; this module only adapts DataFrames to them. No Streamlit.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.style import is_empty
from engine import metrics


def finished(requests: pd.DataFrame) -> pd.DataFrame:
    """The rows of the finished requests."""
    if "status" not in requests.columns:
        return requests.iloc[0:0]
    return requests[requests["status"] == metrics.FINISHED]


def meets_slo(requests: pd.DataFrame, slo_ttft: float | None = None,
              slo_tpot: float | None = None) -> np.ndarray:
    """True for each finished request whose TTFT and TPOT are within every SLO that is set (seconds).

    A request with a single output token has no TPOT and passes the TPOT check.
    """
    return np.array(metrics.SLO(slo_ttft, slo_tpot).met_rows(requests), dtype=bool)


def wasted_slot_steps(steps: pd.DataFrame, max_slots: int) -> int:
    """engine.metrics.wasted_slot_steps over a steps table."""
    return 0 if is_empty(steps, "members") else metrics.wasted_slot_steps(steps["members"].tolist(), max_slots)


def _latest(steps: pd.DataFrame | None, col: str) -> int:
    """A step column's value at the latest step (0 before the first step)."""
    return 0 if is_empty(steps, col) else int(steps[col].iloc[-1])


def headline(requests: pd.DataFrame | None, steps: pd.DataFrame | None,
             slo_ttft: float | None = None, slo_tpot: float | None = None,
             max_slots: int | None = None, retired: metrics.Retired | None = None) -> dict:
    """The numbers for the page's metric strip. NaN where there is nothing to measure.
    Counts and rates cover the whole run (`retired`: what a live run's window has dropped);
    percentiles cover the tables."""
    totals = metrics.run_totals(requests, steps, metrics.SLO(slo_ttft, slo_tpot), retired)
    ttft = metrics.finished_values(requests, "ttft_s")
    tpot = metrics.finished_values(requests, "tpot_s")
    return {
        "ttft_p50_s": metrics.percentile(ttft, 50),
        "ttft_p95_s": metrics.percentile(ttft, 95),
        "tpot_p50_s": metrics.percentile(tpot, 50),
        "tpot_p95_s": metrics.percentile(tpot, 95),
        "throughput_tok_s": totals["output_throughput_tok_s"],
        "goodput_req_s": totals["goodput_req_s"],
        "finished": totals["finished"],
        "duration_s": totals["duration_s"],
        "waiting_now": _latest(steps, "waiting"),
        "running_now": _latest(steps, "running"),
        "wasted_slot_steps": wasted_slot_steps(steps, max_slots) if max_slots else 0,
    }
