"""The Playground's prediction (lesson 9 asks it too): the arrival rate at which the waiting queue
stops emptying, scored on the Playground's settings as they are when the answer is shown."""
from __future__ import annotations

import math

import streamlit as st

from ui.predict import ask, committed, predictions, question, reveal


def settings(policy, workload) -> dict:
    """What the answer depends on, named: the batch limits and the workload's lengths."""
    if policy is None or workload is None:
        return {}
    return {"mode": policy.mode, "max_num_seqs": policy.max_num_seqs,
            "token budget": policy.max_num_batched_tokens,
            "chunked prefill": "on" if policy.enable_chunked_prefill else "off",
            "prompts": f"{workload.prompt_lo}–{workload.prompt_hi} tokens",
            "outputs": f"{workload.output_lo}–{workload.output_hi} tokens"}


def capacity_req_s(step_model, policy, workload) -> float:
    """Requests per second an engine with `policy` finishes of `workload`'s requests with its queue never
    empty, as `step_model` predicts it: the simulator (engine.simulate) runs four full batches of them,
    all at once, and counts finishes over the middle half."""
    from dataclasses import replace

    from engine.runs.arrivals import build_requests
    from engine.core.config import EngineConfig
    from engine.sim.simulate import SimProfile, simulate

    spec = replace(workload, num_requests=max(16, 4 * policy.max_num_seqs), rate=0.0)
    name = getattr(step_model, "label", "") or "step model"
    engine = simulate(EngineConfig(), policy, SimProfile(name, name, step_model), build_requests(spec))
    done = sorted(r.finish_s for r in engine.requests.values() if r.finish_s is not None)
    a, b = len(done) // 4, (3 * len(done)) // 4
    return (b - a) / (done[b] - done[a]) if len(done) >= 4 and done[b] > done[a] else math.nan


def show(step_model, policy, workload, started: bool = False) -> None:
    """The Playground's prediction (lesson 9 asks it too): the arrival rate at which the waiting queue
    stops emptying. It never holds the page up: the learner commits when they like, and "Show the
    answer" puts the step model's capacity for the current settings beside the guess, locked.
    Open until a guess is committed or a run `started`: then the charts have the screen."""
    q = question("playground", settings=settings(policy, workload))
    with st.expander(":material/psychology: Predict first: when does the queue stop emptying?",
                     expanded=committed(q) is None and not started):
        guess = ask(q, holds_results=False)
        if guess is None:
            return
        entry = predictions()[q.slot]
        if not entry.get("locked") and not st.button("Show the answer", key=f"{q.key}__show",
                                                      help="The step model's answer for the settings on the "
                                                           "left; your guess is locked beside it."):
            st.caption("Run the Playground and raise the arrival rate until waiting stops returning to zero; "
                       "then press Show the answer.")
            return
        mu = capacity_req_s(step_model, policy, workload)
        reveal(q, guess, mu, f"With max_num_seqs {policy.max_num_seqs} and this workload, the step model says the "
               f"engine finishes about {mu:.2f} requests/s with its queue never empty: arrivals faster than that "
               "pile up. (A prediction from the step model; what you saw on the waiting chart is the measurement.)",
               measured_text=f"{mu:.2f} requests/s", source="simulated")
