"""The app process's one reader of the classroom server, shared by every browser session.

Each session asks `board(session_id)` at its own refresh. Whoever comes first after the
refresh interval polls the server (remote.lab_stream) and builds the board once; everyone
else gets the board already built. So the server sees one reader however many students
watch, and the figures cost the same for one viewer as for thirty.

The refresh interval grows with the number of viewers (sessions seen lately), so that on a
small machine a full room does not starve the engine:
    interval = clamp(BASE_S + PER_VIEWER_S × viewers, MIN_S, MAX_S)
"""
from __future__ import annotations

import threading
import time

from remote.lab_control import LabControl
from remote.lab_stream import LabStream

from analysis.membership import OTHER_HUE
from analysis.tables import StreamTables

from .board import BACKGROUND, Board, build, student

BASE_S, PER_VIEWER_S, MIN_S, MAX_S = 0.5, 0.1, 1.0, 5.0
VIEWER_TIMEOUT_S = 3 * MAX_S        # a session not seen for this long has left
# A board this share of the interval old is rebuilt at the next session's refresh. A session's
# timer fires about one interval after its last refresh, often a little early: with the board due
# at exactly the interval, every other refresh found the old board and the charts moved at half
# the rate.
DUE_AT = 0.8


def refresh_interval_s(viewers: int) -> float:
    return min(MAX_S, max(MIN_S, BASE_S + PER_VIEWER_S * viewers))


class ClassroomFeed:
    def __init__(self, url: str):
        self.url = url
        self.stream = LabStream(url)
        self.tables = StreamTables(self.stream)
        self.reader = LabControl(url)          # no token: reads only
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()          # one refresh at a time
        self._board: Board | None = None
        self._built_at = 0.0
        self.error = ""
        self.hues: dict[str, int] = {BACKGROUND: OTHER_HUE}   # each student's colour, theirs for the whole class
        self._origin_of: tuple = ()                 # (run, first step seen) the origin was worked out for
        self._origin_s = 0.0

    @property
    def viewers(self) -> int:
        now = time.monotonic()
        for sid in [s for s, t in self._seen.items() if now - t > VIEWER_TIMEOUT_S]:
            self._seen.pop(sid, None)
        return len(self._seen)

    def interval_s(self) -> float:
        return refresh_interval_s(self.viewers)

    def board(self, session_id: str, fresh: bool = False) -> Board | None:
        """The latest board (None until the server first answers). `fresh`: rebuild now
        (after this session changed something), not at the next interval."""
        self._seen[session_id] = time.monotonic()
        due = fresh or time.monotonic() - self._built_at >= DUE_AT * self.interval_s()
        if due and self._lock.acquire(blocking=self._board is None or fresh):
            try:
                self._refresh()
            finally:
                self._lock.release()
        return self._board

    def _refresh(self) -> None:
        try:
            tables = self.tables.poll()
            policy, load = self.reader.policy(), self.reader.load()
        except Exception as exc:               # the server is down or restarting: keep the last board
            self.error = f"cannot reach the engine at {self.url}: {type(exc).__name__}: {exc}"
            return
        self.error = ""
        version = 1 if self._board is None else self._board.version + 1
        for who in tables.requests["tenant"].astype(str).map(student).unique() if len(tables.requests) else ():
            if who not in self.hues:             # the next colour in turn (the last one is the background's)
                self.hues[who] = (len(self.hues) - 1) % OTHER_HUE
        self._board = build(version, tables, policy, load, dict(self.hues), self._origin(tables))
        self._built_at = time.monotonic()


    def _origin(self, tables) -> float:
        """When the class's run began, on the server's clock: its first step seen, or the first
        arrival before it (a request arrives before the step that takes it in)."""
        if self._origin_of != (self.stream.run, self.stream.origin_s):
            arrivals = tables.requests["arrival_s"] if len(tables.requests) else []
            first = min([t for t in (self.stream.origin_s, *arrivals) if t is not None and t == t], default=0.0)
            self._origin_of, self._origin_s = (self.stream.run, self.stream.origin_s), first
        return self._origin_s


_feeds: dict[str, ClassroomFeed] = {}
_feeds_lock = threading.Lock()


def shared_feed(url: str) -> ClassroomFeed:
    """The one feed of this process for the server at `url`."""
    with _feeds_lock:
        if url not in _feeds:
            _feeds[url] = ClassroomFeed(url)
        return _feeds[url]
