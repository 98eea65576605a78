"""What continuous batching costs: a long prompt landing among running decodes (chunked prefill
off and on, under either step priority), and a KV cache too small for the batch (preemptions)."""
from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished
from analysis.style import PAIR_COLORS, empty_figure, is_empty, vline, wrapped_layout
from engine.config import SchedulerPolicy
from engine.metrics import percentile
from engine.results import RunResult
from engine.workload import WorkloadSpec
from labs.part import Part
from labs.runs import estimate, frames, mix_run, run_each, simulated_mix_run, simulated_run, single_run

# ----------------------------------------------------------------------------- 1. a long prompt stalls decodes

DECODE_STREAMS = 8
DECODE_PROMPT, DECODE_OUTPUT = 64, 112
LONG_PROMPT = 1024
LONG_ARRIVALS_S = (1.0, 2.5)
BUDGET = 256
STEP_PRIORITY = SchedulerPolicy().step_priority   # decode_first, as in vLLM v1
CHUNKING = (("off", False), ("on", True))
SYMBOLS = ("x", "circle")     # marker shapes of the runs in token_gaps: off = ×, on = ●


def stall_parts(long_prompt: int = LONG_PROMPT, seed: int = 0) -> list[Part]:
    """Decodes running from t=0, then long prompts arriving into them."""
    decodes = Part(WorkloadSpec(num_requests=DECODE_STREAMS, rate=0, seed=seed, id_prefix="d",
                                prompt_kind="fixed", prompt_lo=DECODE_PROMPT, prompt_hi=DECODE_PROMPT,
                                output_kind="fixed", output_lo=DECODE_OUTPUT, output_hi=DECODE_OUTPUT))
    longs = [Part(WorkloadSpec(num_requests=1, rate=0, seed=seed + 1 + i, start_s=t, id_prefix=f"long{i}-",
                               prompt_kind="fixed", prompt_lo=long_prompt, prompt_hi=long_prompt,
                               output_kind="fixed", output_lo=16, output_hi=16))
             for i, t in enumerate(LONG_ARRIVALS_S)]
    return [decodes, *longs]


def stall_policy(chunked: bool, budget: int = BUDGET, long_prompt: int = LONG_PROMPT,
                 step_priority: str = STEP_PRIORITY) -> SchedulerPolicy:
    """Chunked prefill on: prompts are cut to fit the token budget. Off: a prompt must fit one
    step whole (as in vLLM, the budget then has to hold the longest prompt), so the budget is
    raised to the long prompt plus the running decodes. `step_priority` says whether running
    decodes (decode_first) or waiting prompts (prefill_first) fill each step's budget first."""
    if not chunked:
        budget = max(budget, long_prompt + 16)
    return SchedulerPolicy(max_num_seqs=16, enable_chunked_prefill=chunked, max_num_batched_tokens=budget,
                           step_priority=step_priority)


def stall_runs(model, long_prompt: int = LONG_PROMPT, budget: int = BUDGET, step_priority: str = STEP_PRIORITY,
               progress=None, refresh: bool = False, peek: bool = False) -> dict | None:
    """{"off": (RunResult, was_cached), "on": ...} for chunked prefill off and on.

    Cached per setting: the step priority is part of the policy, so each one has its own runs."""
    def run_one(chunking, sub):
        key, chunked = chunking
        return mix_run(model, stall_policy(chunked, budget, long_prompt, step_priority), stall_parts(long_prompt),
                       sub, label=f"chunked {key}", refresh=refresh, peek=peek)

    runs = run_each(CHUNKING, run_one, progress, describe=lambda c: f"chunked prefill {c[0]}")
    return None if runs is None else {key: (res, hit) for (key, _), res, hit in runs}


def simulated_stall_runs(step_model, long_prompt: int = LONG_PROMPT, budget: int = BUDGET,
                         step_priority: str = STEP_PRIORITY) -> dict:
    """stall_runs on the simulator: {"off": (RunResult, False), "on": ...}, in milliseconds."""
    return {key: (simulated_mix_run(step_model, stall_policy(chunked, budget, long_prompt, step_priority),
                                    stall_parts(long_prompt), label=f"chunked {key}, simulated"), False)
            for key, chunked in CHUNKING}


def stall_estimate_s(model, long_prompt: int = LONG_PROMPT, budget: int = BUDGET,
                     step_priority: str = STEP_PRIORITY) -> tuple[float, bool]:
    """(seconds, calibrated?) the two stall runs take on this machine."""
    return estimate(model, [(stall_policy(chunked, budget, long_prompt, step_priority), stall_parts(long_prompt))
                            for _, chunked in CHUNKING])


def token_times(result: RunResult) -> pd.DataFrame:
    """Every output token's time: one row per (request, token) with the gap since its previous token.

    Rebuilt from the step records: a request's first token comes at its first_token_s, and each
    later token at the end of a step where it ran as a decode.
    """
    reqs, steps = frames(result)
    first = dict(zip(reqs["id"], pd.to_numeric(reqs["first_token_s"], errors="coerce")))
    times: dict[str, list[float]] = {rid: [t] for rid, t in first.items() if not pd.isna(t)}
    for members, t_end in zip(steps.get("members", []), steps.get("t_end_s", [])):
        for rid, phase, _ in members:
            if phase == "decode" and rid in times:
                times[rid].append(float(t_end))
    rows = []
    for rid, ts in times.items():
        ts.sort()
        for k, t in enumerate(ts):
            rows.append((rid, k, t, (t - ts[k - 1]) * 1000 if k else math.nan))
    return pd.DataFrame(rows, columns=["id", "token", "t_s", "gap_ms"])


def decode_token_times(result: RunResult) -> pd.DataFrame:
    """token_times of the requests decoding from t = 0 (ids "d…"), t_s counted from the first arrival."""
    tt = token_times(result)
    dec = tt[tt["id"].str.startswith("d")]
    start = min((float(r["arrival_s"]) for r in result.requests), default=0.0)
    return dec.assign(t_s=dec["t_s"] - start)


def stall_summary(result: RunResult) -> dict:
    """The decodes' inter-token gaps and the long prompts' TTFT in one run."""
    reqs, _ = frames(result)
    dec = decode_token_times(result)
    gaps = dec["gap_ms"].dropna().tolist()
    longs = reqs[reqs["id"].str.startswith("long")]
    return {
        "decode_gap_max_ms": float(dec["gap_ms"].max()),
        "decode_gap_p50_ms": percentile(gaps, 50),
        "decode_gap_p99_ms": percentile(gaps, 99),
        "long_ttft_mean_s": float(pd.to_numeric(longs["ttft_s"]).mean()),
        "output_tok_s": result.summary["output_throughput_tok_s"],
    }


def token_gaps(series: dict[str, pd.DataFrame], arrivals: list[float] | None = None) -> go.Figure:
    """Inter-token gaps of the running decodes over time, one colour per run, long-prompt arrivals marked.

    series: {run name: DataFrame with t_s and gap_ms}, e.g. {"chunked prefill off": ..., "on": ...}.
    """
    # title, what good looks like, x and y axis
    texts = ("Inter-token gaps of the running decodes",
             "Each dot is one token of a request that was already decoding. Good: a flat band with no "
             "tall spikes; a spike is every running stream frozen while a long prompt prefills.",
             "time since the first arrival (s)", "gap since the previous token (ms)")
    traces = []
    for i, (name, df) in enumerate(series.items()):
        if is_empty(df):
            continue
        df = df.dropna(subset=["gap_ms"])
        color = PAIR_COLORS[i] if len(series) == 2 else None
        symbol = SYMBOLS[i % len(SYMBOLS)]       # told apart by shape too, not by colour alone
        traces.append(go.Scattergl(name=name, x=df["t_s"], y=df["gap_ms"], mode="markers",
                                   marker=dict(size=6, opacity=0.6, color=color, symbol=symbol),
                                   text=df["id"],
                                   hovertemplate="%{text}: %{y:.0f} ms gap at %{x:.2f} s<extra></extra>"))
    if not traces:
        return go.Figure(empty_figure(*texts))
    marks = [vline(t, "long prompt arrives" if k == 0 else "", color="#7f7f7f", dash="dot")
             for k, t in enumerate(arrivals or [])]
    return go.Figure(data=traces, layout=wrapped_layout(*texts, shapes=[s for s, _ in marks],
                                                        annotations=[n for _, n in marks],
                                                        yaxis=dict(rangemode="tozero")))


# ----------------------------------------------------------------------------- 2. a KV cache too small

KV_SPEC = WorkloadSpec(num_requests=24, rate=0, prompt_kind="uniform", prompt_lo=64, prompt_hi=128,
                       output_kind="uniform", output_lo=64, output_hi=128)
KV_SLOTS = 16
KV_DEFAULT = 4096
KV_MIN = 256   # one request's prompt + output must fit: 128 + 128


def kv_run(model, kv_capacity: int, progress=None, refresh: bool = False, peek: bool = False):
    policy = SchedulerPolicy(max_num_seqs=KV_SLOTS, kv_capacity_tokens=int(kv_capacity))
    return single_run(model, policy, KV_SPEC, progress, label=f"KV {kv_capacity} tokens",
                      refresh=refresh, peek=peek)


def simulated_kv_run(step_model, kv_capacity: int):
    """kv_run on the simulator: (RunResult, False). Every request arrives at once, so the simulated
    scheduler makes the very same preemptions as the real one; only the times are predicted."""
    policy = SchedulerPolicy(max_num_seqs=KV_SLOTS, kv_capacity_tokens=int(kv_capacity))
    return simulated_run(step_model, policy, KV_SPEC, label=f"KV {kv_capacity} tokens, simulated"), False


def kv_estimate_s(model, kv_capacity: int) -> tuple[float, bool]:
    return estimate(model, [(SchedulerPolicy(max_num_seqs=KV_SLOTS, kv_capacity_tokens=int(kv_capacity)),
                             [Part(KV_SPEC)])])


def kv_summary(result: RunResult) -> dict:
    reqs, steps = frames(result)
    fin = finished(reqs)
    used = pd.to_numeric(steps["kv_used_blocks"]) / pd.to_numeric(steps["kv_total_blocks"])
    pre = pd.to_numeric(fin["preemptions"])
    e2e = pd.to_numeric(fin["e2e_s"])
    return {
        "preemptions": int(result.summary["preemptions"]),
        "preempted_requests": int((pre > 0).sum()),
        "kv_peak_pct": float(used.max() * 100),
        "output_tok_s": result.summary["output_throughput_tok_s"],
        "e2e_preempted_s": float(e2e[pre > 0].mean()) if (pre > 0).any() else math.nan,
        "e2e_others_s": float(e2e[pre == 0].mean()) if (pre == 0).any() else math.nan,
        "recomputed_tokens": int(pd.to_numeric(steps["prefill_tokens"]).sum()
                                 - pd.to_numeric(reqs["prompt_tokens"]).sum()),
    }
