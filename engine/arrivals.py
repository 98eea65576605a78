"""Arrivals: the one request generator.

An ArrivalFeed draws a workload's requests in the order they arrive, each from one seeded
generator: the gap since the previous arrival, then the request's prompt length, output
length, tenant and prompt tokens. A live run (the Playground) asks it step by step for the
requests due by now; a blocking run (the CLI, the labs) drains it at once (`build_requests`).
The draws are the same either way, so the same seed and settings give the same requests.
With continuous traffic (WorkloadSpec.continuous and a rate above 0) the feed never runs out:
only a live run can take it, and draining it at once is refused.
"""
from __future__ import annotations

import math
import random

from .request import Request
from .workload import PromptMaker, WorkloadSpec, tenant_name


class ArrivalFeed:
    """Draws arrivals on the fly from the current WorkloadSpec; a new spec applies from now on."""

    def __init__(self, spec: WorkloadSpec, prompts: PromptMaker | None = None):
        """Without a PromptMaker the prompt ids are stand-ins (enough for the cost model)."""
        self.prompts = prompts
        self.count = 0
        self.set_spec(spec, spec.start_s)

    def set_spec(self, spec: WorkloadSpec, now_s: float) -> None:
        self.spec = spec.validate()
        self.rng = random.Random(f"{spec.seed}-{self.count}")
        self.next_s = now_s + self._gap() if spec.rate > 0 else now_s

    def _gap(self) -> float:
        """Gamma-distributed, mean 1/rate; shape 1/burstiness² (shape 1 = exponential = Poisson)."""
        s = self.spec
        shape = 1.0 / s.burstiness ** 2
        return self.rng.gammavariate(shape, 1.0 / (s.rate * shape))

    @property
    def exhausted(self) -> bool:
        """Every request has arrived (never, with continuous traffic)."""
        return not self.spec.endless and self.count >= self.spec.num_requests

    def due(self, now_s: float) -> list[Request]:
        """Requests arriving up to `now_s` (rate 0 = the rest of the workload, all at once)."""
        if self.spec.endless and not math.isfinite(now_s):
            raise ValueError(f"continuous traffic (continuous=true, rate {self.spec.rate:g} req/s) "
                             "never runs out, so it cannot be drawn all at once: allowed here is "
                             "continuous=false with num_requests 0–1,000,000")
        out = []
        while not self.exhausted and self.next_s <= now_s:
            out.append(self._make(self.next_s))
            if self.spec.rate > 0:
                self.next_s += self._gap()
        return out

    def _make(self, t: float) -> Request:
        s, rng, i = self.spec, self.rng, self.count
        self.count += 1
        plen, olen = s.prompt_len.draw(rng, i), s.output_len.draw(rng, i)
        # tenant-a is the heavy one: half the traffic
        t_idx = 0 if s.tenants == 1 or rng.random() < 0.5 else rng.randint(1, s.tenants - 1)
        # The prompt's content draws from a stream of its own: lengths, arrivals and tenants are then
        # the same whether the prompts are real text or stand-ins (a simulated run draws the real
        # run's requests)
        words = random.Random(f"{s.seed}-prompt-{i}")
        ids = self.prompts.make(plen, words) if self.prompts else [words.randint(100, 30000) for _ in range(plen)]
        return Request(id=f"{s.id_prefix}{i}", prompt_token_ids=ids, max_new_tokens=olen, arrival_s=t,
                       tenant=tenant_name(t_idx), priority=t_idx)


def build_requests(spec: WorkloadSpec, prompts: PromptMaker | None = None) -> list[Request]:
    """The whole workload at once: an ArrivalFeed drained to its end (ValueError for continuous traffic)."""
    return ArrivalFeed(spec, prompts).due(math.inf)
