"""`python -m engine bench`: this engine against its peers, side by side in one run.

One offline workload (all requests at t=0, greedy, outputs forced to their length) goes
through (1) this engine, (2) transformers `generate` in static padded batches, and (3)
transformers' own continuous batching. It checks the greedy outputs agree, prints output
tokens/s and the ratios, and places the engine against this machine's measured roofline
(GEMM FLOP/s and memory bandwidth). Ratios measured in one run are what to compare: these
machines are shared and noisy.
"""
from __future__ import annotations

import itertools
import statistics
import time

from ..runs.arrivals import build_requests
from ..runs.build import build_engine
from ..core.config import EngineConfig, SchedulerPolicy
from ..core.request import Request
from ..core.scheduler import Scheduler
from ..core.step_model import causal_pairs
from ..sim.step_times import measure_batch_scaling, time_scheduling
from ..runs.workload import LengthDist, PromptMaker, WorkloadSpec
from .flags import add_knob_flags, add_model_flags


# The bench's own starting values: one offline batch of 64 requests, all arriving at once.
BENCH_DEFAULTS = dict(dtype="fp32,bf16", num_requests=64, prompt_len=[16, 256], output_len=[8, 128],
                      max_num_seqs=64, max_num_batched_tokens=2048)


def add_bench_flags(p) -> None:
    """The knobs' own flags (ranges and help from engine/core/config.py and engine/runs/workload.py),
    with the bench's defaults, plus its comparison settings."""
    add_model_flags(p)
    add_knob_flags(p, SchedulerPolicy, only=("max_num_seqs", "max_num_batched_tokens"))
    add_knob_flags(p, WorkloadSpec, only=("num_requests", "prompt_lo", "prompt_hi", "output_lo",
                                          "output_hi", "seed"))
    p.add_argument("--hf-batch", type=int, default=16, help="batch size of the transformers static baseline")
    p.add_argument("--skip-peers", action="store_true", help="only this engine and the roofline")
    p.add_argument("--profile", action="store_true",
                   help="also time the parts of a step (GEMM, attention, norms, sampling, Python) for decode "
                        "at batch 1, 8, 32, 64 and prefill steps, beside each shape's roofline")
    p.set_defaults(**BENCH_DEFAULTS)


# ----- the machine's roofline -----

TRIALS = 10          # timed products and copies, after one warm-up each
# Decode steps at batch 1, each compared with a copy made a step before it: right after a copy
# the step first writes back the copy's lines left in the cache (9% slower here), so a step
# between them is timed but not compared; the one after it takes what steps back to back take.
# A third step follows a plain read of 256 MB (it leaves nothing to write back): a step
# only reads its weights, and on this machine a read has run 2-17% faster than a copy where
# memory was busy and 3-10% slower where it was quiet, so the floor at a copy alone can flatter
# a step or wrong it.
B1_PAIRS = 9
SLOW_GEMM = 10e9     # FLOP/s under which a library's product is emulated here (not a peak): skipped


def measure_roofline(device, dtype) -> dict:
    """This machine's peaks: the best of TRIALS 2048x2048 products (torch's, and the engine's own
    oneDNN and C kernel ones where it has them) and of TRIALS 256 MB copies. The best, because on
    a shared machine a trial can catch a neighbour's burst, and a peak measured low flatters every
    step compared with it; the medians say how far the machine moved while it was measured."""
    import torch
    n = 2048
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    products = {}
    # probed at 512 first: torch's bf16 product is emulated on CPUs without bf16 instructions,
    # where one 2048 product takes about a minute
    if max(_rates(lambda: a[:512, :512] @ b[:512, :512], 2 * 512 ** 3, device, 1)) >= SLOW_GEMM:
        products["torch"] = lambda: a @ b
    from ..model import cpu_kernels
    from ..model.linear import Linear, onednn_available
    if onednn_available(torch.device(device), dtype):   # the engine's own CPU matmuls: often faster
        onednn = Linear(b, pack=True)
        products["oneDNN"] = lambda: onednn(a)
        kernels = cpu_kernels.for_device(torch.device(device), dtype)
        own = Linear(b, kernels, pack=True) if kernels is not None else None
        if own is not None and own.panels is not None:
            products["C kernel"] = lambda: own(a)
    products = products or {"torch": lambda: a @ b}      # slow, but the only product there is
    by, gemm = max(((name, _rates(product, 2 * n ** 3, device, TRIALS)) for name, product in products.items()),
                   key=lambda named: max(named[1]))
    copy_once = copy_rate(device)
    copy = [copy_once() for _ in range(TRIALS + 1)][1:]     # after one warm-up
    return {"gemm_flops": max(gemm), "gemm_median": statistics.median(gemm), "gemm_by": by,
            "mem_bw": max(copy), "mem_median": statistics.median(copy)}


def copy_rate(device):
    """A function that copies 256 MB once and returns the bytes read and written per second: the
    memory bandwidth of that moment."""
    import torch
    src = torch.randn(64 * 2 ** 20, device=device)
    dst = torch.empty_like(src)

    return lambda: _rate(lambda: dst.copy_(src), 2 * src.numel() * 4, device)


def read_rate(device):
    """A function that reads 256 MB once (a sum) and returns the bytes read per second: what a
    step that only reads its weights could get from memory at that moment."""
    import torch
    src = torch.randn(64 * 2 ** 20, device=device)

    return lambda: _rate(src.sum, src.numel() * 4, device)


def b1_against_copies(model, costs, pairs: int = B1_PAIRS) -> dict:
    """Decode steps at batch 1, each with the memory floor of a copy made a step before it: the
    steps' ms, the copies' bytes per second, and each step's time over its floor; and the same
    against a plain read made just before a step (`read_*`)."""
    copy_once, read_once = copy_rate(model.device), read_rate(model.device)
    copy_once(); read_once()                           # their pages touched once, not in a pair
    turns = itertools.cycle((copy_once, lambda: None, read_once))
    row = measure_batch_scaling(model, [1], context=100, steps=3 * pairs, before_each=lambda: next(turns)())[0]
    copies, steps_ms = row["before_each"][0::3], row["times_ms"][1::3]
    reads, read_steps_ms = row["before_each"][2::3], row["times_ms"][2::3]
    floor = lambda ms, bw: ms / (costs["weight_bytes"] / bw * 1000)
    return {"copies": copies, "steps_ms": steps_ms, "ratios": [floor(ms, bw) for ms, bw in zip(steps_ms, copies)],
            "reads": reads, "read_steps_ms": read_steps_ms,
            "read_ratios": [floor(ms, bw) for ms, bw in zip(read_steps_ms, reads)]}


def better_roofline(a: dict, b: dict) -> dict:
    """Of two measurements of the peaks, each peak (and its median) from the quieter one: a
    neighbour busy through all of one measurement's trials made its peak low, and every step
    measured against it would seem closer to the roofline than it is (even past 100%)."""
    gemm = max(a, b, key=lambda r: r["gemm_flops"])
    mem = max(a, b, key=lambda r: r["mem_bw"])
    return {"gemm_flops": gemm["gemm_flops"], "gemm_median": gemm["gemm_median"], "gemm_by": gemm["gemm_by"],
            "mem_bw": mem["mem_bw"], "mem_median": mem["mem_median"]}


def _rate(work, amount: float, device) -> float:
    """`amount` (FLOPs, bytes) per second of one call of `work`."""
    t = time.perf_counter(); work(); _sync(device)
    return amount / (time.perf_counter() - t)


def _rates(work, amount: float, device, trials: int) -> list[float]:
    """_rate of each of `trials` calls of `work`, after one warm-up."""
    return [_rate(work, amount, device) for _ in range(trials + 1)][1:]


def _sync(device):
    import torch
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def model_costs(model) -> dict:
    """Per-token FLOPs and bytes that bound a step from below."""
    cfg = model.config
    params = sum(p.numel() for p in model.hf_model.parameters())
    emb = cfg.vocab_size * cfg.hidden_size
    body = params - emb                                # tied: the embedding is also the lm_head
    elt = model.hf_model.parameters().__next__().element_size()
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    return {"body_params": body, "head_params": emb, "elt": elt,
            "weight_bytes": params * elt,
            "kv_bytes_per_token": 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * elt,
            # QK^T and PV: 4 FLOPs per head dim for each (query, key) pair
            "attn_flops_per_pair": 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim}


def step_roofline_s(costs, roof, tokens: int, samples: int, pairs: int, kv_rows: int,
                    in_turn: bool = False) -> float:
    """The least time a step can take: its FLOPs at the GEMM peak or its bytes (the weights once,
    the K/V rows it reads) at the copy bandwidth, whichever is longer. `pairs`: the (query, key)
    pairs its attention scores (engine/core/step_model.causal_pairs).
    in_turn: the weights' products and the attention one after the other, each at its own roof
    (the products' FLOPs or the weights' bytes, then attention's FLOPs or the K/V bytes), as
    engine/sim/roofline.py models a step. The plain roofline lets a step's K/V reads hide under its
    products' arithmetic; an engine that runs the two one after the other (this one) is bound by this
    one, so the share of it says how close each part comes to its own roof."""
    gemm_flops = 2 * costs["body_params"] * tokens + 2 * costs["head_params"] * samples
    attn_flops = costs["attn_flops_per_pair"] * pairs
    kv_bytes = costs["kv_bytes_per_token"] * kv_rows
    peak, bw = roof["gemm_flops"], roof["mem_bw"]
    if in_turn:
        return max(gemm_flops / peak, costs["weight_bytes"] / bw) + max(attn_flops / peak, kv_bytes / bw)
    return max((gemm_flops + attn_flops) / peak, (costs["weight_bytes"] + kv_bytes) / bw)


def shape_roofline_ms(costs, roof, in_turn: bool = False):
    """step_roofline_s in ms for a row of step_profile.profile_shapes (format_table's roofline_ms)."""
    return lambda r: step_roofline_s(costs, roof, r["tokens"], r["samples"], r["pairs"], r["kv_rows"], in_turn) * 1000


def roofline_share(engine, costs, roof, in_turn: bool = False) -> float:
    """The engine's steps' roofline time over their busy time: the share of the roofline they reach.
    Each request's position is followed through the steps (a run without preemption, as the bench's)."""
    roof_s, done = 0.0, {}
    for s in engine.steps:
        for rid, saved in s.prefix_hits:              # prompt tokens the prefix cache held: not computed
            done[rid] = done.get(rid, 0) + saved
        pairs = kv_rows = 0
        for rid, _, n in s.members:
            start = done.get(rid, 0)
            pairs, kv_rows, done[rid] = pairs + causal_pairs(start, n), kv_rows + start + n, start + n
        samples = sum(1 for _, phase, _ in s.members if phase == "decode") or 1
        roof_s += step_roofline_s(costs, roof, s.prefill_tokens + s.decode_tokens, samples, pairs, kv_rows, in_turn)
    return roof_s / sum(s.duration_s for s in engine.steps)


# ----- the three contestants -----

def run_engine(model, requests, args):
    policy = SchedulerPolicy(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                             kv_capacity_tokens=sum(r.prompt_tokens + r.max_new_tokens for r in requests) + 1024)
    engine = build_engine(EngineConfig(kv_pool_tokens=policy.kv_capacity_tokens), policy, model)
    # warm-up: one small request, not timed
    engine.submit(Request("warmup", requests[0].prompt_token_ids[:32], 4))
    engine.run()
    engine.requests.clear(); engine.steps.clear()
    t0 = engine.clock.now()
    for r in requests:
        r.arrival_s = t0
        engine.submit(r)
    engine.run()
    elapsed = engine.clock.now() - t0
    return elapsed, {r.id: list(r.output_token_ids) for r in requests}, engine


def run_hf_static(model, requests, batch_size):
    import torch
    hf, tok = model.hf_model, model.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else model.eos_token_id
    outs = {}
    t0 = time.perf_counter()
    for i in range(0, len(requests), batch_size):
        group = requests[i:i + batch_size]
        longest = max(r.prompt_tokens for r in group)
        ids = torch.full((len(group), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(group), longest), dtype=torch.long)
        for j, r in enumerate(group):                   # left padding, as decoder-only generate wants
            ids[j, longest - r.prompt_tokens:] = torch.tensor(r.prompt_token_ids)
            mask[j, longest - r.prompt_tokens:] = 1
        m = max(r.max_new_tokens for r in group)
        with torch.inference_mode():
            gen = hf.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                              max_new_tokens=m, min_new_tokens=m, do_sample=False, pad_token_id=pad)
        for j, r in enumerate(group):
            outs[r.id] = gen[j, longest:longest + r.max_new_tokens].tolist()
    return time.perf_counter() - t0, outs


def run_hf_continuous(model, requests):
    from transformers import GenerationConfig
    hf = model.hf_model
    gc = GenerationConfig(max_new_tokens=max(r.max_new_tokens for r in requests), do_sample=False,
                          eos_token_id=-1, pad_token_id=model.eos_token_id)
    manager = hf.init_continuous_batching(generation_config=gc)
    manager.start()
    outs = {}
    try:
        t0 = time.perf_counter()
        for r in requests:
            manager.add_request(r.prompt_token_ids, request_id=r.id, max_new_tokens=r.max_new_tokens, eos_token_id=-1)
        while len(outs) < len(requests):
            res = manager.get_result(timeout=1)
            if res is not None and res.is_finished():
                outs[res.request_id] = list(res.generated_tokens)[:next(q.max_new_tokens for q in requests
                                                                         if q.id == res.request_id)]
            elif res is None and not manager.is_running():
                raise RuntimeError("transformers continuous batching stopped early")
        elapsed = time.perf_counter() - t0
    finally:
        manager.stop(block=True)
    return elapsed, outs


def agreement(ours: dict, theirs: dict) -> tuple[float, float]:
    """(share of requests with identical tokens, share of tokens equal before the first divergence)."""
    same, tok_same, tok_all = 0, 0, 0
    for rid, a in ours.items():
        b = theirs.get(rid, [])
        same += a == b
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        tok_same += k
        tok_all += len(a)
    return same / max(1, len(ours)), tok_same / max(1, tok_all)


def bench_command(args) -> int:
    import torch
    from ..model.model import load_model

    spec = WorkloadSpec(num_requests=args.num_requests, rate=0, seed=args.seed,
                        **LengthDist("uniform", *args.prompt_len).as_fields("prompt"),
                        **LengthDist("uniform", *args.output_len).as_fields("output"))
    print(f"workload: {spec.num_requests} requests, prompts {args.prompt_len[0]}-{args.prompt_len[1]} tokens, "
          f"outputs {args.output_len[0]}-{args.output_len[1]}, all at t=0, greedy, ignore_eos")
    print(f"torch threads: {torch.get_num_threads()}")
    from ..model import cpu_kernels, kernel_paths
    built = kernel_paths.chosen_path() is None or cpu_kernels.load() is not None
    print(f"C kernels: {kernel_paths.in_words() if built else 'none (not built here; see the warning above)'}")
    for n in (1000, 10000):
        times = ", ".join(f"{order} {time_scheduling(n, order=order)[0]:.3f}" for order in ("fcfs", "sjf", "fair"))
        print(f"scheduling one step with {n:,} waiting: {times} ms")
    results = []
    for dtype in args.dtype.split(","):
        model = load_model(args.model, args.device, dtype)
        fresh = lambda: build_requests(spec, PromptMaker(model.tokenizer))
        total_out = sum(r.max_new_tokens for r in fresh())
        # The machine's memory bandwidth and GEMM speed move with its neighbours (copies here have
        # run at 35 GB/s and at 80 within a minute). Each decode step at batch 1 is compared with
        # a copy made a step before it, pair by pair (B1_PAIRS); the engine's run, between two
        # measurements of the peaks, with the better of both (better_roofline).
        before = measure_roofline(model.device, model.dtype)
        costs = model_costs(model)
        b1 = b1_against_copies(model, costs)
        b1_copies, b1_steps, b1_ratios, b1_read_ratios = b1["copies"], b1["steps_ms"], b1["ratios"], b1["read_ratios"]
        t_eng, ours, engine = run_engine(model, fresh(), args)
        kernels = cpu_kernels.for_device(model.device, model.dtype)      # the path its runner took
        roof = better_roofline(before, measure_roofline(model.device, model.dtype))
        print(f"\n== {model.name} on {model.device}, {str(model.dtype).replace('torch.', '')}: "
              f"GEMM {roof['gemm_flops'] / 1e9:.0f} GFLOP/s ({roof['gemm_by']}'s; median {roof['gemm_median'] / 1e9:.0f}), "
              f"memory {roof['mem_bw'] / 1e9:.1f} GB/s (median {roof['mem_median'] / 1e9:.1f}; the better of "
              f"measurements before and after this engine's run), weights {costs['weight_bytes'] / 1e6:.0f} MB, "
              f"C kernels: {kernels.path if kernels is not None else 'none'}")

        bws = [bw / 1e9 for bw in b1_copies]
        print(f"decode step at batch 1: {min(b1_steps):.1f} ms best, {statistics.median(b1_steps):.1f} median; "
              f"each of {len(b1_ratios)} steps against the memory floor at a copy made a step before it "
              f"({min(bws):.0f}-{max(bws):.0f} GB/s) -> {statistics.median(b1_ratios):.2f}x the floor "
              f"(the median pair; {min(b1_ratios):.2f}-{max(b1_ratios):.2f}x); against the floor at a plain read "
              f"made just before it ({min(b1['reads']) / 1e9:.0f}-{max(b1['reads']) / 1e9:.0f} GB/s) -> "
              f"{statistics.median(b1_read_ratios):.2f}x ({min(b1_read_ratios):.2f}-{max(b1_read_ratios):.2f}x)")
        if args.profile:
            from ..model.step_profile import format_table, profile_shapes
            print("where a step's time goes (ms and share of the step; median step of several):")
            print(format_table(profile_shapes(model), shape_roofline_ms(costs, roof),
                               shape_roofline_ms(costs, roof, in_turn=True)))

        eng_tps = total_out / t_eng
        medians = {"gemm_flops": roof["gemm_median"], "mem_bw": roof["mem_median"]}
        row = {"dtype": str(model.dtype).replace("torch.", ""), "engine_tok_s": eng_tps,
               "kernels": kernels.path if kernels is not None else "none",
               "engine_s": t_eng, "roofline_fraction": roofline_share(engine, costs, roof), "steps": len(engine.steps),
               "median_roofline_fraction": roofline_share(engine, costs, medians),
               "in_turn_fraction": roofline_share(engine, costs, roof, in_turn=True),
               "b1_floor_ratio": statistics.median(b1_ratios), "b1_read_ratio": statistics.median(b1_read_ratios)}
        print(f"this engine: {t_eng:.1f} s, {eng_tps:.1f} output tok/s over {len(engine.steps)} steps; "
              f"{row['roofline_fraction'] * 100:.0f}% of the roofline for its step shapes "
              f"({row['median_roofline_fraction'] * 100:.0f}% of it at the median peaks; "
              f"{row['in_turn_fraction'] * 100:.0f}% of the roofline with its products and attention in turn)")
        if row["roofline_fraction"] > 1:
            print("  above 100%: both measurements of the peaks caught the machine busy and came out low; "
                  "this run's share of the roofline says nothing, run it again")
        from ..model.linear import native_bf16
        if not args.skip_peers and model.device.type == "cpu" and model.dtype == torch.bfloat16 and not native_bf16():
            print("transformers in bf16: skipped, its matmuls are emulated on this CPU (no AVX-512 BF16, AMX or "
                  "AVX-NE-CONVERT), many times slower than its fp32, so its run would take tens of minutes; see the fp32 ratios")
        elif not args.skip_peers:
            t_st, hf_static = run_hf_static(model, fresh(), args.hf_batch)
            same, toks = agreement(ours, hf_static)
            row.update(hf_static_tok_s=total_out / t_st, static_agree=same, static_tok_agree=toks)
            print(f"transformers generate, static batches of {args.hf_batch}: {t_st:.1f} s, "
                  f"{total_out / t_st:.1f} tok/s -> engine is {eng_tps / (total_out / t_st):.1f}x; "
                  f"greedy outputs identical for {same * 100:.0f}% of requests ({toks * 100:.1f}% of tokens)")
            try:
                t_cb, hf_cb = run_hf_continuous(model, fresh())
                same, toks = agreement(ours, hf_cb)
                row.update(hf_cb_tok_s=total_out / t_cb, cb_agree=same, cb_tok_agree=toks)
                print(f"transformers continuous batching: {t_cb:.1f} s, {total_out / t_cb:.1f} tok/s -> "
                      f"engine is {eng_tps / (total_out / t_cb):.1f}x; greedy outputs identical for "
                      f"{same * 100:.0f}% of requests ({toks * 100:.1f}% of tokens)")
            except Exception as exc:   # a peer failing is reported, not fatal
                print(f"transformers continuous batching failed: {type(exc).__name__}: {exc}")
        results.append(row)
    print("\nsummary (ratios measured side by side in this run):")
    for r in results:
        parts = [f"{r['dtype']}: engine {r['engine_tok_s']:.0f} tok/s (C kernels: {r['kernels']})"]
        if "hf_static_tok_s" in r:
            parts.append(f"{r['engine_tok_s'] / r['hf_static_tok_s']:.1f}x generate-static")
        if "hf_cb_tok_s" in r:
            parts.append(f"{r['engine_tok_s'] / r['hf_cb_tok_s']:.1f}x transformers-continuous")
        parts.append(f"{r['roofline_fraction'] * 100:.0f}% of roofline ({r['in_turn_fraction'] * 100:.0f}% of the "
                     f"roofline in turn)")
        parts.append(f"decode b1 {r['b1_floor_ratio']:.2f}x the memory floor (step by step, each against a copy "
                     f"a step before it; {r['b1_read_ratio']:.2f}x against a read)")
        if "static_agree" in r:
            parts.append(f"greedy-identical {r['static_agree'] * 100:.0f}% of requests")
        print("  " + ", ".join(parts))
    return 0
