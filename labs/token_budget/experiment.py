"""The token budget: one workload under a sweep of max_num_batched_tokens, chunked prefill on and
decodes first (vLLM v1's order). Short chat turns with a share of long prompts arrive over time at
LOAD of what this machine's step model says the engine serves at CAPACITY_BUDGET; every budget gets
the same requests. Per budget: TTFT (p50, p95) against the gaps between tokens (ITL p95 and p99),
and the tokens each second of engine work made. The counter-case is the same sweep over short
prompts only, where no step ever fills the budget. The simulator answers at once on the same
requests; the real runs overlay it."""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from analysis.style import COLORS, empty_figure, is_empty, layout
from engine.core.config import SchedulerPolicy
from engine.core.metrics import percentile
from engine.runs.workload import LengthDist, WorkloadSpec
from course import claims
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import arrival_rate, estimate, frames, mix_run, run_each, simulated_mix_run

BUDGETS = [128, 256, 512, 1024]
CHOICES = [32, 64, 128, 256, 512, 1024, 2048]
CAPACITY_BUDGET = 1024      # the arrival rate is a share of the capacity at this budget, whatever the sweep
SLOTS = 8                   # max_num_seqs: 8 slots of the longest request fit the default KV cache
LOAD = 0.7
REQUESTS = 48
SHORT_PROMPT = LengthDist("uniform", 32, 96)
LONG_PROMPT = LengthDist("uniform", 512, 896)
OUTPUT = LengthDist("uniform", 32, 64)
WORKLOADS = {"mixed": 0.4, "short only": 0.0}     # workload -> share of its requests with a long prompt
CLAIM_WORKLOAD = "mixed"    # the claim is about a mix; "short only" is its counter-case
CHANGE = 0.1                # a change under 10% counts as "about the same"
TTFT_FALL = 0.1             # the claim needs p95 TTFT at least this much lower at the largest budget
CHAT_STALL_SLACK = 1.5      # a chat goal accepts a longest gap up to this many times the sweep's shortest
TIE = 0.02                  # tokens per second of work within 2% count as the same
OUTCOMES = ("TTFT down, longest gaps up", "TTFT about the same, longest gaps up",
            "TTFT down, longest gaps about the same", "neither moves much", "something else (TTFT up, or gaps down)")
COLUMNS = ["ttft_p50_s", "ttft_p95_s", "stall_p95_ms", "itl_p95_ms", "itl_p99_ms", "tpot_p95_ms", "work_tok_s",
           "max_step_tokens", "chunked_prompts", "requests"]


def policy_for(budget: int) -> SchedulerPolicy:
    """max_num_batched_tokens = `budget`, with chunked prefill on and decodes first (the defaults, said
    here so the lab does not depend on them)."""
    return SchedulerPolicy().changed(max_num_seqs=SLOTS, max_num_batched_tokens=int(budget),
                                     enable_chunked_prefill=True, step_priority="decode_first")


def parts(rate: float, workload: str = CLAIM_WORKLOAD, seed: int = 0, requests: int | None = None) -> list[Part]:
    """The workload's requests (REQUESTS unless `requests` says) arriving at random at `rate` per second in
    all: short chat turns, and WORKLOADS[workload] of them with a long prompt (ids s-... and l-...)."""
    requests = REQUESTS if requests is None else requests
    n_long = round(requests * WORKLOADS[workload])
    out = []
    for k, (n, prompt, tag) in enumerate(((requests - n_long, SHORT_PROMPT, "s"), (n_long, LONG_PROMPT, "l"))):
        if n:
            out.append(Part(WorkloadSpec(num_requests=n, rate=rate * n / requests, **prompt.as_fields("prompt"),
                                         **OUTPUT.as_fields("output"), seed=seed + k, id_prefix=tag)))
    return out


def capacity(step_model) -> float:
    """Requests per second the engine finishes of the mixed workload with its queue never empty, at
    CAPACITY_BUDGET, as the step model predicts it (the requests arriving at once)."""
    res = simulated_mix_run(step_model, policy_for(CAPACITY_BUDGET), parts(0.0, CLAIM_WORKLOAD, requests=96))
    return float(res.summary["request_throughput_req_s"])


def rate_for(step_model, load: float = LOAD) -> float:
    """The lab's arrival rate, for both workloads: `load` × the mixed workload's capacity."""
    return arrival_rate(load, capacity(step_model))


def budget_runs(model, rate: float, budgets=BUDGETS, workload: str = CLAIM_WORKLOAD, progress=None,
                refresh: bool = False, peek: bool = False):
    """[(budget, RunResult, was_cached)]: the same requests under each budget on the real engine."""
    return run_each([int(b) for b in budgets],
                    lambda b, p: mix_run(model, policy_for(b), parts(rate, workload), p,
                                         label=f"max_num_batched_tokens={b}, {workload}", refresh=refresh, peek=peek),
                    progress, describe=lambda b: f"budget {b} tokens")


def simulated_runs(step_model, rate: float, budgets=BUDGETS, workload: str = CLAIM_WORKLOAD):
    """budget_runs on the simulator (the same scheduler and requests, step times from `step_model`)."""
    return [(int(b), simulated_mix_run(step_model, policy_for(b), parts(rate, workload),
                                       label=f"simulated max_num_batched_tokens={b}"), False) for b in budgets]


def estimate_s(model, rate: float, budgets=BUDGETS, workload: str = CLAIM_WORKLOAD) -> tuple[float, MachineSpeed]:
    return estimate(model, [(policy_for(b), parts(rate, workload)) for b in budgets])


def _ms(distribution: dict, q: str) -> float:
    value = distribution.get(q)
    return math.nan if value is None else float(value) * 1000


def longest_gaps(steps: pd.DataFrame) -> dict[str, float]:
    """Each request's longest gap between two of its tokens, in seconds, read off the steps table: a
    request's tokens come at the end of its last prefill step and of each decode step after it, so its
    gaps are the times between the ends of those steps. (The pooled ITL percentiles mix every gap of every
    stream; this is the worst pause each stream saw.)"""
    ends: dict[str, list[float]] = {}
    for t_end, members in zip(steps["t_end_s"], steps["members"]):
        for rid, phase, _tokens in members:
            if phase == "prefill":
                ends[rid] = [float(t_end)]      # its latest prefill step: the first token comes at its end
            elif rid in ends:
                ends[rid].append(float(t_end))
    return {rid: max(b - a for a, b in zip(t, t[1:])) for rid, t in ends.items() if len(t) > 1}


def run_row(budget: int, result) -> dict:
    """One run's numbers: TTFT, the gaps between tokens (the p95 over requests of each one's longest
    gap, and the pooled ITL percentiles), tokens per second of engine work (prompt and output tokens /
    seconds spent in steps), the most tokens any step carried, and how many prompts took more than one
    step."""
    s = result.summary
    _, steps = frames(result)
    busy = s["busy_s"]                     # seconds spent in steps (engine.core.metrics)
    work = float(s["prompt_tokens"]) + float(s["output_tokens"])
    carried = (steps["prefill_tokens"] + steps["decode_tokens"]) if len(steps) else pd.Series(dtype=float)
    chunked = 0
    if len(steps):
        prefill_steps: dict[str, int] = {}
        for members in steps["members"]:
            for rid, phase, _tokens in members:
                if phase == "prefill":
                    prefill_steps[rid] = prefill_steps.get(rid, 0) + 1
        chunked = sum(1 for n in prefill_steps.values() if n > 1)
    finished = {r["id"] for r in result.requests if r["status"] == "finished"}
    stalls = [g for rid, g in longest_gaps(steps).items() if rid in finished] if len(steps) else []
    return {"budget": int(budget), "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p95_s": s["ttft_s"]["p95"],
            "stall_p95_ms": percentile(stalls, 95) * 1000, "itl_p95_ms": _ms(s["itl_s"], "p95"),
            "itl_p99_ms": _ms(s["itl_s"], "p99"), "tpot_p95_ms": _ms(s["tpot_s"], "p95"),
            "work_tok_s": work / busy if busy > 0 else math.nan,
            "max_step_tokens": int(carried.max()) if len(carried) else 0, "chunked_prompts": chunked,
            "requests": int(s["requests"])}


def budget_table(runs) -> pd.DataFrame:
    """One row per budget, smallest first."""
    rows = [run_row(b, res) for b, res, _ in runs]
    return pd.DataFrame(rows, columns=["budget", *COLUMNS]).sort_values("budget").reset_index(drop=True)


def _moved(first: float, last: float) -> int:
    """+1, -1 or 0: how a number moved from the smallest budget to the largest (within CHANGE: 0)."""
    if not (first > 0 and math.isfinite(first) and math.isfinite(last)):
        return 0
    change = last / first - 1
    return 1 if change > CHANGE else -1 if change < -CHANGE else 0


def outcome(table: pd.DataFrame) -> str:
    """What going from the smallest budget to the largest did to p95 TTFT and to the p95 longest gap, as one
    of OUTCOMES."""
    first, last = table.iloc[0], table.iloc[-1]
    ttft, gap = _moved(first.ttft_p95_s, last.ttft_p95_s), _moved(first.stall_p95_ms, last.stall_p95_ms)
    return {(-1, 1): OUTCOMES[0], (0, 1): OUTCOMES[1], (-1, 0): OUTCOMES[2], (0, 0): OUTCOMES[3]}.get(
        (ttft, gap), OUTCOMES[4])


def numbers(table: pd.DataFrame) -> str:
    first, last = table.iloc[0], table.iloc[-1]
    return (f"From a budget of {int(first.budget):,} to {int(last.budget):,} tokens: p95 TTFT {first.ttft_p95_s:.2f} → "
            f"{last.ttft_p95_s:.2f} s (p50 {first.ttft_p50_s:.2f} → {last.ttft_p50_s:.2f}), the longest gap in a "
            f"stream (p95 over requests) {first.stall_p95_ms:.0f} → {last.stall_p95_ms:.0f} ms (pooled ITL p95 "
            f"{first.itl_p95_ms:.0f} → {last.itl_p95_ms:.0f}); "
            f"the largest step carried {int(first.max_step_tokens):,} → {int(last.max_step_tokens):,} tokens.")


def never_binds(table: pd.DataFrame) -> bool:
    """No step of the smallest budget's run carried as many tokens as that budget: it never bound, so
    every larger budget ran the same steps."""
    first = table.iloc[0]
    return first.max_step_tokens < first.budget


def budget_verdict(table: pd.DataFrame) -> claims.Verdict:
    """The claim `budget_trades_ttft_for_itl`: from the smallest budget to the largest, the p95 longest gap
    grows at least by the claim's threshold and p95 TTFT falls by TTFT_FALL or more."""
    cid = "budget_trades_ttft_for_itl"
    if len(table) < 2:
        return claims.judge(cid, math.nan, "", "", "a sweep needs at least two budgets.")
    first, last = table.iloc[0], table.iloc[-1]
    growth = claims.ratio(last.stall_p95_ms, first.stall_p95_ms)
    ttft_fell = last.ttft_p95_s <= (1 - TTFT_FALL) * first.ttft_p95_s
    said = numbers(table)
    if never_binds(table):
        why = (f" No step carried as many tokens as even the smallest budget ({int(first.budget):,}): the budget never "
               "bound, so every setting ran the same steps, and neither number had a reason to move.")
    elif growth < claims.CLAIMS[cid].threshold and ttft_fell:
        why = (" TTFT fell, but the worst gaps did not grow as much: the long prompts' steps were rare among all the "
               "gaps, or cost little more than a step of decodes alone.")
    elif not ttft_fell and last.ttft_p95_s > (1 + CHANGE) * first.ttft_p95_s:
        why = (f" TTFT even rose: each second of engine work made {first.work_tok_s:,.0f} → {last.work_tok_s:,.0f} "
               "tokens, so the larger budget's steps were no cheaper per token here, and near full load a little less "
               "speed (a long chunk's attention, or a busier machine) queues the prompts behind it longer.")
    elif not ttft_fell:
        why = (" The worst gaps grew with the budget, but TTFT did not fall: where a step's time grows with every token "
               "it carries, fewer, longer steps finish a prompt no sooner, so the budget only moved where the wait falls."
               if growth >= claims.CLAIMS[cid].threshold else
               " Neither number moved much: the long prompts' steps cost about what short steps did.")
    else:
        why = ""
    shown = (said + " A larger budget let each long prompt through in fewer, longer steps: its first token came "
             "sooner, and the streams decoding beside it waited longer between two tokens in those steps.")
    return claims.judge(cid, growth, shown, said + why, extra_test=bool(ttft_fell))


def flat_reading(table: pd.DataFrame) -> str:
    """The short-only workload's sweep in words: whether the budget bound at all, and how far each number moved."""
    if len(table) < 2:
        return "A sweep needs at least two budgets."
    first, last = table.iloc[0], table.iloc[-1]
    ttft = claims.ratio(last.ttft_p95_s, first.ttft_p95_s)
    stall = claims.ratio(last.stall_p95_ms, first.stall_p95_ms)
    bound = (f"no step carried as many tokens as the smallest budget ({int(first.max_step_tokens):,} at most, of "
             f"{int(first.budget):,}), so the budget never bound" if never_binds(table) else
             f"the largest step of the smallest budget's run carried {int(first.max_step_tokens):,} tokens, the whole budget, "
             "so the smallest budget did bind at times")
    return (f"Short prompts only: {bound}. From {int(first.budget):,} to {int(last.budget):,} tokens p95 TTFT moved ×{ttft:.2f} "
            f"and the longest gap in a stream ×{stall:.2f}.")


def advice(table: pd.DataFrame) -> dict[str, str]:
    """Where each serving goal would set the budget, from this sweep's numbers.

    chat: the lowest p95 TTFT among the budgets whose p95 longest gap is within CHAT_STALL_SLACK of the sweep's
    shortest
    (streams must stay smooth; then the first token as soon as that allows);
    batch: the most tokens per second of engine work (ties within TIE go to the smaller budget)."""
    if table.empty:
        return {}
    smooth_limit = CHAT_STALL_SLACK * table.stall_p95_ms.min()
    smooth = table[table.stall_p95_ms <= smooth_limit]
    chat = smooth.loc[smooth.ttft_p95_s.idxmin()]
    best = table.work_tok_s.max()
    batch = table[table.work_tok_s >= (1 - TIE) * best].iloc[0]
    out = {"chat": (f"**Interactive chat** (smooth streams first, then the first token soon): {int(chat.budget):,} tokens. "
                    f"Its longest gap in a stream (p95), {chat.stall_p95_ms:.0f} ms, is within {CHAT_STALL_SLACK:g}× of the "
                    f"sweep's shortest ({table.stall_p95_ms.min():.0f} ms), and among the budgets that are, its p95 "
                    f"TTFT is the lowest "
                    f"({chat.ttft_p95_s:.2f} s)."),
           "batch": (f"**Batch or throughput** (nobody watches the stream): {int(batch.budget):,} tokens, whose steps made "
                     f"{batch.work_tok_s:,.0f} tokens (prompt and output) per second of engine work"
                     + (" , the most of the sweep." if batch.work_tok_s >= best else
                        f", within {TIE:.0%} of the most ({best:,.0f}), and the smaller budget.").replace(" ,", ","))}
    if chat.budget == batch.budget:
        out["both"] = f"Here both goals land on the same budget, {int(chat.budget):,} tokens."
    return out


# ----------------------------------------------------------------------------- figures


def _trace(table, x, y, name, color, dash=None, markers=True, text=True):
    return go.Scatter(name=name, x=table[x], y=table[y], mode=("lines+markers" if markers else "lines")
                      + ("+text" if text else ""),
                      text=[f"{b:,}" for b in table["budget"]] if text else None, textposition="top right",
                      line=dict(color=color, width=2.5 if markers else 2, dash=dash), marker=dict(size=9),
                      cliponaxis=False,
                      customdata=table["budget"],
                      hovertemplate="budget %{customdata:,}: %{y:.2f} at %{x:.0f} ms<extra>" + name + "</extra>")


def trade_off(table: pd.DataFrame | None, sim: pd.DataFrame | None = None, sim_name: str = "simulated") -> go.Figure:
    """The trade-off curve: p95 and p50 TTFT against the p95 longest gap in a stream, one point per budget."""
    texts = ("The budget's trade-off: the first token against the longest pause",
             "One point per max_num_batched_tokens (labelled). Good: low and to the left; no budget is both. "
             + ("" if is_empty(sim) else f"Dotted: {sim_name}."),
             "longest gap between two tokens in a stream, p95 over requests (ms)", "TTFT (s)")
    if is_empty(table) and is_empty(sim):
        return go.Figure(empty_figure(*texts))
    traces = []
    if not is_empty(sim):
        traces += [_trace(sim, "stall_p95_ms", "ttft_p95_s", "p95 TTFT, simulated", COLORS["p95"], "dot", False,
                          is_empty(table)),
                   _trace(sim, "stall_p95_ms", "ttft_p50_s", "p50 TTFT, simulated", COLORS["running"], "dot", False,
                          False)]
    if not is_empty(table):
        traces += [_trace(table, "stall_p95_ms", "ttft_p95_s", "p95 TTFT, measured", COLORS["p95"]),
                   _trace(table, "stall_p95_ms", "ttft_p50_s", "p50 TTFT, measured", COLORS["running"], text=False)]
    return go.Figure(data=traces, layout=layout(*texts, xaxis=dict(rangemode="tozero"),
                                                yaxis=dict(rangemode="tozero")))


def by_budget(table: pd.DataFrame | None, sim: pd.DataFrame | None = None, sim_name: str = "simulated") -> go.Figure:
    """The gaps between tokens (left axis, ms: the p95 longest gap in a stream, and the pooled ITL p95 and
    TPOT p95) and p95 TTFT (right axis, s) against the budget (log axis)."""
    texts = ("Gaps between tokens and TTFT, budget by budget",
             "Left axis: the longest gap in a stream (p95 over requests), ITL p95 over all gaps, TPOT p95. Right "
             "axis: p95 TTFT. A small budget caps how long one step can be; a large one lets a prompt through in "
             "fewer steps." + ("" if is_empty(sim) else f" Dotted: {sim_name}."),
             "max_num_batched_tokens (tokens a step may carry)", "ms")
    if is_empty(table) and is_empty(sim):
        return go.Figure(empty_figure(*texts))
    lines = (("stall_p95_ms", "longest gap (p95)", COLORS["p95"], "ms"), ("itl_p95_ms", "ITL p95", COLORS["p50"], "ms"),
             ("tpot_p95_ms", "TPOT p95", COLORS["goodput"], "ms"), ("ttft_p95_s", "p95 TTFT", COLORS["kv"], "s"))
    traces = []
    for t, measured in ((sim, False), (table, True)):
        if is_empty(t):
            continue
        suffix, dash, mode = ("measured", None, "lines+markers") if measured else ("simulated", "dot", "lines")
        for column, name, color, unit in lines:
            traces.append(go.Scatter(name=f"{name}, {suffix}", x=t["budget"], y=t[column], mode=mode,
                                     yaxis="y2" if unit == "s" else "y", line=dict(color=color, dash=dash),
                                     hovertemplate="budget %{x:,}: %{y:.2f} " + unit + "<extra></extra>"))
    return go.Figure(data=traces, layout=layout(
        *texts, xaxis=dict(type="log", tickvals=CHOICES, ticktext=[f"{c:,}" for c in CHOICES]),
        yaxis=dict(rangemode="tozero"),
        yaxis2=dict(title=dict(text="p95 TTFT (s)"), overlaying="y", side="right", rangemode="tozero", showgrid=False),
        margin=dict(l=60, r=60, t=80, b=50)))
