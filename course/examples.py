"""The course's own worked examples: the engine's scheduler on the simulator, and the engine's constants.

A lesson quotes a number from here with a marker, ``{{number:example.static_end_s}}``: the page
shows course/numbers.py's ``numbers()["static_end_s"]``, computed from these runs, so the text says
what this code computes. The pictures (course/pictures*.py) draw the same runs.

Every run uses COURSE_MODEL, one recorded calibration of this engine (SmolLM2-135M in fp32 on a
two-core CPU, `python -m engine calibrate`), frozen here so that the lessons' numbers are the same
on every machine. It is a record, not this machine: the labs measure this machine.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from analysis.knee import knee
from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine, size_kv_pool
from engine.core.clock import VirtualClock
from engine.core.engine import Engine
from engine.core.executor import CostModelExecutor
from engine.core.kv_cache import BlockPool
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.metrics import request_row
from engine.sim.roofline import MODELS, RooflineStepModel
from engine.core.step_model import StepModel
from engine.core.validation import kv_bytes_per_token
from engine.runs.workload import WorkloadSpec

COURSE_MODEL = StepModel(fixed_ms=67.6, knots=(), token_ms=(3.53,), sample_ms=0.0, decode_read_ms=7.97,
                         prefill_pair_ms=0.0,
                         label="the course's recorded step model: SmolLM2-135M in fp32 on a two-core CPU")
SMOLLM2 = MODELS["smollm2-135m"]
CONTEXT = 128              # tokens of context per sequence in the decode-step examples
BATCHES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Moment:
    """What the engine held right after one step."""
    step: int
    t_start_s: float
    t_end_s: float
    members: tuple          # (request id, phase, tokens)
    running: dict           # request id -> its KV block table (block numbers)
    waiting: tuple          # request ids in the waiting queue, in order
    preempted: int


def run(policy: SchedulerPolicy, spec: WorkloadSpec, config: EngineConfig | None = None,
        cost=None, requests=None) -> tuple[list[dict], list[Moment]]:
    """Run `spec` (or `requests`) under `policy` on the simulator: (request rows, a Moment after
    every step). `cost`: a step model; None is the engine's hand-set cost model."""
    engine = _simulated_engine(config or EngineConfig(), policy, cost)
    for r in (requests if requests is not None else build_requests(spec)):
        engine.submit(r)
    moments = []

    def record(rec):
        moments.append(Moment(rec.step, rec.t_start_s, rec.t_end_s, rec.members,
                              {r.id: list(r.block_table) for r in engine.scheduler.running},
                              tuple(r.id for r in engine.scheduler.waiting), rec.preempted))
    engine.run(on_step=record)
    return [request_row(r) for r in engine.requests.values()], moments


def kv_bytes_bf16() -> int:
    """SmolLM2-135M's keys and values of one token in bf16, from its shape."""
    return kv_bytes_per_token(SMOLLM2.layers, SMOLLM2.kv_heads, SMOLLM2.head_dim, 2)


def _simulated_engine(config: EngineConfig, policy: SchedulerPolicy, cost):
    """build_engine on the cost model; for a roofline model of named hardware, without the check that
    the KV pool fits this machine's memory (a simulated GPU allocates nothing here)."""
    if not isinstance(cost, RooflineStepModel):
        return build_engine(config, policy, cost=cost)
    config.validate()
    policy.validate()
    config = size_kv_pool(config, policy)
    clock = VirtualClock()
    return Engine(CostModelExecutor(clock, cost), clock, policy,
                  BlockPool(config.kv_pool_tokens // config.block_size, config.block_size), config.max_model_len)


def percentile(values, q: float) -> float:
    """The q-th percentile (0-100), linearly interpolated, as engine.metrics reports them."""
    v = sorted(values)
    if not v:
        return math.nan
    k = (len(v) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


# ---- lesson 1: one decode step, shared -------------------------------------------------------

def step_table(model: StepModel = COURSE_MODEL, context: int = CONTEXT, batches=BATCHES) -> list[dict]:
    """A decode step at each batch size: its time, tokens per second and the knee by the course's rule."""
    rows = [{"batch": b, "step_ms": model.decode_ms(b, context)} for b in batches]
    for r in rows:
        r["tok_s"] = 1000 * r["batch"] / r["step_ms"]
    k = knee([r["batch"] for r in rows], [r["tok_s"] for r in rows])
    for r in rows:
        r["knee"] = r["batch"] == k
    return rows


def line_through(rows: list[dict]) -> tuple[float, float]:
    """(t0, c): the least-squares straight line t0 + c B through a step table's rows (step_table)."""
    import numpy as np
    c, t0 = np.polyfit([r["batch"] for r in rows], [r["step_ms"] for r in rows], 1)
    return float(t0), float(c)


# ---- lesson 2: static against continuous ------------------------------------------------------

SHORT_LONG = WorkloadSpec(num_requests=32, rate=0, prompt_kind="fixed", prompt_lo=32, prompt_hi=32,
                          output_kind="short_plus_long", output_lo=8, output_hi=160, seed=3)
SHORT_LONG_SLOTS = 8       # SHORT_LONG's rate and max_wait_ms are set on each machine (short_long_setup)
SHORT_LONG_LOAD = 0.7      # arrivals this share of what the engine serves with every slot busy (capacity)
SHORT_LONG_WAIT_STEPS = 7  # static batching's max_wait_ms: this many decode steps of one request alone


def short_long_setup(cost: StepModel = COURSE_MODEL, spec: WorkloadSpec = SHORT_LONG,
                     slots: int = SHORT_LONG_SLOTS) -> tuple[WorkloadSpec, float]:
    """Lesson 2's workload and static max_wait_ms on the machine `cost` models, set relative to it so that the
    same story plays out on a CPU or a GPU: (spec at SHORT_LONG_LOAD x capacity, max_wait_ms)."""
    rate = SHORT_LONG_LOAD * capacity(replace(spec, rate=0), slots, cost)
    wait_ms = SHORT_LONG_WAIT_STEPS * cost.decode_ms(1, spec.prompt_hi + 1)
    return replace(spec, rate=rate), wait_ms


@functools.lru_cache(maxsize=4)
def static_vs_continuous_runs(cost: StepModel = COURSE_MODEL, spec: WorkloadSpec = SHORT_LONG,
                              slots: int = SHORT_LONG_SLOTS) -> dict:
    """Lesson 2's run under each mode on `cost`: {mode: (rows, moments)}."""
    spec, wait_ms = short_long_setup(cost, spec, slots)
    return {mode: run(SchedulerPolicy(mode=mode, max_num_seqs=slots, max_wait_ms=wait_ms), spec, cost=cost)
            for mode in ("static", "continuous")}


def slot_steps(rows: list[dict], moments: list[Moment], slots: int) -> dict:
    """Slot-steps used and offered, and the useful share, over a run's steps."""
    used = sum(sum(1 for _, phase, _ in m.members if phase == "decode") for m in moments)
    decode_steps = sum(1 for m in moments if any(p == "decode" for _, p, _ in m.members))
    return {"used": used, "offered": decode_steps * slots, "share": used / max(1, decode_steps * slots)}


# ---- lesson 4: one request's timeline, and goodput ---------------------------------------------

# The SLO of lesson 4's example, set on each machine from its own step model (as the knee lab's sliders
# start: labs/knee/experiment.slo_defaults): a TTFT within SLO_TTFT_LONE times a lone request's (its
# prompt's prefill, alone in a step), and a TPOT within SLO_TPOT_LONE times a lone request's decode step.
# A fixed pair tuned to one CPU is met by every request on a GPU, and then goodput shows nothing; on the
# recorded CPU these multiples give about the 2 s and 150 ms the course first set there.
SLO_TTFT_LONE, SLO_TPOT_LONE = 3.5, 2.0
LIFECYCLE = WorkloadSpec(num_requests=5, rate=1.5, prompt_kind="uniform", prompt_lo=64, prompt_hi=256,
                         output_kind="uniform", output_lo=8, output_hi=16, seed=0)
GOODPUT_SPEC = WorkloadSpec(num_requests=60, rate=1.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=256,
                            output_kind="uniform", output_lo=16, output_hi=64, seed=4)
GOODPUT_SLOTS = 16
GOODPUT_LOAD = 1.0         # arrivals as many a second as the engine serves with every slot busy (capacity)


def token_times(row: dict, moments: list[Moment]) -> list[float]:
    """When each output token of a request came, in seconds since it arrived: its first token,
    then the end of every step where it decoded."""
    t0 = row["arrival_s"]
    return [row["first_token_s"] - t0] + [m.t_end_s - t0 for m in moments
                                          if any(x == row["id"] and p == "decode" for x, p, _ in m.members)]


def lifecycle_run(spec: WorkloadSpec = LIFECYCLE, slots: int = 3) -> tuple[list[dict], list[Moment], dict]:
    """A few requests a little apart; (rows, moments, the request whose token gaps vary the most)."""
    rows, moments = run(SchedulerPolicy(max_num_seqs=slots), spec, cost=COURSE_MODEL)

    def spread(r):
        t = token_times(r, moments)
        gaps = [b - a for a, b in zip(t, t[1:])]
        return (r["queue_s"] > 0, max(gaps) / min(gaps))
    return rows, moments, max((r for r in rows if r["output_tokens"] >= 4), key=spread)


def _two_figures(x: float) -> float:
    """`x` to two significant figures: a target as a person would set it (2.0 s, 0.15 s, 0.041 s)."""
    return float(f"{x:.2g}")


def slos(cost: StepModel = COURSE_MODEL, spec: WorkloadSpec = GOODPUT_SPEC) -> tuple[float, float]:
    """(TTFT s, TPOT s): lesson 4's SLO on the machine `cost` models, for `spec`'s mean request."""
    prompt = (spec.prompt_lo + spec.prompt_hi) // 2
    output = (spec.output_lo + spec.output_hi) // 2
    return (_two_figures(SLO_TTFT_LONE * cost.prefill_ms(prompt) / 1000),
            _two_figures(SLO_TPOT_LONE * cost.decode_ms(1, prompt + output // 2) / 1000))


@functools.lru_cache(maxsize=4)
def goodput_run(cost: StepModel = COURSE_MODEL, spec: WorkloadSpec = GOODPUT_SPEC,
                slots: int = GOODPUT_SLOTS) -> dict:
    """`spec` arriving at GOODPUT_LOAD x capacity on `cost`, scored against that machine's SLO (slos)."""
    rate = GOODPUT_LOAD * capacity(replace(spec, rate=0), slots, cost)
    rows, moments = run(SchedulerPolicy(max_num_seqs=slots), replace(spec, rate=rate), cost=cost)
    ttft_slo, tpot_slo = slos(cost, spec)
    duration = max(r["finish_s"] for r in rows) - min(r["arrival_s"] for r in rows)
    ttft_ok = [r for r in rows if r["ttft_s"] <= ttft_slo]
    both = [r for r in ttft_ok if r["tpot_s"] is not None and r["tpot_s"] <= tpot_slo]
    tpot_ok = [r for r in rows if r["tpot_s"] is not None and r["tpot_s"] <= tpot_slo]
    return {"requests": len(rows), "tokens": sum(r["output_tokens"] for r in rows), "duration_s": duration,
            "ttft_ok": len(ttft_ok), "tpot_ok": len(tpot_ok), "both_ok": len(both), "rate": rate,
            "slo_ttft_s": ttft_slo, "slo_tpot_s": tpot_slo}


# ---- lesson 5: queueing ------------------------------------------------------------------------

QUEUE_SPEC = WorkloadSpec(num_requests=200, rate=0, prompt_kind="uniform", prompt_lo=16, prompt_hi=64,
                          output_kind="uniform", output_lo=16, output_hi=48, seed=5)
QUEUE_SLOTS = 8
LOADS = (0.7, 0.95)        # the picture's moderate and high utilization


def capacity(spec: WorkloadSpec = QUEUE_SPEC, slots: int = QUEUE_SLOTS, cost: StepModel = COURSE_MODEL) -> float:
    """mu: requests a second the engine finishes with every slot busy, all of `spec` sent at once, with
    step times from `cost` (the learner's own step model, where a lesson's example runs on it)."""
    return _capacity(tuple(sorted(spec.to_dict().items())), slots, cost)


@functools.lru_cache(maxsize=8)
def _capacity(spec_items: tuple, slots: int, cost: StepModel) -> float:
    """Counted while the batch is full (until the last request is admitted), not over the run's
    draining tail, where fewer and fewer slots are busy."""
    rows, moments = run(SchedulerPolicy(max_num_seqs=slots), WorkloadSpec(**dict(spec_items)), cost=cost)
    full_until = next(m.t_end_s for m in moments if not m.waiting)
    return sum(1 for r in rows if r["finish_s"] <= full_until) / full_until


def at_load(load: float, spec: WorkloadSpec = QUEUE_SPEC, slots: int = QUEUE_SLOTS, cost: StepModel = COURSE_MODEL):
    """`spec` arriving as Poisson traffic at `load` x capacity on `cost`: (rows, moments, arrival rate)."""
    rate = load * capacity(spec, slots, cost)
    rows, moments = run(SchedulerPolicy(max_num_seqs=slots), WorkloadSpec(**{**spec.to_dict(), "rate": rate}),
                        cost=cost)
    return rows, moments, rate


@functools.lru_cache(maxsize=8)
def load_example(load: float, cost: StepModel = COURSE_MODEL) -> dict:
    """At `load` x capacity on `cost`: the arrival rate, mean time in system, mean wait for a slot and mean
    service (time in system less the wait)."""
    rows, _, rate = at_load(load, cost=cost)
    return {"rate": rate, "w": sum(r["e2e_s"] for r in rows) / len(rows),
            "queue": sum(r["queue_s"] for r in rows) / len(rows),
            "service": sum(r["e2e_s"] - r["queue_s"] for r in rows) / len(rows)}


# ---- lesson 6: the knee, on a decode-dominated workload ------------------------------------------
# Short prompts and long answers, all sent at once, the same requests at every max_num_seqs: most of
# the run is decode steps, so where throughput stops growing is set by how a decode step's time grows
# with its batch. Two machines: the learner's own step model (ui/calculators.knee_example, on the page)
# and a named GPU's roofline model beside it (here, so the lesson's text can quote it).

KNEE_GPU = "a100-80gb:llama-3.1-8b"
KNEE_SPEC = WorkloadSpec(num_requests=256, rate=0, prompt_kind="uniform", prompt_lo=16, prompt_hi=32,
                         output_kind="uniform", output_lo=64, output_hi=128, seed=6)
KNEE_CPU_VALUES = (8, 16, 32, 64, 128, 256)      # a CPU's sweep: its knee lies in the tens to hundreds
KNEE_GPU_VALUES = (16, 32, 64, 128, 256, 512)  # a GPU's: its decode steps stay memory-bound far longer
KNEE_TPOT_SLO_MS = 20     # the GPU example's TPOT target (an 8B model on an A100 streams a token in ~10 ms at best)
KNEE_TTFT_SLO_S = 10      # the GPU example's TTFT target


def knee_gpu_name() -> str:
    from engine.sim.roofline import roofline_profile
    m = roofline_profile(KNEE_GPU)
    return f"{m.model.name} on an {m.device.name}"


def knee_sweep_on(cost, values) -> list[dict]:
    """KNEE_SPEC's requests, as many as the largest setting holds, under each max_num_seqs on the
    simulator with step times from `cost`: throughput, p95 TPOT, p95 TTFT, the share of the run's
    time in steps with no prompt in them and the output tokens per prompt token; the knee marked."""
    spec = replace(KNEE_SPEC, num_requests=max(values))
    config = EngineConfig(kv_pool_tokens=max(values) * (spec.prompt_hi + spec.output_hi), max_model_len=4096)
    out = []
    for v in values:
        policy = SchedulerPolicy(max_num_seqs=v, max_num_batched_tokens=8192,
                                 kv_capacity_tokens=config.kv_pool_tokens)
        rows, moments = run(policy, spec, config, cost=cost)
        end = max(r["finish_s"] for r in rows)
        decode_only = sum(m.t_end_s - m.t_start_s for m in moments if all(p == "decode" for _, p, _ in m.members))
        out.append({"max_num_seqs": v, "requests": len(rows), "tok_s": sum(r["output_tokens"] for r in rows) / end,
                    "tpot_p95_ms": 1000 * percentile([r["tpot_s"] for r in rows if r["tpot_s"] is not None], 95),
                    "ttft_p95_s": percentile([r["ttft_s"] for r in rows], 95), "decode_only": decode_only / end,
                    "decode_per_prompt_token": sum(r["output_tokens"] for r in rows) / sum(r["prompt_tokens"] for r in rows)})
    k = knee([r["max_num_seqs"] for r in out], [r["tok_s"] for r in out])
    for r in out:
        r["knee"] = r["max_num_seqs"] == k
    return out


@functools.lru_cache(maxsize=1)
def knee_sweep() -> list[dict]:
    """The GPU's sweep, the one the lesson's text quotes (KNEE_GPU's roofline model)."""
    from engine.sim.roofline import roofline_profile
    return knee_sweep_on(roofline_profile(KNEE_GPU), KNEE_GPU_VALUES)


def ridge(device) -> dict:
    """A device's ridge point (engine/sim/roofline.py's figures, each at its efficiency): the FLOPs it
    can do per byte it reads, and the decode batch at which a step's weight products turn from
    memory-bound to compute-bound (each row does 2 FLOPs per weight, each weight is dtype_bytes)."""
    flop_per_byte = device.peak_flops * device.compute_efficiency / (device.bandwidth * device.memory_efficiency)
    return {"flop_per_byte": flop_per_byte, "batch": flop_per_byte * device.dtype_bytes / 2}


def mixed(*specs: WorkloadSpec) -> list:
    """The requests of several workloads over the same span, in arrival order, named apart."""
    out = []
    for k, spec in enumerate(specs):
        for r in build_requests(spec):
            r.id = f"{'sl'[k] if k < 2 else k}{r.id}"
            out.append(r)
    return sorted(out, key=lambda r: r.arrival_s)


# ---- lesson 2's slot grid --------------------------------------------------------------------------

GRID_SPEC = WorkloadSpec(num_requests=6, rate=0, prompt_kind="fixed", prompt_lo=8, prompt_hi=8,
                         output_kind="uniform", output_lo=2, output_hi=6, seed=2)
GRID_SLOTS = 4


def grid_lengths() -> list[int]:
    """The output lengths of the grid's default requests, drawn by the engine's workload generator."""
    return [r.max_new_tokens for r in build_requests(GRID_SPEC)]


def slot_grid(lengths: list[int], slots: int, mode: str) -> dict:
    """Requests r0, r1, ... needing `lengths` tokens, all waiting at the start, run by the engine's
    scheduler in `mode`: each step's slots (a request keeps its slot; "" for an empty one; a final
    ✓ marks a request's last token), and the slot-steps used and held."""
    from engine.core.request import Request
    requests = [Request(id=f"r{i}", prompt_token_ids=[1] * GRID_SPEC.prompt_lo, max_new_tokens=n)
                for i, n in enumerate(lengths)]
    rows, moments = run(SchedulerPolicy(mode=mode, max_num_seqs=slots, max_wait_ms=0), None, requests=requests)
    need = {r["id"]: r["output_tokens"] for r in rows}
    made = dict.fromkeys(need, 0)
    place: dict[str, int] = {}
    grid = []
    for m in moments:
        line = [""] * slots
        for rid, _, _ in m.members:
            if rid not in place:
                free = [s for s in range(slots) if s not in place.values()]
                place[rid] = free[0]
            made[rid] += 1
            line[place[rid]] = rid + (" ✓" if made[rid] == need[rid] else "")
        for rid in [r for r, n in made.items() if n == need[r] and r in place]:
            place.pop(rid)
        grid.append(line)
    used = sum(lengths)
    return {"grid": grid, "steps": len(grid), "used": used, "held": len(grid) * slots}
