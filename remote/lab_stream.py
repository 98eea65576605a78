"""A Batching Lab server's live run, read over HTTP: the one reader of /lab/steps and /lab/requests.

`LabStream.read_steps()` asks /lab/steps for the steps taken since the last read (members come
back as [id, phase, tokens] lists and are turned back into tuples) and keeps a window of the
latest `keep_steps` of them as the engine's StepRecords; a reset on the server (its `run`
number changes) starts the window over. `read()` adds /lab/requests' recent request rows.
analysis.tables.StreamTables turns a stream into the Tables a LiveRun's snapshot gives, so
every chart builder draws a remote engine unchanged; the replicas' autoscaler adds up the
steps' times.
"""
from __future__ import annotations

from collections import deque

import threading

import httpx2 as httpx

from engine.core.engine import PolicyMark, StepRecord

KEEP_STEPS = 2000          # as a LiveRun keeps
REQUEST_ROWS = 500         # recent request rows asked for at each poll


def step_record(d: dict) -> StepRecord:
    """A step as /lab/steps sends it -> the engine's StepRecord, members as tuples again."""
    return StepRecord(**{**d, "members": tuple((str(rid), str(phase), int(n)) for rid, phase, n in d["members"]),
                         "drafts": tuple((str(rid), int(k), int(a)) for rid, k, a in d.get("drafts", ()))})


def mark_of(d: dict) -> PolicyMark:
    """A change mark as /lab/steps sends it -> the engine's PolicyMark."""
    return PolicyMark(d["step"], d["t_s"], d["label"], d.get("detail", ""), tuple(d.get("knobs", ())))


class LabStream:
    def __init__(self, url: str, keep_steps: int = KEEP_STEPS, request_rows: int = REQUEST_ROWS,
                 timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        self.request_rows = request_rows
        self.http = httpx.Client(timeout=timeout_s)
        self.steps: deque[StepRecord] = deque(maxlen=keep_steps)
        self.run: int | None = None
        self.next_step: int | None = None     # the next step to ask for (None: not asked yet)
        self.origin_s: float | None = None    # server time of the run's first step seen (step 0 if seen)
        self.from_start = False               # the origin is the run's step 0
        self._lock = threading.Lock()         # one read at a time: each step is taken in once

    def read(self) -> tuple[list[dict], list[PolicyMark]]:
        """Take in the steps since the last read (self.steps), and return the recent request rows
        as the server sends them, and its change marks."""
        _, marks = self.read_steps()
        return self._get("/lab/requests", {"limit": self.request_rows})["requests"], marks

    def read_steps(self) -> tuple[list[StepRecord], list[PolicyMark]]:
        """Take in the steps since the last read: the new ones (after a reset, the new run's from
        its start) and the server's change marks."""
        with self._lock:
            if self.next_step is None:              # joining: the recent window, not the whole history
                latest = self._get("/lab/steps", {"stream": "false"})["next"]
                self.next_step = max(0, latest - self.steps.maxlen)
            got = self._get("/lab/steps", {"stream": "false", "since": self.next_step})
            if self.run is not None and got["run"] != self.run:      # the server was reset
                self.steps.clear()
                self.origin_s, self.from_start = None, False
                got = self._get("/lab/steps", {"stream": "false", "since": 0})
            self.run = got["run"]
            new = [step_record(d) for d in got["steps"]]
            self.steps.extend(new)
            if self.origin_s is None and self.steps:
                self.origin_s, self.from_start = self.steps[0].t_start_s, self.steps[0].step == 0
            self.next_step = got["next"]
            return new, [mark_of(m) for m in got["marks"]]

    def close(self) -> None:
        self.http.close()

    def _get(self, path: str, params: dict) -> dict:
        r = self.http.get(self.url + path, params=params)
        r.raise_for_status()
        return r.json()
