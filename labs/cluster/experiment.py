"""Beyond one replica: routing policies on a shared-prefix workload, and two autoscalers under a
traffic ramp, on the simulated cluster (cluster/simulated.py: every replica is the engine's own
Engine and Scheduler, on the virtual clock, step times from a step model). No Streamlit here.

Rates are set from what one replica serves of each workload on the chosen step model (its
capacity, measured on the simulator: `capacity`), so the experiment means the same on a
simulated GPU and on this machine's calibrated profile.

Lesson 10's claims (course/claims.py) are judged here as every lab judges its own: each claim's runs
give its numbers (`CLAIM_RUNS`), and its verdict function (`VERDICTS`) calls `claims.judge` with words
for each way the run can come out. The lab page, `python -m labs.cluster.check` (the same verdicts on
real servers' numbers) and tests/test_cluster_claims.py (each claim with its counter-case,
labs/claim_cases.py) call them.
"""
from __future__ import annotations

import functools
from dataclasses import replace

from replicas.autoscaler import AutoscalerSpec
from replicas.result import ClusterResult
from replicas.router import POLICIES
from replicas.simulated import SimCluster
from replicas.traffic import ramp
from course import claims
from engine.runs.arrivals import build_requests
from engine.core.config import SchedulerPolicy
from engine.core.metrics import SLO
from engine.sim.simulate import SimProfile, resolve_profile
from engine.runs.workload import WorkloadSpec

PROFILE = "l4:llama-3.1-8b"       # a common inference GPU; any profile engine.simulate knows works
REPLICAS = 4
LOAD = 0.95                       # the routing runs' traffic, as a share of what the replicas serve
LOAD_BOUND = 1.25
UNBOUNDED = 100.0                 # a load bound so loose it never binds
POLICY = SchedulerPolicy(max_num_seqs=64, max_num_batched_tokens=2048, enable_prefix_caching=True,
                         ttft_slo_s=2.0, tpot_slo_s=0.15)
# Multi-turn chat: 8 system prompts of 1,024 tokens, 100 conversations of up to 6 turns.
SHARED = WorkloadSpec(num_requests=400, prompt_lo=32, prompt_hi=128, output_lo=32, output_hi=128,
                      system_prompts=8, system_prompt_tokens=1024, conversations=100, turns=6, seed=0)
PLAIN = replace(SHARED, system_prompts=0, conversations=0, prompt_lo=400, prompt_hi=1400)   # nothing shared
HOT = replace(SHARED, system_prompts=1, conversations=0)                                      # one prompt for all
# The ramp: (seconds, traffic as a multiple of one replica's capacity).
RAMP = [(40, 0.5), (40, 2.0), (60, 4.0), (40, 2.0), (60, 0.5)]
GENTLE = [(40, 0.3), (40, 0.6), (60, 0.8), (40, 0.6), (60, 0.3)]
RAMP_SPEC = WorkloadSpec(prompt_lo=64, prompt_hi=256, output_lo=32, output_hi=128, seed=1)
AUTOSCALERS = {"busy": AutoscalerSpec("busy", 0.7, interval_s=10, startup_s=30, max_replicas=8, scale_down_window_s=60),
               "waiting": AutoscalerSpec("waiting", 2.0, interval_s=10, startup_s=30, max_replicas=8,
                                         scale_down_window_s=60)}
AUTOSCALER_NAMES = {"busy": f"busy fraction ≥ {AUTOSCALERS['busy'].target:g}",
                    "waiting": f"waiting ≥ {AUTOSCALERS['waiting'].target:g} per replica"}


def profile_named(name: str = PROFILE) -> SimProfile:
    return resolve_profile(name)


def policy_for(profile: SimProfile, **changes) -> SchedulerPolicy:
    """The lab's policy, its KV capacity what the simulated device holds (capped for speed)."""
    cap = profile.kv_capacity_tokens or POLICY.kv_capacity_tokens
    return POLICY.changed(kv_capacity_tokens=min(cap, 100_000), **changes)


def capacity(profile_name: str, spec: WorkloadSpec, max_num_seqs: int = 64) -> float:
    """Requests a second one replica serves of `spec` (200 requests arriving at once, on the
    simulator): the unit the experiments' traffic is set in."""
    return _capacity(profile_name, tuple(spec.to_dict().items()), max_num_seqs)


@functools.lru_cache(maxsize=32)
def _capacity(profile_name: str, spec_items: tuple, max_num_seqs: int) -> float:
    spec = WorkloadSpec(**dict(spec_items))
    profile = profile_named(profile_name)
    one = replace(spec, num_requests=200, rate=0, conversations=min(spec.conversations, 60))
    res = SimCluster(profile, policy_for(profile, max_num_seqs=max_num_seqs), 1).run(build_requests(one))
    return res.summary["finished"] / res.summary["duration_s"]


# ----------------------------------------------------------------------------- routing


def routing_requests(profile_name: str, spec: WorkloadSpec = SHARED, replicas: int = REPLICAS, load: float = LOAD):
    rate = load * replicas * capacity(profile_name, spec)
    return build_requests(replace(spec, rate=rate))


def routing_run(profile_name: str, router: str, spec: WorkloadSpec = SHARED, replicas: int = REPLICAS,
                load: float = LOAD, load_bound: float = LOAD_BOUND) -> ClusterResult:
    profile = profile_named(profile_name)
    reqs = routing_requests(profile_name, spec, replicas, load)
    return SimCluster(profile, policy_for(profile), replicas, router, load_bound).run(reqs)


def routing_runs(profile_name: str = PROFILE, spec: WorkloadSpec = SHARED, replicas: int = REPLICAS,
                 load: float = LOAD, load_bound: float = LOAD_BOUND, policies=POLICIES) -> dict[str, ClusterResult]:
    return {p: routing_run(profile_name, p, spec, replicas, load, load_bound) for p in policies}


def routing_table(runs: dict[str, ClusterResult]) -> list[dict]:
    return [{"router": name, "p95 TTFT (s)": r.summary["ttft_p95_s"], "p50 TTFT (s)": r.summary["ttft_p50_s"],
             "prefix hit rate": r.summary["prefix_hit_rate"], "load imbalance": r.summary["load_imbalance"],
             "SLO attainment": r.summary["slo_attainment"]} for name, r in runs.items()]


# ----------------------------------------------------------------------------- autoscaling


def ramp_phases(profile_name: str, shape=RAMP, max_num_seqs: int = 64) -> list[tuple[float, float]]:
    mu = capacity(profile_name, RAMP_SPEC, max_num_seqs)
    return [(seconds, share * mu) for seconds, share in shape]


def autoscale_run(profile_name: str, metric: str, shape=RAMP, startup_s: float | None = None,
                  max_num_seqs: int = 64) -> ClusterResult:
    profile = profile_named(profile_name)
    spec = AUTOSCALERS[metric] if startup_s is None else replace(AUTOSCALERS[metric], startup_s=startup_s)
    reqs = ramp(RAMP_SPEC, ramp_phases(profile_name, shape, max_num_seqs))
    return SimCluster(profile, policy_for(profile, max_num_seqs=max_num_seqs), 1, "least_outstanding",
                      autoscaler=spec).run(reqs)


def replicas_at(res: ClusterResult, t: float) -> int:
    """Replicas the autoscaler had asked for (ready or starting) at its last look up to time t."""
    seen = [n + s for u, n, s, _ in res.timeline if u <= t]
    return seen[-1] if seen else sum(1 for r in res.replicas if r.asked_s == 0)


def autoscale_runs(profile_name: str = PROFILE, shape=RAMP, startup_s: float | None = None,
                   max_num_seqs: int = 64) -> dict[str, ClusterResult]:
    return {m: autoscale_run(profile_name, m, shape, startup_s, max_num_seqs) for m in AUTOSCALERS}


# ----------------------------------------------------------------------------- on real servers

REAL_REPLICAS = 3
REAL_LOAD = 0.9            # the real servers' traffic, as a share of what they serve together
REAL_ROUTERS = ("round_robin", "prefix_affinity")
REAL_ESTIMATE_S = 240.0    # three servers starting, a capacity probe and two routed runs, on a small CPU
# The real servers' workloads: the simulated ones scaled to a small CPU and the tiny model's context.
REAL_POLICY = SchedulerPolicy(max_num_seqs=16, enable_prefix_caching=True, ttft_slo_s=2.0, tpot_slo_s=0.5)
REAL_SHARED = WorkloadSpec(num_requests=90, prompt_lo=16, prompt_hi=48, output_lo=8, output_hi=24, system_prompts=4,
                           system_prompt_tokens=384, conversations=24, turns=4, seed=0)
REAL_HOT = replace(REAL_SHARED, system_prompts=1, conversations=0)
REAL_RAMP_SPEC = WorkloadSpec(prompt_lo=32, prompt_hi=96, output_lo=16, output_hi=48, seed=1)
REAL_RAMP = [(15, 0.5), (15, 1.5), (20, 2.5), (15, 1.5), (30, 0.4)]
REAL_SLO_REQUESTS = 4      # the TTFT target: the time one server takes to serve this many requests alone


def real_capacity(urls, prompts, spec: WorkloadSpec, model: str) -> float:
    """Requests a second one real server serves of `spec` (24 arriving at once)."""
    from replicas.real import run_real
    reqs = build_requests(replace(spec, num_requests=24, rate=0, conversations=0), prompts)
    res = run_real(urls[:1], reqs, model=model)
    return res.summary["finished"] / res.summary["duration_s"]


def real_routing(model, progress=None, refresh: bool = False, peek: bool = False):
    """The routing part on REAL_REPLICAS real engine servers of `model` on this machine (REAL_SHARED, the
    shared-prefix workload, at 90% of what they serve), under round_robin and prefix_affinity:
    {router: summary}. Stored per machine and model (labs.runs.cached); peek=True only looks it up."""
    from engine.runs import results
    from labs.runs import cached, fingerprint
    name = model if isinstance(model, str) else model.name
    path = results.cache_path("cluster-real", fingerprint(model), REAL_ROUTERS, REAL_REPLICAS)

    def compute(loaded):
        from replicas.real import Servers, run_real
        from engine.runs.workload import PromptMaker
        prompts = PromptMaker(loaded.tokenizer)
        with Servers(REAL_REPLICAS, name, REAL_POLICY) as servers:
            if progress:
                progress(0.2, "servers started; measuring one server's capacity")
            mu = real_capacity(servers.urls, prompts, REAL_SHARED, name)
            reqs = build_requests(replace(REAL_SHARED, rate=REAL_LOAD * REAL_REPLICAS * mu), prompts)
            slo = SLO(REAL_SLO_REQUESTS / mu, 60.0)
            out = {}
            for i, router in enumerate(REAL_ROUTERS):
                if progress:
                    progress(0.4 + 0.3 * i, f"routing with {router}")
                out[router] = run_real(servers.urls, reqs, router, model=name, slo=slo).summary
        return out
    got = cached(path, model, compute, refresh, peek)
    return got


def autoscale_table(runs: dict[str, ClusterResult]) -> list[dict]:
    return [{"autoscaler": AUTOSCALER_NAMES.get(m, m), "SLO attainment": r.summary["slo_attainment"],
             "p95 TTFT (s)": r.summary["ttft_p95_s"], "replica-seconds": r.summary["replica_seconds"],
             "most replicas": r.summary["max_replicas"]} for m, r in runs.items()]


# ----------------------------------------------------------------------------- the lesson's claims

ROUTER_FIELDS = ("ttft_p50_s", "ttft_p95_s", "prefix_hit_rate", "load_imbalance")
STARTUPS_S = (10, 120)      # startup_delay_costs_slo: a replica's start-up, quick and slow


def router_numbers(runs: dict) -> dict:
    """The numbers a router claim reads, from routed runs ({router: ClusterResult}; a router run without
    a load bound is keyed "prefix_affinity@unbounded")."""
    return {p: {k: r.summary[k] for k in ROUTER_FIELDS} for p, r in runs.items()}


def autoscaler_numbers(runs: dict, shape=RAMP) -> dict:
    """The numbers an autoscaler claim reads, from ramp runs ({key: ClusterResult})."""
    end = sum(seconds for seconds, _ in shape)
    return {key: {"slo_attainment": r.summary["slo_attainment"], "replica_seconds": r.summary["replica_seconds"],
                  "ttft_p95_s": r.summary["ttft_p95_s"], "max_replicas": r.summary["max_replicas"],
                  "end_replicas": replicas_at(r, end)} for key, r in runs.items()}


def router_claim_runs(profile_name: str, spec: WorkloadSpec, routers: tuple) -> dict:
    """router_numbers of `spec` routed by each of `routers` ("prefix_affinity@unbounded": with no load bound)."""
    return router_numbers({p: routing_run(profile_name, p.split("@")[0], spec,
                                          load_bound=UNBOUNDED if p.endswith("@unbounded") else LOAD_BOUND)
                           for p in routers})


def autoscaler_claim_runs(profile_name: str, shape=RAMP, max_num_seqs: int = 64) -> dict:
    """autoscaler_numbers of the busy and the waiting autoscaler on the ramp `shape`."""
    return autoscaler_numbers({m: autoscale_run(profile_name, m, shape, max_num_seqs=max_num_seqs)
                               for m in ("busy", "waiting")}, shape)


def startup_claim_runs(profile_name: str, shape=RAMP) -> dict:
    """The waiting autoscaler's numbers with a quick and a slow start-up (STARTUPS_S), each with its start-up."""
    out = {}
    for key, startup in zip(("quick", "slow"), STARTUPS_S):
        r = autoscale_run(profile_name, "waiting", shape, float(startup))
        out[key] = {"slo_attainment": r.summary["slo_attainment"], "max_replicas": r.summary["max_replicas"],
                    "startup_s": float(startup)}
    return out


def affinity_is_faster(m: dict) -> bool:
    """prefix_affinity_hits' second condition: affinity's median request starts sooner."""
    return m["prefix_affinity"]["ttft_p50_s"] < m["round_robin"]["ttft_p50_s"]


def unbounded_is_slower(m: dict) -> bool:
    """affinity_needs_a_load_bound's second condition: p95 TTFT at least twice the bounded one's."""
    return m["prefix_affinity@unbounded"]["ttft_p95_s"] >= 2 * m["prefix_affinity"]["ttft_p95_s"]


def affinity_hits_verdict(m: dict) -> claims.Verdict:
    """The claim `prefix_affinity_hits` on router_numbers of round_robin and prefix_affinity."""
    aff, rr = m["prefix_affinity"], m["round_robin"]
    gain = aff["prefix_hit_rate"] - rr["prefix_hit_rate"]
    said = (f"Prefix affinity found {aff['prefix_hit_rate']:.0%} of prompt tokens in the caches against round-robin's "
            f"{rr['prefix_hit_rate']:.0%}; its p50 TTFT was {aff['ttft_p50_s']:.2f} s against {rr['ttft_p50_s']:.2f} s.")
    if not claims.CLAIMS["prefix_affinity_hits"].passes(gain):
        why = (f" That is {gain * 100:.0f} points more, where the claim needs "
               f"{claims.CLAIMS['prefix_affinity_hits'].threshold * 100:g}." if gain >= 0.005 else
               " Affinity found no more than round-robin did.")
        if max(aff["prefix_hit_rate"], rr["prefix_hit_rate"]) < 0.1:
            why += " These prompts share too little for the router's choice to matter."
    else:
        why = " More was found in the caches, yet its median request did not start sooner."
    return claims.judge("prefix_affinity_hits", gain,
                        said + " Each request it sent where its prefix was cached had less of its prompt to compute.",
                        said + why, extra_test=affinity_is_faster(m))


def load_bound_verdict(m: dict) -> claims.Verdict:
    """The claim `affinity_needs_a_load_bound` on router_numbers of prefix_affinity with and without its bound."""
    bounded, unbounded = m["prefix_affinity"], m["prefix_affinity@unbounded"]
    said = (f"Without a load bound, prefix affinity's load imbalance was "
            f"{unbounded['load_imbalance']:.2f} and its p95 TTFT {unbounded['ttft_p95_s']:.2f} s; with the load bound, "
            f"{bounded['load_imbalance']:.2f} and {bounded['ttft_p95_s']:.2f} s.")
    if claims.CLAIMS["affinity_needs_a_load_bound"].passes(unbounded["load_imbalance"]):
        why = " The unbounded router crowded the requests onto few replicas, but its p95 TTFT was not twice the bounded one's."
    else:
        why = " Without the bound the requests still spread over the replicas: the prefixes did not pull them onto one."
    return claims.judge("affinity_needs_a_load_bound", unbounded["load_imbalance"],
                        said + " The requests went where their shared prompt was cached, and a few replicas' queues "
                        "carried them while the others idled.", said + why, extra_test=unbounded_is_slower(m))


def busy_overprovisions_verdict(m: dict) -> claims.Verdict:
    """The claim `busy_fraction_overprovisions` on autoscaler_numbers of the busy and the waiting autoscaler."""
    busy, waiting = m["busy"]["end_replicas"], m["waiting"]["end_replicas"]
    said = f"At the end of the ramp the busy-fraction autoscaler held {busy} replicas and the waiting one {waiting}."
    return claims.judge("busy_fraction_overprovisions", busy - waiting,
                        said + " Every replica holding a request looked busy, so the busy fraction stayed high after "
                        "the traffic fell.",
                        said + " The busy fraction fell with the traffic, and the busy autoscaler let replicas go too.")


def startup_delay_verdict(m: dict) -> claims.Verdict:
    """The claim `startup_delay_costs_slo` on startup_claim_runs."""
    quick, slow = m["quick"], m["slow"]
    lost = quick["slo_attainment"] - slow["slo_attainment"]
    said = (f"The waiting autoscaler kept {quick['slo_attainment']:.0%} of requests within the SLO with a "
            f"{quick['startup_s']:g} s start-up and {slow['slo_attainment']:.0%} with a {slow['startup_s']:g} s one.")
    return claims.judge("startup_delay_costs_slo", lost,
                        said + " While the slow replicas started, the queue grew and requests missed their targets.",
                        said + (" The traffic never needed a new replica, so how long one takes to start did not matter."
                                if max(quick["max_replicas"], slow["max_replicas"]) <= 1 else
                                " The replicas came in time for the traffic either way."))


# Each claim's runs at the lab's settings (a function of the replica's profile) and its verdict.
CLAIM_RUNS = {
    "prefix_affinity_hits": lambda profile: router_claim_runs(profile, SHARED, ("round_robin", "prefix_affinity")),
    "affinity_needs_a_load_bound": lambda profile: router_claim_runs(profile, HOT, ("prefix_affinity",
                                                                                   "prefix_affinity@unbounded")),
    "busy_fraction_overprovisions": lambda profile: autoscaler_claim_runs(profile),
    "startup_delay_costs_slo": lambda profile: startup_claim_runs(profile),
}
VERDICTS = {"prefix_affinity_hits": affinity_hits_verdict, "affinity_needs_a_load_bound": load_bound_verdict,
            "busy_fraction_overprovisions": busy_overprovisions_verdict, "startup_delay_costs_slo": startup_delay_verdict}
