"""Predict, then observe: every lab asks the learner to commit to a guess before it shows a result.

A lab page draws `gate(question)` before its run button: the learner picks a choice or types a
number and presses "Commit my prediction"; only then does the page offer its run (or reveal the
stored result). Once the result is on the page, `reveal(...)` shows the guess beside what was
measured, says how far apart they are, and explains the gap.

Predictions are kept in the session's progress, in st.session_state[PREDICTIONS_KEY]:
{lab id: {"question": text, "guess": value, "measured": value or None, "verdict": text or None}}.
A question whose text changed (other settings) is asked again.

Each lab also keeps a few of its measured values, worded with their units, in
st.session_state[MEASUREMENTS_KEY] ({lab id: {name: "1.23 s"}}): `record` writes them when the
lab shows its result, `measurement(lab, name)` reads them (a quiz question can open with the
learner's own number).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import streamlit as st

PREDICTIONS_KEY = "lab_predictions"
MEASUREMENTS_KEY = "lab_measurements"
CLOSE_FACTOR = 1.5      # a number guess within this factor of the measured value counts as close


@dataclass(frozen=True)
class Question:
    """One lab's prediction: a choice among `choices`, or else a number from lo to hi."""
    lab: str                     # the lab id; the widgets' keys start with predict_<lab>
    text: str
    choices: tuple = ()
    lo: float = 0.0
    hi: float = 0.0
    default: float = 0.0
    unit: str = ""               # shown after a number, e.g. "×" or "s"
    help: str = ""

    @property
    def key(self) -> str:
        return f"predict_{self.lab}"

    def show(self, value) -> str:
        if self.choices:
            return str(value)
        return f"{value:g} {self.unit}".strip()


def predictions() -> dict:
    """Every committed prediction of this session, by lab id."""
    return st.session_state.setdefault(PREDICTIONS_KEY, {})


def committed(q: Question):
    """The learner's committed guess for this very question, or None."""
    entry = predictions().get(q.lab)
    return entry["guess"] if entry and entry["question"] == q.text else None


def record(lab: str, **values: str) -> None:
    """Keep measured values of `lab`, as worded text with units (e.g. step_ms_1="21 ms")."""
    st.session_state.setdefault(MEASUREMENTS_KEY, {}).setdefault(lab, {}).update(values)


def measurement(lab: str, name: str) -> str | None:
    """A value `lab` measured in this session (see record), or None if it has not shown one."""
    return st.session_state.get(MEASUREMENTS_KEY, {}).get(lab, {}).get(name)


def _commit(q: Question) -> None:
    predictions()[q.lab] = {"question": q.text, "guess": st.session_state[f"{q.key}__guess"],
                            "measured": None, "verdict": None}


def _forget(q: Question) -> None:
    predictions().pop(q.lab, None)


def ask(q: Question):
    """Draw the prediction control; return the committed guess, or None until the learner commits."""
    guess = committed(q)
    if guess is not None:
        cols = st.columns([4, 1])
        cols[0].markdown(f":material/psychology: **Your prediction:** {q.text} → **{q.show(guess)}**")
        cols[1].button("Predict again", key=f"{q.key}__again", on_click=_forget, args=(q,),
                       help="Forget this guess and make a new one before looking again.")
        return guess
    with st.container(border=True):
        st.markdown(f":material/psychology: **Predict first.** {q.text}")
        if q.choices:
            st.radio("Your prediction", list(q.choices), key=f"{q.key}__guess", help=q.help or None)
        else:
            st.number_input(f"Your prediction ({q.unit})" if q.unit else "Your prediction", float(q.lo),
                            float(q.hi), float(q.default), key=f"{q.key}__guess", help=q.help or None)
        st.button("Commit my prediction", key=f"{q.key}__commit", type="primary", on_click=_commit, args=(q,),
                  help="Your guess is kept; then the lab runs (or shows what it measured before).")
        st.caption("The lab shows nothing until you commit: a guess made before you look is what makes "
                   "the result surprising, and the surprise is what you remember.")
    return None


def gate(q: Question):
    """ask(q), and end the page here until the learner has committed."""
    guess = ask(q)
    if guess is None:
        st.stop()
    return guess


def number_verdict(guess: float, measured: float, factor: float = CLOSE_FACTOR) -> tuple[bool, str]:
    """(close?, words): a number guess against the measurement, as a ratio."""
    if not (math.isfinite(measured) and measured > 0 and guess > 0):
        close = math.isclose(guess, measured, abs_tol=1e-9)
        return close, "exactly right" if close else f"off by {abs(guess - measured):.3g}"
    ratio = measured / guess
    if 1 / factor <= ratio <= factor:
        return True, f"close (within ×{factor:g})"
    return False, f"the measurement is ×{ratio:.2g} your guess" if ratio > 1 else \
        f"the measurement is {1 / ratio:.2g}× smaller than your guess"


def reveal(q: Question, guess, measured, why: str, measured_text: str | None = None) -> bool:
    """Show the guess beside the measurement with the gap explained; record it in the session's
    progress. A choice is right or wrong; a number is close within CLOSE_FACTOR. Returns right/close."""
    if q.choices:
        right = guess == measured
        words = "right" if right else "not what happened"
    else:
        right, words = number_verdict(float(guess), float(measured))
    shown = measured_text or q.show(measured)
    entry = predictions().setdefault(q.lab, {"question": q.text, "guess": guess})
    entry.update(measured=measured if not isinstance(measured, float) else round(measured, 4), verdict=words)
    with st.container(border=True):
        cols = st.columns(2)
        cols[0].metric("You predicted", q.show(guess))
        cols[1].metric("Measured", shown)
        mark = ":material/check_circle: **✓ " if right else ":material/cancel: **✗ "
        st.markdown(f"{mark}{words[0].upper() + words[1:]}.** {why}")
    return right
