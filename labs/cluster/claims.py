"""The claims of lesson 10 ("Beyond one replica"), each with the run that backs it, the metric and
threshold it is judged by, and a counter-case: a run where the claim's outcome should NOT appear,
which shows what the claim depends on. Each is decided on the simulated cluster (fast and the
same on every machine with a roofline profile), and the real-cluster check
(`python -m labs.cluster.check`) runs the main cases on real engine servers.

A claim's `measure(profile)` returns the numbers it is judged on; `holds(numbers)` says whether
the outcome appeared. The lesson and the lab page state each verdict from these, never by hand.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from labs.cluster import experiment as lab


@dataclass(frozen=True)
class Claim:
    """A claim in the claims table's shape (id, lesson, lab, text, metric, threshold, unit, above,
    counter), with the runs that measure it here: `value(numbers)` is the metric, `extra(numbers)`
    a second condition the claim needs; `counter_ok(numbers)` says the counter-case came out as it
    should (the claim's outcome absent, or its cause shown to be what the claim says)."""
    id: str
    lesson: str
    lab: str
    text: str
    metric: str
    threshold: float
    unit: str
    above: bool
    counter: str
    measure: Callable[[str], dict]
    value: Callable[[dict], float]
    extra: Callable[[dict], bool]
    counter_measure: Callable[[str], dict]
    counter_ok: Callable[[dict], bool]

    def threshold_text(self) -> str:
        return f"{'at least' if self.above else 'at most'} {self.threshold:g}{self.unit}"

    def holds(self, numbers: dict) -> bool:
        v = self.value(numbers)
        return (v >= self.threshold if self.above else v <= self.threshold) and self.extra(numbers)


def _routers(spec, policies, load_bound=lab.LOAD_BOUND):
    def measure(profile: str) -> dict:
        runs = {p: lab.routing_run(profile, p.split("@")[0], spec,
                                   load_bound=lab.UNBOUNDED if p.endswith("@unbounded") else load_bound)
                for p in policies}
        return {p: {k: r.summary[k] for k in ("ttft_p50_s", "ttft_p95_s", "prefix_hit_rate", "load_imbalance")}
                for p, r in runs.items()}
    return measure


def _autoscalers(shape=lab.RAMP, startup=None, max_num_seqs=64, metrics=("busy", "waiting")):
    def measure(profile: str) -> dict:
        out = {}
        for key in metrics:
            metric, _, start = key.partition("@")
            res = lab.autoscale_run(profile, metric, shape, float(start) if start else startup, max_num_seqs)
            out[key] = {k: res.summary[k] for k in ("slo_attainment", "replica_seconds", "ttft_p95_s", "max_replicas")}
            out[key]["end_replicas"] = lab.replicas_at(res, sum(seconds for seconds, _ in shape))
        return out
    return measure


LESSON = "beyond-one-replica"
CLAIMS = [
    Claim("prefix_affinity_hits", LESSON, "cluster",
          "On a shared-prefix, multi-turn workload near capacity, routing by prefix affinity finds more of each "
          "prompt in the replicas' prefix caches than round-robin does, so its requests have fewer prompt tokens "
          "to compute and its median TTFT is lower. (Its p95, set by bursts of queueing, can go either way.)",
          "prefix hit rate under prefix_affinity − under round_robin (and p50 TTFT lower)", 0.05, "", True,
          "prompts that share nothing: the hit rates are then within 0.01 (the gain comes from the shared "
          "prefixes, not from the router as such)",
          _routers(lab.SHARED, ("round_robin", "prefix_affinity")),
          lambda m: m["prefix_affinity"]["prefix_hit_rate"] - m["round_robin"]["prefix_hit_rate"],
          lambda m: m["prefix_affinity"]["ttft_p50_s"] < m["round_robin"]["ttft_p50_s"],
          _routers(lab.PLAIN, ("round_robin", "prefix_affinity")),
          lambda m: abs(m["prefix_affinity"]["prefix_hit_rate"] - m["round_robin"]["prefix_hit_rate"]) <= 0.01),
    Claim("affinity_needs_a_load_bound", LESSON, "cluster",
          "When one system prompt is in every request, prefix affinity without a load bound sends them all to "
          "one replica: the load imbalance soars and p95 TTFT is far worse than with the bound.",
          "load imbalance under unbounded prefix affinity (and p95 TTFT at least twice the bounded one's)",
          1.5, "×", True,
          "eight system prompts and many conversations spread the prefixes: unbounded affinity then stays "
          "nearly even (imbalance below 1.3) without any bound",
          _routers(lab.HOT, ("prefix_affinity", "prefix_affinity@unbounded")),
          lambda m: m["prefix_affinity@unbounded"]["load_imbalance"],
          lambda m: m["prefix_affinity@unbounded"]["ttft_p95_s"] >= 2 * m["prefix_affinity"]["ttft_p95_s"],
          _routers(lab.SHARED, ("prefix_affinity@unbounded",)),
          lambda m: m["prefix_affinity@unbounded"]["load_imbalance"] < 1.3),
    Claim("busy_fraction_overprovisions", LESSON, "cluster",
          "After a traffic peak, when traffic is back to half of what one replica serves, an autoscaler on busy "
          "fraction (target 0.7) still holds most of its replicas, while one on waiting requests (target 2 per "
          "replica) is back to one or two: every batching replica that holds a request looks busy.",
          "replicas held at the end of the ramp, busy autoscaler − waiting autoscaler", 2, "", True,
          "batching off (max_num_seqs 1): busy fraction is then the share of time a replica's one slot is "
          "used, it falls with the traffic, and the busy autoscaler ends within one replica of the waiting one",
          _autoscalers(),
          lambda m: m["busy"]["end_replicas"] - m["waiting"]["end_replicas"],
          lambda m: True,
          _autoscalers(max_num_seqs=1),
          lambda m: m["busy"]["end_replicas"] <= m["waiting"]["end_replicas"] + 1),
    Claim("startup_delay_costs_slo", LESSON, "cluster",
          "The longer a new replica takes to start, the more requests miss the SLO while traffic rises: the "
          "waiting autoscaler attains less with a 120 s start-up than with a 10 s one.",
          "SLO attainment with a 10 s start-up − with a 120 s start-up (waiting autoscaler)", 0.05, "", True,
          "a gentle ramp that one replica serves: no new replica is needed, so the start-up delay changes "
          "nothing (attainment within 0.01)",
          _autoscalers(metrics=("waiting@10", "waiting@120")),
          lambda m: m["waiting@10"]["slo_attainment"] - m["waiting@120"]["slo_attainment"],
          lambda m: True,
          _autoscalers(shape=lab.GENTLE, metrics=("waiting@10", "waiting@120")),
          lambda m: abs(m["waiting@120"]["slo_attainment"] - m["waiting@10"]["slo_attainment"]) <= 0.01),
]


def verdict(claim: Claim, profile: str = lab.PROFILE) -> dict:
    """Both runs of a claim and what they showed."""
    main, counter = claim.measure(profile), claim.counter_measure(profile)
    return {"claim": claim.id, "value": claim.value(main), "holds": claim.holds(main),
            "counter_holds": claim.counter_ok(counter), "numbers": main, "counter_numbers": counter}
