"""`python -m labs.cluster.check` (make cluster-check): lesson 10's claims on real engine servers on this machine, beside the
simulated cluster's verdicts, to see that the two agree in direction.

Three `engine serve` processes (the tiny model unless --model says otherwise) run each claim's
main case, scaled to this machine: one server's capacity is measured first (requests arriving
at once), and every rate is a multiple of it, as in the simulated lab. Short runs: the machine
is small and shared. Prints one line per claim: the metric on the real servers and on the
simulator, and whether their directions agree (both sides of the claim's neutral point), and the
verdict's words on the real servers' numbers: the lab's own verdict functions judge both.
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

from labs.cluster import experiment as lab
from labs.cluster.experiment import REAL_HOT as HOT, REAL_POLICY as POLICY, REAL_RAMP as RAMP, \
    REAL_RAMP_SPEC as RAMP_SPEC, REAL_REPLICAS as REPLICAS, REAL_SHARED as SHARED, REAL_SLO_REQUESTS as SLO_REQUESTS, \
    real_capacity as capacity


# Where each claim's metric changes sign (the direction both sides must agree on), and its second condition.
NEUTRAL = {"prefix_affinity_hits": 0.0, "affinity_needs_a_load_bound": 1.0, "busy_fraction_overprovisions": 0.0,
           "startup_delay_costs_slo": 0.0}
SECOND_CONDITION = {"prefix_affinity_hits": lab.affinity_is_faster, "affinity_needs_a_load_bound": lab.unbounded_is_slower}


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
            out["prefix_affinity_hits"] = {"round_robin": routed(SHARED, "round_robin"),
                                           "prefix_affinity": routed(SHARED, "prefix_affinity")}
        if run("affinity_needs_a_load_bound"):
            out["affinity_needs_a_load_bound"] = {"prefix_affinity": routed(HOT, "prefix_affinity"),
                                                  "prefix_affinity@unbounded": routed(HOT, "prefix_affinity", 100.0)}
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
            return {**res.summary, "end_replicas": seen[-1] if seen else 1, "startup_s": startup}

        waiting = scaled("waiting") if run("busy_fraction_overprovisions") or run("startup_delay_costs_slo") else None
        if run("busy_fraction_overprovisions"):
            out["busy_fraction_overprovisions"] = {"busy": scaled("busy"), "waiting": waiting}
        if run("startup_delay_costs_slo"):
            out["startup_delay_costs_slo"] = {"quick": waiting, "slow": scaled("waiting", 30.0)}
    # The same verdicts on the real servers' numbers and on the simulated cluster's (at the lab's settings).
    agree_all, report = True, {}
    for claim_id, numbers in out.items():
        sim_numbers = lab.CLAIM_RUNS[claim_id](lab.PROFILE)
        real, sim = lab.VERDICTS[claim_id](numbers), lab.VERDICTS[claim_id](sim_numbers)
        second = SECOND_CONDITION.get(claim_id, lambda m: True)
        same = (real.value > NEUTRAL[claim_id]) == (sim.value > NEUTRAL[claim_id]) and second(numbers) == second(sim_numbers)
        agree_all &= same
        report[claim_id] = {"real": numbers, "real_value": real.value, "real_outcome": real.outcome,
                            "real_words": real.words, "sim_value": sim.value, "sim_outcome": sim.outcome, "agree": same}
        print(f"{claim_id:30s} real {real.value:+.3f}  simulated {sim.value:+.3f}  (threshold {real.claim.threshold:g}; "
              f"second condition real {second(numbers)}, simulated {second(sim_numbers)})  "
              f"{'same direction' if same else 'DIFFERENT direction'}\n    real servers: {real.words}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else str(x))
    return 0 if agree_all else 1

if __name__ == "__main__":
    sys.exit(main())
