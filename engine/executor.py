"""Executors run a StepPlan. They never decide policy; the scheduler never touches torch.

ModelExecutor runs the real model (packed forward over paged KV) under a wall clock.
CostModelExecutor predicts the step time from its shape and advances a virtual clock:
the same scheduler, instantly, for sweeps and "what would this do on other hardware".
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Protocol

from .clock import VirtualClock
from .request import Request
from .scheduler import StepPlan


class Executor(Protocol):
    device: str
    dtype: str

    def execute(self, plan: StepPlan) -> dict[Request, int]:
        """Run the plan; return the sampled next token of every chunk that reaches its request's end."""
        ...


class ModelExecutor:
    def __init__(self, model, num_kv_blocks: int, block_size: int):
        from .runner import ModelRunner, SeqInput   # torch is imported only here
        self._SeqInput = SeqInput
        self.model = model
        self.runner = ModelRunner(model, num_kv_blocks, block_size)
        self.device = str(model.device)
        self.dtype = str(model.dtype).replace("torch.", "")

    def execute(self, plan: StepPlan) -> dict[Request, int]:
        seqs = [self._SeqInput(request_id=c.request.id,
                               token_ids=c.request.token_ids(c.start, c.num_tokens),
                               start_pos=c.start,
                               block_table=c.request.block_table,
                               sample=c.samples,
                               temperature=c.request.temperature,
                               top_p=c.request.top_p,
                               seed=c.request.seed)
                for c in plan.chunks]
        tokens = self.runner.run(seqs)
        return {c.request: t for c, t in zip(plan.chunks, tokens) if t is not None}


@dataclass(slots=True)
class StepCost:
    """step_ms = fixed + per_token * tokens + per_seq * sequences + per_context * context tokens read.

    The parameters are set by hand, roughly matching SmolLM2-135M in fp32 on a 2-core CPU.
    Fitting them to a machine's measured steps (a calibrated simulator) is future work.
    """
    fixed_ms: float = 20.0
    per_token_ms: float = 0.9
    per_seq_ms: float = 0.6
    per_context_ms: float = 0.002

    def step_ms(self, plan: StepPlan) -> float:
        context = sum(c.start + c.num_tokens for c in plan.chunks)
        return (self.fixed_ms + self.per_token_ms * plan.num_tokens
                + self.per_seq_ms * len(plan.chunks) + self.per_context_ms * context)


class CostModelExecutor:
    device = "cost model"
    dtype = "n/a"

    def __init__(self, clock: VirtualClock, cost: StepCost | None = None, vocab_size: int = 49152,
                 eos_token_id: int | None = None):
        self.clock = clock
        self.cost = cost or StepCost()
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id

    def execute(self, plan: StepPlan) -> dict[Request, int]:
        self.clock.advance(self.cost.step_ms(plan) / 1000)
        out = {}
        for c in plan.chunks:
            if c.samples:
                # A stand-in token, deterministic per request and position; never EOS.
                t = (zlib.crc32(c.request.id.encode()) * 31 + c.request.num_tokens) % self.vocab_size
                out[c.request] = t if t != self.eos_token_id else (t + 1) % self.vocab_size
        return out
