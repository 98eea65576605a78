"""How long does each chart take to build? `python -m tools.bench_charts`

Builds every chart from a synthetic continuous-batching trace (2,000 finished requests,
20,000 engine steps, 16 batch slots) and prints the median of 5 builds per chart, plus the
time plotly needs to turn the figure into JSON (what Streamlit sends to the browser).
This is a measurement, not a test: nothing here fails on a slow machine.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections import deque

import numpy as np
import pandas as pd

from analysis import frame_metrics, kv, latency, membership, queue


def synthetic_trace(n_requests: int = 2000, n_steps: int = 20000, max_slots: int = 16,
                    seed: int = 0, kv_blocks: int = 480, block_size: int = 16):
    """A toy continuous-batching run in the engine's CSV formats.

    Returns (steps, requests, marks). Prefill runs in chunks of up to 256 tokens; each
    decode step makes one token; when the KV pool is full the newest request is preempted
    (its blocks freed, it recomputes from the front of the queue). Arrivals come in bursts
    so the queue grows and drains. If every request finishes early, idle steps fill the
    trace up to n_steps.
    """
    rng = np.random.default_rng(seed)
    prompt = rng.integers(16, 700, n_requests)
    output = rng.integers(8, 130, n_requests)
    # bursty arrivals over the first ~55% of the run
    gaps = rng.exponential(1.0, n_requests) * np.where(rng.random(n_requests) < 0.2, 4.0, 0.6)
    arrival = np.cumsum(gaps)
    arrival *= 0.55 * n_steps * 0.03 / arrival[-1]
    tenant = rng.choice(["alice", "bob", "carol"], n_requests, p=[0.5, 0.3, 0.2])

    first_sched = np.full(n_requests, np.nan)
    first_token = np.full(n_requests, np.nan)
    finish = np.full(n_requests, np.nan)
    preemptions = np.zeros(n_requests, dtype=int)
    done_prompt = np.zeros(n_requests, dtype=int)  # prompt tokens already prefilled
    made = np.zeros(n_requests, dtype=int)  # output tokens made so far

    waiting: deque[int] = deque()
    running: list[int] = []
    next_arrival = 0
    t = 0.0
    rows = []
    for step in range(n_steps):
        while next_arrival < n_requests and arrival[next_arrival] <= t:
            waiting.append(next_arrival)
            next_arrival += 1
        while waiting and len(running) < max_slots:
            running.append(waiting.popleft())

        def blocks(r):
            return -(-(done_prompt[r] + made[r] + 1) // block_size)

        preempted = 0
        while running and sum(blocks(r) for r in running) > kv_blocks:
            victim = running.pop()  # newest first, as vLLM does
            done_prompt[victim] = 0  # recompute: prompt (and made tokens) prefilled again
            preemptions[victim] += 1
            waiting.appendleft(victim)
            preempted += 1

        members, prefill_tokens, decode_tokens = [], 0, 0
        budget = 512
        for r in running:
            if done_prompt[r] < prompt[r]:
                chunk = int(min(256, prompt[r] - done_prompt[r], budget))
                if chunk <= 0:
                    continue
                members.append(f"r{r}:prefill:{chunk}")
                prefill_tokens += chunk
                budget -= chunk
            else:
                members.append(f"r{r}:decode:1")
                decode_tokens += 1
                budget -= 1
        dt = 0.02 + 0.00004 * (prefill_tokens + decode_tokens) if members else 0.03
        t_start, t = t, t + dt

        finished = []
        for item in members:
            rid, phase, n = item.rsplit(":", 2)
            r = int(rid[1:])
            if np.isnan(first_sched[r]):
                first_sched[r] = t_start
            if phase == "prefill":
                done_prompt[r] += int(n)
                if done_prompt[r] < prompt[r]:
                    continue
            made[r] += 1
            if np.isnan(first_token[r]):
                first_token[r] = t
            if made[r] >= output[r]:
                finish[r] = t
                finished.append(r)
        for r in finished:
            running.remove(r)
        rows.append((step, t_start, t, len(waiting), len(running) + len(finished),
                     prefill_tokens, decode_tokens,
                     sum(blocks(r) for r in running), kv_blocks, " ".join(members), preempted))

    steps = pd.DataFrame(rows, columns=[
        "step", "t_start_s", "t_end_s", "waiting", "running", "prefill_tokens",
        "decode_tokens", "kv_used_blocks", "kv_total_blocks", "members", "preempted"])
    ttft = first_token - arrival
    e2e = finish - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (e2e - ttft) / (output - 1), np.nan)
    status = np.where(~np.isnan(finish), "finished",
                      np.where(~np.isnan(first_sched), "running", "waiting"))
    requests = pd.DataFrame({
        "id": [f"r{i}" for i in range(n_requests)], "tenant": tenant, "arrival_s": arrival,
        "first_scheduled_s": first_sched, "first_token_s": first_token, "finish_s": finish,
        "prompt_tokens": prompt, "output_tokens": output, "ttft_s": ttft, "tpot_s": tpot,
        "e2e_s": e2e, "queue_s": first_sched - arrival, "preemptions": preemptions,
        "status": status, "error": "", "output_text": "",
    })
    mark_steps = [n_steps // 4, n_steps // 2, 3 * n_steps // 4]
    marks = pd.DataFrame({
        "step": mark_steps, "t_s": steps["t_end_s"].to_numpy()[mark_steps],
        "label": ["max_num_seqs 16→8", "max_num_seqs 8→16", "order fcfs→sjf"],
    })
    return steps, requests, marks


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
        "queue_over_time": lambda: queue.queue_over_time(steps, marks),
        "throughput_over_time": lambda: queue.throughput_over_time(
            steps, requests, slo_ttft, slo_tpot, marks),
        "kv_usage": lambda: kv.kv_usage(steps, marks),
        "headline": lambda: frame_metrics.headline(requests, steps, slo_ttft, slo_tpot, max_slots),
        "cdf ttft by tenant": lambda: latency.cdf(requests, "ttft_s", by="tenant", slo=slo_ttft),
        "cdf tpot by prompt_tokens": lambda: latency.cdf(requests, "tpot_s", by="prompt_tokens"),
        "bar_compare": lambda: latency.bar_compare(
            requests.groupby("tenant", as_index=False)["ttft_s"].median(), "tenant", "ttft_s",
            title="Median TTFT by tenant", subtitle="Good: bars of similar height (fair)."),
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
    print(f"synthetic trace: {len(steps)} steps, {n_fin}/{len(requests)} requests finished, "
          f"{int(steps['preempted'].sum())} preemptions ({time.perf_counter() - t0:.1f} s to make)")

    print(f"{'chart':32s} {'build ms':>9s} {'to_json ms':>11s}")
    total_build = total_json = 0.0
    for name, fn in builders(steps, requests, marks, args.slots).items():
        build_ms, fig = _median_ms(fn, args.repeat)
        json_ms = _median_ms(fig.to_json, args.repeat)[0] if hasattr(fig, "to_json") else 0.0
        print(f"{name:32s} {build_ms:9.1f} {json_ms:11.1f}")
        total_build += build_ms
        total_json += json_ms
    print(f"{'total':32s} {total_build:9.1f} {total_json:11.1f}")


if __name__ == "__main__":
    main()
