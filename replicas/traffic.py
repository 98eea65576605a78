"""Traffic that changes over time: a workload whose arrival rate follows a list of phases.

`ramp(spec, phases)` draws the requests of `spec` (its lengths, prompts, system prompts and
conversations) with the rate of each phase in turn: [(seconds, requests/s), ...]. The draws come
from one ArrivalFeed, so the same spec and phases give the same requests.
"""
from __future__ import annotations

from dataclasses import replace

from engine.runs.arrivals import ArrivalFeed
from engine.core.request import Request
from engine.runs.workload import PromptMaker, WorkloadSpec


def ramp(spec: WorkloadSpec, phases: list[tuple[float, float]], prompts: PromptMaker | None = None) -> list[Request]:
    if not phases:
        raise ValueError("a ramp needs at least one phase (seconds, requests/s)")
    for i, (seconds, rate) in enumerate(phases):
        if not (0 < seconds <= 86_400) or not (0 < rate <= 10_000):
            raise ValueError(f"phase {i}: seconds must be in (0, 86400] and rate in (0, 10000] "
                             f"(got {seconds!r} s at {rate!r} req/s)")
    feed = ArrivalFeed(replace(spec, continuous=True, rate=phases[0][1], start_s=0.0), prompts)
    out, t = [], 0.0
    for i, (seconds, rate) in enumerate(phases):
        if i:
            feed.set_spec(replace(feed.spec, rate=rate), t)
        t += seconds
        out += feed.due(t)
    return out


def rate_at(phases: list[tuple[float, float]], t: float) -> float:
    """The arrival rate the phases give at time t (0 past the end)."""
    start = 0.0
    for seconds, rate in phases:
        if t < start + seconds:
            return rate
        start += seconds
    return 0.0
