"""A lab run's expected duration, for its run button: a range from the step model's measured error."""
from __future__ import annotations

from engine.sim.machine_speed import MachineSpeed


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


def estimate_text(seconds: float, speed: MachineSpeed | None) -> str:
    """A run's expected duration for the run buttons: `seconds` as this machine's step model `speed`
    (labs.runs.estimate) times the runs, a range from its current error; on the hand-set guess, said
    as such; `speed` None: a figure not from this machine's step model (a fixed one, said so)."""
    if speed is None:
        return f"about {duration_text(seconds)} (a rough figure, not from this machine's step model)"
    if not speed.calibrated:
        return (f"about {duration_text(seconds)} on a guessed step model: this machine is not calibrated yet "
                "(the Playground measures it on its first run)")
    return estimate_range_text(seconds, speed.error)
