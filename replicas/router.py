"""The router: which replica gets each request. One object, four named policies.

A router sees each replica only as a `ReplicaState`: what it has been sent and not yet answered,
and what the replica itself reports (its waiting queue, its KV cache usage; on a real cluster
these are read off the replica's /metrics page). It never sees a batch. Policies:

  - round_robin: each replica in turn, whatever its load. What a Kubernetes Service gives: it
    spreads connections without looking at the pods behind it.
  - least_outstanding: the replica with the fewest requests sent and not yet finished (Envoy's
    and most proxies' "least request" balancing).
  - least_waiting_kv: the shortest waiting queue, then the least KV cache in use: the two
    numbers an inference gateway's endpoint picker scores replicas by.
  - prefix_affinity: the replica that was last sent the longest leading run of this prompt's
    KV blocks (so its prefix cache likely holds them), unless that would load it past
    `load_bound` times a fair share; then the least outstanding one. A router-side index, as an
    approximate prefix-cache scorer keeps: it records what it sent where, not what each replica
    still holds.
Ties go to the replica listed first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

POLICIES = ("round_robin", "least_outstanding", "least_waiting_kv", "prefix_affinity")
POLICY_HELP = {
    "round_robin": "each replica in turn, blind to load (a Kubernetes Service)",
    "least_outstanding": "fewest requests sent and not yet finished",
    "least_waiting_kv": "shortest waiting queue, then least KV cache in use (an inference gateway)",
    "prefix_affinity": "the replica that last got this prompt's prefix, within a load bound",
}


@dataclass(slots=True)
class ReplicaState:
    name: int
    outstanding: int = 0        # sent to it and not finished
    waiting: int = 0            # its waiting queue (vllm:num_requests_waiting)
    kv_usage: float = 0.0       # share of its KV blocks in use, 0-1 (vllm:kv_cache_usage_perc)


class Router:
    def __init__(self, policy: str = "round_robin", load_bound: float = 1.25, index_limit: int = 200_000):
        if policy not in POLICIES:
            raise ValueError(f"unknown routing policy {policy!r}: choose one of {', '.join(POLICIES)}")
        if not (isinstance(load_bound, (int, float)) and 1.0 <= load_bound <= 100.0):
            raise ValueError(f"load_bound must be a number from 1 to 100 (got {load_bound!r})")
        self.policy, self.load_bound, self.index_limit = policy, float(load_bound), index_limit
        self._turn = 0
        self._owner: dict[int, int] = {}     # prefix key -> the replica last sent it (prefix_affinity)

    def pick(self, states: list[ReplicaState], prefix_keys: list[int] = ()) -> tuple[ReplicaState, str]:
        """The replica for a request whose prompt's full blocks have the chained keys
        `prefix_keys` (engine.kv_cache.block_keys), and why, in a few words."""
        if not states:
            raise ValueError("no replica is ready to take requests")
        p = self.policy
        if p == "round_robin":
            chosen, why = states[self._turn % len(states)], "next in turn"
            self._turn += 1
        elif p == "least_outstanding":
            chosen, why = least_loaded(states), "fewest outstanding"
        elif p == "least_waiting_kv":
            chosen, why = min(states, key=lambda s: (s.waiting, s.kv_usage)), "shortest queue, least KV"
        else:
            chosen, why = self._affinity(states, prefix_keys)
        return chosen, why

    def _affinity(self, states, keys) -> tuple[ReplicaState, str]:
        by_name = {s.name: s for s in states}
        match, depth = None, 0
        for i, key in enumerate(keys):
            owner = by_name.get(self._owner.get(key))
            if owner is None:
                break
            match, depth = owner, i + 1
        bound = math.ceil(self.load_bound * (sum(s.outstanding for s in states) + 1) / len(states))
        if match is not None and match.outstanding + 1 <= bound:
            chosen, why = match, f"prefix: {depth} blocks"
        else:
            chosen = least_loaded(states)
            why = "over the load bound: fewest outstanding" if match is not None else "no prefix seen: fewest outstanding"
        if len(self._owner) > self.index_limit:     # a bounded index: the oldest entries go first
            for key in list(self._owner)[:len(self._owner) // 2]:
                del self._owner[key]
        for key in keys:
            self._owner.pop(key, None)               # re-inserted: the newest entries last
            self._owner[key] = chosen.name
        return chosen, why


def least_loaded(states: list[ReplicaState]) -> ReplicaState:
    return min(states, key=lambda s: s.outstanding)
