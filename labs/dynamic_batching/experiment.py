"""Dynamic batching (a Triton-style batcher): static batches, and how long the server waits to
fill one. A batch starts when max_num_seqs requests wait or when the oldest has waited
max_wait_ms. Three numbers side by side: tokens per second of engine work (busy), tokens
delivered per second over the run, and TTFT. Requests arrive at LOAD of what this machine's
step model says the batcher serves (its capacity), so the run is an open workload below
capacity. Each setting runs REPEATS times (seeds 0, 1, 2...)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import plotly.graph_objects as go

from analysis.membership import member_counts
from analysis.style import COLORS, empty_figure, is_empty, layout
from course import claims
from engine.core.config import SchedulerPolicy
from engine.runs.workload import WorkloadSpec
from course import claims
from labs.repeats import error_bars, spread
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import arrival_rate, estimate, frames, run_each, simulated_run, single_run

WAITS_MS = [0, 500, 2000]
SLOTS = 8
REPEATS = 2
LOAD = 0.5       # arrivals at this share of the batcher's capacity (from the step model)
SPEC = WorkloadSpec(num_requests=48, rate=1.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=64,
                    output_kind="fixed", output_lo=16, output_hi=16)
COLUMNS = ["ttft_p50_s", "ttft_p95_s", "mean_batch", "busy_tok_s", "output_tok_s"]
OUTCOMES = ("TTFT up, delivered tok/s up", "TTFT up, delivered tok/s about the same",
            "TTFT up, delivered tok/s down", "TTFT about the same or down")
CHANGE = 0.1     # a change under 10% counts as "about the same"
NEARLY_FULL = 0.9   # a mean batch this share of the slots counts as "nearly full"


def capacity(step_model, slots: int = SLOTS) -> float:
    """Requests per second the batcher serves with its queue never empty (the step model's answer):
    six full batches at once, no wait."""
    res = simulated_run(step_model, wait_policy(0, slots), replace(SPEC, num_requests=6 * slots, rate=0))
    return float(res.summary["request_throughput_req_s"])


def rate_for(step_model, load: float = LOAD, slots: int = SLOTS) -> float:
    """The lab's arrival rate: `load` × capacity (labs.runs.arrival_rate)."""
    return arrival_rate(load, capacity(step_model, slots))


def wait_policy(wait_ms: float, slots: int = SLOTS) -> SchedulerPolicy:
    return SchedulerPolicy(mode="static", max_num_seqs=slots, max_wait_ms=float(wait_ms))


def settings(waits=WAITS_MS, repeats: int = REPEATS) -> list[tuple[float, int]]:
    """Every (max_wait_ms, seed) run."""
    return [(float(w), seed) for w in waits for seed in range(repeats)]


def spec_at(rate: float, seed: int = 0) -> WorkloadSpec:
    return replace(SPEC, rate=float(rate), seed=seed)


def wait_runs(model, rate: float, waits=WAITS_MS, slots: int = SLOTS, repeats: int = REPEATS, progress=None,
              refresh: bool = False, peek: bool = False):
    """[((max_wait_ms, seed), RunResult, was_cached)] for every wait and seed, arrivals at `rate`."""
    return run_each(settings(waits, repeats),
                    lambda ws, p: single_run(model, wait_policy(ws[0], slots), spec_at(rate, ws[1]), p,
                                             label=f"max_wait_ms={ws[0]:g}, seed {ws[1]}", refresh=refresh,
                                             peek=peek),
                    progress, describe=lambda ws: f"max_wait_ms={ws[0]:g} (run {ws[1] + 1} of {repeats})")


def simulated_wait_runs(step_model, rate: float, waits=WAITS_MS, slots: int = SLOTS, repeats: int = REPEATS):
    """wait_runs on the simulator (labs.runs.simulated_run): the same runs, in milliseconds."""
    return [(ws, simulated_run(step_model, wait_policy(ws[0], slots), spec_at(rate, ws[1])), False)
            for ws in settings(waits, repeats)]


def estimate_s(model, rate: float, waits=WAITS_MS, slots: int = SLOTS, repeats: int = REPEATS) -> tuple[float, MachineSpeed]:
    return estimate(model, [(wait_policy(w, slots), [Part(spec_at(rate, seed))])
                            for w, seed in settings(waits, repeats)])


def run_rows(runs) -> pd.DataFrame:
    """One row per run: TTFT, the mean batch (sequences per step), output tokens per second of
    engine work (busy_tok_s: the batching efficiency) and per second of the whole run."""
    rows = []
    for (wait, seed), res, _ in runs:
        _, steps = frames(res)
        s = res.summary
        busy = s["busy_s"]
        rows.append({"max_wait_ms": wait, "seed": seed, "ttft_p50_s": s["ttft_s"]["p50"],
                     "ttft_p95_s": s["ttft_s"]["p95"], "mean_batch": float(member_counts(steps).mean()),
                     "busy_tok_s": s["output_tokens"] / busy if busy > 0 else float("nan"),
                     "output_tok_s": s["output_throughput_tok_s"]})
    return pd.DataFrame(rows)


def wait_table(runs) -> pd.DataFrame:
    """One row per max_wait_ms: the mean of its runs, with each column's _lo / _hi range."""
    return spread(run_rows(runs), "max_wait_ms", COLUMNS)


def _moved(table: pd.DataFrame, col: str) -> int:
    """+1, -1 or 0: how `col` moved from the first wait to the last (within CHANGE: 0)."""
    first, last = table.iloc[0][col], table.iloc[-1][col]
    change = last / first - 1 if first > 0 else 0.0
    return 1 if change > CHANGE else -1 if change < -CHANGE else 0


def outcome(table: pd.DataFrame) -> str:
    """What raising max_wait_ms from the first to the last setting did to the median TTFT and to
    the tokens delivered per second, as one of OUTCOMES."""
    ttft, delivered = _moved(table, "ttft_p50_s"), _moved(table, "output_tok_s")
    if ttft <= 0:
        return OUTCOMES[3]
    return OUTCOMES[0] if delivered > 0 else OUTCOMES[1] if delivered == 0 else OUTCOMES[2]


def waiting_verdict(table: pd.DataFrame, slots: int = SLOTS) -> claims.Verdict:
    """The claim `waiting_to_batch`: a longer wait raises busy tok/s, leaves delivered tok/s about
    the same, and raises TTFT. `slots`: the runs' max_num_seqs (what a full batch holds)."""
    if len(table) < 2:
        return claims.judge("waiting_to_batch", float("nan"), "", "", "it compares two waits or more.")
    first, last = table.iloc[0], table.iloc[-1]
    busy = claims.ratio(last.busy_tok_s, first.busy_tok_s)
    numbers = (f"From max_wait_ms {first.max_wait_ms:g} to {last.max_wait_ms:g}: mean batch {first.mean_batch:.1f} → "
               f"{last.mean_batch:.1f}, tokens per second of engine work {first.busy_tok_s:.0f} → "
               f"{last.busy_tok_s:.0f} (×{busy:.2f}), tokens delivered per second {first.output_tok_s:.0f} → "
               f"{last.output_tok_s:.0f}, p50 TTFT {first.ttft_p50_s:.2f} → {last.ttft_p50_s:.2f} s.")
    ttft_up, delivered = _moved(table, "ttft_p50_s") > 0, _moved(table, "output_tok_s")
    if busy < claims.CLAIMS["waiting_to_batch"].threshold:
        why = (f" Batches were already nearly full ({first.mean_batch:.1f} of {slots}) without waiting, so the wait "
               "changes little." if first.mean_batch >= NEARLY_FULL * slots else
               f" The wait did not fill the batches here ({last.mean_batch:.1f} of {slots} at the longest).")
    elif not ttft_up:
        why = " Fuller batches made each step's work cheaper, and here TTFT did not grow with the wait."
    elif delivered > 0:
        why = (" The engine delivered more tokens per second as well: with the shortest wait's small batches it fell "
               "behind the arrivals, and fuller batches let it keep up, so here efficiency was throughput.")
    else:
        why = (" Delivered tokens per second fell: the whole run took longer, since every batch, the last one "
               "too, waited to fill before it started.")
    noisy = None
    if busy < 1 and last.mean_batch >= 1.5 * first.mean_batch:
        noisy = (numbers + " The batches filled, yet each second of work made fewer tokens: a fuller step is never "
                 "slower per token, so the machine ran slower during the later runs (a busy machine): run again.")
    return claims.judge("waiting_to_batch", busy,
                        numbers + " Waiting bought efficiency (fuller, cheaper-per-token steps, room for more "
                        "traffic), not delivered throughput, and every request paid for it in TTFT.",
                        numbers + why, noisy, extra_test=ttft_up and delivered == 0)


def ttft_and_throughput(table: pd.DataFrame, sim: pd.DataFrame | None = None,
                        sim_name: str = "simulated") -> go.Figure:
    """p50 TTFT (left axis) and tokens per second of engine work (right axis) against max_wait_ms;
    `sim`, a wait_table from the simulator, as dotted lines beside (or, alone, instead of) the real one,
    `sim_name` (which step model) said once in the subtitle: in each legend entry it ran off the chart."""
    points = ("" if is_empty(table) else "Each point is the mean of its runs (bars: lowest to highest run). ")
    texts = ("Waiting to fill a batch: TTFT, work rate and delivered rate",
             points + "Left axis: p50 TTFT. Right axis: tokens per second of engine work and tokens delivered per "
             "second. Good: the shortest wait that gives the throughput you need."
             + ("" if is_empty(sim) else f" Dotted: {sim_name}."),
             "max_wait_ms (how long the oldest request may wait)", "p50 TTFT (s)")
    if is_empty(table) and is_empty(sim):
        return go.Figure(empty_figure(*texts))
    traces = []
    if not is_empty(sim):
        traces += [
            go.Scatter(name="p50 TTFT, simulated", x=sim["max_wait_ms"], y=sim["ttft_p50_s"], mode="lines",
                       line=dict(color=COLORS["p95"], width=2, dash="dot"),
                       hovertemplate="wait %{x:g} ms: simulated p50 TTFT %{y:.2f} s<extra></extra>"),
            go.Scatter(name="tokens per second of engine work, simulated", x=sim["max_wait_ms"],
                       y=sim["busy_tok_s"], mode="lines", yaxis="y2",
                       line=dict(color=COLORS["tokens"], width=2, dash="dot"),
                       hovertemplate="wait %{x:g} ms: simulated %{y:.0f} tok/s while busy<extra></extra>"),
            go.Scatter(name="tokens per second delivered, simulated", x=sim["max_wait_ms"],
                       y=sim["output_tok_s"], mode="lines", yaxis="y2",
                       line=dict(color=COLORS["goodput"], width=2, dash="dot"),
                       hovertemplate="wait %{x:g} ms: simulated %{y:.0f} tok/s delivered<extra></extra>"),
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
            go.Scatter(name="▲ tokens per second delivered", x=x, y=table["output_tok_s"], mode="lines+markers",
                       yaxis="y2", marker=dict(symbol="triangle-up", size=10), line=dict(color=COLORS["goodput"], width=2.5),
                       error_y=error_bars(table, "output_tok_s"),
                       hovertemplate="wait %{x:g} ms: %{y:.0f} tok/s delivered<extra></extra>"),
        ]
    return go.Figure(data=traces, layout=layout(
        *texts, yaxis=dict(rangemode="tozero"),
        yaxis2=dict(title=dict(text="output tokens / s"), overlaying="y", side="right", tickmode="auto",
                    rangemode="tozero", showgrid=False),
        margin=dict(l=60, r=60, t=80, b=50)))
