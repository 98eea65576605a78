"""Plain-words notices about a Playground setup before (and while) it runs.

Sliders at their extremes are allowed, never an error: the page shows what they mean
(everything arriving at once, no batching, requests that can never fit and will be rejected).
While a run goes, the page passes what it measured (requests rejected so far), so a notice
never contradicts the status line. No Streamlit here.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.runs.live import QUEUE_CAP
from playground.setup import KNOBS, Setup


@dataclass(frozen=True, slots=True)
class Notice:
    level: str      # "info" (what this means) or "warning" (some requests will be rejected)
    text: str


def length_range(kind: str, lo: int, hi: int) -> tuple[int, int]:
    """The shortest and longest length a distribution can draw."""
    if kind == "fixed":
        return lo, lo
    return lo, max(lo, hi)


def check(setup: Setup, max_model_len: int | None = None,
          rejected_so_far: int | None = None, rate_hi: float = KNOBS["rate"].hi) -> list[Notice]:
    """Notices for a setup; `rejected_so_far`: requests the run has rejected (None before a run);
    `rate_hi`: where the rate slider ends for the engine chosen (playground.capacity.rate_slider_hi)."""
    s, out = setup, []
    p_min, p_max = length_range(s.prompt_kind, s.prompt_lo, s.prompt_hi)
    o_min, o_max = length_range(s.output_kind, s.output_lo, s.output_hi)
    listed = " Rejected requests are listed with their reason below the charts."
    if rejected_so_far is None:
        measured = listed
    elif rejected_so_far == 0:
        measured = " None so far."
    else:
        measured = f" {rejected_so_far:,} so far.{listed}"

    def would_reject(what: str, limit_text: str, smallest: int, largest: int, limit: int) -> None:
        if smallest > limit:
            out.append(Notice("warning", f"Every request will be rejected: {what} "
                                         f"({smallest}–{largest} tokens) exceed {limit_text}."))
        elif largest > limit:
            may = "can" if rejected_so_far == 0 else "will"
            out.append(Notice("warning", f"Some requests {may} be rejected: {what} reach {largest} "
                                         f"tokens, more than {limit_text}.{measured}"))

    would_reject("prompt + output", f"the KV cache capacity of {s.kv_capacity_tokens} tokens",
                 p_min + o_min, p_max + o_max, s.kv_capacity_tokens)
    if not s.enable_chunked_prefill:
        would_reject("prompts", f"the token budget of {s.max_num_batched_tokens} tokens per step "
                                "with chunked prefill off (turn chunking on, or raise the budget)",
                     p_min, p_max, s.max_num_batched_tokens)
    if max_model_len is not None:
        would_reject("prompt + output", f"the model's context of {max_model_len} tokens",
                     p_min + o_min, p_max + o_max, max_model_len)

    if s.rate == 0:
        out.append(Notice("info", f"Arrival rate 0: all {s.num_requests} requests arrive at once "
                                  "at the start, like an offline batch job"
                                  + (" (continuous traffic needs a rate above 0)." if s.continuous else ".")))
    elif s.rate >= rate_hi:
        climb = (f"until {QUEUE_CAP:,} wait, after which new arrivals are turned away" if s.endless
                 else "all run long")
        out.append(Notice("info", f"{s.rate:g} requests/s is far more than this engine can serve: "
                                  f"expect the waiting line, and TTFT with it, to climb {climb}."))
    if s.max_num_seqs == 1:
        out.append(Notice("info", "max_num_seqs = 1: one request per step, no batching at all. "
                                  "Compare throughput with a larger batch."))
    if s.mode == "static" and not s.endless and s.max_num_seqs > s.num_requests:
        out.append(Notice("info", f"Static batches wait for {s.max_num_seqs} requests but the "
                                  f"workload has only {s.num_requests}: each batch starts when the "
                                  f"oldest request has waited max_wait_ms ({s.max_wait_ms:g} ms)."))
    if s.max_waiting:
        out.append(Notice("info", f"Admission control on: arrivals are rejected while "
                                  f"{s.max_waiting} requests already wait."))
    return out
