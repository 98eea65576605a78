"""What continuous batching costs: a long prompt landing among running decodes (chunked prefill
off and on, under either step priority), a KV cache too small for the batch (preemptions), and the
scheduler's own work on every step against the step it decides."""
from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished
from analysis.style import PAIR_COLORS, empty_figure, is_empty, layout, room_above, vline
from course import claims
from engine.core.config import SchedulerPolicy
from engine.core.metrics import percentile
from engine.runs.results import RunResult
from engine.runs.workload import WorkloadSpec
from engine.sim.step_times import TIMED_BUDGET, time_scheduling
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import estimate, frames, mix_run, run_each, simulated_mix_run, simulated_run, single_run

# ----------------------------------------------------------------------------- 1. a long prompt stalls decodes

DECODE_STREAMS = 8
DECODE_PROMPT, DECODE_OUTPUT = 64, 112
LONG_PROMPT = 1024
ARRIVAL_SHARES = (0.25, 0.6)   # long prompts arrive at these shares of the decodes' predicted run
BUDGET = 256
STEP_PRIORITY = SchedulerPolicy().step_priority   # decode_first, as in vLLM v1
CHUNKING = (("off", False), ("on", True))
SYMBOLS = ("x", "circle")     # marker shapes of the runs in token_gaps: off = ×, on = ●


def long_arrivals(step_model) -> tuple[float, ...]:
    """When the long prompts arrive (s): ARRIVAL_SHARES of how long the running decodes take on this
    machine, as its step model predicts, so they land among running decodes on any machine."""
    context = DECODE_PROMPT + DECODE_OUTPUT // 2
    decode_s = DECODE_OUTPUT * step_model.decode_ms(DECODE_STREAMS, context) / 1000
    return tuple(round(share * decode_s, 3) for share in ARRIVAL_SHARES)


def stall_parts(long_prompt: int = LONG_PROMPT, arrivals=(1.0, 2.5), seed: int = 0) -> list[Part]:
    """Decodes running from t=0, then long prompts arriving into them at `arrivals` (s)."""
    decodes = Part(WorkloadSpec(num_requests=DECODE_STREAMS, rate=0, seed=seed, id_prefix="d",
                                prompt_kind="fixed", prompt_lo=DECODE_PROMPT, prompt_hi=DECODE_PROMPT,
                                output_kind="fixed", output_lo=DECODE_OUTPUT, output_hi=DECODE_OUTPUT))
    longs = [Part(WorkloadSpec(num_requests=1, rate=0, seed=seed + 1 + i, start_s=t, id_prefix=f"long{i}-",
                               prompt_kind="fixed", prompt_lo=long_prompt, prompt_hi=long_prompt,
                               output_kind="fixed", output_lo=16, output_hi=16))
             for i, t in enumerate(arrivals)]
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


def stall_runs(model, arrivals, long_prompt: int = LONG_PROMPT, budget: int = BUDGET,
               step_priority: str = STEP_PRIORITY, progress=None, refresh: bool = False,
               peek: bool = False) -> dict | None:
    """{"off": (RunResult, was_cached), "on": ...} for chunked prefill off and on.

    Cached per setting: the step priority is part of the policy, so each one has its own runs."""
    def run_one(chunking, sub):
        key, chunked = chunking
        return mix_run(model, stall_policy(chunked, budget, long_prompt, step_priority),
                       stall_parts(long_prompt, arrivals),
                       sub, label=f"chunked {key}", refresh=refresh, peek=peek)

    runs = run_each(CHUNKING, run_one, progress, describe=lambda c: f"chunked prefill {c[0]}")
    return None if runs is None else {key: (res, hit) for (key, _), res, hit in runs}


def simulated_stall_runs(step_model, long_prompt: int = LONG_PROMPT, budget: int = BUDGET,
                         step_priority: str = STEP_PRIORITY, arrivals=None) -> dict:
    """stall_runs on the simulator: {"off": (RunResult, False), "on": ...}, in milliseconds. The long
    prompts arrive at `arrivals`, by default long_arrivals(step_model)."""
    arrivals = long_arrivals(step_model) if arrivals is None else arrivals
    return {key: (simulated_mix_run(step_model, stall_policy(chunked, budget, long_prompt, step_priority),
                                    stall_parts(long_prompt, arrivals), label=f"chunked {key}, simulated"), False)
            for key, chunked in CHUNKING}


def stall_estimate_s(model, arrivals, long_prompt: int = LONG_PROMPT, budget: int = BUDGET,
                     step_priority: str = STEP_PRIORITY) -> tuple[float, MachineSpeed]:
    """(seconds, this machine's step model) the two stall runs take on this machine."""
    return estimate(model, [(stall_policy(chunked, budget, long_prompt, step_priority),
                             stall_parts(long_prompt, arrivals))
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
    """The decodes' inter-token gaps once the long prompts start arriving, and the long prompts' TTFT."""
    reqs, _ = frames(result)
    longs = reqs[reqs["id"].str.startswith("long")]
    dec = decode_token_times(result)
    # the decodes' gaps from the first long prompt's arrival on: the decodes' own start is not the question
    start = min((float(r["arrival_s"]) for r in result.requests), default=0.0)
    since = float(pd.to_numeric(longs["arrival_s"]).min()) - start if len(longs) else 0.0
    dec = dec[dec["t_s"] >= since]
    gaps = dec["gap_ms"].dropna().tolist()
    return {
        "decode_gap_max_ms": float(dec["gap_ms"].max()),
        "decode_gap_p50_ms": percentile(gaps, 50),
        "decode_gap_p99_ms": percentile(gaps, 99),
        "long_ttft_mean_s": float(pd.to_numeric(longs["ttft_s"]).mean()),
        "output_tok_s": result.summary["output_throughput_tok_s"],
    }


def stall_verdict(off: dict, on: dict, long_prompt: int) -> claims.Verdict:
    """The claim `long_prompt_stalls` on one pair of runs (stall_summary with chunking off and on)."""
    ratio = claims.ratio(off["decode_gap_max_ms"], off["decode_gap_p50_ms"])
    numbers = (f"With chunking off the running streams' usual gap was {off['decode_gap_p50_ms']:.0f} ms and the "
               f"longest {off['decode_gap_max_ms']:.0f} ms (×{ratio:.1f}); with chunking on the longest was "
               f"{on['decode_gap_max_ms']:.0f} ms.")
    cut = on["decode_gap_max_ms"] < off["decode_gap_max_ms"]
    if claims.CLAIMS["long_prompt_stalls"].passes(ratio) and not cut:
        why = " Chunking did not shorten the longest gap here."
    else:
        why = (f" A {long_prompt}-token prompt costs about as much as the decode steps around it, so the step "
               "that carries it is hardly longer than the others.")
    return claims.judge("long_prompt_stalls", ratio,
                        numbers + f" The step that carried the whole {long_prompt}-token prompt lasted as long as "
                        "all its work, and every stream in it waited; chunks spread that work over several steps.",
                        numbers + why, extra_test=cut)


def kv_verdict(k: dict, capacity: int) -> claims.Verdict:
    """The claim `small_kv_preempts` on one run (kv_summary) at `capacity` tokens of KV."""
    need = KV_NEED
    numbers = (f"At {capacity:,} tokens of KV ({capacity / need:.0%} of the {need:,} that {KV_SLOTS} requests need at "
               f"their longest) the run made {k['preemptions']} preemptions of {k['preempted_requests']} requests, "
               f"and prefilled {k['recomputed_tokens']} prompt tokens again; the cache peaked at {k['kv_peak_pct']:.0f}%.")
    return claims.judge("small_kv_preempts", k["preemptions"],
                        numbers + " When the next token had no room, the newest running request gave up its blocks "
                        "and went back to the queue.",
                        numbers + " The running batch always found room for its next tokens.")


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
    # the tallest spike comes just after the arrival, where its label is: on a phone it hid them
    top = max((float(np.nanmax(t.y)) for t in traces if len(t.y)), default=0.0)
    return go.Figure(data=traces, layout=layout(*texts, shapes=[s for s, _ in marks],
                                                annotations=[n for _, n in marks], yaxis=room_above(top)))


# ----------------------------------------------------------------------------- 2. a KV cache too small

KV_SPEC = WorkloadSpec(num_requests=24, rate=0, prompt_kind="uniform", prompt_lo=64, prompt_hi=128,
                       output_kind="uniform", output_lo=64, output_hi=128)
KV_SLOTS = 16
KV_NEED = KV_SLOTS * (KV_SPEC.prompt_len.hi + KV_SPEC.output_len.hi)   # every slot at its longest
KV_DEFAULT = 4096
KV_MIN = 256   # one request's prompt + output must fit: 128 + 128
KV_SMALL = 1024   # the page's first KV capacity: small enough that this workload preempts


def kv_too_small(capacity: int) -> bool:
    """Whether a cache of `capacity` tokens is too small for the running batch at its longest: what
    `small_kv_preempts` is about (a cache with room for all of it makes the claim no promise)."""
    return capacity < KV_NEED


def kv_run(model, kv_capacity: int, progress=None, refresh: bool = False, peek: bool = False):
    policy = SchedulerPolicy(max_num_seqs=KV_SLOTS, kv_capacity_tokens=int(kv_capacity))
    return single_run(model, policy, KV_SPEC, progress, label=f"KV {kv_capacity} tokens",
                      refresh=refresh, peek=peek)


def simulated_kv_run(step_model, kv_capacity: int):
    """kv_run on the simulator: (RunResult, False). Every request arrives at once, so the simulated
    scheduler makes the very same preemptions as the real one; only the times are predicted."""
    policy = SchedulerPolicy(max_num_seqs=KV_SLOTS, kv_capacity_tokens=int(kv_capacity))
    return simulated_run(step_model, policy, KV_SPEC, label=f"KV {kv_capacity} tokens, simulated"), False


def kv_estimate_s(model, kv_capacity: int) -> tuple[float, MachineSpeed]:
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


# ----------------------------------------------------------------------------- 3. scheduling work on every step

SCHED_WAITING = 1000     # requests waiting while the scheduler decides a step
SCHED_REPS = 15          # times the decision is timed; the page shows the median
SCHED_CONTEXT = 128      # tokens each running request holds (the step model's decode step at this context)
FAST_STEP_MS = 0.2       # a small model's decode step on a fast accelerator: the claim's counter-case


@functools.cache
def scheduler_ms(waiting: int = SCHED_WAITING) -> tuple[float, int]:
    """The scheduler's median time to decide one step, timed here (no model), and the requests in that
    step: once per process, a tenth of a second."""
    return time_scheduling(waiting, reps=SCHED_REPS)


def scheduling_numbers(step_ms: float, waiting: int = SCHED_WAITING) -> dict:
    """The scheduler's time for one step beside `step_ms`, the time of the step it decides."""
    ms, running = scheduler_ms(waiting)
    return {"scheduler_ms": ms, "running": running, "waiting": waiting, "step_ms": step_ms,
            "share": claims.ratio(ms, step_ms)}


def scheduling_step_ms(step_model) -> float:
    """The step the decision is for: `step_model`'s decode step of the batch time_scheduling runs."""
    return step_model.decode_ms(scheduler_ms()[1], SCHED_CONTEXT)


def share_of_step(ms: float, step_ms: float) -> str:
    """`ms` beside a step of `step_ms`, in words: a percentage below the step's length, times above."""
    r = ms / step_ms
    if r < 0.995:
        return f"{r:.0%} of the step"
    return f"{r:.1f} times the step" if r < 9.95 else f"{r:.0f} times the step"


def scheduling_verdict(n: dict, step_says: str) -> claims.Verdict:
    """The claim `scheduling_is_small` on scheduling_numbers; `step_says` where the step's time came from."""
    numbers = (f"Deciding a step of {n['running']} running requests (their prompts fill its {TIMED_BUDGET:,}-token "
               f"budget) with {n['waiting']:,} waiting took the scheduler "
               f"{n['scheduler_ms']:.2f} ms on this machine's CPU; the step it decides takes {n['step_ms']:.1f} ms "
               f"({step_says}), so the decision is {n['share']:.1%} of it.")
    return claims.judge("scheduling_is_small", n["share"],
                        numbers + f" On a {FAST_STEP_MS:g} ms step the same decision would be "
                        f"{share_of_step(n['scheduler_ms'], FAST_STEP_MS)}.",
                        numbers + " Here the decision is a visible share of the step: an engine with steps this "
                        "short decides the next step while the current one runs.")
