"""Background load: the server drawing its own requests from a WorkloadSpec, for a classroom.

An instructor turns it on so the class sees a busy engine before anyone presses send. The
requests come from engine.runs.arrivals (the one request generator), so a seed gives the same
requests as the CLI and the Playground. Only the engine thread calls `due`; each start
numbers its requests afresh ("bg1-0", "bg1-1", ... then "bg2-0") so ids never repeat.
"""
from __future__ import annotations

from dataclasses import asdict, fields, replace

from ..runs.arrivals import ArrivalFeed
from ..core.request import Request
from ..runs.workload import PromptMaker, WorkloadSpec

SPEC_FIELDS = {f.name for f in fields(WorkloadSpec)} - {"start_s", "id_prefix"}


def spec_from(body: dict) -> WorkloadSpec:
    """A validated WorkloadSpec from a JSON object of its knobs; ValueError names what is wrong."""
    unknown = set(body) - SPEC_FIELDS
    if unknown:
        raise ValueError(f"unknown workload knob(s): {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(sorted(SPEC_FIELDS))})")
    return replace(WorkloadSpec(), **body).validate()


class BackgroundLoad:
    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer
        self._prompts: PromptMaker | None = None
        self.feed: ArrivalFeed | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        return self.feed is not None and not self.feed.exhausted

    def start(self, spec: WorkloadSpec, now_s: float) -> None:
        if self._prompts is None and self.tokenizer is not None:
            self._prompts = PromptMaker(self.tokenizer)      # read once, on the first start
        self.starts += 1
        self.feed = ArrivalFeed(replace(spec, start_s=now_s, id_prefix=f"bg{self.starts}-"), self._prompts)

    def stop(self) -> None:
        self.feed = None

    def due(self, now_s: float) -> list[Request]:
        return self.feed.due(now_s) if self.running else []

    def next_s(self) -> float | None:
        return self.feed.next_s if self.running else None

    def state(self) -> dict:
        """What GET /lab/load answers: running or not, the spec, and how many were sent."""
        spec = None if self.feed is None else {k: v for k, v in asdict(self.feed.spec).items() if k in SPEC_FIELDS}
        return {"running": self.running, "spec": spec, "sent": 0 if self.feed is None else self.feed.count}
