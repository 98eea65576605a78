"""One line on every lab page saying how its requests arrive, in the same words everywhere.

How the load arrives changes what a run measures (lesson 13): requests all at once (an offline batch),
open load (arrivals on their own schedule, whatever the server does) or a closed loop (clients that
wait for each answer before they send again). The words for a workload are read off its WorkloadSpec,
so the line cannot say Poisson of a batch.
"""
from __future__ import annotations

import streamlit as st

from engine.runs.workload import WorkloadSpec

AT_ONCE = "all at once (an offline batch: every request is there from the start)"
CLOSED = "a closed loop (a fixed number of clients, each sending its next request when its last one ends)"
NO_ARRIVALS = "no arrivals (each batch is built by hand and timed)"


def words(spec: WorkloadSpec) -> str:
    """How `spec`'s requests arrive, in the course's words."""
    if spec.rate == 0:
        return AT_ONCE
    pattern = ("random (Poisson)" if spec.burstiness == 1 else
               "bursty" if spec.burstiness > 1 else "evenly spaced")
    return f"open load, {pattern} arrivals at a set rate (a slow server does not slow them)"


def workload(spec: WorkloadSpec, slots: int) -> str:
    """The workload's shape in one clause: "prompts 16–64 tokens, outputs 8–24, continuous batching with 8 slots"."""
    return (f"prompts {spec.prompt_len.lo}–{spec.prompt_len.hi} tokens, outputs {spec.output_len.lo}–"
            f"{spec.output_len.hi}, continuous batching with {slots} slots")


def text(*parts) -> str:
    """The line: each part a WorkloadSpec, words, or (what it is, a WorkloadSpec or words)."""
    def one(part) -> str:
        if isinstance(part, tuple):
            label, what = part
            return f"{label}: {one(what)}"
        return words(part) if isinstance(part, WorkloadSpec) else str(part)
    return "Load: " + "; ".join(one(p) for p in parts) + "."


def show(*parts) -> None:
    st.caption(":material/input: " + text(*parts))
