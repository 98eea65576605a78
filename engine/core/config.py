"""Engine and scheduler settings.

`SchedulerPolicy` holds every knob a learner can move while the engine runs; the engine
reads a copy of it at the start of each step, so a change takes effect on the next step.
Each field is declared once, with its label, help, unit and range (engine.knobs): the CLI,
the Playground's controls, its links and its presets are all derived from these lines.
`EngineConfig` holds what is fixed for the life of an engine (model, device, KV pool size).
Knob names follow vLLM where vLLM has the knob.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum

from .knobs import changes, check_all, knob, short



# The knobs that pick one of a few ways of scheduling. Each is a StrEnum, so a value read from a
# link, a JSON body or a CLI flag ("static") equals its member (Mode.STATIC) and prints as itself.
class Mode(StrEnum):
    STATIC = "static"            # a batch forms, runs to its end, and nobody joins in between
    CONTINUOUS = "continuous"    # requests join and leave at every step


class Order(StrEnum):
    FCFS = "fcfs"
    PRIORITY = "priority"
    SJF = "sjf"
    FAIR = "fair"
    EDF = "edf"


class StepPriority(StrEnum):
    DECODE_FIRST = "decode_first"
    PREFILL_FIRST = "prefill_first"


class SpeculativeMethod(StrEnum):
    OFF = "off"
    NGRAM = "ngram"              # prompt lookup: drafts copied from the request's own text (engine/core/ngram.py)


MODES, ORDERS, STEP_PRIORITIES = tuple(Mode), tuple(Order), tuple(StepPriority)
SPECULATIVE_METHODS = tuple(SpeculativeMethod)
DEVICE_TYPES = ("cpu", "cuda")   # and "auto"; "cuda:1" picks a GPU
SLO_KNOBS = ("ttft_slo_s", "tpot_slo_s")   # the policy's targets: they score runs (and set edf's deadline)


@dataclass(slots=True)
class SchedulerPolicy:
    mode: Mode = knob(
        Mode.CONTINUOUS, "Batching mode",
        "static: a batch forms, runs until every member is done, and nobody joins in between. "
        "continuous: requests join and leave the batch at every step.", choices=MODES)
    step_priority: StepPriority = knob(
        StepPriority.DECODE_FIRST, "Step priority",
        "Who fills a step's token budget first. decode_first: running requests take their next "
        "token (or chunk) first and waiting prompts get what is left, as vLLM v1 does. "
        "prefill_first: prompts go first (those part-way through a chunked prefill, then waiting "
        "ones), as in older engines and transformers' prefill-first scheduler; decodes get what "
        "is left.",
        choices=STEP_PRIORITIES)
    max_num_seqs: int = knob(
        16, "max_num_seqs (batch slots)",
        "The most requests that may share one engine step. 1 means no batching at all.",
        lo=1, hi=4096, slider_hi=64)
    max_num_batched_tokens: int = knob(
        512, "Token budget per step",
        "max_num_batched_tokens: the most tokens (prompt chunks plus one per decoding request) "
        "one step may carry. Bigger steps are more efficient but each one takes longer.",
        lo=1, hi=1 << 20, step=16, unit="tokens", slider_hi=4096)
    max_wait_ms: float = knob(
        500.0, "max_wait_ms (static only)",
        "Static mode: start a partly filled batch once the oldest waiting request has waited "
        "this long, instead of waiting for every slot to fill.", lo=0.0, hi=60000.0, step=50.0, unit="ms", slider_hi=5000.0)
    enable_chunked_prefill: bool = knob(
        True, "Chunked prefill",
        "Split a long prompt over several steps so decoding requests keep getting tokens in "
        "between, instead of one big prompt stalling everyone.")
    long_prefill_token_threshold: int = knob(
        0, "Chunk size limit (tokens)",
        "With chunked prefill: the most prompt tokens one request may prefill in a step. "
        "0 = no limit beyond the token budget.", lo=0, hi=16384, step=16, unit="tokens", slider_hi=2048)
    enable_prefix_caching: bool = knob(
        False, "Prefix caching",
        "Keep the keys and values of full KV blocks after their request ends, keyed by their "
        "tokens and every token before them, and let a later request that starts with the same "
        "tokens (a shared system prompt, an earlier turn of its conversation) reuse them instead "
        "of computing them again. The least recently used cached blocks are evicted when free "
        "blocks run out. vLLM turns this on by default; here it starts off, so the lessons "
        "before it measure an engine without it.")
    order: Order = knob(
        Order.FCFS, "Admission order",
        "Which waiting request gets a free slot first. fcfs: first come first served. priority: "
        "the lowest priority number first (0 is the most important). sjf: shortest job first. "
        "fair: tenants take turns. edf: earliest TTFT deadline first.", choices=ORDERS)
    kv_capacity_tokens: int = knob(
        8192, "KV cache capacity (tokens)",
        "How many tokens of keys and values the engine may keep. When it is full, the newest "
        "request is preempted: it loses its cache and must redo its prompt later. A request "
        "that could never fit is rejected.", lo=1, hi=1 << 20, step=16, unit="tokens")
    max_waiting: int = knob(
        0, "Max waiting (admission control)",
        "Reject new arrivals while this many requests already wait. 0 = never reject.",
        lo=0, hi=100000, slider_hi=500)
    speculative_method: SpeculativeMethod = knob(
        SpeculativeMethod.OFF, "Speculative decoding",
        "off: one new token per decoding request per step. ngram: guess a request's next tokens by "
        "finding its last few tokens earlier in its own prompt and output and copying what followed "
        "(prompt lookup, vLLM's ngram method); the step checks every guess at once and keeps the "
        "guesses the model agrees with, plus one token of its own. Greedy requests only.",
        choices=SPECULATIVE_METHODS)
    num_speculative_tokens: int = knob(
        4, "Drafted tokens per step",
        "num_speculative_tokens: the most tokens guessed ahead for one request in one step. Each "
        "one is checked in the same forward pass and counts against the token budget.",
        lo=1, hi=64, slider_hi=10, unit="tokens")
    prompt_lookup_min: int = knob(
        2, "Shortest n-gram looked up",
        "prompt_lookup_min: the fewest last tokens that must match earlier text before anything is "
        "drafted (vLLM uses 5 when neither size is set).", lo=1, hi=64, slider_hi=10, unit="tokens")
    prompt_lookup_max: int = knob(
        5, "Longest n-gram looked up",
        "prompt_lookup_max: the most last tokens the lookup tries to match; a longer match wins. "
        "At least prompt_lookup_min.", lo=1, hi=64, slider_hi=10, unit="tokens")
    ttft_slo_s: float = knob(
        2.0, "TTFT target (s)",
        "Time to first token a user will accept. Requests over it do not count towards goodput; "
        "the red dotted line on the charts. Also the deadline for the 'edf' order.",
        lo=0.01, hi=3600.0, step=0.05, unit="s", slider_hi=120.0)
    tpot_slo_s: float = knob(
        0.5, "TPOT target (s/token)",
        "Average gap between output tokens a user will accept (0.1 s = 10 tokens/s). Requests "
        "over it do not count towards goodput.", lo=0.001, hi=60.0, step=0.01, unit="s", slider_hi=2.0)

    def validate(self) -> "SchedulerPolicy":
        """Raise ValueError naming the knob, its value and the allowed range for any value the
        engine cannot use."""
        check_all(self)
        if self.prompt_lookup_max < self.prompt_lookup_min:
            raise ValueError(f"prompt_lookup_max must be at least prompt_lookup_min (got "
                             f"prompt_lookup_max={self.prompt_lookup_max}, prompt_lookup_min={self.prompt_lookup_min}; "
                             f"allowed {self.prompt_lookup_min}–64)")
        return self

    def changed(self, **changes) -> "SchedulerPolicy":
        """A validated copy with some knobs changed (unknown knob names are an error)."""
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(f"unknown policy knob(s): {', '.join(sorted(unknown))}")
        return replace(self, **changes).validate()

    def diff(self, other: "SchedulerPolicy") -> list[str]:
        """Human-readable list of knobs that differ, e.g. ['max_num_seqs 8→2']."""
        return changes(asdict(self), asdict(other))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class EngineConfig:
    model: str = "smollm2"        # bundled SmolLM2-135M-Instruct; "tiny" for tests; or a Llama-family dir
    device: str = "auto"          # "auto", "cpu", "cuda"
    dtype: str = "auto"           # "auto", "fp32", "bf16"
    block_size: int = 16          # tokens per KV block
    kv_pool_tokens: int = knob(
        8192, "KV pool (tokens)",
        "The physical KV pool, allocated once (SmolLM2 fp32: 46 KB a token); "
        "kv_capacity_tokens uses up to this.", lo=16, hi=1 << 20, unit="tokens")
    max_model_len: int = 2048     # longest prompt + output one request may have
    seed: int = 0

    def validate(self) -> "EngineConfig":
        """Raise ValueError for a pool smaller than one block or beyond the knob's range, or an unknown device."""
        check_all(self)
        check_device(self.device)
        return self


def check_device(device: str) -> None:
    """auto, cpu, cuda or cuda:N; anything else (tpu, mps...) is a clear error."""
    if device != "auto" and device not in DEVICE_TYPES and not re.fullmatch(r"cuda:\d+", str(device)):
        raise ValueError(f"unknown device {short(device)}: use auto, {', '.join(DEVICE_TYPES)} or cuda:N")
