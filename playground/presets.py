"""Presets: the workloads from lesson 6's table and one past capacity, each with a policy to start
from and why.

A preset fixes the workload's shape and the policy (`changes`, only the knobs it moves from the
Playground's defaults) and sizes the rest to the engine it runs on, from that engine's step
model (this machine's calibrated profile, engine/sim/profile.py, or a simulated device's roofline
model, engine/sim/roofline.py):
  - the arrival rate is a fraction of the engine's capacity for that workload and policy
    (playground/capacity.py), so "60% load" is 60% load on a laptop or on a GPU;
  - the SLO targets are multiples of what the engine does: TTFT of a lone long prompt, and the
    step a decoding request meets with a full batch and a prefill chunk (or, for a static batch,
    the whole batch's time), so each preset meets the target it is meant to meet (`meets`), or
    misses the one it is meant to miss (`misses`), on any machine.
`caption` says what the learner should see. Nothing here depends on how many requests there are:
a preset works with a finite workload and with continuous traffic. No Streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.core.config import SLO_KNOBS
from engine.core.step_model import StepModel

from playground.capacity import Capacity, capacity
from playground.setup import KNOBS, Setup


def two_digits(x: float) -> float:
    """x rounded to two significant digits: 0.8437 -> 0.84, 23.6 -> 24."""
    return float(f"{x:.2g}")


@dataclass(frozen=True, slots=True)
class Preset:
    id: str
    title: str
    why: str              # one line: what this workload needs and why the policy suits it
    good: str             # what the learner should see when it runs
    changes: dict         # knob name -> value, only where the preset differs from the defaults
    load: float           # arrival rate as a fraction of capacity; 0: everything at once
    ttft: tuple           # TTFT target: (multiple, Capacity field it multiplies)
    tpot: tuple           # TPOT target: (multiple, Capacity field)
    meets: tuple = ()     # the targets its p95 is meant to stay under: "ttft", "tpot"
    misses: tuple = ()    # the targets its p95 is meant to go over

    @property
    def caption(self) -> str:
        """What the learner should see, its load filled in."""
        return self.good.format(load=f"{self.load:.0%}")

    def capacity(self, model: StepModel) -> Capacity:
        """This machine's capacity for the preset's workload and policy."""
        return capacity(model, Setup(**self.changes))

    def setup_for(self, model: StepModel) -> Setup:
        """The preset on the machine whose step times `model` predicts."""
        cap = self.capacity(model)
        sized = {"rate": two_digits(self.load * cap.rate) if self.load else 0.0,
                 "ttft_slo_s": two_digits(self.ttft[0] * getattr(cap, self.ttft[1])),
                 "tpot_slo_s": two_digits(self.tpot[0] * getattr(cap, self.tpot[1]))}
        # Targets on their sliders, so the page shows the preset as it runs (a very slow
        # machine's batch job could otherwise ask for a target past the slider's end).
        for name in SLO_KNOBS:
            sized[name] = KNOBS[name].clamp(sized[name])
        return Setup(**self.changes, **sized)


PRESETS: dict[str, Preset] = {p.id: p for p in (
    Preset(
        "interactive_chat", "Interactive chat",
        "People watch the first token and the smoothness of the stream: continuous batching lets "
        "a new chat join the running batch at once, and small prefill chunks stop a pasted "
        "document from freezing everyone else.",
        "Good: at {load} of the engine's capacity the waiting line stays near zero, p95 TTFT and "
        "p95 TPOT stay under their targets, and goodput matches finished requests per second.",
        dict(prompt_kind="longtail", prompt_lo=48, prompt_hi=768, output_lo=32, output_hi=128,
             max_num_batched_tokens=256, long_prefill_token_threshold=128),
        load=0.6, ttft=(3.0, "ttft_long_s"), tpot=(1.5, "chunk_step_s"), meets=("ttft", "tpot")),
    Preset(
        "batch_summarization", "Batch summarization",
        "Nobody waits on a single answer, so tokens per second is what counts: everything arrives "
        "at once and large static batches keep every step full.",
        "Good: tokens/s far above the interactive presets', every slot busy until a batch drains. "
        "p95 TTFT is long (later requests wait for a whole batch) yet inside the job's target, "
        "and p95 TPOT under its target.",
        dict(num_requests=48, prompt_lo=256, prompt_hi=512, output_lo=48, output_hi=96,
             mode="static", max_num_seqs=32, max_num_batched_tokens=2048, kv_capacity_tokens=16384),
        load=0.0, ttft=(2.5, "batch_s"), tpot=(1.5, "batch_tpot_s"), meets=("ttft", "tpot")),
    Preset(
        "long_context_rag", "Long-context RAG",
        "One huge retrieved context can take over a step and a large share of the KV cache: chunk "
        "prefills, cap the chunk, and turn requests away when the queue is long.",
        "Good: each long prompt is cut into chunks, so the decoding requests keep their pace: p95 "
        "TPOT stays under its target while long prompts come in, and so does p95 TTFT at {load} load.",
        dict(prompt_lo=768, prompt_hi=1536, output_lo=32, output_hi=96, max_num_seqs=8,
             long_prefill_token_threshold=256, kv_capacity_tokens=12288, max_waiting=6),
        load=0.5, ttft=(3.5, "ttft_long_s"), tpot=(1.0, "chunk_step_s"), meets=("ttft", "tpot")),
    Preset(
        "multi_tenant_api", "Multi-tenant API",
        "One heavy customer should not set everyone else's latency: bursty traffic from four "
        "tenants, admitted in turns with the fair order.",
        "Good: at {load} load, bursts fill the waiting line for a moment and it drains between "
        "them; the fair order shares the wait, and p95 TPOT stays under its target throughout.",
        dict(burstiness=2.0, prompt_hi=256, output_hi=96, tenants=4, order="fair"),
        load=0.6, ttft=(2.5, "ttft_long_s"), tpot=(1.5, "chunk_step_s"), meets=("tpot",)),
    Preset(
        "agent_tool_calls", "Agent tool calls",
        "Calls come one after another and a person waits on the whole chain, so every delay adds "
        "up: small batches, short outputs, tight latency targets.",
        "Good: at {load} load on small batches, p95 TTFT and p95 TPOT stay close to a lone request's "
        "and under their tight targets, so a chain of calls does not add up to a long wait.",
        dict(burstiness=0.5, prompt_lo=128, prompt_hi=384, output_lo=8, output_hi=32, max_num_seqs=4),
        load=0.4, ttft=(2.5, "ttft_long_s"), tpot=(1.5, "chunk_step_s"), meets=("ttft", "tpot")),
    Preset(
        "rush_hour", "Rush hour (over capacity)",
        "More requests arrive than the engine can serve, so no policy can keep up: the waiting "
        "line grows for as long as the rush lasts, and so does everyone's wait for a first token.",
        "Good: you see why capacity matters. At {load} of capacity batches stay full and p95 TPOT "
        "meets its target, but the waiting line climbs and p95 TTFT goes far over its target; "
        "lower the rate to recover.",
        dict(prompt_hi=256, output_hi=96),
        load=1.5, ttft=(2.5, "ttft_long_s"), tpot=(1.5, "chunk_step_s"), meets=("tpot",), misses=("ttft",)),
)}


def matching_preset(setup: Setup, model: StepModel) -> str | None:
    """The id of the preset this setup equals on the engine whose step times `model` predicts
    (seed and traffic kind aside), if any."""
    for p in PRESETS.values():
        if p.setup_for(model).changed(seed=setup.seed, continuous=setup.continuous) == setup:
            return p.id
    return None
