"""Beyond one replica: routing policies on a shared-prefix workload, and two autoscalers under a
traffic ramp, on the simulated cluster (cluster/simulated.py: every replica is the engine's own
Engine and Scheduler, on the virtual clock, step times from a step model). No Streamlit here.

Rates are set from what one replica serves of each workload on the chosen step model (its
capacity, measured on the simulator: `capacity`), so the experiment means the same on a
simulated GPU and on this machine's calibrated profile.
"""
from __future__ import annotations

import functools
from dataclasses import replace

from replicas.autoscaler import AutoscalerSpec
from replicas.result import ClusterResult
from replicas.router import POLICIES
from replicas.simulated import SimCluster
from replicas.traffic import ramp
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
