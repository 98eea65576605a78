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

from ..core.request import Request
from .workload import PromptMaker, WorkloadSpec, tenant_name


STAND_IN_IDS = range(100, 30001)   # token ids a prompt without a PromptMaker is drawn from


class ArrivalFeed:
    """Draws arrivals on the fly from the current WorkloadSpec; a new spec applies from now on."""

    def __init__(self, spec: WorkloadSpec, prompts: PromptMaker | None = None):
        """Without a PromptMaker the prompt ids are stand-ins (enough for the cost model)."""
        self.prompts = prompts
        self.count = 0
        self.chats: dict[int, tuple[int, list]] = {}   # conversation -> (its system prompt, turns so far)
        self._systems: dict[tuple, list[int]] = {}       # (seed, index, length) -> a system prompt's tokens
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
        if s.shares_prefixes:
            ids = self._shared(i, plen, olen, words)
        else:
            ids = self.prompts.make(plen, words) if self.prompts else [words.randint(100, 30000) for _ in range(plen)]
        return Request(id=f"{s.id_prefix}{i}", prompt_token_ids=ids, max_new_tokens=olen, arrival_s=t,
                       tenant=tenant_name(t_idx), priority=t_idx)

    def _text(self, n: int, rng: random.Random) -> list[int]:
        """n tokens of text (stand-ins without a PromptMaker)."""
        return self.prompts.content(n, rng) if self.prompts else rng.choices(STAND_IN_IDS, k=n)

    def _system_prompt(self, k: int) -> list[int]:
        """The k-th shared system prompt of this seed (drawn once; the same for every request)."""
        s = self.spec
        key = (s.seed, k, s.system_prompt_tokens)
        if key not in self._systems:
            self._systems[key] = self._text(s.system_prompt_tokens, random.Random(f"{s.seed}-system-{k}"))
        return self._systems[key]

    def _shared(self, i: int, plen: int, olen: int, words: random.Random) -> list[int]:
        """The i-th prompt built from shared parts: a system prompt, then (in a conversation) the
        turns so far, then a new question of `plen` tokens. Which system prompt and conversation
        come from a stream of their own, so arrivals and lengths stay those of the same seed
        without sharing."""
        s = self.spec
        pick = random.Random(f"{s.seed}-share-{i}")
        system = pick.randrange(s.system_prompts) if s.system_prompts else None
        history: list = []
        if s.conversations:
            chat = pick.randrange(s.conversations)
            system, history = self.chats.get(chat, (system, []))
            if len(history) >= s.turns - 1:
                system, history = pick.randrange(s.system_prompts) if s.system_prompts else None, []
        sys_ids = None if system is None else self._system_prompt(system)
        question = self._text(plen, words)
        if s.conversations:
            self.chats[chat] = (system, history + [(question, self._text(olen, words))])
        if self.prompts:
            return self.prompts.chat(sys_ids, history, question)
        return (sys_ids or []) + [t for q, reply in history for t in q + reply] + question


def build_requests(spec: WorkloadSpec, prompts: PromptMaker | None = None) -> list[Request]:
    """The whole workload at once: an ArrivalFeed drained to its end (ValueError for continuous traffic)."""
    return ArrivalFeed(spec, prompts).due(math.inf)


class FedByArrivals:
    """What a run fed by an ArrivalFeed (`self.feed`) says of its arrivals, in this process or on a server."""
    feed: ArrivalFeed

    @property
    def arrived(self) -> int:
        return self.feed.count

    @property
    def exhausted(self) -> bool:
        return self.feed.exhausted
