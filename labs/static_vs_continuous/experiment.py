"""Static vs continuous batching: the same seeded workload through both modes, and the numbers
the lab compares (throughput, latency, slot-steps left empty)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from analysis import membership
from analysis.frame_metrics import finished, wasted_slot_steps
from course import claims
from engine.core.config import SchedulerPolicy
from engine.runs.results import RunResult
from engine.runs.workload import SHORT_SPAN, WorkloadSpec
from labs.part import Part
from engine.sim.machine_speed import MachineSpeed
from labs.runs import estimate, frames, run_each, simulated_run, single_run

MODES = ("static", "continuous")
WORKLOADS = {   # key: (name shown, workload)
    "mixed": ("Mixed lengths",
              WorkloadSpec(num_requests=32, rate=8.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=96,
                           output_kind="uniform", output_lo=8, output_hi=64)),
    "short_long": ("Many short + one long",
                   WorkloadSpec(num_requests=32, rate=8.0, prompt_kind="uniform", prompt_lo=32, prompt_hi=64,
                                output_kind="short_plus_long", output_lo=8, output_hi=192)),
    "offline_equal": ("Offline batch, equal lengths",
                      # long enough (8 batches of 64 tokens) that the two modes' finishing times are
                      # told apart by more than this machine's run-to-run noise
                      WorkloadSpec(num_requests=64, rate=0, prompt_kind="fixed", prompt_lo=48, prompt_hi=48,
                                   output_kind="fixed", output_lo=64, output_hi=64)),
}
SLOTS = 8


def workload_help() -> str:
    """What each workload sends, from its spec."""
    out = []
    for name, spec in WORKLOADS.values():
        o = spec.output_len
        lengths = {"uniform": f"outputs between {o.lo} and {o.hi} tokens",
                   "fixed": f"every output {o.lo} tokens",
                   "short_plus_long": f"the first request writes {o.hi} tokens, every other one {o.lo} to {SHORT_SPAN * o.lo}"}
        arrive = "every request arrives at once" if spec.rate == 0 else f"about {spec.rate:g} arrivals a second"
        out.append(f"{name}: {spec.num_requests} requests, {lengths.get(o.kind, o.kind)}; {arrive}.")
    return " ".join(out)


def workload_spec(workload: str, seed: int = 0) -> WorkloadSpec:
    return replace(WORKLOADS[workload][1], seed=seed)


def mode_policy(mode: str, max_num_seqs: int = SLOTS) -> SchedulerPolicy:
    return SchedulerPolicy(mode=mode, max_num_seqs=max_num_seqs)


def both_modes(model, workload: str, max_num_seqs: int = SLOTS, seed: int = 0, progress=None,
               refresh: bool = False, peek: bool = False) -> dict | None:
    """The same seeded workload in static and in continuous mode: {mode: (RunResult, was_cached)}."""
    spec = workload_spec(workload, seed)
    runs = run_each(MODES, lambda mode, p: single_run(model, mode_policy(mode, max_num_seqs), spec, p, label=mode,
                                                      refresh=refresh, peek=peek), progress)
    return None if runs is None else {mode: (res, hit) for mode, res, hit in runs}


def simulated_modes(step_model, workload: str, max_num_seqs: int = SLOTS, seed: int = 0) -> dict:
    """both_modes on the simulator (labs.runs.simulated_run): {mode: (RunResult, False)}, in milliseconds."""
    spec = workload_spec(workload, seed)
    return {mode: (simulated_run(step_model, mode_policy(mode, max_num_seqs), spec, label=mode), False)
            for mode in MODES}


def estimate_s(model, workload: str, max_num_seqs: int = SLOTS, seed: int = 0) -> tuple[float, MachineSpeed]:
    """(seconds, this machine's step model) both runs take on this machine."""
    spec = workload_spec(workload, seed)
    return estimate(model, [(mode_policy(mode, max_num_seqs), [Part(spec)]) for mode in MODES])


SAME_WITHIN = 0.05         # finishing times this close count as the same
SAME = "about the same"
FINISH_CHOICES = ("static", "continuous", SAME)


def first_to_finish(durations: dict[str, float]) -> str:
    """Which mode finished its last request first: "static", "continuous", or SAME (within SAME_WITHIN)."""
    s, c = durations["static"], durations["continuous"]
    if abs(s - c) <= SAME_WITHIN * max(s, c):
        return SAME
    return "static" if s < c else "continuous"


def long_request_id(requests: pd.DataFrame) -> str | None:
    """The request with the most output tokens (in "many short + one long": the long one)."""
    if len(requests) == 0:
        return None
    return str(requests.loc[pd.to_numeric(requests["output_tokens"]).idxmax(), "id"])


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
        "wasted_slot_steps": wasted_slot_steps(steps, max_slots),
        "slot_steps": busy * max_slots,
        "slot_use": float(counts[counts > 0].sum() / (busy * max_slots)) if busy else math.nan,
        "long_id": long_id,
        "long_e2e_s": float(long_row["e2e_s"]) if long_row is not None else math.nan,
        "long_output_tokens": int(long_row["output_tokens"]) if long_row is not None else 0,
    }


# The workloads each claim is about: its verdict is shown on these only (on the others it would
# judge a claim on traffic it says nothing about; tests/test_claims.py decides each counter-case).
CLAIM_WORKLOADS = {"continuous_beats_static": ("mixed", "short_long"),
                   "static_fine_offline": ("offline_equal",)}


def about(verdict: claims.Verdict, workload: str) -> bool:
    """Whether `verdict`'s claim is about `workload`."""
    return workload in CLAIM_WORKLOADS[verdict.claim.id]


def verdicts(static: dict, continuous: dict, workload: str) -> list[claims.Verdict]:
    """The lab's two claims on one pair of runs (mode_summary of each): continuous batching cuts the
    tail of TTFT on mixed lengths, and an offline batch of equal lengths finishes together."""
    name = WORKLOADS[workload][0].lower()
    ttft = claims.ratio(static["ttft_p95_s"], continuous["ttft_p95_s"])
    ttft_numbers = (f"p95 TTFT was {static['ttft_p95_s']:.2f} s under static and {continuous['ttft_p95_s']:.2f} s "
                    f"under continuous (×{ttft:.2f}); wasted slot-steps (slots left empty while requests waited): "
                    f"{static['wasted_slot_steps']:,} under static, {continuous['wasted_slot_steps']:,} under continuous.")
    beats = claims.judge(
        "continuous_beats_static", ttft,
        ttft_numbers + " Under static a request that arrives while a batch runs waits for the batch's longest "
                       "member; under continuous it takes the next free slot.",
        ttft_numbers + (f" On this workload ({name}) " + ("no batch waits for a longer member, so the modes "
                        "admit alike." if static["wasted_slot_steps"] == 0 else
                        "the wait for a batch's longest member is short next to the rest of a request's life.")))
    apart = abs(claims.ratio(static["duration_s"], continuous["duration_s"]) - 1)
    dur_numbers = (f"Static took {static['duration_s']:.2f} s and continuous {continuous['duration_s']:.2f} s "
                   f"({apart:.0%} apart), with {static['wasted_slot_steps']:,} and {continuous['wasted_slot_steps']:,} "
                   "wasted slot-steps.")
    same_work = static["steps"] == continuous["steps"] and static["wasted_slot_steps"] == continuous["wasted_slot_steps"]
    noisy = (dur_numbers + " Both modes ran the very same steps, so the gap is the machine running at another speed "
             "during one run (a busy machine): run them again.") if same_work and apart > 0.05 else None
    fine = claims.judge(
        "static_fine_offline", apart,
        dur_numbers + f" On this workload ({name}) nothing is gained by deciding membership every step.",
        dur_numbers + f" On this workload ({name}) lengths or arrival times differ, so static batches keep "
                      "slots empty that continuous refills.", noisy)
    return [beats, fine]
