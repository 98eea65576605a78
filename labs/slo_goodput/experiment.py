"""SLOs and goodput: one workload at several arrival rates, each finished run scored against
TTFT and TPOT targets (which requests met them, and the tokens/s that counted). The same workload
on the simulator (engine.simulate) at SIM_RATES, 24 rates across the lab's range, answers at once;
the real runs overlay it."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis import frame_metrics
from analysis.style import (
    COLORS,
    empty_figure,
    is_empty,
    slo_line,
    vline,
    wrapped_layout,
)
from engine.config import SchedulerPolicy
from engine.results import RunResult
from engine.workload import WorkloadSpec
from labs.part import Part
from labs.runs import estimate, frames, run_each, simulated_run, single_run

RATES = [1.0, 2.0, 4.0, 8.0]
SPEC = WorkloadSpec(num_requests=32, rate=2.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=256,
                    output_kind="uniform", output_lo=16, output_hi=64)
POLICY = SchedulerPolicy(max_num_seqs=16)
SIM_RATES = [round(float(r), 3) for r in np.linspace(min(RATES), max(RATES), 24)]   # the simulated sweep


def rate_runs(model, rates=RATES, progress=None, refresh: bool = False,
              peek: bool = False) -> list[tuple[float, RunResult, bool]] | None:
    """The same workload at each arrival rate: [(rate, RunResult, was_cached)]."""
    return run_each(rates, lambda rate, p: single_run(model, POLICY, replace(SPEC, rate=float(rate)), p,
                                                      label=f"rate {rate:g}", refresh=refresh, peek=peek),
                    progress, describe=lambda rate: f"rate {rate:g}/s")


def estimate_s(model, rates=RATES) -> tuple[float, bool]:
    """(seconds, calibrated?) the runs take on this machine."""
    return estimate(model, [(POLICY, [Part(replace(SPEC, rate=float(rate)))]) for rate in rates])


def simulated_rate_runs(step_model, rates=SIM_RATES) -> list[tuple[float, RunResult, bool]]:
    """The same workload at each arrival rate on the simulator, its step times from `step_model`:
    [(rate, RunResult, False)], the shape rate_runs returns; the same runs for the same step model."""
    return [(float(rate), simulated_run(step_model, POLICY, replace(SPEC, rate=float(rate)),
                                        label=f"simulated rate {rate:g}"), False) for rate in rates]


def goodput_table(runs, ttft_slo_s: float | None, tpot_slo_s: float | None) -> pd.DataFrame:
    """One row per arrival rate: the rate and goodput() of its run under the SLO targets."""
    return pd.DataFrame([{"rate": rate, **goodput(res, ttft_slo_s, tpot_slo_s)} for rate, res, _ in runs])


def simulated_goodput(step_model, ttft_slo_s: float | None, tpot_slo_s: float | None,
                      rates=SIM_RATES) -> pd.DataFrame:
    """goodput_table of the simulated runs at `rates` (24 rates across RATES by default)."""
    return goodput_table(simulated_rate_runs(step_model, rates), ttft_slo_s, tpot_slo_s)


def slo_verdicts(requests: pd.DataFrame, ttft_slo_s: float | None, tpot_slo_s: float | None) -> pd.DataFrame:
    """Per finished request: met every SLO set? and which target it missed."""
    fin = frame_metrics.finished(requests).copy()
    miss_ttft = ~frame_metrics.meets_slo(fin, slo_ttft=ttft_slo_s)
    miss_tpot = ~frame_metrics.meets_slo(fin, slo_tpot=tpot_slo_s)
    fin["met_slo"] = ~(miss_ttft | miss_tpot)
    fin["missed"] = np.select([miss_ttft & miss_tpot, miss_ttft, miss_tpot], ["TTFT and TPOT", "TTFT", "TPOT"], "")
    return fin


def goodput(result: RunResult, ttft_slo_s: float | None, tpot_slo_s: float | None) -> dict:
    """Throughput against goodput for one finished run, under the given SLO targets."""
    reqs, _ = frames(result)
    v = slo_verdicts(reqs, ttft_slo_s, tpot_slo_s)
    dur = result.summary["duration_s"]
    tokens = pd.to_numeric(v["output_tokens"])
    return {
        "output_tok_s": tokens.sum() / dur,
        "useful_tok_s": tokens[v["met_slo"]].sum() / dur,
        "request_s": len(v) / dur,
        "goodput_req_s": int(v["met_slo"].sum()) / dur,
        "met_share": float(v["met_slo"].mean()) if len(v) else math.nan,
        "missed_ttft": int(v["missed"].str.contains("TTFT").sum()),
        "missed_tpot": int(v["missed"].str.contains("TPOT").sum()),
    }


# ----------------------------------------------------------------------------- figures


def goodput_vs_rate(table: pd.DataFrame, selected: float | None = None, simulated: pd.DataFrame | None = None,
                    simulated_label: str = "simulated") -> go.Figure:
    """All output tokens/s against tokens/s of requests that met the SLO, per arrival rate.

    `simulated` (a simulated_goodput table): both drawn as dotted lines, `simulated_label` in their
    names, with the measured runs (`table`, may be empty) as markers on top."""
    texts = ("Throughput vs goodput as the arrival rate rises",
             "Good: the green line (tokens from requests within the SLO) hugs the blue one (all tokens). "
             "Where they part, the engine is busy making tokens that arrive too late to count.",
             "arrival rate (requests / s)", "output tokens / s")   # title, what good looks like, x and y axis
    has_sim = not is_empty(simulated)
    if is_empty(table) and not has_sim:
        return go.Figure(empty_figure(*texts))
    lines = (("output_tok_s", "all output tokens/s", COLORS["tokens"]),
             ("useful_tok_s", "tokens/s within the SLO (useful)", COLORS["goodput"]))
    traces = []
    if has_sim:
        traces += [go.Scatter(name=name, x=simulated["rate"], y=simulated[col], mode="lines",
                              line=dict(color=color, width=2.5, dash="dot"), legendgroup="simulated",
                              legendgrouptitle_text=simulated_label)
                   for col, name, color in lines]
    if not is_empty(table):
        real = dict(legendgroup="measured", legendgrouptitle_text="measured on the real engine") if has_sim else {}
        traces += [go.Scatter(name=name, x=table["rate"], y=table[col], mode="markers" if has_sim else "lines+markers",
                              marker=dict(size=10 if has_sim else 6, color=color), line=dict(color=color, width=2.5),
                              **real)
                   for col, name, color in lines]
    marks = [vline(selected, "shown below", color="#999", dash="dot")] if selected is not None else []
    return go.Figure(data=traces, layout=wrapped_layout(*texts, yaxis=dict(rangemode="tozero"),
                                                        shapes=[s for s, _ in marks],
                                                        annotations=[n for _, n in marks]))


def slo_scatter(verdicts: pd.DataFrame, ttft_slo_s: float | None, tpot_slo_s: float | None) -> go.Figure:
    """Each finished request at (TTFT, TPOT), green when it met every SLO, red when not."""
    texts = ("Every request against the SLO box",
             "Good: dots inside the box (lower left of both dotted lines) — those requests count toward goodput.",
             "TTFT (s)", "TPOT (ms)")   # title, what good looks like, x and y axis
    if is_empty(verdicts):
        return go.Figure(empty_figure(*texts))
    traces = []
    # met / missed told apart by shape (● / ×) and by name as well as by colour
    for ok, name, color, symbol in ((True, "● met the SLO", COLORS["goodput"], "circle"),
                                    (False, "× missed", COLORS["bad"], "x")):
        d = verdicts[verdicts["met_slo"] == ok]
        traces.append(go.Scatter(name=f"{name} ({len(d)})", x=d["ttft_s"], y=d["tpot_s"] * 1000, mode="markers",
                                 marker=dict(size=8, color=color, opacity=0.75, symbol=symbol), text=d["id"],
                                 hovertemplate="%{text}: TTFT %{x:.2f} s, TPOT %{y:.0f} ms<extra></extra>"))
    marks = []
    if ttft_slo_s is not None:
        marks.append(slo_line(ttft_slo_s, f"TTFT SLO {ttft_slo_s:g} s", vertical=True))
    if tpot_slo_s is not None:
        marks.append(slo_line(tpot_slo_s * 1000, f"TPOT SLO {tpot_slo_s * 1000:g} ms"))
    return go.Figure(data=traces, layout=wrapped_layout(*texts, shapes=[s for s, _ in marks],
                                                        annotations=[n for _, n in marks],
                                                        xaxis=dict(rangemode="tozero"), yaxis=dict(rangemode="tozero")))
