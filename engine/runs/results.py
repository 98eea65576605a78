"""Results: blocking runs and sweeps on the real engine, cached on disk per machine and settings.

The lesson labs call these: "run this seeded workload under this policy", "sweep this knob".
A result is plain data (rows in the CLI's CSV formats plus the summary), so it can be cached
as JSON: a second visit with the same machine, model, policy and workload is instant.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass, field

from ..core import step_fit
from .arrivals import build_requests
from .build import build_engine
from ..core.config import EngineConfig, SchedulerPolicy
from ..core.engine import Engine
from ..core.metrics import SLO, request_row, step_row, summarize
from ..settings import cache_root
from .workload import PROMPTS_PATH, PromptMaker, WorkloadSpec


CACHE_VERSION = 5     # 2: requests drawn by engine.arrivals; 3: step members stored as (id, phase, tokens);
                      # 4: prompt content drawn from its own stream (other lengths and arrivals);
                      # 5: a step's `running` counts the slots held at its end, and steps carry their counts


def cache_dir() -> str:
    path = os.path.join(cache_root(), "results")
    os.makedirs(path, exist_ok=True)
    return path


def machine_fingerprint(model) -> dict:
    import torch
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    from ..model.runner import fast_paths
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu, "torch": torch.__version__,
            "model": model.name, "device": str(model.device), "dtype": str(model.dtype),
            "fast_paths": fast_paths(model.device, model.dtype), "forward_code": _forward_code_digest()}


def _files_digest(*paths: str) -> str:
    """A short hash of the files' contents, in order: changed files make new cache keys."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _forward_code_digest() -> str:
    """Timings belong to the code that ran the forward: a changed runner means new measurements,
    and so does another vector path of the C kernels (the code the CPU ran is another build)."""
    from ..model.kernel_paths import chosen_path
    model = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "model")
    names = ("runner.py", "linear.py", "cpu_kernels.c", "host_memory.py")
    return f"{_files_digest(*(os.path.join(model, name) for name in names))}-{chosen_path() or 'no-kernels'}"


@dataclass
class RunResult:
    requests: list[dict]
    steps: list[dict]
    summary: dict
    marks: list[dict] = field(default_factory=list)
    label: str = ""


def cache_path(kind: str, *parts) -> str:
    """Where a result of this kind ("run", "scaling"...) and these settings is stored. Runs drawn
    from a different prompt set are different runs: the prompt file's hash joins every key."""
    blob = json.dumps([_files_digest(PROMPTS_PATH), CACHE_VERSION, *parts], sort_keys=True, default=str)
    return os.path.join(cache_dir(), f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:24]}.json")


def run_workload(model, policy: SchedulerPolicy, spec: WorkloadSpec, config: EngineConfig | None = None,
                 progress=None, prompts: PromptMaker | None = None, label: str = "") -> RunResult:
    """One seeded workload through the real engine, start to finish. progress(fraction, text) is optional."""
    engine = build_engine(config or EngineConfig(), policy, model)
    step_fit.record_steps(engine, model)      # the app's step model learns from a lab's real steps too
    for r in build_requests(spec, prompts or PromptMaker(model.tokenizer)):
        engine.submit(r)
    return run_to_end(engine, policy, progress, label)


def run_to_end(engine: Engine, policy: SchedulerPolicy, progress=None, label: str = "") -> RunResult:
    """Run an engine whose requests are all submitted until every one is done, reporting progress."""
    total = max(1, sum(r.max_new_tokens for r in engine.pending))

    def on_step(rec):
        if progress is not None:
            done = sum(len(r.output_token_ids) for r in engine.requests.values())
            progress(min(1.0, done / total), f"{label} step {rec.step}: {done}/{total} tokens")

    engine.run(on_step=on_step)
    return result_of(engine, policy, label)


def result_of(engine: Engine, policy: SchedulerPolicy, label: str = "") -> RunResult:
    reqs = list(engine.requests.values())
    summary = summarize(reqs, engine.steps, SLO(policy.ttft_slo_s, policy.tpot_slo_s))
    summary.update(policy=policy.to_dict(), device=engine.executor.device, dtype=engine.executor.dtype)
    return RunResult([request_row(r) for r in reqs], [step_row(s) for s in engine.steps], summary,
                     [asdict(m) for m in engine.marks], label)


def stored(path: str):
    """The JSON stored at `path`, or None."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def store(path: str, data) -> None:
    """Write JSON to `path` whole or not at all (a reader never sees half a file)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, default=str)
    os.replace(tmp, path)


def run_path(fingerprint: dict, policy: SchedulerPolicy, spec: WorkloadSpec,
             config: EngineConfig | None = None) -> str:
    """Where the result of one run is stored, for a machine fingerprint (see machine_fingerprint)."""
    return cache_path("run", fingerprint, policy.to_dict(), spec.to_dict(), asdict(config or EngineConfig()))


def cached_run(model, policy: SchedulerPolicy, spec: WorkloadSpec, config: EngineConfig | None = None,
               progress=None, label: str = "", refresh: bool = False) -> tuple[RunResult, bool]:
    """run_workload, or the stored result of the same run on this machine. Returns (result, was_cached)."""
    path = run_path(machine_fingerprint(model), policy, spec, config)
    data = None if refresh else stored(path)
    if data is not None:
        return RunResult(**data), True
    result = run_workload(model, policy, spec, config, progress, label=label)
    store(path, asdict(result))
    return result, False
