"""The knee: one workload under growing max_num_seqs; throughput against p95 latency, and the
setting past which more slots buy mostly latency."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.style import COLORS, empty_figure, is_empty, slo_line, wrapped_layout
from engine.config import SchedulerPolicy
from engine.results import RunResult
from engine.workload import WorkloadSpec
from labs.runs import run_each, single_run
from labs.slo_goodput.experiment import goodput

VALUES = [1, 2, 4, 8, 16, 32]
SPEC = WorkloadSpec(num_requests=32, rate=0, prompt_kind="uniform", prompt_lo=32, prompt_hi=96,
                    output_kind="uniform", output_lo=16, output_hi=32)
KNEE_X = "tpot_p95_ms"   # the knee is found on the throughput against p95 TPOT curve
LATENCIES = {"tpot_p95_ms": ("p95 TPOT (ms)", "ms"), "ttft_p95_s": ("p95 TTFT (s)", "s")}   # axis label, unit


def max_num_seqs_runs(model, values=VALUES, progress=None, refresh: bool = False,
                      peek: bool = False) -> list[tuple[int, RunResult, bool]] | None:
    """The same workload under each max_num_seqs: [(value, RunResult, was_cached)]."""
    base = SchedulerPolicy()
    return run_each([int(v) for v in values],
                    lambda v, p: single_run(model, base.changed(max_num_seqs=v), SPEC, p, label=f"max_num_seqs={v}",
                                            refresh=refresh, peek=peek),
                    progress, describe=lambda v: f"max_num_seqs={v}")


def knee_table(runs, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None) -> pd.DataFrame:
    """One row per max_num_seqs: throughput, p50/p95 latency (the run's summary, over its finished
    requests) and goodput under the given SLO targets."""
    rows = []
    for v, res, _ in runs:
        s = res.summary
        g = goodput(res, ttft_slo_s, tpot_slo_s)
        rows.append({"max_num_seqs": v, "output_tok_s": s["output_throughput_tok_s"],
                     "tpot_p95_ms": s["tpot_s"]["p95"] * 1000, "ttft_p95_s": s["ttft_s"]["p95"],
                     "tpot_p50_ms": s["tpot_s"]["p50"] * 1000, "ttft_p50_s": s["ttft_s"]["p50"],
                     "goodput_req_s": g["goodput_req_s"], "met_share": g["met_share"]})
    return pd.DataFrame(rows)


def find_knee(table: pd.DataFrame, x: str = KNEE_X) -> int | None:
    """The knee of the throughput-against-latency curve, by the "Kneedle" rule (a discrete form of
    the point of greatest curvature): scale both axes to 0-1 between the first and the last setting,
    and take the setting that lies furthest above the straight line joining them. Before it, extra
    slots buy throughput faster than latency; after it, latency grows faster than throughput.
    None when no setting lies above that line (throughput and latency grew in step)."""
    t = table.dropna(subset=[x, "output_tok_s"]).sort_values("max_num_seqs")
    if len(t) < 3:
        return None
    xs, ys = t[x].to_numpy(float), t["output_tok_s"].to_numpy(float)
    dx, dy = xs[-1] - xs[0], ys[-1] - ys[0]
    if dx <= 0 or dy <= 0:
        return None
    above = (ys - ys[0]) / dy - (xs - xs[0]) / dx
    i = int(np.argmax(above))
    return int(t["max_num_seqs"].iloc[i]) if above[i] > 0 else None


def throughput_vs_latency(table: pd.DataFrame, x: str, knee_value: int | None = None,
                          slo: float | None = None) -> go.Figure:
    """Throughput against a latency percentile, one point per max_num_seqs, the knee starred.

    x: "tpot_p95_ms" or "ttft_p95_s"; slo in the same unit as x.
    """
    xlabel, unit = LATENCIES[x]
    texts = (f"Throughput against {xlabel.split(' (')[0]}",
             "One point per max_num_seqs. Good: high and to the left. The knee (star) is where the curve "
             "leans right: more latency for little extra height.",
             xlabel, "output tokens / s")   # title, what good looks like, x and y axis
    if is_empty(table):
        return empty_figure(*texts)
    t = table.sort_values("max_num_seqs")
    traces = [go.Scatter(name="measured", x=t[x], y=t["output_tok_s"], mode="lines+markers+text",
                         text=[f"{v}" for v in t["max_num_seqs"]], textposition="top left",
                         line=dict(color=COLORS["running"], width=2), marker=dict(size=8),
                         hovertemplate="max_num_seqs %{text}: %{y:.0f} tok/s at %{x:.2f}<extra></extra>")]
    if knee_value is not None and (t["max_num_seqs"] == knee_value).any():
        k = t[t["max_num_seqs"] == knee_value]
        traces.append(go.Scatter(name=f"knee: max_num_seqs {knee_value}", x=k[x], y=k["output_tok_s"],
                                 mode="markers", marker=dict(symbol="star", size=18, color=COLORS["p95"])))
    marks = [slo_line(slo, f"SLO {slo:g} {unit}", vertical=True)] if slo is not None else []
    return go.Figure(data=traces, layout=wrapped_layout(*texts, shapes=[s for s, _ in marks],
                                                        annotations=[n for _, n in marks],
                                                        xaxis=dict(rangemode="tozero"), yaxis=dict(rangemode="tozero")))
