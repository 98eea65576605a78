"""How the cluster lab tests lesson 10's claims (their words and thresholds are in labs/claims.py, with
every other claim): for each, the runs that measure it on the simulated cluster, the metric read
from them, and a counter-case, a run where the claim's outcome should NOT appear, which shows what
the claim depends on. The real-cluster check (`python -m labs.cluster.check`) runs the main cases on
real engine servers.

`judge(check, numbers)` turns one run's numbers into the table's Verdict, with words for each way it
can come out; the lab page and the tests call it, so no verdict is written by hand.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from course import claims
from labs.cluster import experiment as lab


@dataclass(frozen=True)
class Check:
    """The runs that test one claim: `measure(profile)` returns the numbers, `value(numbers)` the metric,
    `extra(numbers)` a second condition the claim needs, `words(numbers)` what they show in a sentence;
    `counter_ok(numbers)` says the counter-case came out as it should."""
    claim_id: str
    measure: Callable[[str], dict]
    value: Callable[[dict], float]
    extra: Callable[[dict], bool]
    words: Callable[[dict], str]
    counter_measure: Callable[[str], dict]
    counter_ok: Callable[[dict], bool]

    @property
    def claim(self) -> claims.Claim:
        return claims.CLAIMS[self.claim_id]

    @property
    def id(self) -> str:
        return self.claim_id

    def holds(self, numbers: dict) -> bool:
        return self.claim.passes(self.value(numbers)) and self.extra(numbers)


def judge(check: Check, numbers: dict) -> claims.Verdict:
    """The claim's verdict on one run's numbers."""
    said = check.words(numbers)
    return claims.judge(check.claim_id, check.value(numbers), shown=said, extra_test=check.extra(numbers),
                        not_shown=said + " The claim needs " + check.claim.threshold_text()
                        + (", and its second condition" if not check.extra(numbers) else "") + ".")


ROUTER_FIELDS = ("ttft_p50_s", "ttft_p95_s", "prefix_hit_rate", "load_imbalance")


def router_numbers(runs: dict) -> dict:
    """The numbers a router claim reads, from routed runs ({router: ClusterResult})."""
    return {p: {k: r.summary[k] for k in ROUTER_FIELDS} for p, r in runs.items()}


def autoscaler_numbers(runs: dict, shape=lab.RAMP) -> dict:
    """The numbers an autoscaler claim reads, from ramp runs ({key: ClusterResult})."""
    end = sum(seconds for seconds, _ in shape)
    return {key: {"slo_attainment": r.summary["slo_attainment"], "replica_seconds": r.summary["replica_seconds"],
                  "ttft_p95_s": r.summary["ttft_p95_s"], "max_replicas": r.summary["max_replicas"],
                  "end_replicas": lab.replicas_at(r, end)} for key, r in runs.items()}


def _routers(spec, policies, load_bound=lab.LOAD_BOUND):
    def measure(profile: str) -> dict:
        return router_numbers({p: lab.routing_run(profile, p.split("@")[0], spec,
                                                  load_bound=lab.UNBOUNDED if p.endswith("@unbounded") else load_bound)
                               for p in policies})
    return measure


def _autoscalers(shape=lab.RAMP, startup=None, max_num_seqs=64, metrics=("busy", "waiting")):
    def measure(profile: str) -> dict:
        runs = {}
        for key in metrics:
            metric, _, start = key.partition("@")
            runs[key] = lab.autoscale_run(profile, metric, shape, float(start) if start else startup, max_num_seqs)
        return autoscaler_numbers(runs, shape)
    return measure


STARTUPS_S = (10, 120)      # startup_delay_costs_slo: a replica's start-up, quick and slow
QUICK, SLOW = (f"waiting@{s}" for s in STARTUPS_S)

CHECKS = [
    Check("prefix_affinity_hits", _routers(lab.SHARED, ("round_robin", "prefix_affinity")),
          lambda m: m["prefix_affinity"]["prefix_hit_rate"] - m["round_robin"]["prefix_hit_rate"],
          lambda m: m["prefix_affinity"]["ttft_p50_s"] < m["round_robin"]["ttft_p50_s"],
          lambda m: (f"Prefix affinity found {m['prefix_affinity']['prefix_hit_rate']:.0%} of prompt tokens in the "
                     f"caches against round-robin's {m['round_robin']['prefix_hit_rate']:.0%}; its p50 TTFT was "
                     f"{m['prefix_affinity']['ttft_p50_s']:.2f} s against {m['round_robin']['ttft_p50_s']:.2f} s."),
          _routers(lab.PLAIN, ("round_robin", "prefix_affinity")),
          lambda m: abs(m["prefix_affinity"]["prefix_hit_rate"] - m["round_robin"]["prefix_hit_rate"]) <= 0.01),
    Check("affinity_needs_a_load_bound", _routers(lab.HOT, ("prefix_affinity", "prefix_affinity@unbounded")),
          lambda m: m["prefix_affinity@unbounded"]["load_imbalance"],
          lambda m: m["prefix_affinity@unbounded"]["ttft_p95_s"] >= 2 * m["prefix_affinity"]["ttft_p95_s"],
          lambda m: (f"With one system prompt in every request, unbounded affinity's load imbalance was "
                     f"{m['prefix_affinity@unbounded']['load_imbalance']:.2f} and its p95 TTFT "
                     f"{m['prefix_affinity@unbounded']['ttft_p95_s']:.2f} s; with the load bound, "
                     f"{m['prefix_affinity']['load_imbalance']:.2f} and {m['prefix_affinity']['ttft_p95_s']:.2f} s."),
          _routers(lab.SHARED, ("prefix_affinity@unbounded",)),
          lambda m: m["prefix_affinity@unbounded"]["load_imbalance"] < 1.3),
    Check("busy_fraction_overprovisions", _autoscalers(),
          lambda m: m["busy"]["end_replicas"] - m["waiting"]["end_replicas"],
          lambda m: True,
          lambda m: (f"At the end of the ramp the busy-fraction autoscaler held {m['busy']['end_replicas']} replicas "
                     f"and the waiting one {m['waiting']['end_replicas']}."),
          _autoscalers(max_num_seqs=1),
          lambda m: m["busy"]["end_replicas"] <= m["waiting"]["end_replicas"] + 1),
    Check("startup_delay_costs_slo", _autoscalers(metrics=(QUICK, SLOW)),
          lambda m: m[QUICK]["slo_attainment"] - m[SLOW]["slo_attainment"],
          lambda m: True,
          lambda m: (f"The waiting autoscaler kept {m[QUICK]['slo_attainment']:.0%} of requests within the SLO "
                     f"with a {STARTUPS_S[0]:g} s start-up and {m[SLOW]['slo_attainment']:.0%} with a "
                     f"{STARTUPS_S[1]:g} s one."),
          _autoscalers(shape=lab.GENTLE, metrics=(QUICK, SLOW)),
          lambda m: abs(m[SLOW]["slo_attainment"] - m[QUICK]["slo_attainment"]) <= 0.01),
]


def verdict(check: Check, profile: str = lab.PROFILE) -> dict:
    """Both runs of a claim and what they showed."""
    main, counter = check.measure(profile), check.counter_measure(profile)
    return {"claim": check.id, "value": check.value(main), "holds": check.holds(main),
            "counter_holds": check.counter_ok(counter), "numbers": main, "counter_numbers": counter,
            "verdict": judge(check, main)}
