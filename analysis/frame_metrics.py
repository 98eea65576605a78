"""The run's metrics over its trace tables (DataFrames in the requests.csv / steps.csv formats).

Every number comes from engine.core.metrics' definitions, so a page's headline and the CLI's
summary.json agree; this module only adapts DataFrames to them. No Streamlit.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.style import is_empty
from engine.core import metrics


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


def wasted_slot_steps(steps: pd.DataFrame, max_slots: int | None = None) -> int:
    """engine.core.metrics.wasted_slot_steps over a steps table (slots left empty while requests
    waited): each step against its own max_num_seqs where the table records it, else against
    `max_slots`."""
    if is_empty(steps, "members"):
        return 0
    members = steps["members"].tolist()
    waiting = pd.to_numeric(steps["waiting"], errors="coerce").fillna(0).astype(int).tolist()
    if "max_num_seqs" in steps.columns and (pd.to_numeric(steps["max_num_seqs"], errors="coerce") > 0).all():
        return metrics.wasted_slot_steps(members, steps["max_num_seqs"].astype(int).tolist(), waiting)
    return metrics.wasted_slot_steps(members, max_slots, waiting) if max_slots else 0


def _latest(steps: pd.DataFrame | None, col: str) -> int:
    """A step column's value at the latest step (0 before the first step)."""
    return 0 if is_empty(steps, col) else int(steps[col].iloc[-1])


# The headline's percentiles count every request as soon as it has the value (TTFT with its first
# token, TPOT with its second), in flight or finished; until this many have finished they are
# marked provisional: the requests still waiting for their first token are not in them yet.
PROVISIONAL_UNTIL = 20
IN_FLIGHT_OR_FINISHED = (metrics.FINISHED, "running", "waiting")


def so_far(requests: pd.DataFrame | None, name: str) -> list[float]:
    """A column's measured values over the requests finished or still in flight."""
    return [v for v, s in zip(metrics.column(requests, name), metrics.column(requests, "status"))
            if s in IN_FLIGHT_OR_FINISHED and metrics.measured(v)]


def headline(requests: pd.DataFrame | None, steps: pd.DataFrame | None,
             slo_ttft: float | None = None, slo_tpot: float | None = None,
             max_slots: int | None = None, retired: metrics.Retired | None = None,
             counts: metrics.Counts | None = None) -> dict:
    """The numbers for the page's metric strip. NaN where there is nothing to measure.
    Counts and rates cover the whole run (`retired`: what a live run's window has dropped;
    `counts`: where every request is now, else the latest step's); percentiles cover the tables'
    requests that have the value so far (`provisional` until PROVISIONAL_UNTIL have finished)."""
    totals = metrics.run_totals(requests, steps, metrics.SLO(slo_ttft, slo_tpot), retired)
    ttft = so_far(requests, "ttft_s")
    tpot = so_far(requests, "tpot_so_far_s") if "tpot_so_far_s" in (requests if requests is not None else {}) \
        else metrics.finished_values(requests, "tpot_s")
    if counts is None:
        counts = metrics.Counts() if is_empty(steps, "step") else (
            metrics.Counts.of_step(steps.iloc[-1]) if "arrived" in steps.columns
            else metrics.Counts(waiting=_latest(steps, "waiting"), running=_latest(steps, "running")))
    wasted = wasted_slot_steps(steps, max_slots) + (retired.wasted_slot_steps if retired else 0)
    return {
        "ttft_p50_s": metrics.percentile(ttft, 50),
        "ttft_p95_s": metrics.percentile(ttft, 95),
        "tpot_p50_s": metrics.percentile(tpot, 50),
        "tpot_p95_s": metrics.percentile(tpot, 95),
        "ttft_n": len(ttft), "tpot_n": len(tpot),
        "provisional": totals["finished"] < PROVISIONAL_UNTIL,
        "throughput_tok_s": totals["output_throughput_tok_s"],
        "goodput_req_s": totals["goodput_req_s"],
        "finished": totals["finished"],
        "duration_s": totals["duration_s"],
        "waiting_now": counts.waiting,
        "running_now": counts.running,
        "counts": counts,
        "wasted_slot_steps": wasted,
    }
