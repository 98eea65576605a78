"""A live run: the engine in a background thread, fed by an open workload, steerable while it runs.

This is what a lab page holds per browser session. It imports no Streamlit: the page calls
start / pause / resume / step_once / stop, swaps the policy or the workload, and reads
`snapshot()`, an immutable copy of everything the charts need.

The thread stops by itself when `is_alive()` (given by the page: "is my browser session
still connected?") turns false, so a closed or reloaded tab leaves nothing running.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

from .arrivals import ArrivalFeed
from .build import build_engine
from .clock import VirtualClock
from .config import EngineConfig, SchedulerPolicy
from .engine import PolicyMark, StepRecord
from .metrics import SLO, request_row, summarize
from .workload import PromptMaker, WorkloadSpec

THREAD_NAME = "batching-lab-engine"   # every LiveRun's engine thread (the About page counts them)


@dataclass(frozen=True)
class Snapshot:
    state: str                       # idle | running | paused | finished | stopped | error
    now_s: float
    steps: tuple[StepRecord, ...]
    requests: tuple[dict, ...]       # rows in the requests.csv format (+ "partial_text" while running)
    marks: tuple[PolicyMark, ...]
    policy: SchedulerPolicy
    spec: WorkloadSpec
    summary: dict
    arrived: int
    message: str = ""


class LiveRun:
    def __init__(self, policy: SchedulerPolicy, spec: WorkloadSpec, model=None,
                 config: EngineConfig | None = None, is_alive=lambda: True, idle_timeout_s: float = 600):
        """`model` is a LoadedModel (real engine, wall clock) or None (cost model, virtual clock)."""
        self.config = config or EngineConfig()
        self.engine = build_engine(self.config, policy, model)
        self.feed = ArrivalFeed(spec, PromptMaker(model.tokenizer) if model is not None else None)
        self.is_alive = is_alive
        self.idle_timeout_s = idle_timeout_s
        self.state = "idle"
        self.message = ""
        self._lock = threading.Lock()            # held while a step runs or a snapshot is taken
        self._reader = threading.Event()         # a snapshot waits for the lock: let it in between steps
        self._wake = threading.Event()
        self._step_requests = 0
        self._stop = False
        self._thread: threading.Thread | None = None
        self._rows: dict[str, dict] = {}         # finished rows never change: keep them
        self.last_seen = time.monotonic()

    # ----- controls -----

    def start(self) -> None:
        if self.thread_alive:
            self.resume()
        else:   # first start, or going on after "finished" with more workload
            self.state = "running"
            self._stop = False
            self._start_thread()

    def pause(self) -> None:
        if self.state == "running":
            self.state = "paused"

    def resume(self) -> None:
        if self.state == "paused":
            self.state = "running"
            self._wake.set()

    def step_once(self) -> None:
        """While paused (or before starting): run exactly one engine step."""
        if not self.thread_alive:
            self.state = "paused"
            self._start_thread()
        self._step_requests += 1
        self._wake.set()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self.state not in ("finished", "error"):
            self.state = "stopped"

    @property
    def thread_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def set_policy(self, policy: SchedulerPolicy) -> None:
        self.engine.set_policy(policy)

    def set_workload(self, spec: WorkloadSpec) -> None:
        with self._lock_from_outside():
            self.feed.set_spec(spec, self.engine.clock.now())

    def heartbeat(self) -> None:
        self.last_seen = time.monotonic()

    # ----- the engine thread -----

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name=THREAD_NAME)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop:
                if not self.is_alive() or time.monotonic() - self.last_seen > self.idle_timeout_s:
                    self.state = "stopped"
                    self.message = "stopped: the page that owned this run is gone"
                    return
                if self.state == "paused" and self._step_requests == 0:
                    self._wake.wait(0.2)
                    self._wake.clear()
                    continue
                single = self.state == "paused"
                self._let_reader_in()
                with self._lock:
                    now = self.engine.clock.now()
                    for r in self.feed.due(now):
                        self.engine.submit(r)
                    rec = self.engine.step()
                if single and rec is not None:
                    self._step_requests -= 1
                if rec is None:
                    if self.feed.exhausted and not self.engine.has_work():
                        self.state = "finished"
                        if not single:
                            return
                        self._step_requests = 0
                        continue
                    self._wait_for_next_event()
                elif isinstance(self.engine.clock, VirtualClock):
                    time.sleep(0.002)            # the cost model is instant: keep the animation watchable
        except Exception as exc:                 # never die silently: the page shows this
            self.state = "error"
            self.message = f"engine stopped: {type(exc).__name__}: {exc}"

    def _let_reader_in(self, max_wait_s: float = 0.05) -> None:
        """A Lock is not fair: this thread would take it back before a waiting reader wakes up,
        starving snapshots for seconds. Give a waiting reader its turn between two steps."""
        deadline = time.monotonic() + max_wait_s
        while self._reader.is_set() and time.monotonic() < deadline:
            time.sleep(0.0005)

    @contextmanager
    def _lock_from_outside(self):
        """The step lock, for any thread but the engine's: its turn comes at the next step boundary."""
        self._reader.set()
        with self._lock:
            self._reader.clear()
            yield

    def _wait_for_next_event(self) -> None:
        times = [t for t in (self.engine.next_wake_s(), None if self.feed.exhausted else self.feed.next_s)
                 if t is not None]
        if not times:
            time.sleep(0.01)
            return
        self.engine.clock.sleep_until(min(times), max_sleep_s=0.05)

    # ----- reading -----

    def snapshot(self, summary: bool = True) -> Snapshot:
        """An immutable copy of the run. `summary=False` skips the percentiles (a live page that
        computes its own from the rows saves their cost on every refresh)."""
        with self._lock_from_outside():
            eng = self.engine
            steps = tuple(eng.steps)
            marks = tuple(eng.marks)
            requests = list(eng.requests.values())
            rows = []
            for r in requests:
                row = self._rows.get(r.id)
                if row is None:
                    row = request_row(r)
                    if r.done:
                        self._rows[r.id] = row
                    elif r.output_token_ids and eng.tokenizer is not None:
                        row["partial_text"] = eng.decode(r)
                rows.append(row)
            policy = eng.policy
            now = eng.clock.now()
        # Outside the lock, so the engine steps on meanwhile: only finished requests (which never
        # change again) enter the percentiles.
        stats = summarize(requests, steps, SLO(policy.ttft_slo_s, policy.tpot_slo_s)) if summary else {}
        return Snapshot(self.state, now, steps, tuple(rows), marks, policy, self.feed.spec, stats,
                        self.feed.count, self.message)
