"""A mark on a run's time axis: the changes (policy, workload) that took effect together at one step."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class PolicyMark:
    """Changes that took effect together at one step (policy, workload): one mark on the time axis."""
    step: int
    t_s: float
    label: str                        # short, drawn on the charts: the first change, and how many more
    detail: str = ""                  # every change, for the mark's hover
    knobs: tuple[str, ...] = ()       # the names of the knobs changed, where known

    @classmethod
    def of(cls, step: int, t_s: float, changes: tuple[str, ...], knobs: tuple[str, ...] = ()) -> "PolicyMark":
        """One mark for changes made at once ('max_num_seqs 8→2', in words)."""
        return cls(step, t_s, cls.short(changes), ", ".join(changes), tuple(knobs))

    @staticmethod
    def short(changes: tuple[str, ...]) -> str:
        """The label for changes made at once: the first one, and how many more."""
        more = len(changes) - 1
        return changes[0] + (f" +{more} more" if more > 0 else "") if changes else ""
