"""What a Playground run is set up with: workload, policy and SLO targets in one flat record.

A Setup turns into the engine's `SchedulerPolicy` and `WorkloadSpec`, and into query
parameters and back, so a copied link reproduces a run (the seed is part of it).
No Streamlit here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from engine.config import SchedulerPolicy
from engine.workload import WorkloadSpec

from playground.knobs import KNOBS


@dataclass(frozen=True, slots=True)
class Setup:
    # workload
    rate: float = 4.0
    burstiness: float = 1.0
    prompt_kind: str = "uniform"
    prompt_lo: int = 32
    prompt_hi: int = 128
    output_kind: str = "uniform"
    output_lo: int = 16
    output_hi: int = 64
    tenants: int = 1
    num_requests: int = 64
    seed: int = 0
    # policy
    mode: str = "continuous"
    max_num_seqs: int = 16
    max_wait_ms: float = 500.0
    max_num_batched_tokens: int = 512
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    order: str = "fcfs"
    kv_capacity_tokens: int = 8192
    max_waiting: int = 0
    # SLO targets
    ttft_slo_s: float = 2.0
    tpot_slo_s: float = 0.25

    def policy(self) -> SchedulerPolicy:
        return SchedulerPolicy(
            mode=self.mode, max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens, max_wait_ms=self.max_wait_ms,
            enable_chunked_prefill=self.enable_chunked_prefill,
            long_prefill_token_threshold=self.long_prefill_token_threshold, order=self.order,
            kv_capacity_tokens=self.kv_capacity_tokens, max_waiting=self.max_waiting,
            ttft_slo_s=self.ttft_slo_s, tpot_slo_s=self.tpot_slo_s,
        ).validate()

    def workload(self) -> WorkloadSpec:
        return WorkloadSpec(
            num_requests=self.num_requests, rate=self.rate, burstiness=self.burstiness,
            prompt_kind=self.prompt_kind, prompt_lo=self.prompt_lo, prompt_hi=max(self.prompt_lo, self.prompt_hi),
            output_kind=self.output_kind, output_lo=self.output_lo, output_hi=max(self.output_lo, self.output_hi),
            tenants=self.tenants, seed=self.seed,
        ).validate()

    def changed(self, **changes) -> "Setup":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)

    # ----- links

    def to_query(self) -> dict[str, str]:
        """Every field as a string, for st.query_params (bools as 1/0, floats without noise)."""
        out = {}
        for name, value in asdict(self).items():
            if isinstance(value, bool):
                out[name] = "1" if value else "0"
            elif isinstance(value, float):
                out[name] = f"{value:g}" if value == round(value, 6) else repr(value)
            else:
                out[name] = str(value)
        return out

    @classmethod
    def from_query(cls, params: dict) -> tuple["Setup", list[str]]:
        """A Setup from query parameters, and a list of the problems found.

        Unknown keys are ignored; a value out of range is clamped into it; a value that is not
        a number, or not one of the choices, keeps the default. Each of those is reported.
        """
        values, problems = {}, []
        known = {f.name for f in fields(cls)}
        for name, raw in params.items():
            if name not in known:
                continue
            if isinstance(raw, list):
                raw = raw[-1] if raw else ""
            knob = KNOBS[name]
            try:
                value = knob.clamp(raw)
            except (TypeError, ValueError) as exc:
                problems.append(f"link value ignored: {exc}")
                continue
            if knob.kind in ("int", "float") and float(value) != float(raw):
                problems.append(f"{name}={raw} is outside {knob.lo:g}–{knob.hi:g}: using {value:g}")
            values[name] = value
        setup = cls(**values)
        if setup.prompt_hi < setup.prompt_lo:
            setup = setup.changed(prompt_hi=setup.prompt_lo)
            problems.append("prompt 'to' was below 'from': raised to match")
        if setup.output_hi < setup.output_lo:
            setup = setup.changed(output_hi=setup.output_lo)
            problems.append("output 'to' was below 'from': raised to match")
        return setup, problems
