"""The pictures of the operator's lessons (11 KV capacity, 13 benchmarking honestly, 14 guessing ahead), each
drawn from simulated runs: the same Engine and Scheduler, step times from a step model (the learner's own on
the lesson page) or a named GPU's roofline, on a virtual clock. No Streamlit.
"""
from __future__ import annotations

import math
from dataclasses import replace

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.style import COLORS
from course import examples as course
from course.pictures import Picture, step_model_words as _on
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.metrics import percentile, request_row
from engine.core.request import Request
from engine.core.step_model import StepModel
from engine.runs.arrivals import build_requests
from engine.runs.closed_loop import run_closed_loop
from engine.runs.workload import WorkloadSpec
from engine.sim.roofline import DEVICES
from engine.sim.simulate import SimProfile, build_simulation, resolve_profile


def _profile(step_model) -> SimProfile:
    name = getattr(step_model, "label", "") or "step model"
    return SimProfile(name, name, step_model)


# ----------------------------------------------------------------------------- lesson 11: the pool over time

POOL_SPEC = WorkloadSpec(num_requests=20, rate=0, seed=3, prompt_kind="uniform", prompt_lo=64, prompt_hi=96,
                         output_kind="uniform", output_lo=32, output_hi=64)
POOL_SLOTS = 16
POOLS = {"too small": 1024, "roomy": 3072}       # KV tokens: 64 and 192 blocks of 16


def pool_run(pool: int, step_model=course.COURSE_MODEL) -> tuple[list, list[dict]]:
    """POOL_SPEC's burst with a KV pool of `pool` tokens: (the steps, the request rows)."""
    policy = SchedulerPolicy(max_num_seqs=POOL_SLOTS, kv_capacity_tokens=pool)
    config = EngineConfig(kv_pool_tokens=max(EngineConfig().kv_pool_tokens, pool))
    engine = build_simulation(config, policy, _profile(step_model))
    for r in build_requests(POOL_SPEC):
        engine.submit(r)
    engine.run()
    return engine.steps, [request_row(r) for r in engine.requests.values()]


def kv_pool_over_time(step_model: StepModel = course.COURSE_MODEL) -> Picture:
    """The same burst with a pool too small and a roomy one: the pool's use and the requests running, step by step."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.14,
                        subplot_titles=["KV pool in use", f"requests running (of {POOL_SLOTS} slots)"])
    words = {}
    for (name, pool), color in zip(POOLS.items(), (COLORS["bad"], COLORS["running"])):
        steps, rows = pool_run(pool, step_model)
        t = [s.t_end_s for s in steps]
        used = [s.kv_used_blocks / s.kv_total_blocks if s.kv_total_blocks else math.nan for s in steps]
        label = f"{pool:,} tokens ({name})"
        fig.add_trace(go.Scatter(name=label, x=t, y=used, mode="lines", legendgroup=name,
                                 line=dict(color=color, shape="hv")), row=1, col=1)
        fig.add_trace(go.Scatter(name=label, x=t, y=[s.running for s in steps], mode="lines", legendgroup=name,
                                 showlegend=False, line=dict(color=color, shape="hv")), row=2, col=1)
        hit = [s for s in steps if s.preempted]
        if hit:
            fig.add_trace(go.Scatter(name=f"a preemption ({name})", x=[s.t_end_s for s in hit],
                                     y=[s.running for s in hit], mode="markers", legendgroup=name,
                                     marker=dict(symbol="x", size=9, color=color)), row=2, col=1)
        words[name] = {"pool": pool, "end": max(r["finish_s"] for r in rows),
                       "preempted": sum(s.preempted for s in steps), "peak": max(s.running for s in steps),
                       "full": max(used), "mean_running": sum(s.running for s in steps) / len(steps)}
    fig.update_layout(height=520, margin=dict(l=60, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.18))
    fig.update_yaxes(title_text="share of blocks", tickformat=".0%", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(title_text="running", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="seconds (simulated)", row=2, col=1)
    small, roomy = words["too small"], words["roomy"]

    def said(w):
        return (f"with {w['pool']:,} tokens the pool fills to {w['full']:.0%}, at most {w['peak']} requests run at once "
                f"({w['mean_running']:.1f} on average over the steps), {w['preempted']} preemption(s) happen and the last "
                f"request ends at {w['end']:.1f} s")
    verdict = ("The small pool, not the slot limit, sets the batch: it runs fewer requests at once, preempts some and "
               "recomputes their work, and finishes later." if small["end"] > roomy["end"] else
               "Here the small pool finished no later: the requests were short enough that it held nearly as many.")
    alt = (f"The same {POOL_SPEC.num_requests} requests, all arriving at once, prompts of {POOL_SPEC.prompt_len.lo}-"
           f"{POOL_SPEC.prompt_len.hi} tokens and {POOL_SPEC.output_len.lo}-{POOL_SPEC.output_len.hi} output tokens, "
           f"{POOL_SLOTS} batch slots, simulated on {_on(step_model)}: {said(small)}; {said(roomy)}. " + verdict)
    return Picture(fig, alt, f"A KV pool too small and a roomy one, the same burst of requests simulated on "
                             f"{_on(step_model)}: the full pool caps the running batch below its slots and preempts.")


# ----------------------------------------------------------------------------- lesson 13: closed loop vs open load

LOAD_SPEC = WorkloadSpec(num_requests=240, rate=1.0, prompt_kind="uniform", prompt_lo=16, prompt_hi=64,
                         output_kind="uniform", output_lo=8, output_hi=24)
LOAD_SLOTS = 8
CLIENTS = 6                   # near the engine's capacity of LOAD_SLOTS slots
LOAD_WARMUP = 6               # the first requests (one per client): left out


def load_pair(step_model=course.COURSE_MODEL) -> dict:
    """A closed loop of CLIENTS clients, then the same requests as open Poisson load at the throughput the loop
    measured: {"closed"/"open": request rows past the warm-up, "rate": that throughput, requests/s}."""
    policy = SchedulerPolicy(max_num_seqs=LOAD_SLOTS)
    closed = build_simulation(EngineConfig(), policy, _profile(step_model))
    run_closed_loop(closed, build_requests(LOAD_SPEC), CLIENTS)
    rows = _counted(closed)
    rate = float(f"{(len(rows) - 1) / (max(r['finish_s'] for r in rows) - rows[0]['arrival_s']):.3g}")
    open_ = build_simulation(EngineConfig(), policy, _profile(step_model))
    for r in build_requests(replace(LOAD_SPEC, rate=rate)):
        open_.submit(r)
    open_.run()
    return {"closed": rows, "open": _counted(open_), "rate": rate}


def _counted(engine) -> list[dict]:
    rows = sorted((request_row(r) for r in engine.requests.values()), key=lambda r: r["arrival_s"])
    return [r for r in rows[LOAD_WARMUP:] if r["ttft_s"] is not None]


def closed_vs_open(step_model: StepModel = course.COURSE_MODEL) -> Picture:
    """TTFT's spread under a closed loop and under open load at the throughput the loop measured."""
    pair = load_pair(step_model)
    fig = go.Figure()
    p = {}
    for kind, color, name in (("closed", COLORS["running"], f"closed loop, {CLIENTS} clients"),
                              ("open", COLORS["waiting"], f"open load, Poisson at {pair['rate']} req/s")):
        v = sorted(r["ttft_s"] for r in pair[kind])
        p[kind] = {q: percentile(v, q) for q in (50, 99)}
        fig.add_trace(go.Scatter(name=f"{name}: p99 {p[kind][99]:.2f} s", x=v, y=[(i + 1) / len(v) for i in range(len(v))],
                                 mode="lines", line=dict(color=color, shape="hv", width=3)))
    fig.update_layout(height=380, margin=dict(l=60, r=20, t=70, b=40), legend=dict(orientation="h", y=-0.25),
                      title=dict(text=f"TTFT at the same throughput, {pair['rate']} requests/s:<br>"
                                      "share of requests at or under each time"),
                      xaxis=dict(title=dict(text="TTFT (s, simulated)"), rangemode="tozero"),
                      yaxis=dict(title=dict(text="share of requests"), range=[0, 1.02]))
    ratio = p["open"][99] / p["closed"][99]
    verdict = (f"the open load's p99 is {ratio:.1f} times the closed loop's: under open load requests arrive in "
               "bursts and queue inside the engine, while the closed loop's clients only send once a request ends, "
               "so the wait they would have had stays in the clients, where TTFT does not count it"
               if ratio > 1.1 else
               "the two p99s are within 10% of each other here: at this load the bursts of open arrivals "
               "found free slots")
    alt = (f"{LOAD_SPEC.num_requests} requests of {LOAD_SPEC.prompt_len.lo}-{LOAD_SPEC.prompt_len.hi} prompt tokens "
           f"and {LOAD_SPEC.output_len.lo}-{LOAD_SPEC.output_len.hi} output tokens on an engine of {LOAD_SLOTS} slots, "
           f"simulated on {_on(step_model)}, the first {LOAD_WARMUP} left out. A closed loop of {CLIENTS} clients "
           f"served {pair['rate']} requests/s with TTFT p50 {p['closed'][50]:.2f} s and p99 {p['closed'][99]:.2f} s; "
           f"the same requests arriving at random at that rate had p50 {p['open'][50]:.2f} s and p99 "
           f"{p['open'][99]:.2f} s: {verdict}.")
    return Picture(fig, alt, "One engine, one throughput, two ways of sending the load (simulated on "
                             f"{_on(step_model)}): a closed loop hides the queue that open arrivals meet.")


# ----------------------------------------------------------------------------- lesson 14: speculation against batch

SPEC_GPU = "h100-sxm:llama-3.1-8b"
SPEC_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
SPEC_K = 4
SPEC_CHANCE = 0.55            # each guess kept with this chance once the ones before it were (a copying workload)
SPEC_PROMPT, SPEC_NEW = 142, 64


def decode_tok_s(step_model, batch: int, method: str) -> float:
    """Tokens a second made by the decode steps (those that ran no prompt) of `batch` requests at once, with
    speculation off or n-gram drafts of SPEC_K accepted with SPEC_CHANCE, on the simulator."""
    policy = SchedulerPolicy(speculative_method=method, num_speculative_tokens=SPEC_K, max_num_seqs=batch,
                             max_num_batched_tokens=max(512, batch * (SPEC_K + 1)),
                             kv_capacity_tokens=max(SchedulerPolicy().kv_capacity_tokens,
                                                    batch * (SPEC_PROMPT + SPEC_NEW + SPEC_K + 16)))
    profile = step_model if isinstance(step_model, SimProfile) else _profile(step_model)
    config = EngineConfig(kv_pool_tokens=max(EngineConfig().kv_pool_tokens, policy.kv_capacity_tokens))
    engine = build_simulation(config, policy, replace(profile, kv_capacity_tokens=None),
                              draft_acceptance=SPEC_CHANCE if method == "ngram" else 0.0)
    for i in range(batch):
        engine.submit(Request(f"r{i}", [0] * SPEC_PROMPT, SPEC_NEW))
    engine.run()
    decode = [s for s in engine.steps if s.prefill_tokens == 0 and s.members]
    made = sum(len(s.members) for s in decode) + sum(d[2] for s in decode for d in s.drafts)
    return made / sum(s.duration_s for s in decode)


def speedup_by_batch(step_model) -> list[float]:
    return [decode_tok_s(step_model, b, "ngram") / decode_tok_s(step_model, b, "off") for b in SPEC_BATCHES]


def speculation_by_batch(step_model: StepModel = course.COURSE_MODEL) -> Picture:
    """Decode tok/s with n-gram drafts ÷ without, against batch size, on this machine's step model and on an
    H100's roofline, the H100's ridge marked."""
    gpu = resolve_profile(SPEC_GPU)
    lines = {_on(step_model): speedup_by_batch(step_model), gpu.label: speedup_by_batch(gpu)}
    ridge = course.ridge(DEVICES[SPEC_GPU.partition(":")[0]])["batch"]
    fig = go.Figure()
    for (name, ys), color in zip(lines.items(), (COLORS["running"], COLORS["points"])):
        short = "this machine's step model" if name == _on(step_model) else f"{SPEC_GPU} roofline"
        fig.add_trace(go.Scatter(name=short, x=list(SPEC_BATCHES), y=ys, mode="lines+markers",
                                 line=dict(color=color, width=3), hovertemplate="batch %{x}: %{y:.2f}×<extra></extra>"))
    fig.add_hline(y=1, line_dash="dot", line_color="#555", annotation_text="no change")
    # on a log axis a shape takes data positions and an annotation log10 ones
    fig.add_vline(x=ridge, line_dash="dash", line_color=COLORS["points"])
    fig.add_annotation(x=math.log10(ridge), y=1, yref="paper", text=f"H100 ridge ≈ {ridge:.0f}", showarrow=False,
                       xanchor="right", yanchor="bottom")
    fig.update_layout(height=400, margin=dict(l=60, r=20, t=70, b=40), legend=dict(orientation="h", y=-0.25),
                      title=dict(text=f"Decode tokens/s with {SPEC_K} guesses a step ÷ without<br>"
                                      f"(each guess kept {SPEC_CHANCE:.0%} of the time, simulated)"),
                      xaxis=dict(title=dict(text="requests in the batch"), type="log",
                                 range=[-0.1, math.log10(SPEC_BATCHES[-1]) + 0.1]),
                      yaxis=dict(title=dict(text="speed-up (×)"), rangemode="tozero"))

    def where(ys) -> str:
        losing = next((b for b, y in zip(SPEC_BATCHES, ys) if y < 1), None)
        head = f"{ys[0]:.2f}× at batch 1, {ys[-1]:.2f}× at {SPEC_BATCHES[-1]}"
        return head + (f"; it first falls below 1 at batch {losing}" if losing is not None else
                       f"; it stays above 1 up to {SPEC_BATCHES[-1]}")
    cpu, h100 = lines.values()
    alt = (f"Speculation's speed-up of decode steps against batch size, {SPEC_K} tokens guessed per request per step and "
           f"each kept with chance {SPEC_CHANCE} (about {sum(SPEC_CHANCE ** i for i in range(SPEC_K + 1)):.1f} tokens "
           f"a check), requests of {SPEC_PROMPT} prompt tokens writing {SPEC_NEW}. On {_on(step_model)}: {where(cpu)}. "
           f"On the {gpu.label}: {where(h100)}; its ridge, where a decode step's weight products "
           f"turn compute-bound, is near {ridge:.0f} sequences (the dashed line). Guessing pays while extra rows are "
           "nearly free and loses once every row costs its arithmetic.")
    return Picture(fig, alt, f"Speculation's gain against batch size, simulated on {_on(step_model)} and on an "
                             f"H100 roofline ({SPEC_GPU}): it shrinks as the batch nears the machine's ridge.")


ON_STEP_MODEL = ("kv_pool_over_time", "closed_vs_open", "speculation_by_batch")
PICTURES = {"kv_pool_over_time": kv_pool_over_time, "closed_vs_open": closed_vs_open,
            "speculation_by_batch": speculation_by_batch}
