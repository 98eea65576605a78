"""What a cluster run leaves: every request (and the replica that served it), each replica's
steps and life, the router's choices, the autoscaler's timeline, and the headline numbers,
defined once here for the simulated and the real cluster alike.

Headline numbers:
  - TTFT p50 / p95 over the finished requests (engine.metrics' definitions);
  - SLO attainment: the share of *all* requests that finished within the policy's TTFT and
    TPOT targets (one that never finished missed);
  - prefix hit rate: prompt tokens found in the replicas' prefix caches / tokens looked up;
  - load imbalance: the busiest replica's busy time over the mean (1.0 = perfectly even), over
    the replicas that lived the whole run;
  - replica-seconds: every replica's time from being asked for to being gone, summed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.core.metrics import SLO, FINISHED, percentile


@dataclass(slots=True)
class ReplicaLife:
    name: int
    asked_s: float                 # when the cluster asked for it (costs from here)
    ready_s: float                 # when it could take requests
    stopped_s: float | None = None  # when it was gone (None: still there)
    draining: bool = False
    drain_s: float = 0.0
    routed: int = 0
    busy_s: float = 0.0
    busy_at_tick: float = 0.0      # busy_s at the autoscaler's last look

    def takes_requests(self, t: float) -> bool:
        return not self.draining and self.stopped_s is None and self.ready_s <= t

    @property
    def seconds(self) -> float:
        return (self.stopped_s if self.stopped_s is not None else self.asked_s) - self.asked_s


@dataclass(frozen=True, slots=True)
class Choice:
    t_s: float
    request_id: str
    replica: int
    why: str


@dataclass
class ClusterResult:
    requests: list[dict]               # request rows (engine.metrics.request_row) + "replica"
    steps: dict[int, list]             # replica -> its StepRecords (simulated), or [] (real)
    replicas: list[ReplicaLife]
    choices: list[Choice]
    timeline: list[tuple[float, int, int, float]]   # autoscaler: (t, ready, starting, metric per replica)
    slo: SLO
    end_s: float
    prefix_queries: int = 0
    prefix_hits: int = 0
    label: str = ""
    summary: dict = field(default_factory=dict)

    def __post_init__(self):
        self.summary = summarize(self)


def summarize(res: ClusterResult) -> dict:
    rows = res.requests
    done = [r for r in rows if r["status"] == FINISHED]
    ttfts = [r["ttft_s"] for r in done]
    met = sum(res.slo.met_by(r["status"], r["ttft_s"], r["tpot_s"], r["e2e_s"]) for r in rows)
    whole = [r for r in res.replicas if r.asked_s == 0 and r.ready_s == 0]
    busy = [r.busy_s for r in whole]
    mean_busy = sum(busy) / len(busy) if busy else 0.0
    return {
        "requests": len(rows), "finished": len(done),
        "ttft_p50_s": percentile(ttfts, 50), "ttft_p95_s": percentile(ttfts, 95),
        "slo_attainment": met / len(rows) if rows else math.nan,
        "prefix_hit_rate": res.prefix_hits / res.prefix_queries if res.prefix_queries else math.nan,
        "load_imbalance": max(busy) / mean_busy if mean_busy > 0 else math.nan,
        "replica_seconds": sum(r.seconds for r in res.replicas),
        "max_replicas": max((n + s for _, n, s, _ in res.timeline), default=len(res.replicas)),
        "duration_s": res.end_s,
    }
