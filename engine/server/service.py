"""The one engine thread behind the HTTP server.

Only this thread touches the engine. HTTP handlers (on the asyncio event loop) talk to it
through a queue, the inbox: "submit this request", "abort that one". Between two steps the
engine thread takes what is in the inbox, runs one step, then hands every request its new
tokens through that request's asyncio.Queue. asyncio objects are not thread-safe, so the
hand-over goes through loop.call_soon_threadsafe: once per step, for all requests at once.

The classroom's controls go through the inbox too: background load on or off, and a reset
(every request in flight aborted, a fresh engine with the live policy and an empty history,
on the same clock; `run` counts resets so a reader of /lab/steps knows to start over).

Admission counts requests in flight per tenant and per client (its connection's address, see
limits.py): `admit` takes a client's place before its prompt is tokenized, `submit` hands the
request to the engine, and the engine thread gives both places back when the request ends.
`close` (the server stopping) ends every request in flight with finish reason "abort", so each
stream still gets its last chunk and [DONE], and refuses new ones with 503.
"""
from __future__ import annotations

import asyncio
import queue
import threading
import traceback
from collections import defaultdict
from dataclasses import dataclass, field

from ..core.engine import Engine
from ..core.request import Request, Status
from ..model.threads import lower_os_priority, name_os_thread
from .background import BackgroundLoad
from .openai_schema import ApiError, Sampling
from .prom import ServerMetrics

THREAD_NAME = "batching-lab-server-engine"
# The engine thread and its OpenMP workers run at a lower CPU priority than the event loop. On
# a machine with few cores, taking in a burst of requests then never waits behind a matrix
# multiply: the loop's work is short and someone is waiting for it, the engine's is long and
# gets every cycle the loop leaves. On two cores this halved the TTFT the server adds to a
# burst of 64 streams, at no cost to throughput (tools/bench_serve.py).
ENGINE_NICE = 10
IDLE_WAIT_S = 0.1          # an idle engine thread still wakes this often to notice a stop


@dataclass(slots=True)
class Update:
    """What one step did for one request: its new tokens, and how it ended if it did."""
    token_ids: list[int]
    done: bool = False
    status: Status | None = None
    finish_reason: str | None = None   # stop | length | abort | error
    error: str = ""


@dataclass(eq=False)
class Stream:
    """A request as its HTTP handler sees it: the engine Request and the queue of its updates."""
    req: Request
    sampling: Sampling
    loop: asyncio.AbstractEventLoop
    updates: asyncio.Queue = field(default_factory=asyncio.Queue)
    client: str | None = None          # the address whose place it holds (None: exempt)
    seen: int = 0                      # tokens already handed over
    abort_reason: str | None = None    # finish reason to report for an abort (a stop string: "stop")


class EngineService:
    def __init__(self, engine: Engine, model_name: str, max_inflight_per_tenant: int = 64, rebuild=None,
                 max_inflight_per_client: int = 64):
        """`rebuild(policy)` builds a fresh engine for a reset (None: this server cannot reset)."""
        self.engine = engine
        self.rebuild = rebuild
        self.run = 0                                   # resets so far
        self.background = BackgroundLoad(engine.tokenizer)
        self.metrics = ServerMetrics(model_name)
        self.max_inflight_per_tenant = max_inflight_per_tenant
        self.max_inflight_per_client = max_inflight_per_client
        self.closing = False
        self._clients: dict[str, int] = defaultdict(int)   # client address -> requests in flight
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._active: dict[str, Stream] = {}           # engine thread only
        self._inflight: dict[str, int] = defaultdict(int)
        self._inflight_lock = threading.Lock()
        self._stop = False
        self._thread: threading.Thread | None = None

    # ----- from the HTTP side -----

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=THREAD_NAME)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        self._inbox.put(("wake", None))
        if self._thread is not None:
            self._thread.join(timeout=10)

    def waiting_now(self) -> int:
        return len(self.engine.scheduler.waiting) + len(self.engine.pending) + self._inbox.qsize()

    def admit(self, client: str | None) -> None:
        """Take a place for a request of `client` (None: exempt); 429 when it has no more, 503
        when the server is stopping. Give it back with `release` unless `submit` takes it over."""
        if self.closing:
            raise ApiError(503, "the server is shutting down", retry_after_s=5)
        if client is None:
            return
        with self._inflight_lock:
            n = self._clients[client]
            if n >= self.max_inflight_per_client:
                raise ApiError(429, f"this client ({client}) has {n:,} requests in flight; the limit is "
                                    f"{self.max_inflight_per_client:,} per client address (the server's "
                                    "--max-inflight-per-client; --trusted-client lifts it)", retry_after_s=1)
            self._clients[client] = n + 1

    def release(self, client: str | None) -> None:
        if client is None:
            return
        with self._inflight_lock:
            self._clients[client] -= 1
            if not self._clients[client]:
                del self._clients[client]

    def submit(self, req: Request, sampling: Sampling, client: str | None = None) -> Stream:
        """Queue `req` for the engine; 429 (ApiError) when the queue or the tenant is full. A
        `client` must have been admitted: its place is now the request's, given back when it ends."""
        if self.closing:
            raise ApiError(503, "the server is shutting down", retry_after_s=5)
        limit = self.engine.policy.max_waiting
        waiting = self.waiting_now()
        if limit and waiting >= limit:
            raise ApiError(429, f"queue full: {waiting:,} requests already waiting (max_waiting={limit:,}); "
                                "retry shortly", retry_after_s=1)
        with self._inflight_lock:
            n = self._inflight[req.tenant]
            if n >= self.max_inflight_per_tenant:
                raise ApiError(429, f"tenant {req.tenant!r} has {n:,} requests in flight; the limit is "
                                    f"{self.max_inflight_per_tenant:,} per tenant", "user", retry_after_s=1)
            self._inflight[req.tenant] = n + 1
        req.arrival_s = self.engine.clock.now()
        stream = Stream(req, sampling, asyncio.get_running_loop(), client=client)
        self._inbox.put(("submit", stream))
        return stream

    def abort(self, stream: Stream, finish_reason: str = "abort") -> None:
        """Stop generating for `stream` (client gone, or a stop string seen) and free its KV."""
        stream.abort_reason = finish_reason
        self._inbox.put(("abort", stream))

    def close(self) -> None:
        """Refuse new requests, and end every one in flight ("the server is shutting down")."""
        self.closing = True
        self._inbox.put(("close", None))

    def in_flight(self) -> int:
        return sum(self._inflight.values())

    def set_policy(self, policy) -> None:
        self.engine.set_policy(policy)       # thread-safe: applies from the next step

    def set_background(self, spec) -> None:
        """Start background load from a WorkloadSpec, or stop it (None); from the next step."""
        self._inbox.put(("load", spec))

    def reset(self) -> None:
        if self.rebuild is None:
            raise ApiError(409, "this server was started without a way to rebuild its engine, so it cannot reset")
        self._inbox.put(("reset", None))

    def steps_since(self, first_step: int) -> list:
        """Step records numbered `first_step` and later that are still kept."""
        steps = list(self.engine.steps)      # a copy: the engine thread trims the window meanwhile
        if not steps:
            return []
        start = max(0, first_step - steps[0].step)
        return [steps[i] for i in range(start, len(steps))]

    # ----- the engine thread -----

    def _run(self) -> None:
        name_os_thread()        # its OpenMP workers inherit the name: the engine's CPU is told apart
        lower_os_priority(ENGINE_NICE)        # ...and the priority
        while not self._stop:
            try:
                self._take_inbox(block=not self.engine.has_work())
                eng = self.engine                 # a reset may have replaced it
                for req in self.background.due(eng.clock.now()):
                    eng.submit(req)
                rec = eng.step()
                if rec is None and eng.has_work():
                    wake = eng.next_wake_s()      # e.g. a static batch still forming
                    eng.clock.sleep_until(wake if wake is not None else eng.clock.now() + 0.01, 0.01)
                elif rec is not None:
                    self.metrics.step(rec.prefill_tokens + rec.decode_tokens, rec.preempted)
                    self.metrics.prefix_cache(rec.prefix_queries, sum(n for _, n in rec.prefix_hits))
                    self.metrics.drafts(rec.drafts)
                self._hand_over()
                self.metrics.engine_state(len(eng.scheduler.running), len(eng.scheduler.waiting) + len(eng.pending),
                                          eng.pool.used_blocks, eng.pool.capacity_blocks)
            except Exception:                     # keep serving; the failed step already failed its requests
                traceback.print_exc()

    def _take_inbox(self, block: bool) -> None:
        wait_s = IDLE_WAIT_S
        next_arrival = self.background.next_s()
        if next_arrival is not None:
            wait_s = min(wait_s, max(0.0, next_arrival - self.engine.clock.now()))
        try:
            item = self._inbox.get(timeout=wait_s) if block and wait_s > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, stream = item
            if kind == "load":
                self._set_background(stream)
            elif kind == "reset":
                self._reset()
            elif kind == "close":
                for active in list(self._active.values()):
                    active.abort_reason = "abort"
                    self.engine.abort(active.req, "the server is shutting down")
            elif kind == "submit":
                self._active[stream.req.id] = stream
                self.engine.submit(stream.req)
            elif kind == "abort" and not stream.req.done:
                self.engine.abort(stream.req, "client disconnected" if stream.abort_reason == "abort"
                                  else f"finished by the server: {stream.abort_reason}")
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _set_background(self, spec) -> None:
        eng = self.engine
        if spec is None:
            self.background.stop()
            label = "background load off"
        else:
            self.background.start(spec, eng.clock.now())
            label = f"background load on: {spec.rate:g} req/s"
        eng.mark(label)

    def _reset(self) -> None:
        """Abort everything in flight, then swap in a fresh engine (same policy, same clock)."""
        old = self.engine
        self.background.stop()
        for stream in list(self._active.values()):
            stream.abort_reason = "abort"
            old.abort(stream.req, "the instructor reset the engine")
        self._hand_over()
        old.executor = None                       # its KV pool goes before the new one is made
        self.engine = self.rebuild(old.policy)
        self.engine.clock, self.engine.keep_steps = old.clock, old.keep_steps
        self.run += 1

    def _hand_over(self) -> None:
        """Give every active request its new tokens (and its end), one call per event loop."""
        batches: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        for rid, stream in list(self._active.items()):
            req = stream.req
            n = len(req.output_token_ids)
            if n == stream.seen and not req.done:
                continue
            self.metrics.new_tokens(req, stream.seen)
            update = Update(req.output_token_ids[stream.seen:n])
            stream.seen = n
            if req.done:
                self._finish(stream, update)
                del self._active[rid]
            elif stream.sampling.min_tokens:
                # min_tokens: EOS may not end the request before its min_tokens-th token
                req.ignore_eos = stream.sampling.ignore_eos or n + 1 <= stream.sampling.min_tokens
            batches[stream.loop].append((stream.updates, update))
        for loop, items in batches.items():
            loop.call_soon_threadsafe(_put_all, items)

    def _finish(self, stream: Stream, update: Update) -> None:
        req = stream.req
        update.done, update.status, update.error = True, req.status, req.error
        if req.status is Status.FINISHED:
            update.finish_reason = "length" if len(req.output_token_ids) >= req.max_new_tokens else "stop"
        elif req.status is Status.FAILED:
            update.finish_reason = "error"
        elif req.status is not Status.REJECTED:      # aborted
            update.finish_reason = stream.abort_reason or "abort"
        if update.finish_reason:
            self.metrics.request_done(req, update.finish_reason, req.finish_s or self.engine.clock.now())
        with self._inflight_lock:
            self._inflight[req.tenant] -= 1
            if not self._inflight[req.tenant]:
                del self._inflight[req.tenant]
        self.release(stream.client)


def _put_all(items) -> None:
    for q, update in items:
        q.put_nowait(update)
