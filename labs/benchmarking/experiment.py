"""Benchmarking honestly: one engine under closed load and under open load at the same throughput, the
first requests of a run (warm-up), and how far a p99 moves between repeats of one setting.

The pair: a closed loop of C clients (engine.runs.closed_loop: each sends its next request when its last
one ends) measures a throughput X; then the same requests arrive as open load, Poisson at rate X, so
the server's slowness no longer slows the arrivals. Both runs leave out their first requests (warm-up).
In the closed loop the engine never holds more than C requests: the requests an open user would have
sent meanwhile wait in the clients (the hidden backlog, counted against the open run's own schedule).

The repeats: open load at the same rate, with other seeds; the p99 TTFT of each repeat. On the
simulator also SIM_REPEATS repeats at a few requests and at many, to show how a p99 of few requests
scatters.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.frame_metrics import finished
from analysis.style import COLORS, MODEL_COLOR, empty_figure, layout
from engine.core.config import SchedulerPolicy
from engine.core.metrics import percentile
from engine.runs.results import RunResult
from engine.runs.workload import WorkloadSpec
from course import claims
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import arrival_rate, closed_run, estimate, frames, simulated_closed_run, simulated_run, single_run

# The closed loop ignores the arrival times its spec draws; at burstiness 1 each gap takes one draw
# of the generator, so the open run at any rate draws these very lengths and prompts.
SPEC = WorkloadSpec(num_requests=48, rate=1.0, prompt_kind="uniform", prompt_lo=16, prompt_hi=64,
                    output_kind="uniform", output_lo=8, output_hi=24)
POLICY = SchedulerPolicy(max_num_seqs=8)
CONCURRENCIES = (1, 2, 4, 6, 8)
NEAR = 6                    # clients that keep the engine near capacity (of POLICY.max_num_seqs slots)
LIGHT = 1                   # one client: a light load
REAL_PER_CLIENT = 8         # a real closed run holds this many requests per client ...
REAL_MIN = 16               # ... and at least this many
SIM_REQUESTS = 400
WARMUP = 4                  # the first requests of every run (at least one per client): left out of the percentiles
REPEATS = 3                 # real open runs at the matched rate (the first is the pair's own)
SIM_REPEATS = 8
FEW, MANY = 100, 1000       # requests per simulated repeat: a p99 resting on one request, and on ten
MIN_JUDGED = 12             # fewer counted requests than this in either run cannot give a p95
MATCH_TOLERANCE = 0.25      # the open run's drawn arrival rate this far from X: the pair is not matched


def near_capacity(concurrency: int) -> bool:
    """Whether this many clients load the engine near its capacity: what the claim is about."""
    return concurrency >= NEAR


def requests_for(concurrency: int, simulated: bool = False) -> int:
    return SIM_REQUESTS if simulated else max(REAL_MIN, REAL_PER_CLIENT * concurrency)


def closed_spec(concurrency: int, simulated: bool = False, seed: int = 0) -> WorkloadSpec:
    return replace(SPEC, num_requests=requests_for(concurrency, simulated), seed=seed)


def open_spec(concurrency: int, rate: float, simulated: bool = False, seed: int = 0,
              requests: int | None = None) -> WorkloadSpec:
    """The closed spec's requests as open load: Poisson at `rate` (the closed loop's throughput)."""
    n = requests if requests is not None else requests_for(concurrency, simulated)
    return replace(SPEC, num_requests=n, rate=rate, seed=seed)


# ----------------------------------------------------------------------------- measures of one run


def warmup_count(concurrency: int) -> int:
    """How many requests of a run are warm-up: WARMUP, or one per client if there are more clients (the
    closed loop sends one per client at once, and all of them ride the first, cold steps). Both runs of
    a pair leave out the same number."""
    return max(WARMUP, concurrency)


def counted(result: RunResult, concurrency: int) -> pd.DataFrame:
    """The finished requests past the warm-up ones, in arrival order."""
    reqs = finished(frames(result)[0]).copy()
    reqs["arrival_s"] = pd.to_numeric(reqs["arrival_s"])
    return reqs.sort_values("arrival_s", kind="stable").iloc[warmup_count(concurrency):]


def throughput(result: RunResult, concurrency: int) -> float:
    """Finished requests per second from the first counted arrival to the last finish."""
    reqs = counted(result, concurrency)
    if len(reqs) < 2:
        return math.nan
    span = float(pd.to_numeric(reqs["finish_s"]).max() - reqs["arrival_s"].min())
    return len(reqs) / span if span > 0 else math.nan


def run_numbers(result: RunResult, concurrency: int) -> dict:
    """TTFT percentiles, throughput and the engine's largest waiting queue of one run (warm-up left out)."""
    reqs, steps = counted(result, concurrency), frames(result)[1]
    ttft = pd.to_numeric(reqs["ttft_s"]).to_numpy(float)
    arr = reqs["arrival_s"].to_numpy(float)
    return {"requests": len(reqs), "throughput": throughput(result, concurrency),
            "drawn_rate": (len(arr) - 1) / (arr.max() - arr.min()) if len(arr) > 1 and np.ptp(arr) > 0 else math.nan,
            "ttft_p50": percentile(ttft, 50), "ttft_p95": percentile(ttft, 95), "ttft_p99": percentile(ttft, 99),
            "waiting_max": int(pd.to_numeric(steps["waiting"]).max()) if len(steps) else 0}


def warmup_numbers(result: RunResult, concurrency: int) -> dict:
    """The warm-up requests' mean TTFT against the rest's, and the first step's time against the median
    step's (a freshly loaded model's first steps pay for first-touch memory and caches)."""
    n = warmup_count(concurrency)
    reqs, steps = finished(frames(result)[0]), frames(result)[1]
    reqs = reqs.assign(arrival_s=pd.to_numeric(reqs["arrival_s"])).sort_values("arrival_s", kind="stable")
    ttft = pd.to_numeric(reqs["ttft_s"]).to_numpy(float)
    dur = (pd.to_numeric(steps["t_end_s"]) - pd.to_numeric(steps["t_start_s"])).to_numpy(float)
    return {"first_ttft": float(np.mean(ttft[:n])) if len(ttft) else math.nan,
            "rest_ttft": float(np.mean(ttft[n:])) if len(ttft) > n else math.nan,
            "first_step_ms": 1000 * float(dur[0]) if len(dur) else math.nan,
            "median_step_ms": 1000 * float(np.median(dur)) if len(dur) else math.nan}


def hidden_backlog(closed: RunResult, open_: RunResult) -> pd.DataFrame:
    """The closed loop's queue in its clients: at each of its steps' ends, how many requests the open
    run's schedule had sent by then that the closed loop had not (0 when it ran ahead)."""
    c_req, c_steps = frames(closed)
    sent = np.sort(pd.to_numeric(c_req["arrival_s"]).to_numpy(float))
    planned = np.sort(pd.to_numeric(frames(open_)[0]["arrival_s"]).to_numpy(float))
    if not len(sent) or not len(planned) or not len(c_steps):
        return pd.DataFrame(columns=["t_s", "backlog"])
    t = pd.to_numeric(c_steps["t_end_s"]).to_numpy(float) - sent[0]
    behind = np.searchsorted(planned - planned[0], t, side="right") - np.searchsorted(sent - sent[0], t, side="right")
    return pd.DataFrame({"t_s": t, "backlog": np.maximum(behind, 0)})


def queue_over_time(result: RunResult) -> pd.DataFrame:
    """The engine's own waiting queue at each step's end, from the run's first arrival."""
    reqs, steps = frames(result)
    if not len(steps):
        return pd.DataFrame(columns=["t_s", "waiting"])
    first = float(pd.to_numeric(reqs["arrival_s"]).min())
    return pd.DataFrame({"t_s": pd.to_numeric(steps["t_end_s"]) - first, "waiting": pd.to_numeric(steps["waiting"])})


# ----------------------------------------------------------------------------- the pair and the repeats


def matched_pair(model, concurrency: int, progress=None, refresh: bool = False, peek: bool = False):
    """(closed result, open result, X): the closed loop, then open load at its throughput X, on the
    real engine; None when peeking finds either not stored."""
    half = progress and (lambda f, t: progress(0.5 * f, t))
    got = closed_run(model, POLICY, closed_spec(concurrency), concurrency, half, label=f"closed loop, {concurrency} clients",
                     refresh=refresh, peek=peek)
    if got is None:
        return None
    x = arrival_rate(1.0, throughput(got[0], concurrency))
    rest = progress and (lambda f, t: progress(0.5 + 0.5 * f, t))
    opened = single_run(model, POLICY, open_spec(concurrency, x), rest, label=f"open load at {x:g} req/s",
                        refresh=refresh, peek=peek)
    return None if opened is None else (got[0], opened[0], x)


def repeats(model, concurrency: int, rate: float, first: RunResult, progress=None, refresh: bool = False,
            peek: bool = False):
    """REPEATS open runs at `rate`: the pair's own open run `first` (seed 0), then seeds 1, 2, ...: [RunResult]."""
    out = [first]
    for seed in range(1, REPEATS):
        sub = progress and (lambda f, t, seed=seed: progress((seed - 1 + f) / (REPEATS - 1), f"repeat {seed + 1}: {t}"))
        got = single_run(model, POLICY, open_spec(concurrency, rate, seed=seed), sub,
                         label=f"open load at {rate:g} req/s, seed {seed}", refresh=refresh, peek=peek)
        if got is None:
            return None
        out.append(got[0])
    return out


def measure(model, concurrency: int, progress=None, refresh: bool = False, peek: bool = False):
    """The matched pair, then the repeats: (closed, open, X, [repeats]), or None if not all stored."""
    pair = matched_pair(model, concurrency, progress and (lambda f, t: progress(0.5 * f, t)), refresh, peek)
    if pair is None:
        return None
    reps = repeats(model, concurrency, pair[2], pair[1], progress and (lambda f, t: progress(0.5 + 0.5 * f, t)),
                   refresh, peek)
    return None if reps is None else (*pair, reps)


def simulated(step_model, concurrency: int):
    """measure() on the simulator: SIM_REQUESTS per run, SIM_REPEATS repeats of FEW and of MANY."""
    closed = simulated_closed_run(step_model, POLICY, closed_spec(concurrency, True), concurrency,
                                  label=f"closed loop, {concurrency} clients, simulated")
    x = arrival_rate(1.0, throughput(closed, concurrency))
    opened = simulated_run(step_model, POLICY, open_spec(concurrency, x, True), label="open load, simulated")
    return closed, opened, x


def simulated_p99s(step_model, rate: float, concurrency: int) -> pd.DataFrame:
    """p99 TTFT of SIM_REPEATS open runs at `rate`, each of FEW and of MANY requests (simulated); warm-up
    left out as in the pair of `concurrency` clients."""
    rows = []
    for n in (FEW, MANY):
        for seed in range(SIM_REPEATS):
            res = simulated_run(step_model, POLICY, open_spec(concurrency, rate, True, seed, requests=n))
            rows.append({"requests": n, "seed": seed, "p99": run_numbers(res, concurrency)["ttft_p99"]})
    return pd.DataFrame(rows)


def p99_table(results: list[RunResult], concurrency: int) -> pd.DataFrame:
    return pd.DataFrame([{"repeat": i + 1, "seed": i, **run_numbers(r, concurrency)} for i, r in enumerate(results)])


def spread(p99s) -> float:
    """Largest ÷ smallest p99 over repeats."""
    v = np.asarray(list(p99s), float)
    v = v[np.isfinite(v)]
    return float(v.max() / v.min()) if len(v) > 1 and v.min() > 0 else math.nan


def estimate_s(model, concurrency: int, rate: float | None = None) -> tuple[float, MachineSpeed]:
    """(seconds, the step model that says so): the closed loop as a run of every request at once on
    `concurrency` slots, then the open runs (at the step model's own throughput until X is measured)."""
    closed = replace(closed_spec(concurrency), rate=0)
    seconds, speed = estimate(model, [(replace(POLICY, max_num_seqs=concurrency), [Part(closed)])])
    x = rate if rate is not None else (closed.num_requests / seconds if seconds > 0 else 1.0)
    more, _ = estimate(model, [(POLICY, [Part(open_spec(concurrency, x, seed=s))]) for s in range(REPEATS)])   # pair's + repeats
    return seconds + more, speed


# ----------------------------------------------------------------------------- the verdict


SAME_SPEED = 0.30           # two runs' like steps this close in time: the machine ran both at one speed
MIN_LIKE_STEPS = 5          # steps of one batch size each run needs before their times are compared


def decode_step_ms(result: RunResult) -> pd.DataFrame:
    """Decode-only steps by batch size: their count and median time (ms)."""
    rows = [(len(s["members"]), 1000 * (float(s["t_end_s"]) - float(s["t_start_s"])))
            for s in result.steps if s["members"] and int(s["prefill_tokens"]) == 0]
    df = pd.DataFrame(rows, columns=["batch", "ms"])
    return df.groupby("batch")["ms"].agg(["count", "median"])


def speed_check(closed: RunResult, opened: RunResult) -> str | None:
    """Whether the machine ran both runs at one speed: decode steps of the same batch size, the size both
    runs have most of, timed in each. On a shared machine the load can change between two runs; then
    their TTFTs differ by the machine as well as by the load, and the words say so. None where they agree
    within SAME_SPEED (or no batch size has MIN_LIKE_STEPS steps in both)."""
    a, b = decode_step_ms(closed), decode_step_ms(opened)
    both = a.join(b, lsuffix="_closed", rsuffix="_open", how="inner")
    both = both[(both["count_closed"] >= MIN_LIKE_STEPS) & (both["count_open"] >= MIN_LIKE_STEPS)]
    if not len(both):
        return None
    n = int(both[["count_closed", "count_open"]].min(axis=1).idxmax())
    ratio = both.loc[n, "median_open"] / both.loc[n, "median_closed"]
    if abs(ratio - 1) <= SAME_SPEED:
        return None
    return (f"A decode step of {n} requests took {both.loc[n, 'median_closed']:.0f} ms (median) in the closed loop "
            f"and {both.loc[n, 'median_open']:.0f} ms under open load: ×{ratio:.2f}, more than {SAME_SPEED:.0%} apart, "
            "so the machine's own load changed between the runs and the TTFTs differ by that too. Measure again.")


def hidden_queue_verdict(closed: dict, opened: dict, x: float, concurrency: int,
                         strayed: str | None = None) -> claims.Verdict:
    """The claim `closed_loop_hides_queue`: open load's p95 TTFT ÷ the closed loop's, at X. `strayed`:
    speed_check's words where the machine ran the two runs at different speeds (undecided then)."""
    cid = "closed_loop_hides_queue"
    ratio = claims.ratio(opened["ttft_p95"], closed["ttft_p95"])
    few = min(closed["requests"], opened["requests"])
    if few < MIN_JUDGED:
        return claims.judge(cid, ratio, "", "", f"a run counts only {few} requests after its {warmup_count(concurrency)} warm-up ones; "
                            f"a p95 needs {MIN_JUDGED} or more.")
    if strayed:
        return claims.judge(cid, ratio, "", "", f"open load's p95 TTFT was ×{ratio:.1f} the closed loop's, but: {strayed}")
    if abs(opened["drawn_rate"] / x - 1) > MATCH_TOLERANCE:
        return claims.judge(cid, ratio, "", "", f"the open run's random arrivals came at {opened['drawn_rate']:.2f} "
                            f"req/s against the {x:.2f} the closed loop served: over {MATCH_TOLERANCE:.0%} apart, so "
                            "the two loads are not matched. Another seed or more requests would match them.")
    numbers = (f"At {x:.2f} req/s, the closed loop of {concurrency} client{'' if concurrency == 1 else 's'} reported p95 TTFT "
               f"{closed['ttft_p95']:.3g} s and open load {opened['ttft_p95']:.3g} s: ×{ratio:.1f}. ")
    shown = numbers + (f"The engine's waiting queue peaked at {closed['waiting_max']} in the closed loop and "
                       f"{opened['waiting_max']} under open load: in the closed loop the requests that would have "
                       "waited were held back in the clients, where no server metric sees them.")
    not_shown = numbers + ("The two agree this closely: " + (
        "the load is light, so few open arrivals find the engine busy." if not near_capacity(concurrency) else
        f"even near capacity the open run's queue stayed short (it peaked at {opened['waiting_max']}); a lucky "
        "seed or a short run can hide it."))
    return claims.judge(cid, ratio, shown, not_shown)


# ----------------------------------------------------------------------------- figures


def queues_figure(closed: RunResult, opened: RunResult, source: str) -> go.Figure:
    """The engine's waiting queue in each run, and the closed loop's hidden backlog in its clients."""
    texts = ("Where the queue lives",
             f"{source.capitalize()}. Open load queues inside the engine; the closed loop's engine barely queues, "
             "while its clients fall behind the open schedule. Good: a benchmark that shows the queue.",
             "seconds since the first request", "requests")
    o, c, b = queue_over_time(opened), queue_over_time(closed), hidden_backlog(closed, opened)
    if not len(o) or not len(c):
        return go.Figure(empty_figure(*texts))
    traces = [
        go.Scatter(name="open load: waiting in the engine", x=o["t_s"], y=o["waiting"], mode="lines",
                   line=dict(color=COLORS["waiting"], width=2, shape="hv")),
        go.Scatter(name="closed loop: waiting in the engine", x=c["t_s"], y=c["waiting"], mode="lines",
                   line=dict(color=COLORS["running"], width=2, shape="hv")),
        go.Scatter(name="closed loop: behind the open schedule (in the clients)", x=b["t_s"], y=b["backlog"],
                   mode="lines", line=dict(color=MODEL_COLOR, width=1.5, dash="dot", shape="hv")),
    ]
    return go.Figure(data=traces, layout=layout(*texts))


def p99_figure(sim: pd.DataFrame, real: pd.DataFrame | None = None) -> go.Figure:
    """p99 TTFT of each repeat: simulated at FEW and MANY requests, and the real repeats."""
    texts = ("The p99 of each repeat of one setting",
             "Each dot is one run's p99 TTFT. Good: dots close together (a p99 you can quote).",
             "run", "p99 TTFT (s)")
    if sim is None or not len(sim):
        return go.Figure(empty_figure(*texts))
    traces = [go.Scatter(name=f"simulated, {n:,} requests a run", x=[f"simulated, {n:,} requests"] * len(g),
                         y=g["p99"], mode="markers", marker=dict(size=10, opacity=0.7))
              for n, g in sim.groupby("requests")]
    if real is not None and len(real):
        traces.append(go.Scatter(name=f"measured, {int(real['requests'].iloc[0]):,} requests a run",
                                 x=[f"measured, {int(real['requests'].iloc[0]):,} requests"] * len(real),
                                 y=real["ttft_p99"], mode="markers", marker=dict(size=12, symbol="diamond",
                                                                                 color=COLORS["waiting"])))
    return go.Figure(data=traces, layout=layout(*texts))
