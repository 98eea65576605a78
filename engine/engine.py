"""The engine loop: arrivals -> schedule -> execute -> record.

One call to `step()` is one engine step. The policy is read once at the start of the step,
so `set_policy()` from another thread (a slider) takes effect on the very next step.
Everything a chart needs is appended to plain lists (`steps`, `events`, `marks`) that a
reader may copy at any time.
"""
from __future__ import annotations

import bisect
import threading
import traceback
from dataclasses import dataclass

from .config import SchedulerPolicy
from .executor import Executor
from .kv_cache import BlockPool
from .request import Event, EventKind, Request, Status
from .scheduler import Scheduler


@dataclass(slots=True, frozen=True)
class StepRecord:
    step: int
    t_start_s: float
    t_end_s: float
    waiting: int
    running: int
    prefill_tokens: int
    decode_tokens: int
    kv_used_blocks: int
    kv_total_blocks: int
    members: tuple[tuple[str, str, int], ...]   # (request id, phase, tokens)
    preempted: int = 0
    error: str = ""

    @property
    def duration_s(self) -> float:
        return self.t_end_s - self.t_start_s


@dataclass(slots=True, frozen=True)
class PolicyMark:
    step: int
    t_s: float
    label: str


class Engine:
    def __init__(self, executor: Executor, clock, policy: SchedulerPolicy, pool: BlockPool,
                 max_model_len: int = 2048, tokenizer=None, eos_token_id: int | None = None):
        self.executor = executor
        self.clock = clock
        self.pool = pool
        self.scheduler = Scheduler(policy, pool, max_model_len)
        self.tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self._policy = policy.validate()
        self._lock = threading.Lock()
        self.pending: list[Request] = []     # submitted, arrival time not reached yet (sorted)
        self.requests: dict[str, Request] = {}
        self.steps: list[StepRecord] = []
        self.events: list[Event] = []
        self.marks: list[PolicyMark] = []

    # ----- inputs -----

    @property
    def policy(self) -> SchedulerPolicy:
        return self._policy

    def set_policy(self, policy: SchedulerPolicy) -> None:
        """Swap the live policy; it applies from the next step and is marked on the time axis."""
        policy.validate()
        with self._lock:
            changes = self._policy.diff(policy)
            self._policy = policy
            if changes:
                self.marks.append(PolicyMark(len(self.steps), self.clock.now(), ", ".join(changes)))

    def submit(self, req: Request) -> None:
        """Add a request that arrives at `req.arrival_s` (clock time). Duplicate ids are rejected."""
        with self._lock:
            if req.id in self.requests:
                raise ValueError(f"duplicate request id {req.id!r}")
            self.requests[req.id] = req
            keys = [r.arrival_s for r in self.pending]
            self.pending.insert(bisect.bisect_right(keys, req.arrival_s), req)

    def reject(self, req: Request, reason: str) -> None:
        """Record a request that could not even be built (bad workload line, prompt too long...)."""
        req.status, req.error = Status.REJECTED, reason
        with self._lock:
            self.requests.setdefault(req.id, req)
        self.events.append(Event(self.clock.now(), EventKind.REJECTED, req.id, reason))

    # ----- the loop -----

    def has_work(self) -> bool:
        return bool(self.pending) or self.scheduler.has_work()

    def next_wake_s(self) -> float | None:
        """When something can next happen if this step had nothing to run."""
        times = [t for t in (self.pending[0].arrival_s if self.pending else None,
                             self.scheduler.wake_at_s()) if t is not None]
        return min(times) if times else None

    def step(self) -> StepRecord | None:
        """Run one engine step; None when there was nothing to run right now."""
        now = self.clock.now()
        self._admit_arrivals(now)
        policy = self._policy                    # read once: this step's policy
        plan = self.scheduler.schedule(now, policy)
        for req, reason in plan.rejected:
            self.events.append(Event(now, EventKind.REJECTED, req.id, reason))
        for req in plan.preempted:
            self.events.append(Event(now, EventKind.PREEMPTED, req.id, "KV cache full: recompute later"))
        if not plan.chunks:
            return None

        t0 = self.clock.now()
        error = ""
        try:
            tokens = self.executor.execute(plan)
        except Exception as exc:  # one bad step fails its own requests, visibly; the engine goes on
            error = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
            tokens = None
        t1 = self.clock.now()

        for c in plan.chunks:
            req = c.request
            if req.first_scheduled_s is None:
                req.first_scheduled_s = t0
                self.events.append(Event(t0, EventKind.SCHEDULED, req.id))
            if tokens is None:
                self._end(req, Status.FAILED, t1, f"step {len(self.steps)} failed: {error}")
                continue
            req.num_computed_tokens += c.num_tokens
            if c.samples:
                self._append_token(req, tokens[req], t1)

        rec = StepRecord(
            step=len(self.steps), t_start_s=t0, t_end_s=t1,
            waiting=len(self.scheduler.waiting),
            running=len(plan.chunks),
            prefill_tokens=plan.prefill_tokens, decode_tokens=plan.decode_tokens,
            kv_used_blocks=self.pool.used_blocks, kv_total_blocks=self.pool.capacity_blocks,
            members=tuple((c.request.id, c.phase, c.num_tokens) for c in plan.chunks),
            preempted=len(plan.preempted), error=error)
        self.steps.append(rec)
        return rec

    def run(self, on_step=None, should_stop=None) -> None:
        """Step until every request is done. Idle gaps are waited out on the clock."""
        while self.has_work():
            if should_stop is not None and should_stop():
                return
            rec = self.step()
            if rec is None:
                wake = self.next_wake_s()
                if wake is None:
                    break                            # nothing can run now and nothing will arrive
                self.clock.sleep_until(max(wake, self.clock.now()))
            elif on_step is not None:
                on_step(rec)

    # ----- internals -----

    def _admit_arrivals(self, now: float) -> None:
        with self._lock:
            i = bisect.bisect_right([r.arrival_s for r in self.pending], now)
            due, self.pending = self.pending[:i], self.pending[i:]
        for req in due:
            reason = self.scheduler.add(req)
            kind = EventKind.REJECTED if reason else EventKind.QUEUED
            self.events.append(Event(now, kind, req.id, reason or ""))

    def _append_token(self, req: Request, token: int, t: float) -> None:
        req.output_token_ids.append(token)
        req.token_times.append(t)
        if req.first_token_s is None:
            req.first_token_s = t
        self.events.append(Event(t, EventKind.NEW_TOKEN, req.id, str(token)))
        hit_eos = not req.ignore_eos and token == self.eos_token_id
        if len(req.output_token_ids) >= req.max_new_tokens or hit_eos:
            self._end(req, Status.FINISHED, t)

    def _end(self, req: Request, status: Status, t: float, error: str = "") -> None:
        req.status, req.finish_s, req.error = status, t, error
        self.scheduler.finish(req)
        if self.tokenizer is not None:
            req.output_text = self.decode(req)
        kind = EventKind.FINISHED if status is Status.FINISHED else EventKind.FAILED
        self.events.append(Event(t, kind, req.id, error))

    def decode(self, req: Request) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(req.output_token_ids, skip_special_tokens=True)

