"""A simulated run: the same Engine and Scheduler as a real run, with each step's time predicted
by a step model and a virtual clock moved on by it. No model runs, so a thousand requests take
well under a second, and the scheduler makes the very decisions it would make for real.

Where the step times come from, a profile:
  - the calibrated profile of this machine, model and dtype (`python -m engine calibrate`
    measures and fits it), used when no profile is named;
  - a file written by the calibration, named by its path;
  - a roofline model of other hardware, DEVICE:MODEL (engine/sim/roofline.py), such as
    h100-sxm:llama-3.1-8b: a model from spec-sheet figures, not a measurement;
  - "hand-set": the hand-set guess (engine/core/step_model.py UNCALIBRATED), not calibrated.

The token ids a simulated run writes are stand-ins (the same for a seed, never EOS) and it has
no output text; summary.json says "simulated": true and names the profile.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..runs.build import build_engine
from ..core.config import EngineConfig, SchedulerPolicy
from ..core.engine import Engine
from ..core.request import Request
from .roofline import CPU_DEVICE, DEVICES, MODELS, is_roofline_name, roofline_profile
from ..core.step_model import UNCALIBRATED

HAND_SET = "hand-set"
STAND_INS = ("stand-ins: no model ran in this simulated run, so output_token_ids are placeholders "
             "and output_text is empty")


@dataclass(frozen=True, slots=True)
class SimProfile:
    name: str                 # as the learner named it (a roofline name, a file, "hand-set") or the calibrated one's
    label: str                # what files and pages show; it always says which kind of model it is
    step_model: object        # step_ms(plan) -> milliseconds
    dtype: str = "n/a"
    kv_capacity_tokens: int | None = None   # the most KV tokens the simulated device holds; None: not modelled
    calibrated: bool = False                # measured on this machine (engine.calibrate)

    def summary_fields(self) -> dict:
        """What a simulated run adds to summary.json."""
        return {"simulated": True, "profile": self.label, "profile_name": self.name,
                "token_ids": STAND_INS, "device": f"simulated ({self.label})", "dtype": self.dtype}


def no_profile_message(model: str, dtype: str, device: str) -> str:
    return (f"no calibrated profile of model {model} (dtype {dtype}, device {device}) on this machine: "
            f"run `python -m engine calibrate --model {model}` first, or pass --profile with a roofline "
            f"model DEVICE:MODEL (devices {', '.join([*DEVICES, CPU_DEVICE])}; models {', '.join(MODELS)}), "
            f"or --profile {HAND_SET} for the hand-set cost model (a rough guess, not calibrated)")


def resolve_profile(name: str | None, model: str = "smollm2", dtype: str = "auto",
                    device: str = "auto") -> SimProfile:
    """The profile `name` names; None: the calibrated profile of `model` on this machine.
    A ValueError says what to do when there is none."""
    if name == HAND_SET:
        return SimProfile(HAND_SET, "hand-set cost model, uncalibrated (a rough guess, not measured here)",
                          UNCALIBRATED)
    if name and is_roofline_name(name):
        r = roofline_profile(name, dtype)          # the dtype matters for this CPU only
        return SimProfile(name, r.label, r, r.device.dtype, r.kv_capacity_tokens)
    if name and not os.path.isfile(name):
        raise ValueError(f"profile {name!r} is neither a profile file nor a roofline model "
                         f"DEVICE:MODEL; {no_profile_message(model, dtype, device)}")
    from . import profile as profiles     # the calibration's profiles (they import torch)
    if name:
        found = profiles.read_profile(name)
    else:
        found = profiles.load_profile(model, dtype, device)
        if found is None:
            raise ValueError(no_profile_message(model, dtype, device))
    return SimProfile(name or found.path, f"calibrated profile: {found.describe()}",
                      found.step_model, found.dtype, calibrated=True)


def build_simulation(config: EngineConfig, policy: SchedulerPolicy, profile: SimProfile,
                     draft_acceptance: float = 0.0) -> Engine:
    """An engine on the virtual clock whose steps take what `profile` predicts (speculative
    decoding's drafts accepted with the chance `draft_acceptance`). A KV capacity beyond what
    the simulated device holds is refused."""
    cap = profile.kv_capacity_tokens
    if cap is not None and policy.kv_capacity_tokens > cap:
        raise ValueError(f"kv_capacity_tokens {policy.kv_capacity_tokens} is more than the simulated device "
                         f"holds (allowed 1 to {cap} for {profile.label})")
    return build_engine(config, policy, cost=profile.step_model, draft_acceptance=draft_acceptance)


def simulate(config: EngineConfig, policy: SchedulerPolicy, profile: SimProfile,
             requests: list[Request], draft_acceptance: float = 0.0) -> Engine:
    """Run `requests` to the end on a simulated engine; the engine holds the steps and requests."""
    engine = build_simulation(config, policy, profile, draft_acceptance)
    for r in requests:
        engine.submit(r)
    engine.run()
    return engine


def fresh_copy(r: Request) -> Request:
    """The same request, not yet served: to run one workload on two engines."""
    return Request(id=r.id, prompt_token_ids=list(r.prompt_token_ids), max_new_tokens=r.max_new_tokens,
                   arrival_s=r.arrival_s, tenant=r.tenant, priority=r.priority, ignore_eos=r.ignore_eos,
                   temperature=r.temperature, top_p=r.top_p, seed=r.seed, prompt=r.prompt,
                   ttft_slo_s=r.ttft_slo_s)
