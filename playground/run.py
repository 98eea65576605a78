"""One learner's Playground run: a LiveRun on the real model, plus what the page remembers about it.

The page holds one PlaygroundRun per browser session. `apply(setup)` sends slider changes to the
running engine: policy and SLO changes take effect at its next step (the engine marks them on
the time axis), workload changes apply to arrivals from then on (marked here). No Streamlit.
"""
from __future__ import annotations

import threading
import time

from engine.config import EngineConfig
from engine.knobs import changes
from engine.live import THREAD_NAME, LiveRun, Snapshot

from playground.setup import KV_POOL_TOKENS, WORKLOAD_KNOBS, Setup
from analysis.tables import Tables, TraceTables, requests_csv, steps_csv

TERMINAL = ("finished", "stopped", "error")   # a run in one of these states steps no more


def engine_threads() -> int:
    """Engines held in this process (every learner's run, all sessions): a run's thread lives,
    paused or finished too, until the run is stopped or its page is gone."""
    return sum(t.name == THREAD_NAME and t.is_alive() for t in threading.enumerate())


def workload_changes(old: Setup, new: Setup) -> list[str]:
    return changes(old.to_dict(), new.to_dict(), WORKLOAD_KNOBS)


class PlaygroundRun:
    def __init__(self, setup: Setup, model, is_alive=lambda: True, idle_timeout_s: float = 300):
        if model is None:
            raise ValueError("the Playground runs the real model: pass a loaded model")
        self.setup = setup
        self.model_name = model.name
        config = EngineConfig(model=model.name, kv_pool_tokens=KV_POOL_TOKENS,
                              max_model_len=min(2048, model.max_model_len), seed=setup.seed)
        self.max_model_len = config.max_model_len
        self.live = LiveRun(setup.policy(), setup.workload(), model=model, config=config,
                            is_alive=is_alive, idle_timeout_s=idle_timeout_s)
        self.workload_marks: list[tuple[int, float, str]] = []
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

    def close(self) -> None:
        """Stop for good and free the engine's KV pool (the page forgets this run)."""
        self.live.close()

    def heartbeat(self) -> None:
        self.live.heartbeat()

    @property
    def state(self) -> str:
        return self.live.state

    @property
    def steps_taken(self) -> int:
        """Engine steps so far (read without waiting for the step in progress)."""
        return self.live.engine.step_count

    @property
    def arrived(self) -> int:
        """Requests sent to the engine so far."""
        return self.live.feed.count

    @property
    def can_continue(self) -> bool:
        """Finished, but the workload was extended since (more requests to send)."""
        return self.live.state == "finished" and not self.live.feed.exhausted

    def apply(self, setup: Setup) -> list[str]:
        """Send what changed to the engine; returns the changes, in words."""
        old_policy, new_policy = self.setup.policy(), setup.policy()   # a bad policy changes nothing
        old, self.setup = self.setup, setup
        changes = []
        if new_policy != old_policy:
            changes += old_policy.diff(new_policy)
            self.live.set_policy(new_policy)
        wl = workload_changes(old, setup)
        if wl:
            engine = self.live.engine
            self.live.set_workload(setup.workload())
            self.workload_marks.append((engine.step_count, engine.clock.now(),
                                        "workload: " + ", ".join(wl)))
            changes += wl
        return changes

    # ----- reading

    def requests_csv(self) -> str:
        return requests_csv(self.live.snapshot(summary=False))

    def steps_csv(self) -> str:
        return steps_csv(self.live.snapshot(summary=False))

    def read(self) -> tuple[Snapshot, Tables]:
        snap = self.live.snapshot(summary=False)    # the page's headline comes from the tables
        return snap, self._tables.update(snap, self.workload_marks)
