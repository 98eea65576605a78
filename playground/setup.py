"""What a Playground run is set up with: one value for every workload and policy knob.

Setup's fields are generated from the knobs the engine's dataclasses declare (engine.knobs):
every WorkloadSpec knob and every SchedulerPolicy knob is a field of the same name, so a new
knob becomes a field, a widget and a link parameter without an edit here. A Setup turns into
the engine's `WorkloadSpec` and `SchedulerPolicy`, and into query parameters and back, so a
copied link reproduces a run (the seed is part of it). No Streamlit here.
"""
from __future__ import annotations

import math
from dataclasses import asdict, field, make_dataclass, replace

from engine.core.config import SchedulerPolicy
from engine.core.knobs import Knob, knobs_of
from engine.runs.workload import LENGTH_RANGES, WorkloadSpec

# Physical KV pool of a Playground run and the KV capacity slider's end: twice the engine's default
# pool, so capacity can be raised past its default (SmolLM2 fp32: 46 KB a token, about 750 MB).
KV_POOL_TOKENS = 16384

# Where the Playground starts from a value of its own instead of the engine's default, and why.
PLAYGROUND_DEFAULTS = {
    "continuous": True,   # traffic runs until the learner stops it: time to move sliders and watch
    "num_requests": 64,   # without continuous traffic, 16 s of arrivals at the default rate
}

WORKLOAD_KNOBS = knobs_of(WorkloadSpec)
POLICY_KNOBS = knobs_of(SchedulerPolicy)
assert not WORKLOAD_KNOBS.keys() & POLICY_KNOBS.keys(), "a knob name must say which object it sets"


def on_slider(k: Knob) -> Knob:
    """A knob as the Playground offers it: the range its slider covers and the Playground's default.

    A slider moves in steps counted from its start, so it starts at the first step at or above
    the knob's lowest value (burstiness 0.05 in steps of 0.25 starts at 0.25, and 1.0 stays
    reachable). It ends at the knob's slider end; KV capacity also at the Playground's KV pool.
    """
    default = PLAYGROUND_DEFAULTS.get(k.name, k.default)
    if k.kind not in ("int", "float"):
        return replace(k, default=default)
    lo = round(math.ceil(k.lo / k.step - 1e-9) * k.step, 9)
    hi = min(k.ui_hi, KV_POOL_TOKENS) if k.name == "kv_capacity_tokens" else k.ui_hi
    if k.kind == "int":
        lo, hi = int(lo), int(hi)
    return replace(k, lo=lo, hi=hi, default=default)


KNOBS = {name: on_slider(k) for name, k in {**WORKLOAD_KNOBS, **POLICY_KNOBS}.items()}
# Pairs of knobs drawn as one from–to slider; a 'to' below 'from' (from a link) is raised to match.
RANGES = {**LENGTH_RANGES, "lookup": ("prompt_lookup_min", "prompt_lookup_max")}


def knobs_for(rate_hi: float) -> dict[str, Knob]:
    """KNOBS with the arrival-rate slider ending at `rate_hi` (playground.capacity.rate_slider_hi:
    a simulated GPU serves far more requests a second than this machine)."""
    if rate_hi == KNOBS["rate"].hi:
        return KNOBS
    return {**KNOBS, "rate": replace(KNOBS["rate"], hi=rate_hi)}


class Setup(make_dataclass("SetupFields", [(name, type(k.default), field(default=k.default))
                                           for name, k in KNOBS.items()], frozen=True, slots=True)):
    """One Playground setup: a field per knob, e.g. Setup(rate=2.0, max_num_seqs=8)."""

    __slots__ = ()

    def _values(self, knobs: dict) -> dict:
        return {name: getattr(self, name) for name in knobs}

    def policy(self) -> SchedulerPolicy:
        values = self._values(POLICY_KNOBS)
        lo, hi = RANGES["lookup"]                # a longest n-gram below the shortest is raised to match
        values[hi] = max(values[lo], values[hi])
        return SchedulerPolicy(**values).validate()

    def workload(self) -> WorkloadSpec:
        values = self._values(WORKLOAD_KNOBS)
        for lo, hi in LENGTH_RANGES.values():     # a 'to' below 'from' is raised to match
            values[hi] = max(values[lo], values[hi])
        return WorkloadSpec(**values).validate()

    @property
    def endless(self) -> bool:
        """Continuous traffic: requests arrive until the run is stopped (WorkloadSpec.endless)."""
        return WorkloadSpec(continuous=self.continuous, rate=self.rate).endless

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
    def from_query(cls, params: dict, knobs: dict[str, Knob] = KNOBS) -> tuple["Setup", list[str]]:
        """A Setup from query parameters, and a list of the problems found.

        Unknown keys are ignored; a value outside its slider (in `knobs`) is clamped onto it; a value that is
        not a number, or not one of the choices, keeps the default. Each of those is reported, as
        plain text holding the value as the link had it (show it with ui.widgets.plain).
        """
        values, problems = {}, []
        for name, raw in params.items():
            if name not in knobs:
                continue
            if isinstance(raw, list):
                raw = raw[-1] if raw else ""
            knob = knobs[name]
            try:
                value = knob.clamp(raw)
            except (TypeError, ValueError):
                problems.append(f"Link value {name}={raw} is not allowed ({knob.range_text()}): "
                                f"using {knob.default}.")
                continue
            if knob.kind in ("int", "float") and float(value) != float(raw):
                problems.append(f"Link value {name}={raw} is outside {knob.lo:g}–{knob.hi:g}: using {value:g}.")
            values[name] = value
        setup = cls(**values)
        for what, (lo, hi) in RANGES.items():
            if getattr(setup, hi) < getattr(setup, lo):
                setup = setup.changed(**{hi: getattr(setup, lo)})
                problems.append(f"{what} 'to' was below 'from': raised to match")
        return setup, problems
