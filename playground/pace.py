"""How often the Playground's live part refreshes on this machine.

Every refresh costs the server CPU that the engine would otherwise use: the page's own work, then
Streamlit's (the rerun, its messages, the websocket). On a small machine that comes straight out
of the engine's steps. The live part refreshes every view.REFRESH_S where a refresh is cheap, and
less often where it costs more, so that its share of a core stays near SHARE whatever the machine:
the cost is measured on this machine, as the CPU time of each refresh on its own thread (the
page's work and Streamlit's on that thread; the server's websocket work comes on top of it, in
proportion). Never less often than SLOWEST_S, so that a learner still sees the run move.
"""
from __future__ import annotations

import math
import re
import statistics
from collections import deque

from playground.view import REFRESH_S, TIME_CHARTS_EVERY_S

SAYS = "The charts refresh every"   # how words() starts; interval_said() reads it back

SHARE = 0.04          # of a core: a refresh's CPU time on its own thread over the time between refreshes.
                      # The engine loses more than this: the server's websocket work comes on top, and
                      # so does the browser's drawing, which even on another core shares the memory
                      # bandwidth the engine's steps need.
SLOWEST_S = 1.5       # the longest time between refreshes, however costly a refresh is
STEP_S = 0.25         # intervals are whole quarter seconds: a small change in cost moves nothing
SAMPLES = 9           # the latest refreshes whose mean cost sets the interval
FIRST = 5             # refreshes measured before the interval moves from REFRESH_S
TRIM = 2              # the cheapest and the costliest refreshes left out of the mean, each side
SETTLE = 0.85         # a faster interval is taken only where it would keep the share this far under
                      # SHARE: a cost near a boundary does not switch back and forth (each switch
                      # redraws the whole page)


class RefreshPace:
    """The latest refreshes' CPU times, and the interval between refreshes that they call for."""

    def __init__(self) -> None:
        self.costs: deque[float] = deque(maxlen=SAMPLES)
        self.every = REFRESH_S

    def record(self, cpu_s: float) -> None:
        self.costs.append(cpu_s)
        cost = self.cost_s()
        if cost is None:
            return
        wanted = min(SLOWEST_S, max(REFRESH_S, math.ceil(cost / SHARE / STEP_S - 1e-9) * STEP_S))
        if wanted > self.every or cost / SHARE < (self.every - STEP_S) * SETTLE:
            self.every = wanted

    def cost_s(self) -> float | None:
        """The mean CPU time of the latest refreshes less the TRIM cheapest and the TRIM costliest,
        or None before FIRST have been measured. A mean, because refreshes that rebuild the time
        charts alternate with refreshes that do not, and a median of such a mix jumps from one
        kind to the other as the window moves; the CPU share is the mean. Without the extremes,
        because an unusual refresh (a garbage collection, the first after the page was drawn)
        says nothing about the next."""
        if len(self.costs) < FIRST:
            return None
        return statistics.fmean(sorted(self.costs)[TRIM:len(self.costs) - TRIM])

    def interval_s(self) -> float:
        return self.every

    def time_charts_every_s(self) -> float:
        """The time charts are rebuilt every other refresh or so, at any interval."""
        return TIME_CHARTS_EVERY_S * self.interval_s() / REFRESH_S

    def words(self) -> str:
        """What the page says about its refresh: the interval and, once measured, why."""
        cost, every = self.cost_s(), self.interval_s()
        if cost is None:
            return f"{SAYS} {every:g} s."
        if every > REFRESH_S:
            return (f"{SAYS} {every:g} s: a refresh takes {1000 * cost:.0f} ms of this machine's "
                    f"CPU on average, so refreshing every {REFRESH_S:g} s would take at least {100 * cost / REFRESH_S:.0f}% of "
                    f"a core from the engine.")
        return f"{SAYS} {every:g} s (a refresh takes {1000 * cost:.0f} ms of this machine's CPU on average)."


def interval_said(text: str) -> float | None:
    """The interval a page's text says its charts refresh at (RefreshPace.words), or None."""
    found = re.search(re.escape(SAYS) + r" ([\d.]+) s", text)
    return float(found.group(1)) if found else None
