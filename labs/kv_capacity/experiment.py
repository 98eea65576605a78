"""KV capacity: how big the KV pool is, what it does to the running batch, and what prefix caching
finds in it. No Streamlit here.

1. The arithmetic: bytes per token from a model's config, and the pool a GPU holds once the weights
   are in (engine.sim.kv_sizing), for the bundled model and named GPU profiles.
2. A sweep of this engine's KV pool (kv_capacity_tokens) on one burst of requests: how many run at
   once, how full the pool is, how many are preempted.
3. Prefix caching off and on, on a workload whose prompts share a system prompt, and on one whose
   prompts share nothing (the counter-case): hit rate and TTFT.
"""
from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished
from analysis.style import COLORS, REQUEST_COLORS, empty_figure, is_empty, layout
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.metrics import percentile
from engine.runs.results import RunResult
from engine.runs.workload import WorkloadSpec
from engine.sim import kv_sizing
from engine.sim.roofline import DEVICES
from course import claims
from engine.sim.machine_speed import MachineSpeed
from labs.runs import estimate, frames, run_each, simulated_run, single_run

# ----------------------------------------------------------------------------- 1. the arithmetic

H100 = DEVICES["h100-sxm"]
# (model, GPUs): the bundled model, an 8B model on one H100, a 70B model on one, two and four.
PROFILES = (("smollm2-135m", 1), ("llama-3.1-8b", 1), ("llama-3.1-70b", 1), ("llama-3.1-70b", 2),
            ("llama-3.1-70b", 4))
UTILIZATION = 0.9            # vLLM's gpu_memory_utilization default for most releases (0.92 in its newest code)
MAX_MODEL_LEN = 8192


def bundled_shape():
    """The bundled SmolLM2-135M's shape, read from the config.json of the copy the engine loads."""
    from engine.model.model import smollm2_dir
    return kv_sizing.shape_from_file(smollm2_dir() / "config.json", "SmolLM2-135M (bundled)")


def bundled_bytes_per_token(dtype_bytes: int) -> dict:
    """SmolLM2's KV bytes a token from its own config, in `dtype_bytes`: the sum spelled out."""
    s = bundled_shape()
    return {"layers": s.layers, "kv_heads": s.kv_heads, "heads": s.heads, "head_dim": s.head_dim,
            "dtype_bytes": dtype_bytes, "bytes": 2 * s.layers * s.kv_heads * s.head_dim * dtype_bytes,
            "bytes_without_gqa": 2 * s.layers * s.heads * s.head_dim * dtype_bytes, "source": s.source}


def profile_table(utilization: float = UTILIZATION, max_model_len: int = MAX_MODEL_LEN) -> pd.DataFrame:
    """One row per PROFILES entry on H100s: bytes a token (and without GQA), weights, the pool and the
    concurrency vLLM would log, or that it would not start."""
    rows = []
    for key, gpus in PROFILES:
        shape = kv_sizing.SHAPES[key]
        p = kv_sizing.kv_pool(shape, H100, utilization, max_model_len, gpus)
        no_gqa = kv_sizing.kv_bytes_per_token(shape.layers, shape.heads, shape.head_dim, p.dtype_bytes)
        rows.append({"model": shape.name, "GPUs": f"{gpus} × {H100.name}",
                     "KV bytes a token (all GPUs)": p.kv_bytes_per_token * min(gpus, shape.kv_heads),
                     "without GQA": no_gqa, "weights per GPU (GB)": p.weights_gb,
                     "usable per GPU (GB)": p.usable_gb, "left for KV per GPU (GB)": p.kv_gb,
                     "GPU KV cache size (tokens)": p.tokens,
                     f"concurrency at {max_model_len:,} tokens": p.concurrency, "starts": p.fits})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- 2. the pool sweep

SLOTS = 16                    # max_num_seqs: the batch the pool is asked to hold
SWEEP_SPEC = WorkloadSpec(num_requests=20, rate=0, seed=3, prompt_kind="uniform", prompt_lo=64, prompt_hi=96,
                          output_kind="uniform", output_lo=32, output_hi=64)
LONGEST = SWEEP_SPEC.prompt_len.hi + SWEEP_SPEC.output_len.hi     # this workload's "max_model_len"
NEED = SLOTS * LONGEST        # every slot at its longest
POOLS = (512, 1024, 2048, 3072)
SMALL_POOL, ROOMY_POOL = 1024, 3072


def pool_policy(pool: int, prefix_caching: bool = False) -> SchedulerPolicy:
    return SchedulerPolicy(max_num_seqs=SLOTS, kv_capacity_tokens=int(pool), enable_prefix_caching=prefix_caching)


def pool_runs(model, pools=POOLS, progress=None, refresh: bool = False, peek: bool = False) -> dict | None:
    """{pool: (RunResult, was_cached)} on the real engine, or None when peeking finds one missing."""
    runs = run_each(pools, lambda pool, sub: single_run(model, pool_policy(pool), SWEEP_SPEC, sub,
                                                        label=f"KV pool {pool} tokens", refresh=refresh, peek=peek),
                    progress, describe=lambda pool: f"KV pool {pool:,} tokens")
    return None if runs is None else {pool: (res, hit) for pool, res, hit in runs}


def simulated_pool_runs(step_model, pools=POOLS) -> dict:
    """pool_runs on the simulator. Every request arrives at once, so its scheduler admits and preempts
    exactly as the real one does; only the times are predicted."""
    return {pool: (simulated_run(step_model, pool_policy(pool), SWEEP_SPEC, label=f"KV pool {pool}, simulated"),
                   False) for pool in pools}


def pool_estimate_s(model, pools=POOLS) -> tuple[float, MachineSpeed]:
    from labs.part import Part
    return estimate(model, [(pool_policy(pool), [Part(SWEEP_SPEC)]) for pool in pools])


def pool_summary(result: RunResult, pool: int) -> dict:
    """What the pool did to one run: requests running at once (all steps, and the steps where some
    waited), the pool's use, preemptions and the prompt tokens computed again."""
    reqs, steps = frames(result)
    running = pd.to_numeric(steps["running"])
    waited = running[pd.to_numeric(steps["waiting"]) > 0]
    used = pd.to_numeric(steps["kv_used_blocks"]) / pd.to_numeric(steps["kv_total_blocks"])
    fin = finished(reqs)
    return {
        "pool": pool,
        "concurrency_at_longest": pool / LONGEST,
        "peak_running": int(running.max()),
        "mean_running_while_waiting": float(waited.mean()) if len(waited) else math.nan,
        "kv_peak_pct": float(used.max() * 100),
        "kv_mean_pct": float(used.mean() * 100),
        "preemptions": int(result.summary["preemptions"]),
        "recomputed_tokens": int(pd.to_numeric(steps["prefill_tokens"]).sum()
                                 - pd.to_numeric(reqs["prompt_tokens"]).sum()),
        "output_tok_s": float(result.summary["output_throughput_tok_s"]),
        "e2e_p50_s": percentile(pd.to_numeric(fin["e2e_s"]).tolist(), 50),
        "duration_s": float(result.summary["duration_s"]),
    }


def pool_table(runs: dict) -> pd.DataFrame:
    return pd.DataFrame([pool_summary(res, pool) for pool, (res, _) in sorted(runs.items())])


def caps_verdict(row: dict) -> claims.Verdict:
    """The claim `kv_pool_caps_batch` on one pool's pool_summary."""
    share = claims.ratio(row["mean_running_while_waiting"], SLOTS)
    numbers = (f"With a pool of {row['pool']:,} tokens ({row['pool'] / NEED:.0%} of the {NEED:,} that {SLOTS} requests "
               f"need at their longest), while requests waited an average of {row['mean_running_while_waiting']:.1f} "
               f"ran at once of the {SLOTS} max_num_seqs allows ({share:.0%}); the pool peaked at "
               f"{row['kv_peak_pct']:.0f}% and {row['preemptions']} preemptions redid {row['recomputed_tokens']:,} "
               "prompt tokens.")
    if not math.isfinite(share):
        return claims.judge("kv_pool_caps_batch", share, "", "", "No request ever waited in this run, so nothing "
                            "tells what held the batch back.")
    return claims.judge("kv_pool_caps_batch", share,
                        numbers + " The pool, not max_num_seqs, set the batch: a request is admitted only when its "
                        "prompt's blocks are free, and a running one is preempted when its next token has no block.",
                        numbers + " The pool held the batch max_num_seqs allows, so the slot limit set it, not the "
                        "pool.")


def usage_over_time(runs: dict) -> go.Figure:
    """The pool's use (% of its blocks, as vllm:kv_cache_usage_perc reports it) over each run, one line per pool."""
    texts = ("KV pool usage over each run",
             "The share of the pool's blocks in use at each step, what /metrics exports as vllm:kv_cache_usage_perc. "
             "A pool pinned near 100% while requests wait is the pool limiting the batch.",
             "time since the burst arrived (s)", "KV blocks in use (%)")
    traces = []
    for i, (pool, (res, _)) in enumerate(sorted(runs.items())):
        _, steps = frames(res)
        if is_empty(steps):
            continue
        pct = pd.to_numeric(steps["kv_used_blocks"]) / pd.to_numeric(steps["kv_total_blocks"]) * 100
        traces.append(go.Scatter(name=f"pool {pool:,}", x=pd.to_numeric(steps["t_end_s"]), y=pct, mode="lines",
                                 line=dict(color=REQUEST_COLORS[i % len(REQUEST_COLORS)], width=2),
                                 hovertemplate=f"pool {pool:,}: " + "%{y:.0f}% at %{x:.2f} s<extra></extra>"))
    if not traces:
        return go.Figure(empty_figure(*texts))
    return go.Figure(data=traces, layout=layout(*texts, yaxis=dict(range=[0, 105])))


def running_over_time(runs: dict) -> go.Figure:
    """Requests running (holding a slot) and preemptions so far, over each run."""
    texts = ("Requests running, and preemptions so far",
             f"Solid: requests running at each step (max_num_seqs is {SLOTS}). Dotted: preemptions so far, what "
             "/metrics counts as vllm:num_preemptions_total. Good: the solid line at the slot limit and the dotted "
             "one flat at 0.",
             "time since the burst arrived (s)", "requests")
    traces = []
    for i, (pool, (res, _)) in enumerate(sorted(runs.items())):
        _, steps = frames(res)
        if is_empty(steps):
            continue
        t = pd.to_numeric(steps["t_end_s"])
        color = REQUEST_COLORS[i % len(REQUEST_COLORS)]
        preempted = pd.to_numeric(steps["preempted"]).cumsum()     # each step records how many it preempted
        traces.append(go.Scatter(name=f"running, pool {pool:,}", x=t, y=pd.to_numeric(steps["running"]),
                                 mode="lines", line=dict(color=color, width=2, shape="hv"), legendgroup=str(pool)))
        traces.append(go.Scatter(name=f"preemptions, pool {pool:,}", x=t, y=preempted, mode="lines",
                                 line=dict(color=color, width=2, dash="dot", shape="hv"), legendgroup=str(pool)))
    if not traces:
        return go.Figure(empty_figure(*texts))
    return go.Figure(data=traces, layout=layout(*texts))


# ----------------------------------------------------------------------------- 3. prefix caching

SYSTEM_PROMPT = 512           # tokens every prompt of the shared workload starts with
PREFIX_SPEC = WorkloadSpec(num_requests=12, rate=0.25, seed=5, prompt_kind="uniform", prompt_lo=16, prompt_hi=48,
                           output_kind="uniform", output_lo=8, output_hi=16, system_prompts=1,
                           system_prompt_tokens=SYSTEM_PROMPT)
PREFIX_RATE = 0.25            # arrivals a second: a prompt is prefilled well within 4 s here, so few wait
WORKLOADS = ("shared", "distinct")
CACHING = (("off", False), ("on", True))


def prefix_spec(workload: str, rate: float) -> WorkloadSpec:
    """"shared": every prompt starts with the same SYSTEM_PROMPT tokens. "distinct": prompts of the same
    lengths that share nothing, the counter-case."""
    if workload == "shared":
        return replace(PREFIX_SPEC, rate=rate)
    if workload == "distinct":
        lo, hi = PREFIX_SPEC.prompt_len.lo + SYSTEM_PROMPT, PREFIX_SPEC.prompt_len.hi + SYSTEM_PROMPT
        return replace(PREFIX_SPEC, rate=rate, system_prompts=0, prompt_lo=lo, prompt_hi=hi)
    raise ValueError(f"workload must be one of {', '.join(WORKLOADS)} (got {workload!r})")


def prefix_policy(caching: bool) -> SchedulerPolicy:
    return SchedulerPolicy(enable_prefix_caching=caching)


def prefix_runs(model, workload: str, rate: float = PREFIX_RATE, progress=None, refresh: bool = False,
                peek: bool = False) -> dict | None:
    """{"off": (RunResult, was_cached), "on": ...} for prefix caching off and on, on the real engine."""
    spec = prefix_spec(workload, rate)
    runs = run_each(CACHING, lambda c, sub: single_run(model, prefix_policy(c[1]), spec, sub,
                                                       label=f"prefix caching {c[0]}", refresh=refresh, peek=peek),
                    progress, describe=lambda c: f"prefix caching {c[0]}")
    return None if runs is None else {key: (res, hit) for (key, _), res, hit in runs}


def simulated_prefix_runs(step_model, workload: str, rate: float = PREFIX_RATE) -> dict:
    spec = prefix_spec(workload, rate)
    return {key: (simulated_run(step_model, prefix_policy(on), spec, label=f"prefix caching {key}, simulated"), False)
            for key, on in CACHING}


def prefix_estimate_s(model, workload: str, rate: float = PREFIX_RATE) -> tuple[float, MachineSpeed]:
    from labs.part import Part
    return estimate(model, [(prefix_policy(on), [Part(prefix_spec(workload, rate))]) for _, on in CACHING])


def prefix_summary(result: RunResult) -> dict:
    reqs, steps = frames(result)
    fin = finished(reqs)
    ttft = pd.to_numeric(fin["ttft_s"]).tolist()
    s = result.summary
    return {"hit_rate": float(s.get("prefix_cache_hit_rate") or 0.0) if s.get("prefix_cache_queries") else 0.0,
            "queries": int(s.get("prefix_cache_queries") or 0), "hits": int(s.get("prefix_cache_hits") or 0),
            "ttft_p50_s": percentile(ttft, 50), "ttft_p95_s": percentile(ttft, 95),
            "prefill_tokens": int(pd.to_numeric(steps["prefill_tokens"]).sum()),
            "prompt_tokens": int(pd.to_numeric(reqs["prompt_tokens"]).sum()), "finished": len(fin)}


def prefix_verdict(off: dict, on: dict, workload: str) -> claims.Verdict:
    """The claim `prefix_cache_cuts_ttft` on one pair of runs (prefix_summary off and on)."""
    ratio = claims.ratio(off["ttft_p50_s"], on["ttft_p50_s"])
    numbers = (f"With prefix caching on, {on['hit_rate']:.0%} of the prompt tokens looked up were found in the cache "
               f"and the engine prefilled {on['prefill_tokens']:,} tokens instead of {off['prefill_tokens']:,}; median "
               f"TTFT went from {off['ttft_p50_s'] * 1000:,.0f} ms (off) to {on['ttft_p50_s'] * 1000:,.0f} ms (on), "
               + (f"{ratio:.2f} times shorter." if ratio >= 1 else f"{1 / ratio:.2f} times longer (this machine's "
                  "noise: the same work ran in both)." if ratio > 0 else "no median to compare."))
    shared = workload == "shared"
    if claims.CLAIMS["prefix_cache_cuts_ttft"].passes(ratio):
        no = " The prompts shared too little here for the cache to help."
    elif on["hit_rate"] < 0.05:
        no = (" Almost nothing was found: these prompts share no more than a block or two of tokens, so nearly "
              "every token was computed as with caching off." if not shared else
              " The cache found almost nothing to reuse.")
    else:
        no = " Tokens were found, but the prompt's work is too small a part of the first token's time for it to show."
    return claims.judge("prefix_cache_cuts_ttft", ratio,
                        numbers + " A prompt that starts with tokens already in the cache has only its own tail to "
                        "compute before its first token.",
                        numbers + no, extra_test=on["hit_rate"] >= 0.3)


def ttft_bars(summaries: dict) -> go.Figure:
    """Median and p95 TTFT with caching off and on: {"off": prefix_summary, "on": ...}."""
    texts = ("TTFT with prefix caching off and on", "Median and p95 time to first token. Good: a shorter bar with "
             "caching on, where prompts share a prefix.", "prefix caching", "TTFT (ms)")
    if not summaries:
        return go.Figure(empty_figure(*texts))
    keys = list(summaries)
    traces = [go.Bar(name=name, x=[f"caching {k}" for k in keys], y=[summaries[k][col] * 1000 for k in keys],
                     marker_color=COLORS[name], text=[f"{summaries[k][col] * 1000:,.0f}" for k in keys],
                     textposition="outside")
              for i, (name, col) in enumerate((("p50", "ttft_p50_s"), ("p95", "ttft_p95_s")))]
    return go.Figure(data=traces, layout=layout(*texts, barmode="group"))


def engine_pool_default() -> int:
    """This engine's own start-up pool (EngineConfig.kv_pool_tokens), for the page's comparison."""
    return EngineConfig().kv_pool_tokens
