"""Queueing: the engine's sustained capacity mu for one workload, then Poisson arrivals at chosen
shares of it, long enough for the queue to settle; measured queue time and time in system beside
the M/M/1 model, Little's Law on each run's trace, and what a load past capacity looks like.

mu is measured as the engine works under this arrival mix with its queue never empty: every
request of the capacity run arrives at once (max_num_seqs are admitted, the rest queue and join
as slots free), and mu counts finishes per second over the middle half of them, so neither the
first full batch nor the last, emptying one, sets it.

The simulator runs SIM_REQUESTS requests per utilization (thousands of steps, under a second or
two); the real engine runs each utilization for about REAL_RUN_S seconds of arrivals.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished
from analysis.queueing import TOLERANCE as LITTLE_TOLERANCE
from analysis.queueing import littles_law_window, middle_window, mm1_time_in_system
from analysis.style import COLORS, MODEL_COLOR, empty_figure, is_empty, layout
from course import claims
from engine.core.config import SchedulerPolicy
from engine.runs.results import RunResult
from engine.core.validation import SMOLLM2_KV_BYTES_PER_TOKEN, kv_bytes_per_token as _kv_bytes
from engine.runs.workload import WorkloadSpec
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import estimate, frames, run_each, simulated_run, single_run

SPEC = WorkloadSpec(num_requests=40, rate=0, prompt_kind="uniform", prompt_lo=16, prompt_hi=64,
                    output_kind="uniform", output_lo=8, output_hi=24)
POLICY = SchedulerPolicy(max_num_seqs=8)
UTILIZATIONS = [0.3, 0.5, 0.7, 0.9]
CAPACITY_BATCHES = 10        # the capacity run holds this many full batches (max_num_seqs each)
SIM_REQUESTS = 600           # requests per simulated utilization: enough for the queue to settle
REAL_RUN_S = 90.0            # seconds of arrivals per real utilization
MIN_RUN_REQUESTS = 60        # a real run holds at least this many requests, however slow the machine
MIN_JUDGED = 100             # fewer finished requests than this cannot give a steady-state mean
OVERLOAD_RHOS = (0.9, 1.2)   # just below and past capacity: the lesson 9 comparison
BUSY_SAME = 0.10             # busy shares this close count as "no busier"
NEAR_FULL = 0.85             # a utilization from here up is "near full use"
CAPACITY_SHARE = 0.15        # of the progress bar: the run that measures mu


def capacity_spec(simulated: bool = False) -> WorkloadSpec:
    """Every request at once, CAPACITY_BATCHES full batches of them (four times that simulated)."""
    n = POLICY.max_num_seqs * CAPACITY_BATCHES * (4 if simulated else 1)
    return replace(SPEC, num_requests=n, rate=0)


def run_spec(rho: float, mu: float, simulated: bool = False) -> WorkloadSpec:
    """Poisson arrivals at lambda = rho * mu: SIM_REQUESTS of them simulated, about REAL_RUN_S
    seconds' worth on the real engine (at least MIN_RUN_REQUESTS)."""
    lam = arrival_rate(rho, mu)
    n = SIM_REQUESTS if simulated else max(MIN_RUN_REQUESTS, round(lam * REAL_RUN_S))
    return replace(SPEC, num_requests=n, rate=lam)


def service_rate_run(model, progress=None, refresh: bool = False, peek: bool = False):
    """The capacity run: every request at once, so the queue never empties until the end."""
    return single_run(model, POLICY, capacity_spec(), progress, label="capacity (queue never empty)",
                      refresh=refresh, peek=peek)


def service_rate(result: RunResult) -> float:
    """mu: finished requests per second over the middle half of the capacity run's finishes
    (the queue is full there; the start and the emptying end are left out)."""
    reqs = finished(pd.DataFrame(result.requests))
    t = np.sort(pd.to_numeric(reqs["finish_s"]).to_numpy(float))
    if len(t) < 4:
        return float(result.summary["request_throughput_req_s"])
    a, b = len(t) // 4, (3 * len(t)) // 4
    return (b - a) / (t[b] - t[a]) if t[b] > t[a] else float(result.summary["request_throughput_req_s"])


def arrival_rate(rho: float, mu: float) -> float:
    """lambda = rho * mu, rounded: the rate the run at utilization rho is given (and cached under)."""
    return round(float(rho) * mu, 4)


def utilization_runs(model, mu: float, utilizations=UTILIZATIONS, progress=None, refresh: bool = False,
                     peek: bool = False) -> list[tuple[float, RunResult, bool]] | None:
    """Poisson arrivals at lambda = rho * mu for each utilization rho: [(rho, RunResult, was_cached)]."""
    return run_each(utilizations,
                    lambda rho, p: single_run(model, POLICY, run_spec(rho, mu), p,
                                              label=f"rho {rho:g}", refresh=refresh, peek=peek),
                    progress, describe=lambda rho: f"ρ = {rho:.0%}")


def capacity_and_runs(model, utilizations=UTILIZATIONS, progress=None, refresh: bool = False,
                      peek: bool = False) -> tuple[float, list] | None:
    """mu from the capacity run, then a run at each utilization: (mu, runs), or None if not all stored."""
    cap = service_rate_run(model, progress and (lambda f, t: progress(CAPACITY_SHARE * f, t)),
                           refresh=refresh, peek=peek)
    if cap is None:
        return None
    mu = service_rate(cap[0])
    runs = utilization_runs(model, mu, utilizations,
                            progress and (lambda f, t: progress(CAPACITY_SHARE + (1 - CAPACITY_SHARE) * f, t)),
                            refresh=refresh, peek=peek)
    return None if runs is None else (mu, runs)


def simulated_capacity(step_model) -> float:
    """mu on the simulator, measured as the real one is."""
    return service_rate(simulated_run(step_model, POLICY, capacity_spec(True), label="capacity, simulated"))


def simulated_capacity_and_runs(step_model, utilizations=UTILIZATIONS, mu: float | None = None) -> tuple[float, list]:
    """capacity_and_runs on the simulator: mu from its capacity run, then SIM_REQUESTS at each utilization."""
    mu = simulated_capacity(step_model) if mu is None else mu
    return mu, [(rho, simulated_run(step_model, POLICY, run_spec(rho, mu, True),
                                    label=f"rho {rho:g}, simulated"), False) for rho in utilizations]


def estimate_s(model, utilizations=UTILIZATIONS, mu: float | None = None) -> tuple[float, MachineSpeed]:
    """(seconds, this machine's step model) the capacity run and the utilization runs take on this machine. Before
    mu is measured, the capacity the step model predicts for the capacity run stands in for it."""
    seconds = 0.0
    if mu is None:
        spec = capacity_spec()
        seconds, _ = estimate(model, [(POLICY, [Part(spec)])])
        mu = spec.num_requests / seconds if seconds > 0 else 1.0
    runs, speed = estimate(model, [(POLICY, [Part(run_spec(rho, mu))]) for rho in utilizations])
    return seconds + runs, speed


def waiting_growth(steps: pd.DataFrame, requests: pd.DataFrame) -> float:
    """How fast the waiting queue grows while requests arrive (requests per second): the slope of a
    straight line through the per-step waiting counts from the first arrival to the last."""
    arr = pd.to_numeric(requests["arrival_s"]).to_numpy(float)
    if len(steps) < 3 or len(arr) < 2:
        return math.nan
    t = pd.to_numeric(steps["t_end_s"]).to_numpy(float)
    keep = (t >= arr.min()) & (t <= arr.max())
    if keep.sum() < 3 or np.ptp(t[keep]) <= 0:
        return math.nan
    return float(np.polyfit(t[keep], pd.to_numeric(steps["waiting"]).to_numpy(float)[keep], 1)[0])


def busy_share(steps: pd.DataFrame, requests: pd.DataFrame) -> float:
    """The share of the arrival window (first to last arrival) the engine spent inside steps."""
    arr = pd.to_numeric(requests["arrival_s"]).to_numpy(float)
    if len(steps) == 0 or len(arr) < 2 or arr.max() <= arr.min():
        return math.nan
    a, b = arr.min(), arr.max()
    start = pd.to_numeric(steps["t_start_s"]).to_numpy(float).clip(a, b)
    end = pd.to_numeric(steps["t_end_s"]).to_numpy(float).clip(a, b)
    return float((end - start).sum() / (b - a))


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
    w = float(pd.to_numeric(fin["e2e_s"]).mean()) if len(fin) else nan
    queue_mean = float(pd.to_numeric(fin["queue_s"]).mean()) if len(fin) else nan
    return {
        "rho": rho, "lambda_set": lam_set, "lambda_arrivals": lam_arrivals, "finished": len(fin),
        "W_s": w, "W_mm1_s": mm1_time_in_system(lam_set, mu),
        "queue_mean_s": queue_mean, "service_mean_s": w - queue_mean,
        "window_arrivals": check.arrivals if check else 0,
        "L_steps": check.L if check else nan, "lambda": check.lam if check else nan,
        "W_window_s": check.W if check else nan, "lambda_W": check.lam_W if check else nan,
        "edge": check.edge if check else nan, "L_expected": check.expected_L if check else nan,
        "gap": check.gap if check else nan, "holds": check.holds() if check else False,
        "waiting_max": int(pd.to_numeric(steps["waiting"]).max()) if len(steps) else 0,
        "waiting_growth": waiting_growth(steps, reqs), "busy_share": busy_share(steps, reqs),
    }


def points_table(runs, mu: float) -> pd.DataFrame:
    """queue_point of every run, in the order of utilization."""
    return pd.DataFrame([queue_point(rho, res, mu) for rho, res, _ in sorted(runs, key=lambda r: r[0])])


DRAWN_OFF = 0.02             # arrivals drawn this far from the rate set change the utilization a row names


def drawn_words(points: pd.DataFrame) -> str:
    """Where the random arrivals came faster or slower than the rate set (a seed's luck: n arrivals
    stray about 1/√n, 4% at SIM_REQUESTS), what utilization each run really had; "" where they all
    came within DRAWN_OFF."""
    off = points["lambda_arrivals"] / points["lambda_set"] - 1
    if not (off.abs() > DRAWN_OFF).any():
        return ""
    real = ", ".join(f"{rho:.0%} ran at {rho * (1 + o):.0%}" for rho, o in zip(points["rho"], off) if rho < 1)
    typical = off.median()
    how = (f"came {abs(typical):.0%} {'faster' if typical > 0 else 'slower'} than the rates set"
           if abs(typical) > DRAWN_OFF else "strayed from the rates set in some runs")
    return (f"The random arrivals {how} (λ drawn against λ set in the table: a seed's luck), so each run's real "
            f"utilization differs from its row's: {real}. The M/M/1 model beside them is at the rate set.")


# ----------------------------------------------------------------------------- verdicts


def near_full(rhos) -> bool:
    """Whether a sweep reaches near full use without passing capacity: what `queueing_explodes` is
    about (at light loads alone the queue stays short whatever the claim says)."""
    return any(NEAR_FULL <= r < 1 for r in rhos)


def explodes_verdict(points: pd.DataFrame, mu: float) -> claims.Verdict:
    """The claim `queueing_explodes` on this sweep: mean queue time at the highest utilization
    below 100% against the lowest, with time in system beside the M/M/1 model's."""
    steady = points[points["rho"] < 1].sort_values("rho")
    if len(steady) < 2:
        return claims.judge("queueing_explodes", math.nan, "", "", "it needs two utilizations below 100% to "
                            "compare; above 100% the queue never settles, so a mean means nothing.")
    lo, hi = steady.iloc[0], steady.iloc[-1]
    few = steady[steady["finished"] < MIN_JUDGED]
    if len(few):
        r = few.iloc[0]
        return claims.judge("queueing_explodes", math.nan, "", "", f"the run at {r.rho:.0%} holds only "
                            f"{int(r.finished)} finished requests; a mean queue time needs {MIN_JUDGED} or more "
                            "before one clump of arrivals stops setting it.")
    floor = 0.001 * max(lo.service_mean_s, 1e-9)          # a queue time of 0 would make any growth infinite
    growth = hi.queue_mean_s / max(lo.queue_mean_s, floor)
    w_growth, model_growth = hi.W_s / lo.W_s, hi.W_mm1_s / lo.W_mm1_s
    slots = POLICY.max_num_seqs
    numbers = (f"Mean queue time went from {lo.queue_mean_s:.3g} s at {lo.rho:.0%} to {hi.queue_mean_s:.3g} s at "
               f"{hi.rho:.0%}: ×{growth:.1f}, while the load grew ×{hi.rho / lo.rho:.1f}.")
    why_w = (f" Time in system W grew ×{w_growth:.1f} where M/M/1 predicts ×{model_growth:.1f}: W is queue plus "
             f"service, and this engine's service took {lo.service_mean_s:.2f}–{hi.service_mean_s:.2f} s, "
             f"{lo.service_mean_s * mu:.1f}–{hi.service_mean_s * mu:.1f}× the 1/μ = {1 / mu:.2f} s that M/M/1 "
             f"serves one request in (it serves {slots} at once, each through its whole prefill and decode)."
             + (" That fixed part dilutes the queue's growth." if w_growth < model_growth else
                " The queue grew fast enough to outweigh that fixed part."))
    if hi.rho < NEAR_FULL:
        not_shown = numbers + (f" At {hi.rho:.0%} the engine is still far from full use: an arrival rarely finds "
                               f"all {slots} slots taken, so the queue stays short.")
    else:
        not_shown = numbers + (" Near full use it should grow faster than this; a short or unlucky run, or a μ "
                               "measured in a slow spell, can hide it.")
    return claims.judge("queueing_explodes", growth, numbers + why_w, not_shown + why_w)


def overload_verdict(points: pd.DataFrame) -> claims.Verdict:
    """The claim `overload_shows_in_waiting`: past capacity the waiting queue grows by a share of the
    arrivals, while the engine's busy share barely differs from just below capacity."""
    ordered = points.sort_values("rho")
    if len(ordered) < 2:
        return claims.judge("overload_shows_in_waiting", math.nan, "", "",
                            "it compares two loads, the highest with the next below it; add another.")
    ref, top = ordered.iloc[-2], ordered.iloc[-1]
    share = top.waiting_growth / top.lambda_set if top.lambda_set > 0 else math.nan
    busy_gap = abs(top.busy_share - ref.busy_share)
    busy = (f"The engine had a step running {ref.busy_share:.0%} of the time at {ref.rho:.0%} and "
            f"{top.busy_share:.0%} at {top.rho:.0%}")
    grow = (f"the waiting queue grew by {top.waiting_growth:.2f} requests a second at {top.rho:.0%} "
            f"({share:.0%} of the arrivals)")
    shown = (f"{busy}: no busier. But {grow}: requests pile up without end. Only the waiting count tells "
             "overload from a busy, healthy engine, so it is the signal to add a replica.")
    if share < claims.CLAIMS["overload_shows_in_waiting"].threshold:
        not_shown = (f"{busy}; {grow}, so the queue keeps emptying: "
                     + ("this load is below capacity." if top.rho < 1 else "μ may be underestimated."))
    else:
        not_shown = (f"{busy}: the busy share moved {busy_gap:.0%}, so here the engine's busyness does "
                     f"show the change; {grow}.")
    return claims.judge("overload_shows_in_waiting", share, shown, not_shown, extra_test=busy_gap <= BUSY_SAME)


DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def run_dtype(result: RunResult) -> str:
    """The dtype a real run's engine computed in ("bfloat16"), from its summary."""
    return str(result.summary.get("dtype", "float32")).removeprefix("torch.")


def engine_dtype(model_name: str) -> str:
    """The dtype the app's engine runs this model in on this machine, without loading it."""
    from labs.runs import _model_ref
    return str(_model_ref(model_name).dtype).removeprefix("torch.")


def kv_bytes_per_token(dtype: str) -> int:
    """SmolLM2's KV bytes per token (30 layers, 3 KV heads of 64) in `dtype`."""
    return _kv_bytes(30, 3, 64, DTYPE_BYTES.get(dtype, 4))


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
    return go.Figure(data=traces, layout=layout(
        *texts, xaxis=dict(range=[0, max(1.0, float(points["rho"].max()) + 0.05)], tickformat=".0%"),
        yaxis=dict(range=[0, max(3 * measured_max, 4 / mu)])))
