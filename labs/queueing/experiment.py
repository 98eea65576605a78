"""Queueing: the engine's capacity mu for one workload, then Poisson arrivals at chosen shares
of it; measured time in system beside the M/M/1 model, and Little's Law on each run's trace."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished
from analysis.queueing import TOLERANCE as LITTLE_TOLERANCE
from analysis.queueing import littles_law_window, middle_window, mm1_time_in_system
from analysis.style import COLORS, MODEL_COLOR, empty_figure, is_empty, wrapped_layout
from engine.config import SchedulerPolicy
from engine.results import RunResult
from engine.validation import SMOLLM2_KV_BYTES_PER_TOKEN
from engine.workload import WorkloadSpec
from labs.part import Part
from labs.runs import estimate, frames, run_each, simulated_run, single_run

SPEC = WorkloadSpec(num_requests=40, rate=0, prompt_kind="uniform", prompt_lo=16, prompt_hi=64,
                    output_kind="uniform", output_lo=8, output_hi=24)
POLICY = SchedulerPolicy(max_num_seqs=8)
UTILIZATIONS = [0.3, 0.5, 0.7, 0.9]
CAPACITY_SHARE = 0.15   # of the progress bar: the all-at-once run that measures mu


def service_rate_run(model, progress=None, refresh: bool = False, peek: bool = False):
    """Every request at once: the engine's most requests per second for this workload (mu)."""
    return single_run(model, POLICY, SPEC, progress, label="capacity (all at once)", refresh=refresh, peek=peek)


def service_rate(result: RunResult) -> float:
    """mu = finished requests / duration of the all-at-once run."""
    return result.summary["request_throughput_req_s"]


def arrival_rate(rho: float, mu: float) -> float:
    """lambda = rho * mu, rounded: the rate the run at utilization rho is given (and cached under)."""
    return round(float(rho) * mu, 4)


def utilization_runs(model, mu: float, utilizations=UTILIZATIONS, progress=None, refresh: bool = False,
                     peek: bool = False) -> list[tuple[float, RunResult, bool]] | None:
    """Poisson arrivals at lambda = rho * mu for each utilization rho: [(rho, RunResult, was_cached)]."""
    return run_each(utilizations,
                    lambda rho, p: single_run(model, POLICY, replace(SPEC, rate=arrival_rate(rho, mu)), p,
                                              label=f"rho {rho:g}", refresh=refresh, peek=peek),
                    progress, describe=lambda rho: f"ρ = {rho:.0%}")


def capacity_and_runs(model, utilizations=UTILIZATIONS, progress=None, refresh: bool = False,
                      peek: bool = False) -> tuple[float, list] | None:
    """mu from the all-at-once run, then a run at each utilization: (mu, runs), or None if not all stored."""
    cap = service_rate_run(model, progress and (lambda f, t: progress(CAPACITY_SHARE * f, t)),
                           refresh=refresh, peek=peek)
    if cap is None:
        return None
    mu = service_rate(cap[0])
    runs = utilization_runs(model, mu, utilizations,
                            progress and (lambda f, t: progress(CAPACITY_SHARE + (1 - CAPACITY_SHARE) * f, t)),
                            refresh=refresh, peek=peek)
    return None if runs is None else (mu, runs)


def simulated_capacity_and_runs(step_model, utilizations=UTILIZATIONS) -> tuple[float, list]:
    """capacity_and_runs on the simulator: mu from its all-at-once run, then each utilization."""
    mu = service_rate(simulated_run(step_model, POLICY, SPEC, label="capacity (all at once), simulated"))
    return mu, [(rho, simulated_run(step_model, POLICY, replace(SPEC, rate=arrival_rate(rho, mu)),
                                    label=f"rho {rho:g}, simulated"), False) for rho in utilizations]


def estimate_s(model, utilizations=UTILIZATIONS, mu: float | None = None) -> tuple[float, bool]:
    """(seconds, calibrated?) the capacity run and the utilization runs take on this machine. Before
    mu is measured, the cost model's own capacity (scaled to this machine) stands in for it."""
    if mu is None:
        seconds, calibrated = estimate(model, [(POLICY, [Part(SPEC)])])
        mu = SPEC.num_requests / seconds if seconds > 0 else 1.0
    else:
        seconds, calibrated = 0.0, True
    runs, calibrated_runs = estimate(model, [(POLICY, [Part(replace(SPEC, rate=arrival_rate(rho, mu)))])
                                             for rho in utilizations])
    return seconds + runs, calibrated and calibrated_runs


def queue_point(rho: float, result: RunResult, mu: float) -> dict:
    """One arrival-rate run: measured time in system beside the M/M/1 model, and Little's Law
    checked on the middle half of the run (analysis.queueing.littles_law_window)."""
    reqs, steps = frames(result)
    fin = finished(reqs)
    lam_set = arrival_rate(rho, mu)
    arr = pd.to_numeric(fin["arrival_s"]).to_numpy(float)
    lam_arrivals = (len(arr) - 1) / (arr.max() - arr.min()) if len(arr) > 1 and arr.max() > arr.min() else math.nan
    check = littles_law_window(reqs, steps, *middle_window(reqs))
    nan = math.nan
    return {
        "rho": rho, "lambda_set": lam_set, "lambda_arrivals": lam_arrivals,
        "W_s": float(pd.to_numeric(fin["e2e_s"]).mean()), "W_mm1_s": mm1_time_in_system(lam_set, mu),
        "queue_mean_s": float(pd.to_numeric(fin["queue_s"]).mean()),
        "window_arrivals": check.arrivals if check else 0,
        "L_steps": check.L if check else nan, "lambda": check.lam if check else nan,
        "W_window_s": check.W if check else nan, "lambda_W": check.lam_W if check else nan,
        "edge": check.edge if check else nan, "L_expected": check.expected_L if check else nan,
        "gap": check.gap if check else nan, "holds": check.holds() if check else False,
        "waiting_max": int(pd.to_numeric(steps["waiting"]).max()) if len(steps) else 0,
    }


def kv_demand(lam: float, w_s: float, tokens_per_request: float,
              bytes_per_token: float = SMOLLM2_KV_BYTES_PER_TOKEN) -> dict:
    """The KV consequence of Little's Law: L = lambda W requests are inside at once on average, and
    each holds its KV cache for its whole stay, so the cache must hold about L x tokens each."""
    inside = lam * w_s
    tokens = inside * tokens_per_request
    return {"inside": inside, "tokens": tokens, "bytes": tokens * bytes_per_token}


def time_in_system(points: pd.DataFrame, mu: float, source: str = "measured") -> go.Figure:
    """Mean time in system against utilization (`source`: "measured" on the engine, or "simulated"),
    beside the M/M/1 model W = 1/(mu - lambda)."""
    texts = ("Time in system as utilization rises",
             f"Dots: {'measured on the engine' if source == 'measured' else 'the simulator'}. Dashed: the M/M/1 "
             f"model for this μ — a model, not a measurement. Good: stay left of where the curves turn steep.",
             "utilization ρ = λ / μ", "mean time in system W (s)")   # title, what good looks like, x and y axis
    if is_empty(points) or not (mu > 0):
        return go.Figure(empty_figure(*texts))
    rho = np.linspace(0.01, 0.99, 200)
    model_w = mm1_time_in_system(rho * mu, mu)
    measured_max = float(np.nanmax(points["W_s"]))
    traces = [
        go.Scatter(name=f"M/M/1 model, μ = {mu:.2f} req/s", x=rho, y=model_w, mode="lines",
                   line=dict(color=MODEL_COLOR, width=2, dash="dash"),
                   hovertemplate="model: ρ %{x:.0%}, W %{y:.2f} s<extra></extra>"),
        go.Scatter(name=f"{source} mean time in system", x=points["rho"], y=points["W_s"], mode="lines+markers",
                   line=dict(color=COLORS["running"], width=2.5), marker=dict(size=9),
                   hovertemplate=source + ": ρ %{x:.0%}, W %{y:.2f} s<extra></extra>"),
        go.Scatter(name=f"{source} mean queue time", x=points["rho"], y=points["queue_mean_s"],
                   mode="lines+markers", line=dict(color=COLORS["waiting"], width=1.5, dash="dot"),
                   hovertemplate=source + ": ρ %{x:.0%}, queue %{y:.2f} s<extra></extra>"),
    ]
    return go.Figure(data=traces, layout=wrapped_layout(
        *texts, xaxis=dict(range=[0, max(1.0, float(points["rho"].max()) + 0.05)], tickformat=".0%"),
        yaxis=dict(range=[0, max(3 * measured_max, 4 / mu)])))
