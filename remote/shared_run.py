"""The Playground on a shared Batching Lab server: a LiveRun's interface, over HTTP.

A Playground run normally owns an engine (engine/runs/live.py). Attached to a server, it owns
none: the server's one engine serves everyone, and this run
- sends this session's workload as real streaming HTTP requests, under its own tenant
  (remote.load: the load generator);
- reads the shared engine's steps, members and request rows from /lab/steps and /lab/requests
  (the same shapes a LiveRun's snapshot holds, so every Playground chart draws it unchanged);
- asks /lab/policy for policy changes, which need the instructor token; without it the server
  says no (401), and the page shows why.

Pause stops sending and freezes the view (the shared engine goes on for everyone else); Step
once cannot be offered, since nobody here owns the engine's steps. The SLO targets stay this
page's own: they only score what it shows. No Streamlit here.
"""
from __future__ import annotations

import time
from dataclasses import replace

import httpx2 as httpx

from engine.runs.arrivals import ArrivalFeed, FedByArrivals
from engine.core.config import SLO_KNOBS, SchedulerPolicy
from engine.core.engine import PolicyMark
from engine.runs.live import RunState, Snapshot
from engine.core.metrics import Counts
from engine.runs.workload import PromptMaker, WorkloadSpec
from remote.lab_control import LabControl, LabRefused
from remote.lab_stream import KEEP_STEPS, LabStream
from remote.load import LoadGenerator, now_s, served_model


# The knobs the server holds (its policy, but for the SLO targets, which stay each page's own)
SERVER_KNOBS = frozenset(SchedulerPolicy.__dataclass_fields__) - frozenset(SLO_KNOBS)


class SharedRun(FedByArrivals):
    def __init__(self, url: str, spec: WorkloadSpec, prompts: PromptMaker | None, tenant: str,
                 token: str = "", keep_steps: int = KEEP_STEPS, timeout_s: float = 10.0,
                 is_alive=lambda: True, idle_timeout_s: float = 600):
        """`url`: the server's base address (no /v1). `tenant`: the name this session's requests
        carry. `token`: the instructor token, or "" (policy changes are then refused). Sending
        stops by itself once `is_alive()` turns false or no heartbeat came for idle_timeout_s
        (the page is gone), as a LiveRun's engine thread does."""
        self.url = url.rstrip("/")
        self.stream = LabStream(self.url, keep_steps, timeout_s=timeout_s)   # the shared engine's window
        self.control = LabControl(self.url, token, timeout_s)
        self.generator = LoadGenerator(self.url + "/v1", served_model(self.url + "/v1", timeout_s), tenant)
        self.feed = ArrivalFeed(spec, prompts)
        self.state = RunState.IDLE
        self.message = ""
        self._seen_at = (0.0, 0.0)              # (server time of the latest step, local time then)
        self._sent_s = 0.0                      # feed time covered before the latest pause
        self._started_at: float | None = None   # local time the feed (re)started
        self._frozen: Snapshot | None = None
        self._marks: list[PolicyMark] = []      # this page's own changes (its workload, its targets)
        self._last = Snapshot(RunState.IDLE, 0.0, (), (), (), SchedulerPolicy(), spec, {}, 0)   # the latest window read
        self._closed = False
        self.is_alive, self.idle_timeout_s = is_alive, idle_timeout_s
        self.last_seen = time.monotonic()

    # ----- controls (LiveRun's)

    def start(self) -> None:
        self._started_at = now_s()
        self.generator.run_feed(self.feed, already_s=self._sent_s, keep_going=self._wanted)
        self.state, self._frozen = RunState.RUNNING, None

    def _wanted(self) -> bool:
        """Is a page still showing this run?"""
        return self.is_alive() and time.monotonic() - self.last_seen < self.idle_timeout_s

    def pause(self) -> None:
        if self.state == RunState.RUNNING:
            self._stop_sending()
            self._frozen = self.snapshot()       # the view stays where it was
            self.state = RunState.PAUSED

    def resume(self) -> None:
        if self.state == RunState.PAUSED:
            self.start()

    def step_once(self) -> None:
        raise ValueError("this run is attached to a shared server, whose engine steps on its own for "
                         "everyone: Step once works on an engine of your own (Engine: real, or simulated)")

    def stop(self) -> None:
        self._stop_sending()
        if self.state not in (RunState.FINISHED, RunState.ERROR):
            self.state = RunState.STOPPED

    def close(self) -> None:
        """Stop, and hang up on this run's requests still streaming (the server frees their KV)."""
        self.stop()
        self.generator.cancel_in_flight()
        self.stream.close()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    thread_alive = False

    def heartbeat(self) -> None:
        self.last_seen = time.monotonic()

    def set_speed(self, speed: float) -> None:
        pass                                     # a real engine runs in real time

    def set_policy(self, policy: SchedulerPolicy, mark: bool = True) -> None:
        """Send the knobs that differ from the server's policy (the instructor token's work);
        a refusal is a ValueError carrying the server's words. The server marks every policy
        change it makes, for everyone attached (`mark` has nothing to add)."""
        try:
            now = self.control.policy()
            # the targets score runs where they are shown; the server's steps do not need them
            changes = {k: v for k, v in policy.to_dict().items() if k in SERVER_KNOBS and now.get(k) != v}
            if changes:
                self.control.set_policy(**changes)
        except LabRefused as exc:
            raise ValueError(f"the server refused the policy change ({exc.status}): {exc.message}") from None
        except httpx.HTTPError as exc:
            raise ValueError(f"the server at {self.url} did not answer: {exc}") from None

    def set_workload(self, spec: WorkloadSpec) -> None:
        self.generator.change_feed(self.feed, spec, self._feed_now())

    def mark(self, *changes: str, knobs: tuple[str, ...] = ()) -> None:
        """Mark this page's own changes on its charts: the server marks its policy's changes
        itself, so those (named in `knobs`, one per change) are left to it."""
        if len(knobs) == len(changes):
            own = [i for i, k in enumerate(knobs) if k not in SERVER_KNOBS]
            changes, knobs = tuple(changes[i] for i in own), tuple(knobs[i] for i in own)
        if changes:
            seen = self.snapshot().marks         # the server's latest step and time, to mark them at
            step, t_s = self.step_count, self.now()
            if seen:
                # The stream reads the server a moment behind, so its clock here can lag a mark
                # the page has already seen; a change made now goes after every change seen.
                step, t_s = max(step, seen[-1].step), max(t_s, seen[-1].t_s)
            self._marks.append(PolicyMark.of(step, t_s, changes, knobs))

    def policy(self) -> SchedulerPolicy:
        """The server's live policy (the instructor, or another student with the token, may change it)."""
        return SchedulerPolicy(**self.control.policy())

    @property
    def step_count(self) -> int:
        """Steps the shared engine has taken (asked of the server until it has taken one)."""
        if not self.stream.next_step and self.state != RunState.ERROR:
            self.snapshot()          # a server that does not answer ends the run in "error"
        return self.stream.next_step or 0

    def now(self) -> float:
        """The server's clock, as far as this side can tell: its latest step's end, plus the
        time since that step was read."""
        server_t, local_t = self._seen_at
        return server_t + (now_s() - local_t)

    # ----- reading

    def snapshot(self, summary: bool = False) -> Snapshot:
        """The shared engine's recent window; while paused, the one frozen at the pause. A server
        that stops answering ends the run in "error", its message saying why, and the last
        window read stays on show."""
        if self._frozen is not None and self.state in (RunState.PAUSED, RunState.ERROR):
            return self._frozen
        try:
            rows, marks = self.stream.read()
            if self.stream.steps:
                self._seen_at = (self.stream.steps[-1].t_end_s, now_s())
            policy = SchedulerPolicy(**self.control.policy())
        except (httpx.HTTPError, RuntimeError, LabRefused, ValueError, TypeError) as exc:   # RuntimeError: closed
            self._stop_sending()
            self.state, self.message = RunState.ERROR, f"the shared server stopped answering: {exc}"
            self._frozen = replace(self._last, state=RunState.ERROR, message=self.message)
            return self._frozen
        if self.state == RunState.RUNNING and self.feed.exhausted and not self.generator.busy:
            self.state = RunState.FINISHED
        steps = tuple(self.stream.steps)
        counts = Counts.of_step(steps[-1]) if steps else Counts()   # the shared engine's, at its latest step
        if steps:                                # this page's marks leave with the steps they marked
            self._marks = [m for m in self._marks if m.step >= steps[0].step]
        marks = tuple(sorted(marks + self._marks, key=lambda m: m.t_s))
        self._last = Snapshot(self.state, self.now(), steps, tuple(rows), marks, policy,
                              self.feed.spec, {}, self.feed.count, self.message, counts=counts)
        return self._last

    def _feed_now(self) -> float:
        """The workload's own clock: seconds of sending so far, pauses left out."""
        if self.state != RunState.RUNNING or self._started_at is None:
            return self._sent_s
        return self._sent_s + now_s() - self._started_at

    def _stop_sending(self) -> None:
        self._sent_s = self._feed_now()
        self._started_at = None
        self.generator.stop()
