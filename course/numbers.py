"""Every worked-example number the lessons quote, computed from the course's runs (course/examples.py).

A lesson writes ``{{number:example.static_end_s}}``; the page shows ``numbers()["static_end_s"]``
(lessons/markers.render_numbers), and tests/test_lesson_examples.py checks every name the lessons use is here.
"""
from __future__ import annotations

import functools
import math
import threading

from course.examples import (COURSE_MODEL, GOODPUT_SLOTS, GRID_SLOTS, KNEE_GPU, KNEE_GPU_VALUES, KNEE_SPEC,
                             KNEE_TPOT_SLO_MS, KNEE_TTFT_SLO_S, LOADS, QUEUE_SLOTS, QUEUE_SPEC, SHORT_LONG,
                             SHORT_LONG_LOAD, SHORT_LONG_SLOTS, SHORT_LONG_WAIT_STEPS, SLO_TPOT_LONE, SLO_TTFT_LONE,
                             SMOLLM2, at_load, capacity, goodput_run, load_example, grid_lengths, knee_sweep,
                             lifecycle_run, percentile, ridge, short_long_setup, slot_grid, slot_steps,
                             static_vs_continuous_runs, token_times)
from course.examples_serving import (ALARM_FOR_S, RAMP_AT_S, REPLICAS, SHORTER_PROMPT_HI, STARVE_LOAD, TAIL_LOAD,
                                     TAIL_LONG, TAIL_SHORT, TAIL_SLOTS, WAITING_ALARM, gateway_run, oldest_wait,
                                     tail_rate, tail_run, tail_stats)
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.step_model import StepModel
from engine.core.validation import kv_bytes_per_token
from engine.runs.workload import SHORT_SPAN


# Lesson 1's worked example supposes these
EX1_BANDWIDTH_GBS = 28    # memory copied per second
EX1_PEAK_GFLOPS = 2500    # a processor's bf16 peak

# Lesson 3's worked example supposes these (a faster machine than this course's, on purpose)
EX3_DECODING = 30          # sequences decoding when the long prompt arrives
EX3_PROMPT = 2048          # the long prompt's tokens
EX3_BUDGET = 512           # the token budget of the chunked run
EX3_PEAK_GFLOPS = 2100     # what the processor reaches on full steps
KV_TOKENS_EACH = 1000     # lesson 6's KV sum: tokens each running sequence holds
EX3_DECODE_MS = 50         # a step of the decodes alone: thin products, far below that peak


def _r(x: float, digits: int = 0):
    return round(x) if digits == 0 else round(x, digits)


def setting(name: str):
    """A worked-example number that is one of the course's settings, the same on every machine, without
    running anything (the glossary quotes these). KeyError for any other name."""
    return {"slo_ttft_lone": SLO_TTFT_LONE, "slo_tpot_lone": SLO_TPOT_LONE}[name]


_computing = threading.Lock()


def numbers(step_model: StepModel = COURSE_MODEL) -> dict:
    """Every worked-example number a lesson quotes, rounded as the text writes it; lessons 2, 4, 5, 7, 8 and 9's
    from runs on `step_model` (on the lesson page, the learner's own), the rest from the recorded CPU
    model, named GPUs' rooflines, supposed machines or settings. Seconds of simulation: computed once per
    process and step model, a second caller waiting for the first; do not change the dict."""
    with _computing:
        return {**_numbers(), **on_step_model(step_model)}


@functools.lru_cache(maxsize=1)
def _numbers() -> dict:
    """The numbers that do not depend on the learner's step model."""
    n = {}
    # lesson 1 (its worked table is drawn on the page from this machine's step model: ui/calculators.step_example)
    head = 2 * SMOLLM2.hidden * SMOLLM2.vocab
    body = 2 * SMOLLM2.layers * SMOLLM2.layer_params
    n.update(gflop_token=_r((body + head) / 1e9, 2), gflop_token_no_head=_r(body / 1e9, 2),
             kv_bytes_bf16=kv_bytes_per_token(SMOLLM2.layers, SMOLLM2.kv_heads, SMOLLM2.head_dim, 2))
    weights_mb = {"fp32": SMOLLM2.params * 4 / 1e6, "bf16": SMOLLM2.params * 2 / 1e6}
    floor_ms = {dtype: mb / EX1_BANDWIDTH_GBS for dtype, mb in weights_mb.items()}
    n.update(params_m=_r(SMOLLM2.params / 1e6), weights_mb_fp32=_r(weights_mb["fp32"]),
             weights_gb_bf16=_r(weights_mb["bf16"] / 1000, 2), ex1_bandwidth=EX1_BANDWIDTH_GBS,
             ex1_peak=EX1_PEAK_GFLOPS, ex1_floor_fp32_ms=_r(floor_ms["fp32"], 1),
             ex1_floor_bf16_ms=_r(floor_ms["bf16"], 1), ex1_tok_s_bf16=_r(1000 / floor_ms["bf16"]),
             ex1_balance=_r(EX1_PEAK_GFLOPS / EX1_BANDWIDTH_GBS))
    # lesson 2 (its run on the learner's step model: on_step_model)
    n.update(sl_requests=SHORT_LONG.num_requests, sl_long=SHORT_LONG.output_hi, sl_short_lo=SHORT_LONG.output_lo,
             sl_short_hi=SHORT_SPAN * SHORT_LONG.output_lo, sl_slots=SHORT_LONG_SLOTS)
    lengths = grid_lengths()
    grids = {mode: slot_grid(lengths, GRID_SLOTS, mode) for mode in ("static", "continuous")}
    n.update(grid_n=len(lengths), grid_slots=GRID_SLOTS, grid_lengths=", ".join(map(str, lengths[:-1])) + " and "
             + str(lengths[-1]), grid_static_steps=grids["static"]["steps"],
             grid_cont_steps=grids["continuous"]["steps"], grid_used=grids["static"]["used"],
             grid_static_held=grids["static"]["held"], grid_cont_held=grids["continuous"]["held"])
    # lesson 3: what follows from the worked example's suppositions, with the per-token GFLOP as the
    # lesson shows it, so that its sums check by hand
    per_token, chunk = n["gflop_token_no_head"], EX3_BUDGET - EX3_DECODING
    all_gflop, step_gflop = (EX3_PROMPT + EX3_DECODING) * per_token, EX3_BUDGET * per_token
    n.update(ex3_decoding=EX3_DECODING, ex3_prompt=EX3_PROMPT, ex3_budget=EX3_BUDGET, ex3_peak=EX3_PEAK_GFLOPS,
             ex3_decode_ms=EX3_DECODE_MS, ex3_all_tokens=EX3_PROMPT + EX3_DECODING, ex3_all_gflop=_r(all_gflop),
             ex3_all_s=_r(all_gflop / EX3_PEAK_GFLOPS, 2), ex3_chunk=chunk, ex3_chunk_ratio=_r(EX3_PROMPT / chunk, 2),
             ex3_chunk_steps=math.ceil(EX3_PROMPT / chunk), ex3_step_gflop=_r(step_gflop),
             ex3_step_ms=_r(1000 * step_gflop / EX3_PEAK_GFLOPS),
             ex3_step_max_ms=_r(EX3_DECODE_MS + 1000 * step_gflop / EX3_PEAK_GFLOPS))
    # lesson 4
    rows4, moments4, row = lifecycle_run()
    times = token_times(row, moments4)
    gaps = [b - a for a, b in zip(times, times[1:])]
    rest = [g for g in gaps if g != max(gaps)]
    n.update(lc_queue_s=_r(row["queue_s"], 2), lc_ttft_s=_r(row["ttft_s"], 2), lc_e2e_s=_r(row["e2e_s"], 2),
             lc_tokens=row["output_tokens"], lc_tpot_ms=_r(1000 * row["tpot_s"]), lc_gap_ms=_r(1000 * max(gaps)),
             lc_other_gap_ms=_r(1000 * sum(rest) / len(rest)), lc_prefill_s=_r(row["ttft_s"] - row["queue_s"], 2))
    # lesson 6: the GPU's sweep (the learner's own sweep is drawn on the page: ui/calculators.knee_example)
    from engine.sim.roofline import roofline_profile
    sweep = knee_sweep()
    k = next(r for r in sweep if r["knee"])
    best = max(sweep, key=lambda r: r["tok_s"])
    for r in sweep:
        v = r["max_num_seqs"]
        n[f"kn_tok_s_{v}"] = f"{round(r['tok_s']):,}"
        n[f"kn_tpot_{v}"] = _r(r["tpot_p95_ms"], 1)
        n[f"kn_ttft_{v}"] = _r(r["ttft_p95_s"], 1)
    after = sweep[sweep.index(k) + 1]
    gpu_ridge = ridge(roofline_profile(KNEE_GPU).device)
    n.update(knee=k["max_num_seqs"], kn_requests=f"{KNEE_GPU_VALUES[-1]:,}", kn_best=best["max_num_seqs"],
             kn_knee_share=_r(100 * k["tok_s"] / best["tok_s"]), kn_after=after["max_num_seqs"],
             kn_after_gain=_r(100 * (after["tok_s"] / k["tok_s"] - 1)),
             kn_prompt_lo=KNEE_SPEC.prompt_lo, kn_prompt_hi=KNEE_SPEC.prompt_hi, kn_out_lo=KNEE_SPEC.output_lo,
             kn_out_hi=KNEE_SPEC.output_hi, kn_slo_ms=KNEE_TPOT_SLO_MS, kn_ttft_target=KNEE_TTFT_SLO_S,
             kn_slo_best=max(r["max_num_seqs"] for r in sweep if r["tpot_p95_ms"] <= KNEE_TPOT_SLO_MS),
             kn_ttft_best=min(r["max_num_seqs"] for r in sweep if r["ttft_p95_s"] <= KNEE_TTFT_SLO_S),
             kn_gpu_ridge=_r(gpu_ridge["flop_per_byte"]), kn_gpu_ridge_b=_r(gpu_ridge["batch"]),
             kn_out_per_prompt=_r(sweep[0]["decode_per_prompt_token"], 1),
             kn_gpu_weights_gb=_r(roofline_profile(KNEE_GPU).weight_bytes / 1e9))
    n["kv_tokens_each"] = f"{KV_TOKENS_EACH:,}"
    n["kv_64_seqs_gb"] = _r(64 * KV_TOKENS_EACH * n["kv_bytes_bf16"] / 1e9, 1)
    # lesson 7 (its run on the learner's step model: on_step_model)
    n.update(tl_long_lo=TAIL_LONG.prompt_lo, tl_long_hi=f"{TAIL_LONG.prompt_hi:,}", tl_short_lo=TAIL_SHORT.prompt_lo,
             tl_short_hi=TAIL_SHORT.prompt_hi, tl2_short_hi=SHORTER_PROMPT_HI, tl_slots=TAIL_SLOTS,
             tl_load_pct=_r(100 * TAIL_LOAD))
    n["kv_pool_mb_fp32"] = _r(EngineConfig().kv_pool_tokens * kv_bytes_per_token(30, 3, 64, 4) / 1e6)
    return n


@functools.lru_cache(maxsize=4)
def on_step_model(step_model: StepModel) -> dict:
    """The numbers of the worked examples that run on the step model they are given: lessons 2, 4, 5, 7, 8 and 9,
    whose workloads are set as shares of what that machine serves, so that the same story (a queue that
    grows near capacity, an order that starves, replicas that fall behind) plays out on any machine."""
    n = {}
    # lesson 5
    mu = capacity(cost=step_model)
    n.update(mu=_r(mu, 2), q_slots=QUEUE_SLOTS, q_requests=QUEUE_SPEC.num_requests)
    for share in (0.7, 0.95, 0.98):
        n[f"w_{round(100 * share)}"] = _r(1 / (mu - share * mu), 1)
        n[f"lam_{round(100 * share)}"] = _r(share * mu, 2)
        n[f"mm1_l_{round(100 * share)}"] = _r(share / (1 - share))
    for load in LOADS:
        rs, _, rate = at_load(load, cost=step_model)
        key = round(100 * load)
        w = sum(r["e2e_s"] for r in rs) / len(rs)
        n[f"sim_w_{key}"] = _r(w, 2)
        n[f"sim_q_{key}"] = _r(sum(r["queue_s"] for r in rs) / len(rs), 3)
        n[f"sim_lam_{key}"] = _r(rate, 2)
        n[f"sim_l_{key}"] = _r(rate * w, 1)
        # Little's law over the running requests alone: only they hold KV blocks
        n[f"sim_lrun_{key}"] = _r(rate * sum(r["e2e_s"] - r["queue_s"] for r in rs) / len(rs), 1)
    moderate, busy = load_example(LOADS[0], step_model), load_example(LOADS[1], step_model)
    n["sim_q_ratio"] = _r(busy["queue"] / moderate["queue"], 1)
    n["sim_service_70"] = _r(moderate["service"], 2)
    n["sim_service_ratio"] = _r(moderate["service"] * mu, 1)
    tokens = QUEUE_SPEC.prompt_hi + QUEUE_SPEC.output_hi
    pool = EngineConfig().kv_pool_tokens
    running = n["sim_lrun_95"]
    n.update(q_tokens=tokens, kv_pool=f"{pool:,}", l_tokens=f"{round(running * tokens):,}",
             l_long_tokens=f"{round(running * (1000 + QUEUE_SPEC.output_hi)):,}",
             l_pool_pct=_r(100 * running * tokens / pool),
             l_long_pool_pct=_r(100 * running * (1000 + QUEUE_SPEC.output_hi) / pool))
    # lesson 2: its traffic and static batching's max_wait_ms set relative to the machine
    spec, wait_ms = short_long_setup(step_model)
    runs = static_vs_continuous_runs(step_model)
    for mode, (rs, ms) in runs.items():
        end = max(r["finish_s"] for r in rs)
        long = max(rs, key=lambda r: r["output_tokens"])
        n[f"{mode}_end_s"] = _figures(end)
        n[f"{mode}_tok_s"] = _figures(sum(r["output_tokens"] for r in rs) / end)
        n[f"{mode}_ttft_p95_s"] = _figures(percentile([r["ttft_s"] for r in rs], 95))
        n[f"{mode}_long_e2e_s"] = _figures(long["e2e_s"])
        n[f"{mode}_share"] = _r(100 * slot_steps(rs, ms, SHORT_LONG_SLOTS)["share"])
    rs, ms = runs["static"]
    long_id = max(rs, key=lambda r: r["output_tokens"])["id"]
    with_long = [m for m in ms if any(rid == long_id for rid, _, _ in m.members)]
    n.update(sl_first_batch=len(with_long[0].members), sl_queue_max=max(len(m.waiting) for m in with_long),
             sl_max_wait_ms=_figures(wait_ms), sl_wait_steps=SHORT_LONG_WAIT_STEPS,
             sl_load_pct=_r(100 * SHORT_LONG_LOAD), sl_rate=_figures(spec.rate))
    n["sl_long_verdict"] = long_request_words(n["static_long_e2e_s"], n["continuous_long_e2e_s"],
                                              n["sl_max_wait_ms"])
    # lesson 4: its SLO set from this machine's lone request, its traffic at what this machine serves
    gp = goodput_run(step_model)
    n.update(gp_requests=gp["requests"], gp_tokens=f"{gp['tokens']:,}", gp_duration_s=_figures(gp["duration_s"]),
             gp_tok_s=_figures(gp["tokens"] / gp["duration_s"]), gp_req_s=_figures(gp["requests"] / gp["duration_s"]),
             gp_goodput=_figures(gp["both_ok"] / gp["duration_s"]), gp_rate=_figures(gp["rate"]),
             gp_share=_r(100 * gp["both_ok"] / gp["requests"]), gp_slots=GOODPUT_SLOTS,
             slo_ttft_s=_figures(gp["slo_ttft_s"]), slo_tpot_ms=_figures(1000 * gp["slo_tpot_s"]),
             slo_ttft_lone=SLO_TTFT_LONE, slo_tpot_lone=SLO_TPOT_LONE)
    n["gp_verdict"] = goodput_words(gp)
    # lesson 7: the tail at TAIL_LOAD of what this machine serves of the mix
    a, b = tail_stats(tail_run(TAIL_SHORT.prompt_hi, step_model)), tail_stats(tail_run(SHORTER_PROMPT_HI, step_model))
    n.update(tl_n=a["n"], tl_long=a["n_long"], tl_long_share=_r(100 * a["n_long"] / a["n"]),
             tl_rate=_figures(tail_rate(step_model)))
    for key in ("p50", "p99", "mean", "short_p50", "short_p99", "long_p50"):
        n[f"tl_{key}"] = _figures(a[key])
    for key in ("p50", "p99", "mean", "long_p50", "short_p99"):
        n[f"tl2_{key}"] = _figures(b[key])
    n["tl_long_verdict"] = long_prompts_words(a["long_p50"], b["long_p50"], a["p50"], b["p50"])
    # lesson 8
    n["sv_load_pct"] = _r(100 * STARVE_LOAD)
    for order in ("fcfs", "sjf"):
        _, ages, longest = oldest_wait(order, step_model)
        n[f"sv_{order}_oldest_s"] = _r(max(ages), 1)
        n[f"sv_{order}_longest_prompt"] = longest["prompt_tokens"]
    # lesson 9
    g = gateway_run(step_model)
    n.update(gw_mu=_r(g["mu"], 2), gw_before=_r(g["rates"][0], 1), gw_after=_r(g["rates"][1], 1),
             gw_ramp_s=_r(RAMP_AT_S), gw_alarm_s=None if g["alarm_s"] is None else _r(g["alarm_s"]),
             gw_threshold=WAITING_ALARM, gw_hold_s=_r(ALARM_FOR_S), gw_replicas=REPLICAS,
             gw_needed=math.ceil(g["rates"][1] / (0.8 * g["mu"])), gw_per_replica=_r(0.8 * g["mu"], 2),
             gw_capacity=_r(REPLICAS * g["mu"], 1), gw_excess=_r(g["rates"][1] - REPLICAS * g["mu"], 2),
             gw_30s_queue=_r(30 * (g["rates"][1] - REPLICAS * g["mu"])),
             gw_30s_wait=_r(30 * (g["rates"][1] - REPLICAS * g["mu"]) / (REPLICAS * g["mu"]), 1),
             gw_routed=f"{g['routed'][0]} and {g['routed'][1]}")
    n["gw_asks"] = autoscaler_words(g["alarm_s"], g["end_s"])
    return n


def _figures(x: float):
    """`x` to three significant figures, as a number the text can quote on a CPU or a GPU alike."""
    v = float(f"{x:.3g}")
    return int(v) if v == int(v) else v


def long_request_words(static_s: float, continuous_s: float, wait_ms: float) -> str:
    """Lesson 2's long request under continuous batching against static, worded for each way it comes out."""
    if continuous_s > static_s:
        return f"longer than the {static_s} s it took under static batching"
    return (f"shorter all the same than the {static_s} s it took under static batching, where it first waited "
            f"{wait_ms} ms for its batch to form: on this machine the newcomers' share of its steps cost it less "
            "than that wait")


def long_prompts_words(before_s: float, after_s: float, median_before_s: float, median_after_s: float) -> str:
    """Lesson 7: what shortening the short prompts did for the long prompts' median, worded for each way
    it comes out (within 5%: no change), beside what it did for the median of all requests."""
    if not (before_s > 0 and median_before_s > 0 and math.isfinite(after_s) and math.isfinite(median_after_s)):
        return "the run had too few requests to compare the two"
    change = after_s / before_s - 1
    median = f"{100 * (1 - median_after_s / median_before_s):.0f}%"
    if abs(change) < 0.05:
        return "the people with long documents saw almost no change"
    way = f"{100 * -change:.0f}% less" if change < 0 else f"{100 * change:.0f}% longer"
    return f"the people with long documents waited {way}, while the median of all requests fell {median}"


def goodput_words(gp: dict) -> str:
    """Lesson 4's goodput run (course.examples.goodput_run) against its SLO, worded for each way it comes out."""
    n, ttft, both = gp["requests"], gp["ttft_ok"], gp["both_ok"]
    target_ttft, target_tpot = _figures(gp["slo_ttft_s"]), _figures(1000 * gp["slo_tpot_s"])
    start = (f"all {n} requests start within {target_ttft} s" if ttft == n
             else f"{ttft} of the {n} requests start within {target_ttft} s")
    if both == ttft:
        return f"{start}, and every one of those also streams within {target_tpot} ms a token"
    return (f"{start}, but only {both} of those also stream within {target_tpot} ms a token: each newcomer's "
            "prompt is prefilled in a step that the running streams share, and such a step lasts as long as "
            "several decode steps, so their mean gap ends up above the target")


def autoscaler_words(alarm_s: float | None, end_s: float) -> str:
    """When lesson 9's autoscaler asked for a replica, worded for each way the run can come out."""
    if alarm_s is None:
        return f"never asks in the run's {round(end_s)} s: the queues never stayed that long"
    if alarm_s > RAMP_AT_S:
        return f"asks at {round(alarm_s)} s, {round(alarm_s - RAMP_AT_S)} s after the step up"
    return f"asks at {round(alarm_s)} s, before the step up: the traffic's own bursts were enough"


# Which machine each worked-example number comes from (course/machines.py): the lessons show it beside
# the number (lessons/markers.tag_machines). A number nobody has placed on a machine is None, and
# tests/test_lesson_examples.py fails on it.
_ANY = {  # settings of the examples, counts the scheduler decides alone, and the model's own shape
    "sl_requests", "sl_long", "sl_short_lo", "sl_short_hi", "sl_slots", "sl_wait_steps", "sl_load_pct",
    "grid_n", "grid_slots", "grid_lengths", "grid_static_steps",
    "grid_cont_steps", "grid_used", "grid_static_held", "grid_cont_held", "gp_slots", "gp_requests",
    "slo_ttft_lone", "slo_tpot_lone", "q_slots", "q_requests", "q_tokens", "kv_pool", "mm1_l_70", "mm1_l_95", "mm1_l_98",
    "tl_long_lo", "tl_long_hi", "tl_short_lo", "tl_short_hi", "tl2_short_hi", "tl_slots", "tl_n", "tl_long",
    "tl_long_share", "tl_load_pct", "gw_threshold", "gw_hold_s", "gw_replicas", "gw_ramp_s", "sv_load_pct",
    "sv_fcfs_longest_prompt", "sv_sjf_longest_prompt", "gflop_token", "gflop_token_no_head", "kv_bytes_bf16",
    "params_m", "weights_mb_fp32", "weights_gb_bf16", "kv_64_seqs_gb", "kv_pool_mb_fp32", "kn_requests",
    "kn_slo_ms", "kn_ttft_target", "kn_gpu_weights_gb", "kv_tokens_each", "kn_prompt_lo", "kn_prompt_hi", "kn_out_lo", "kn_out_hi", "kn_out_per_prompt",
    "ex3_decoding", "ex3_prompt", "ex3_budget", "ex3_chunk", "ex3_chunk_ratio", "ex3_chunk_steps", "ex3_all_tokens",
    "ex3_all_gflop", "ex3_step_gflop", "ex1_bandwidth", "ex1_peak", "ex3_peak", "ex3_decode_ms"}


def machine_of(name: str) -> str | None:
    """The machine (course.machines) a worked-example number comes from; None if it has none yet."""
    from course import machines
    from course.examples import KNEE_GPU
    if name in _ANY:
        return machines.ANY
    if name.startswith("ex1_"):
        return machines.SUPPOSED_1
    if name.startswith("ex3_"):
        return machines.SUPPOSED_3
    if name == "knee" or name.startswith("kn_"):
        return KNEE_GPU            # lesson 6's text quotes the GPU's sweep; the learner's is drawn on the page
    if name.startswith(_ON_STEP_MODEL):
        return machines.SIMULATOR
    return machines.RECORD if name.startswith(_RECORDED) else None


# The numbers that come out of runs on the learner's step model (on_step_model), by name
_ON_STEP_MODEL = ("mu", "w_", "lam_", "sim_", "l_", "sv_", "gw_", "gp_", "slo_ttft_s", "slo_tpot_ms", "static_",
                  "continuous_", "sl_first_batch", "sl_queue_max", "sl_rate", "sl_max_wait_ms", "sl_long_verdict", "tl_", "tl2_")
# The numbers that come out of runs on the course's recorded CPU step model (COURSE_MODEL), by name
_RECORDED = ("lc_",)
