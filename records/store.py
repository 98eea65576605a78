"""The learners' store: every query the app makes, each fact its own row.

A learner's record is many small rows (a lesson read, one checked quiz choice, one prediction, one
lab run's headline), written as they happen, never one blob rewritten whole: two tabs of the same
learner add rows side by side and neither overwrites the other's. Every value goes in as an SQL
parameter. Any failure of the file (locked past the timeout, full, read-only, corrupt, made by a
newer app) comes out as StoreError with words a page can show; the caller keeps working in memory.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from records import database


POLL_S = 0.002           # how often a busy write lock is tried again


class StoreError(Exception):
    """The database could not be read or written; the message says why, in plain words."""


def _patiently(conn, step, deadline: float):
    """step(), again every few ms while SQLite says busy, until the deadline. SQLite's own wait polls
    ever more slowly (up to 100 ms apart), so among many processes a waiter kept missing the lock
    and gave up; and where waiting could deadlock (processes switching a new file to WAL, or taking
    the write lock together) it answers busy at once. So its wait is off while we poll."""
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        while True:
            try:
                return step()
            except sqlite3.OperationalError as exc:
                if not ("locked" in str(exc) or "busy" in str(exc)) or time.monotonic() + POLL_S > deadline:
                    raise
            time.sleep(POLL_S)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(max(deadline - time.monotonic(), 0.1) * 1000)}")


def _why(exc: BaseException) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"the database is busy (locked by another program): {text}"
    if "readonly" in text or "read-only" in text:
        return f"the database file cannot be written (read-only): {text}"
    if "full" in text:
        return f"the disk or database is full: {text}"
    if "not a database" in text or "malformed" in text:
        return f"the database file is damaged: {text}"
    return text


@dataclass
class Record:
    """Everything kept about one learner, as a page needs it back."""
    name: str | None = None
    read: set = field(default_factory=set)                 # lesson ids
    tries: dict = field(default_factory=dict)              # (lesson, n) -> (answer, [choices in order])
    predictions: list = field(default_factory=list)        # dicts, oldest first (see _prediction)
    labs: dict = field(default_factory=dict)               # lab id -> headline of its latest run


def settings_json(settings) -> str:
    return to_json([list(pair) for pair in settings])


def to_json(value) -> str:
    """JSON of a guess, an answer or settings; numpy's numbers as plain ones, anything else as its text."""
    return json.dumps(value, ensure_ascii=False, default=lambda v: v.item() if hasattr(v, "item") else str(v))


_WRITERS: dict[str, threading.Lock] = {}
_WRITERS_LOCK = threading.Lock()


def _writers(path: Path) -> threading.Lock:
    """One lock per database file in this process, shared by every Store of that file."""
    with _WRITERS_LOCK:
        return _WRITERS.setdefault(str(path.resolve()), threading.Lock())


class Store:
    """The database at `path`. Opens a connection per call (threads never share one) and runs the
    migrations on the first call that finds the schema behind."""

    def __init__(self, path: Path | str, timeout_s: float | None = None):
        self.path = Path(path)
        self.timeout_s = database.TIMEOUT_S if timeout_s is None else timeout_s
        self._migrated = False
        self._lock = _writers(self.path)

    @contextmanager
    def _conn(self, write: bool = False):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = database.connect(self.path, self.timeout_s)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(_why(exc)) from None
        took = False
        try:
            deadline = time.monotonic() + self.timeout_s
            if not self._migrated:
                with self._lock:
                    _patiently(conn, lambda: database.migrate(conn), deadline)
                    self._migrated = True
            if write:
                # This process's writers queue here, in turn; SQLite's lock then only sorts out other
                # processes. Thirty sessions polling SQLite's lock alone starved some past the timeout.
                took = self._lock.acquire(timeout=self.timeout_s)
                if not took:
                    raise sqlite3.OperationalError("database is locked (this app's own writers queued too long)")
                _patiently(conn, lambda: conn.execute("BEGIN IMMEDIATE"), deadline)   # the write lock now, not halfway
            yield conn
            if write:
                conn.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise StoreError(_why(exc)) from None
        finally:
            if took:
                self._lock.release()
            conn.close()

    def check(self) -> None:
        """Open the file and bring its schema up to date; StoreError if it cannot be used."""
        with self._conn() as conn:
            conn.execute("PRAGMA quick_check(1)").fetchone()

    # ------------------------------------------------------------------ the learner

    def touch(self, learner: str) -> None:
        now = time.time()
        with self._conn(write=True) as c:
            c.execute("INSERT INTO learners (id, created_s, seen_s) VALUES (?, ?, ?) "
                      "ON CONFLICT (id) DO UPDATE SET seen_s = excluded.seen_s", (learner, now, now))

    def set_name(self, learner: str, name: str | None) -> None:
        now = time.time()
        with self._conn(write=True) as c:
            c.execute("INSERT INTO learners (id, name, created_s, seen_s) VALUES (?, ?, ?, ?) "
                      "ON CONFLICT (id) DO UPDATE SET name = excluded.name, seen_s = excluded.seen_s",
                      (learner, name, now, now))

    def forget(self, learner: str) -> None:
        """Start over: the learner and everything of theirs goes."""
        with self._conn(write=True) as c:
            c.execute("DELETE FROM learners WHERE id = ?", (learner,))

    def _ensure(self, c, learner: str) -> None:
        now = time.time()
        c.execute("INSERT INTO learners (id, created_s, seen_s) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
                  (learner, now, now))

    # ------------------------------------------------------------------ lessons and quizzes

    def mark_read(self, learner: str, lesson: str) -> None:
        with self._conn(write=True) as c:
            self._ensure(c, learner)
            c.execute("INSERT INTO lessons_read (learner, lesson, at_s) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                      (learner, lesson, time.time()))

    def add_try(self, learner: str, lesson: str, n: int, choice: int, answer: int) -> None:
        with self._conn(write=True) as c:
            self._ensure(c, learner)
            c.execute("INSERT INTO quiz_tries (learner, lesson, question, choice, answer, at_s) VALUES (?, ?, ?, ?, ?, ?)",
                      (learner, lesson, int(n), int(choice), int(answer), time.time()))

    # ------------------------------------------------------------------ predictions

    def commit_prediction(self, learner: str, p: dict) -> None:
        """A committed guess for one question as asked (p: question, settings_key, settings, lab, text,
        guess, guess_shown). A guess already revealed is never replaced (a stale tab's commit loses)."""
        with self._conn(write=True) as c:
            self._ensure(c, learner)
            c.execute(
                "INSERT INTO predictions (learner, question, settings_key, settings, lab, text, guess, guess_shown,"
                " made_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (learner, question, settings_key) WHERE set_aside = 0 DO UPDATE SET"
                " guess = excluded.guess, guess_shown = excluded.guess_shown, made_s = excluded.made_s"
                " WHERE predictions.revealed_s IS NULL",
                (learner, p["question"], p["settings_key"], settings_json(p["settings"]), p["lab"], p["text"],
                 to_json(p["guess"]), p["guess_shown"], time.time()))

    def withdraw_prediction(self, learner: str, question: str, settings_key: str) -> None:
        """'Predict again' before a result: the open guess goes (a revealed one stays)."""
        with self._conn(write=True) as c:
            c.execute("DELETE FROM predictions WHERE learner = ? AND question = ? AND settings_key = ? "
                      "AND set_aside = 0 AND revealed_s IS NULL", (learner, question, settings_key))

    def reveal_prediction(self, learner: str, question: str, settings_key: str, guess, answer, answer_shown: str,
                          source: str, verdict: str, close: bool) -> None:
        """The answer shown beside the guess. Only the guess this page holds is revealed, and a
        measured answer is never replaced by a simulated one."""
        with self._conn(write=True) as c:
            c.execute("UPDATE predictions SET answer = ?, answer_shown = ?, source = ?, verdict = ?, close = ?,"
                      " revealed_s = ? WHERE learner = ? AND question = ? AND settings_key = ? AND set_aside = 0"
                      " AND guess = ? AND (source IS NULL OR source != 'measured' OR ? = 'measured')",
                      (to_json(answer), answer_shown, source, verdict, int(bool(close)), time.time(), learner,
                       question, settings_key, to_json(guess), source))

    def set_aside(self, learner: str, lab: str) -> None:
        """A re-measure of `lab`: its guesses stay in the history, and a new guess opens."""
        with self._conn(write=True) as c:
            c.execute("UPDATE predictions SET set_aside = 1 WHERE learner = ? AND lab = ? AND set_aside = 0",
                      (learner, lab))

    # ------------------------------------------------------------------ lab runs

    def record_lab(self, learner: str, lab: str, settings, headline: dict) -> None:
        """A lab run's headline numbers (worded, with units) under its settings; the same settings again
        add to that run's row."""
        with self._conn(write=True) as c:
            self._ensure(c, learner)
            s = settings_json(settings)
            c.execute("INSERT INTO lab_runs (learner, lab, settings_key, settings, headline, at_s)"
                      " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (learner, lab, settings_key) DO UPDATE SET"
                      " headline = json_patch(lab_runs.headline, excluded.headline), at_s = excluded.at_s",
                      (learner, lab, s, s, to_json(headline), time.time()))

    # ------------------------------------------------------------------ reading back

    def load(self, learner: str) -> Record:
        with self._conn() as c:
            r = Record()
            row = c.execute("SELECT name FROM learners WHERE id = ?", (learner,)).fetchone()
            r.name = row[0] if row else None
            r.read = {lesson for (lesson,) in c.execute("SELECT lesson FROM lessons_read WHERE learner = ?", (learner,))}
            for lesson, n, choice, answer in c.execute(
                    "SELECT lesson, question, choice, answer FROM quiz_tries WHERE learner = ? ORDER BY id", (learner,)):
                r.tries.setdefault((lesson, n), (answer, []))[1].append(choice)
            r.predictions = [_prediction(row) for row in c.execute(
                "SELECT question, settings_key, settings, lab, text, guess, guess_shown, made_s, answer, answer_shown,"
                " source, verdict, close FROM predictions WHERE learner = ? AND set_aside = 0 ORDER BY made_s, id",
                (learner,))]
            for lab, headline in c.execute("SELECT lab, headline FROM lab_runs WHERE learner = ? ORDER BY at_s, id",
                                           (learner,)):
                r.labs[lab] = json.loads(headline)          # the latest run of each lab wins
            return r

    # ------------------------------------------------------------------ the class

    def class_rows(self) -> list[dict]:
        """For every named learner and every lesson they touched: read, predictions made and revealed and
        how many were close, quiz questions answered and right on the first try. Lessons come from the
        caller (predictions name their lab, quiz tries their lesson)."""
        with self._conn() as c:
            students = c.execute("SELECT id, name FROM learners WHERE name IS NOT NULL ORDER BY name, id").fetchall()
            out = []
            for learner, name in students:
                read = {x for (x,) in c.execute("SELECT lesson FROM lessons_read WHERE learner = ?", (learner,))}
                first: dict = {}
                for lesson, n, choice, answer in c.execute(
                        "SELECT lesson, question, choice, answer FROM quiz_tries WHERE learner = ? ORDER BY id",
                        (learner,)):
                    first.setdefault((lesson, n), choice == answer)
                preds = c.execute("SELECT lab, question, revealed_s IS NOT NULL, COALESCE(close, 0) FROM predictions"
                                  " WHERE learner = ? AND set_aside = 0", (learner,)).fetchall()
                out.append({"learner": learner, "name": name, "read": read, "first_tries": first,
                            "predictions": [(lab, q, bool(rev), bool(cl)) for lab, q, rev, cl in preds]})
            return out

    def reset_class(self) -> int:
        """A new class: every name is removed (the learners' own progress stays theirs, unnamed).
        Returns how many names went."""
        with self._conn(write=True) as c:
            return c.execute("UPDATE learners SET name = NULL WHERE name IS NOT NULL").rowcount


def _prediction(row) -> dict:
    (question, key, settings, lab, text, guess, guess_shown, made_s, answer, answer_shown, source, verdict,
     close) = row
    entry = {"id": question, "settings_key": key, "settings": [tuple(p) for p in json.loads(settings)], "lab": lab,
             "question": text, "guess": _tuple(json.loads(guess)), "guess_shown": guess_shown, "made_s": made_s,
             "measured": None, "verdict": None, "locked": False}
    if answer is not None:
        entry.update(measured=_tuple(json.loads(answer)), shown=answer_shown, source=source, verdict=verdict,
                     close=bool(close), locked=True)
    return entry


def _tuple(value):
    """JSON gives a tie's tuple of choices back as a list."""
    return tuple(value) if isinstance(value, list) else value
