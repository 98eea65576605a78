"""A lesson's "Check yourself" quiz on its page.

- Choices are shuffled per learner: the order is drawn from the session's seed, so it stays put
  for that learner and differs between learners.
- A wrong first try shows why that choice is wrong and asks for a second try; the right answer
  is revealed only after a second wrong try (or a right one).
- Only a right first try scores (lessons/progress.py).
- Each question is a fragment: picking a choice or pressing Check reruns that question alone, not
  the lesson around it (its pictures and calculators). The sidebar's counts catch up at the next
  page run, and at once when the check is the lesson's last (it then counts as read).
- A question may open with the learner's own measurement from a lab (ui.predict.measurement) and
  compute its choices from it, so the right answer is this learner's; with its worked example when
  that lab has not been run in this session (course/quizzes.py, course/quiz_answers.py).
"""
from __future__ import annotations

import streamlit as st

from lessons import progress
from lessons.catalog import Lesson, QuizQuestion, Shown, choice_order
from ui.predict import measurement


def radio_key(lesson_id: str, n: int) -> str:
    return f"quiz:{lesson_id}:{n}"


def _checked_key(lesson_id: str, n: int) -> str:
    return f"checked:{lesson_id}:{n}"


def shown(q: QuizQuestion) -> Shown:
    """The question as this learner sees it: with their measurement, when the lab has one."""
    return q.render(measurement)


RERUN_KEY = "quiz_rerun_app"     # set when a check changed what the rest of the page shows


def _on_check(lesson: Lesson, n: int) -> None:
    choice = st.session_state.get(radio_key(lesson.id, n))
    st.session_state[_checked_key(lesson.id, n)] = choice
    if choice is not None:
        was_read = progress.is_read(lesson.id)
        progress.record_try(lesson.id, n, choice, shown(lesson.quiz[n]).answer, len(lesson.quiz))
        if progress.is_read(lesson.id) != was_read:
            st.session_state[RERUN_KEY] = True


def show_quiz(lesson: Lesson) -> None:
    st.header("Check yourself", anchor="check-yourself")
    st.caption("Answer from memory first: recalling is what makes it stick. Only a right first try "
               "counts as correct; a wrong one gets a hint and a second try.")
    seed = progress.session_seed()
    for n in range(len(lesson.quiz)):
        _question(lesson, n, seed)


@st.fragment
def _question(lesson: Lesson, n: int, seed: str) -> None:
    if st.session_state.pop(RERUN_KEY, False):
        st.rerun()               # the lesson just counted as read: redraw the page and the sidebar
    q = lesson.quiz[n]
    s = shown(q)
    order = choice_order(len(q.choices), f"{seed}:{lesson.id}:{n}")
    tried = progress.attempts(lesson.id, n)
    if tried is not None and tried.tries and _checked_key(lesson.id, n) not in st.session_state:
        st.session_state[_checked_key(lesson.id, n)] = tried.tries[-1]    # a new session: the last check, kept
    checked = st.session_state.get(_checked_key(lesson.id, n))
    with st.container(border=True):
        choice = st.radio(f"**{n + 1}.** " + (f"{s.lead} {s.question}" if s.lead else s.question), order,
                          index=None if checked is None else order.index(checked),
                          key=radio_key(lesson.id, n), format_func=lambda i, s=s: s.choices[i])
        st.button("Check", key=f"check:{lesson.id}:{n}", on_click=_on_check, args=(lesson, n))
        if _checked_key(lesson.id, n) in st.session_state and checked is None:
            st.info("Pick an answer, then press Check.")
        elif checked is not None and choice == checked:
            _verdict(s, checked, progress.attempts(lesson.id, n))


def _verdict(q: Shown, checked: int, tried: progress.Attempts) -> None:
    if checked == q.answer:
        if tried.first_try_right:
            head = "**Correct.**"
        elif q.answer in tried.tries:
            head = f"**Correct on try {tried.tries.index(q.answer) + 1}.**"
        else:
            head = "**That is the answer.**"
        st.success(f"{head} {q.explanation}", icon=":material/check:")
    elif not tried.revealed:
        st.error(f"**Not quite.** {q.why[checked]} Pick another answer and check again.", icon=":material/close:")
    else:
        st.error(f"**Not quite.** {q.why[checked]} The answer is *{q.choices[q.answer]}*. {q.explanation}",
                 icon=":material/close:")
