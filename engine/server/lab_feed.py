"""What /lab/steps and /lab/requests readers get: the engine read once for all of them.

One task on the event loop takes the engine's new step records every POLL_S, encodes each one
once, keeps the encoded window (as many steps as the engine keeps) and wakes every follower of
/lab/steps. A one-off read first takes any step the engine made since (so a client that has
just had its answer finds that answer's last step), which happens at most once per engine step
however many ask. A reader only joins bytes that are already made, so a hundred readers cost
the engine thread what one does. Request rows are built again only when the engine has moved
on (a step, a new request, a reset), for whoever asks first, and shared the same way.
"""
from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import asdict

from ..core.metrics import request_row
from .openai_schema import json_bytes

POLL_S = 0.05
MAX_REQUEST_ROWS = 5000        # the most rows /lab/requests answers with


def step_json(rec) -> dict:
    return {**asdict(rec), "members": [list(m) for m in rec.members]}


class LabFeed:
    def __init__(self, service, keep_steps: int):
        self.service = service
        self.run = service.run
        self.next = 0                                  # the first step not taken yet
        self.steps: deque[tuple[int, bytes]] = deque(maxlen=keep_steps)    # (step, its JSON)
        self.closed = False
        self._changed = asyncio.Event()
        self._rows: tuple[tuple, list[bytes]] = ((), [])              # (the engine's state then, rows' JSON)
        self._rows_wanted = 0                          # the most rows asked for so far

    # ----- the one reader of the engine

    async def poll(self) -> None:
        while not self.closed:
            self.update()
            await asyncio.sleep(POLL_S)

    def update(self) -> None:
        if self.service.run != self.run:               # a reset: the fresh engine counts from step 0
            self.run, self.next = self.service.run, 0
            self.steps.clear()
        fresh = self.service.steps_since(self.next)
        if not fresh:
            return
        self.steps.extend((rec.step, json_bytes(step_json(rec))) for rec in fresh)
        self.next = fresh[-1].step + 1
        self._wake()

    def catch_up(self) -> None:
        """Take the steps the engine made since the last poll, if any (an int compared otherwise)."""
        if self.service.run != self.run or self.service.engine.step_count != self.next:
            self.update()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # ----- what readers get

    def since(self, first: int) -> list[tuple[int, bytes]]:
        """The kept steps numbered `first` and later."""
        if not self.steps:
            return []
        return list(itertools.islice(self.steps, max(0, first - self.steps[0][0]), None))

    async def follow(self, first: int | None):
        """Server-sent events, one per step, from step `first` (None: from now) until closed."""
        nxt, run = (self.next if first is None else first), self.run
        while not self.closed:
            if self.run != run:
                nxt, run = 0, self.run
            batch = self.since(nxt)
            if batch:
                nxt = batch[-1][0] + 1
                yield b"".join(b"data: " + j + b"\n\n" for _, j in batch)
            await self._changed.wait()

    def steps_once(self, first: int | None) -> bytes:
        """/lab/steps?stream=false: the kept steps from `first`, where to ask next, the run, the marks."""
        self.catch_up()
        start = self.next if first is None else first
        batch = self.since(start)
        marks = [asdict(m) for m in self.service.engine.marks]
        return (b'{"steps":[' + b",".join(j for _, j in batch) + b'],"next":%d,"run":%d,"marks":'
                % (batch[-1][0] + 1 if batch else start, self.run) + json_bytes(marks) + b"}")

    def requests(self, limit: int) -> bytes:
        """/lab/requests: the latest `limit` request rows, in the requests.csv columns."""
        engine = self.service.engine
        state = (self.service.run, engine.step_count, len(engine.requests))
        built, rows = self._rows
        if state != built or limit > self._rows_wanted:
            self._rows_wanted = max(self._rows_wanted, limit)
            recent = list(engine.requests.values())[-self._rows_wanted:] if self._rows_wanted else []
            rows = [json_bytes(request_row(r)) for r in recent]
            self._rows = (state, rows)
        return b'{"requests":[' + b",".join(rows[len(rows) - min(limit, len(rows)):]) + b"]}"
