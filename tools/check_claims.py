"""Every claim in course/claims.py, judged three ways, printed as one table:

    python -m tools.check_claims              # the simulator only: this machine's step model, the H100 roofline,
                                              # and each claim's counter-case on this machine's step model
    python -m tools.check_claims --real       # and each lab's run on the real engine (many minutes on a CPU)
    python -m tools.check_claims --real --only queueing knee --json runs/claims.json

Each column runs the labs' own experiments (labs/<lab>/experiment.py) with the lab's default settings,
so the verdicts are the ones the pages show: the real engine here (cached runs are reused, as the pages
reuse them), the simulator with this machine's calibrated profile, and the simulator with the H100
roofline profile (h100-sxm:llama-3.1-8b). The H100 is judged against SLO targets of its own in the
goodput claim (SLO_H100), as the Playground sizes its presets per engine.
BATCHING_LAB_MODEL picks the model (default smollm2); BATCHING_LAB_CACHE the cache folder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from course import claims
from engine.sim.simulate import resolve_profile
from labs import runs
from tools.measure_all import progress_printer
from labs.costs import experiment as costs
from labs.dynamic_batching import experiment as dynamic
from labs.knee import experiment as knee
from labs.kv_capacity import experiment as kv
from labs.queueing import experiment as queueing
from labs.benchmarking import experiment as bench
from labs.scheduler_orders import experiment as orders
from labs.slo_goodput import experiment as slo
from labs.speculation import experiment as spec
from labs.static_vs_continuous import experiment as svc
from labs.tail import experiment as tail
from labs.why_batch import experiment as why_batch

H100 = "h100-sxm:llama-3.1-8b"
SLO_PAGE = (2.0, 0.1)         # the SLO lab's default sliders
SLO_H100 = (0.3, 0.02)
QUEUE_REAL = [0.5, 0.9, 1.2]  # the real engine's utilizations: the claim's pair and one past capacity


class Source:
    """One column: the real engine (`model`) or the simulator (`step_model`); `machine` is the step model
    the labs size their workloads with (this machine's, for the real engine too)."""

    def __init__(self, name: str, model=None, step_model=None, machine=None):
        self.name, self.model, self.step_model = name, model, step_model
        self.machine = machine if machine is not None else step_model

    @property
    def real(self) -> bool:
        return self.model is not None


def verdicts_for(lab: str, src: Source) -> list[claims.Verdict]:
    """The lab's claims, judged on one run of its default settings from `src`."""
    m, sm, p = src.model, src.step_model, progress_printer(f"{lab} {src.name}", every_s=10)
    if lab == "why_batch":
        rows = why_batch.batch_scaling(m, progress=p)[0] if src.real else why_batch.predicted_scaling(sm)
        return [why_batch.amortization_verdict(why_batch.scaling_table(rows), src.machine if src.real else None)]
    if lab == "static_vs_continuous":
        out = []
        for workload, claim in (("short_long", "continuous_beats_static"), ("offline_equal", "static_fine_offline")):
            got = svc.both_modes(m, workload, progress=p) if src.real else svc.simulated_modes(sm, workload)
            s, c = (svc.mode_summary(got[mode][0], svc.SLOTS) for mode in ("static", "continuous"))
            out += [v for v in svc.verdicts(s, c, workload) if v.claim.id == claim]
        return out
    if lab == "costs":
        arrivals = costs.long_arrivals(src.machine)
        got = costs.stall_runs(m, arrivals, progress=p) if src.real else costs.simulated_stall_runs(sm)
        stall = costs.stall_verdict(costs.stall_summary(got["off"][0]), costs.stall_summary(got["on"][0]),
                                    costs.LONG_PROMPT)
        res = costs.kv_run(m, 1024, progress=p)[0] if src.real else costs.simulated_kv_run(sm, 1024)[0]
        sched = costs.scheduling_numbers(costs.scheduling_step_ms(src.machine))
        return [stall, costs.kv_verdict(costs.kv_summary(res), 1024),
                costs.scheduling_verdict(sched, "this machine's step model" if src.real else src.name)]
    if lab == "slo_goodput":
        rates = slo.rates_for(src.machine)
        got = slo.rate_runs(m, rates, progress=p) if src.real else slo.simulated_rate_runs(sm, rates)
        targets = SLO_H100 if src.name == "H100 roofline" else SLO_PAGE
        return [slo.falls_verdict(slo.goodput_table(got, *targets), *targets)]
    if lab == "queueing":
        if src.real:
            mu, got = queueing.capacity_and_runs(m, QUEUE_REAL, progress=p)
        else:
            mu, got = queueing.simulated_capacity_and_runs(sm, [*queueing.UTILIZATIONS, *queueing.OVERLOAD_RHOS[1:]])
        points = queueing.points_table(got, mu)
        return [queueing.explodes_verdict(points[points["rho"] < 1], mu),
                queueing.overload_verdict(points[points["rho"].isin(queueing.OVERLOAD_RHOS)])]
    if lab == "knee":
        got = (knee.max_num_seqs_runs(m, knee.VALUES, 1, progress=p) if src.real else
               knee.simulated_runs(sm, knee.VALUES))
        return [knee.knee_verdict(knee.knee_table(got))]
    if lab == "tail":
        rate = tail.rate_for(src.machine)
        res = tail.tail_run(m, rate, progress=p)[0] if src.real else tail.simulated_tail_run(sm, rate)[0]
        reqs, _ = runs.frames(res)
        return [tail.cause_verdict(reqs), tail.window_verdict(reqs)]
    if lab == "scheduler_orders":
        rate = orders.rate_for(src.machine)
        got = orders.order_runs(m, rate, progress=p) if src.real else orders.simulated_order_runs(sm, rate)
        return [orders.favour_verdict(orders.tenant_table(got)), orders.starve_verdict(got)]
    if lab == "dynamic_batching":
        rate = dynamic.rate_for(src.machine)
        got = dynamic.wait_runs(m, rate, repeats=1, progress=p) if src.real else dynamic.simulated_wait_runs(sm, rate)
        return [dynamic.waiting_verdict(dynamic.wait_table(got))]
    if lab == "kv_capacity":
        pools = (kv.SMALL_POOL,)
        got = kv.pool_runs(m, pools, progress=p) if src.real else kv.simulated_pool_runs(sm, pools)
        prefix = (kv.prefix_runs(m, "shared", progress=p) if src.real else kv.simulated_prefix_runs(sm, "shared"))
        return [kv.caps_verdict(kv.pool_table(got).to_dict("records")[0]),
                kv.prefix_verdict(kv.prefix_summary(prefix["off"][0]), kv.prefix_summary(prefix["on"][0]), "shared")]
    if lab == "benchmarking":
        n = bench.NEAR
        if src.real:
            closed, opened, x, _ = bench.measure(m, n, progress=p)
            strayed = bench.speed_check(closed, opened)
        else:
            (closed, opened, x), strayed = bench.simulated(sm, n), None
        return [bench.hidden_queue_verdict(bench.run_numbers(closed, n), bench.run_numbers(opened, n), x, n, strayed)]
    if lab == "speculation":
        from labs.claim_cases import spec_big_batch      # the H100's large batch lies past its roofline's ridge
        big = spec_big_batch("h100" if src.name == "H100 roofline" else "cpu")
        got = spec.lab_runs(m, repeats=1, progress=p) if src.real else spec.simulated_runs(sm, big=big)
        table = spec.case_table(got)
        return [spec.batch1_verdict(table), spec.big_batch_verdict(table, spec.BIG if src.real else big)]
    raise ValueError(f"no lab {lab!r}")


LABS = ["why_batch", "static_vs_continuous", "costs", "slo_goodput", "queueing", "knee", "tail",
        "scheduler_orders", "dynamic_batching", "kv_capacity", "benchmarking", "speculation"]
MARK = {claims.SHOWN: "✓ shown", claims.NOT_SHOWN: "✗ not shown", claims.UNDECIDED: "? undecided"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", action="store_true", help="also run each lab on the real engine (slow)")
    ap.add_argument("--only", nargs="*", choices=LABS, help="these labs only")
    ap.add_argument("--json", help="also write every verdict, with its words, to this file")
    args = ap.parse_args(argv)
    model_name = os.environ.get("BATCHING_LAB_MODEL", "smollm2")
    from engine.sim.profile import load_profile
    found = load_profile(model_name)
    if found is None:
        print(f"no calibrated profile of {model_name} here: run `python -m engine calibrate` first", file=sys.stderr)
        return 2
    machine = found.step_model
    sources = []
    if args.real:
        from engine.model.model import load_model
        sources.append(Source("real engine", model=load_model(model_name), machine=machine))
    sources += [Source("simulator, this machine", step_model=machine), Source("H100 roofline",
                                                                               step_model=resolve_profile(H100).step_model)]
    table: dict[str, dict[str, claims.Verdict]] = {}
    seconds: dict[str, float] = {}
    for lab in args.only or LABS:
        for src in sources:
            start = time.perf_counter()
            for v in verdicts_for(lab, src):
                table.setdefault(v.claim.id, {})[src.name] = v
            seconds[f"{lab} / {src.name}"] = time.perf_counter() - start
            print(f"{lab} on {src.name}: {seconds[f'{lab} / {src.name}']:.0f} s", file=sys.stderr, flush=True)
    # each claim's counter-case (labs/claim_cases.py) on this machine's simulator: where it must come out otherwise
    from labs.claim_cases import CASES
    counter = "counter-case, simulator"
    for cid in list(table):
        if cid in CASES:
            start = time.perf_counter()
            table[cid][counter] = CASES[cid][1]("cpu", machine)
            seconds[f"{cid} / {counter}"] = time.perf_counter() - start
    names = [s.name for s in sources] + [counter]
    print(f"\n| claim | lesson | lab | metric (threshold) | {' | '.join(names)} |")
    print("|" + " --- |" * (4 + len(names)))
    for cid, by in table.items():
        c = claims.CLAIMS[cid]
        cells = [f"{MARK[by[n].outcome]} ({by[n].value_text()})" if n in by else "—" for n in names]
        want = CASES[cid][2] if cid in CASES else None
        cells[-1] += f" (expected: {want})" if want and by.get(counter) and by[counter].outcome != want else ""
        print(f"| {cid} | {c.lesson} | {c.lab} | {c.metric} ({c.threshold_text()}) | {' | '.join(cells)} |")
    print("\nWhy each verdict came out as it did:")
    for cid, by in table.items():
        for n in names:
            if n in by:
                print(f"- {cid}, {n}: {by[n].words}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({cid: {n: {"outcome": v.outcome, "value": v.value, "words": v.words} for n, v in by.items()}
                       for cid, by in table.items()} | {"seconds": seconds}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
