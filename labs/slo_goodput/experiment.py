"""SLOs and goodput: one workload at several arrival rates, each finished run scored against
TTFT and TPOT targets (which requests met them, and the tokens/s that counted). The rates are
shares (LOADS) of the capacity this machine's step model predicts for the workload, so they sit
below and past capacity on any machine. The same workload on the simulator (engine.simulate) at
24 rates across that range answers at once; the real runs overlay it."""
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
    layout,
)
from course import claims
from engine.core.config import SchedulerPolicy
from engine.runs.results import RunResult
from engine.runs.workload import WorkloadSpec
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import arrival_rate, estimate, frames, run_each, simulated_run, single_run

LOADS = [0.5, 1.0, 1.5, 2.0]      # the real runs' arrival rates, as shares of the predicted capacity
SIM_LOADS = [round(float(x), 3) for x in np.linspace(0.25, 2.0, 24)]   # the simulated sweep
SPEC = WorkloadSpec(num_requests=64, rate=2.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=256,
                    output_kind="uniform", output_lo=16, output_hi=64)
POLICY = SchedulerPolicy(max_num_seqs=16)
TTFT_SLO_MS, TPOT_SLO_MS = 2000, 100   # where the SLO sliders start
FALL = claims.CLAIMS["goodput_falls"].threshold


def capacity(step_model) -> float:
    """Requests per second the engine finishes on this workload with its queue never empty, as the
    step model predicts it (four full batches arriving at once)."""
    res = simulated_run(step_model, POLICY, replace(SPEC, num_requests=4 * POLICY.max_num_seqs, rate=0))
    return float(res.summary["request_throughput_req_s"])


MISSED_BOTH = "TTFT and TPOT"        # slo_verdicts' word for a request that missed both targets
TIE = "about as many of each"       # most_missed's answer where both targets were missed about as often
SAME_MISSES = 0.1                   # miss counts within this share of the larger (or 1) count as about as many


def most_missed(missed_ttft: int, missed_tpot: int) -> str:
    """Which target more requests missed: "TTFT", "TPOT", or TIE where the counts are within SAME_MISSES of
    the larger (or within one request; 0 and 0 too), as the question says."""
    if abs(missed_ttft - missed_tpot) <= max(1, SAME_MISSES * max(missed_ttft, missed_tpot)):
        return TIE
    return "TTFT" if missed_ttft > missed_tpot else "TPOT"


def rates_for(step_model, loads=LOADS) -> list[float]:
    """The arrival rates: each load × the predicted capacity (labs.runs.arrival_rate)."""
    mu = capacity(step_model)
    return [arrival_rate(load, mu) for load in loads]


def rate_runs(model, rates, progress=None, refresh: bool = False,
              peek: bool = False) -> list[tuple[float, RunResult, bool]] | None:
    """The same workload at each arrival rate: [(rate, RunResult, was_cached)]."""
    return run_each(rates, lambda rate, p: single_run(model, POLICY, replace(SPEC, rate=float(rate)), p,
                                                      label=f"rate {rate:g}", refresh=refresh, peek=peek),
                    progress, describe=lambda rate: f"rate {rate:g}/s")


def estimate_s(model, rates) -> tuple[float, MachineSpeed]:
    """(seconds, this machine's step model) the runs take on this machine."""
    return estimate(model, [(POLICY, [Part(replace(SPEC, rate=float(rate)))]) for rate in rates])


def simulated_rate_runs(step_model, rates) -> list[tuple[float, RunResult, bool]]:
    """The same workload at each arrival rate on the simulator, its step times from `step_model`:
    [(rate, RunResult, False)], the shape rate_runs returns; the same runs for the same step model."""
    return [(float(rate), simulated_run(step_model, POLICY, replace(SPEC, rate=float(rate)),
                                        label=f"simulated rate {rate:g}"), False) for rate in rates]


def goodput_table(runs, ttft_slo_s: float | None, tpot_slo_s: float | None) -> pd.DataFrame:
    """One row per arrival rate: the rate and goodput() of its run under the SLO targets."""
    return pd.DataFrame([{"rate": rate, **goodput(res, ttft_slo_s, tpot_slo_s)} for rate, res, _ in runs])


def simulated_goodput(step_model, ttft_slo_s: float | None, tpot_slo_s: float | None,
                      loads=SIM_LOADS) -> pd.DataFrame:
    """goodput_table of the simulated runs at `loads` × the predicted capacity (24 loads by default)."""
    return goodput_table(simulated_rate_runs(step_model, rates_for(step_model, loads)), ttft_slo_s, tpot_slo_s)


def falls_verdict(table: pd.DataFrame, ttft_slo_s: float | None, tpot_slo_s: float | None) -> claims.Verdict:
    """The claim `goodput_falls`: goodput at the highest rate well below the sweep's best, while
    throughput there is no lower than at the best."""
    if len(table) < 2:
        return claims.judge("goodput_falls", math.nan, "", "", "it compares several arrival rates.")
    t = table.sort_values("rate")
    best, top = t.loc[t["goodput_req_s"].idxmax()], t.iloc[-1]
    share = claims.ratio(top.goodput_req_s, best.goodput_req_s)
    targets = f"TTFT ≤ {ttft_slo_s * 1000:g} ms and TPOT ≤ {tpot_slo_s * 1000:g} ms"
    if best.rate == top.rate:                     # the peak is the last rate: nothing to compare it with
        numbers = (f"With {targets}, goodput is highest at the highest rate tried, {top.rate:g} requests/s "
                   f"({top.goodput_req_s:.2f} req/s within both, throughput {top.output_tok_s:.0f} tok/s).")
    else:
        numbers = (f"With {targets}, goodput peaks at {best.rate:g} requests/s ({best.goodput_req_s:.2f} req/s "
                   f"within both) and is {top.goodput_req_s:.2f} at {top.rate:g} requests/s ({share:.0%} of the "
                   f"peak), while throughput goes {best.output_tok_s:.0f} → {top.output_tok_s:.0f} tok/s.")
    if not math.isfinite(share):
        return claims.judge("goodput_falls", math.nan, "", "", f"no request met {targets} at any rate: loosen them.")
    if share > FALL:
        why = (" Every rate here keeps its requests within the targets, so goodput follows throughput."
               if t["met_share"].min() > 0.9 else " Goodput has not fallen by the highest rate: raise the load or "
               "tighten the targets.")
    else:
        why = " But throughput fell as well."
    return claims.judge("goodput_falls", share,
                        numbers + f" Past {best.rate:g} requests/s the queue and fuller batches push requests past "
                        "the targets faster than new ones arrive: the engine is busy making tokens that come too late.",
                        numbers + why, extra_test=top.output_tok_s >= 0.95 * best.output_tok_s)


def slo_verdicts(requests: pd.DataFrame, ttft_slo_s: float | None, tpot_slo_s: float | None) -> pd.DataFrame:
    """Per finished request: met every SLO set? and which target it missed."""
    fin = frame_metrics.finished(requests).copy()
    miss_ttft = ~frame_metrics.meets_slo(fin, slo_ttft=ttft_slo_s)
    miss_tpot = ~frame_metrics.meets_slo(fin, slo_tpot=tpot_slo_s)
    fin["met_slo"] = ~(miss_ttft | miss_tpot)
    fin["missed"] = np.select([miss_ttft & miss_tpot, miss_ttft, miss_tpot], [MISSED_BOTH, "TTFT", "TPOT"], "")
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
        "missed_both": int((v["missed"] == MISSED_BOTH).sum()),     # counted in each of the two above
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
        real = dict(legendgroup="measured", legendgrouptitle_text="measured on this machine's engine") if has_sim else {}
        traces += [go.Scatter(name=name, x=table["rate"], y=table[col], mode="markers" if has_sim else "lines+markers",
                              marker=dict(size=10 if has_sim else 6, color=color), line=dict(color=color, width=2.5),
                              **real)
                   for col, name, color in lines]
    marks = [vline(selected, "shown below", color="#999", dash="dot")] if selected is not None else []
    return go.Figure(data=traces, layout=layout(*texts, yaxis=dict(rangemode="tozero"),
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
    return go.Figure(data=traces, layout=layout(*texts, shapes=[s for s, _ in marks],
                                                        annotations=[n for _, n in marks],
                                                        xaxis=dict(rangemode="tozero"), yaxis=dict(rangemode="tozero")))
