"""The lab pages the app lists: file, title, address and what each one shows.

app.py builds the "Labs" navigation section from LABS and the home page describes each entry:
the Playground first, then the lesson labs (one folder each under labs/). The lab id is
the page's address (url_path) and what lessons link to as `lab:<id>`. No Streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LabPage:
    path: str        # page script, relative to the repository root
    title: str
    url_path: str    # the page's address: /playground (lessons link to it as lab:<id>)
    icon: str
    shows: str       # one or two sentences for the home page


PLAYGROUND = LabPage(
    "playground/page.py", "Playground", "playground", ":material/science:",
    "The real engine, live: pick a workload and a batching policy, press Start, and move any "
    "slider while it runs. Watch who shares each engine step, the queue, TTFT and TPOT against "
    "their targets, throughput, goodput and the KV cache, and step back through the whole run "
    "afterwards.")

# (lab id, title, icon, what it shows); the page is labs/<lab id>/page.py.
_LESSON_LABS = [
    ("why_batch", "Why batch", ":material/stacked_line_chart:",
     "Decode step time and tokens/s against batch size on the real model, and where the gain bends."),
    ("static_vs_continuous", "Static vs continuous", ":material/view_week:",
     "One seeded workload through static and continuous batching, replayed side by side slot by "
     "slot, with wasted slot-steps, throughput, TTFT and TPOT compared."),
    ("dynamic_batching", "Dynamic batching", ":material/hourglass_empty:",
     "Static batches with max_wait_ms swept: waiting longer fills batches (more tokens per second of "
     "work) and delays every first token, measured several times per setting."),
    ("costs", "What continuous costs", ":material/payments:",
     "A long prompt stalling running decodes with chunked prefill off and on; a KV cache small "
     "enough to force preemptions."),
    ("slo_goodput", "SLOs and goodput", ":material/verified:",
     "Finished runs at several arrival rates, re-scored instantly as you move the TTFT and TPOT "
     "SLO sliders: throughput against goodput."),
    ("queueing", "Queueing", ":material/hourglass_top:",
     "Measured time in system against utilization beside the M/M/1 model, and Little's Law "
     "checked on each run's own trace."),
    ("knee", "Find the knee", ":material/trending_flat:",
     "A max_num_seqs sweep, each setting run several times: throughput against p95 TPOT and p95 TTFT, "
     "with the range of the runs and the knee marked."),
    ("tail", "The tail", ":material/ssid_chart:",
     "CDFs and p50/p90/p95/p99 tables of one run, split by prompt length and by tenant."),
    ("scheduler_orders", "Scheduler orders", ":material/sort:",
     "One multi-tenant workload under fcfs, priority, sjf, fair and edf: per-tenant TTFT and "
     "who wins and loses."),
    ("cluster", "Beyond one replica", ":material/hub:",
     "Simulated replicas of the engine behind four routers on a shared-prefix workload, then two "
     "autoscalers under a traffic ramp: p95 TTFT, prefix hit rate, load imbalance, replicas over time, "
     "SLO attainment and replica-seconds, with each replica's batches."),
    ("kv_capacity", "KV capacity", ":material/memory:",
     "The KV pool worked out for an 8B and a 70B model on H100s, a sweep of the engine's pool showing the batch "
     "capped, usage and preemptions, and prefix caching off and on with its hit rate and TTFT."),
    ("token_budget", "The token budget", ":material/tune:",
     "One mix of long and short prompts under a sweep of max_num_batched_tokens, chunked prefill on: TTFT against "
     "the longest pause in each stream, and where a chat or a batch goal would set it."),
    ("benchmarking", "Benchmarking honestly", ":material/speed:",
     "One engine under a fixed concurrency and under random arrivals at the same throughput: where the "
     "queue hides, the first requests of a run, and how far a p99 moves between repeats."),
    ("speculation", "Guessing ahead", ":material/fast_forward:",
     "n-gram speculative decoding off and on, side by side: output tok/s at batch 1 and decode tok/s at a "
     "large batch, the share of guesses accepted on copies and on free text, each step's drafts, and a GPU "
     "roofline's prediction beside."),
]

LESSON_LABS = [LabPage(f"labs/{lab_id}/page.py", title, lab_id, icon, shows)
               for lab_id, title, icon, shows in _LESSON_LABS]
LABS = [PLAYGROUND, *LESSON_LABS]


def lab_title(lab_id: str) -> str:
    return next(lab.title for lab in LABS if lab.url_path == lab_id)
