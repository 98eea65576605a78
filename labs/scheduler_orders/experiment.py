"""Scheduler orders: one multi-tenant workload under each admission order (fcfs, priority, sjf,
fair, edf); per-tenant TTFT, who wins and who loses against fcfs, and whether the long prompts
starve. The arrival rate is a share (LOAD) of the capacity this machine's step model predicts for
the mix, so requests queue on any machine; the simulator runs SIM_REQUESTS, the real engine
REQUESTS."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished
from analysis.style import empty_figure, is_empty, layout
from course import claims
from engine.core.config import ORDERS, SchedulerPolicy
from engine.core.metrics import percentile
from engine.runs.results import RunResult
from engine.runs.workload import LengthDist, WorkloadSpec
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import arrival_rate, estimate, frames, mix_run, run_each, simulated_mix_run
from labs.queueing.experiment import waiting_growth
from labs.tail.experiment import percentile_table, prompt_bucket

ORDER_NAMES = list(ORDERS)
BASELINE = "fcfs"
REQUESTS = 120
SIM_REQUESTS = 400
LOAD = 0.85
LIGHT = 0.3              # a light load, where the queue empties often: what neither claim is about
LONG_PROMPT = 256        # prompts above this many tokens are "long" for the starvation claim
# the prompt-length table's rows: the long prompts the claim counts, and the rest
LENGTHS = ((0, LONG_PROMPT, f"≤ {LONG_PROMPT} tokens"), (LONG_PROMPT + 1, 10 ** 9, f"long: > {LONG_PROMPT} tokens"))
OVERLOAD = 0.05          # fcfs's waiting queue growing by this share of the arrivals or more: overload
TENANTS = [  # name, share of traffic, priority (lower = more important), own TTFT target
    ("tenant-a", 0.5, 0, 4.0),
    ("tenant-b", 0.25, 1, 2.0),
    ("tenant-c", 0.25, 2, 1.0),
]
PROMPT = LengthDist("longtail", 32, 1024)
OUTPUT = LengthDist("uniform", 16, 48)
POLICY = SchedulerPolicy(max_num_seqs=8, max_num_batched_tokens=256)


def capacity(step_model) -> float:
    """Requests per second the engine finishes of this mix with its queue never empty (the step
    model's answer: the mix arriving at once, under fcfs)."""
    res = simulated_mix_run(step_model, POLICY, order_parts(0.0, 0, 200))
    return float(res.summary["request_throughput_req_s"])


def rate_for(step_model, load: float = LOAD) -> float:
    return arrival_rate(load, capacity(step_model))


def order_parts(rate: float, seed: int = 0, requests: int = REQUESTS) -> list[Part]:
    """Three tenants, one heavy (half the traffic); long-tail prompts; each tenant its own TTFT target."""
    parts = []
    for i, (tenant, share, prio, ttft) in enumerate(TENANTS):
        n = round(requests * share)
        parts.append(Part(WorkloadSpec(num_requests=n, rate=rate * share, **PROMPT.as_fields("prompt"),
                                       **OUTPUT.as_fields("output"), seed=seed * 100 + i, id_prefix=f"{tenant[-1]}"),
                          tenant=tenant, priority=prio, ttft_slo_s=ttft))
    return parts


def order_runs(model, rate: float, orders=ORDER_NAMES, seed: int = 0, progress=None,
               refresh: bool = False, peek: bool = False) -> dict | None:
    """{order: (RunResult, was_cached)} for the same multi-tenant workload."""
    runs = run_each(orders, lambda order, p: mix_run(model, POLICY.changed(order=order), order_parts(rate, seed), p,
                                                     label=order, refresh=refresh, peek=peek), progress)
    return None if runs is None else {order: (res, hit) for order, res, hit in runs}


def simulated_order_runs(step_model, rate: float, orders=ORDER_NAMES, seed: int = 0,
                         requests: int = SIM_REQUESTS) -> dict:
    """order_runs on the simulator: {order: (RunResult, False)}, in milliseconds."""
    return {order: (simulated_mix_run(step_model, POLICY.changed(order=order), order_parts(rate, seed, requests),
                                      label=f"{order}, simulated"), False) for order in orders}


def estimate_s(model, rate: float, orders=ORDER_NAMES, seed: int = 0) -> tuple[float, MachineSpeed]:
    return estimate(model, [(POLICY.changed(order=order), order_parts(rate, seed)) for order in orders])


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
    """One row per (order, prompt length: LENGTHS, the starvation claim's split): p50 and p99 TTFT."""
    rows = []
    names = [name for _, _, name in LENGTHS]
    for order, (res, _) in runs.items():
        reqs = finished(frames(res)[0])
        t = percentile_table(reqs, "ttft_s", prompt_bucket(reqs["prompt_tokens"], LENGTHS))
        got = {r.group: r for r in t.itertuples() if r.group != "all"}
        rows += [{"order": order, "prompt length": name, "n": got[name].n, "ttft_p50_s": got[name].p50,
                  "ttft_p99_s": got[name].p99} for name in names if name in got]
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


def long_waits(result: RunResult) -> tuple[float, int]:
    """(p95 queue time of the long prompts, how many there are)."""
    reqs = pd.DataFrame(result.requests)
    longs = reqs[pd.to_numeric(reqs["prompt_tokens"]) > LONG_PROMPT]
    wait = pd.to_numeric(longs["queue_s"], errors="coerce").dropna().tolist()
    return percentile(wait, 95), len(longs)


def overload_share(result: RunResult) -> float:
    """How fast the waiting queue grew while requests arrived, as a share of the arrival rate
    (labs.queueing.experiment.waiting_growth): near 0 for a queue that keeps emptying."""
    reqs, steps = frames(result)
    arr = pd.to_numeric(reqs["arrival_s"]).to_numpy(float)
    rate = (len(arr) - 1) / (arr.max() - arr.min()) if len(arr) > 1 and arr.max() > arr.min() else math.nan
    return claims.ratio(waiting_growth(steps, reqs), rate)


def starve_verdict(runs: dict) -> claims.Verdict:
    """The claim `sjf_starves_long`: at the same load, the long prompts' p95 queue time under sjf
    against under fcfs; undecided when fcfs's own queue keeps growing (that is overload)."""
    if "sjf" not in runs or "fcfs" not in runs:
        return claims.judge("sjf_starves_long", math.nan, "", "", "it compares sjf with fcfs: keep both orders.")
    sjf, n = long_waits(runs["sjf"][0])
    fcfs, _ = long_waits(runs["fcfs"][0])
    if n < 5:
        return claims.judge("sjf_starves_long", math.nan, "", "",
                            f"only {n} prompts are over {LONG_PROMPT} tokens: too few for their p95 wait.")
    ratio = claims.ratio(sjf, max(fcfs, 1e-3))
    grow = overload_share(runs["fcfs"][0])
    numbers = (f"The {n} long prompts (over {LONG_PROMPT} tokens) had a p95 queue time of {sjf:.2f} s under sjf and "
               f"{fcfs:.2f} s under fcfs (×{ratio:.1f}); under fcfs the waiting queue grew by {grow:.0%} of the "
               "arrival rate.")
    if grow >= OVERLOAD:
        return claims.judge("sjf_starves_long", ratio, "", "", numbers + " fcfs's queue keeps growing too: this "
                            "is overload, which makes every order's waits grow, not starvation by sjf.")
    return claims.judge("sjf_starves_long", ratio,
                        numbers + " fcfs keeps its queue bounded at this load, so the long prompts' extra wait is "
                        "sjf passing them over while shorter ones keep arriving: starvation.",
                        numbers + " The queue empties often enough that sjf still gives the long prompts a slot soon.")


def tenant_moves(table: pd.DataFrame, baseline: str = BASELINE) -> dict[str, float]:
    """Each tenant's largest relative change of p95 TTFT against `baseline` over the other orders (up or
    down): what the orders question scores (under fcfs alone the tenants wait alike)."""
    base = table[table["order"] == baseline].set_index("tenant")["ttft_p95_s"]
    others = table[table["order"] != baseline]
    change = (others["ttft_p95_s"].to_numpy() / base.reindex(others["tenant"]).to_numpy() - 1)
    return {t: float(v) for t, v in pd.Series(abs(change), index=others["tenant"].to_numpy()).groupby(level=0).max().items()}


def favour_verdict(table: pd.DataFrame, baseline: str = BASELINE) -> claims.Verdict:
    """The claim `orders_favour_someone`: for every order but fcfs, the largest relative change of a
    tenant's p95 TTFT against fcfs; the metric is the median of those over the orders."""
    base = table[table["order"] == baseline].set_index("tenant")["ttft_p95_s"]
    moves = {}
    for order, g in table.groupby("order", sort=False):
        if order == baseline:
            continue
        change = (g.set_index("tenant")["ttft_p95_s"] / base.reindex(g["tenant"]).to_numpy() - 1).abs()
        moves[order] = float(change.max()) if len(change) else math.nan
    if not moves or base.empty:
        return claims.judge("orders_favour_someone", math.nan, "", "", "it compares orders with fcfs: pick "
                            "fcfs and at least one other.")
    median = float(pd.Series(moves).median())
    words = "; ".join(f"{o} {m:.0%}" for o, m in moves.items())
    numbers = f"Largest change of a tenant's p95 TTFT against fcfs: {words} (median {median:.0%})."
    still = [o for o, m in moves.items() if m < claims.CLAIMS["orders_favour_someone"].threshold]
    movers = [o for o in moves if o not in still]
    return claims.judge("orders_favour_someone", median,
                        numbers + (" The orders moved somebody's wait: each favours someone." if not still else
                                   f" {' and '.join(movers)} moved somebody's wait, favouring someone; "
                                   f"{' and '.join(still)} hardly differs from fcfs here."),
                        numbers + " The orders hardly moved anyone: an order decides who waits only while requests "
                        "queue, and here the queue was too short, or the tenants too alike, for that to show.")


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
    return go.Figure(data=traces, layout=layout(*texts, barmode="group",
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
    return go.Figure(data=traces, layout=layout(*texts, yaxis=dict(rangemode="tozero")))
