"""Dynamic batching (a Triton-style batcher): static batches, and how long the server waits to
fill one. A batch starts when max_num_seqs requests wait or when the oldest has waited
max_wait_ms; waiting longer makes fuller batches (more tokens per second of engine work) and
a longer wait before the first token. Each setting runs REPEATS times (seeds 0, 1, 2...)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import plotly.graph_objects as go

from analysis.membership import member_counts
from analysis.style import COLORS, empty_figure, is_empty, wrapped_layout
from engine.config import SchedulerPolicy
from engine.workload import WorkloadSpec
from labs import timing
from labs.repeats import REPEATS, error_bars, spread
from labs.part import Part
from labs.runs import estimate, frames, run_each, simulated_run, single_run

WAITS_MS = [0, 250, 1000, 2000]
SLOTS = 8
SPEC = WorkloadSpec(num_requests=16, rate=4.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=64,
                    output_kind="fixed", output_lo=16, output_hi=16)
COLUMNS = ["ttft_p50_s", "ttft_p95_s", "mean_batch", "busy_tok_s", "output_tok_s"]
OUTCOMES = ("TTFT up, throughput up", "TTFT up, throughput down", "TTFT down, throughput up",
            "both about the same")
CHANGE = 0.1     # a change under 10% counts as "about the same"


def wait_policy(wait_ms: float, slots: int = SLOTS) -> SchedulerPolicy:
    return SchedulerPolicy(mode="static", max_num_seqs=slots, max_wait_ms=float(wait_ms))


def settings(waits=WAITS_MS, repeats: int = REPEATS) -> list[tuple[float, int]]:
    """Every (max_wait_ms, seed) run."""
    return [(float(w), seed) for w in waits for seed in range(repeats)]


def wait_runs(model, waits=WAITS_MS, slots: int = SLOTS, repeats: int = REPEATS, progress=None,
              refresh: bool = False, peek: bool = False):
    """[((max_wait_ms, seed), RunResult, was_cached)] for every wait and seed."""
    return run_each(settings(waits, repeats),
                    lambda ws, p: single_run(model, wait_policy(ws[0], slots), replace(SPEC, seed=ws[1]), p,
                                             label=f"max_wait_ms={ws[0]:g}, seed {ws[1]}", refresh=refresh,
                                             peek=peek),
                    progress, describe=lambda ws: f"max_wait_ms={ws[0]:g} (run {ws[1] + 1} of {repeats})")


def simulated_wait_runs(step_model, waits=WAITS_MS, slots: int = SLOTS, repeats: int = REPEATS):
    """wait_runs on the simulator (labs.runs.simulated_run): the same runs, in milliseconds."""
    return [(ws, simulated_run(step_model, wait_policy(ws[0], slots), replace(SPEC, seed=ws[1])), False)
            for ws in settings(waits, repeats)]


def estimate_s(model, waits=WAITS_MS, slots: int = SLOTS, repeats: int = REPEATS) -> tuple[float, bool]:
    return estimate(model, [(wait_policy(w, slots), [Part(replace(SPEC, seed=seed))])
                            for w, seed in settings(waits, repeats)])


def run_rows(runs) -> pd.DataFrame:
    """One row per run: TTFT, the mean batch (sequences per step), output tokens per second of
    engine work (busy_tok_s: the batching efficiency) and per second of the whole run."""
    rows = []
    for (wait, seed), res, _ in runs:
        _, steps = frames(res)
        s = res.summary
        busy = timing.busy_s(res.steps)
        rows.append({"max_wait_ms": wait, "seed": seed, "ttft_p50_s": s["ttft_s"]["p50"],
                     "ttft_p95_s": s["ttft_s"]["p95"], "mean_batch": float(member_counts(steps).mean()),
                     "busy_tok_s": s["output_tokens"] / busy if busy > 0 else float("nan"),
                     "output_tok_s": s["output_throughput_tok_s"]})
    return pd.DataFrame(rows)


def wait_table(runs) -> pd.DataFrame:
    """One row per max_wait_ms: the mean of its runs, with each column's _lo / _hi range."""
    return spread(run_rows(runs), "max_wait_ms", COLUMNS)


def outcome(table: pd.DataFrame) -> str:
    """What raising max_wait_ms from the first to the last setting did, as one of OUTCOMES."""
    first, last = table.iloc[0], table.iloc[-1]

    def moved(col):
        change = last[col] / first[col] - 1 if first[col] > 0 else 0.0
        return 1 if change > CHANGE else -1 if change < -CHANGE else 0
    ttft, tput = moved("ttft_p50_s"), moved("busy_tok_s")
    if ttft == 0 and tput == 0:
        return OUTCOMES[3]
    if ttft >= 0:
        return OUTCOMES[0] if tput >= 0 else OUTCOMES[1]
    return OUTCOMES[2]


def ttft_and_throughput(table: pd.DataFrame, sim: pd.DataFrame | None = None,
                        sim_name: str = "simulated") -> go.Figure:
    """p50 TTFT (left axis) and tokens per second of engine work (right axis) against max_wait_ms;
    `sim`, a wait_table from the simulator, as dotted lines beside (or, alone, instead of) the real one."""
    texts = ("Waiting to fill a batch: TTFT against throughput",
             "Each point is the mean of its runs (bars: lowest to highest run). Waiting longer fills batches "
             "(throughput per second of work rises) and delays every first token. Good: the shortest wait "
             "that gives the throughput you need.",
             "max_wait_ms (how long the oldest request may wait for the batch to fill)", "p50 TTFT (s)")
    if is_empty(table) and is_empty(sim):
        return go.Figure(empty_figure(*texts))
    traces = []
    if not is_empty(sim):
        traces += [
            go.Scatter(name=f"p50 TTFT, {sim_name}", x=sim["max_wait_ms"], y=sim["ttft_p50_s"], mode="lines",
                       line=dict(color=COLORS["p95"], width=2, dash="dot"),
                       hovertemplate="wait %{x:g} ms: simulated p50 TTFT %{y:.2f} s<extra></extra>"),
            go.Scatter(name=f"tokens per second of engine work, {sim_name}", x=sim["max_wait_ms"],
                       y=sim["busy_tok_s"], mode="lines", yaxis="y2",
                       line=dict(color=COLORS["tokens"], width=2, dash="dot"),
                       hovertemplate="wait %{x:g} ms: simulated %{y:.0f} tok/s while busy<extra></extra>"),
        ]
    if not is_empty(table):
        x = table["max_wait_ms"]
        traces += [
            go.Scatter(name="● p50 TTFT (s)", x=x, y=table["ttft_p50_s"], mode="lines+markers",
                       marker=dict(symbol="circle", size=9), line=dict(color=COLORS["p95"], width=2.5),
                       error_y=error_bars(table, "ttft_p50_s"),
                       hovertemplate="wait %{x:g} ms: p50 TTFT %{y:.2f} s<extra></extra>"),
            go.Scatter(name="■ tokens per second of engine work", x=x, y=table["busy_tok_s"], mode="lines+markers",
                       yaxis="y2", marker=dict(symbol="square", size=9), line=dict(color=COLORS["tokens"], width=2.5),
                       error_y=error_bars(table, "busy_tok_s"),
                       hovertemplate="wait %{x:g} ms: %{y:.0f} tok/s while busy<extra></extra>"),
        ]
    return go.Figure(data=traces, layout=wrapped_layout(
        *texts, yaxis=dict(rangemode="tozero"),
        yaxis2=dict(title=dict(text="output tokens / s of engine work"), overlaying="y", side="right",
                    rangemode="tozero", showgrid=False),
        margin=dict(l=60, r=60, t=80, b=50)))
