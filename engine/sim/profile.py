"""A machine's calibrated profile: the fitted step model of one model and dtype on one device.

A profile is stored as JSON in the results cache (engine/runs/results.py), one file per model, dtype
and device, and keyed by everything its step times depend on:
  - the machine: the CPU's model name and core count, or the CUDA device's name, read at run time;
  - the model, the dtype and the device type;
  - the forward's code digest: a hash of the files that run the model's forward.
`load_profile` gives None when there is no profile or when any of those changed since it was
measured (a stale profile): `python -m engine calibrate` measures it again.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import asdict, dataclass, field, replace

from ..runs.results import _forward_code_digest, cache_dir, store, stored
from ..core.step_model import StepModel

# 2: the loop term is the mean gap between a real run's steps, the passes span the whole budget and
# the forms include a jump at 2-3 rows; a profile of version 1 is measured again.
PROFILE_VERSION = 2


@dataclass(frozen=True)
class Profile:
    machine: str
    model: str
    dtype: str                      # resolved: "float32", "bfloat16", ...
    device: str                     # "cpu", "cuda", "cuda:1"
    code_digest: str
    step_model: StepModel
    fit: dict                       # the chosen form and its held-out errors (engine.calibrate.fit)
    measurements: list = field(default_factory=list)   # [tokens, samples, decode_context, prefill_pairs, ms]
    measured_s: float = 0.0         # how long measuring took
    path: str = ""                  # the file it was read from or saved to

    @property
    def key(self) -> dict:
        return {"machine": self.machine, "model": self.model, "dtype": self.dtype,
                "device": self.device, "code_digest": self.code_digest}

    def describe(self) -> str:
        """One line: what was measured where, and how well the fit predicts held-out steps."""
        quick = "a quick estimate: " if self.fit.get("quick") else ""
        return (f"{quick}{self.model} in {self.dtype} on {self.machine} ({self.device}), "
                f"held-out step-time error {100 * self.fit['heldout_mean_error']:.1f}% on average, "
                f"{100 * self.fit['heldout_max_error']:.1f}% at worst")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("path")
        return {"version": PROFILE_VERSION, **d}

    @classmethod
    def from_dict(cls, d: dict, path: str = "") -> "Profile":
        d = {k: v for k, v in d.items() if k != "version"}
        return cls(**{**d, "step_model": StepModel.from_dict(d["step_model"]), "path": path})


def resolve(dtype: str, device: str) -> tuple[str, str]:
    """("bfloat16", "cpu") from names such as ("auto", "auto"), as the model loader resolves them."""
    from ..model.model import resolve_device, resolve_dtype     # torch is imported only here
    dev = resolve_device(device)
    if dev.type == "cuda" and dev.index is None:              # "cuda" and "cuda:0" are one device
        import torch
        dev = torch.device("cuda", torch.cuda.current_device())
    return str(resolve_dtype(dtype, dev)).replace("torch.", ""), str(dev)


def machine_name(device: str) -> str:
    """The CUDA device's name, or the CPU's model name and core count, read now."""
    if device.startswith("cuda"):
        import torch
        return torch.cuda.get_device_name(torch.device(device))
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    import platform
    return f"{cpu or platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def current_key(model_name: str, dtype: str, device: str) -> dict:
    """What a profile of this model, dtype and device measured here and now would be keyed by."""
    dtype, device = resolve(dtype, device)
    return {"machine": machine_name(device), "model": model_name, "dtype": dtype, "device": device,
            "code_digest": _forward_code_digest()}


def profile_path(model_name: str, dtype: str, device: str) -> str:
    """The file of this model's profile (one per model, dtype and device; a new one replaces it)."""
    dtype, device = resolve(dtype, device)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(model_name.rstrip("/")))[:40]
    digest = hashlib.sha256(model_name.encode()).hexdigest()[:8]
    return os.path.join(cache_dir(), f"profile-{slug}-{digest}-{dtype}-{device.replace(':', '')}.json")


def read_profile(path: str) -> Profile:
    """The profile stored at `path`, whatever machine it was measured on; ValueError if it is not one."""
    try:
        data = stored(path)
        if data is None:
            raise ValueError("no such file")
        if data.get("version") != PROFILE_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {PROFILE_VERSION}")
        return Profile.from_dict(data, path)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"profile {path!r} is not a step-time profile "
                         f"(write one with `python -m engine calibrate`): {e}") from e


def load_profile(model_name: str, dtype: str = "auto", device: str = "auto") -> Profile | None:
    """This machine's profile of the model, or None when none was measured or it is stale
    (the machine, model, dtype, device or forward code changed since)."""
    path = profile_path(model_name, dtype, device)
    if not os.path.exists(path):
        return None
    try:
        found = read_profile(path)
    except ValueError:
        return None
    return found if found.key == current_key(model_name, dtype, device) else None


def save_profile(profile: Profile) -> Profile:
    """Store the profile where load_profile finds it; returns it with its path."""
    path = profile_path(profile.model, profile.dtype, profile.device)
    store(path, profile.to_dict())
    return replace(profile, path=path)
