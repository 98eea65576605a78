"""How long does each chart take to build? `python -m tools.bench_charts`

Builds every chart from a long continuous-batching run of the engine's own scheduler on the
cost model (2,000 requests, 20,000 engine steps, 16 batch slots) and prints the median of
5 builds per chart, plus the time to turn the figure into the JSON a live chart sends to the
browser (analysis.figure_json.figure_dict, then json.dumps). This is a measurement, not a test: nothing here fails on a slow machine.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import pandas as pd

from analysis import frame_metrics, kv, latency, membership, queue_charts
from analysis.tables import marks_table
from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.metrics import REQUEST_COLUMNS, STEP_COLUMNS, request_row, step_row
from engine.core.request import Request
from engine.runs.workload import WorkloadSpec
from analysis.figure_json import figure_dict

STEP_S_GUESS = 0.05  # rough mean step time on the cost model, to spread arrivals over the run's start
ARRIVALS_SHARE = 0.35  # of the run over which requests arrive (bursty arrivals overshoot it)


def synthetic_trace(n_requests: int = 2000, n_steps: int = 20000, max_slots: int = 16,
                    seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A long run of the real scheduler and engine on the cost model, as the pages' tables.

    Returns (steps, requests, marks). Requests arrive in bursts over about the first third of
    the run, so the queue grows and drains; long prompts are prefilled in chunks. One
    background request ("bg") makes a token in every step from the first to the last, so the
    run takes exactly n_steps steps. Three policy changes are marked on the way.
    """
    policy = SchedulerPolicy(max_num_seqs=max_slots, long_prefill_token_threshold=256,
                             kv_capacity_tokens=n_steps + 16 + 400 * max_slots)
    engine = build_engine(EngineConfig(max_model_len=n_steps + 16), policy)
    engine.submit(Request("bg", [1] * 16, n_steps, tenant="background"))
    rate = (n_requests - 1) / (ARRIVALS_SHARE * n_steps * STEP_S_GUESS)
    spec = WorkloadSpec(num_requests=n_requests - 1, rate=rate,
                        burstiness=2.0, prompt_lo=16, prompt_hi=700, output_lo=8, output_hi=130,
                        tenants=3, seed=seed)
    for r in build_requests(spec):
        engine.submit(r)
    changes = [(n_steps // 4, {"max_num_seqs": max(1, max_slots // 2)}),
               (n_steps // 2, {"max_num_seqs": max_slots}), (3 * n_steps // 4, {"order": "sjf"})]
    for at, change in changes:
        engine.run(should_stop=lambda: len(engine.steps) >= at)
        policy = policy.changed(**change)
        engine.set_policy(policy)
    engine.run()
    if len(engine.steps) != n_steps:
        raise ValueError(f"the requests outlasted the background request ({len(engine.steps)} steps): "
                         "raise n_steps or lower n_requests")
    return (pd.DataFrame([step_row(s) for s in engine.steps], columns=STEP_COLUMNS),
            pd.DataFrame([request_row(r) for r in engine.requests.values()], columns=REQUEST_COLUMNS),
            marks_table(engine.marks))


def builders(steps, requests, marks, max_slots):
    """Every chart a lab page draws, as name -> zero-argument callable."""
    slo_ttft, slo_tpot = 2.0, 0.1
    return {
        "batch_membership (all)": lambda: membership.batch_membership(steps, max_slots, marks=marks),
        "batch_membership (window=300)": lambda: membership.batch_membership(steps, max_slots, window=300),
        "batch_membership (upto_step)": lambda: membership.batch_membership(
            steps, max_slots, window=300, upto_step=len(steps) // 2),
        "request_timeline": lambda: latency.request_timeline(requests),
        "latency_over_time ttft": lambda: latency.latency_over_time(requests, "ttft_s", slo_ttft, marks),
        "latency_over_time tpot": lambda: latency.latency_over_time(requests, "tpot_s", slo_tpot, marks),
        "queue_over_time": lambda: queue_charts.queue_over_time(steps, marks),
        "throughput_over_time": lambda: queue_charts.throughput_over_time(
            steps, requests, slo_ttft, slo_tpot, marks),
        "kv_usage": lambda: kv.kv_usage(steps, marks),
        "headline": lambda: frame_metrics.headline(requests, steps, slo_ttft, slo_tpot, max_slots),
        "cdf ttft by tenant": lambda: latency.cdf(requests, "ttft_s", by="tenant", slo=slo_ttft),
        "cdf tpot by prompt_tokens": lambda: latency.cdf(requests, "tpot_s", by="prompt_tokens"),
    }


def _median_ms(fn, repeat: int) -> tuple[float, object]:
    result = fn()  # warm-up: first calls pay for imports and caches
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times), result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    steps, requests, marks = synthetic_trace(args.requests, args.steps, args.slots)
    n_fin = int((requests["status"] == "finished").sum())
    print(f"trace: {len(steps)} steps, {n_fin}/{len(requests)} requests finished, "
          f"{int(steps['preempted'].sum())} preemptions ({time.perf_counter() - t0:.1f} s to make)")

    print(f"{'chart':32s} {'build ms':>9s} {'JSON ms':>11s}")
    total_build = total_json = 0.0
    for name, fn in builders(steps, requests, marks, args.slots).items():
        build_ms, fig = _median_ms(fn, args.repeat)
        is_figure = {"data", "layout"} <= fig.keys()      # "headline" is numbers, not a chart
        json_ms = _median_ms(lambda: json.dumps(figure_dict(fig)), args.repeat)[0] if is_figure else 0.0
        print(f"{name:32s} {build_ms:9.1f} {json_ms:11.1f}")
        total_build += build_ms
        total_json += json_ms
    print(f"{'total':32s} {total_build:9.1f} {total_json:11.1f}")


if __name__ == "__main__":
    main()
