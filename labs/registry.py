"""The lesson lab pages, for app.py to register: (lab id, page file, title, icon).

The lab id is the page's address (url_path) and what lessons link to as `lab:<id>`.
`lesson_lab_pages()` gives the same pages as labs.index.LabPage entries with a line for the home page.
No Streamlit here.
"""
from __future__ import annotations

LESSON_LABS = [
    ("why_batch", "labs/why_batch.py", "Why batch", ":material/stacked_line_chart:"),
    ("static_vs_continuous", "labs/static_vs_continuous.py", "Static vs continuous", ":material/view_week:"),
    ("costs", "labs/costs.py", "What continuous costs", ":material/payments:"),
    ("slo_goodput", "labs/slo_goodput.py", "SLOs and goodput", ":material/verified:"),
    ("queueing", "labs/queueing.py", "Queueing", ":material/hourglass_top:"),
    ("knee", "labs/knee.py", "Find the knee", ":material/trending_flat:"),
    ("tail", "labs/tail.py", "The tail", ":material/ssid_chart:"),
    ("scheduler_orders", "labs/scheduler_orders.py", "Scheduler orders", ":material/sort:"),
]

SHOWS = {
    "why_batch": "Decode step time and tokens/s against batch size on the real model, and where the gain bends.",
    "static_vs_continuous": "One seeded workload through static and continuous batching, replayed side by side "
                            "slot by slot, with wasted slot-steps, throughput, TTFT and TPOT compared.",
    "costs": "A long prompt stalling running decodes with chunked prefill off and on; a KV cache small "
             "enough to force preemptions.",
    "slo_goodput": "Finished runs at several arrival rates, re-scored instantly as you move the TTFT and TPOT "
                   "SLO sliders: throughput against goodput.",
    "queueing": "Measured time in system against utilization beside the M/M/1 model, and Little's Law checked "
                "on each run's own trace.",
    "knee": "A max_num_seqs sweep: throughput against p95 TPOT and p95 TTFT, with the knee marked.",
    "tail": "CDFs and p50/p90/p95/p99 tables of one run, split by prompt length and by tenant.",
    "scheduler_orders": "One multi-tenant workload under fcfs, priority, sjf, fair and edf: per-tenant TTFT and "
                        "who wins and loses.",
}


def lesson_lab_pages():
    """The same pages as labs.index.LabPage entries (LabPage imported here: labs.index imports this module)."""
    from labs.index import LabPage
    return [LabPage(path, title, lab_id, icon, SHOWS[lab_id]) for lab_id, path, title, icon in LESSON_LABS]
