"""A Batching Lab server's live run, read over HTTP into the Tables the Playground's charts take.

`LabStream.poll()` asks /lab/steps for the steps taken since the last poll (members come
back as [id, phase, tokens] lists and are turned back into tuples), /lab/requests for the
recent request rows, and returns analysis.tables.Tables: the same shapes a LiveRun's
snapshot gives, so every chart builder draws a remote engine unchanged. It keeps a window
of the latest `keep_steps` steps; a reset on the server (its `run` number changes) starts
the window over.
"""
from __future__ import annotations

from collections import deque

import httpx2 as httpx
import pandas as pd

from analysis.tables import Tables, TraceTables, marks_table
from engine.core.engine import PolicyMark, StepRecord
from engine.core.metrics import LIVE_REQUEST_COLUMNS

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
        self._tables = TraceTables()

    def poll(self) -> Tables:
        rows, marks = self.read()
        requests = pd.DataFrame.from_records(rows, columns=LIVE_REQUEST_COLUMNS)
        return Tables(self._tables.steps(list(self.steps)), requests, marks_table(marks))   # counts: the latest step's

    def read(self) -> tuple[list[dict], list[PolicyMark]]:
        """Take in the steps since the last read (self.steps), and return the recent request rows
        as the server sends them, and its change marks."""
        if self.next_step is None:              # joining: the recent window, not the whole history
            latest = self._get("/lab/steps", {"stream": "false"})["next"]
            self.next_step = max(0, latest - self.steps.maxlen)
        got = self._get("/lab/steps", {"stream": "false", "since": self.next_step})
        if self.run is not None and got["run"] != self.run:      # the server was reset
            self.steps.clear()
            self._tables = TraceTables()    # its rows are the old run's, whatever their step numbers
            self.origin_s, self.from_start = None, False
            got = self._get("/lab/steps", {"stream": "false", "since": 0})
        self.run = got["run"]
        self.steps.extend(step_record(d) for d in got["steps"])
        if self.origin_s is None and self.steps:
            self.origin_s, self.from_start = self.steps[0].t_start_s, self.steps[0].step == 0
        self.next_step = got["next"]
        marks = [mark_of(m) for m in got["marks"]]
        return self._get("/lab/requests", {"limit": self.request_rows})["requests"], marks

    def close(self) -> None:
        self.http.close()

    def _get(self, path: str, params: dict) -> dict:
        r = self.http.get(self.url + path, params=params)
        r.raise_for_status()
        return r.json()
