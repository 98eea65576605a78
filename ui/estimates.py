"""A lab run's expected duration, for its run button: a range from the step model's measured error."""
from __future__ import annotations


def duration_text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def estimate_range_text(seconds: float, error: float | None) -> str:
    """'40–60 s (the step model's current error here: 20%)': the estimate ± the step model's median
    error measured on this app's own steps, or one number said to be unchecked before any."""
    if error is None:
        return f"about {duration_text(seconds)} (the step model is not yet checked against this app's own steps)"
    lo, hi = seconds * max(0.0, 1 - error), seconds * (1 + error)
    if hi < 90:
        span = f"{lo:.0f}–{hi:.0f} s"
    else:
        span = f"{lo / 60:.1f}–{hi / 60:.1f} min"
    return f"{span} (± the step model's current error here, {error:.0%})"


def estimate_text(seconds: float, calibrated: bool, error: float | None = None) -> str:
    """A run's expected duration for the run buttons, as a range from the step model's measured
    error on this machine (`error`; read from the app's step model where not given): from this
    machine's measured speed, or (before anything was measured here) the cost model's guess,
    said as such."""
    if error is None:
        from ui.calculators import saved_step_model
        error = saved_step_model()[0].error
    text = estimate_range_text(seconds, error)
    return text if calibrated else f"{text} by the cost model; this machine's own speed is learned from its first run"
