"""Calibration: time real steps on this machine, over the shapes the scheduler makes, and fit
the step model (engine/core/step_model.py) that the simulator runs on.

The grid covers what a run asks of the model:
  - decode steps: batch 1..max_num_seqs, each sequence with a short, medium or long context;
  - prefill chunks of several sizes from position 0 (a whole prompt, sampling its first token),
    and later chunks of a long prompt (chunked prefill, nothing sampled);
  - mixed steps: decoding sequences plus one prefill chunk, as continuous batching makes them.
Steps are built by hand and run through the executor, as engine.step_times does: the KV cache
need not hold real keys for the timing to be real, so a decode step at context 1,024 costs one
step to time, not a 1,024-token prefill first.

Each step runs once untimed (first calls pay for kernel set-up, and on a GPU for recording a
decode step's CUDA graph), then the whole grid is timed in passes, each pass in a fresh random
order, until the time budget is spent; a shape's time is the median of its passes. The simulator
predicts runs, and a run's steps meet the machine as it usually is: on a shared two-core machine
the fastest of 9 passes (the count then) was 2-19% quicker than their median for prefill steps,
and a profile built on the fastest passes made every validation run's TTFT and TPOT too short. The
shuffled order spreads other programs' interference over all shapes, and the median ignores a pass
that one of them interrupted. How busy the machine was is stored with the profile.

The fit: least squares on relative error (a 15 ms decode step matters as much as a 400 ms
prefill), coefficients held at zero or above (no cost can be negative), refitted once without
the steps far slower than the fit (interrupted in most of their passes). Every `HOLDOUT_EVERY`-th
shape is held out; each candidate form (`Grid.knot_candidates`: one straight line in rows, or
piecewise in rows with knots where the linear layers change speed) is fitted on the rest and
scored on the held-out shapes, and the form with the smallest held-out error is kept. Its fit and errors are
reported and stored with the profile.
"""
from __future__ import annotations

import os
import random
import statistics
import time
from dataclasses import dataclass, replace

import numpy as np

from ..runs.arrivals import build_requests
from ..runs.build import build_engine
from ..core.config import EngineConfig, SchedulerPolicy
from ..core.kv_cache import blocks_for
from .profile import Profile, current_key
from ..core.request import Request
from ..core.scheduler import ScheduledChunk, StepPlan
from ..core.step_model import StepModel, StepShape, features, step_shape
from ..runs.workload import PromptMaker, WorkloadSpec

@dataclass(frozen=True)
class Grid:
    """Which step shapes to time, how often, and which forms to fit them with."""
    batches: tuple              # decode batch sizes (up to max_num_seqs)
    contexts: tuple             # tokens before a decode token
    chunks: tuple               # prefill chunks from position 0, each sampling its first token
    later_chunks: tuple         # (start, tokens): later chunks of a long prompt, nothing sampled
    mixed: tuple                # (decoding sequences, chunk tokens) in one step
    knot_candidates: tuple      # the forms to choose from (engine.step_model)
    pool_tokens: int            # KV pool the steps live in: a grid point must fit
    passes: int                 # timed passes at most


# 30 passes at most, within a time budget: a shared machine's speed moves in spells of tens of
# seconds, so a shape's median over passes spread across the whole budget is its time on the
# machine as it usually is; a few passes in a short budget could sit in one slow spell.
# Knots at 2 and 3: on a CPU, one or two rows go through the hand-written kernel and three or
# more through oneDNN (engine/model/linear.py), so a step's time jumps between 2 and 3 rows; rows
# are whole numbers, so the segment from 2 to 3 is that jump, where a slope across 2-8 would
# spread it over batches 3-7.
FULL = Grid(batches=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64), contexts=(16, 256, 1024),
            chunks=(8, 16, 32, 64, 128, 256, 512), later_chunks=((512, 64), (512, 256), (1024, 128)),
            mixed=((2, 32), (2, 256), (8, 128), (16, 64), (32, 256)),
            knot_candidates=((), (4, 64), (2, 8, 32, 128), (2, 3), (2, 3, 16, 64)), pool_tokens=16384,
            passes=30)

# A few seconds, for a first start without a profile.
QUICK = Grid(batches=(1, 2, 4, 8, 16), contexts=(64, 512), chunks=(16, 64, 256), later_chunks=(),
             mixed=((4, 64),), knot_candidates=((), (4,)), pool_tokens=8192, passes=2)
MIXED_CONTEXT = 256
HOLDOUT_EVERY = 4
INTERRUPTED = 1.5                   # a step this much slower than the fit predicts was interrupted

Chunk = tuple[int, int, bool]       # (start position, tokens, does it sample)


def grid(max_num_seqs: int, max_len: int, g: Grid = FULL) -> list[list[Chunk]]:
    """The steps to time, each a list of chunks; only those that fit the pool and the model's length."""
    batches = sorted({b for b in g.batches if b <= max_num_seqs} | {max_num_seqs})
    steps = [[(ctx, 1, True)] * b for ctx in g.contexts for b in batches]
    steps += [[(0, n, True)] for n in g.chunks]
    steps += [[(start, n, False)] for start, n in g.later_chunks]
    steps += [[(MIXED_CONTEXT, 1, True)] * min(b, max_num_seqs) + [(0, n, False)] for b, n in g.mixed]
    block = EngineConfig().block_size
    fits = [s for s in steps if sum(blocks_for(a + n + 1, block) * block for a, n, _ in s) <= g.pool_tokens]
    return [s for s in fits if max(a + n for a, n, _ in s) < max_len]

def plan_for(chunks: list[Chunk], pool=None) -> StepPlan:
    """A step plan with these chunks, each of a fresh stand-in request holding its KV blocks
    in `pool` (no pool: a plan to read the shape of, holding nothing)."""
    out = []
    for i, (start, n, samples) in enumerate(chunks):
        length = start + n + (0 if samples else 1)        # a chunk samples iff it reaches the end
        req = Request(f"cal{i}", [100 + (i * 7 + k) % 5000 for k in range(length)], 1)
        if pool is not None:
            pool.allocate(req, start + n)
        out.append(ScheduledChunk(req, start, n, "decode" if n == 1 and start > 0 else "prefill"))
    return StepPlan(out)


def time_steps(executor, clock, pool, steps: list[list[Chunk]], budget_s: float, progress=None,
               passes: int = FULL.passes) -> list[float]:
    """The median time in ms of each step over up to `passes` timed passes in random order,
    stopping early when a pass as long as the longest so far would end past `budget_s` (one pass
    at least). Each step runs once untimed before: the first call at a new shape pays for set-up,
    kernels for a new row count and, on a GPU, the recording of a decode step's CUDA graph for its
    batch and context (engine/model/decode_graphs.py), many times the step."""
    t_start = time.perf_counter()
    for chunks in steps:
        run_step(executor, clock, pool, chunks)
    times: list[list[float]] = [[] for _ in steps]
    rng, longest = random.Random(0), 0.0
    for p in range(passes):
        pass_start = time.perf_counter()
        order = list(range(len(steps)))
        rng.shuffle(order)
        for i in order:
            times[i].append(run_step(executor, clock, pool, steps[i]))
        spent, longest = time.perf_counter() - t_start, max(longest, time.perf_counter() - pass_start)
        if progress is not None:
            progress(min(1.0, spent / budget_s), f"pass {p + 1}: {len(steps)} step shapes timed, {spent:.0f} s")
        if spent + longest > budget_s:
            break
    return [statistics.median(t) for t in times]


# All at once, so the run never waits for an arrival: every gap between its steps is the loop's.
LOOP_SPEC = WorkloadSpec(num_requests=12, rate=0.0, prompt_lo=32, prompt_hi=128, output_lo=16, output_hi=48,
                         seed=7)
LOOP_POLICY = SchedulerPolicy(max_num_seqs=8)


def loop_ms(model) -> float:
    """What a real run adds to each step beyond the step itself: the engine loop's own work
    (scheduling, appending tokens, recording the step), measured as the mean gap between one
    step's end and the next one's start in a small all-at-once workload on the real engine
    (not one validate-sim uses).

    Measured as gaps, not as the difference between the run's span and the fit's prediction
    of it: that difference also holds the fit's error on the run's shapes and every slow spell
    of the machine during the run, and on a shared machine it came out at 0-7 ms a step where
    the gaps are a quarter of a millisecond. Timed step by step inside real runs, a run's steps
    took 0.97-1.01 times what the same shapes took when built by hand, so the gaps are all a run adds."""
    engine = build_engine(EngineConfig(model=model.name, kv_pool_tokens=8192), LOOP_POLICY, model)
    for r in build_requests(LOOP_SPEC, PromptMaker(model.tokenizer)):
        engine.submit(r)
    engine.run()
    return mean_gap_ms(engine.steps)


def mean_gap_ms(steps) -> float:
    """The mean time from one step's end to the next one's start, in ms (0 for fewer than 2 steps)."""
    gaps = [b.t_start_s - a.t_end_s for a, b in zip(steps, steps[1:])]
    return 1000 * statistics.fmean(gaps) if gaps else 0.0


def run_step(executor, clock, pool, chunks: list[Chunk]) -> float:
    """Run one step of these chunks; its time in ms."""
    plan = plan_for(chunks, pool)
    t0 = clock.now()
    executor.execute(plan)
    elapsed = clock.now() - t0
    for c in plan.chunks:
        pool.free(c.request)
    return elapsed * 1000


def fit_form(shapes: list[StepShape], ms: list[float], knots: tuple[int, ...]) -> StepModel:
    """Least squares on relative error, then once more without the steps that took over
    `INTERRUPTED` times the fit's prediction: another program interrupted those (interference
    only ever adds time). When that is over a quarter of them, the machine was busy all along
    and the first fit stands."""
    model = least_squares(shapes, ms, knots)
    kept = [(s, m) for s, m in zip(shapes, ms) if m <= INTERRUPTED * model.predict(s)]
    if len(kept) < 0.75 * len(ms):      # interrupted all along: no clean steps to keep
        return model
    return least_squares(*zip(*kept), knots)


def least_squares(shapes, ms, knots: tuple[int, ...]) -> StepModel:
    """Least squares on relative error with every coefficient >= 0: a negative one is held at
    zero and the rest refitted, until none is negative."""
    x = np.array([features(s, knots) for s in shapes]) / np.array(ms)[:, None]
    y = np.ones(len(ms))
    free = list(range(x.shape[1]))
    while True:
        coef = np.zeros(x.shape[1])
        coef[free] = np.linalg.lstsq(x[:, free], y, rcond=None)[0]
        worst = int(np.argmin(coef))
        if coef[worst] >= 0:
            return StepModel.from_coefficients(coef.tolist(), knots, "")
        free.remove(worst)


def relative_errors(model: StepModel, shapes: list[StepShape], ms: list[float]) -> list[float]:
    return [abs(model.predict(s) - m) / m for s, m in zip(shapes, ms)]


def fit(shapes: list[StepShape], ms: list[float], candidates=FULL.knot_candidates) -> tuple[StepModel, dict]:
    """The candidate form with the smallest mean error on the held-out shapes, fitted on the others;
    and a report: each candidate's held-out mean and max relative error, and the chosen knots."""
    held = [i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1 for i in range(len(shapes))]
    train = [(s, m) for s, m, h in zip(shapes, ms, held) if not h]
    test = [(s, m) for s, m, h in zip(shapes, ms, held) if h]
    scored = []
    for knots in candidates:
        if len(train) < len(knots) + 5:                    # too few shapes for this many coefficients
            continue
        model = fit_form(*zip(*train), knots)
        errors = relative_errors(model, *zip(*test))
        scored.append((statistics.fmean(errors), max(errors), knots, model))
    mean_err, max_err, knots, model = min(scored, key=lambda s: s[0])
    errors = relative_errors(model, *zip(*test))
    report = {"knots": list(knots), "heldout_mean_error": mean_err, "heldout_max_error": max_err,
              "heldout_median_error": statistics.median(errors),
              "train_shapes": len(train), "heldout_shapes": len(test),
              "candidates": [{"knots": list(k), "heldout_mean_error": e, "heldout_max_error": m}
                             for e, m, k, _ in scored]}
    return model, report


def calibrate(model, max_num_seqs: int = 64, budget_s: float = 100.0, quick: bool = False,
              progress=None) -> Profile:
    """Measure and fit the step model of a loaded model on its device, within about `budget_s`
    seconds; `quick`: a small grid, one or two timed passes and the simpler forms, for an estimate
in seconds.
    The profile is returned, not saved (engine.profile.save_profile stores it)."""
    t0 = time.perf_counter()
    load_before = os.getloadavg()[0]
    g = QUICK if quick else FULL
    engine = build_engine(EngineConfig(model=model.name, kv_pool_tokens=g.pool_tokens),
                          SchedulerPolicy(kv_capacity_tokens=g.pool_tokens), model)
    steps = grid(max_num_seqs, model.max_model_len, g)
    ms = time_steps(engine.executor, engine.clock, engine.pool, steps,
                    budget_s - (time.perf_counter() - t0), progress, g.passes)
    shapes = [step_shape(plan_for(chunks)) for chunks in steps]
    step_model, report = fit(shapes, ms, g.knot_candidates)
    if not quick:                   # a quick estimate skips the loop's real run (a few seconds)
        loop = loop_ms(model)
        step_model = replace(step_model, fixed_ms=step_model.fixed_ms + loop)
        report["loop_ms"] = round(loop, 3)
    dtype, device = str(model.dtype).replace("torch.", ""), str(model.device)
    label = "quick estimate, " if quick else "calibrated: "
    key = current_key(model.name, dtype, device)
    step_model = replace(step_model, label=f"{label}{model.name} in {dtype} on {key['machine']}")
    return Profile(**key, step_model=step_model, fit={**report, "quick": quick, "cores": os.cpu_count(),
                                                       "load_average": max(load_before, os.getloadavg()[0])},
                   measurements=[[*s, m] for s, m in zip(shapes, ms)], measured_s=time.perf_counter() - t0)
