"""Presets: the workloads from lesson 6's table, each with a policy to start from and why.

A preset sets workload, policy and SLO targets together, and lists only the knobs it changes
from the Playground's defaults (every other knob keeps its default). Sizes suit SmolLM2-135M
on a two-core CPU (a decode step of 16 sequences takes tens of milliseconds): every preset
finishes in a minute or two. No Streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass

from playground.setup import Setup


@dataclass(frozen=True, slots=True)
class Preset:
    id: str
    title: str
    why: str          # one line: what this workload needs and why the policy suits it
    changes: dict     # knob name -> value, only where the preset differs from the defaults

    @property
    def setup(self) -> Setup:
        return Setup(**self.changes)


PRESETS: dict[str, Preset] = {p.id: p for p in (
    Preset(
        "interactive_chat", "Interactive chat",
        "People watch the first token and the smoothness of the stream: continuous batching with "
        "a modest batch keeps steps short, and chunked prefill stops a pasted document from "
        "freezing everyone else.",
        dict(num_requests=60, rate=3.0, prompt_kind="longtail", prompt_lo=48, prompt_hi=768,
             output_lo=32, output_hi=128, max_num_seqs=8, max_num_batched_tokens=256,
             long_prefill_token_threshold=128, ttft_slo_s=1.0, tpot_slo_s=0.15)),
    Preset(
        "batch_summarization", "Batch summarization",
        "Nobody waits on a single answer, so tokens per second is what counts: everything arrives "
        "at once and large static batches keep every step full.",
        dict(num_requests=48, rate=0.0, prompt_lo=256, prompt_hi=512, output_lo=48, output_hi=96,
             mode="static", max_num_seqs=32, max_num_batched_tokens=2048,
             kv_capacity_tokens=16384, ttft_slo_s=30.0, tpot_slo_s=1.0)),
    Preset(
        "long_context_rag", "Long-context RAG",
        "One huge retrieved context can take over a step and a large share of the KV cache: chunk "
        "prefills, cap the chunk, and turn requests away when the queue is long.",
        dict(num_requests=24, rate=0.5, prompt_lo=768, prompt_hi=1536, output_lo=32, output_hi=96,
             max_num_seqs=8, long_prefill_token_threshold=256, kv_capacity_tokens=12288,
             max_waiting=6, ttft_slo_s=5.0, tpot_slo_s=0.25)),
    Preset(
        "multi_tenant_api", "Multi-tenant API",
        "One heavy customer should not set everyone else's latency: bursty traffic from four "
        "tenants, admitted in turns with the fair order.",
        dict(num_requests=100, rate=5.0, burstiness=2.0, prompt_hi=256, output_hi=96, tenants=4,
             order="fair", tpot_slo_s=0.2)),
    Preset(
        "agent_tool_calls", "Agent tool calls",
        "Calls come one after another and a person waits on the whole chain, so every delay adds "
        "up: small batches, short outputs, tight latency targets.",
        dict(num_requests=40, rate=2.0, burstiness=0.5, prompt_lo=128, prompt_hi=384,
             output_lo=8, output_hi=32, max_num_seqs=4, ttft_slo_s=0.5, tpot_slo_s=0.1)),
)}


def matching_preset(setup: Setup) -> str | None:
    """The id of the preset this setup equals (seed aside), if any."""
    for p in PRESETS.values():
        if p.setup.changed(seed=setup.seed) == setup:
            return p.id
    return None
