"""A simulated cluster: N replicas, each the engine's own Engine and Scheduler on a virtual clock
with step times from a step model (engine/sim/simulate.py), behind a router and, optionally, an
autoscaler.

Time moves arrival by arrival. Before each request is routed, every replica runs the steps that
start before its arrival time, so the router sees each replica as it is then (a step in
progress counts as done: the state a replica would report at the end of it). The autoscaler
acts at its own interval between arrivals. Each replica keeps its own clock; they all read the
same time axis, since every clock starts at 0 and moves only by steps and idle waits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.engine import Engine
from engine.core.kv_cache import block_keys
from engine.core.metrics import SLO, request_row
from engine.core.request import Request
from engine.sim.simulate import SimProfile, build_simulation, fresh_copy

from .autoscaler import Autoscaler, AutoscalerSpec
from .result import ClusterResult, Choice, ReplicaLife
from .router import ReplicaState, Router

MAX_REPLICAS = 64


class SimReplica:
    """One replica: an engine on its own virtual clock, and its life in the cluster."""

    def __init__(self, name: int, engine: Engine, asked_s: float, ready_s: float):
        self.engine = engine
        self.life = ReplicaLife(name, asked_s, ready_s)
        self.busy_s = 0.0                  # time spent running steps, in all

    @property
    def name(self) -> int:
        return self.life.name

    def advance(self, t: float) -> None:
        """Run every step that starts before `t`."""
        eng = self.engine
        while eng.has_work() and eng.clock.now() < t:
            rec = eng.step()
            if rec is not None:
                self.busy_s += rec.t_end_s - rec.t_start_s
                continue
            wake = eng.next_wake_s()
            if wake is None or wake >= t:
                return
            eng.clock.sleep_until(max(wake, eng.clock.now()))

    def state(self) -> ReplicaState:
        eng = self.engine
        sched = eng.scheduler
        waiting = len(sched.waiting) + len(eng.pending)
        return ReplicaState(self.name, waiting + len(sched.running), waiting,
                            eng.pool.used_blocks / eng.pool.capacity_blocks)


@dataclass
class SimCluster:
    profile: SimProfile
    policy: SchedulerPolicy = field(default_factory=SchedulerPolicy)
    replicas: int = 4
    router: str = "round_robin"
    load_bound: float = 1.25
    autoscaler: AutoscalerSpec | None = None
    config: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self):
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) or not 1 <= self.replicas <= MAX_REPLICAS:
            raise ValueError(f"replicas must be a whole number from 1 to {MAX_REPLICAS} (got {self.replicas!r})")
        if self.autoscaler is not None and self.autoscaler.validate().max_replicas > MAX_REPLICAS:
            raise ValueError(f"max_replicas must be at most {MAX_REPLICAS}")
        self.policy.validate()

    def run(self, requests: list[Request]) -> ClusterResult:
        """Route and serve `requests` (fresh copies are served; the originals are left as they are)."""
        reqs = sorted((fresh_copy(r) for r in requests), key=lambda r: r.arrival_s)
        self._fleet: list[SimReplica] = []
        self._choices: list[Choice] = []
        self._timeline: list[tuple[float, int, int, float]] = []
        router = Router(self.router, self.load_bound)
        scaler = Autoscaler(self.autoscaler) if self.autoscaler else None
        for _ in range(self.replicas):
            self._add(0.0, 0.0)
        next_tick = scaler.spec.interval_s if scaler else math.inf
        block = self.config.block_size
        for req in reqs:
            t = req.arrival_s
            while next_tick <= t:
                self._tick(scaler, next_tick)
                next_tick += scaler.spec.interval_s
            self._advance(t)
            ready = [r for r in self._fleet if r.life.takes_requests(t)]
            if not ready:                           # none ready yet: the earliest to start takes it
                ready = [min((r for r in self._fleet if r.life.stopped_s is None), key=lambda r: r.life.ready_s)]
            keys = block_keys(req, block, (req.num_tokens - 1) // block) if router.policy == "prefix_affinity" else []
            chosen, why = router.pick([r.state() for r in ready], keys)
            replica = next(r for r in ready if r.name == chosen.name)
            replica.engine.submit(req)
            replica.life.routed += 1
            self._choices.append(Choice(t, req.id, replica.name, why))
        while any(r.engine.has_work() for r in self._fleet):
            if scaler and next_tick < math.inf:
                self._tick(scaler, next_tick)
                next_tick += scaler.spec.interval_s
                if not any(r.engine.has_work() for r in self._fleet):
                    break
            else:
                self._advance(math.inf)
        end = max([r.finish_s for r in reqs if r.finish_s is not None] + [reqs[-1].arrival_s if reqs else 0.0])
        for r in self._fleet:
            if r.life.stopped_s is None:
                r.life.stopped_s = max(end, r.life.asked_s)
            r.life.busy_s = r.busy_s
        slo = SLO(self.policy.ttft_slo_s, self.policy.tpot_slo_s)
        served_by = {c.request_id: c.replica for c in self._choices}
        return ClusterResult(
            requests=[{**request_row(r), "replica": served_by[r.id]} for r in reqs],
            steps={r.name: r.engine.steps for r in self._fleet},
            replicas=[r.life for r in self._fleet], choices=self._choices, timeline=self._timeline,
            slo=slo, end_s=end, prefix_queries=sum(r.engine.pool.prefix_queries for r in self._fleet),
            prefix_hits=sum(r.engine.pool.prefix_hits for r in self._fleet),
            label=f"simulated: {self.profile.label}")

    # ----- the fleet -----

    def _add(self, asked_s: float, ready_s: float) -> SimReplica:
        engine = build_simulation(self.config, self.policy, self.profile)
        engine.clock.sleep_until(asked_s)
        replica = SimReplica(len(self._fleet), engine, asked_s, ready_s)
        self._fleet.append(replica)
        return replica

    def _advance(self, t: float) -> None:
        for r in self._fleet:
            r.advance(t)
            if r.life.draining and r.life.stopped_s is None and not r.engine.has_work():
                r.life.stopped_s = max(r.engine.clock.now(), r.life.drain_s)

    def _tick(self, scaler: Autoscaler, t: float) -> None:
        """The autoscaler's turn at time `t`: read the metric, start or retire replicas."""
        self._advance(t)
        live = [r for r in self._fleet if not r.life.draining]
        ready = [r for r in live if r.life.ready_s <= t]
        interval = scaler.spec.interval_s
        if scaler.spec.metric == "busy":
            values = [min(1.0, (r.busy_s - r.life.busy_at_tick) / interval) for r in ready]
        else:
            values = [r.state().waiting for r in ready]
        for r in self._fleet:
            r.life.busy_at_tick = r.busy_s
        per_replica = sum(values) / len(values) if values else 0.0
        want = scaler.desired(t, len(live), len(ready), per_replica)
        for _ in range(want - len(live)):
            self._add(t, t + scaler.spec.startup_s)
        if want < len(live):
            # Retire the replicas still starting first (newest first), then the least loaded.
            order = sorted(live, key=lambda r: (r.life.ready_s <= t, r.state().outstanding, -r.name))
            for r in order[:len(live) - want]:
                r.life.draining, r.life.drain_s = True, t
                if not r.engine.has_work():
                    r.life.stopped_s = t
        self._timeline.append((t, sum(1 for r in self._fleet if not r.life.draining and r.life.ready_s <= t),
                               sum(1 for r in self._fleet if not r.life.draining and r.life.ready_s > t), per_replica))
