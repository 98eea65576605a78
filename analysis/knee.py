"""The knee: one rule for every lab and lesson (why batch, find the knee, dynamic batching, the lessons' pictures).

The knee is the smallest setting whose throughput reaches KNEE_SHARE (90%) of the best
throughput measured in the sweep. Past it, more batching can buy at most the last 10% of
throughput while latency keeps growing; before it, a bigger setting still pays. It reads the
mean of repeated runs, so one noisy point cannot move it much, and it needs no evenly spaced
settings.
"""
from __future__ import annotations

import math

KNEE_SHARE = 0.9
RULE = (f"the knee is the smallest setting whose throughput reaches {KNEE_SHARE:.0%} of the best "
        "throughput measured in the sweep (the mean of its runs)")


def knee(settings, throughputs, share: float = KNEE_SHARE):
    """The smallest of `settings` whose throughput is at least `share` × the best; None with
    fewer than two finite points (a single point is no curve)."""
    points = sorted((s, t) for s, t in zip(settings, throughputs) if t is not None and math.isfinite(t))
    if len(points) < 2:
        return None
    best = max(t for _, t in points)
    return next(s for s, t in points if t >= share * best)
