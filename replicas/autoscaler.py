"""The autoscaler: how many replicas there should be, from one metric and its target.

Every `interval_s` it reads the metric over the replicas that are ready and works out the count
the way Kubernetes' Horizontal Pod Autoscaler does:

    desired = ceil(ready replicas x metric per replica / target)

(left alone while the ratio is within `tolerance` of 1). Two metrics:
  - busy: the share of the last interval each replica spent running engine steps, averaged;
    what a GPU-utilization dashboard shows;
  - waiting: requests in each replica's waiting queue, averaged (vllm:num_requests_waiting,
    what KEDA or the HPA scale vLLM on).
It scales up at once, and down only to the largest count it wanted over the last
`scale_down_window_s` (the HPA's stabilization window), so a quiet moment does not remove
replicas a burst will need. A new replica takes `startup_s` before it can take requests
(scheduling a pod, pulling an image, loading weights); a removed one takes no new requests
and is gone once its last one finishes. Replicas cost from the moment they are asked for.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

METRICS = ("busy", "waiting")
METRIC_HELP = {"busy": "share of time each replica spent running steps (0-1)",
               "waiting": "requests waiting per replica"}


@dataclass(frozen=True, slots=True)
class AutoscalerSpec:
    metric: str = "waiting"
    target: float = 2.0             # busy: a share 0-1; waiting: requests per replica
    interval_s: float = 15.0        # the HPA's default sync period
    startup_s: float = 30.0
    min_replicas: int = 1
    max_replicas: int = 16
    scale_down_window_s: float = 120.0
    tolerance: float = 0.1          # the HPA's default

    def validate(self) -> "AutoscalerSpec":
        problems = []
        if self.metric not in METRICS:
            problems.append(f"metric {self.metric!r} is not one of {', '.join(METRICS)}")
        hi = 1.0 if self.metric == "busy" else 10_000.0
        checks = (("target", self.target, 0.01, hi), ("interval_s", self.interval_s, 0.1, 3600),
                  ("startup_s", self.startup_s, 0, 3600), ("min_replicas", self.min_replicas, 1, 64),
                  ("max_replicas", self.max_replicas, 1, 64), ("scale_down_window_s", self.scale_down_window_s, 0, 86400),
                  ("tolerance", self.tolerance, 0, 1))
        for name, value, lo, top in checks:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= top:
                problems.append(f"{name} must be a number from {lo:g} to {top:g} (got {value!r})")
        if not problems and self.min_replicas > self.max_replicas:
            problems.append(f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Autoscaler:
    def __init__(self, spec: AutoscalerSpec):
        self.spec = spec.validate()
        self._wanted: list[tuple[float, int]] = []    # (time, desired count) within the window

    def desired(self, t: float, current: int, ready: int, per_replica: float) -> int:
        """How many replicas there should be at time `t`: `current` exist (ready or starting),
        `ready` of them take requests, and the metric averages `per_replica` over those."""
        s = self.spec
        want = current
        if ready:
            ratio = per_replica / s.target
            if abs(ratio - 1) > s.tolerance:
                want = math.ceil(ready * ratio - 1e-9)
        want = min(s.max_replicas, max(s.min_replicas, want))
        self._wanted = [(u, n) for u, n in self._wanted if u > t - s.scale_down_window_s] + [(t, want)]
        if want < current:
            want = min(current, max(n for _, n in self._wanted))
        return want
