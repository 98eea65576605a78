"""Closed-loop load: a fixed number of clients, each sending its next request the moment its last one
ends, as a benchmark run at a fixed concurrency (`--max-concurrency`, guidellm's `concurrent`) loads a
server.

Open load (engine.runs.arrivals) gives every request its arrival time in advance: a slow server does
not slow the arrivals, and a queue forms inside the engine. A closed loop sends only when a client is
free, so the engine never holds more than `concurrency` requests and the queue lives in the clients,
where the server's own metrics never see it.

The requests keep their order and content; the loop overwrites their arrival times with the moments
it sends them (zero think time: the end of the step that finished the client's last request).
"""
from __future__ import annotations

from collections import deque

from ..core.engine import Engine
from ..core.request import Request


class ClosedLoop:
    """`concurrency` clients sharing one list of requests, taken in order."""

    def __init__(self, requests: list[Request], concurrency: int):
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency {concurrency!r} is not allowed (a whole number of clients, 1 or more)")
        self.concurrency = concurrency
        self.queue = deque(requests)             # not sent yet
        self.in_flight: list[Request] = []       # sent, not ended

    @property
    def exhausted(self) -> bool:
        return not self.queue

    def send(self, engine: Engine) -> int:
        """Every free client sends its next request now (one ended a moment ago frees its client).
        Returns how many were sent."""
        self.in_flight = [r for r in self.in_flight if not r.done]
        now = engine.clock.now()
        sent = 0
        while self.queue and len(self.in_flight) < self.concurrency:
            req = self.queue.popleft()
            req.arrival_s = now
            engine.submit(req)
            self.in_flight.append(req)
            sent += 1
        return sent


def run_closed_loop(engine: Engine, requests: list[Request], concurrency: int, on_step=None) -> None:
    """Run `requests` through `engine` from `concurrency` clients until every one has ended."""
    loop = ClosedLoop(requests, concurrency)
    loop.send(engine)
    while engine.has_work() or not loop.exhausted:
        rec = engine.step()
        if rec is not None and on_step is not None:
            on_step(rec)
        if loop.send(engine) or rec is not None:
            continue
        wake = engine.next_wake_s()
        if wake is None:
            break                         # nothing in flight, nothing to send
        engine.clock.sleep_until(max(wake, engine.clock.now()))
