"""The tail: two tenants, one steady and one bursty, a share of long prompts; percentile tables
of one run, for every request and per group (prompt length, tenant, time window). The arrival
rate is LOAD of the capacity this machine's step model predicts for the mix, so the bursts
queue on any machine; the simulator runs SIM_REQUESTS, the real engine REQUESTS."""
from __future__ import annotations

import math

import pandas as pd

from analysis.frame_metrics import finished
from course import claims
from engine.core.config import SchedulerPolicy
from engine.core.metrics import PERCENTILES, percentile
from engine.runs.workload import LengthDist, WorkloadSpec
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import arrival_rate, estimate, mix_run, simulated_mix_run

REQUESTS = 120
SIM_REQUESTS = 600
LOAD = 0.6
WINDOWS = 8              # time windows the tail is split into
MIN_GROUP = 10           # a group's p99 is judged only with this many requests or more
ALIKE = 1.5              # p99s (or p95s) within this ratio of each other count as alike
SHORT_PROMPT = LengthDist("uniform", 32, 128)
LONG_PROMPT = LengthDist("uniform", 768, 1024)
OUTPUT = LengthDist("uniform", 16, 48)
POLICY = SchedulerPolicy(max_num_seqs=16)
MIN_TAIL_SAMPLES = 100   # below this many requests in a group, its p99 is little more than its largest value
PROMPT_BUCKETS = [(0, 128, "≤128 tokens"), (129, 512, "129–512 tokens"), (513, 10 ** 9, ">512 tokens")]


def capacity(step_model, long_share: float = 0.1) -> float:
    """Requests per second the engine finishes of this mix with its queue never empty, as the step
    model predicts it (the mix arriving at once)."""
    res = simulated_mix_run(step_model, POLICY, tail_parts(long_share, False, 0, rate=0, requests=96))
    return float(res.summary["request_throughput_req_s"])


def rate_for(step_model, long_share: float = 0.1, load: float = LOAD) -> float:
    return arrival_rate(load, capacity(step_model, long_share))


def tail_parts(long_share: float = 0.1, bursty: bool = True, seed: int = 0, rate: float = 5.0,
               requests: int = REQUESTS) -> list[Part]:
    """Two tenants sending the same mix of prompts at `rate` in all: "steady" (Poisson) and "bursty"
    (bursts with quiet gaps between). `long_share` of each tenant's requests carry a long prompt."""
    out = []
    per_tenant = requests // 2
    n_long = round(per_tenant * long_share)
    rate = rate / 2
    for t, (tenant, burst) in enumerate((("steady", 1.0), ("bursty", 3.0 if bursty else 1.0))):
        for k, (n, prompt, kind) in enumerate(((per_tenant - n_long, SHORT_PROMPT, "s"), (n_long, LONG_PROMPT, "l"))):
            if n:
                out.append(Part(WorkloadSpec(num_requests=n, rate=rate * n / per_tenant, burstiness=burst,
                                             **prompt.as_fields("prompt"), **OUTPUT.as_fields("output"),
                                             seed=seed + 10 * t + k, id_prefix=f"{tenant}-{kind}"),
                                tenant=tenant, priority=t))
    return out


def tail_run(model, rate: float, long_share: float = 0.1, bursty: bool = True, seed: int = 0, progress=None,
             refresh: bool = False, peek: bool = False):
    return mix_run(model, POLICY, tail_parts(long_share, bursty, seed, rate), progress,
                   label=f"long share {long_share:.0%}", refresh=refresh, peek=peek)


def simulated_tail_run(step_model, rate: float, long_share: float = 0.1, bursty: bool = True, seed: int = 0):
    """tail_run on the simulator, SIM_REQUESTS of them: (RunResult, False), in milliseconds."""
    return simulated_mix_run(step_model, POLICY, tail_parts(long_share, bursty, seed, rate, SIM_REQUESTS),
                             label=f"long share {long_share:.0%}, simulated"), False


def estimate_s(model, rate: float, long_share: float = 0.1, bursty: bool = True, seed: int = 0) -> tuple[float, MachineSpeed]:
    return estimate(model, [(POLICY, tail_parts(long_share, bursty, seed, rate))])


def tail_trust(n: int, q: float = 99) -> str:
    """How far a group's p`q` can be trusted with `n` samples: the share of samples above it is
    1 - q/100, so with fewer than MIN_TAIL_SAMPLES it rests on one or two values (or none)."""
    above = n * (1 - q / 100)
    if n >= MIN_TAIL_SAMPLES:
        return f"n = {n}: about {above:.0f} values above p{q:g}"
    return f"⚠ only {n} samples: p{q:g} rests on {above:.1f} values above it (≈ the largest)"


def prompt_bucket(prompt_tokens, buckets=PROMPT_BUCKETS) -> pd.Series:
    """Each prompt's bucket name from `buckets` [(lo, hi, name)], both ends counted in."""
    p = pd.to_numeric(pd.Series(prompt_tokens), errors="coerce")
    out = pd.Series("", index=p.index, dtype=object)
    for lo, hi, name in buckets:
        out[(p >= lo) & (p <= hi)] = name
    return out


def _group_rank(name: str):
    """Prompt-length buckets in size order; anything else alphabetically after them."""
    names = [b[2] for b in PROMPT_BUCKETS]
    return (names.index(name), "") if name in names else (len(names), name)


def percentile_table(requests: pd.DataFrame, metric: str, by: pd.Series | None = None,
                     scale: float = 1.0) -> pd.DataFrame:
    """n, mean, p50, p90, p95, p99 of a per-request metric, for every request and per group."""
    fin = finished(requests)
    values = pd.to_numeric(fin[metric], errors="coerce") * scale
    groups = [("all", values)]
    if by is not None:
        by = pd.Series(by, index=requests.index).loc[fin.index]
        groups += sorted(((str(k), v) for k, v in values.groupby(by, sort=True)), key=lambda g: _group_rank(g[0]))
    rows = []
    for name, v in groups:
        v = v.dropna().tolist()
        rows.append({"group": name, "n": len(v), "mean": sum(v) / len(v) if v else math.nan,
                     **{f"p{q}": percentile(v, q) for q in PERCENTILES}})
    return pd.DataFrame(rows)


def time_window(requests: pd.DataFrame, windows: int = WINDOWS) -> pd.Series:
    """Each request's arrival window: the run's arrivals cut into `windows` equal stretches of time."""
    arr = pd.to_numeric(requests["arrival_s"], errors="coerce")
    lo, hi = float(arr.min()), float(arr.max())
    width = (hi - lo) / windows if hi > lo else 1.0
    k = ((arr - lo) // width).clip(upper=windows - 1).fillna(0).astype(int)
    return k.map(lambda i: f"{i * width:.1f}–{(i + 1) * width:.1f} s")


TAIL_SHARE = 0.05        # "the tail": the slowest 5% of requests by TTFT


def has_a_cause(long_share: float, bursty: bool) -> bool:
    """Whether the workload holds a cause for `tail_has_a_cause` to find: long prompts or a bursty tenant."""
    return long_share > 0 or bursty


def cause_verdict(requests: pd.DataFrame) -> claims.Verdict:
    """The claim `tail_has_a_cause`: among the slowest TAIL_SHARE of requests by TTFT, the group (by
    prompt length or tenant; MIN_GROUP requests or more) most over-represented against its share of
    all requests: its lift = its share of the tail ÷ its share of the traffic. (Time windows have
    their own claim, window_verdict: with random arrivals some window always holds more of the tail.)"""
    fin = finished(requests)
    ttft = pd.to_numeric(fin["ttft_s"], errors="coerce")
    k = max(MIN_GROUP // 2, int(round(TAIL_SHARE * len(fin))))
    if len(fin) < 2 * MIN_GROUP:
        return claims.judge("tail_has_a_cause", math.nan, "", "",
                            f"{len(fin)} finished requests are too few to tell a tail from the rest.")
    slowest = ttft.nlargest(k).index
    best = None
    for split, by in (("prompt length", prompt_bucket(fin["prompt_tokens"])), ("tenant", fin["tenant"])):
        for name in sorted(set(by)):
            n = int((by == name).sum())
            if n < MIN_GROUP:
                continue
            in_tail = int((by.loc[slowest] == name).sum())
            lift = (in_tail / k) / (n / len(fin))
            if best is None or lift > best[0]:
                best = (lift, split, name, n, in_tail)
    if best is None:
        return claims.judge("tail_has_a_cause", math.nan, "", "", f"no group holds {MIN_GROUP} requests.")
    lift, split, name, n, in_tail = best
    numbers = (f"Of the {k} slowest requests by TTFT, {in_tail} are {split} {name}, which sends {n / len(fin):.0%} of "
               f"all requests: ×{lift:.1f} its share.")
    return claims.judge("tail_has_a_cause", lift, numbers + " The slow requests share that cause.",
                        numbers + " No group stands out this much: the slow requests here are spread over the groups.")


def window_verdict(requests: pd.DataFrame, windows: int = WINDOWS) -> claims.Verdict:
    """The claim `tail_by_window`: the worst arrival window's p95 TTFT against the median window's."""
    fin = finished(requests)
    by = time_window(fin, windows)
    p95 = {w: percentile(pd.to_numeric(g, errors="coerce").dropna().tolist(), 95)
           for w, g in fin["ttft_s"].groupby(by)}
    sizes = by.value_counts()
    if len(p95) < 3 or sizes.min() < 3:
        return claims.judge("tail_by_window", math.nan, "", "",
                            f"{len(fin)} requests make windows of {int(sizes.min()) if len(sizes) else 0} or fewer: "
                            "too few to compare windows.")
    values = pd.Series(p95)
    worst, median = values.idxmax(), float(values.median())
    r = claims.ratio(values[worst], median)
    numbers = (f"Cut into {len(values)} windows of arrival time, the worst ({worst}) has p95 TTFT {values[worst]:.2f} s "
               f"against a median window's {median:.2f} s (×{r:.1f}).")
    spread_words = (" The windows are alike: the tail is spread evenly over time here." if r < ALIKE else
                    " The worst window is worse, but not by that much: the tail gathers only a little in time here.")
    return claims.judge("tail_by_window", r, numbers + " The tail gathers where arrivals bunch up.",
                        numbers + spread_words)


def owner_words(table: pd.DataFrame, name: str, unit: str, fmt) -> str:
    """Whose tail it is, from a percentile_table split into groups: the group with the highest p99
    against the lowest, in words for each way it can come out (alike, or one group's; the worst of
    a few where a group is small). `fmt(value, unit)` writes a number as the page does."""
    groups = table.iloc[1:]
    if len(groups) < 2:
        return ""
    worst, best = groups.loc[groups["p99"].idxmax()], groups.loc[groups["p99"].idxmin()]
    r = round(claims.ratio(worst.p99, best.p99), 1)          # judged as shown
    numbers = (f"p99 {name} {fmt(worst.p99, unit)} for **{worst.group}** against {fmt(best.p99, unit)} for "
               f"**{best.group}** (×{r:.1f}), medians {fmt(worst.p50, unit)} and {fmt(best.p50, unit)}")
    few = f" From only {int(worst.n)} requests, that p99 is about their slowest one." \
        if worst.n < MIN_TAIL_SAMPLES else ""
    if not r >= ALIKE:
        medians = round(claims.ratio(worst.p50, best.p50), 1)
        typical = (f" The medians differ more (×{medians:.1f}): {worst.group} is slower for most of its requests, "
                   "not only in its tail." if medians >= ALIKE else "")
        return f"The groups' tails are alike here: {numbers}.{typical}{few}"
    return f"The tail belongs to **{worst.group}**: {numbers}.{few}"
