"""Runs on the real engine, as every lesson lab makes them: cached on disk, or only looked up.

No Streamlit here: the lab pages and `python -m tools.measure_all` call the same experiments
(labs/<lab>/experiment.py), so the numbers in the lessons' notes are the numbers the pages show.

Every run is cached on disk per machine and settings (engine.results), so a second visit
is instant. Each run function takes `peek=True` to return only what is already cached (None
otherwise) without touching the model: a page can show stored results at once and measure
only when the learner presses its button.

`model` is a LoadedModel, or the name of one ("smollm2"): a name is enough to find cached
results (it fingerprints the machine exactly as the loaded model would); measuring needs
the real thing.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass

import pandas as pd

from engine.core import step_fit
from engine.runs import results
from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine
from engine.runs.closed_loop import run_closed_loop
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.runs.results import RunResult
from engine.sim.machine_speed import MachineSpeed, machine_speed
from engine.sim.simulate import SimProfile, build_simulation, simulate
from engine.runs.workload import PromptMaker, WorkloadSpec
from labs.part import Part


@dataclass(frozen=True)
class ModelRef:
    """Stands in for a loaded model when only its cache fingerprint is needed."""
    name: str
    device: object
    dtype: object


@functools.cache
def _model_ref(name: str) -> ModelRef:
    """What `load_model(name)` would load, as far as the fingerprint goes, without loading weights."""
    from engine.model.model import resolve_device, resolve_dtype
    dev = resolve_device("auto")
    return ModelRef(name, dev, resolve_dtype("auto", dev))


def fingerprint(model) -> dict:
    """results.machine_fingerprint of a loaded model, or of the one a model name would load."""
    return results.machine_fingerprint(_model_ref(model) if isinstance(model, str) else model)


# A wrapper for every measurement: `run_guard(measure, refresh)` calls `measure(refresh)` and returns
# its (result, was_cached). None (the pages) just measures. `python -m tools.measure_all` sets one that
# waits for other processes to go quiet and measures again when they disturbed a run.
run_guard = None


def _guarded(measure, refresh: bool):
    return measure(refresh) if run_guard is None else run_guard(measure, refresh)


def _need_model(model):
    if isinstance(model, str):
        raise RuntimeError("measuring needs the loaded model, not its name")
    return model


# ----------------------------------------------------------------------------- the on-disk cache


def cached(path: str, model, compute, refresh: bool, peek: bool, load=lambda data: data, dump=lambda result: result):
    """(result, was_cached): the JSON stored at `path`, or `compute(model)` stored there.

    With peek=True only the stored result, or None: the model is not touched. `load` / `dump`
    turn the stored JSON into the result and back (for a RunResult: RunResult(**data) / asdict).
    """
    if peek:
        data = None if refresh else results.stored(path)
        return None if data is None else (load(data), True)
    model = _need_model(model)

    def measure(again: bool):
        data = None if again else results.stored(path)
        if data is not None:
            return load(data), True
        result = compute(model)
        results.store(path, dump(result))
        return result, False
    return _guarded(measure, refresh)


# ----------------------------------------------------------------------------- runs


def single_run(model, policy: SchedulerPolicy, spec: WorkloadSpec, progress=None, label: str = "",
               refresh: bool = False, peek: bool = False) -> tuple[RunResult, bool] | None:
    """results.cached_run, or with peek=True the stored result only (None if there is none)."""
    if peek:   # the file results.cached_run stores this run in
        data = results.stored(results.run_path(fingerprint(model), policy, spec))
        return None if data is None else (RunResult(**data), True)
    model = _need_model(model)

    return _guarded(lambda again: results.cached_run(model, policy, spec, progress=progress, label=label,
                                                     refresh=again), refresh)


def simulated_run(step_model, policy: SchedulerPolicy, spec: WorkloadSpec, label: str = "") -> RunResult:
    """The run single_run measures, on the simulator instead (engine.simulate): the same scheduler,
    each step's time from `step_model` on a virtual clock. Nothing is cached; it takes milliseconds.
    Its summary says "simulated": true and names the step model."""
    return simulated_mix_run(step_model, policy, [Part(spec)], label)


def arrival_rate(load: float, capacity: float) -> float:
    """A lab's arrival rate: `load` x the predicted capacity, to three significant digits, so the
    runs use (and are stored under) the rate the page shows: "16.5", not "16.493"."""
    return float(f"{load * capacity:.3g}")


def simulated_name(step_model) -> str:
    """A simulated curve's name in a chart's legend: "simulated (step model: <what it is>)", from its
    label up to the first comma and without its parenthesised advice (the hand-set guess's "run
    `python -m engine calibrate`"), with its current error where it has one. The whole label (the
    machine, the refit) is in the page's caption: in a legend it ran past the chart's edge."""
    label = getattr(step_model, "label", "") or "unnamed"
    error = getattr(step_model, "error", None)
    kind = label.split(" (")[0].split(", ")[0]
    return f"simulated (step model: {kind}{'' if error is None else f', current error {100 * error:.0f}%'})"


def estimate(model, jobs) -> tuple[float, MachineSpeed]:
    """How long the real runs `jobs` = [(policy, parts)] take on this machine, and the step model that
    says so: each run on the simulator with this machine's step model (engine.sim.machine_speed: its
    profile refit from the app's own real steps, or the hand-set guess), from its first arrival to its
    last step's end. widgets.estimate_text shows it as a range from that model's current error."""
    speed = machine_speed(model)
    return sum(_simulated_s(speed.step_model, policy, parts) for policy, parts in jobs), speed


_SECONDS: dict[tuple, float] = {}     # (step model's costs, job) -> seconds: pages redraw their buttons often
_SECONDS_KEPT = 512


def _simulated_s(step_model, policy: SchedulerPolicy, parts: list[Part]) -> float:
    """One run's seconds on the simulator, from its first arrival to its last step's end."""
    key = (step_model.knots, tuple(step_model.coefficients),
           json.dumps([policy.to_dict(), [p.to_dict() for p in parts]], sort_keys=True))
    if key not in _SECONDS:
        engine = simulate(EngineConfig(), policy, SimProfile("estimate", "estimate", step_model), _part_requests(parts))
        first = min((r.arrival_s for r in engine.requests.values()), default=0.0)
        if len(_SECONDS) >= _SECONDS_KEPT:
            _SECONDS.clear()
        _SECONDS[key] = max((s.t_end_s for s in engine.steps), default=first) - first
    return _SECONDS[key]


def mix_run(model, policy: SchedulerPolicy, parts: list[Part], progress=None, label: str = "",
            refresh: bool = False, peek: bool = False) -> tuple[RunResult, bool] | None:
    """Several workload streams (different tenants, lengths, start times) through one engine run.

    Cached like results.cached_run, keyed by machine, policy and every part.
    """
    config = EngineConfig()
    path = results.cache_path("mix", fingerprint(model), policy.to_dict(),
                              [p.to_dict() for p in parts], asdict(config))
    return cached(path, model, lambda m: _run_parts(m, policy, parts, config, progress, label), refresh, peek,
                  load=lambda data: RunResult(**data), dump=asdict)


def _part_requests(parts: list[Part], prompts: PromptMaker | None = None) -> list:
    """Every part's requests, carrying the part's tenant, priority and TTFT target."""
    out = []
    for part in parts:
        for r in build_requests(part.spec, prompts):
            if part.tenant is not None:
                r.tenant = part.tenant
            if part.priority is not None:
                r.priority = part.priority
            r.ttft_slo_s = part.ttft_slo_s
            out.append(r)
    return out


def simulated_mix_run(step_model, policy: SchedulerPolicy, parts: list[Part], label: str = "") -> RunResult:
    """mix_run on the simulator, as simulated_run is single_run's: milliseconds, nothing cached."""
    name = getattr(step_model, "label", "") or "step model"
    profile = SimProfile(name, name, step_model)
    engine = simulate(EngineConfig(), policy, profile, _part_requests(parts))
    result = results.result_of(engine, policy, label)
    result.summary.update(profile.summary_fields())
    return result


def _run_parts(model, policy, parts, config, progress, label) -> RunResult:
    engine = build_engine(config, policy, model)
    step_fit.record_steps(engine, model)       # the app's step model learns from a lab's real steps too
    for r in _part_requests(parts, PromptMaker(model.tokenizer)):
        engine.submit(r)
    return results.run_to_end(engine, policy, progress, label)


def closed_run(model, policy: SchedulerPolicy, spec: WorkloadSpec, concurrency: int, progress=None,
               label: str = "", refresh: bool = False, peek: bool = False) -> tuple[RunResult, bool] | None:
    """`spec`'s requests, in order, from `concurrency` clients that each send the next one when their
    last one ends (engine.runs.closed_loop): the arrival times `spec` draws are not used. Cached like
    single_run, keyed by the concurrency too."""
    config = EngineConfig()
    path = results.cache_path("closed", fingerprint(model), policy.to_dict(), spec.to_dict(), concurrency,
                              asdict(config))

    def compute(m):
        engine = build_engine(config, policy, m)
        requests = build_requests(spec, PromptMaker(m.tokenizer))
        total = max(1, sum(r.max_new_tokens for r in requests))

        def on_step(rec):
            if progress is not None:
                done = sum(len(r.output_token_ids) for r in engine.requests.values())
                progress(min(1.0, done / total), f"{label} step {rec.step}: {done}/{total} tokens")
        run_closed_loop(engine, requests, concurrency, on_step)
        return results.result_of(engine, policy, label)
    return cached(path, model, compute, refresh, peek, load=lambda data: RunResult(**data), dump=asdict)


def simulated_closed_run(step_model, policy: SchedulerPolicy, spec: WorkloadSpec, concurrency: int,
                         label: str = "") -> RunResult:
    """closed_run on the simulator, as simulated_run is single_run's."""
    name = getattr(step_model, "label", "") or "step model"
    profile = SimProfile(name, name, step_model)
    engine = build_simulation(EngineConfig(), policy, profile)
    run_closed_loop(engine, build_requests(spec), concurrency)
    result = results.result_of(engine, policy, label)
    result.summary.update(profile.summary_fields())
    return result


def run_each(settings, run_one, progress=None, describe=str) -> list[tuple] | None:
    """One run per setting: [(setting, RunResult, was_cached)], or None as soon as one is not stored.

    `run_one(setting, progress)` is a single_run or mix_run (None when peeking finds nothing);
    the overall progress bar moves through the settings in turn, each named by `describe`.
    """
    settings = list(settings)
    out = []
    for i, setting in enumerate(settings):
        sub = None
        if progress is not None:
            sub = (lambda f, text, i=i, what=describe(setting):
                   progress(min(1.0, (i + f) / len(settings)), f"{what}: {text}"))
        got = run_one(setting, sub)
        if got is None:
            return None
        out.append((setting, *got))
    return out


def frames(result: RunResult) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(requests, steps) DataFrames in the CLI's CSV formats."""
    return pd.DataFrame(result.requests), pd.DataFrame(result.steps)
