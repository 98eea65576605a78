"""Scheduler orders: one multi-tenant workload under each admission order (fcfs, priority, sjf,
fair, edf); per-tenant TTFT, who wins and who loses against fcfs, and who waits longest."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished
from analysis.style import empty_figure, is_empty, wrapped_layout
from engine.config import ORDERS, SchedulerPolicy
from engine.metrics import percentile
from engine.results import RunResult
from engine.workload import LengthDist, WorkloadSpec
from labs.part import Part
from labs.runs import estimate, frames, mix_run, run_each, simulated_mix_run
from labs.tail.experiment import percentile_table, prompt_bucket

ORDER_NAMES = list(ORDERS)
BASELINE = "fcfs"
REQUESTS = 40
RATE = 6.0
TENANTS = [  # name, share of traffic, priority (lower = more important), own TTFT target
    ("tenant-a", 0.5, 0, 4.0),
    ("tenant-b", 0.25, 1, 2.0),
    ("tenant-c", 0.25, 2, 1.0),
]
PROMPT = LengthDist("longtail", 32, 1024)
OUTPUT = LengthDist("uniform", 16, 48)
POLICY = SchedulerPolicy(max_num_seqs=8, max_num_batched_tokens=256)


def order_parts(rate: float = RATE, seed: int = 0) -> list[Part]:
    """Three tenants, one heavy (half the traffic); long-tail prompts; each tenant its own TTFT target."""
    parts = []
    for i, (tenant, share, prio, ttft) in enumerate(TENANTS):
        n = round(REQUESTS * share)
        parts.append(Part(WorkloadSpec(num_requests=n, rate=rate * share, **PROMPT.as_fields("prompt"),
                                       **OUTPUT.as_fields("output"), seed=seed * 100 + i, id_prefix=f"{tenant[-1]}"),
                          tenant=tenant, priority=prio, ttft_slo_s=ttft))
    return parts


def order_runs(model, orders=ORDER_NAMES, rate: float = RATE, seed: int = 0, progress=None,
               refresh: bool = False, peek: bool = False) -> dict | None:
    """{order: (RunResult, was_cached)} for the same multi-tenant workload."""
    runs = run_each(orders, lambda order, p: mix_run(model, POLICY.changed(order=order), order_parts(rate, seed), p,
                                                     label=order, refresh=refresh, peek=peek), progress)
    return None if runs is None else {order: (res, hit) for order, res, hit in runs}


def simulated_order_runs(step_model, orders=ORDER_NAMES, rate: float = RATE, seed: int = 0) -> dict:
    """order_runs on the simulator: {order: (RunResult, False)}, in milliseconds."""
    return {order: (simulated_mix_run(step_model, POLICY.changed(order=order), order_parts(rate, seed),
                                      label=f"{order}, simulated"), False) for order in orders}


def estimate_s(model, orders=ORDER_NAMES, rate: float = RATE, seed: int = 0) -> tuple[float, bool]:
    return estimate(model, [(POLICY.changed(order=order), order_parts(rate, seed)) for order in orders])


def worst_tenant(table: pd.DataFrame, order: str = BASELINE) -> str:
    """The tenant with the highest p95 TTFT under `order`."""
    g = table[table["order"] == order]
    return str(g.loc[g["ttft_p95_s"].idxmax(), "tenant"])


def tenant_table(runs: dict) -> pd.DataFrame:
    """One row per (order, tenant): p50/p95 TTFT, and the share meeting the tenant's own target."""
    targets = {t: slo for t, _, _, slo in TENANTS}
    rows = []
    for order, (res, _) in runs.items():
        reqs = finished(frames(res)[0])
        for tenant, g in reqs.groupby("tenant", sort=True):
            ttft = pd.to_numeric(g["ttft_s"])
            values = ttft.dropna().tolist()
            rows.append({"order": order, "tenant": tenant, "n": len(g),
                         **{f"ttft_p{q}_s": percentile(values, q) for q in (50, 95, 99)},
                         "met_own_ttft": float((ttft <= targets.get(tenant, math.inf)).mean()),
                         "output_tok_s": res.summary["output_throughput_tok_s"]})
    return pd.DataFrame(rows)


def winners(table: pd.DataFrame, baseline: str = BASELINE) -> dict[str, str]:
    """One sentence per order naming who wins and who loses, computed from p95 TTFT.

    Against the baseline order: the tenant whose p95 TTFT fell most wins, the one whose rose
    most loses. For the baseline itself: the best and worst tenants.
    """
    out = {}
    base = table[table["order"] == baseline].set_index("tenant")["ttft_p95_s"]
    for order, g in table.groupby("order", sort=False):
        p95 = g.set_index("tenant")["ttft_p95_s"]
        if order == baseline or base.empty:
            best, worst = p95.idxmin(), p95.idxmax()
            out[order] = (f"{order}: {best} has the best p95 TTFT ({p95[best]:.2f} s), "
                          f"{worst} the worst ({p95[worst]:.2f} s).")
            continue
        delta = (p95 - base.reindex(p95.index)).dropna()
        win, lose = delta.idxmin(), delta.idxmax()
        parts = []
        if delta[win] < 0:
            parts.append(f"{win} wins (p95 TTFT {base[win]:.2f} → {p95[win]:.2f} s)")
        if delta[lose] > 0:
            parts.append(f"{lose} loses (p95 TTFT {base[lose]:.2f} → {p95[lose]:.2f} s)")
        if not parts:
            parts.append(f"no tenant's p95 TTFT moved against {baseline}")
        out[order] = f"{order} vs {baseline}: " + "; ".join(parts) + "."
    return out


def bucket_table(runs: dict) -> pd.DataFrame:
    """One row per (order, prompt-length bucket): p50 and p99 TTFT."""
    rows = []
    for order, (res, _) in runs.items():
        reqs = finished(frames(res)[0])
        t = percentile_table(reqs, "ttft_s", prompt_bucket(reqs["prompt_tokens"]))
        for r in t.itertuples():
            if r.group != "all":
                rows.append({"order": order, "prompt length": r.group, "n": r.n, "ttft_p50_s": r.p50,
                             "ttft_p99_s": r.p99})
    return pd.DataFrame(rows)


def oldest_waiting_age(result: RunResult) -> pd.DataFrame:
    """At the end of every step: how long the oldest request still waiting for its first step has waited.

    Columns t_s, age_s (0 when nobody waits). Starvation shows as an age that keeps climbing.
    """
    reqs, steps = frames(result)
    if len(steps) == 0:
        return pd.DataFrame(columns=["t_s", "age_s"])
    arrival = pd.to_numeric(reqs["arrival_s"]).to_numpy(float)
    first = pd.to_numeric(reqs["first_scheduled_s"], errors="coerce").fillna(np.inf).to_numpy(float)
    t = pd.to_numeric(steps["t_end_s"]).to_numpy(float)
    waiting = (arrival[None, :] <= t[:, None]) & (first[None, :] > t[:, None])
    oldest = np.where(waiting, arrival[None, :], np.inf).min(axis=1)
    return pd.DataFrame({"t_s": t, "age_s": np.where(np.isfinite(oldest), t - oldest, 0.0)})


def waiting_ages(runs: dict) -> dict[str, pd.DataFrame]:
    """{order: oldest_waiting_age} with time counted from each run's first arrival."""
    out = {}
    for order, (res, _) in runs.items():
        age = oldest_waiting_age(res)
        start = min((float(r["arrival_s"]) for r in res.requests), default=0.0)
        out[order] = age.assign(t_s=age["t_s"] - start)
    return out


# ----------------------------------------------------------------------------- figures


def tenant_bars(table: pd.DataFrame, metric: str = "ttft_p95_s") -> go.Figure:
    """Grouped bars: one group per order, one bar per tenant."""
    what = {"ttft_p95_s": "p95 TTFT", "ttft_p50_s": "p50 TTFT"}.get(metric, metric)
    texts = (f"{what} per tenant under each order",
             "Lower is better. Read across a group to see who an order favours; compare groups to see "
             f"what each tenant gains or loses against {BASELINE}.",
             "admission order", f"{what} (s)")   # title, what good looks like, x and y axis
    if is_empty(table):
        return go.Figure(empty_figure(*texts))
    traces = [go.Bar(name=str(tenant), x=g["order"], y=g[metric],
                     hovertemplate=f"{tenant} under %{{x}}: %{{y:.2f}} s<extra></extra>")
              for tenant, g in table.groupby("tenant", sort=True)]
    return go.Figure(data=traces, layout=wrapped_layout(*texts, barmode="group",
                                                        xaxis=dict(type="category")))


def oldest_waiting(series: dict[str, pd.DataFrame]) -> go.Figure:
    """Age of the oldest waiting request over time, one line per run (e.g. per order)."""
    texts = ("How long the oldest waiting request has waited",
             "Good: a saw-tooth that keeps returning to zero. A line that climbs without coming down is a "
             "request being passed over again and again: starvation.",
             "time since the first arrival (s)", "oldest wait (s)")   # title, what good looks like, x and y axis
    traces = [go.Scatter(name=name, x=df["t_s"], y=df["age_s"], mode="lines", line_shape="hv")
              for name, df in series.items() if df is not None and len(df)]
    if not traces:
        return go.Figure(empty_figure(*texts))
    return go.Figure(data=traces, layout=wrapped_layout(*texts, yaxis=dict(rangemode="tozero")))
