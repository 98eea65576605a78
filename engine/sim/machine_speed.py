"""How fast this machine is: the one step model every page, lab, calculator and estimate uses.

`machine_speed(model)` answers with a `MachineSpeed`:
  - `step_model`: this machine's saved profile (engine/sim/profile.py), refit online from the app's
    own real steps (engine/core/step_fit.py: this process's refit, or the one stored beside the
    profile); its label says where it comes from and its current error;
  - `error`: that refit's current error (the median relative error of its latest predictions), None
    before it was checked against a real step;
  - `kind`: CALIBRATED (measured on this machine: a full calibration or a quick estimate) or GUESS
    (no profile: the hand-set guess, engine/core/step_model.UNCALIBRATED), so a page can say which.

A profile missing where a loaded model is at hand is measured quickly (a few seconds, `quick=True`),
on a thread of its own as the engine's would be, and saved for the next start, until `python -m
engine calibrate` measures it in full. With only a model's name ("smollm2") nothing is measured: no
profile gives the guess.

No Streamlit here.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from ..core import step_fit
from ..core.step_model import UNCALIBRATED, StepModel
from ..model.threads import in_passing_thread
from .calibrate import calibrate
from .profile import Profile, load_profile, profile_path, save_profile

CALIBRATED = "calibrated"   # this machine's profile, refit online
GUESS = "guess"             # nothing measured here: the hand-set guess


@dataclass(frozen=True)
class MachineSpeed:
    step_model: StepModel
    kind: str

    @property
    def calibrated(self) -> bool:
        """Whether the step model was measured on this machine (else it is the hand-set guess)."""
        return self.kind == CALIBRATED

    @property
    def error(self) -> float | None:
        """The refit's current error (step_fit), None where it was never checked against a real step."""
        return self.step_model.error


def machine_speed(model, measure_if_missing: bool = False) -> MachineSpeed:
    """This machine's step model of `model` (a loaded model, or the name of one): its profile refit
    online, or the hand-set guess when it has none. `measure_if_missing`: with a loaded model, a
    missing profile is measured quickly and saved first (the Playground does, on its first run)."""
    key = identity(model)
    found = _profile(*key)
    if found is None and measure_if_missing and not isinstance(model, str):
        found = _measure_quickly(model, key)
    if found is None:
        return MachineSpeed(UNCALIBRATED, GUESS)
    return MachineSpeed(step_fit.fit_for(key, found.step_model, found.path).current(), CALIBRATED)


def step_model_here(model) -> StepModel:
    """This machine's step model of `model` (a loaded model or its name), as machine_speed gives it:
    the refit profile, or the hand-set guess (its label says so). Measures nothing."""
    return machine_speed(model).step_model


def identity(model) -> tuple[str, str, str]:
    """(name, dtype, device) of a loaded model, or of the one `load_model(name)` would load here:
    what its profile and its refit (step_fit.model_key) are kept by."""
    if not isinstance(model, str):
        return step_fit.model_key(model)
    from ..model.model import resolve_device, resolve_dtype     # torch is imported only here
    device = resolve_device("auto")
    return model, str(resolve_dtype("auto", device)).replace("torch.", ""), str(device)


# ----------------------------------------------------------------------------- the profile on disk

# A page asks for the step model many times a second; reading and checking the profile takes ~35 ms
# (its key hashes the forward's code). So it is read again only when its file changed, or after
# REREAD_S (the code or the machine changed under a running app).
REREAD_S = 60.0
_read: dict[str, tuple[tuple, float, Profile | None]] = {}   # path -> (file's stat, when read, profile)
_lock = threading.Lock()
_measuring = threading.Lock()


def _stat(path: str) -> tuple:
    try:
        s = os.stat(path)
        return s.st_mtime_ns, s.st_size
    except OSError:
        return ()


def _profile(name: str, dtype: str, device: str) -> Profile | None:
    """This machine's current profile of the model (engine.sim.profile.load_profile), read again only when needed."""
    path = profile_path(name, dtype, device)
    stat, now = _stat(path), time.monotonic()
    with _lock:
        seen = _read.get(path)
    if seen is not None and seen[0] == stat and now - seen[1] < REREAD_S:
        return seen[2]
    found = load_profile(name, dtype, device) if stat else None
    with _lock:
        _read[path] = (stat, now, found)
    return found


def _measure_quickly(model, key) -> Profile | None:
    """A quick profile of the loaded model, measured on a thread of its own and saved (one at a time)."""
    with _measuring:
        found = _profile(*key)              # another caller may have measured it while this one waited
        if found is None:
            found = save_profile(in_passing_thread(calibrate, model, quick=True))
            with _lock:
                _read.pop(found.path, None)
    return found
