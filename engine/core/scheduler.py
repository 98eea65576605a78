"""The scheduler: given the queues, the live policy and the KV pool, decide one step.

Pure Python, no torch: the same code drives the real model and the cost model.

Every step, in `continuous` mode (iteration-level batching, as in vLLM v1):
  - running requests each get their next prefill chunk or one decode token, while the token
    budget lasts; if the KV pool is out of blocks, the most recently admitted request (or,
    under `priority`, the least important one) is preempted: its blocks are freed and it
    goes back to the front of the waiting queue (recompute).
  - waiting requests are admitted in the policy's order, while there is a free slot
    (max_num_seqs), budget (max_num_batched_tokens) and KV blocks.
`step_priority` says which of the two fills the token budget first:
  - decode_first (vLLM v1): running requests first, waiting ones get what is left, and
    nobody is admitted in a step that had to preempt.
  - prefill_first (older engines, transformers' prefill-first scheduler): prompt work first
    (prompts already being prefilled in chunks, then waiting prompts, admitted), and decoding
    requests get what is left; a preemption never throws out a prompt admitted in that step.
In `static` mode (request-level batching) nobody joins a batch in flight: a new batch is
formed only when the previous one has fully finished, and only once max_num_seqs
requests wait or the oldest has waited max_wait_ms.

Lowering max_num_seqs below the requests running preempts the newest of them (under
`priority`, the least important) at the next step, as a full KV cache does: they go back to
the front of the waiting queue and redo their prompt once a slot is free. So every step runs
at most the limit in force, and a request either holds a slot or waits: none is held aside.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .config import Mode, Order, SchedulerPolicy, SpeculativeMethod, StepPriority
from .kv_cache import BlockPool, blocks_for
from .ngram import propose
from .request import Request, Status
from .waiting import WaitingQueue


@dataclass(slots=True)
class ScheduledChunk:
    request: Request
    start: int          # position of the first token in this chunk (= num_computed_tokens)
    num_tokens: int
    phase: str          # "prefill" (prompt, chunk or recompute) or "decode" (one new token, and any drafts)
    draft: tuple[int, ...] = ()   # tokens guessed ahead (speculative decoding), the chunk's last ones

    @property
    def samples(self) -> bool:
        """Does this chunk reach the request's last token, so a next token is sampled?"""
        return self.start + self.num_tokens - len(self.draft) == self.request.num_tokens

    @property
    def logit_rows(self) -> int:
        """Rows that go through the vocabulary head: 1 for a chunk that samples, 1 + its drafts for
        one that verifies drafts (the model's token at every drafted position), 0 otherwise."""
        return (1 + len(self.draft)) if self.samples else 0

    @property
    def token_ids(self) -> list[int]:
        """The tokens this chunk runs: its share of the request's tokens, then its drafts."""
        return self.request.token_ids(self.start, self.num_tokens - len(self.draft)) + list(self.draft)


@dataclass(slots=True)
class StepPlan:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    over_limit: list[Request] = field(default_factory=list)   # of `preempted`: max_num_seqs was lowered
    rejected: list[tuple[Request, str]] = field(default_factory=list)
    note: str = ""      # why the step is empty or partial, in plain words
    prefix_queries: int = 0                  # tokens looked up in the prefix cache by requests starting now
    prefix_hits: list[tuple[Request, int]] = field(default_factory=list)   # (request, tokens it found there)
    policy: SchedulerPolicy | None = None    # the policy this step was planned under

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks if c.phase == "prefill")

    @property
    def decode_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks if c.phase == "decode")

    @property
    def draft_tokens(self) -> int:
        return sum(len(c.draft) for c in self.chunks)


class Scheduler:
    def __init__(self, policy: SchedulerPolicy, pool: BlockPool, max_model_len: int = 2048, drafter=propose):
        # The live policy: this is its one copy, checked once as it is set (set_policy). A step reads
        # it once as it starts (schedule), so a policy set from another thread applies from the next.
        self.policy = policy.validate()
        self.pool = pool
        self.max_model_len = max_model_len
        self.waiting = WaitingQueue()          # preempted first, then arrivals in order (engine/core/waiting.py)
        self.running: list[Request] = []
        self.tenant_service: dict[str, int] = defaultdict(int)   # tokens served per tenant ("fair")
        # drafter(tokens, min_n, max_n, k) -> drafted tokens: the n-gram lookup (engine/core/ngram.py),
        # or the simulator's stand-in where no real tokens exist (engine/core/executor.py)
        self.drafter = drafter

    # ----- requests in and out -----

    def add(self, req: Request) -> str | None:
        """Queue a request; return a rejection reason instead if it can never be served."""
        reason = self._never_fits(req, self.policy) or self._queue_full()
        if reason:
            req.status = Status.REJECTED
            req.error = reason
            return reason
        waiting_tenants = self.waiting.tenants()
        if req.tenant not in waiting_tenants and not any(r.tenant == req.tenant for r in self.running):
            # A tenant returning from idle starts level with the least-served active tenant,
            # so "fair" does not hand it the whole engine to catch up on time it did not ask for.
            active = waiting_tenants | {r.tenant for r in self.running}
            floor = min((self.tenant_service[t] for t in active), default=0)
            self.tenant_service[req.tenant] = max(self.tenant_service[req.tenant], floor)
        req.status = Status.WAITING
        self.waiting.append(req)
        return None

    def finish(self, req: Request) -> None:
        """Remove a finished (or failed) request from the running set and free its KV blocks."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.pool.free(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def wake_at_s(self) -> float | None:
        """In static mode with a batch forming: the time the oldest request's wait runs out."""
        p = self.policy
        if p.mode == Mode.STATIC and not self.running and self.waiting:
            return min(r.arrival_s for r in self.waiting) + p.max_wait_ms / 1000
        return None

    # ----- one step -----

    def set_policy(self, policy: SchedulerPolicy) -> list[str]:
        """Make `policy` the live one (checked here, once); the knobs it changes, in words."""
        policy.validate()
        changes = self.policy.diff(policy)
        self.policy = policy
        return changes

    def schedule(self, now_s: float) -> StepPlan:
        p = self.policy                         # read once: this step's policy
        self.pool.set_capacity_tokens(p.kv_capacity_tokens)
        self.pool.caching = p.enable_prefix_caching
        if p.enable_prefix_caching:
            for r in self.running:              # blocks filled by the last step join the cache
                self.pool.cache_computed(r)
        plan = StepPlan(policy=p)
        budget = p.max_num_batched_tokens

        # Static mode: a new batch forms only when the last one is gone.
        admit = p.mode == Mode.CONTINUOUS
        if p.mode == Mode.STATIC and not self.running and self.waiting:
            oldest = min(r.arrival_s for r in self.waiting)
            oldest_wait_ms = (now_s - oldest) * 1000
            # The same sum as wake_at_s: (now - oldest) * 1000 can round just below max_wait_ms
            # at the very time wake_at_s named, and a virtual clock would then wait forever.
            if len(self.waiting) >= p.max_num_seqs or now_s >= oldest + p.max_wait_ms / 1000:
                admit = True
            else:
                plan.note = (f"static batch forming: {len(self.waiting)}/{p.max_num_seqs} waiting, "
                             f"oldest {oldest_wait_ms:.0f}/{p.max_wait_ms:.0f} ms")

        while len(self.running) > p.max_num_seqs:   # max_num_seqs was lowered below the batch
            victim = self._pick_victim(self.running, p)
            self._preempt(victim, plan)
            plan.over_limit.append(victim)

        running = list(self.running)             # admitted before this step
        if p.step_priority == StepPriority.PREFILL_FIRST:
            prompts = [r for r in running if r.in_prefill]
            budget = self._schedule_running(plan, budget, prompts, running)
            if admit and not plan.preempted:
                budget = self._admit_waiting(plan, budget, now_s)
            self._schedule_running(plan, budget, [r for r in running if not r.in_prefill], running)
        else:
            budget = self._schedule_running(plan, budget, running, running)
            if admit and not plan.preempted:     # as in vLLM: no admissions in a step that preempted
                self._admit_waiting(plan, budget, now_s)

        for c in plan.chunks:
            self.tenant_service[c.request.tenant] += c.num_tokens
        assert len(plan.chunks) <= p.max_num_seqs
        assert plan.num_tokens <= p.max_num_batched_tokens
        return plan

    def _schedule_running(self, plan: StepPlan, budget: int, requests: list[Request],
                          running: list[Request]) -> int:
        """The next chunk or token of each of `requests`; returns the budget left. When the KV
        pool is full, a victim is preempted among `running` (the requests admitted before this
        step), so a prompt admitted in this very step is never thrown out again."""
        admitted_before = set(running)
        for req in requests:
            if req.status is not Status.RUNNING:        # preempted earlier in this step
                continue
            n = self._chunk_size(req, budget, plan.policy)
            if n == 0:
                continue
            decoding = n == 1 and req.remaining_tokens == 1 and bool(req.output_token_ids)
            draft = self._draft(req, budget - 1, plan.policy) if decoding else ()
            n += len(draft)
            if self.pool.blocks_needed(req, n):          # a decode token mostly fits its last block
                while not self.pool.can_allocate(req, n):
                    victim = self._pick_victim([r for r in self.running if r in admitted_before], plan.policy)
                    budget += self._preempt(victim, plan)
                    if victim is req:
                        break
                if req.status is not Status.RUNNING:    # it had to preempt itself
                    continue
                self.pool.allocate(req, n)
            plan.chunks.append(ScheduledChunk(req, req.num_computed_tokens, n, "decode" if decoding else "prefill",
                                              draft))
            budget -= n
        return budget

    def _admit_waiting(self, plan: StepPlan, budget: int, now_s: float) -> int:
        """Admit waiting requests in the policy's order; returns the budget left."""
        p = plan.policy
        admitted: set[Request] = set()
        slots = p.max_num_seqs - len(self.running)
        for req in self._ordered_waiting(now_s, p):
            if slots <= 0 or (budget <= 0 and p.mode == Mode.CONTINUOUS):
                break
            reason = self._never_fits(req, p)
            if reason:
                req.status, req.error = Status.REJECTED, reason
                plan.rejected.append((req, reason))
                admitted.add(req)              # leaves the waiting queue
                continue
            # Prefix caching: the leading blocks already cached count as computed, so the chunk
            # starts after them (the model runner reads their keys and values where they are).
            hit = self.pool.lookup(req) if p.enable_prefix_caching and not req.block_table else []
            req.num_computed_tokens = len(hit) * self.pool.block_size
            n = self._chunk_size(req, budget, plan.policy)
            if (n == 0 and p.mode == Mode.CONTINUOUS) or not self.pool.can_allocate(req, max(n, 1), hit):
                req.num_computed_tokens = 0     # wait for a step with room (keeps the order)
                break
            # (static: a member joins the batch now and prefills once the budget allows)
            if p.enable_prefix_caching:
                self.pool.take_cached(req, hit)
                plan.prefix_queries += req.num_tokens
                if hit:
                    plan.prefix_hits.append((req, req.num_cached_tokens))
            self.pool.allocate(req, n)
            req.status = Status.RUNNING
            req.was_preempted = False
            self.running.append(req)
            admitted.add(req)
            slots -= 1
            if n:
                plan.chunks.append(ScheduledChunk(req, req.num_computed_tokens, n, "prefill"))
                budget -= n
        for req in admitted:
            self.waiting.remove(req)
        return budget

    # ----- helpers -----

    def _draft(self, req: Request, room: int, p: SchedulerPolicy) -> tuple[int, ...]:
        """Speculative decoding: tokens guessed to follow `req`'s last one, to be checked in this
        step. As vLLM's scheduler does, drafted tokens count against the token budget and are cut
        to the `room` left in it. A draft never reaches past the request's max_new_tokens (the
        token checked after it would end the request anyway). Sampled requests get none: checking
        a guess against a sampled token takes vLLM's probabilistic rejection rule, not equality."""
        if p.speculative_method == SpeculativeMethod.OFF or req.temperature > 0:
            return ()
        k = min(p.num_speculative_tokens, room, req.max_new_tokens - len(req.output_token_ids) - 1)
        if k <= 0:
            return ()
        tokens = req.prompt_token_ids + req.output_token_ids
        return tuple(self.drafter(tokens, p.prompt_lookup_min, p.prompt_lookup_max, k)[:k])

    def _chunk_size(self, req: Request, budget: int, p: SchedulerPolicy) -> int:
        """Tokens `req` may run this step within `budget` (0 = not this step)."""
        n = req.remaining_tokens
        if n <= 0 or budget <= 0:
            return 0
        if n == 1:
            return 1
        if p.enable_chunked_prefill:
            cap = p.long_prefill_token_threshold or n
            return min(n, budget, cap)
        if n <= budget:
            return n
        if req.status is Status.RUNNING and n > p.max_num_batched_tokens:
            return budget   # admitted before the budget shrank below it: chunk rather than stall forever
        return 0

    def _pick_victim(self, candidates: list[Request], p: SchedulerPolicy) -> Request:
        if p.order == Order.PRIORITY:
            return max(candidates, key=lambda r: (r.priority, r.arrival_s))
        return candidates[-1]

    def _preempt(self, req: Request, plan: StepPlan) -> int:
        """Back to the front of the queue, its KV freed; returns the tokens it had been granted
        in this step, which go back to the budget."""
        granted = sum(c.num_tokens for c in plan.chunks if c.request is req)
        plan.chunks = [c for c in plan.chunks if c.request is not req]
        self.running.remove(req)
        self.pool.free(req)
        req.num_computed_tokens = 0
        req.status = Status.WAITING
        req.preemptions += 1
        req.was_preempted = True
        self.waiting.push_front(req)
        plan.preempted.append(req)
        return granted

    def _never_fits(self, req: Request, p: SchedulerPolicy) -> str:
        if req.prompt_tokens == 0:
            return "empty prompt"
        if req.max_new_tokens <= 0:
            return f"max_new_tokens must be at least 1 (got {req.max_new_tokens})"
        total = req.prompt_tokens + req.max_new_tokens
        if total > self.max_model_len:
            return (f"prompt ({req.prompt_tokens} tokens) + max_new_tokens ({req.max_new_tokens}) "
                    f"exceeds the model's context of {self.max_model_len} tokens")
        capacity = self.pool.capacity_blocks * self.pool.block_size
        if blocks_for(total, self.pool.block_size) > self.pool.capacity_blocks:
            return (f"needs {total} tokens of KV cache (prompt + max output) but the KV capacity "
                    f"is {capacity} tokens")
        if not p.enable_chunked_prefill and req.remaining_tokens > p.max_num_batched_tokens:
            return (f"prompt of {req.remaining_tokens} tokens exceeds the token budget of "
                    f"{p.max_num_batched_tokens} with chunked prefill off")
        return ""

    def _queue_full(self) -> str:
        limit = self.policy.max_waiting
        if limit and len(self.waiting) >= limit:
            return f"queue full: {len(self.waiting)} requests already waiting (max_waiting={limit})"
        return ""

    def _ordered_waiting(self, now_s: float, p: SchedulerPolicy):
        """Waiting requests in admission order, walked lazily; preempted requests always come first."""
        order = p.order
        if order == Order.FCFS:
            return self.waiting        # kept in arrival order; preempted ones were put at the front
        if order == Order.FAIR:            # least-served tenant first, then one request per tenant per round
            return self.waiting.round_robin(self.tenant_service)
        if order == Order.PRIORITY:
            key = lambda r: (not r.was_preempted, r.priority, r.arrival_s)
        elif order == Order.SJF:
            key = lambda r: (not r.was_preempted, r.total_work, r.arrival_s)
        else:  # edf: earliest TTFT deadline first
            slo = p.ttft_slo_s
            key = lambda r: (not r.was_preempted,
                             r.arrival_s + (r.ttft_slo_s if r.ttft_slo_s is not None else slo))
            order = (order, slo)
        return self.waiting.ranked(order, key)
