"""Timing this machine: how long a decode step takes at each batch size, and how long the
scheduler takes to decide one step.

The step measurements run the real forward (packed, over the paged KV cache) on stand-in prompts.
`measure_step_times` runs whole engine runs and reads their step records (the About page);
`measure_batch_scaling` drives the executor by hand, one decode step at a time, for the
"why batch" lab. `time_scheduling` times the scheduler alone (no model): `engine bench` and the
costs lab's scheduling part.
"""
from __future__ import annotations

import gc
import random
import statistics
import time

from ..runs.build import build_engine
from ..core.config import EngineConfig, SchedulerPolicy
from ..core.kv_cache import BlockPool, blocks_for
from ..core.request import Request
from ..core.scheduler import ScheduledChunk, Scheduler, StepPlan

BATCH_SIZES = (1, 8, 32)
PROMPT_TOKENS = 32
DECODE_STEPS = 5


def measure_step_times(model, batch_sizes=BATCH_SIZES, decode_steps: int = DECODE_STEPS) -> dict:
    """{"decode_ms": {batch size: median decode step ms}, "prefill_ms": ms for one prompt of
    "prompt_tokens" tokens, "seconds": time spent measuring}."""
    t0 = time.perf_counter()
    config = EngineConfig(model=model.name, kv_pool_tokens=4096)
    rng = random.Random(0)
    vocab = int(model.config.vocab_size)
    decode, prefill = {}, None
    for b in batch_sizes:
        policy = SchedulerPolicy(max_num_seqs=b, max_num_batched_tokens=max(512, b * PROMPT_TOKENS),
                                 kv_capacity_tokens=4096)
        engine = build_engine(config, policy, model)
        for i in range(b):
            ids = [rng.randrange(100, vocab) for _ in range(PROMPT_TOKENS)]
            engine.submit(Request(id=f"t{i}", prompt_token_ids=ids, max_new_tokens=decode_steps + 2))
        engine.run()
        steps = [s for s in engine.steps if s.prefill_tokens == 0 and len(s.members) == b]
        times = [s.duration_s * 1000 for s in steps[1:]] or [s.duration_s * 1000 for s in steps]
        decode[b] = statistics.median(times) if times else float("nan")
        if b == 1:
            prefill = next((s.duration_s * 1000 for s in engine.steps if s.prefill_tokens), None)
    return {"decode_ms": decode, "prefill_ms": prefill, "prompt_tokens": PROMPT_TOKENS,
            "seconds": time.perf_counter() - t0}


def measure_batch_scaling(model, batch_sizes: list[int], context: int = 128, steps: int = 4,
                          progress=None, before_each=None) -> list[dict]:
    """Decode-step time against batch size on the real model: `batch` sequences of `context` tokens,
    each generating one token per step. The heart of "why batch". `before_each`, if given, is
    called (untimed) just before each timed step, and what it returns is kept beside the step's
    time (the bench compares a step with a copy made a step before it)."""
    rows = []
    block_size = EngineConfig().block_size
    pool_tokens = max(batch_sizes) * blocks_for(context + steps + 1, block_size) * block_size
    engine = build_engine(EngineConfig(model=model.name, kv_pool_tokens=pool_tokens),
                          SchedulerPolicy(kv_capacity_tokens=pool_tokens), model)
    pool, executor = engine.pool, engine.executor
    for i, b in enumerate(batch_sizes):
        reqs = [Request(f"b{j}", [100 + (j * 7 + k) % 5000 for k in range(context)], steps + 1) for j in range(b)]
        for r in reqs:
            pool.allocate(r, context + steps + 1)
        # prefill once (not timed), then time the decode steps
        executor.execute(StepPlan([ScheduledChunk(r, 0, context, "prefill") for r in reqs]))
        for r in reqs:
            r.num_computed_tokens = context
            r.output_token_ids.append(1)
        times, before = [], []
        for _ in range(steps):
            plan = StepPlan([ScheduledChunk(r, r.num_computed_tokens, 1, "decode") for r in reqs])
            if before_each is not None:
                before.append(before_each())
            t0 = time.perf_counter()
            toks = executor.execute(plan)
            times.append(time.perf_counter() - t0)
            for r in reqs:
                r.num_computed_tokens += 1
                r.output_token_ids.append(toks[r])
        for r in reqs:
            pool.free(r)
        step_s = sorted(times)[len(times) // 2]
        rows.append({"batch": b, "step_ms": step_s * 1000, "tokens_per_s": b / step_s,
                     "ms_per_token": step_s * 1000 / b, "best_ms": min(times) * 1000,
                     "times_ms": [t * 1000 for t in times], "before_each": before})
        if progress is not None:
            progress((i + 1) / len(batch_sizes), f"batch {b}: {step_s * 1000:.1f} ms a step")
    return rows


TIMED_BUDGET = 2048     # time_scheduling's token budget: its step runs the requests whose prompts fill it


def time_scheduling(n_waiting: int = 1000, order: str = "fcfs", reps: int = 30) -> tuple[float, int]:
    """The median time of one Scheduler.schedule() with `n_waiting` requests waiting (no model:
    the scheduler alone), after a first step admitted what its slots and token budget allow; and how
    many requests ran in the step timed (as many as TIMED_BUDGET tokens of their prompts hold).
    Only the scheduler's work is timed: the call runs with Python's garbage collector paused, as
    `timeit` times (the requests made just before it would otherwise set off a collection inside it
    about one time in two), and the last repetition's step is let go before it, not inside it."""
    times, plan = [], None
    for rep in range(reps):
        pool = BlockPool(4096, 16)
        s = Scheduler(SchedulerPolicy(order=order, max_num_seqs=64, max_num_batched_tokens=TIMED_BUDGET), pool)
        def add(i: int) -> None:
            s.add(Request(f"r{i}", [1] * (16 + i % 200), 8 + i % 100, arrival_s=i * 1e-3, tenant=f"t{i % 4}",
                          priority=i % 3))
        for i in range(64):
            add(i)
        s.schedule(1.0)                                    # admits the first batch
        for i in range(64, 64 + n_waiting - len(s.waiting)):
            add(i)                                         # then exactly n_waiting wait
        plan = None                                        # the last step's plan is freed here
        gc.disable()
        try:
            t = time.perf_counter()
            plan = s.schedule(2.0)
            times.append(time.perf_counter() - t)
        finally:
            gc.enable()
    return statistics.median(times) * 1000, len(plan.chunks)
