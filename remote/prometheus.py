"""Running, waiting and KV usage read from an engine's Prometheus metrics page.

Each engine publishes the same three facts under its own names. The first engine whose
names appear on the page is the one read; a value the engine does not publish stays None
(TGI has no KV usage gauge, nor has llama.cpp's server since its KV cache became one unified
pool). Samples of one name are summed over their labels (several models or engines on one page
add up); KV usage, a fraction, is averaged instead.

llama.cpp's `llama-server --metrics` (tools/server/server-task.cpp, `to_metrics`): running is
`llamacpp:requests_processing` (slots busy with a request), waiting is `llamacpp:requests_deferred`
(requests held back because no slot was free); older builds also printed
`llamacpp:kv_cache_usage_ratio` (0-1).
"""
from __future__ import annotations

from dataclasses import dataclass

import httpx2 as httpx
from prometheus_client.parser import text_string_to_metric_families

# engine: (running, waiting, KV usage 0-1); vLLM before v0.10 called KV usage gpu_cache_usage_perc
NAMES = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting",
             ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", ("sglang:token_usage",)),
    "tgi": ("tgi_batch_current_size", "tgi_queue_size", ()),
    "llamacpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred", ("llamacpp:kv_cache_usage_ratio",)),
}
# Each engine's name, as the page writes it
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI", "llamacpp": "llama.cpp (llama-server)"}


@dataclass(frozen=True, slots=True)
class EngineGauges:
    engine: str                  # vllm | sglang | tgi | llamacpp (ours publishes vLLM's names)
    running: float | None
    waiting: float | None
    kv_usage: float | None       # 0-1; None when the engine does not publish it


def values(text: str) -> dict[str, list[float]]:
    """Every sample on the page by its sample name (prometheus_client's parser)."""
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s.value)
    return out


def gauges(text: str) -> EngineGauges:
    """The three gauges from a metrics page; ValueError when no known engine's names are there."""
    found = values(text)
    for engine, (running, waiting, kv_names) in NAMES.items():
        if running in found or waiting in found:
            kv = next((found[n] for n in kv_names if n in found), None)
            return EngineGauges(engine, _sum(found.get(running)), _sum(found.get(waiting)),
                                None if not kv else sum(kv) / len(kv))
    known = ", ".join(n for running, waiting, _ in NAMES.values() for n in (running, waiting))
    raise ValueError(f"no known engine gauges on this metrics page (looked for {known})")


def fetch(url: str, timeout_s: float = 5.0) -> EngineGauges:
    """Read `url` (an engine's /metrics) now."""
    r = httpx.get(url, timeout=timeout_s)
    r.raise_for_status()
    return gauges(r.text)


def _sum(samples: list[float] | None) -> float | None:
    return None if samples is None else float(sum(samples))
