"""The tail: two tenants, one steady and one bursty, a share of long prompts; percentile tables
of one run, for every request and per group (prompt length, tenant)."""
from __future__ import annotations

import math

import pandas as pd

from analysis.frame_metrics import finished
from engine.config import SchedulerPolicy
from engine.metrics import PERCENTILES, percentile
from engine.workload import LengthDist, WorkloadSpec
from labs.part import Part
from labs.runs import estimate, mix_run, simulated_mix_run

REQUESTS = 48
RATE = 5.0
SHORT_PROMPT = LengthDist("uniform", 32, 128)
LONG_PROMPT = LengthDist("uniform", 768, 1024)
OUTPUT = LengthDist("uniform", 16, 48)
POLICY = SchedulerPolicy(max_num_seqs=16)
MIN_TAIL_SAMPLES = 100   # below this many requests in a group, its p99 is little more than its largest value
PROMPT_BUCKETS = [(0, 128, "≤128 tokens"), (129, 512, "129–512 tokens"), (513, 10 ** 9, ">512 tokens")]


def tail_parts(long_share: float = 0.1, bursty: bool = True, seed: int = 0) -> list[Part]:
    """Two tenants sending the same mix of prompts: "steady" (Poisson) and "bursty" (bursts with
    quiet gaps between). `long_share` of each tenant's requests carry a long prompt."""
    out = []
    per_tenant = REQUESTS // 2
    n_long = round(per_tenant * long_share)
    rate = RATE / 2
    for t, (tenant, burst) in enumerate((("steady", 1.0), ("bursty", 3.0 if bursty else 1.0))):
        for k, (n, prompt, kind) in enumerate(((per_tenant - n_long, SHORT_PROMPT, "s"), (n_long, LONG_PROMPT, "l"))):
            if n:
                out.append(Part(WorkloadSpec(num_requests=n, rate=rate * n / per_tenant, burstiness=burst,
                                             **prompt.as_fields("prompt"), **OUTPUT.as_fields("output"),
                                             seed=seed + 10 * t + k, id_prefix=f"{tenant}-{kind}"),
                                tenant=tenant, priority=t))
    return out


def tail_run(model, long_share: float = 0.1, bursty: bool = True, seed: int = 0, progress=None,
             refresh: bool = False, peek: bool = False):
    return mix_run(model, POLICY, tail_parts(long_share, bursty, seed), progress,
                   label=f"long share {long_share:.0%}", refresh=refresh, peek=peek)


def simulated_tail_run(step_model, long_share: float = 0.1, bursty: bool = True, seed: int = 0):
    """tail_run on the simulator: (RunResult, False), in milliseconds."""
    return simulated_mix_run(step_model, POLICY, tail_parts(long_share, bursty, seed),
                             label=f"long share {long_share:.0%}, simulated"), False


def estimate_s(model, long_share: float = 0.1, bursty: bool = True, seed: int = 0) -> tuple[float, bool]:
    return estimate(model, [(POLICY, tail_parts(long_share, bursty, seed))])


def tail_trust(n: int, q: float = 99) -> str:
    """How far a group's p`q` can be trusted with `n` samples: the share of samples above it is
    1 - q/100, so with fewer than MIN_TAIL_SAMPLES it rests on one or two values (or none)."""
    above = n * (1 - q / 100)
    if n >= MIN_TAIL_SAMPLES:
        return f"n = {n}: about {above:.0f} values above p{q:g}"
    return f"⚠ only {n} samples: p{q:g} rests on {above:.1f} values above it (≈ the largest)"


def prompt_bucket(prompt_tokens) -> pd.Series:
    p = pd.to_numeric(pd.Series(prompt_tokens), errors="coerce")
    out = pd.Series("", index=p.index, dtype=object)
    for lo, hi, name in PROMPT_BUCKETS:
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
