"""Every control of the Playground: its label, range and a plain-words help text.

One table, used twice: the page draws its widgets from it, and a link's query parameters
are clamped to the same ranges. No Streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.config import MODES, ORDERS
from engine.workload import LENGTH_KINDS

KV_POOL_TOKENS = 16384   # physical KV pool of a Playground run: the KV capacity slider's maximum


@dataclass(frozen=True, slots=True)
class Knob:
    name: str
    label: str
    help: str
    kind: str                     # "int" | "float" | "bool" | "choice"
    lo: float | None = None
    hi: float | None = None
    step: float | None = None
    choices: tuple[str, ...] = ()

    def clamp(self, value):
        """`value` forced into this knob's range and type (a choice outside the list is an error)."""
        if self.kind == "bool":
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(f"{self.name} must be 0 or 1 (got {value!r})")
            return bool(value)
        if self.kind == "choice":
            if value not in self.choices:
                raise ValueError(f"{self.name} must be one of {', '.join(self.choices)} (got {value!r})")
            return value
        number = float(value)
        if number != number:  # NaN
            raise ValueError(f"{self.name} is not a number")
        number = min(max(number, self.lo), self.hi)
        return int(round(number)) if self.kind == "int" else number


def _knobs(*items: Knob) -> dict[str, Knob]:
    return {k.name: k for k in items}


LENGTHS_HELP = ("fixed: every request has the 'from' length. uniform: anywhere in the range. "
                "longtail: most near 'from', a few reach 'to'. short_plus_long: the very first "
                "request is long ('to'), all the others short ('from' to twice that).")

KNOBS = _knobs(
    # ----- workload
    Knob("rate", "Arrival rate (requests/s)",
         "How many requests arrive per second on average. 0 means the whole workload arrives at "
         "once at the start, like an offline batch job.", "float", 0.0, 20.0, 0.5),
    Knob("burstiness", "Burstiness",
         "How clumped arrivals are. 1 = random (Poisson) arrivals; above 1 = bursts with quiet "
         "gaps between them; below 1 = evenly spaced, like a metronome.", "float", 0.25, 4.0, 0.25),
    Knob("prompt_kind", "Prompt lengths", "How prompt lengths are drawn. " + LENGTHS_HELP,
         "choice", choices=LENGTH_KINDS),
    Knob("prompt_lo", "Prompt tokens (from)", "Shortest prompt, in tokens (the chat template "
         "alone is about 30 tokens, so shorter prompts come out a little longer).",
         "int", 8, 1536, 8),
    Knob("prompt_hi", "Prompt tokens (to)", "Longest prompt, in tokens.", "int", 8, 1536, 8),
    Knob("output_kind", "Output lengths", "How many tokens each request asks the model to "
         "generate. " + LENGTHS_HELP, "choice", choices=LENGTH_KINDS),
    Knob("output_lo", "Output tokens (from)", "Fewest tokens a request generates.", "int", 1, 512, 1),
    Knob("output_hi", "Output tokens (to)", "Most tokens a request generates.", "int", 1, 512, 1),
    Knob("tenants", "Tenants",
         "How many customers send the requests. The first sends half of all traffic; the "
         "others share the rest. Matters for the 'fair' and 'priority' orders.", "int", 1, 8, 1),
    Knob("num_requests", "Requests",
         "How many requests the workload holds in total. Raising it during a run sends more.",
         "int", 1, 500, 1),
    Knob("seed", "Seed",
         "Fixes the random draws (arrival times, lengths, prompts): the same seed and settings "
         "give the same workload.", "int", 0, 1_000_000, 1),
    # ----- policy
    Knob("mode", "Batching mode",
         "static: a batch forms, runs until every member is done, and nobody joins in between. "
         "continuous: requests join and leave the batch at every step.", "choice", choices=MODES),
    Knob("max_num_seqs", "max_num_seqs (batch slots)",
         "The most requests that may share one engine step. 1 means no batching at all.",
         "int", 1, 64, 1),
    Knob("max_wait_ms", "max_wait_ms (static only)",
         "Static mode: start a partly filled batch once the oldest waiting request has waited "
         "this long, instead of waiting for every slot to fill.", "float", 0.0, 5000.0, 50.0),
    Knob("max_num_batched_tokens", "Token budget per step",
         "max_num_batched_tokens: the most tokens (prompt chunks plus one per decoding request) "
         "one step may carry. Bigger steps are more efficient but each one takes longer.",
         "int", 16, 4096, 16),
    Knob("enable_chunked_prefill", "Chunked prefill",
         "Split a long prompt over several steps so decoding requests keep getting tokens in "
         "between, instead of one big prompt stalling everyone.", "bool"),
    Knob("long_prefill_token_threshold", "Chunk size limit (tokens)",
         "With chunked prefill: the most prompt tokens one request may prefill in a step. "
         "0 = no limit beyond the token budget.", "int", 0, 2048, 16),
    Knob("order", "Admission order",
         "Which waiting request gets a free slot first. fcfs: first come first served. priority: "
         "the first tenant before the others. sjf: shortest job first. fair: tenants take turns. "
         "edf: earliest TTFT deadline first.", "choice", choices=ORDERS),
    Knob("kv_capacity_tokens", "KV cache capacity (tokens)",
         "How many tokens of keys and values the engine may keep. When it is full, the newest "
         "request is preempted: it loses its cache and must redo its prompt later. A request "
         "that could never fit is rejected.", "int", 16, KV_POOL_TOKENS, 16),
    Knob("max_waiting", "Max waiting (admission control)",
         "Reject new arrivals while this many requests already wait. 0 = never reject.",
         "int", 0, 500, 1),
    # ----- SLOs
    Knob("ttft_slo_s", "TTFT target (s)",
         "Time to first token a user will accept. Requests over it do not count towards goodput; "
         "the red dotted line on the charts. Also the deadline for the 'edf' order.",
         "float", 0.05, 30.0, 0.05),
    Knob("tpot_slo_s", "TPOT target (s/token)",
         "Average gap between output tokens a user will accept (0.1 s = 10 tokens/s). Requests "
         "over it do not count towards goodput.", "float", 0.01, 2.0, 0.01),
)

WORKLOAD_KNOBS = ("rate", "burstiness", "prompt_kind", "prompt_lo", "prompt_hi", "output_kind",
                  "output_lo", "output_hi", "tenants", "num_requests", "seed")
