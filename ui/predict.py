"""Predict, then observe: every lab asks the learner to commit to a guess before it shows a result.

The questions are declared once in ui/questions.py (the lesson's "Predict first" reads the same
text); `question(id, ...)` builds one for the page. A lab page draws `gate(question)` before its
run button: the learner picks a choice or types a number and presses "Commit my prediction"; only
then does the page offer its run (or reveal the stored result). Once a result is on the page,
`reveal(...)` (the real engine's) or `simulated(...)` (the simulator's) shows the guess beside it,
says how far apart they are, and explains the gap.

A guess is locked once a result has been shown beside it: there is no "Predict again" then. A new
guess needs a new run: other settings (the question's text changes with them) or Re-measure
(`unlock`, which the measure button calls).

Predictions are kept in the session's progress, in st.session_state[PREDICTIONS_KEY]:
{question id: {"question": text, "lab": lab id, "guess": value, "measured": value or None,
"verdict": text or None, "locked": bool}}. A question whose text changed is asked again.
Each lab's claim verdicts are kept too (`record_verdict`), so a lesson can end with them.

Each lab also keeps a few of its measured values, worded with their units, in
st.session_state[MEASUREMENTS_KEY] ({lab id: {name: "1.23 s"}}): `record` writes them when the
lab shows its result, `measurement(lab, name)` reads them (a quiz question can open with the
learner's own number).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import streamlit as st

from analysis import machines
from ui import questions

PREDICTIONS_KEY = "lab_predictions"
MEASUREMENTS_KEY = "lab_measurements"
VERDICTS_KEY = "lab_verdicts"
CLOSE_FACTOR = 1.5      # a number guess within this factor of the measured value counts as close
TIE_WITHIN = 0.02       # measured values this close (a share of the best) tie when a question asks for the best


@dataclass(frozen=True)
class Question:
    """One prediction: a choice among `choices`, or else a number from lo to hi."""
    lab: str                     # the question id; the widgets' keys start with predict_<id>
    text: str
    choices: tuple = ()
    lo: float = 0.0
    hi: float = 0.0
    default: float = 0.0
    unit: str = ""               # shown after a number, e.g. "×" or "s"
    help: str = ""
    lab_id: str = ""             # the lab that asks it (the question id when empty)

    @property
    def key(self) -> str:
        return f"predict_{self.lab}"

    def show(self, value) -> str:
        if self.choices:
            return f"{' and '.join(map(str, value))} (a tie)" if isinstance(value, tuple) else str(value)
        if self.unit == "×":
            return f"×{value:g}"
        return f"{value:g} {self.unit}".strip()


def question(ask_id: str, choices=None, help: str = "", **fields) -> Question:
    """The declared question `ask_id` (ui/questions.py) with the page's settings filled in;
    `choices` for a choice whose options depend on the settings."""
    a = questions.ASKS[ask_id]
    return Question(a.id, a.render(**fields), tuple(choices if choices is not None else a.choices), a.lo, a.hi,
                    a.default, a.unit, help, a.lab)


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
    guess = st.session_state[f"{q.key}__guess"]
    predictions()[q.lab] = {"question": q.text, "lab": q.lab_id or q.lab, "guess": guess, "guess_shown": q.show(guess),
                            "measured": None, "verdict": None, "locked": False}


def _forget(q: Question) -> None:
    entry = predictions().get(q.lab)
    if entry is not None and not entry.get("locked"):
        predictions().pop(q.lab, None)


def locked(q: Question) -> bool:
    entry = predictions().get(q.lab)
    return bool(entry and entry["question"] == q.text and entry.get("locked"))


def unlock(lab: str) -> None:
    """A new run of `lab` is coming: its guesses are set aside, so the learner guesses again."""
    for key in [k for k, e in predictions().items() if e.get("lab", k) == lab]:
        predictions().pop(key)


def record_verdict(v, source: str) -> None:
    """Keep the verdict a lab page showed (`source`: "measured" or "simulated"), for the lesson's end."""
    st.session_state.setdefault(VERDICTS_KEY, {})[v.claim.id] = {
        "claim": v.claim.text, "lesson": v.claim.lesson, "outcome": v.outcome, "words": v.words,
        "value": v.value_text(), "source": source}


def verdicts() -> dict:
    return st.session_state.get(VERDICTS_KEY, {})


def lesson_summary(lesson_id: str) -> None:
    """The end of a lesson: each question it asks (ui/questions.py) with the learner's guess beside the
    answer shown, and each of its claims as the lab's last run judged it."""
    asks = questions.for_lesson(lesson_id)
    if not asks:
        return
    st.subheader("Your predictions and what the labs measured", anchor="your-predictions")
    rows = []
    for a in asks:
        entry = predictions().get(a.id)
        rows.append({"question": entry["question"] if entry else a.render(),
                     "your guess": "—" if not entry else entry.get("guess_shown", str(entry["guess"])),
                     "answer": "—" if not entry or entry.get("shown") is None else
                     f"{entry['shown']} ({entry.get('source', 'measured')})",
                     "how close": (entry or {}).get("verdict") or "not run yet"})
    st.dataframe(rows, hide_index=True, width="stretch")
    mine = [v for v in verdicts().values() if v.get("lesson") == lesson_id]
    for v in mine:
        mark = {"shown": "✓ shown", "not shown": "✗ not shown"}.get(v["outcome"], "? not shown by that run")
        st.markdown(f"- **{v['claim']}** — {mark} ({v['source']}, {v['value']}): {v['words']}")
    if not any(predictions().get(a.id) for a in asks):
        st.caption("Open the lab, commit your guesses, and run it: they appear here beside the answers.")


_SLOTS_KEY = "_predict_slots"


def _locked_line(where, q: Question, guess) -> None:
    with where:
        st.markdown(f":material/lock: **Your prediction:** {q.text} → **{q.show(guess)}**")
        st.caption("Locked: a result has been shown beside it. A new guess needs a new run: change a "
                   "setting, or press Re-measure.")


def ask(q: Question, holds_results: bool = True):
    """Draw the prediction control; return the committed guess, or None until the learner commits.
    holds_results: the page shows its results only after the commit (a lab); False where they show
    either way (the Playground runs whether or not a guess is in), and the control says which."""
    guess = committed(q)
    if guess is not None:
        if locked(q):
            _locked_line(st.container(), q, guess)
            return guess
        slot = st.empty()     # reveal() redraws it locked, in this very run, once a result is shown
        cols = slot.container().columns([4, 1])
        cols[0].markdown(f":material/psychology: **Your prediction:** {q.text} → **{q.show(guess)}**")
        cols[1].button("Predict again", key=f"{q.key}__again", on_click=_forget, args=(q,),
                       help="Forget this guess and make a new one; once a result is shown, it is locked.")
        st.session_state.setdefault(_SLOTS_KEY, {})[q.key] = slot
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
        why = "a guess made before you look is what makes the result surprising, and the surprise is what you remember."
        st.caption(f"The lab shows nothing until you commit: {why}" if holds_results else
                   f"Nothing here waits for your guess, so commit it before you watch: {why}")
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
    return False, f"the answer is {ratio:.2g} times your guess" if ratio > 1 else \
        f"the answer is {1 / ratio:.2g} times smaller than your guess"


def tied(answer) -> tuple:
    """The choices an answer names: best_of's tuple where it found a tie, else the one choice."""
    return answer if isinstance(answer, tuple) else (answer,)


def best_of(values: dict, highest: bool = False, within: float = TIE_WITHIN):
    """The choice whose measured value is lowest (highest), for a question that asks which is best
    or worst: one key, or a tuple of the keys within `within` of it (a tie, where any of them is a
    right guess). Values that are not finite take no part."""
    finite = {k: float(v) for k, v in values.items() if math.isfinite(float(v))}
    if not finite:
        return None
    best = max(finite.values()) if highest else min(finite.values())
    near = tuple(k for k, v in finite.items() if abs(v - best) <= within * abs(best))
    return near[0] if len(near) == 1 else near


def _score(q: Question, guess, answer) -> tuple[bool, str]:
    if q.choices:
        named = tied(answer)                  # a tie: any of them is right
        right = guess in named
        return right, ("right" if len(named) == 1 else "right: a tie") if right else "not what happened"
    return number_verdict(float(guess), float(answer))


def reveal(q: Question, guess, measured, why: str, measured_text: str | None = None,
           source: str = "measured") -> bool:
    """Show the guess beside the result with the gap explained, record it in the session's progress
    and lock the guess. `source`: "measured" (the real engine) or "simulated". A choice is right or
    wrong; a number is close within CLOSE_FACTOR. Returns right/close."""
    right, words = _score(q, guess, measured)
    shown = measured_text or q.show(measured)
    entry = predictions().setdefault(q.lab, {"question": q.text, "lab": q.lab_id or q.lab, "guess": guess})
    if source == "measured" or entry.get("source") != "measured":
        entry.update(measured=measured if not isinstance(measured, float) else round(measured, 4), verdict=words,
                     shown=shown, source=source)
    entry["locked"] = True
    slot = st.session_state.get(_SLOTS_KEY, {}).pop(q.key, None)
    if slot is not None:      # the "Predict again" line drawn above in this run: now locked
        _locked_line(slot.container(), q, guess)
    with st.container(border=True):
        cols = st.columns(2)
        label = machines.SOURCE_LABEL["measured" if source == "measured" else "simulated"]
        if q.choices and max(len(q.show(guess)), len(shown)) > 16:     # a metric would cut a long choice short
            cols[0].markdown(f"You predicted  \n**{q.show(guess)}**")
            cols[1].markdown(f"{label}  \n**{shown}**")
        else:
            cols[0].metric("You predicted", q.show(guess))
            cols[1].metric(label, shown)
        mark = ":material/check_circle: **✓ " if right else ":material/cancel: **✗ "
        then = "" if source == "measured" else " Run it on the real engine to see whether this machine agrees."
        st.markdown(f"{mark}{words[0].upper() + words[1:]}.** {why}{then}")
    return right


def simulated(q: Question, guess, answer, why: str, answer_text: str | None = None) -> bool:
    """reveal() with the simulator's answer, before the real run."""
    return reveal(q, guess, answer, why, answer_text, source="simulated")


def show_verdict(v, source: str = "measured") -> None:
    """The lab's claim and what this run says about it, in words computed from the run."""
    record_verdict(v, source)
    icon = {"shown": ":material/check_circle:", "not shown": ":material/cancel:"}.get(v.outcome, ":material/help:")
    mark = {"shown": "✓", "not shown": "✗"}.get(v.outcome, "?")
    run = "this run" if source == "measured" else "the simulation"
    outcome = v.outcome_words.replace("this run", run)
    with st.container(border=True):
        st.markdown(f"{icon} **Claim:** {v.claim.text}")
        st.markdown(machines.badge(machines.ENGINE if source == "measured" else machines.SIMULATOR,
                                   machines.SOURCE_LABEL["measured" if source == "measured" else "simulated"]))
        st.markdown(f"**{mark} {outcome[0].upper() + outcome[1:]}** ({v.claim.metric}: {v.value_text()}; the claim "
                    f"needs {v.claim.threshold_text()}). " + ("Why: " if v.outcome == "undecided" else "") + v.words)


def capacity_req_s(step_model, policy, workload) -> float:
    """Requests per second an engine with `policy` finishes of `workload`'s requests with its queue never
    empty, as `step_model` predicts it: the simulator (engine.simulate) runs four full batches of them,
    all at once, and counts finishes over the middle half."""
    from dataclasses import replace

    from engine.runs.arrivals import build_requests
    from engine.core.config import EngineConfig
    from engine.sim.simulate import SimProfile, simulate

    spec = replace(workload, num_requests=max(16, 4 * policy.max_num_seqs), rate=0.0)
    name = getattr(step_model, "label", "") or "step model"
    engine = simulate(EngineConfig(), policy, SimProfile(name, name, step_model), build_requests(spec))
    done = sorted(r.finish_s for r in engine.requests.values() if r.finish_s is not None)
    a, b = len(done) // 4, (3 * len(done)) // 4
    return (b - a) / (done[b] - done[a]) if len(done) >= 4 and done[b] > done[a] else math.nan


def playground(step_model, policy, workload) -> None:
    """The Playground's prediction (lesson 9 asks it too): the arrival rate at which the waiting queue
    stops emptying. It never holds the page up: the learner commits when they like, and "Show the
    answer" puts the step model's capacity for the current settings beside the guess, locked."""
    q = question("playground")
    with st.expander(":material/psychology: Predict first: when does the queue stop emptying?",
                     expanded=committed(q) is None):
        guess = ask(q, holds_results=False)
        if guess is None:
            return
        entry = predictions()[q.lab]
        if not entry.get("locked") and not st.button("Show the answer", key=f"{q.key}__show",
                                                      help="The step model's answer for the settings on the "
                                                           "left; your guess is locked beside it."):
            st.caption("Run the Playground and raise the arrival rate until waiting stops returning to zero; "
                       "then press Show the answer.")
            return
        mu = capacity_req_s(step_model, policy, workload)
        reveal(q, guess, mu, f"With max_num_seqs {policy.max_num_seqs} and this workload, the step model says the "
               f"engine finishes about {mu:.2f} requests/s with its queue never empty: arrivals faster than that "
               "pile up. (A prediction from the step model; what you saw on the waiting chart is the measurement.)",
               measured_text=f"{mu:.2f} requests/s", source="simulated")
