"""The speculation lab's break-even: how much longer a step with guesses takes than one without, on a step
model or a GPU's roofline, the tokens a request must make a step to pay for it, and the words for which way a
ratio went. No Streamlit."""
from __future__ import annotations

import math

import pandas as pd

from labs.speculation.experiment import GPU, MAX_NEW, row, sim_requests


def direction(ratio: float, within: float = 0.05) -> str:
    """The spec_big question's choice a decode ratio ngram ÷ off answers."""
    return "faster" if ratio > 1 + within else "slower" if ratio < 1 - within else "about the same (within 5%)"


def change_words(ratio: float) -> str:
    return {"faster": "faster", "slower": "slower"}.get(direction(ratio), "about as fast")


def past_ridge(device) -> int:
    """A batch past a device's ridge: the power of two at or above twice its ridge batch (course.examples.ridge)."""
    from course.examples import ridge
    b = 1
    while b < 2 * ridge(device)["batch"]:
        b *= 2
    return b


def context_of(workload: str) -> int:
    """A request's context midway through its output, in the simulator's lengths."""
    return len(sim_requests(workload, 1)[0].prompt_token_ids) + MAX_NEW // 2


def step_cost_ratio(step_model, batch: int, k: int, context: int) -> float:
    """How many times longer a decode step of `batch` requests takes when each also checks k guesses (k + 1
    rows, each sampled, attending as a chunk does) than with one row each, by `step_model`."""
    from engine.core.step_model import StepShape, causal_pairs
    rows = batch * (k + 1)
    verify = StepShape(rows, rows, 0, batch * causal_pairs(context, k + 1))
    return step_model.predict(verify) / step_model.decode_ms(batch, context)


def break_even_rows(cpu_model, gpu_model, k: int, big: int, past: int, table: pd.DataFrame,
                    gpu: pd.DataFrame) -> list[dict]:
    """For each machine and batch: how many times longer a step takes when every request checks k guesses
    (the break-even: a request must make this many tokens a step on average), the tokens a request made per
    decode step with speculation on (from `table` / `gpu`), and the ratio those two predict."""
    out = []
    for name, model, t, batches in (("this machine's step model", cpu_model, table, (1, big)),
                                    (f"{GPU} roofline", gpu_model, gpu, (1, big, past))):
        for b in batches:
            ratio = step_cost_ratio(model, b, k, context_of("copy"))
            r = row(t, "copy", b)
            made = r.tokens_per_step if r is not None else math.nan
            out.append({"machine": name, "batch": b, "step with guesses ÷ without (break-even)": ratio,
                        "tokens per request-step, copies": made,
                        "full-batch estimate (tokens ÷ break-even)": made / ratio})
    return out
