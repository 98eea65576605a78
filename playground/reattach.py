"""Runs that outlive a page reload: a process-wide registry of Playground runs by token.

A reload ends the browser session that started a run and opens a new one. The run's token
travels in the page's address (`?run=<token>`), so the new session finds the run here and
takes it over. A run whose owner session is gone is kept for RELOAD_GRACE_S; if nobody takes it
over by then, its engine thread sees `keeps(token)` turn false and closes the run (its KV pool
is freed). A link copied while its owner is still connected does not take the run over: the
other person gets a run of their own. No Streamlit here; the clock is injectable for tests.
"""
from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Callable

RELOAD_GRACE_S = 60.0
TOKEN_PARAM = "run"           # the page address's query parameter that holds a run's token
log = logging.getLogger("batching_lab")


@dataclass(slots=True)
class _Held:
    run: object                          # a PlaygroundRun (anything with a `closed` property)
    connected: Callable[[], bool]        # is the owner's browser session connected right now?
    gone_since: float | None = None


class RunRegistry:
    def __init__(self, grace_s: float = RELOAD_GRACE_S, clock=time.monotonic):
        self.grace_s = grace_s
        self.clock = clock
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    @staticmethod
    def new_token() -> str:
        """A token no one can guess (it lets a session take the run over)."""
        return secrets.token_urlsafe(12)

    def add(self, token: str, run, connected: Callable[[], bool]) -> None:
        with self._lock:
            for old in [t for t, held in self._held.items() if held.run.closed]:
                del self._held[old]          # closed meanwhile (idle timeout, an error)
            self._held[token] = _Held(run, connected)

    def keeps(self, token: str) -> bool:
        """The run's liveness, asked by its engine thread: true while its owner is connected or
        has been gone less than grace_s. Once false, the run is dropped from the registry."""
        with self._lock:
            held = self._held.get(token)
            if held is None:
                return False
            if held.connected():
                held.gone_since = None
                return True
            now = self.clock()
            if held.gone_since is None:
                held.gone_since = now
            if now - held.gone_since < self.grace_s:
                return True
            del self._held[token]
        log.warning("a Playground run's page has been gone %.0f s: closing the run", self.grace_s)
        return False

    def take_over(self, token: str, connected: Callable[[], bool]):
        """The run for `token`, now owned by the session whose liveness is `connected`; None if
        there is no such run, or its owner is still connected (a shared link, not a reload)."""
        with self._lock:
            held = self._held.get(token)
            if held is None or held.connected() or held.run.closed:
                return None
            held.connected, held.gone_since = connected, None
            return held.run

    def forget(self, token: str) -> None:
        """The owner let go of the run (Reset, a new run): it is no longer kept here."""
        with self._lock:
            self._held.pop(token, None)

    def __contains__(self, token: str) -> bool:
        with self._lock:
            return token in self._held

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


# The one registry of this server process (every browser session's runs).
RUNS = RunRegistry()
