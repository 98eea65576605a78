"""Speculative decoding's two halves in the engine core: checking drafted tokens against the
model's own (greedy verification), and counting what was accepted over a run.

The drafts come from engine/core/ngram.py (the scheduler asks for them as it plans a decode); the
model runs each request's last token and its drafts in one forward and gives back its own token
at every one of those positions; `accept` keeps what plain decoding would have written.
"""
from __future__ import annotations

import math


def accept(draft: tuple[int, ...], target: list[int]) -> list[int]:
    """Greedy verification of drafted tokens: `target` holds the model's own token at each of
    the 1 + len(draft) positions checked (after the last real token, and after each draft).
    Drafts are accepted while they equal the model's token; the first one that differs is
    replaced by the model's, and if all are accepted the model's token after the last one comes
    free. So a step makes 1 to len(draft) + 1 tokens, each the one plain decoding would have made
    (vLLM's rejection sampler, in its greedy case: vllm/v1/sample/rejection_sampler.py)."""
    if len(target) != len(draft) + 1:
        raise ValueError(f"{len(target)} verified tokens for {len(draft)} drafts (want {len(draft) + 1})")
    n = 0
    while n < len(draft) and draft[n] == target[n]:
        n += 1
    return list(draft[:n]) + [target[n]]


def add_per_position(counts: list[int], accepted: int) -> None:
    """Count one draft whose first `accepted` tokens were accepted: one more at each of those positions."""
    counts.extend([0] * (accepted - len(counts)))
    for i in range(accepted):
        counts[i] += 1


def speculation(steps, retired=None) -> dict:
    """Speculative decoding's whole-run counts, from the step records' drafts, in vLLM's terms
    (vllm/v1/spec_decode/metrics.py): drafts, drafted and accepted tokens, accepted tokens at
    each draft position, the acceptance rate (NaN where nothing was drafted) and the mean
    acceptance length (1 + accepted per draft: the model's own token counts)."""
    old = retired
    drafts = drafted = accepted = 0
    per_pos: list[int] = []
    if old is not None:            # a live run: what left its window (metrics.Retired)
        drafts, drafted, accepted = old.spec_drafts, old.spec_draft_tokens, old.spec_accepted_tokens
        per_pos = list(old.spec_accepted_per_pos)
    for s in steps:
        for _, d, a in s.drafts:
            drafts += 1
            drafted += d
            accepted += a
            add_per_position(per_pos, a)
    return {"spec_decode_num_drafts": drafts, "spec_decode_num_draft_tokens": drafted,
            "spec_decode_num_accepted_tokens": accepted, "spec_decode_num_accepted_tokens_per_pos": per_pos,
            "spec_decode_acceptance_rate": accepted / drafted if drafted else math.nan,
            "spec_decode_mean_acceptance_length": 1 + accepted / drafts if drafts else math.nan}
