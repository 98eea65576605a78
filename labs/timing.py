"""How long a lab's runs will take on this machine, said before they run.

The cost model (build_engine with no model: each step's time predicted from its shape, on a
virtual clock) replays a run's workload in a blink. It was set by hand for one kind of machine,
so every real measurement here also records how long it took against how long the cost model
said (a ledger per machine, next to the cached results). An estimate is the cost model's run
with its step times scaled by this machine's measured ratio; before anything was measured on
a machine, it is the cost model's own guess, and the pages say so.

No Streamlit here.
"""
from __future__ import annotations

import json

from engine.runs import results
from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.runs.workload import WorkloadSpec
from labs.part import Part

_SIMULATED: dict[str, list] = {}     # job -> its simulated steps, for pages that redraw often


def _ledger_path(machine: dict) -> str:
    return results.cache_path("speed", machine)


def speed_factor(machine: dict) -> float | None:
    """This machine's measured seconds per cost-model second, or None before its first measurement.
    `machine` is labs.runs.fingerprint(model)."""
    data = results.stored(_ledger_path(machine))
    if not data or data["predicted_s"] <= 0:
        return None
    return data["measured_s"] / data["predicted_s"]


def learn(machine: dict, predicted_s: float, measured_s: float) -> None:
    """Add one measurement's busy time, and what the cost model predicted for it, to the ledger."""
    if predicted_s <= 0 or measured_s <= 0:
        return
    path = _ledger_path(machine)
    data = results.stored(path) or {"predicted_s": 0.0, "measured_s": 0.0, "runs": 0}
    results.store(path, {"predicted_s": data["predicted_s"] + predicted_s,
                         "measured_s": data["measured_s"] + measured_s, "runs": data["runs"] + 1})


def simulate(policy: SchedulerPolicy, parts) -> list[tuple[float, float]]:
    """The (start, end) of every step of the workload `parts` (labs.runs.Part list) under `policy`
    on the cost model, in seconds from the first arrival."""
    engine = build_engine(EngineConfig(), policy)
    for part in parts:
        for r in build_requests(part.spec):
            if part.priority is not None:
                r.priority = part.priority
            engine.submit(r)
    engine.run(should_stop=_stalled(engine))
    first = min((r.arrival_s for r in engine.requests.values()), default=0.0)
    return [(s.t_start_s - first, s.t_end_s - first) for s in engine.steps]


def _stalled(engine, idle_loops: int = 1000):
    """should_stop for a cost-model run: true once the virtual clock has not moved for `idle_loops`
    turns of the engine loop (a static batch whose wait, rounded, never quite runs out), so an
    estimate can never hang the page."""
    seen = {"t": None, "same": 0}

    def stop() -> bool:
        now = engine.clock.now()
        seen["same"] = seen["same"] + 1 if now == seen["t"] else 0
        seen["t"] = now
        return seen["same"] > idle_loops
    return stop


def stretched_duration(steps: list[tuple[float, float]], factor: float) -> float:
    """How long the run takes when every step takes `factor` times as long. A step that followed
    an idle gap (it waited for an arrival) starts no earlier than it did; the others start as soon
    as the step before them ends."""
    end, previous_end = 0.0, 0.0
    for start, stop in steps:
        begin = max(end, start) if start > previous_end else end
        end, previous_end = begin + (stop - start) * factor, stop
    return end


def busy_s(steps: list[dict]) -> float:
    """Seconds a run's engine spent in steps (not waiting for arrivals)."""
    return sum(float(s["t_end_s"]) - float(s["t_start_s"]) for s in steps)


def estimate_runs(machine: dict, jobs) -> tuple[float, bool]:
    """(seconds, calibrated?) for the runs `jobs` = [(policy, parts)] on this machine."""
    factor = speed_factor(machine)
    total = 0.0
    for policy, parts in jobs:
        key = json.dumps([policy.to_dict(), [p.to_dict() for p in parts]], sort_keys=True)
        if key not in _SIMULATED:
            _SIMULATED[key] = simulate(policy, parts)
        total += stretched_duration(_SIMULATED[key], factor or 1.0)
    return total, factor is not None


def scaling_job(batch: int, context: int, steps: int):
    """The cost model's stand-in for timing one batch size (engine.step_times.measure_batch_scaling):
    `batch` prompts of `context` tokens prefilled in one step, then `steps` decode steps."""
    tokens = batch * (context + steps + 1)
    policy = SchedulerPolicy(max_num_seqs=batch, max_num_batched_tokens=max(batch * context, 16),
                             kv_capacity_tokens=max(tokens, 16))
    spec = WorkloadSpec(num_requests=batch, rate=0, prompt_kind="fixed", prompt_lo=context, prompt_hi=context,
                        output_kind="fixed", output_lo=steps + 1, output_hi=steps + 1)
    return policy, [Part(spec)]
