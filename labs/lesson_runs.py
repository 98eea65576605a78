"""The lesson labs' experiments: each lab's workload, its runs on the real engine, and the
figures it reads off them. No Streamlit here: the lab pages and `python -m tools.measure_all`
call the same functions, so the numbers in the lessons' notes are the numbers the pages show.

Every run is cached on disk per machine and settings (engine.experiments), so a second visit
is instant. Each `*_runs` / `measure_*` function takes `peek=True` to return only what is
already cached (None otherwise) without touching the model: a page can show stored results
at once and measure only when the learner presses its button.

`model` is a LoadedModel, or a `ModelRef` naming one: a ModelRef is enough to find cached
results (it fingerprints the machine exactly as the loaded model would); measuring needs
the real thing.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from engine import experiments
from engine.config import EngineConfig, SchedulerPolicy
from engine.experiments import RunResult
from engine.metrics import PERCENTILES
from engine.workload import LengthDist, WorkloadSpec

from analysis import frame_metrics, membership
from analysis.queueing import littles_law, mm1_time_in_system, time_averaged_from_steps


# ----------------------------------------------------------------------------- models and cache


@dataclass(frozen=True)
class ModelRef:
    """Stands in for a loaded model when only its cache fingerprint is needed."""
    name: str
    device: object
    dtype: object


def model_ref(name: str) -> ModelRef:
    """The fingerprint `load_model(name)` would have, without loading weights."""
    from engine.model import resolve_device, resolve_dtype
    dev = resolve_device("auto")
    return ModelRef(name, dev, resolve_dtype("auto", dev))


# A wrapper for every measurement: `run_guard(measure, refresh)` calls `measure(refresh)` and returns
# its (result, was_cached). None (the pages) just measures. `python -m tools.measure_all` sets one that
# waits for other processes to go quiet and measures again when they disturbed a run.
run_guard = None


def _guarded(measure, refresh: bool):
    return measure(refresh) if run_guard is None else run_guard(measure, refresh)


def _need_model(model):
    if isinstance(model, ModelRef):
        raise RuntimeError("measuring needs the loaded model, not a ModelRef")
    return model


def _json_path(kind: str, *parts) -> str:
    return os.path.join(experiments.cache_dir(), f"{kind}-{experiments._key(experiments.CACHE_VERSION, *parts)}.json")


def _store(path: str, data) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, default=str)
    os.replace(tmp, path)


def _load(path: str):
    with open(path) as f:
        return json.load(f)


def _cached(path: str, model, compute, refresh: bool, peek: bool, load=lambda data: data, dump=lambda result: result):
    """(result, was_cached): the JSON stored at `path`, or `compute(model)` stored there.

    With peek=True only the stored result, or None: the model is not touched. `load` / `dump`
    turn the stored JSON into the result and back (for a RunResult: RunResult(**data) / asdict).
    """
    if peek:
        return (load(_load(path)), True) if os.path.exists(path) and not refresh else None
    model = _need_model(model)

    def measure(again: bool):
        if os.path.exists(path) and not again:
            return load(_load(path)), True
        result = compute(model)
        _store(path, dump(result))
        return result, False
    return _guarded(measure, refresh)


def run_path(model, policy: SchedulerPolicy, spec: WorkloadSpec, config: EngineConfig | None = None) -> str:
    """Where experiments.cached_run stores this run (same key, same file)."""
    return _json_path("run", experiments.machine_fingerprint(model), policy.to_dict(), spec.to_dict(),
                      asdict(config or EngineConfig()))


def single_run(model, policy: SchedulerPolicy, spec: WorkloadSpec, progress=None, label: str = "",
               refresh: bool = False, peek: bool = False) -> tuple[RunResult, bool] | None:
    """experiments.cached_run, or with peek=True the stored result only (None if there is none)."""
    if peek:
        path = run_path(model, policy, spec)
        return (RunResult(**_load(path)), True) if os.path.exists(path) else None
    model = _need_model(model)
    return _guarded(lambda again: experiments.cached_run(model, policy, spec, progress=progress, label=label,
                                                         refresh=again), refresh)


@dataclass(frozen=True)
class Part:
    """One stream of a mixed workload: a WorkloadSpec, optionally relabelled.

    tenant: every request of this part belongs to this tenant (and gets `priority`);
    ttft_slo_s: this part's own TTFT target, which the `edf` order uses as its deadline.
    """
    spec: WorkloadSpec
    tenant: str | None = None
    priority: int | None = None
    ttft_slo_s: float | None = None

    def to_dict(self) -> dict:
        return {"spec": self.spec.to_dict(), "tenant": self.tenant, "priority": self.priority,
                "ttft_slo_s": self.ttft_slo_s}


def mix_run(model, policy: SchedulerPolicy, parts: list[Part], progress=None, label: str = "",
            refresh: bool = False, peek: bool = False) -> tuple[RunResult, bool] | None:
    """Several workload streams (different tenants, lengths, start times) through one engine run.

    Cached like experiments.cached_run, keyed by machine, policy and every part.
    """
    config = EngineConfig()
    path = _json_path("mix", experiments.machine_fingerprint(model), policy.to_dict(),
                      [p.to_dict() for p in parts], asdict(config))
    return _cached(path, model, lambda m: _run_parts(m, policy, parts, config, progress, label), refresh, peek,
                   load=lambda data: RunResult(**data), dump=asdict)


def _run_parts(model, policy, parts, config, progress, label) -> RunResult:
    from engine.engine import build_engine
    from engine.workload import PromptMaker, build_requests

    config = replace(config, kv_pool_tokens=max(config.kv_pool_tokens, policy.kv_capacity_tokens))
    engine = build_engine(config, policy, model)
    prompts = PromptMaker(model.tokenizer)
    for part in parts:
        for r in build_requests(part.spec, prompts):
            if part.tenant is not None:
                r.tenant = part.tenant
            if part.priority is not None:
                r.priority = part.priority
            r.ttft_slo_s = part.ttft_slo_s
            engine.submit(r)
    return experiments.run_to_end(engine, policy, progress, label)


def _sub(progress, i: int, n: int, what: str):
    """A progress callback for the i-th of n runs."""
    if progress is None:
        return None
    return lambda f, text: progress(min(1.0, (i + f) / n), f"{what}: {text}")


def frames(result: RunResult) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(requests, steps) DataFrames in the CLI's CSV formats."""
    return pd.DataFrame(result.requests), pd.DataFrame(result.steps)


def pct(values, q: float) -> float:
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna().to_numpy(dtype=float)
    return float(np.percentile(v, q)) if len(v) else math.nan


def finished(requests: pd.DataFrame) -> pd.DataFrame:
    return requests[requests["status"] == "finished"] if "status" in requests.columns else requests


# ----------------------------------------------------------------------------- 1. why batch

BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128]
SCALING_CONTEXT = 128
SCALING_STEPS = 8
BEND_GAIN = 1.2   # the bend: the first batch size from which doubling gains less than this


def batch_scaling(model, batch_sizes=BATCH_SIZES, context: int = SCALING_CONTEXT,
                  steps: int = SCALING_STEPS, progress=None, refresh: bool = False,
                  peek: bool = False) -> tuple[list[dict], bool] | None:
    """experiments.measure_batch_scaling, cached per machine and settings: (rows, was_cached)."""
    sizes = sorted(set(int(b) for b in batch_sizes))
    path = _json_path("scaling", experiments.machine_fingerprint(model), sizes, context, steps)
    return _cached(path, model, lambda m: experiments.measure_batch_scaling(m, sizes, context, steps, progress),
                   refresh, peek)


def scaling_table(rows: list[dict]) -> pd.DataFrame:
    """The measured rows plus the throughput gain per doubling of the batch from each size."""
    df = pd.DataFrame(rows).sort_values("batch").reset_index(drop=True)
    tps, b = df["tokens_per_s"].to_numpy(float), df["batch"].to_numpy(float)
    gain = np.full(len(df), np.nan)
    for i in range(len(df) - 1):
        doublings = math.log2(b[i + 1] / b[i])
        gain[i] = (tps[i + 1] / tps[i]) ** (1 / doublings)
    df["gain_per_doubling"] = gain
    return df


def bend(rows: list[dict], min_gain: float = BEND_GAIN) -> int | None:
    """The smallest measured batch size from which doubling the batch gains less than
    `min_gain` (1.2 = 20%) throughput; None if every measured doubling still gains more."""
    df = scaling_table(rows)
    below = df[df["gain_per_doubling"] < min_gain]
    return int(below["batch"].iloc[0]) if len(below) else None


def linear_fit(rows: list[dict]) -> dict:
    """Least-squares fit step_ms = t0 + c * batch: a model drawn from the measurements.

    Its throughput ceiling is 1000 / c tokens/s and it reaches half of it at batch t0 / c.
    """
    df = pd.DataFrame(rows)
    if len(df) < 2:
        return {"t0_ms": math.nan, "c_ms": math.nan, "ceiling_tok_s": math.nan, "half_batch": math.nan}
    c, t0 = np.polyfit(df["batch"].to_numpy(float), df["step_ms"].to_numpy(float), 1)
    return {"t0_ms": float(t0), "c_ms": float(c),
            "ceiling_tok_s": 1000 / c if c > 0 else math.inf,
            "half_batch": t0 / c if c > 0 else math.inf}


# ----------------------------------------------------------------------------- 2. static vs continuous

SVC_WORKLOADS = {
    "mixed": ("Mixed lengths",
              WorkloadSpec(num_requests=32, rate=8.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=96,
                           output_kind="uniform", output_lo=8, output_hi=64)),
    "short_long": ("Many short + one long",
                   WorkloadSpec(num_requests=32, rate=8.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=64,
                                output_kind="short_plus_long", output_lo=8, output_hi=192)),
}
SVC_SLOTS = 8


def svc_spec(workload: str, seed: int = 0) -> WorkloadSpec:
    return replace(SVC_WORKLOADS[workload][1], seed=seed)


def svc_policy(mode: str, max_num_seqs: int = SVC_SLOTS) -> SchedulerPolicy:
    return SchedulerPolicy(mode=mode, max_num_seqs=max_num_seqs)


def svc_runs(model, workload: str, max_num_seqs: int = SVC_SLOTS, seed: int = 0, progress=None,
             refresh: bool = False, peek: bool = False) -> dict | None:
    """The same seeded workload in static and in continuous mode: {mode: (RunResult, was_cached)}."""
    spec = svc_spec(workload, seed)
    out = {}
    for i, mode in enumerate(("static", "continuous")):
        got = single_run(model, svc_policy(mode, max_num_seqs), spec, _sub(progress, i, 2, mode),
                         label=mode, refresh=refresh, peek=peek)
        if got is None:
            return None
        out[mode] = got
    return out


def long_request_id(requests: pd.DataFrame) -> str | None:
    """The request with the most output tokens (in "many short + one long": the long one)."""
    if len(requests) == 0:
        return None
    return str(requests.loc[pd.to_numeric(requests["output_tokens"]).idxmax(), "id"])


def idle_slots_while_waiting(steps: pd.DataFrame, max_slots: int) -> int:
    """Slot-steps left empty although requests were waiting: per step min(empty slots, waiting)."""
    if len(steps) == 0:
        return 0
    empty = np.clip(max_slots - membership.member_counts(steps), 0, None)
    waiting = pd.to_numeric(steps["waiting"], errors="coerce").fillna(0).to_numpy(int)
    return int(np.minimum(empty, waiting).sum())


def mode_summary(result: RunResult, max_slots: int) -> dict:
    """The numbers the static-vs-continuous lab compares, from one run."""
    reqs, steps = frames(result)
    fin = finished(reqs)
    counts = membership.member_counts(steps)
    busy = int((counts > 0).sum())
    long_id = long_request_id(fin)
    long_row = fin[fin["id"] == long_id].iloc[0] if long_id is not None else None
    s = result.summary
    return {
        "output_tok_s": s["output_throughput_tok_s"],
        "duration_s": s["duration_s"],
        "steps": s["steps"],
        "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p95_s": s["ttft_s"]["p95"],
        "tpot_p50_ms": s["tpot_s"]["p50"] * 1000, "tpot_p95_ms": s["tpot_s"]["p95"] * 1000,
        "wasted_slot_steps": membership.wasted_slot_steps(steps, max_slots),
        "idle_while_waiting": idle_slots_while_waiting(steps, max_slots),
        "slot_steps": busy * max_slots,
        "slot_use": float(counts[counts > 0].sum() / (busy * max_slots)) if busy else math.nan,
        "long_id": long_id,
        "long_e2e_s": float(long_row["e2e_s"]) if long_row is not None else math.nan,
        "long_output_tokens": int(long_row["output_tokens"]) if long_row is not None else 0,
    }


# ----------------------------------------------------------------------------- 3. costs

DECODE_STREAMS = 8
DECODE_PROMPT, DECODE_OUTPUT = 64, 112
LONG_PROMPT = 1024
LONG_ARRIVALS_S = (1.0, 2.5)
COSTS_BUDGET = 256


def stall_parts(long_prompt: int = LONG_PROMPT, seed: int = 0) -> list[Part]:
    """Decodes running from t=0, then long prompts arriving into them."""
    decodes = Part(WorkloadSpec(num_requests=DECODE_STREAMS, rate=0, seed=seed, id_prefix="d",
                                prompt_kind="fixed", prompt_lo=DECODE_PROMPT, prompt_hi=DECODE_PROMPT,
                                output_kind="fixed", output_lo=DECODE_OUTPUT, output_hi=DECODE_OUTPUT))
    longs = [Part(WorkloadSpec(num_requests=1, rate=0, seed=seed + 1 + i, start_s=t, id_prefix=f"long{i}-",
                               prompt_kind="fixed", prompt_lo=long_prompt, prompt_hi=long_prompt,
                               output_kind="fixed", output_lo=16, output_hi=16))
             for i, t in enumerate(LONG_ARRIVALS_S)]
    return [decodes, *longs]


def stall_policy(chunked: bool, budget: int = COSTS_BUDGET, long_prompt: int = LONG_PROMPT) -> SchedulerPolicy:
    """Chunked prefill on: prompts are cut to fit the token budget. Off: a prompt must fit one
    step whole (as in vLLM, the budget then has to hold the longest prompt), so the budget is
    raised to the long prompt plus the running decodes."""
    if chunked:
        return SchedulerPolicy(max_num_seqs=16, enable_chunked_prefill=True, max_num_batched_tokens=budget)
    return SchedulerPolicy(max_num_seqs=16, enable_chunked_prefill=False,
                           max_num_batched_tokens=max(budget, long_prompt + 16))


def stall_runs(model, long_prompt: int = LONG_PROMPT, budget: int = COSTS_BUDGET, progress=None,
               refresh: bool = False, peek: bool = False) -> dict | None:
    """{"off": (RunResult, was_cached), "on": ...} for chunked prefill off and on."""
    out = {}
    for i, (key, chunked) in enumerate((("off", False), ("on", True))):
        got = mix_run(model, stall_policy(chunked, budget, long_prompt), stall_parts(long_prompt),
                      _sub(progress, i, 2, f"chunked prefill {key}"), label=f"chunked {key}",
                      refresh=refresh, peek=peek)
        if got is None:
            return None
        out[key] = got
    return out


def token_times(result: RunResult) -> pd.DataFrame:
    """Every output token's time: one row per (request, token) with the gap since its previous token.

    Rebuilt from the step records: a request's first token comes at its first_token_s, and each
    later token at the end of a step where it ran as a decode.
    """
    reqs, steps = frames(result)
    first = dict(zip(reqs["id"], pd.to_numeric(reqs["first_token_s"], errors="coerce")))
    times: dict[str, list[float]] = {rid: [t] for rid, t in first.items() if not pd.isna(t)}
    for text, t_end in zip(steps.get("members", []), steps.get("t_end_s", [])):
        for rid, phase, _ in membership.parse_members(text):
            if phase == "decode" and rid in times:
                times[rid].append(float(t_end))
    rows = []
    for rid, ts in times.items():
        ts.sort()
        for k, t in enumerate(ts):
            rows.append((rid, k, t, (t - ts[k - 1]) * 1000 if k else math.nan))
    return pd.DataFrame(rows, columns=["id", "token", "t_s", "gap_ms"])


def decode_token_times(result: RunResult) -> pd.DataFrame:
    """token_times of the requests decoding from t = 0 (ids "d…"), t_s counted from the first arrival."""
    tt = token_times(result)
    dec = tt[tt["id"].str.startswith("d")]
    start = min((float(r["arrival_s"]) for r in result.requests), default=0.0)
    return dec.assign(t_s=dec["t_s"] - start)


def stall_summary(result: RunResult) -> dict:
    """The decodes' inter-token gaps and the long prompts' TTFT in one run."""
    reqs, _ = frames(result)
    dec = decode_token_times(result)
    longs = reqs[reqs["id"].str.startswith("long")]
    return {
        "decode_gap_max_ms": float(dec["gap_ms"].max()),
        "decode_gap_p50_ms": pct(dec["gap_ms"], 50),
        "decode_gap_p99_ms": pct(dec["gap_ms"], 99),
        "long_ttft_mean_s": float(pd.to_numeric(longs["ttft_s"]).mean()),
        "output_tok_s": result.summary["output_throughput_tok_s"],
    }


KV_SPEC = WorkloadSpec(num_requests=24, rate=0, prompt_kind="uniform", prompt_lo=64, prompt_hi=128,
                       output_kind="uniform", output_lo=64, output_hi=128)
KV_SLOTS = 16
KV_DEFAULT = 4096
KV_MIN = 256   # one request's prompt + output must fit: 128 + 128


def kv_run(model, kv_capacity: int, progress=None, refresh: bool = False, peek: bool = False):
    policy = SchedulerPolicy(max_num_seqs=KV_SLOTS, kv_capacity_tokens=int(kv_capacity))
    return single_run(model, policy, KV_SPEC, progress, label=f"KV {kv_capacity} tokens",
                      refresh=refresh, peek=peek)


def kv_summary(result: RunResult) -> dict:
    reqs, steps = frames(result)
    fin = finished(reqs)
    used = pd.to_numeric(steps["kv_used_blocks"]) / pd.to_numeric(steps["kv_total_blocks"])
    pre = pd.to_numeric(fin["preemptions"])
    e2e = pd.to_numeric(fin["e2e_s"])
    return {
        "preemptions": int(result.summary["preemptions"]),
        "preempted_requests": int((pre > 0).sum()),
        "kv_peak_pct": float(used.max() * 100),
        "output_tok_s": result.summary["output_throughput_tok_s"],
        "e2e_preempted_s": float(e2e[pre > 0].mean()) if (pre > 0).any() else math.nan,
        "e2e_others_s": float(e2e[pre == 0].mean()) if (pre == 0).any() else math.nan,
        "recomputed_tokens": int(pd.to_numeric(steps["prefill_tokens"]).sum()
                                 - pd.to_numeric(reqs["prompt_tokens"]).sum()),
    }


# ----------------------------------------------------------------------------- 4. SLO and goodput

SLO_RATES = [1.0, 2.0, 4.0, 8.0]
SLO_SPEC = WorkloadSpec(num_requests=32, rate=2.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=256,
                        output_kind="uniform", output_lo=16, output_hi=64)
SLO_POLICY = SchedulerPolicy(max_num_seqs=16)


def slo_runs(model, rates=SLO_RATES, progress=None, refresh: bool = False,
             peek: bool = False) -> list[tuple[float, RunResult, bool]] | None:
    """The same workload at each arrival rate: [(rate, RunResult, was_cached)]."""
    out = []
    for i, rate in enumerate(rates):
        got = single_run(model, SLO_POLICY, replace(SLO_SPEC, rate=float(rate)),
                         _sub(progress, i, len(rates), f"rate {rate:g}/s"), label=f"rate {rate:g}",
                         refresh=refresh, peek=peek)
        if got is None:
            return None
        out.append((rate, *got))
    return out


def slo_verdicts(requests: pd.DataFrame, ttft_slo_s: float | None, tpot_slo_s: float | None) -> pd.DataFrame:
    """Per finished request: met every SLO set? and which target it missed."""
    fin = finished(requests).copy()
    miss_ttft = ~frame_metrics.meets_slo(fin, slo_ttft=ttft_slo_s)
    miss_tpot = ~frame_metrics.meets_slo(fin, slo_tpot=tpot_slo_s)
    fin["met_slo"] = ~(miss_ttft | miss_tpot)
    fin["missed"] = np.select([miss_ttft & miss_tpot, miss_ttft, miss_tpot], ["TTFT and TPOT", "TTFT", "TPOT"], "")
    return fin


def goodput(result: RunResult, ttft_slo_s: float | None, tpot_slo_s: float | None) -> dict:
    """Throughput against goodput for one finished run, under the given SLO targets."""
    reqs, _ = frames(result)
    v = slo_verdicts(reqs, ttft_slo_s, tpot_slo_s)
    dur = result.summary["duration_s"]
    tokens = pd.to_numeric(v["output_tokens"])
    return {
        "output_tok_s": tokens.sum() / dur,
        "useful_tok_s": tokens[v["met_slo"]].sum() / dur,
        "request_s": len(v) / dur,
        "goodput_req_s": int(v["met_slo"].sum()) / dur,
        "met_share": float(v["met_slo"].mean()) if len(v) else math.nan,
        "missed_ttft": int(v["missed"].str.contains("TTFT").sum()),
        "missed_tpot": int(v["missed"].str.contains("TPOT").sum()),
    }


# ----------------------------------------------------------------------------- 5. queueing

QUEUE_SPEC = WorkloadSpec(num_requests=40, rate=0, prompt_kind="uniform", prompt_lo=16, prompt_hi=64,
                          output_kind="uniform", output_lo=8, output_hi=24)
QUEUE_POLICY = SchedulerPolicy(max_num_seqs=8)
UTILIZATIONS = [0.3, 0.5, 0.7, 0.9]


def service_rate_run(model, progress=None, refresh: bool = False, peek: bool = False):
    """Every request at once: the engine's most requests per second for this workload (mu)."""
    return single_run(model, QUEUE_POLICY, QUEUE_SPEC, progress, label="capacity (all at once)",
                      refresh=refresh, peek=peek)


def service_rate(result: RunResult) -> float:
    """mu = finished requests / duration of the all-at-once run."""
    return result.summary["request_throughput_req_s"]


def arrival_rate(rho: float, mu: float) -> float:
    """lambda = rho * mu, rounded: the rate the run at utilization rho is given (and cached under)."""
    return round(float(rho) * mu, 4)


def queue_runs(model, mu: float, utilizations=UTILIZATIONS, progress=None, refresh: bool = False,
               peek: bool = False) -> list[tuple[float, RunResult, bool]] | None:
    """Poisson arrivals at lambda = rho * mu for each utilization rho: [(rho, RunResult, was_cached)]."""
    out = []
    for i, rho in enumerate(utilizations):
        spec = replace(QUEUE_SPEC, rate=arrival_rate(rho, mu))
        got = single_run(model, QUEUE_POLICY, spec, _sub(progress, i, len(utilizations), f"ρ = {rho:.0%}"),
                         label=f"rho {rho:g}", refresh=refresh, peek=peek)
        if got is None:
            return None
        out.append((rho, *got))
    return out


def queue_point(rho: float, result: RunResult, mu: float) -> dict:
    """One arrival-rate run: measured time in system beside the M/M/1 model, and Little's Law."""
    reqs, steps = frames(result)
    fin = finished(reqs)
    lam_set = arrival_rate(rho, mu)
    arr = pd.to_numeric(fin["arrival_s"]).to_numpy(float)
    L, lam, W, lamW = littles_law(fin)
    t0, t1 = float(arr.min()), float(pd.to_numeric(fin["finish_s"]).max())
    lam_arrivals = (len(arr) - 1) / (arr.max() - arr.min()) if len(arr) > 1 and arr.max() > arr.min() else math.nan
    return {
        "rho": rho, "lambda_set": lam_set, "lambda_arrivals": lam_arrivals,
        "W_s": W, "W_mm1_s": mm1_time_in_system(lam_set, mu),
        "queue_mean_s": float(pd.to_numeric(fin["queue_s"]).mean()),
        "L": L, "lambda": lam, "lambda_W": lamW,
        "L_steps": time_averaged_from_steps(steps, t0, t1),
        "waiting_max": int(pd.to_numeric(steps["waiting"]).max()) if len(steps) else 0,
    }


# ----------------------------------------------------------------------------- 6. the knee

KNEE_VALUES = [1, 2, 4, 8, 16, 32]
KNEE_SPEC = WorkloadSpec(num_requests=32, rate=0, prompt_kind="uniform", prompt_lo=32, prompt_hi=96,
                         output_kind="uniform", output_lo=16, output_hi=32)
KNEE_X = "tpot_p95_ms"   # the knee is found on the throughput against p95 TPOT curve


def knee_runs(model, values=KNEE_VALUES, progress=None, refresh: bool = False,
              peek: bool = False) -> list[tuple[int, RunResult, bool]] | None:
    """The same workload under each max_num_seqs: [(value, RunResult, was_cached)]."""
    out = []
    base = SchedulerPolicy()
    for i, v in enumerate(values):
        got = single_run(model, base.changed(max_num_seqs=int(v)), KNEE_SPEC,
                         _sub(progress, i, len(values), f"max_num_seqs={v}"), label=f"max_num_seqs={v}",
                         refresh=refresh, peek=peek)
        if got is None:
            return None
        out.append((int(v), *got))
    return out


def knee_table(runs, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None) -> pd.DataFrame:
    """One row per max_num_seqs: throughput, p50/p95 latency (the run's summary, over its finished
    requests) and goodput under the given SLO targets."""
    rows = []
    for v, res, _ in runs:
        s = res.summary
        g = goodput(res, ttft_slo_s, tpot_slo_s)
        rows.append({"max_num_seqs": v, "output_tok_s": s["output_throughput_tok_s"],
                     "tpot_p95_ms": s["tpot_s"]["p95"] * 1000, "ttft_p95_s": s["ttft_s"]["p95"],
                     "tpot_p50_ms": s["tpot_s"]["p50"] * 1000, "ttft_p50_s": s["ttft_s"]["p50"],
                     "goodput_req_s": g["goodput_req_s"], "met_share": g["met_share"]})
    return pd.DataFrame(rows)


def find_knee(table: pd.DataFrame, x: str = KNEE_X) -> int | None:
    """The knee of the throughput-against-latency curve, by the "Kneedle" rule (a discrete form of
    the point of greatest curvature): scale both axes to 0-1 between the first and the last setting,
    and take the setting that lies furthest above the straight line joining them. Before it, extra
    slots buy throughput faster than latency; after it, latency grows faster than throughput.
    None when no setting lies above that line (throughput and latency grew in step)."""
    t = table.dropna(subset=[x, "output_tok_s"]).sort_values("max_num_seqs")
    if len(t) < 3:
        return None
    xs, ys = t[x].to_numpy(float), t["output_tok_s"].to_numpy(float)
    dx, dy = xs[-1] - xs[0], ys[-1] - ys[0]
    if dx <= 0 or dy <= 0:
        return None
    above = (ys - ys[0]) / dy - (xs - xs[0]) / dx
    i = int(np.argmax(above))
    return int(t["max_num_seqs"].iloc[i]) if above[i] > 0 else None


# ----------------------------------------------------------------------------- 7. the tail

TAIL_REQUESTS = 48
TAIL_RATE = 5.0
TAIL_SHORT = LengthDist("uniform", 32, 128)
TAIL_LONG = LengthDist("uniform", 768, 1024)
TAIL_OUTPUT = LengthDist("uniform", 16, 48)
PROMPT_BUCKETS = [(0, 128, "≤128 tokens"), (129, 512, "129–512 tokens"), (513, 10 ** 9, ">512 tokens")]


def tail_parts(long_share: float = 0.1, bursty: bool = True, seed: int = 0) -> list[Part]:
    """Two tenants sending the same mix of prompts: "steady" (Poisson) and "bursty" (bursts with
    quiet gaps between). `long_share` of each tenant's requests carry a long prompt."""
    out = []
    per_tenant = TAIL_REQUESTS // 2
    n_long = round(per_tenant * long_share)
    rate = TAIL_RATE / 2
    for t, (tenant, burst) in enumerate((("steady", 1.0), ("bursty", 3.0 if bursty else 1.0))):
        for k, (n, prompt, kind) in enumerate(((per_tenant - n_long, TAIL_SHORT, "s"), (n_long, TAIL_LONG, "l"))):
            if n:
                out.append(Part(WorkloadSpec(num_requests=n, rate=rate * n / per_tenant, burstiness=burst,
                                             **prompt.as_fields("prompt"), **TAIL_OUTPUT.as_fields("output"), seed=seed + 10 * t + k,
                                             id_prefix=f"{tenant}-{kind}"), tenant=tenant, priority=t))
    return out


TAIL_POLICY = SchedulerPolicy(max_num_seqs=16)


def tail_run(model, long_share: float = 0.1, bursty: bool = True, seed: int = 0, progress=None,
             refresh: bool = False, peek: bool = False):
    return mix_run(model, TAIL_POLICY, tail_parts(long_share, bursty, seed), progress,
                   label=f"long share {long_share:.0%}", refresh=refresh, peek=peek)


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
        v = v.dropna()
        rows.append({"group": name, "n": len(v), "mean": v.mean() if len(v) else math.nan,
                     **{f"p{q}": pct(v, q) for q in PERCENTILES}})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- 8. scheduler orders

ORDER_NAMES = ["fcfs", "priority", "sjf", "fair", "edf"]
ORDER_REQUESTS = 40
ORDER_RATE = 6.0
ORDER_TENANTS = [  # name, share of traffic, priority (lower = more important), own TTFT target
    ("tenant-a", 0.5, 0, 4.0),
    ("tenant-b", 0.25, 1, 2.0),
    ("tenant-c", 0.25, 2, 1.0),
]
ORDER_PROMPT = LengthDist("longtail", 32, 1024)
ORDER_OUTPUT = LengthDist("uniform", 16, 48)
ORDER_POLICY = SchedulerPolicy(max_num_seqs=8, max_num_batched_tokens=256)


def order_parts(rate: float = ORDER_RATE, seed: int = 0) -> list[Part]:
    """Three tenants, one heavy (half the traffic); long-tail prompts; each tenant its own TTFT target."""
    parts = []
    for i, (tenant, share, prio, ttft) in enumerate(ORDER_TENANTS):
        n = round(ORDER_REQUESTS * share)
        parts.append(Part(WorkloadSpec(num_requests=n, rate=rate * share, **ORDER_PROMPT.as_fields("prompt"),
                                       **ORDER_OUTPUT.as_fields("output"), seed=seed * 100 + i, id_prefix=f"{tenant[-1]}"),
                          tenant=tenant, priority=prio, ttft_slo_s=ttft))
    return parts


def order_runs(model, orders=ORDER_NAMES, rate: float = ORDER_RATE, seed: int = 0, progress=None,
               refresh: bool = False, peek: bool = False) -> dict | None:
    """{order: (RunResult, was_cached)} for the same multi-tenant workload."""
    out = {}
    for i, order in enumerate(orders):
        got = mix_run(model, ORDER_POLICY.changed(order=order), order_parts(rate, seed),
                      _sub(progress, i, len(orders), order), label=order, refresh=refresh, peek=peek)
        if got is None:
            return None
        out[order] = got
    return out


def tenant_table(runs: dict) -> pd.DataFrame:
    """One row per (order, tenant): p50/p95 TTFT, and the share meeting the tenant's own target."""
    targets = {t: slo for t, _, _, slo in ORDER_TENANTS}
    rows = []
    for order, (res, _) in runs.items():
        reqs = finished(frames(res)[0])
        for tenant, g in reqs.groupby("tenant", sort=True):
            ttft = pd.to_numeric(g["ttft_s"])
            rows.append({"order": order, "tenant": tenant, "n": len(g),
                         "ttft_p50_s": pct(ttft, 50), "ttft_p95_s": pct(ttft, 95), "ttft_p99_s": pct(ttft, 99),
                         "met_own_ttft": float((ttft <= targets.get(tenant, math.inf)).mean()),
                         "output_tok_s": res.summary["output_throughput_tok_s"]})
    return pd.DataFrame(rows)


def winners(table: pd.DataFrame, baseline: str = "fcfs") -> dict[str, str]:
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
            parts.append("no tenant's p95 TTFT moved against fcfs")
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
