"""Executors run a StepPlan. They never decide policy; the scheduler never touches torch.

The model's executor (engine/model/executor.py) runs the real model (packed forward over paged
KV) under a wall clock. CostModelExecutor, here, predicts the step time from its shape and advances a virtual clock:
the same scheduler, instantly, for sweeps and "what would this do on other hardware". Its
step model is a machine's calibrated profile (engine/core/step_model.py, engine/sim/profile.py), or
the labelled, hand-set `UNCALIBRATED` guess when there is none.
Both check a step's inputs before running it (`check_inputs`): a request that no model can
run raises here, and the engine fails that request alone.
"""
from __future__ import annotations

import math
import zlib
from typing import Protocol

from .clock import VirtualClock
from .request import Request
from .scheduler import StepPlan
from .step_model import UNCALIBRATED


def input_problem(req: Request, vocab_size: int) -> str:
    """Why no model can run `req` (its prompt or its sampling settings); '' when one can.

    The workload reader refuses such requests at the door; this stops one that got in another
    way (the Python API) from raising in the middle of a forward, or inside the sampler."""
    ids = req.prompt_token_ids
    if set(map(type, ids)) - {int} or (ids and not 0 <= min(ids) <= max(ids) < vocab_size):
        i, t = next((i, t) for i, t in enumerate(ids) if type(t) is not int or not 0 <= t < vocab_size)
        return f"token id {t!r} at position {i} is outside the vocabulary (integers 0 to {vocab_size - 1})"
    if not _is_real(req.temperature) or not 0 <= req.temperature < math.inf:
        return f"temperature {req.temperature!r} is not allowed (a finite number >= 0)"
    if not _is_real(req.top_p) or not 0 < req.top_p <= 1:
        return f"top_p {req.top_p!r} is not allowed (a number > 0 and <= 1)"
    if req.seed is not None and (isinstance(req.seed, bool) or not isinstance(req.seed, int)):
        return f"seed {req.seed!r} is not allowed (an integer, or none)"
    return ""


def check_inputs(plan: StepPlan, vocab_size: int) -> None:
    """Raise ValueError for the first request in the plan that no model can run, before any work
    is done. A request is checked as it starts (its first chunk); the tokens it adds are the model's."""
    for c in plan.chunks:
        problem = input_problem(c.request, vocab_size) if c.start == 0 else ""
        if problem:
            raise ValueError(problem)


def _is_real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class StepTimes(Protocol):
    def step_ms(self, plan: StepPlan) -> float:
        """The predicted duration of the step, in milliseconds."""
        ...


class Executor(Protocol):
    device: str
    dtype: str

    def execute(self, plan: StepPlan) -> dict[Request, int]:
        """Run the plan; return the sampled next token of every chunk that reaches its request's end."""
        ...


class CostModelExecutor:
    """Speculative decoding on the cost model: no real tokens exist, so the stand-in drafter
    (`draft`) always guesses k tokens, and each guess is accepted with the chance
    `draft_acceptance` (a property of the workload: near 1 where outputs copy their prompts,
    near 0 for free writing), until the first one rejected. The step's time comes from every
    token it verified, accepted or not."""
    device = "cost model"
    dtype = "n/a"

    def __init__(self, clock: VirtualClock, step_model: StepTimes | None = None, vocab_size: int = 49152,
                 eos_token_id: int | None = None, draft_acceptance: float = 0.0):
        self.clock = clock
        self.step_model = step_model or UNCALIBRATED
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.draft_acceptance = draft_acceptance

    def execute(self, plan: StepPlan) -> dict[Request, int | list[int]]:
        check_inputs(plan, self.vocab_size)
        self.clock.advance(self.step_model.step_ms(plan) / 1000)
        out = {}
        for c in plan.chunks:
            if not c.samples:
                continue
            req, pos = c.request, c.request.num_tokens
            if not c.draft:
                out[req] = self._stand_in(req.id, pos)
                continue
            # the model's token at each checked position: the draft's own while the dice accept it
            target = []
            for i, d in enumerate(c.draft):
                if self._chance(req.id, pos + i) >= self.draft_acceptance:
                    target.append((d + 1) % self.vocab_size if (d + 1) % self.vocab_size != self.eos_token_id
                                  else (d + 2) % self.vocab_size)
                    break
                target.append(d)
            target += [self._stand_in(req.id, pos + len(target))] * (len(c.draft) + 1 - len(target))
            out[req] = target
        return out

    def draft(self, tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
        """The stand-in drafter: k stand-in tokens (the lookup always finds a match here)."""
        return [self._stand_in(str(tokens[0]), len(tokens) + i) for i in range(k)]

    def _stand_in(self, key: str, pos: int) -> int:
        """A stand-in token, deterministic per request and position; never EOS."""
        t = (zlib.crc32(key.encode()) * 31 + pos) % self.vocab_size
        return t if t != self.eos_token_id else (t + 1) % self.vocab_size

    @staticmethod
    def _chance(key: str, pos: int) -> float:
        """A number in [0, 1), the same for a request and position on every run."""
        return zlib.crc32(f"{key}:{pos}".encode()) / 2 ** 32
