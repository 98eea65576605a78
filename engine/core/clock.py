"""Two clocks with one interface.

WallClock reads real time: the real model runs under it. VirtualClock only moves when told
to: the cost model advances it by a predicted step time, so a sweep of thousands of steps
finishes in a blink and idle gaps between arrivals cost nothing.
"""
from __future__ import annotations

import time


class WallClock:
    """Real time since the clock was made, less the time it was stopped: a paused live run
    stops its clock, so its arrivals and its requests' waits stand still with it."""
    virtual = False

    def __init__(self):
        self._t0 = time.perf_counter()
        self._stopped_at: float | None = None

    def now(self) -> float:
        t = time.perf_counter() if self._stopped_at is None else self._stopped_at
        return t - self._t0

    def stop(self) -> None:
        if self._stopped_at is None:
            self._stopped_at = time.perf_counter()

    def go(self) -> None:
        if self._stopped_at is not None:
            self._t0 += time.perf_counter() - self._stopped_at
            self._stopped_at = None

    def sleep_until(self, t_s: float, max_sleep_s: float = 0.05) -> None:
        """Sleep towards `t_s`, at most `max_sleep_s` at a time so a caller can stay responsive."""
        dt = t_s - self.now()
        if dt > 0:
            time.sleep(min(dt, max_sleep_s))

    def advance(self, dt_s: float) -> None:
        pass  # real time advances by itself


class VirtualClock:
    virtual = True

    def __init__(self, t_s: float = 0.0):
        self.t = t_s

    def now(self) -> float:
        return self.t

    def sleep_until(self, t_s: float, max_sleep_s: float = 0.0) -> None:
        self.t = max(self.t, t_s)

    def advance(self, dt_s: float) -> None:
        self.t += dt_s

    def stop(self) -> None:
        pass  # it only moves when told to

    def go(self) -> None:
        pass
