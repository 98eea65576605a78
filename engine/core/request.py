"""A request and its lifecycle.

A request's tokens are its prompt followed by what it has generated so far.
`num_computed_tokens` counts how many of those already have their keys and values in
the KV cache. Every step the scheduler gives a request `num_tokens - num_computed_tokens`
tokens of work at most: a whole prompt, a prefill chunk, or a single decode token. After
a preemption by recompute, `num_computed_tokens` drops to 0 and the request is prefilled
again (prompt and output so far) — the same code path, no special case.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Status(str, enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REJECTED = "rejected"    # never admitted: too long, queue full, cannot ever fit
    FAILED = "failed"        # admitted, then an error in a step it was part of
    ABORTED = "aborted"      # ended on request (a client gone, a run interrupted) before it finished


class EventKind(str, enum.Enum):
    QUEUED = "QUEUED"
    SCHEDULED = "SCHEDULED"
    PREEMPTED = "PREEMPTED"
    NEW_TOKEN = "NEW_TOKEN"
    FINISHED = "FINISHED"
    REJECTED = "REJECTED"
    FAILED = "FAILED"
    ABORTED = "ABORTED"


@dataclass(slots=True, frozen=True)
class Event:
    t_s: float
    kind: EventKind
    request_id: str
    detail: str = ""


@dataclass(slots=True, eq=False)
class Request:
    id: str
    prompt_token_ids: list[int]
    max_new_tokens: int
    arrival_s: float = 0.0
    tenant: str = "default"
    priority: int = 0            # lower number = more important (as in vLLM)
    ignore_eos: bool = True
    temperature: float = 0.0     # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    prompt: str | None = None
    ttft_slo_s: float | None = None  # this request's own TTFT target (deadline for "edf"); None = the policy's

    # --- state the engine fills in ---
    status: Status = Status.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0   # prompt tokens found in the prefix cache when it last started (vLLM's name)
    num_cached_blocks: int = 0   # leading blocks of block_table already in the prefix cache (kv_cache.py)
    block_hashes: list[int] = field(default_factory=list)   # chained keys of its full blocks (kv_cache.py)
    preemptions: int = 0
    was_preempted: bool = False  # waiting again after a preemption: goes to the front
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    token_times: list[float] = field(default_factory=list)
    error: str = ""
    output_text: str = ""

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def remaining_tokens(self) -> int:
        """Tokens that still need a forward pass before the next token can be sampled."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def in_prefill(self) -> bool:
        return self.remaining_tokens > 1

    @property
    def total_work(self) -> int:
        """Job size for shortest-job-first: prompt plus the tokens it may still generate."""
        return self.prompt_tokens + self.max_new_tokens

    @property
    def done(self) -> bool:
        return self.status in (Status.FINISHED, Status.REJECTED, Status.FAILED, Status.ABORTED)

    def token_ids(self, start: int, count: int) -> list[int]:
        """`count` tokens of prompt+output starting at position `start`."""
        p = self.prompt_tokens
        out = self.prompt_token_ids[start:start + count] if start < p else []
        if start + count > p:
            out = out + self.output_token_ids[max(0, start - p):start + count - p]
        return out
