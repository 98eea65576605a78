"""What each measured quiz question works out from the learner's own lab values: one function a question.

A measured question (a lesson's front matter) opens with a sentence that quotes what the learner
measured, ``measured.with: "... {why_batch.step_ms_1} ..."``, and names its function here as
``measured.answers``. The function gets the values it quotes, ``{"why_batch.step_ms_1": 72.0, ...}``
(times in milliseconds, whatever unit the lab wrote them in), and returns the numbers the question's
choices, reasons and explanation quote as ``{name:format}`` (Python's format spec: ``{half:.0f}``).
It returns None when these values would make an unfair question (a ratio past its meaning, two
choices alike); the learner then sees the question's worked example instead. Where the right
choice itself depends on the values, the function returns its index too and the front matter's
``answer`` names it.

Functions are keyed by lesson id and name (`ANSWERS`); course/quizzes.py finds them. No Streamlit here.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

from engine.core.validation import kv_bytes_per_token

Values = Mapping[str, float]
Numbers = dict[str, float]
ANSWERS: dict[tuple[str, str], Callable[[Values], "Numbers | None"]] = {}


def lesson(lesson_id: str):
    """Register the function below as a measured question's answers in lesson `lesson_id`."""
    def register(function):
        ANSWERS[(lesson_id, function.__name__)] = function
        return function
    return register


@lesson("why-batch")
def half_of_the_ceiling(v: Values) -> Numbers | None:
    """t(B) = t0 + cB through the steps at batch 1 and 8; throughput B / t(B) is half its ceiling 1/c at B = t0/c."""
    c = (v["why_batch.step_ms_8"] - v["why_batch.step_ms_1"]) / 7
    t0 = v["why_batch.step_ms_1"] - c
    if not (c > 0 and t0 > 0 and t0 / c >= 1.5 and 1000 / c >= 10 * t0 / c):
        return None    # a slope too flat or too steep for the four choices to be told apart
    return {"c": c, "t0": t0, "half": t0 / c, "two_thirds": 2 * t0 / c, "ninety_percent": 9 * t0 / c,
            "ceiling": 1000 / c}


@lesson("static-vs-continuous")
def wait_to_drain(v: Values) -> Numbers | None:
    """What static batching adds to the p95 TTFT: the static p95 less the continuous one."""
    static, continuous = v["static_vs_continuous.ttft_p95_static"], v["static_vs_continuous.ttft_p95_continuous"]
    if not static > 1.5 * continuous:
        return None
    return {"static_s": static / 1000, "continuous_s": continuous / 1000, "ratio": static / continuous,
            "wait_s": (static - continuous) / 1000, "sum_s": (static + continuous) / 1000}


@lesson("costs-of-continuous")
def chunked_prompt_wait(v: Values) -> Numbers | None:
    """A 1,000-token prompt in chunks of 250: four steps, each about the chunked run's longest gap."""
    off, on = v["costs.max_gap_off"], v["costs.max_gap_on"]
    if not (on > 0 and off != on):
        return None
    return {"chunked_ms": on, "four_chunked_ms": 4 * on, "unchunked_ms": off, "four_unchunked_ms": 4 * off}


@lesson("latency-metrics")
def goodput_at_the_p95(v: Values) -> Numbers | None:
    """A TTFT target at the run's own p95: about 95% of the arrival rate meets it."""
    rate = v["slo_goodput.top_rate"]
    if not rate > 0:
        return None
    return {"rate": rate, "missed": 0.05 * rate, "goodput": 0.95 * rate,
            "one_over_p95": 1000 / v["slo_goodput.ttft_p95_top_rate"]}


@lesson("queueing")
def five_times_service(v: Values) -> Numbers | None:
    """M/M/1: W = (1/mu) / (1 - rho) is five times 1/mu at rho = 0.8."""
    mu = v["queueing.mu"]
    if not mu > 0:
        return None
    return {"mu": mu, "sixty_percent": 0.6 * mu, "eighty_percent": 0.8 * mu, "a_fifth": mu / 5,
            "ninety_six_percent": 0.96 * mu}


KV_BYTES_BF16 = kv_bytes_per_token(30, 3, 64, 2)   # SmolLM2-135M's keys and values of one token in bf16: 23,040


@lesson("batch-policy")
def kv_at_the_knee(v: Values) -> Numbers | None:
    """The KV cache every sequence at the knee holds at once, at 1,000 tokens of context each."""
    knee = v["knee.knee"]
    if not knee >= 2:
        return None
    return {"knee": knee, "kv_gb": knee * 1000 * KV_BYTES_BF16 / 1e9, "one_sequence_gb": 1000 * KV_BYTES_BF16 / 1e9,
            "counted_twice_gb": 2 * knee * 1000 * KV_BYTES_BF16 / 1e9, "one_token_each_gb": knee * KV_BYTES_BF16 / 1e9}


@lesson("tail-latency")
def halve_the_short_ones(v: Values) -> Numbers | None:
    """Halving every short prompt's TTFT halves the median and leaves a long-prompt p99 alone."""
    p50, p99 = v["tail.ttft_p50"], v["tail.ttft_p99"]
    if not p99 > 2 * p50:
        return None
    return {"p50_s": p50 / 1000, "p99_s": p99 / 1000, "p50_halved_s": p50 / 2000, "p99_halved_s": p99 / 2000}


@lesson("scheduler-policy")
def earliest_deadline(v: Values) -> Numbers | None:
    """EDF between a request that has waited the fcfs p95 TTFT against a 4 s target and a newcomer with 1 s."""
    left = (4000 - v["scheduler_orders.fcfs_ttft_p95"]) / 1000   # seconds to the waiting request's deadline
    if not abs(left - 1) > 0.05:
        return None    # the two deadlines about equal: no choice is clearly right
    return {"left_s": left, "right_choice": 0 if left < 1 else 1}   # 0: the one that has waited; 1: the newcomer


@lesson("two-schedulers")
def replicas_at_80_percent(v: Values) -> Numbers | None:
    """Replicas for 12 requests/s with each at 80% of its measured capacity mu."""
    mu = v["queueing.mu"]
    n = math.ceil(12 / (0.8 * mu))
    if not (n >= 2 and n <= 200):
        return None
    return {"mu": mu, "per_replica": 0.8 * mu, "exact": 12 / (0.8 * mu), "n": n, "one_fewer": n - 1,
            "one_more": n + 1, "twice": 2 * n, "one_fewer_busy_pct": 100 * 12 / ((n - 1) * mu),
            "twice_busy_pct": 100 * 12 / (2 * n * mu)}


@lesson("beyond-one-replica")
def prefill_saved(v: Values) -> Numbers | None:
    """Of 1,000 prompt tokens, prefill computes those not found in the caches: how many more under round-robin."""
    affinity, round_robin = v["cluster.hit_affinity"], v["cluster.hit_round_robin"]   # percent
    if not affinity > round_robin + 2:
        return None
    return {"saved": 10 * (affinity - round_robin), "found_by_affinity": 10 * affinity,
            "round_robin_computes": 10 * (100 - round_robin), "affinity_computes": 10 * (100 - affinity)}


@lesson("kv-capacity")
def pool_not_slots(v: Values) -> Numbers | None:
    """A pool that holds fewer requests than max_num_seqs: raising max_num_seqs leaves the batch where the pool
    put it."""
    running = v["kv_capacity.running"]
    if not 2 <= running <= 12 or round(2 * running) == 16:
        return None    # the pool was no limit (near the lab's 16 slots), or two choices would read alike
    return {"running": running, "twice": 2 * running}


@lesson("benchmarking")
def closed_loop_e2e(v: Values) -> Numbers | None:
    """Little's law in a closed loop: X = C / E2E, so E2E = C / X."""
    clients, rate = v["benchmarking.clients"], v["benchmarking.throughput"]
    if not (clients >= 2 and rate > 0) or f"{clients / rate:.2f}" == f"{rate / clients:.2f}":
        return None    # C / X and 1 / X, or C / X and X / C, would be the same choice
    return {"clients": clients, "rate": rate, "e2e": clients / rate, "inverse": rate / clients,
            "one_over_rate": 1 / rate, "product": clients * rate}


@lesson("speculative-decoding")
def acceptance_length_at_batch_1(v: Values) -> Numbers | None:
    """At batch 1 a step with four guesses costs about one plain step, so the speed-up is about the tokens a check
    makes: vLLM's mean acceptance length."""
    s = v["speculation.speedup_batch_1"]
    if not 1.3 <= s <= 4.5:
        return None    # too close to 1 (or past what four guesses can give) to tell the choices apart
    return {"speedup": s, "kept": s - 1, "per_row": s / 5}
