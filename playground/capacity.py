"""What this machine can serve for a setup, read off its step model (engine/core/step_model.py).

- Capacity (requests/s): with B requests decoding together (max_num_seqs, or fewer when the KV
  cache cannot hold that many), every step moves each of them on by one token, and every new
  request's prompt rides along in some step and lengthens it. Per second the engine spends
  rate × output/B decode steps and rate prompts' worth of prefill, so in steady state
      rate = B / (output × decode_step(B) + B × prompt_cost)
  where prompt_cost is what one mean prompt adds to a step already holding B decodes.
- Unloaded TTFT: a lone request's prompt (in its chunks) plus the step that could be running
  when it arrives, for the mean prompt and for a long one (the 95th percentile of the prompts);
  unloaded TPOT: one decode step at batch 1.
- Under load: a decode step with every slot busy (full-batch TPOT), and that step with one
  prefill chunk riding along, the longest step a decoding request meets with chunked prefill.
- A static batch: its prompts, then its longest output; and that time per output token.

Means of the length distributions are those of the workload's own draws (engine.workload).
No Streamlit here.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from engine.core.step_model import StepModel, StepShape
from engine.runs.workload import LengthDist

from playground.setup import KNOBS, Setup

DRAWS = 2000     # lengths drawn to estimate a distribution's mean


@dataclass(frozen=True)
class Capacity:
    rate: float             # requests/s sustained at full batch
    ttft_s: float           # unloaded time to first token, mean prompt
    ttft_long_s: float      # unloaded time to first token, 95th-percentile prompt
    tpot_s: float           # unloaded time per output token
    full_tpot_s: float      # a decode step with every slot busy
    chunk_step_s: float     # that step with one prefill chunk in it
    batch_s: float          # one static batch: its prompts, then its longest output
    batch_tpot_s: float     # batch_s per mean output token
    slots: int              # requests that decode together (max_num_seqs, or what the KV cache holds)


def lengths(dist: LengthDist) -> tuple[float, int]:
    """The mean and the 95th percentile of the distribution's draws."""
    draws = sorted(dist.sample(random.Random(0), DRAWS))
    return statistics.fmean(draws), draws[int(0.95 * (len(draws) - 1))]


def chunk_size(setup: Setup) -> int:
    """The most prompt tokens one request prefills in a step."""
    if not setup.enable_chunked_prefill:
        return math.inf
    limit = setup.long_prefill_token_threshold or math.inf
    return min(setup.max_num_batched_tokens, limit)


def prefill_ms(model: StepModel, prompt: int, chunk: float) -> float:
    """A lone prompt of `prompt` tokens, prefilled in chunks of at most `chunk`."""
    total, start = 0.0, 0
    while start < prompt:
        n = int(min(chunk, prompt - start))
        pairs = n * start + n * (n + 1) // 2
        total += model.predict(StepShape(n, int(start + n == prompt), 0, pairs))
        start += n
    return total


def unloaded_ttft_ms(model: StepModel, prompt: int, chunk: float) -> float:
    return prefill_ms(model, prompt, chunk) + model.decode_ms(1, prompt)


def capacity(model: StepModel, setup: Setup) -> Capacity:
    spec = setup.workload()
    (prompt, long_prompt), (output, _) = lengths(spec.prompt_len), lengths(spec.output_len)
    prompt, chunk = round(prompt), chunk_size(setup)
    context = round(prompt + output / 2)
    slots = max(1, min(setup.max_num_seqs, setup.kv_capacity_tokens // (prompt + round(output))))
    decode_ms = model.decode_ms(slots, context)
    with_prompt = model.predict(StepShape(slots + prompt, slots + 1, slots * (context + 1),
                                          prompt * (prompt + 1) // 2))
    rate = 1000 * slots / (output * decode_ms + slots * (with_prompt - decode_ms))
    longest = spec.output_len.hi if spec.output_len.kind != "fixed" else spec.output_len.lo
    prefill_steps = math.ceil(prompt * slots / setup.max_num_batched_tokens)
    batch_ms = (model.predict(StepShape(prompt * slots, slots, 0, slots * prompt * (prompt + 1) // 2))
                + (prefill_steps - 1) * model.fixed_ms + longest * model.decode_ms(slots, prompt + longest // 2))
    n = int(min(chunk, prompt))
    chunk_step_ms = model.predict(StepShape(slots + n, slots, slots * (context + 1), n * (n + 1) // 2))
    return Capacity(rate=rate, ttft_s=unloaded_ttft_ms(model, prompt, chunk) / 1000,
                    ttft_long_s=unloaded_ttft_ms(model, long_prompt, chunk) / 1000,
                    tpot_s=model.decode_ms(1, context) / 1000, full_tpot_s=decode_ms / 1000,
                    chunk_step_s=chunk_step_ms / 1000, batch_s=batch_ms / 1000,
                    batch_tpot_s=batch_ms / 1000 / output, slots=slots)


def rate_slider_hi(model: StepModel) -> float:
    """Where the arrival-rate slider ends for an engine whose step times `model` predicts: the
    knob's own end, or, for an engine that serves more than half of that at the default setup (a
    simulated GPU), twice its capacity there, in tens of req/s, so it too can be driven past capacity."""
    twice = 2 * capacity(model, Setup()).rate
    return max(KNOBS["rate"].hi, 10.0 * math.ceil(twice / 10))
