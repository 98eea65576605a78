"""What a page may ask of a live run, wherever its engine is: the `Run` protocol.

Two kinds implement it: LiveRun (engine/runs/live.py), an engine in this process, and SharedRun
(remote/shared_run.py), one learner's requests on a shared engine server. The Playground holds
either through this interface only, so a page never reaches inside one (its arrival feed, its
server connection) and a new kind of run needs nothing of the pages but these members.
"""
from __future__ import annotations

from typing import Protocol

from ..core.config import SchedulerPolicy
from .live import RunState, Snapshot
from .workload import WorkloadSpec


class Run(Protocol):
    state: RunState
    message: str                       # why the run ended in ERROR ("" otherwise)

    # ----- controls
    def start(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def step_once(self) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...
    def heartbeat(self) -> None: ...             # the page is still there
    def set_speed(self, speed: float) -> None: ...
    def set_policy(self, policy: SchedulerPolicy, mark: bool = True) -> None: ...   # mark=False: the caller marks it
    def set_workload(self, spec: WorkloadSpec) -> None: ...
    def mark(self, *changes: str, knobs: tuple[str, ...] = ()) -> None: ...   # one mark on the time axis

    # ----- reads
    def policy(self) -> SchedulerPolicy: ...     # the live policy (a shared server's may be changed by others)
    def snapshot(self, summary: bool = True) -> Snapshot: ...
    def now(self) -> float: ...

    @property
    def closed(self) -> bool: ...

    @property
    def step_count(self) -> int: ...

    @property
    def arrived(self) -> int: ...                # requests its workload has sent so far

    @property
    def exhausted(self) -> bool: ...             # its workload has no more requests to send
