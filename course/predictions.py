"""The questions each lab asks before it shows a result, declared once.

A lab page (and the Playground) asks them through ui.predict.question, and the lesson's "Predict
first" paragraph reads the same text through the marker {{place:predict:<question id>}}
(lessons/catalog.py), so the lesson and the lab always ask the same thing. A question's text may
hold {fields} that the page fills from its settings; the lesson shows it with `defaults`, the
lab's own default settings. No Streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Ask:
    id: str                      # the widget keys start with predict_<id>
    lab: str                     # the lab id that asks it
    lesson: str                  # the lesson whose "Predict first" reads it
    text: str                    # may hold {fields}, filled by the page (or by `defaults`)
    unit: str = ""               # a number's unit ("×", "requests/s"); empty for a choice
    choices: tuple = ()          # the choices, when they do not depend on the page's settings
    lo: float = 0.0
    hi: float = 0.0
    default: float = 0.0
    defaults: dict = field(default_factory=dict)

    def render(self, **values) -> str:
        return self.text.format(**{**self.defaults, **values})


def _asks(*asks: Ask) -> dict[str, Ask]:
    return {a.id: a for a in asks}


ASKS = _asks(
    Ask("why_batch", "why_batch", "why-batch",
        "A decode step of 1 sequence takes some time. How many times as long will a step of 8 sequences take?",
        unit="×", lo=0.1, hi=100.0, default=1.0),
    Ask("why_batch_knee", "why_batch", "why-batch",
        "Among the batch sizes measured, which will be the knee (the smallest with {share} of the best tokens/s)?",
        defaults={"share": "90%"}),
    Ask("static_vs_continuous", "static_vs_continuous", "static-vs-continuous",
        "The same requests go through both modes. Which one finishes all of them first?"),
    Ask("svc_ttft", "static_vs_continuous", "static-vs-continuous",
        "How many times the continuous run's p95 TTFT will the static run's be?",
        unit="×", lo=0.1, hi=100.0, default=1.0),
    Ask("costs_stall", "costs", "costs-of-continuous",
        "With chunked prefill off, the longest gap between two tokens of any decoding request is how many times "
        "the median gap over all decoding requests?", unit="×", lo=1.0, hi=1000.0, default=1.0),
    Ask("costs_kv", "costs", "costs-of-continuous",
        "At {capacity} tokens of KV, how many preemptions will the whole run have (each time a running request "
        "loses its KV cache counts once)?", unit="preemptions", lo=0.0, hi=1000.0, default=0.0, defaults={"capacity": "1,024"}),
    Ask("slo_goodput", "slo_goodput", "latency-metrics",
        "As the arrival rate rises, at which rate (requests/s) will goodput (requests/s that meet both "
        "SLOs) be highest, with the SLOs you set?"),
    Ask("slo_first_miss", "slo_goodput", "latency-metrics",
        "At the highest arrival rate, which target will more requests miss (within a tenth of each other counts "
        "as about as many)?", choices=("TTFT", "TPOT", "about as many of each")),
    Ask("queueing", "queueing", "queueing",
        "The mean time a request waits in the queue at ρ = {lo} is some number of seconds. How many times "
        "that will it be at ρ = {hi}?", unit="×", lo=0.1, hi=10000.0, default=1.0,
        defaults={"lo": "30%", "hi": "90%"}),
    Ask("knee", "knee", "batch-policy", "Among the max_num_seqs values swept, which will be the knee by the rule?"),
    Ask("knee_goodput", "knee", "batch-policy",
        "Which max_num_seqs will give the most goodput (requests/s within both SLOs)?"),
    Ask("tail", "tail", "tail-latency",
        "Over all requests, how many times the median (p50) TTFT will the p99 TTFT be?",
        unit="×", lo=1.0, hi=1000.0, default=1.0),
    Ask("tail_group", "tail", "tail-latency",
        "Split by prompt length: which group will have the highest p95 TTFT?"),
    Ask("scheduler_orders", "scheduler_orders", "scheduler-policy",
        "Against fcfs (first come, first served), whose p95 TTFT will the other orders move the most, up or down?"),
    Ask("orders_starve", "scheduler_orders", "scheduler-policy",
        "Under which order will the long prompts have the longest p95 queue time (the time before their first step)?"),
    Ask("dynamic_batching", "dynamic_batching", "two-schedulers",
        "Raise max_wait_ms from {first} to {last} ms. What happens to the median TTFT and to the tokens "
        "delivered per second?", defaults={"first": "0", "last": "2,000"}),
    Ask("cluster", "cluster", "beyond-one-replica", "Which router gives the lowest p95 TTFT here?"),
    Ask("cluster_scale", "cluster", "beyond-one-replica", "Which autoscaler spends fewer replica-seconds over the ramp?"),
    Ask("benchmarking", "benchmarking", "benchmarking",
        "{clients} clients keep sending (each sends again when its last request ends), and the engine serves X "
        "requests a second. Then the same requests arrive at random at that same rate X. How many times the "
        "closed loop's p95 TTFT will the open load's be?", unit="×", lo=0.1, hi=1000.0, default=1.0,
        defaults={"clients": "6"}),
    Ask("kv_running", "kv_capacity", "kv-capacity",
        "With a KV pool of {pool} tokens and max_num_seqs {slots}, how many requests will be running at once, on "
        "average, over the steps where others are waiting?", unit="requests", lo=0.0, hi=64.0, default=16.0,
        defaults={"pool": "1,024", "slots": "16"}),
    Ask("kv_prefix", "kv_capacity", "kv-capacity",
        "The same requests run with prefix caching off, then on. How many times shorter will the median TTFT be "
        "with it on (1 = no change)?", unit="×", lo=0.1, hi=1000.0, default=1.0),
    Ask("spec_one", "speculation", "speculative-decoding",
        "At batch 1, on prompts that ask the model to copy a passage, how many times the output tok/s without "
        "speculation will n-gram speculation with {k} drafted tokens give?",
        unit="×", lo=0.1, hi=10.0, default=1.0, defaults={"k": "4"}),
    Ask("spec_big", "speculation", "speculative-decoding",
        "Now {batch} copies run at once. With speculation on, will the steps that run no prompt make tokens "
        "faster or slower than without?", choices=("faster", "about the same (within 5%)", "slower"),
        defaults={"batch": "64"}),
    Ask("token_budget", "token_budget", "token-budget",
        "Raise max_num_batched_tokens from {first} to {last} tokens on this workload. What happens to the p95 TTFT "
        "and to the longest gap between two tokens in a stream (p95 over requests)?",
        defaults={"first": "128", "last": "1,024"}),
    Ask("playground", "playground", "two-schedulers",
        "With these settings, at which arrival rate (requests/s) will the waiting queue stop emptying?",
        unit="requests/s", lo=0.1, hi=10000.0, default=1.0),
)


def for_lesson(lesson: str) -> list[Ask]:
    return [a for a in ASKS.values() if a.lesson == lesson]
