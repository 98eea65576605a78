"""Engine and scheduler settings.

`SchedulerPolicy` holds every knob a learner can move while the engine runs; the engine
reads a copy of it at the start of each step, so a change takes effect on the next step.
`EngineConfig` holds what is fixed for the life of an engine (model, device, KV pool size).
Knob names follow vLLM where vLLM has the knob.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

MODES = ("static", "continuous")
ORDERS = ("fcfs", "priority", "sjf", "fair", "edf")


@dataclass(slots=True)
class SchedulerPolicy:
    mode: str = "continuous"            # "static" (request-level) or "continuous" (iteration-level)
    max_num_seqs: int = 16              # batch slots: most sequences in one step
    max_num_batched_tokens: int = 512   # token budget: most tokens (prefill + decode) in one step
    max_wait_ms: float = 500.0          # static only: start a partial batch once the oldest waited this long
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0   # cap on one prompt's chunk per step (0 = only the budget caps it)
    order: str = "fcfs"                 # which waiting request is admitted first
    kv_capacity_tokens: int = 8192      # KV cache size the scheduler may use, in tokens
    max_waiting: int = 0                # admission control: reject arrivals beyond this many waiting (0 = no limit)
    ttft_slo_s: float = 2.0             # deadline for "edf" order, and the TTFT target for goodput
    tpot_slo_s: float = 0.5             # TPOT target for goodput

    def validate(self) -> "SchedulerPolicy":
        """Raise ValueError with a plain-words message for any value the engine cannot use."""
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.order not in ORDERS:
            raise ValueError(f"unknown order {self.order!r}: choose one of {', '.join(ORDERS)}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1 (got {self.max_num_seqs})")
        if self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be at least 1 (got {self.max_num_batched_tokens})")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms cannot be negative (got {self.max_wait_ms})")
        if self.long_prefill_token_threshold < 0:
            raise ValueError("long_prefill_token_threshold cannot be negative")
        if self.kv_capacity_tokens < 1:
            raise ValueError(f"kv_capacity_tokens must be at least 1 (got {self.kv_capacity_tokens})")
        if self.max_waiting < 0:
            raise ValueError("max_waiting cannot be negative (0 means no limit)")
        if self.ttft_slo_s <= 0 or self.tpot_slo_s <= 0:
            raise ValueError("SLO targets must be positive")
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
        a, b = asdict(self), asdict(other)
        return [f"{k} {a[k]}→{b[k]}" for k in a if a[k] != b[k]]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class EngineConfig:
    model: str = "smollm2"        # bundled SmolLM2-135M-Instruct; "tiny" for tests; or a Llama-family dir / hub id
    device: str = "auto"          # "auto", "cpu", "cuda"
    dtype: str = "auto"           # "auto", "fp32", "bf16"
    block_size: int = 16          # tokens per KV block
    kv_pool_tokens: int = 8192    # physical KV pool (SmolLM2 fp32: 46 KB a token); kv_capacity_tokens uses up to this
    max_model_len: int = 2048     # longest prompt + output one request may have
    seed: int = 0
