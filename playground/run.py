"""One learner's Playground run: a LiveRun on the real model (or a simulation of an engine,
playground.engines), plus what the page remembers about it.

The page holds one PlaygroundRun per browser session (playground.slot). Slider changes reach
the running engine as decisions: `apply_when_rested(setup, now)`, called on every refresh,
waits until the sliders have rested for REST_S, then applies every knob that changed since
the last decision at once. Policy and SLO changes take effect at the engine's next step,
workload changes apply to arrivals from then on, and each decision is one of the run's change
marks on the time axis (Run.mark), with a short label and the full list of changes. No Streamlit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from engine.core.config import SLO_KNOBS, EngineConfig, SchedulerPolicy
from engine.core.engine import PolicyMark
from engine.core.knobs import changes
from engine.runs.live import TERMINAL, LiveRun, RunState, Snapshot
from engine.runs.run import Run
from engine.runs.workload import PromptMaker

from playground import engines
from remote.shared_run import SharedRun
from playground.setup import KNOBS, KV_POOL_TOKENS, WORKLOAD_KNOBS, Setup
from analysis.tables import Tables, TraceTables, requests_csv, steps_csv

REST_S = 0.4          # a slider change is applied once the sliders have rested this long


@dataclass(frozen=True, slots=True)
class Decision:
    """Knobs changed together and applied at one engine step (one mark on the time axis), and
    what the page tells the learner about them."""
    changes: tuple[str, ...]         # in effect now: 'max_num_seqs 8→2', 'workload: rate 4.0→5.0'
    knobs: tuple[str, ...]           # the names of the knobs in `changes`
    held: tuple[str, ...] = ()       # workload changes with nothing left to act on: every request
                                     # of a finite workload has arrived
    refused: str = ""                # why policy changes made with these were not applied

    @property
    def label(self) -> str:
        """Short, for the chart: the first change, and how many more."""
        return PolicyMark.short(self.changes)

    @property
    def detail(self) -> str:
        """Every change, for the mark's hover text."""
        return ", ".join(self.changes)

    @property
    def message(self) -> str:
        """What the page tells the learner (a toast): what was applied, and what was not."""
        parts = []
        if self.changes:
            parts.append("Applied at the next step: " + self.detail)
        if self.held:
            parts.append("Every request has arrived, so " + ", ".join(self.held) + " changes "
                         "nothing yet: raise Requests or turn on Continuous traffic to send more.")
        if self.refused:
            parts.append(f"Policy not changed: {self.refused}")
        return " ".join(parts)


class PlaygroundRun:
    def __init__(self, setup: Setup, model, is_alive=lambda: True, idle_timeout_s: float = 300,
                 engine_choice: str = engines.REAL, speed: float = engines.SPEED_DEFAULT,
                 seat: engines.Seat | None = None):
        """`engine_choice` (playground.engines.choices()): the real model, a simulation on the cost
        model at `speed` times real time, drawing the same requests from the model's tokenizer,
        or the shared server at `seat` (remote.shared_run), sent the same requests over HTTP."""
        if model is None:
            raise ValueError("the Playground runs the real model, or simulates one with its "
                             "tokenizer: pass a loaded model")
        self.setup = setup                   # the setup in effect (the last one applied)
        self._widgets = setup                # the widgets' values last dealt with (a shared server's run
                                             # sends only what they moved since)
        self.model_name = model.name
        self.engine_choice = engine_choice
        self.cost = engines.step_times(engine_choice, model)    # None: the real model
        config = EngineConfig(model=model.name, kv_pool_tokens=KV_POOL_TOKENS,
                              max_model_len=min(2048, model.max_model_len), seed=setup.seed)
        self.max_model_len = config.max_model_len
        self.seat = seat if engine_choice == engines.SERVER else None
        self.live: Run
        if self.seat is not None:
            if not seat.url:
                raise ValueError("the shared server needs the app attached to one (BATCHING_LAB_ENGINE_URL)")
            self.live = SharedRun(seat.url, setup.workload(), PromptMaker(model.tokenizer), seat.tenant, seat.token,
                                  is_alive=is_alive, idle_timeout_s=idle_timeout_s)
        else:
            if self.simulated:
                engine = dict(cost=self.cost, prompts=PromptMaker(model.tokenizer), speed=speed)
            else:
                engine = dict(model=model)
            self.live = LiveRun(setup.policy(), setup.workload(), config=config, is_alive=is_alive,
                                idle_timeout_s=idle_timeout_s, **engine)
        self.setup = self._in_effect(setup, self.live.policy())    # a shared server's policy is the server's
        self.proposed: Setup | None = None   # a setup waiting for the sliders to rest
        self.proposed_at = 0.0
        self._refused: Setup | None = None   # the last setup refused: not retried on every refresh
        self._tables = TraceTables()

    # ----- controls

    def start(self) -> None:
        self.live.start()

    def pause(self) -> None:
        self.live.pause()

    def resume(self) -> None:
        self.live.resume()

    def step_once(self, wait_s: float = 5.0) -> None:
        """Run exactly one engine step; wait (up to wait_s) until it is recorded."""
        before = self.steps_taken
        self.live.step_once()
        deadline = time.monotonic() + wait_s
        while self.steps_taken == before and time.monotonic() < deadline:
            if self.live.state in TERMINAL:
                break
            time.sleep(0.01)

    def stop(self) -> None:
        self.live.stop()

    def set_speed(self, speed: float) -> None:
        """A simulated run's virtual seconds per wall second, from now on (the real run ignores it)."""
        self.live.set_speed(speed)

    @property
    def simulated(self) -> bool:
        return self.cost is not None

    def close(self) -> None:
        """Stop for good and free the engine's KV pool (the page forgets this run)."""
        self.live.close()

    def heartbeat(self) -> None:
        self.live.heartbeat()

    @property
    def state(self) -> str:
        return self.live.state

    @property
    def closed(self) -> bool:
        """Closed for good: its KV pool is freed, what it recorded stays readable."""
        return self.live.closed

    @property
    def steps_taken(self) -> int:
        """Engine steps so far (read without waiting for the step in progress)."""
        return self.live.step_count

    @property
    def arrived(self) -> int:
        """Requests sent to the engine so far."""
        return self.live.arrived

    @property
    def can_continue(self) -> bool:
        """Finished, but the workload was extended since (more requests to send)."""
        return self.live.state == RunState.FINISHED and not self.live.exhausted

    # ----- changes

    @property
    def pending(self) -> bool:
        """A change is waiting for the sliders to rest."""
        return self.proposed is not None

    def apply_when_rested(self, setup: Setup, now: float | None = None) -> Decision | None:
        """Call on every refresh with the setup the widgets hold. A setup that differs from the
        one in effect is applied once it has stayed the same for REST_S (several knobs moved
        meanwhile make one decision); returns that Decision, None otherwise (nothing changed,
        or still waiting). A setup the engine refuses raises ValueError once, then is ignored
        until the widgets change again. `now`: time.monotonic() unless given (tests)."""
        now = time.monotonic() if now is None else now
        widgets = setup
        if self.seat is not None:
            # On a shared server the policy is the server's: only the knobs the widgets moved since
            # they were last applied change anything (the server's own policy otherwise stands)
            setup = self._moved_by_widgets(widgets)
        if setup == self.setup or setup == self._refused:
            self._widgets, self.proposed = widgets, None
            return None
        if setup != self.proposed:
            self.proposed, self.proposed_at = setup, now
            return None
        if now - self.proposed_at < REST_S:
            return None
        self._widgets, self.proposed = widgets, None    # applied or refused, these values are dealt with
        return self.apply(setup)

    def _moved_by_widgets(self, widgets: Setup) -> Setup:
        """The setup in effect with the knobs the widgets changed since they were last applied."""
        moved = {name: getattr(widgets, name) for name in KNOBS if getattr(widgets, name) != getattr(self._widgets, name)}
        return self.setup.changed(**moved)

    def apply(self, setup: Setup) -> Decision | None:
        """Apply a setup at once; returns the Decision (None when nothing changed). A setup the
        engine refuses changes nothing and raises ValueError."""
        try:
            policy, spec = setup.policy(), setup.workload()
        except ValueError:
            self._refused = setup
            raise
        before, after = self.setup.to_dict(), setup.to_dict()
        names = [name for name in KNOBS if before[name] != after[name]]
        moved = dict(zip(names, changes(before, after, names)))     # name -> 'max_num_seqs 8→2'
        if not moved:
            self.setup = setup
            return None
        workload = [name for name in moved if name in WORKLOAD_KNOBS]
        refused = ""
        if len(workload) < len(moved):
            try:
                self.live.set_policy(policy, mark=False)   # a shared server may refuse (no instructor token)
            except ValueError as exc:
                self._refused = setup
                kept = [n for n in moved if n in WORKLOAD_KNOBS or n in SLO_KNOBS]
                if not kept:
                    raise
                # what the server does not hold (the workload, the page's SLO targets) still
                # applies; the server's policy stays as it was
                refused = str(exc)
                setup = setup.changed(**{n: getattr(self.setup, n) for n in moved if n not in kept})
                moved = {n: moved[n] for n in kept}
        self.setup = setup
        if workload:
            self.live.set_workload(spec)
        held = workload if self.live.exhausted else []
        in_effect = [name for name in moved if name not in held]
        decision = Decision(tuple(("workload: " if n in WORKLOAD_KNOBS else "") + moved[n] for n in in_effect),
                            tuple(in_effect), tuple(moved[n] for n in held), refused)
        self.live.mark(*decision.changes, knobs=decision.knobs)    # one mark for the whole decision
        return decision

    # ----- reading

    def requests_csv(self) -> str:
        return requests_csv(self.live.snapshot(summary=False))

    def steps_csv(self) -> str:
        return steps_csv(self.live.snapshot(summary=False))

    def read(self) -> tuple[Snapshot, Tables]:
        """A snapshot and its tables (the marks: every change in the run's window)."""
        snap = self.live.snapshot(summary=False)    # the page's headline comes from the tables
        self.setup = self._in_effect(self.setup, snap.policy)    # someone may have changed a shared server's
        return snap, self._tables.update(snap)

    @staticmethod
    def _in_effect(setup: Setup, policy: SchedulerPolicy) -> Setup:
        """`setup` with the run's live policy knobs (the SLO targets stay the page's own)."""
        return setup.changed(**{k: v for k, v in policy.to_dict().items() if k in KNOBS and k not in SLO_KNOBS})
