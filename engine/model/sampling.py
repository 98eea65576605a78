"""Sampling a token from a row of logits: temperature and nucleus (top-p), seeded per position."""
from __future__ import annotations

import torch


def sample_token(logits: torch.Tensor, temperature: float, top_p: float, seed: int | None, position: int) -> int:
    """Temperature + nucleus sampling on CPU in float32.

    The generator is seeded from (seed, position), so a request draws the same token whatever
    else shares its batch, and on CPU or GPU alike. seed=None: fresh randomness each call.
    """
    logits = logits.detach().float().cpu()
    probs = torch.softmax(logits / temperature, dim=-1)
    if not torch.isfinite(probs).all():
        # A tiny temperature (1e-300) overflowed float32. Shifted so the top logit is 0 and in
        # float64, the same softmax stays finite and tends to greedy, as it should.
        probs = torch.softmax((logits.double() - logits.max()) / temperature, dim=-1).float()
    if top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        keep = (sorted_p.cumsum(0) - sorted_p) < top_p   # always keeps the most likely token
        probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_p[keep])
    gen = None
    if seed is not None:
        gen = torch.Generator().manual_seed((seed * 1_000_003 + position) % (2 ** 63))
    return int(torch.multinomial(probs, 1, generator=gen))
