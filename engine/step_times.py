"""Time a few real decode steps of a loaded model on this machine (for the About page).

Runs the real engine (packed forward, paged KV) on stand-in prompts: for each batch size,
prefill the batch, then time the decode steps that follow and report their median.
"""
from __future__ import annotations

import random
import statistics
import time

from engine.config import EngineConfig, SchedulerPolicy
from engine.engine import build_engine
from engine.request import Request

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
        steps = [s for s in engine.steps if s.prefill_tokens == 0 and s.running == b]
        times = [s.duration_s * 1000 for s in steps[1:]] or [s.duration_s * 1000 for s in steps]
        decode[b] = statistics.median(times) if times else float("nan")
        if b == 1:
            prefill = next((s.duration_s * 1000 for s in engine.steps if s.prefill_tokens), None)
    return {"decode_ms": decode, "prefill_ms": prefill, "prompt_tokens": PROMPT_TOKENS,
            "seconds": time.perf_counter() - t0}
