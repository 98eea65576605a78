"""The step model where it is used: this machine's profile, refit online from the app's own steps.

A profile (engine/sim/profile.py) times steps built by hand, alone on the machine. The app runs its
engine differently: OpenMP workers that sleep between loops, a page refreshing twice a second, a
browser drawing, the loop's own bookkeeping between steps. So the app keeps a `StepFit` per model:
every real step its live runs take is recorded with its shape and its time, from the end of the
step before to its own end when the engine went straight on (the step plus the loop's gap), and
every REFIT_EVERY steps the model is refit over the latest WINDOW steps as

    step_ms = offset_ms + scale × profile(shape)

by least squares on relative error, or by the median ratio of real to profile time alone,
whichever predicts these steps with the smaller median error.

Two numbers, so a run that only ever meets a few shapes cannot bend the profile's shape out of
true, while the app's constant overheads (offset) and its slower or faster loops (scale) are
followed. When the recorded steps are nearly all one size, only the scale is fitted.

Each step is first predicted by the model in use, before it joins a refit: the median of those
relative errors over the latest ERROR_OVER steps is the model's current error, shown beside its
predictions (its `label` says it). The refit is stored beside the profile, so the next start
of the app, and a page that never ran a step (a lab, a lesson's calculator), begins from it.
"""
from __future__ import annotations

import json
import os
import statistics
import threading
from collections import deque
from dataclasses import replace

import numpy as np

from .step_model import StepModel, StepShape

WINDOW = 600          # latest recorded steps a refit uses
REFIT_EVERY = 40      # recorded steps between two refits
MIN_STEPS = 30        # recorded steps before the first refit
ERROR_OVER = 200      # the current error is the median over this many latest predictions
NARROW = 0.15         # shapes whose predicted times spread less than this (relative) fit a scale only
OUTLIER = 3.0         # a step this many times its fitted time was interrupted: left out of the refit


class StepFit:
    def __init__(self, base: StepModel, offset_ms: float = 0.0, scale: float = 1.0, steps: int = 0,
                 error: float | None = None, path: str = ""):
        """`base`: the profile's step model; the rest as a stored refit holds them (`path` is where it
        is saved; "" keeps it in memory only)."""
        self.base = base
        self.offset_ms, self.scale = offset_ms, scale
        self.steps = steps                        # recorded steps, over every run it has seen
        self.path = path
        self._stored_error = error                # the current error when it was saved
        self._recent: deque[tuple[float, float]] = deque(maxlen=WINDOW)   # (profile's ms, real ms)
        self._errors: deque[float] = deque(maxlen=ERROR_OVER)            # relative errors of the model in use
        self._since_refit = 0
        self._lock = threading.RLock()
        self.model = self._build()

    # ----- recording

    def observe(self, shape: StepShape, real_ms: float) -> None:
        """One real step: its shape and its time. From any engine thread."""
        if not real_ms > 0:
            return
        base = self.base.predict(shape)
        with self._lock:
            predicted = self.offset_ms + self.scale * base
            self._errors.append(abs(predicted - real_ms) / real_ms)
            self._recent.append((base, real_ms))
            self.steps += 1
            self._since_refit += 1
            refit = self._since_refit >= REFIT_EVERY and len(self._recent) >= MIN_STEPS
            if refit:
                self._refit()
        if refit:
            self.save()

    def _refit(self) -> None:
        self._since_refit = 0
        x, y = (np.array(v, dtype=float) for v in zip(*self._recent))
        # Interference only ever adds time: a step far slower than the typical ratio of real to
        # profile time was interrupted. Judged against the recorded steps themselves, not the model
        # in use, so a machine that has become several times slower is followed, not thrown away.
        keep = y / x <= OUTLIER * np.median(y / x)
        if keep.sum() >= MIN_STEPS:
            x, y = x[keep], y[keep]
        # Two candidates: least squares (offset + scale), and the median ratio alone. A few slow steps
        # (a page refreshing, another program) pull the first up; the one whose median error over
        # these steps is smaller is kept, since the median error is what the pages show.
        candidates = [fit_offset_scale(x, y), (0.0, float(np.median(y / x)))]
        self.offset_ms, self.scale = min(candidates, key=lambda c: float(np.median(np.abs(c[0] + c[1] * x - y) / y)))
        self.model = self._build()

    # ----- reading

    @property
    def error(self) -> float | None:
        """The median relative error of the latest predictions (None before any step)."""
        with self._lock:
            errors = list(self._errors)
        return statistics.median(errors) if errors else self._stored_error

    @property
    def checked(self) -> int:
        """How many real steps the current error is over (0: the stored refit's error, or none)."""
        return len(self._errors)

    def describe(self) -> str:
        """What the model is, and how far off it is now, in words."""
        err = self.error
        if self.steps == 0:
            return f"{self.base.label}; not yet checked against this app's own steps"
        over = (f"the last {self.checked:,} steps" if self.checked else "the steps before the app last stopped")
        shown = "" if err is None else f", current error {100 * err:.0f}% (median over {over})"
        return (f"{self.base.label}, refit on {self.steps:,} of this app's real steps (each "
                f"profiled time × {self.scale:.2f} + {self.offset_ms:.1f} ms){shown}")

    def _build(self) -> StepModel:
        scaled = self.base.scaled(self.scale, "")
        return replace(scaled, fixed_ms=scaled.fixed_ms + self.offset_ms, label=self.describe(),
                       error=self.error if self.steps else None)

    def current(self) -> StepModel:
        """The model in use, its label saying its current error."""
        with self._lock:
            self.model = self._build()
            return self.model

    # ----- storing

    def to_dict(self) -> dict:
        return {"offset_ms": self.offset_ms, "scale": self.scale, "steps": self.steps, "error": self.error,
                "base": self.base.to_dict()}

    def save(self) -> None:
        """Store the refit beside its profile (after every refit); a folder that cannot be written
        only loses it for the next start."""
        if not self.path:
            return
        tmp = f"{self.path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(self.to_dict(), f)
            os.replace(tmp, self.path)
        except OSError:
            pass


def fit_offset_scale(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(offset, scale) for y ≈ offset + scale·x, least squares on relative error; a scale alone
    when the x values are too close together to tell an offset from a scale, or when the
    two-number fit would give a negative offset or scale."""
    ratio = float(np.median(y / x))
    if len(x) < 3 or np.std(x) < NARROW * np.mean(x):
        return 0.0, ratio
    a = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
    offset, scale = np.linalg.lstsq(a, np.ones_like(y), rcond=None)[0]
    if offset < 0 or scale <= 0:
        return 0.0, ratio
    return float(offset), float(scale)


# ----------------------------------------------------------------------------- one per model


_fits: dict[tuple, StepFit] = {}
_fits_lock = threading.Lock()


def refit_path(profile_path: str) -> str:
    """Where a profile's refit is stored: beside it."""
    return profile_path[:-len(".json")] + ".refit.json" if profile_path.endswith(".json") else profile_path + ".refit"


def stored_fit(base: StepModel, path: str) -> StepFit:
    """The refit stored at `path` for `base`, or a fresh one (none stored, or one for another profile)."""
    try:
        with open(path) as f:
            d = json.load(f)
        if StepModel.from_dict(d["base"]) == base:
            return StepFit(base, float(d["offset_ms"]), float(d["scale"]), int(d["steps"]), d.get("error"), path)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return StepFit(base, path=path)


def fit_for(key: tuple, base: StepModel, profile_path: str = "") -> StepFit:
    """This process's one StepFit of the model `key` names (model, dtype, device), started from
    `base` (and the refit stored beside `profile_path`); a new base starts it over."""
    with _fits_lock:
        found = _fits.get(key)
        if found is None or found.base != base:
            found = _fits[key] = stored_fit(base, refit_path(profile_path)) if profile_path else StepFit(base)
        return found


def existing(key: tuple) -> StepFit | None:
    """This process's StepFit of `key`, if a page has read its step model (None: nothing records)."""
    return _fits.get(key)


def record_steps(engine, model) -> None:
    """Let this process's refit of `model` (if a page has read its step model) learn from every real
    step `engine` takes: the Playground's live runs and the labs' runs alike."""
    fit = existing(model_key(model))
    if fit is not None:
        engine.step_observer = fit.observe


def model_key(model) -> tuple:
    """(name, dtype, device) of a loaded model: what a StepFit is kept by."""
    return (model.name, str(model.dtype).replace("torch.", ""), str(model.device))
