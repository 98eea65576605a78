"""A live run: the engine in a background thread, fed by an open workload, steerable while it runs.

This is what a lab page holds per browser session. It imports no Streamlit: the page calls
start / pause / resume / step_once / stop, swaps the policy or the workload, and reads
`snapshot()`, an immutable copy of everything the charts need.

The thread stops by itself when `is_alive()` (given by the page: "is a page still showing
this run?") turns false, and closes the run: a tab gone for good leaves nothing running and
no KV pool held.

Memory stays bounded however long a run goes, continuous traffic included: the engine keeps the
latest KEEP_STEPS steps, and the events, ended requests and policy marks of their time span; the
whole run's counts are kept exact (Engine.retired), and the snapshot's percentiles say which part
of the run they cover. The waiting line is bounded too: past QUEUE_CAP waiting requests, new
arrivals are rejected with the reason (an overloaded endless run would otherwise grow without end).

On the cost model (a virtual clock) a run with a `speed` is paced: virtual time moves at speed ×
wall time, a step waiting until the wall clock catches up with its end, an idle gap passing at
that pace until the next arrival. Without a speed each step just pauses COST_MODEL_PACE_S.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum

from .arrivals import ArrivalFeed, FedByArrivals
from .build import build_engine
from ..core.clock import VirtualClock
from ..core.config import EngineConfig, SchedulerPolicy
from ..core.engine import PolicyMark, StepRecord
from ..core import step_fit
from ..model.threads import name_os_thread
from ..core.metrics import SLO, Counts, Retired, request_row, summarize
from .workload import PromptMaker, WorkloadSpec

THREAD_NAME = "batching-lab-engine"   # every LiveRun's engine thread (the About page counts them)
# Steps a live run keeps: the membership chart shows the last 120, the time charts and the
# replay scrubber cover these (minutes of a real-model run; ~3.4 KB a step with its events).
KEEP_STEPS = 2000
# Most requests a live run lets wait (each holds its prompt: ~3 KB at 100 tokens, ~55 KB at 1,536).
QUEUE_CAP = 1000
COST_MODEL_PACE_S = 0.002     # the cost model is instant: a pause per step keeps the animation watchable
MAX_LAG_S = 0.5               # a paced run that falls this far behind (a slow machine) starts counting anew


def engine_threads() -> int:
    """Engines held in this process (every learner's run, all sessions): a run's thread lives,
    paused or finished too, until the run is stopped or its page is gone."""
    return sum(t.name == THREAD_NAME and t.is_alive() for t in threading.enumerate())


class RunState(StrEnum):
    IDLE = "idle"                    # built, not started
    RUNNING = "running"
    PAUSED = "paused"                # between two steps, its clock stopped
    FINISHED = "finished"            # every request of its workload ended
    STOPPED = "stopped"              # stopped by the learner
    ERROR = "error"                  # ended by a failure; `message` says which


TERMINAL = frozenset({RunState.FINISHED, RunState.STOPPED, RunState.ERROR})   # a run that steps no more


@dataclass(frozen=True)
class Snapshot:
    state: RunState
    now_s: float
    steps: tuple[StepRecord, ...]    # the latest KEEP_STEPS steps (a window of the run)
    requests: tuple[dict, ...]       # rows in the requests.csv format (+ "partial_text" while running):
                                     # every request in flight, and those that ended in the window
    marks: tuple[PolicyMark, ...]
    policy: SchedulerPolicy
    spec: WorkloadSpec
    summary: dict
    arrived: int
    message: str = ""
    retired: Retired = field(default_factory=Retired)   # exact counts of what left the window
    counts: Counts = field(default_factory=Counts)      # the whole run's requests, as the snapshot was taken


class LiveRun(FedByArrivals):
    def __init__(self, policy: SchedulerPolicy, spec: WorkloadSpec, model=None,
                 config: EngineConfig | None = None, is_alive=lambda: True, idle_timeout_s: float = 600,
                 keep_steps: int | None = KEEP_STEPS, cost=None, prompts: PromptMaker | None = None,
                 speed: float | None = None):
        """`model` is a LoadedModel (real engine, wall clock) or None (cost model, virtual clock,
        its step times from `cost`: see build_engine). `keep_steps`: the window of steps kept
        (None: the whole run). `prompts`: what draws the prompts (default: the model's tokenizer's
        PromptMaker; stand-in ids without a model); give a simulated run the real run's to draw
        the same requests. `speed`: virtual seconds per wall second on the cost model (set_speed)."""
        self.config = config or EngineConfig()
        self.engine = build_engine(self.config, policy, model, cost, spec.draft_acceptance)
        self.engine.keep_steps = keep_steps
        self.engine.clock.stop()                 # the run's time starts with its first step
        if model is not None:                    # the app's step model learns from every real step
            step_fit.record_steps(self.engine, model)
        if prompts is None and model is not None:
            prompts = PromptMaker(model.tokenizer)
        self.feed = ArrivalFeed(spec, prompts)
        virtual = isinstance(self.engine.clock, VirtualClock)
        self.pace_s = COST_MODEL_PACE_S if virtual and speed is None else 0.0
        self.speed = speed if virtual else None
        self._anchor: tuple[float, float] | None = None   # (wall, virtual) time pacing counts from
        self.is_alive = is_alive
        self.idle_timeout_s = idle_timeout_s
        self.state = RunState.IDLE
        self.message = ""
        self._lock = threading.Lock()            # held while a step runs or a snapshot is taken
        self._reader = threading.Event()         # a snapshot waits for the lock: let it in between steps
        self._wake = threading.Event()
        self._step_requests = 0
        self._stop = False
        self._thread: threading.Thread | None = None
        self._rows: dict[str, dict] = {}         # rows of ended requests never change: keep them
        self.last_seen = time.monotonic()

    # ----- controls -----

    def start(self) -> None:
        """Run: the first start, a resume, or going on after "finished" with more workload."""
        self._anchor = None
        self.state = RunState.RUNNING
        self._stop = False
        if not self.thread_alive:
            self._start_thread()
        self._wake.set()

    def pause(self) -> None:
        if self.state == RunState.RUNNING:
            self.state = RunState.PAUSED

    def resume(self) -> None:
        if self.state == RunState.PAUSED:
            self._anchor = None              # paced time counts from now: the pause is not made up
            self.state = RunState.RUNNING
            self._wake.set()

    def step_once(self) -> None:
        """While paused (or before starting): run exactly one engine step."""
        if not self.thread_alive:
            self.state = RunState.PAUSED
            self._start_thread()
        self._step_requests += 1
        self._wake.set()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self.state not in (RunState.FINISHED, RunState.ERROR):
            self.state = RunState.STOPPED

    def close(self) -> None:
        """Stop for good and let go of the executor: the model runner and its KV pool are freed
        at once. What was recorded stays readable."""
        self.stop()
        self._release()

    @property
    def closed(self) -> bool:
        return self.engine.executor is None

    @property
    def step_count(self) -> int:
        """Engine steps so far (read without waiting for the step in progress)."""
        return self.engine.step_count

    def now(self) -> float:
        """The engine's clock."""
        return self.engine.clock.now()

    def policy(self) -> SchedulerPolicy:
        return self.engine.policy

    @property
    def thread_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def set_policy(self, policy: SchedulerPolicy, mark: bool = True) -> None:
        self.engine.set_policy(policy, mark)

    def mark(self, *changes: str, knobs: tuple[str, ...] = ()) -> None:
        self.engine.mark(*changes, knobs=knobs)

    def set_speed(self, speed: float) -> None:
        """Virtual seconds per wall second from now on (a paced cost-model run only)."""
        if self.speed is not None and speed != self.speed:
            self.speed, self._anchor = speed, None

    def set_workload(self, spec: WorkloadSpec) -> None:
        with self._lock_from_outside():
            self.feed.set_spec(spec, self.engine.clock.now())
            if hasattr(self.engine.executor, "draft_acceptance"):     # the cost model's (build_engine)
                self.engine.executor.draft_acceptance = spec.draft_acceptance

    def heartbeat(self) -> None:
        self.last_seen = time.monotonic()

    # ----- the engine thread -----

    def _start_thread(self) -> None:
        if self.closed:
            raise RuntimeError("this run is closed: start a new one")
        self._thread = threading.Thread(target=self._loop, daemon=True, name=THREAD_NAME)
        self._thread.start()

    def _loop(self) -> None:
        """Step while running (or once per step_once); otherwise wait. A finished or failed run
        keeps its thread, so that it still notices when its page is gone and frees its memory."""
        name_os_thread()        # before its first matmul, so its OpenMP workers carry the name too
        while not self._stop:
            if not self.is_alive() or time.monotonic() - self.last_seen > self.idle_timeout_s:
                self.state = RunState.STOPPED
                self.message = "stopped: the page that owned this run is gone"
                self._release()
                return
            if self.state != RunState.RUNNING and self._step_requests == 0:
                # Paused (or done): the run's clock stands still, so no arrivals pile up meanwhile
                # and nobody's wait grows; it goes on from where it stopped.
                self.engine.clock.stop()
                self._wake.wait(0.2)
                self._wake.clear()
                continue
            try:
                self._step()
            except Exception as exc:             # never die silently: the page shows this
                self.state = RunState.ERROR
                self.message = f"engine stopped: {type(exc).__name__}: {exc}"
                self._step_requests = 0

    def _step(self) -> None:
        single = self.state != RunState.RUNNING
        if self._anchor is None:
            self._anchor = (time.monotonic(), self.engine.clock.now())
        self._let_reader_in()
        with self._lock:
            self.engine.clock.go()
            self._admit(self.feed.due(self.engine.clock.now()))
            rec = self.engine.step()
            self._forget_old_marks()
        if rec is not None:
            if single:
                # max(): a pause() landing between _loop's check and `single` above makes this a
                # running step with no request behind it; the count must not go below 0
                self._step_requests = max(0, self._step_requests - 1)
            elif self.speed:
                self._pace(rec.t_end_s)
            elif self.pace_s:
                time.sleep(self.pace_s)
        elif self.feed.exhausted and not self.engine.has_work():
            self.state = RunState.FINISHED
            self._step_requests = 0
        else:
            self._wait_for_next_event(paced=bool(self.speed) and not single)

    def _admit(self, arrivals) -> None:
        """Hand the due arrivals to the engine; past QUEUE_CAP waiting, reject them with the reason."""
        eng = self.engine
        for r in arrivals:
            waiting = len(eng.scheduler.waiting) + len(eng.pending)
            if waiting >= QUEUE_CAP:
                eng.reject(r, f"the live run's waiting line is full ({waiting:,} requests waiting, "
                              f"at most {QUEUE_CAP:,}): arrivals are turned away until it shrinks")
            else:
                eng.submit(r)

    def _forget_old_marks(self) -> None:
        """Policy marks from before the first step kept leave with their steps."""
        marks, steps = self.engine.marks, self.engine.steps
        if self.engine.keep_steps is None or not steps:
            return
        n = 0
        while n < len(marks) and marks[n].step < steps[0].step:
            n += 1
        del marks[:n]

    def _release(self) -> None:
        self.engine.executor = None

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

    def _paced_now(self) -> float:
        """The virtual time a paced run should be at now: its anchor plus speed × wall time since."""
        anchor = self._anchor
        if anchor is None:                   # the speed changed: count from here
            anchor = self._anchor = (time.monotonic(), self.engine.clock.now())
        wall, virtual = anchor
        return virtual + (time.monotonic() - wall) * self.speed

    def _pace(self, t_s: float) -> None:
        """Sleep until wall time × speed reaches virtual time `t_s` (in short naps: a pause, a new
        speed or a stop is noticed at once). Far behind, count anew rather than race to catch up."""
        while self.state == RunState.RUNNING and not self._stop:
            ahead_s = (t_s - self._paced_now()) / self.speed
            if ahead_s <= 0:
                if -ahead_s > MAX_LAG_S:
                    self._anchor = (time.monotonic(), t_s)
                return
            time.sleep(min(ahead_s, 0.05))

    def _wait_for_next_event(self, paced: bool = False) -> None:
        times = [t for t in (self.engine.next_wake_s(), None if self.feed.exhausted else self.feed.next_s)
                 if t is not None]
        if not times:
            time.sleep(0.01)
            return
        if paced:                            # an idle gap on a paced run passes at its speed
            self.engine.clock.sleep_until(min(min(times), self._paced_now()))
            if self.engine.clock.now() < min(times):
                time.sleep(0.01)
            return
        self.engine.clock.sleep_until(min(times), max_sleep_s=0.05)

    # ----- reading -----

    def snapshot(self, summary: bool = True) -> Snapshot:
        """An immutable copy of the run's window, O(window) however long the run. `summary=False`
        skips the percentiles (a live page that computes its own from the rows saves their cost
        on every refresh)."""
        with self._lock_from_outside():
            eng = self.engine
            steps = tuple(eng.steps)
            marks = tuple(eng.marks)
            requests = list(eng.requests.values())
            retired = replace(eng.retired, by_status=dict(eng.retired.by_status))
            rows, kept = [], {}
            for r in requests:
                row = self._rows.get(r.id)
                if row is None:
                    row = request_row(r)
                    if r.output_token_ids and not r.done and eng.tokenizer is not None:
                        row["partial_text"] = eng.decode(r)
                if r.done:
                    kept[r.id] = row
                rows.append(row)
            self._rows = kept                    # rows of requests that left the window go
            policy = eng.policy
            now = eng.clock.now()
            counts = eng.counts()
        # Outside the lock, so the engine steps on meanwhile: only finished requests (which never
        # change again) enter the percentiles.
        slo = SLO(policy.ttft_slo_s, policy.tpot_slo_s)
        stats = summarize(requests, steps, slo, retired) if summary else {}
        return Snapshot(self.state, now, steps, tuple(rows), marks, policy, self.feed.spec, stats,
                        self.feed.count, self.message, retired, counts)
