"""A learner's progress through the lessons, in st.session_state and in the learners' store.

{"read": set of lesson ids, "checks": {"<lesson id>:<n>": Attempts}}. A lesson counts as read
when the learner presses "Mark as read" at its end or has answered every check in it, never
merely by opening it. A check counts as correct only when its first try was right: a retry
after a wrong answer can solve it, but does not score. Each lesson read and each checked choice is
written to the store as it happens (ui/learner.py), and a new session starts from what it holds.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import streamlit as st

from ui import learner

PROGRESS_KEY = "lesson_progress"
SEED_KEY = "quiz_seed"       # the seed for shuffling quiz choices


@dataclass(slots=True)
class Attempts:
    answer: int                                     # the right choice's index
    tries: list[int] = field(default_factory=list)  # choice indices, in the order checked

    @property
    def first_try_right(self) -> bool:
        return bool(self.tries) and self.tries[0] == self.answer

    @property
    def solved(self) -> bool:
        return self.answer in self.tries

    @property
    def revealed(self) -> bool:
        """The right answer may be shown: solved, or wrong twice."""
        return self.solved or len(self.tries) >= 2


def progress() -> dict:
    if PROGRESS_KEY not in st.session_state:
        kept = learner.record()
        st.session_state[PROGRESS_KEY] = {
            "read": set(kept.read),
            "checks": {check_key(lesson, n): Attempts(answer, list(tries)) for (lesson, n), (answer, tries)
                       in kept.tries.items()}}
    return st.session_state[PROGRESS_KEY]


def session_seed() -> str:
    """The learner's seed for shuffling: the same learner sees the same choice order, after a reload too."""
    if SEED_KEY not in st.session_state:
        st.session_state[SEED_KEY] = (learner.learner_id() or secrets.token_hex(4))[:8]
    return st.session_state[SEED_KEY]


def check_key(lesson_id: str, n: int) -> str:
    return f"{lesson_id}:{n}"


def attempts(lesson_id: str, n: int) -> Attempts | None:
    return progress()["checks"].get(check_key(lesson_id, n))


def record_try(lesson_id: str, n: int, choice: int, answer: int, checks_in_lesson: int) -> Attempts:
    """Add one checked choice (checking the same choice twice in a row counts once). Answering
    the lesson's last unanswered check marks the lesson read."""
    p = progress()
    a = p["checks"].setdefault(check_key(lesson_id, n), Attempts(answer))
    if not a.revealed and (not a.tries or a.tries[-1] != choice):
        a.tries.append(choice)
        learner.save("add_try", lesson_id, n, choice, answer)
    if all(check_key(lesson_id, k) in p["checks"] for k in range(checks_in_lesson)):
        mark_read(lesson_id)
    return a


def mark_read(lesson_id: str) -> None:
    if lesson_id not in progress()["read"]:
        progress()["read"].add(lesson_id)
        learner.save("mark_read", lesson_id)


def is_read(lesson_id: str) -> bool:
    return lesson_id in progress()["read"]


def lesson_counts(lesson_id: str, checks: int) -> tuple[int, int]:
    """(checks answered, checks right on the first try) of one lesson."""
    done = [a for n in range(checks) if (a := attempts(lesson_id, n)) is not None]
    return len(done), sum(a.first_try_right for a in done)
