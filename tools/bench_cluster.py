"""How long does the simulated cluster take? `python -m tools.bench_cluster [--replicas 16 --requests 10000]`

Routes and serves a chat workload (prompts of 32-256 tokens after one of 16 shared 512-token
system prompts, outputs of 16-64 tokens) on N simulated replicas of Llama-3.1-8B on an H100
(the roofline model), each the engine's own Engine and Scheduler with prefix caching on, at
90% of what the replicas serve together, under each routing policy. Prints wall-clock and CPU
seconds per policy (CPU time is the steadier figure on a shared machine) and the engine steps
the replicas ran. A measurement, not a test: nothing here fails on a slow machine.
"""
from __future__ import annotations

import argparse
import time

from replicas.router import POLICIES
from replicas.simulated import SimCluster
from engine.runs.arrivals import build_requests
from engine.core.config import SchedulerPolicy
from engine.sim.simulate import resolve_profile
from engine.runs.workload import WorkloadSpec

PROFILE = "h100-sxm:llama-3.1-8b"
POLICY = SchedulerPolicy(max_num_seqs=64, max_num_batched_tokens=2048, kv_capacity_tokens=100_000,
                         enable_prefix_caching=True)
RATE_PER_REPLICA = 60.0     # requests/s a replica gets (about 90% of what it serves of this workload)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--policies", nargs="*", default=list(POLICIES))
    args = ap.parse_args()
    profile = resolve_profile(PROFILE)
    spec = WorkloadSpec(num_requests=args.requests, rate=RATE_PER_REPLICA * args.replicas, prompt_lo=32,
                        prompt_hi=256, output_lo=16, output_hi=64, system_prompts=16, system_prompt_tokens=512)
    t0 = time.perf_counter()
    requests = build_requests(spec)
    print(f"workload: {args.requests:,} requests drawn in {time.perf_counter() - t0:.2f} s")
    for policy in args.policies:
        wall, cpu = time.perf_counter(), time.process_time()
        res = SimCluster(profile, POLICY, args.replicas, policy).run(requests)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        s = res.summary
        print(f"{policy:18s} {wall:6.2f} s wall  {cpu:6.2f} s CPU  {sum(map(len, res.steps.values())):,} steps  "
              f"{s['finished']:,} finished over {s['duration_s']:.1f} simulated s  p95 TTFT {s['ttft_p95_s'] * 1000:.0f} ms  "
              f"hit rate {s['prefix_hit_rate']:.2f}")


if __name__ == "__main__":
    main()
