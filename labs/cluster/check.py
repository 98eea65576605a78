"""`python -m labs.cluster.check` (make cluster-check): lesson 10's claims on real engine servers on this machine, beside the
simulated cluster's verdicts, to see that the two agree in direction.

Three `engine serve` processes (the tiny model unless --model says otherwise) run each claim's
main case, scaled to this machine: one server's capacity is measured first (requests arriving
at once), and every rate is a multiple of it, as in the simulated lab. Short runs: the machine
is small and shared. Prints one line per claim: the metric on the real servers and on the
simulator, and whether their directions agree (both sides of the claim's neutral point).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import replace

from engine.runs.arrivals import build_requests
from engine.core.metrics import SLO
from engine.runs.workload import PromptMaker

from replicas.autoscaler import AutoscalerSpec
from replicas.real import Servers, run_real
from replicas.traffic import ramp

from labs.cluster.experiment import REAL_HOT as HOT, REAL_POLICY as POLICY, REAL_RAMP as RAMP, \
    REAL_RAMP_SPEC as RAMP_SPEC, REAL_REPLICAS as REPLICAS, REAL_SHARED as SHARED, REAL_SLO_REQUESTS as SLO_REQUESTS, \
    real_capacity as capacity


def autoscaler(metric: str, startup_s: float = 6.0) -> AutoscalerSpec:
    return AutoscalerSpec(metric, 0.7 if metric == "busy" else 2.0, interval_s=3.0, startup_s=startup_s,
                          max_replicas=REPLICAS, scale_down_window_s=12.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labs.cluster.check", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="the model each server loads (tiny or smollm2)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--logs", help="a folder for the servers' logs")
    ap.add_argument("--claims", nargs="*", default=None, help="only these claims (ids); default: all")
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer
    from engine.model.model import smollm2_dir
    prompts = PromptMaker(AutoTokenizer.from_pretrained(smollm2_dir()))
    wanted = set(args.claims) if args.claims else None
    run = lambda claim_id: wanted is None or claim_id in wanted
    out = {}
    with Servers(REPLICAS, args.model, POLICY, log_dir=args.logs or tempfile.mkdtemp()) as servers:
        urls = servers.urls
        mu = capacity(urls, prompts, SHARED, args.model)
        # The SLO is this machine's: a first token within the time one server takes to serve
        # SLO_REQUESTS of these requests alone, no token gap target (a slow CPU is not the point).
        slo = SLO(SLO_REQUESTS / mu, 60.0)
        print(f"one server serves {mu:.2f} req/s of the shared-prefix workload; TTFT target {slo.ttft_s:.1f} s",
              flush=True)

        def routed(spec, router, bound=1.25):
            reqs = build_requests(replace(spec, rate=0.9 * REPLICAS * mu), prompts)
            return run_real(urls, reqs, router, bound, slo, args.model).summary

        if run("prefix_affinity_hits"):
            rr, aff = routed(SHARED, "round_robin"), routed(SHARED, "prefix_affinity")
            out["prefix_affinity_hits"] = {"value": aff["prefix_hit_rate"] - rr["prefix_hit_rate"], "neutral": 0.0,
                                           "extra": aff["ttft_p50_s"] < rr["ttft_p50_s"], "round_robin": rr,
                                           "prefix_affinity": aff}
        if run("affinity_needs_a_load_bound"):
            bounded, unbounded = routed(HOT, "prefix_affinity"), routed(HOT, "prefix_affinity", 100.0)
            out["affinity_needs_a_load_bound"] = {"value": unbounded["load_imbalance"], "neutral": 1.0,
                                                  "extra": unbounded["ttft_p95_s"] >= 2 * bounded["ttft_p95_s"],
                                                  "bounded": bounded, "unbounded": unbounded}
        mu_ramp = capacity(urls, prompts, RAMP_SPEC, args.model)
        slo = SLO(SLO_REQUESTS / mu_ramp, 60.0)
        print(f"one server serves {mu_ramp:.2f} req/s of the ramp's workload; TTFT target {slo.ttft_s:.1f} s", flush=True)
        phases = [(s, share * mu_ramp) for s, share in RAMP]
        reqs = ramp(RAMP_SPEC, phases, prompts)
        end = sum(s for s, _ in phases)

        def scaled(metric, startup=6.0):
            res = run_real(urls, reqs, "least_outstanding", slo=slo, model=args.model,
                           autoscaler=autoscaler(metric, startup))
            seen = [n + s for t, n, s, _ in res.timeline if t <= end]
            return {**res.summary, "end_replicas": seen[-1] if seen else 1}

        waiting = scaled("waiting") if run("busy_fraction_overprovisions") or run("startup_delay_costs_slo") else None
        if run("busy_fraction_overprovisions"):
            busy = scaled("busy")
            out["busy_fraction_overprovisions"] = {"value": busy["end_replicas"] - waiting["end_replicas"],
                                                   "neutral": 0.0, "extra": True, "busy": busy, "waiting": waiting}
        if run("startup_delay_costs_slo"):
            slow = scaled("waiting", 30.0)
            out["startup_delay_costs_slo"] = {"value": waiting["slo_attainment"] - slow["slo_attainment"],
                                              "neutral": 0.0, "extra": True, "fast_start": waiting, "slow_start": slow}
    from labs.cluster.claims import CHECKS, verdict
    agree_all = True
    for c in [c for c in CHECKS if c.id in out]:
        real = out[c.id]
        sim = verdict(c)
        same = (real["value"] > real["neutral"]) == (sim["value"] > real["neutral"]) and real["extra"] == c.extra(sim["numbers"])
        agree_all &= same
        real.update(sim_value=sim["value"], agree=same, real_passes=c.claim.passes(real["value"]) and real["extra"])
        print(f"{c.id:30s} real {real['value']:+.3f}  simulated {sim['value']:+.3f}  (threshold {c.claim.threshold:g}; "
              f"second condition real {real['extra']}, simulated {c.extra(sim['numbers'])})  "
              f"{'same direction' if same else 'DIFFERENT direction'}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else str(x))
    return 0 if agree_all else 1


if __name__ == "__main__":
    sys.exit(main())
