"""The knee: one workload under growing max_num_seqs, each setting run REPEATS times (seeds 0, 1,
2...); throughput against p95 latency with the runs' range, and the knee by the labs' one rule
(labs.knee_rule). Every setting gets the same requests, all at once: FILL full batches of the
sweep's largest setting, so every batch fills and the settings' TTFT and goodput compare one
workload. Short prompts and longer answers make the run mostly decode steps, as lesson 6's
example is. The same sweep on the simulator (engine.simulate: the same scheduler, step times from
a step model) answers at once over more settings (SIM_VALUES, up to the sweep's largest) on the same requests; the real points
overlay it."""
from __future__ import annotations

import statistics
from dataclasses import replace

import pandas as pd
import plotly.graph_objects as go

from analysis.style import COLORS, empty_figure, is_empty, slo_line, layout
from course import claims
from engine.core.config import SchedulerPolicy
from engine.core.step_model import StepShape
from engine.runs.arrivals import build_requests
from engine.runs.workload import WorkloadSpec
from labs import knee_rule
from labs.repeats import error_bars, spread
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import estimate, run_each, simulated_run, single_run
from labs.slo_goodput.experiment import goodput

VALUES = [4, 8, 16, 32, 64, 128]
CHOICES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SIM_VALUES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]   # the simulated sweep, up to the sweep's largest
REPEATS = 2
FILL = 2                       # full batches of the largest setting: the requests every setting gets
# Where the SLO sliders start: from this machine's step model, not fixed numbers. A fixed target that
# a small CPU's larger settings miss is met by a GPU at every setting, and then goodput cannot tell the
# settings apart. TPOT: TPOT_SLO_TIMES x one request decoding alone. A decode step grows with its batch,
# so the settings past the knee (where more slots mostly lengthen every step) break it, and the
# smaller ones keep it; 3.5 is where a 2-core CPU's simulated sweep keeps it up to 24 slots of a knee
# at 64. TTFT: every request arrives at once, so a request's TTFT is mostly waiting behind the others;
# TTFT_SLO_LONE_REQUESTS x one request's whole time alone (its prompt, then every token at batch 1) lets
# a request wait for about that many served one after another. The smallest settings, which serve few
# at a time, break it for most of the queue; larger ones keep it for more of it.
TPOT_SLO_TIMES = 3.5
TTFT_SLO_LONE_REQUESTS = 10
TPOT_SLIDER_MS = (10, 300, 5)          # the sliders: lowest, highest, step
TTFT_SLIDER_S = (0.5, 60.0, 0.5)
MIN_REQUESTS = 12
SPEC = WorkloadSpec(num_requests=32, rate=0, prompt_kind="uniform", prompt_lo=16, prompt_hi=32,
                    output_kind="uniform", output_lo=24, output_hi=56)
COLUMNS = ["output_tok_s", "tpot_p95_ms", "ttft_p95_s", "tpot_p50_ms", "ttft_p50_s", "goodput_req_s", "met_share",
           "fill", "requests"]


def slo_defaults(step_model) -> tuple[int, float]:
    """(TPOT ms, TTFT s) where the SLO sliders start on a machine whose step times `step_model` predicts
    (above: why these multiples), on the sliders' steps and within their ranges."""
    requests = build_requests(SPEC)
    prompt = round(statistics.fmean(len(r.prompt_token_ids) for r in requests))
    output = round(statistics.fmean(r.max_new_tokens for r in requests))
    alone_tpot_ms = step_model.decode_ms(1, prompt + output // 2)
    alone_s = (step_model.predict(StepShape(prompt, 1, 0, prompt * (prompt + 1) // 2))
               + (output - 1) * alone_tpot_ms) / 1000
    return (int(_on_slider(TPOT_SLO_TIMES * alone_tpot_ms, *TPOT_SLIDER_MS)),
            _on_slider(TTFT_SLO_LONE_REQUESTS * alone_s, *TTFT_SLIDER_S))


def _on_slider(value: float, lo: float, hi: float, step: float) -> float:
    return float(min(hi, max(lo, lo + step * round((value - lo) / step))))


def requests_for(values) -> int:
    """How many requests every setting of a sweep over `values` gets: FILL full batches of the largest."""
    return max(MIN_REQUESTS, FILL * max(int(v) for v in values))


def spec_for(values, seed: int = 0, requests: int | None = None) -> WorkloadSpec:
    """The workload every setting of a sweep over `values` runs, all at once: requests_for(values)
    requests; `requests` fixes the count instead (a sweep whose larger batches cannot fill)."""
    return replace(SPEC, num_requests=requests if requests is not None else requests_for(values), seed=seed)
LATENCIES = {"tpot_p95_ms": ("p95 TPOT (ms)", "ms"), "ttft_p95_s": ("p95 TTFT (s)", "s")}   # axis label, unit


def policy_for(max_num_seqs: int, limits: dict | None = None) -> SchedulerPolicy:
    """max_num_seqs, with a KV cache that holds every slot at its longest and a token budget that admits a
    whole batch of prompts in one step, so neither caps the batch below max_num_seqs. `limits` sets either
    instead ({"max_num_batched_tokens": 8}: a budget that caps every setting's batch at 8)."""
    base, v = SchedulerPolicy(), int(max_num_seqs)
    kv = max(base.kv_capacity_tokens, v * (SPEC.prompt_len.hi + SPEC.output_len.hi))
    budget = max(base.max_num_batched_tokens, v * SPEC.prompt_len.hi)
    return base.changed(**{"max_num_seqs": v, "kv_capacity_tokens": kv, "max_num_batched_tokens": budget,
                           **(limits or {})})


def settings(values=VALUES, repeats: int = REPEATS) -> list[tuple[int, int]]:
    """Every (max_num_seqs, seed) run of the sweep."""
    return [(int(v), seed) for v in values for seed in range(repeats)]


def max_num_seqs_runs(model, values=VALUES, repeats: int = REPEATS, progress=None, refresh: bool = False,
                      peek: bool = False) -> list[tuple[tuple[int, int], object, bool]] | None:
    """The workload under each max_num_seqs, once per seed: [((value, seed), RunResult, was_cached)]."""
    specs = {seed: spec_for(values, seed) for seed in range(repeats)}     # every setting gets the same requests
    return run_each(settings(values, repeats),
                    lambda vs, p: single_run(model, policy_for(vs[0]), specs[vs[1]], p,
                                             label=f"max_num_seqs={vs[0]}, seed {vs[1]}", refresh=refresh, peek=peek),
                    progress, describe=lambda vs: f"max_num_seqs={vs[0]} (run {vs[1] + 1} of {repeats})")


def estimate_s(model, values=VALUES, repeats: int = REPEATS) -> tuple[float, MachineSpeed]:
    """(seconds, this machine's step model) the sweep takes on this machine."""
    return estimate(model, [(policy_for(v), [Part(spec_for(values, seed))])
                            for v, seed in settings(values, repeats)])


def simulated_runs(step_model, values=SIM_VALUES, seed: int = 0, requests: int | None = None,
                   limits: dict | None = None) -> list[tuple[tuple[int, int], object, bool]]:
    """The workload (seed `seed`) under each max_num_seqs on the simulator, its step times from
    `step_model`: [((value, seed), RunResult, False)], the shape max_num_seqs_runs returns."""
    return [((int(v), seed), simulated_run(step_model, policy_for(v, limits),
                                            spec_for(values, seed, requests),
                                            label=f"simulated max_num_seqs={v}"), False) for v in values]


def simulated_sweep(step_model, values=SIM_VALUES, seed: int = 0, ttft_slo_s: float | None = None,
                    tpot_slo_s: float | None = None) -> pd.DataFrame:
    """knee_table of the simulated sweep: one row per max_num_seqs (SIM_VALUES by default), the real
    sweep's columns; the same table for the same step model and seed."""
    return knee_table(simulated_runs(step_model, values, seed), ttft_slo_s, tpot_slo_s)


def run_rows(runs, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None) -> pd.DataFrame:
    """One row per run: max_num_seqs, seed, throughput, p50/p95 latency (over its finished
    requests) and goodput under the given SLO targets."""
    rows = []
    for (v, seed), res, _ in runs:
        s = res.summary
        g = goodput(res, ttft_slo_s, tpot_slo_s)
        rows.append({"max_num_seqs": v, "seed": seed, "output_tok_s": s["output_throughput_tok_s"],
                     "tpot_p95_ms": s["tpot_s"]["p95"] * 1000, "ttft_p95_s": s["ttft_s"]["p95"],
                     "tpot_p50_ms": s["tpot_s"]["p50"] * 1000, "ttft_p50_s": s["ttft_s"]["p50"],
                     "goodput_req_s": g["goodput_req_s"], "met_share": g["met_share"],
                     "fill": max((int(st["running"]) for st in res.steps), default=0) / v,
                     "requests": s["requests"]})
    return pd.DataFrame(rows)


def knee_table(runs, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None) -> pd.DataFrame:
    """One row per max_num_seqs: the mean of its runs (labs.repeats.spread: _lo / _hi the range)."""
    return spread(run_rows(runs, ttft_slo_s, tpot_slo_s), "max_num_seqs", COLUMNS)


def find_knee(table: pd.DataFrame) -> int | None:
    """The knee of the sweep by the labs' one rule: the smallest max_num_seqs whose mean
    throughput reaches 90% of the best (labs.knee_rule)."""
    k = knee_rule.knee(table["max_num_seqs"].tolist(), table["output_tok_s"].tolist()) if len(table) else None
    return None if k is None else int(k)


def knee_verdict(table: pd.DataFrame) -> claims.Verdict:
    """The claim `knee_below_max` on this sweep: the knee below the largest setting, and the largest
    setting's p95 TPOT well above the knee's. Undecided where the sweep cannot tell: too few requests
    to fill its larger batches, or throughput still climbing at its largest setting."""
    if len(table) < 2:
        return claims.judge("knee_below_max", float("nan"), "", "", "a sweep needs at least two settings.")
    fill = "fill_lo" if "fill_lo" in table else "fill"
    short = table[(table[fill] < 1) & (table["requests"] < table["max_num_seqs"])]
    if len(short):
        u = short.iloc[0]
        return claims.judge("knee_below_max", float("nan"), "", "",
                            f"at max_num_seqs {int(u.max_num_seqs)} only {int(u.requests)} requests came, so this "
                            "sweep cannot tell larger settings apart: give it more concurrent work.")
    knee = find_knee(table)
    k, top = table[table.max_num_seqs == knee].iloc[0], table.iloc[-1]
    growth = top.tpot_p95_ms / k.tpot_p95_ms if k.tpot_p95_ms > 0 else float("nan")
    held = int(round(top[fill] * top.max_num_seqs))
    numbers = (f"The knee is max_num_seqs {knee}: {k.output_tok_s:.0f} tok/s, {k.output_tok_s / table.output_tok_s.max():.0%} "
               f"of the best. Going on to {int(top.max_num_seqs)} changes throughput by "
               f"{top.output_tok_s / k.output_tok_s - 1:+.0%} and p95 TPOT by {growth - 1:+.0%} "
               f"({k.tpot_p95_ms:.0f} → {top.tpot_p95_ms:.0f} ms).")
    if knee == int(top.max_num_seqs):
        below = table.iloc[-2]
        return claims.judge("knee_below_max", float("nan"), "", "",
                            f"throughput was still climbing at the largest setting ({below.output_tok_s:.0f} tok/s at "
                            f"{int(below.max_num_seqs)}, {top.output_tok_s:.0f} at {int(top.max_num_seqs)}), so the "
                            f"knee is the largest setting tried: it lies at {int(top.max_num_seqs)} or above, and "
                            "only larger values can say where. Add larger values.")
    capped = (f" The batch never held more than {held} requests at {int(top.max_num_seqs)}, though requests were "
              "waiting: the KV cache or the token budget, not max_num_seqs, set the batch, so the larger settings ran "
              "the same batch." if top[fill] < 1 else " Here latency hardly grew past the knee.")
    return claims.judge("knee_below_max", growth, numbers + " Past the knee, more slots mostly make every step "
                        "longer for everyone in it.", numbers + capped)


def throughput_vs_latency(table: pd.DataFrame, x: str, knee_value: int | None = None,
                          slo: float | None = None, simulated: pd.DataFrame | None = None,
                          simulated_label: str = "simulated") -> go.Figure:
    """Throughput against a latency percentile, one point per max_num_seqs, the knee starred.

    x: "tpot_p95_ms" or "ttft_p95_s"; slo in the same unit as x. `simulated` (a simulated_sweep
    table): drawn as a line named `simulated_label`, the measured points (`table`, may be empty)
    as markers on top; the knee is starred on the measured points, else on the simulated line.
    """
    xlabel, unit = LATENCIES[x]
    has_sim = not is_empty(simulated)
    if is_empty(table) and has_sim:         # no points: the line, and the star among the values chosen
        what = ("The dotted line is the simulated sweep, one run per max_num_seqs. Good: high and to the left. "
                f"The star is the knee among the values chosen: the first with {knee_rule.KNEE_SHARE:.0%} of "
                "their best height; past it, more slots buy latency.")
    else:
        what = ("One point per max_num_seqs (the mean of its runs; bars: lowest to highest run). Good: high and "
                f"to the left. The knee (star) is the first point with {knee_rule.KNEE_SHARE:.0%} of the best "
                "height: past it, more slots buy latency.")
    texts = (f"Throughput against {xlabel.split(' (')[0]}", what, xlabel, "output tokens / s")
    if is_empty(table) and not has_sim:
        return go.Figure(empty_figure(*texts))
    traces = []
    if has_sim:
        sim = simulated.sort_values("max_num_seqs")
        traces.append(go.Scatter(name=simulated_label, x=sim[x], y=sim["output_tok_s"], mode="lines",
                                 line=dict(color=COLORS["points"], width=2.5, dash="dot"),
                                 customdata=sim["max_num_seqs"],
                                 hovertemplate="simulated, max_num_seqs %{customdata}: %{y:.0f} tok/s at "
                                               "%{x:.2f}<extra></extra>"))
    t = table.sort_values("max_num_seqs") if not is_empty(table) else pd.DataFrame(columns=["max_num_seqs"])
    if len(t):
        traces.append(go.Scatter(name="measured on this machine's engine", x=t[x],
                                 y=t["output_tok_s"], mode="markers+text" if has_sim else "lines+markers+text",
                                 text=[f"{v}" for v in t["max_num_seqs"]], textposition="top left",
                                 line=dict(color=COLORS["running"], width=2), marker=dict(size=9),
                                 error_x=error_bars(t, x), error_y=error_bars(t, "output_tok_s"),
                                 hovertemplate="max_num_seqs %{text}: %{y:.0f} tok/s at %{x:.2f}<extra></extra>"))
    else:
        t = simulated.sort_values("max_num_seqs")
    if knee_value is not None and (t["max_num_seqs"] == knee_value).any():
        k = t[t["max_num_seqs"] == knee_value]
        traces.append(go.Scatter(name=f"knee: max_num_seqs {knee_value}", x=k[x], y=k["output_tok_s"],
                                 mode="markers", marker=dict(symbol="star", size=18, color=COLORS["p95"])))
    marks = [slo_line(slo, f"SLO {slo:g} {unit}", vertical=True)] if slo is not None else []
    return go.Figure(data=traces, layout=layout(*texts, shapes=[s for s, _ in marks],
                                                        annotations=[n for _, n in marks],
                                                        xaxis=dict(rangemode="tozero"), yaxis=dict(rangemode="tozero")))
