"""The engine loop: arrivals -> schedule -> execute -> record.

One call to `step()` is one engine step. The policy is read once at the start of the step,
so `set_policy()` from another thread (a slider) takes effect on the very next step.
Everything a chart needs is appended to plain lists (`steps`, `events`, `marks`) that a
reader may copy at any time.

A bad request costs only itself: an error in a step is traced to the request that caused it
(see `_run_isolating`), that request fails with the reason, the others get the tokens they
would have got anyway, and nothing escapes `step()` or `run()`. Every request that ends, for
whatever reason, gives its KV blocks back to the pool.
"""
from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass

from .config import SchedulerPolicy
from .executor import Executor
from .kv_cache import BlockPool
from .marks import PolicyMark
from .metrics import SLO, Counts, Retired
from .ngram import propose
from .speculative import accept
from .request import Event, EventKind, Request, Status
from .scheduler import Scheduler, ScheduledChunk, StepPlan
from .step_model import step_shape


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
    prefix_queries: int = 0                          # tokens looked up in the prefix cache this step
    prefix_hits: tuple[tuple[str, int], ...] = ()    # (request id, prompt tokens the cache saved it)
    # speculative decoding: (request id, tokens drafted, tokens of them accepted) for each request
    # whose drafts were checked in this step; rejected = drafted - accepted
    drafts: tuple[tuple[str, int, int], ...] = ()
    # This step's batch limit, and the whole run's counts at its end (Engine.counts): arrived =
    # waiting + running + finished + rejected + failed + aborted, where `running` counts the
    # requests holding a batch slot once the step is done (`members` are the ones that ran in it).
    max_num_seqs: int = 0
    arrived: int = 0
    finished: int = 0
    rejected: int = 0
    failed: int = 0
    aborted: int = 0

    @property
    def duration_s(self) -> float:
        return self.t_end_s - self.t_start_s


class Engine:
    def __init__(self, executor: Executor, clock, policy: SchedulerPolicy, pool: BlockPool,
                 max_model_len: int = 2048, tokenizer=None, eos_token_id: int | None = None,
                 keep_steps: int | None = None, drafter=None):
        """`keep_steps`: keep only the latest steps, and the events and ended requests of their
        time span (a live run); None keeps everything (a finished run's files). `drafter`: what
        guesses tokens ahead for speculative decoding (None: the n-gram lookup, engine/core/ngram.py)."""
        self.executor = executor
        self.clock = clock
        self.pool = pool
        self.scheduler = Scheduler(policy, pool, max_model_len, drafter or propose)
        self.tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self._lock = threading.Lock()
        self._stepping = threading.RLock()   # held through a step, so abort() lands between steps
        self.pending: list[Request] = []     # submitted, arrival time not reached yet (sorted)
        self.requests: dict[str, Request] = {}       # by id: the first request with each id
        self.rejected_duplicates: list[Request] = []  # later requests with an id already taken
        self.steps: list[StepRecord] = []
        self.events: list[Event] = []
        self.marks: list[PolicyMark] = []
        self.keep_steps = keep_steps
        self.retired = Retired()             # exact counts of what left the window
        self.arrived = 0                     # requests whose arrival came (or that ended before it)
        # step_observer(shape, ms): told each real step's shape and its time since the step before
        # ended, when the engine went straight on (engine.step_fit records them); None: nobody asks
        self.step_observer = None
        self._went_on_from: float | None = None
        self.ended: dict[Status, int] = {}   # requests ended, by status

    # ----- inputs -----

    @property
    def policy(self) -> SchedulerPolicy:
        """The live policy; its one copy is the scheduler's."""
        return self.scheduler.policy

    def set_policy(self, policy: SchedulerPolicy, mark: bool = True) -> None:
        """Swap the live policy (checked once, by the scheduler); it applies from the next step and
        is marked on the time axis. mark=False: the caller marks it, with what else it changed at
        the same moment (one mark for one decision)."""
        with self._lock:
            before = self.policy.to_dict()
            changes = self.scheduler.set_policy(policy)
        if changes and mark:
            after = policy.to_dict()
            self.mark(*changes, knobs=tuple(k for k in before if before[k] != after[k]))

    def mark(self, *changes: str, knobs: tuple[str, ...] = ()) -> None:
        """Mark the time axis at the next step with what changed ('max_num_seqs 8→2', in words;
        `knobs`: their names, one per change, where known): the one way a mark is made."""
        if not changes:
            return
        with self._lock:
            self.marks.append(PolicyMark.of(self.step_count, self.clock.now(), changes, knobs))

    def submit(self, req: Request) -> None:
        """Add a request that arrives at `req.arrival_s` (clock time). Raises ValueError for a
        duplicate id, or an arrival time that is not a finite number (it could never be ordered)."""
        if isinstance(req.arrival_s, bool) or not isinstance(req.arrival_s, (int, float)) \
                or not math.isfinite(req.arrival_s):
            raise ValueError(f"arrival_s {req.arrival_s!r} is not allowed (a finite number of seconds)")
        with self._lock:
            if req.id in self.requests:
                raise ValueError(f"duplicate request id {req.id!r}")
            self.requests[req.id] = req
            keys = [r.arrival_s for r in self.pending]
            self.pending.insert(bisect.bisect_right(keys, req.arrival_s), req)

    def reject(self, req: Request, reason: str) -> None:
        """Record a request that could not even be built (bad workload line, prompt too long...).
        One whose id is already taken (a duplicate) keeps its own row in `rejected_duplicates`."""
        req.status, req.error = Status.REJECTED, reason
        with self._lock:
            if self.requests.setdefault(req.id, req) is not req:
                self.rejected_duplicates.append(req)
        self.arrived += 1
        self._count_end(Status.REJECTED)
        self.events.append(Event(self.clock.now(), EventKind.REJECTED, req.id, reason))

    def all_requests(self) -> list[Request]:
        """One row per request given to the engine: every id once, in submission order, then the
        rejected duplicates in theirs. Requests in = rows out (the requests.csv writer reads this)."""
        with self._lock:
            return [*self.requests.values(), *self.rejected_duplicates]

    def abort(self, req_or_id: Request | str, reason: str) -> bool:
        """End a request that has not finished yet (not yet arrived, waiting or running) with
        status "aborted" and the reason; its KV blocks are freed. From any thread: it waits for
        the step in progress to end. Returns False when the request is unknown or already ended."""
        with self._stepping:
            req = self.requests.get(req_or_id) if isinstance(req_or_id, str) else req_or_id
            if req is None or req.done:
                return False
            with self._lock:
                if req in self.pending:
                    self.pending.remove(req)
                    self.arrived += 1            # it ends before its arrival: counted as both
            self._end(req, Status.ABORTED, self.clock.now(), reason)
            return True

    # ----- the loop -----

    @property
    def step_count(self) -> int:
        """Steps taken so far, the ones that left the window included."""
        return self.retired.steps + len(self.steps)

    def counts(self) -> Counts:
        """The whole run's requests as they stand now; they always add up (Counts.adds_up).
        Read between steps: from the engine's thread, or under the lock its owner steps with."""
        e = self.ended
        return Counts(self.arrived, len(self.scheduler.waiting), len(self.scheduler.running),
                      e.get(Status.FINISHED, 0), e.get(Status.REJECTED, 0), e.get(Status.FAILED, 0),
                      e.get(Status.ABORTED, 0))

    def has_work(self) -> bool:
        return bool(self.pending) or self.scheduler.has_work()

    def next_wake_s(self) -> float | None:
        """When something can next happen if this step had nothing to run."""
        times = [t for t in (self.pending[0].arrival_s if self.pending else None,
                             self.scheduler.wake_at_s()) if t is not None]
        return min(times) if times else None

    def step(self) -> StepRecord | None:
        """Run one engine step; None when there was nothing to run right now."""
        with self._stepping:
            rec = self._step()
            if rec is None:
                self._went_on_from = None        # idle: the next step's time starts afresh
            return rec

    def _step(self) -> StepRecord | None:
        now = self.clock.now()
        self._admit_arrivals(now)
        try:
            plan = self.scheduler.schedule(now)
        except Exception as exc:  # no request to blame: all the scheduler holds fail; the engine goes on
            reason = f"step {self.step_count} could not be scheduled: {_describe(exc)}"
            for req in [*self.scheduler.waiting, *self.scheduler.running]:
                self._end(req, Status.FAILED, now, reason)
            return None
        for req, reason in plan.rejected:
            self._count_end(Status.REJECTED)
            self.events.append(Event(now, EventKind.REJECTED, req.id, reason))
        for req in plan.preempted:
            why = ("max_num_seqs lowered below the batch" if req in plan.over_limit else "KV cache full")
            self.events.append(Event(now, EventKind.PREEMPTED, req.id, f"{why}: recompute later"))
        if not plan.chunks:
            return None

        shape = step_shape(plan) if self.step_observer is not None else None   # before the tokens change it
        t0 = self.clock.now()
        tokens, failed = self._run_isolating(plan.chunks, self.step_count)
        t1 = self.clock.now()

        failed_ids: dict[str, list[str]] = {}    # reason -> ids, for the step's error column
        drafts = []                               # (id, drafted, accepted) of each chunk with drafts
        for c in plan.chunks:
            req = c.request
            if req.first_scheduled_s is None:
                req.first_scheduled_s = t0
                self.events.append(Event(t0, EventKind.SCHEDULED, req.id))
            reason = failed.get(req) or self._commit(c, tokens, t1, drafts)
            if reason and not req.done:
                self._end(req, Status.FAILED, t1, reason)
                failed_ids.setdefault(reason, []).append(req.id)
        error = "; ".join(f"{reason} ({', '.join(ids)})" for reason, ids in failed_ids.items())

        n = self.counts()
        rec = StepRecord(
            step=self.step_count, t_start_s=t0, t_end_s=t1,
            waiting=n.waiting, running=n.running,
            prefill_tokens=plan.prefill_tokens, decode_tokens=plan.decode_tokens,
            kv_used_blocks=self.pool.used_blocks, kv_total_blocks=self.pool.capacity_blocks,
            members=tuple((c.request.id, c.phase, c.num_tokens) for c in plan.chunks),
            preempted=len(plan.preempted), error=error, prefix_queries=plan.prefix_queries,
            prefix_hits=tuple((r.id, hit) for r, hit in plan.prefix_hits), drafts=tuple(drafts),
            max_num_seqs=plan.policy.max_num_seqs,
            arrived=n.arrived, finished=n.finished, rejected=n.rejected, failed=n.failed,
            aborted=n.aborted)
        self.steps.append(rec)
        self._forget_old()
        if shape is not None and self._went_on_from is not None and not error:
            self.step_observer(shape, 1000 * (t1 - self._went_on_from))
        self._went_on_from = t1
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

    def _run_isolating(self, chunks: list[ScheduledChunk], step_no: int
                       ) -> tuple[dict[Request, int], dict[Request, str]]:
        """Run the chunks; if that raises, find the request that caused it, so only it fails.

        Returns the sampled tokens, and why each failed request failed. The search splits a
        failing batch in halves and runs each again, down to single requests: a request that
        fails on its own is the culprit. Retrying is safe: a chunk writes KV only at its own
        request's positions, which no other request reads, a retry writes the same positions
        again, and num_computed_tokens moves only after a success. If both halves succeed, the
        error belonged to the batch as a whole (out of memory, a device error): it all fails.
        Cost: none for a clean step; each bad request adds at most 2*log2(n) forwards (two
        halves per level) carrying fewer than twice the step's tokens; an error that every
        pair of requests hits costs at most 2n-1 forwards in all.
        """
        try:
            return self.executor.execute(StepPlan(chunks=chunks)), {}
        except Exception as exc:
            error = _describe(exc)
        if len(chunks) == 1:
            return {}, {chunks[0].request: f"step {step_no} failed for this request: {error}"}
        half = len(chunks) // 2
        tokens, failed = self._run_isolating(chunks[:half], step_no)
        tokens2, failed2 = self._run_isolating(chunks[half:], step_no)
        if not failed and not failed2:
            return {}, {c.request: f"step {step_no} failed: {error}" for c in chunks}
        return tokens | tokens2, failed | failed2

    def _commit(self, c: ScheduledChunk, tokens: dict[Request, int | list[int]], t: float, drafts: list) -> str:
        """Take in a chunk that ran: its KV is now computed, and its token if it sampled one (with
        drafts: the accepted ones, then the model's, and (id, drafted, accepted) onto `drafts`).
        Returns why the request must fail instead ('' when it need not)."""
        req = c.request
        if c.samples and req not in tokens:
            return "the executor returned no token for it"
        try:
            new = accept(c.draft, tokens[req]) if c.draft else [tokens[req]] if c.samples else []
            if c.draft:
                drafts.append((req.id, len(c.draft), len(new) - 1))
            # KV stays for the chunk's real tokens and the accepted drafts; the blocks taken only
            # for rejected drafts go back to the pool (their slots in kept blocks are written over)
            req.num_computed_tokens += c.num_tokens - len(c.draft) + max(len(new) - 1, 0)
            if c.draft:
                self.pool.trim(req)
            for token in new:
                if not req.done:                # (an accepted draft may have been its EOS)
                    self._append_token(req, token, t)
        except Exception as exc:  # a field nothing can compute with, from the Python API
            return f"taking its token failed: {_describe(exc)}"
        return ""

    def _admit_arrivals(self, now: float) -> None:
        with self._lock:
            i = bisect.bisect_right([r.arrival_s for r in self.pending], now)
            due, self.pending = self.pending[:i], self.pending[i:]
        for req in due:
            self.arrived += 1
            try:
                reason = self.scheduler.add(req)
            except Exception as exc:  # a field the scheduler cannot compute with: refuse it alone
                reason = f"could not be queued: {_describe(exc)}"
                req.status, req.error = Status.REJECTED, reason
            if reason:
                self._count_end(Status.REJECTED)
            kind = EventKind.REJECTED if reason else EventKind.QUEUED
            self.events.append(Event(now, kind, req.id, reason or ""))

    def _forget_old(self) -> None:
        """Past keep_steps, drop the oldest steps, then the events and ended requests from before
        the first step kept, adding them to `retired`. It waits until the window is 10% over, so
        the cost is spread over many steps."""
        if self.keep_steps is None or len(self.steps) <= self.keep_steps * 1.1:
            return
        gone = len(self.steps) - self.keep_steps
        for s in self.steps[:gone]:
            self.retired.add_step(s)
        del self.steps[:gone]
        cutoff = self.steps[0].t_start_s
        n = 0
        while n < len(self.events) and self.events[n].t_s < cutoff:
            n += 1
        del self.events[:n]
        slo = SLO(self.policy.ttft_slo_s, self.policy.tpot_slo_s)
        with self._lock:
            ended = [r for r in self.requests.values() if r.done and
                     (r.finish_s if r.finish_s is not None else r.arrival_s) < cutoff]
            for r in ended:
                self.retired.add_request(r, slo)
                del self.requests[r.id]

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
        """Finished, failed or aborted: out of the scheduler, its KV blocks back to the pool."""
        self.scheduler.finish(req)
        try:
            req.output_text = self.decode(req)
        except Exception as exc:  # a tokenizer that chokes on this output fails this request only
            req.output_text = ""
            if status is Status.FINISHED:
                status, error = Status.FAILED, f"decoding its output failed: {_describe(exc)}"
        req.status, req.finish_s, req.error = status, t, error
        self._count_end(status)
        self.events.append(Event(t, _END_EVENT[status], req.id, error))

    def _count_end(self, status: Status) -> None:
        self.ended[status] = self.ended.get(status, 0) + 1

    def decode(self, req: Request) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(req.output_token_ids, skip_special_tokens=True)


_END_EVENT = {Status.FINISHED: EventKind.FINISHED, Status.FAILED: EventKind.FAILED,
              Status.ABORTED: EventKind.ABORTED}


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
