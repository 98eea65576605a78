"""Predict, then observe: every lab asks the learner to commit to a guess before it shows a result.

The questions are declared once in course/predictions.py (the lesson's "Predict first" reads the same
text); `question(id, ...)` builds one for the page. A lab page draws `gate(question)` before its
run button: the learner picks a choice or types a number and presses "Commit my prediction"; only
then does the page offer its run (or reveal the stored result). Once a result is on the page,
`reveal(...)` (the real engine's) or `simulated(...)` (the simulator's) shows the guess beside it,
says how far apart they are, and explains the gap.

Every prediction names the settings it is scored on (`question(..., settings={label: value})`,
shown under the question and beside the locked guess). A prediction belongs to the question as
asked: its text, its choices and those settings (`Question.asked`). Change a setting and the
question is a new one: a new prediction opens, and the guess made for the old settings stays with
them, never scored against the new run. A guess is locked once a result has been shown beside it;
Re-measure (`unlock`, which the measure button calls) sets the lab's guesses aside and asks again;
the new run starts once the new guesses are in, so its result shows at once beside them.

Predictions are kept in the session, in st.session_state[PREDICTIONS_KEY]:
{"<question id>|<asked>": {"id", "question" (text), "settings", "lab", "guess", "measured",
"shown", "source", "verdict", "locked"}}, and each one in the learners' store as it is committed
and revealed (ui/learner.py), so a reload or a restart brings them back.
Each lab's claim verdicts are kept in the session too (`record_verdict`), so a lesson can end with them.

Each lab also keeps a few of its measured values, worded with their units, in
st.session_state[MEASUREMENTS_KEY] ({lab id: {name: "1.23 s"}}): `record` writes them when the
lab shows its result (and the store keeps them as that lab run's headline), `measurement(lab,
name)` reads them (a quiz question can open with the learner's own number).
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass

import streamlit as st

from course import machines
from course.predictions import ASKS, for_lesson
from ui import learner

PREDICTIONS_KEY = "lab_predictions"
MEASUREMENTS_KEY = "lab_measurements"
VERDICTS_KEY = "lab_verdicts"
REMEASURE_KEY = "lab_remeasure"     # {lab id: (measurement name, settings)}: a re-measure waiting for new guesses
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
    settings: tuple = ()         # ((label, value as shown), ...): what the answer is scored on

    @property
    def key(self) -> str:
        return f"predict_{self.lab}"

    @property
    def asked(self) -> str:
        """This question as asked: a digest of its text, choices and settings. Any change is a new question."""
        blob = json.dumps([self.text, [str(c) for c in self.choices], [list(map(str, p)) for p in self.settings]])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def slot(self) -> str:
        return f"{self.lab}|{self.asked}"

    def settings_text(self) -> str:
        return " · ".join(f"{label} {value}" for label, value in self.settings)

    def show(self, value) -> str:
        if self.choices:
            return f"{' and '.join(map(str, value))} (a tie)" if isinstance(value, tuple) else str(value)
        if self.unit == "×":
            return f"×{value:g}"
        return f"{value:g} {self.unit}".strip()


def _settings(settings) -> tuple:
    return tuple((str(k), v if isinstance(v, str) else f"{v:,g}" if isinstance(v, (int, float)) else str(v))
                 for k, v in (settings.items() if isinstance(settings, dict) else settings or ()))


def question(ask_id: str, choices=None, help: str = "", settings=None, **fields) -> Question:
    """The declared question `ask_id` (course/predictions.py) with the page's settings filled in;
    `choices` for a choice whose options depend on the settings; `settings` ({label: value}) the
    settings its answer is scored on, named beside it."""
    a = ASKS[ask_id]
    return Question(a.id, a.render(**fields), tuple(choices if choices is not None else a.choices), a.lo, a.hi,
                    a.default, a.unit, help, a.lab, _settings(settings))


def predictions() -> dict:
    """Every prediction of this learner (this session's, and those the store brought back), by slot."""
    if PREDICTIONS_KEY not in st.session_state:
        st.session_state[PREDICTIONS_KEY] = {f"{p['id']}|{p['settings_key']}": dict(p)
                                             for p in learner.record().predictions}
    return st.session_state[PREDICTIONS_KEY]


def _entry(q: Question) -> dict | None:
    return predictions().get(q.slot)


def latest(question_id: str) -> dict | None:
    """The learner's most recent prediction for a question, whatever settings it was asked with."""
    mine = [e for e in predictions().values() if e.get("id") == question_id]
    return max(mine, key=lambda e: e.get("made_s", 0.0)) if mine else None


def committed(q: Question):
    """The learner's committed guess for this very question (text, choices, settings), or None."""
    entry = _entry(q)
    return entry["guess"] if entry else None


def record(lab: str, settings=None, **values: str) -> None:
    """Keep measured values of `lab`, as worded text with units (e.g. step_ms_1="21 ms"), with the
    settings of the run they come from; the store keeps them as that run's headline."""
    kept = st.session_state.setdefault(MEASUREMENTS_KEY, {}).setdefault(lab, {})
    if any(kept.get(k) != v for k, v in values.items()) or st.session_state.get(f"_{lab}__settings") != settings:
        learner.save("record_lab", lab, _settings(settings), values)
        st.session_state[f"_{lab}__settings"] = settings
    kept.update(values)


def measurement(lab: str, name: str) -> str | None:
    """A value `lab` measured (see record), or None if it has not shown one."""
    if MEASUREMENTS_KEY not in st.session_state:
        st.session_state[MEASUREMENTS_KEY] = {lab: dict(v) for lab, v in learner.record().labs.items()}
    return st.session_state[MEASUREMENTS_KEY].get(lab, {}).get(name)


def _commit(q: Question) -> None:
    guess = st.session_state[f"{q.key}__guess"]
    entry = {"id": q.lab, "settings_key": q.asked, "settings": q.settings, "question": q.text,
             "lab": q.lab_id or q.lab, "guess": guess, "guess_shown": q.show(guess), "made_s": time.time(),
             "measured": None, "verdict": None, "locked": False}
    predictions()[q.slot] = entry
    learner.save("commit_prediction", {"question": q.lab, **{k: entry[k] for k in (
        "settings_key", "settings", "lab", "guess", "guess_shown")}, "text": q.text})


def _forget(q: Question) -> None:
    entry = _entry(q)
    if entry is not None and not entry.get("locked"):
        predictions().pop(q.slot, None)
        learner.save("withdraw_prediction", q.lab, q.asked)


def locked(q: Question) -> bool:
    entry = _entry(q)
    return bool(entry and entry.get("locked"))


def unlock(lab: str, then: tuple | None = None) -> None:
    """A new run of `lab` is coming: its guesses are set aside, so the learner guesses again.
    `then` (a measurement's name and its settings' repr): that re-measure waits for the new guesses
    and runs once they are in (remeasure_due), so its result shows at once beside them."""
    for key in [k for k, e in predictions().items() if e.get("lab", k) == lab]:
        predictions().pop(key)
    learner.save("set_aside", lab)
    if then is not None:
        st.session_state.setdefault(REMEASURE_KEY, {})[lab] = then


def remeasure_due(lab: str, name: str, settings: str) -> bool:
    """Whether the learner asked to re-measure `name` of `lab` with these settings, and its guesses are
    in now; taken once, so it runs once. A re-measure asked for other settings is dropped."""
    waiting = st.session_state.get(REMEASURE_KEY, {})
    if waiting.get(lab, ("",))[0] != name:
        return False
    return waiting.pop(lab) == (name, settings)


def record_verdict(v, source: str) -> None:
    """Keep the verdict a lab page showed (`source`: "measured" or "simulated"), for the lesson's end."""
    st.session_state.setdefault(VERDICTS_KEY, {})[v.claim.id] = {
        "claim": v.claim.text, "lesson": v.claim.lesson, "outcome": v.outcome, "words": v.words,
        "value": v.value_text(), "source": source}


def verdicts() -> dict:
    return st.session_state.get(VERDICTS_KEY, {})


def lesson_summary(lesson_id: str) -> None:
    """The end of a lesson: each question it asks (course/predictions.py) with the learner's guess beside the
    answer shown, and each of its claims as the lab's last run judged it."""
    asks = for_lesson(lesson_id)
    if not asks:
        return
    st.subheader("Your predictions and what the labs measured", anchor="your-predictions")
    rows = []
    for a in asks:
        entry = latest(a.id)
        rows.append({"question": entry["question"] if entry else a.render(),
                     "scored on": " · ".join(f"{k} {v}" for k, v in entry.get("settings", ())) if entry else "—",
                     "your guess": "—" if not entry else entry.get("guess_shown", str(entry["guess"])),
                     "answer": "—" if not entry or entry.get("shown") is None else
                     f"{entry['shown']} ({entry.get('source', 'measured')})",
                     "how close": (entry or {}).get("verdict") or "not run yet"})
    st.dataframe(rows, hide_index=True, width="stretch")
    mine = [v for v in verdicts().values() if v.get("lesson") == lesson_id]
    for v in mine:
        mark = {"shown": "✓ shown", "not shown": "✗ not shown"}.get(v["outcome"], "? not shown by that run")
        st.markdown(f"- **{v['claim']}** — {mark} ({v['source']}, {v['value']}): {v['words']}")
    if not any(latest(a.id) for a in asks):
        st.caption("Open the lab, commit your guesses, and run it: they appear here beside the answers.")


_SLOTS_KEY = "_predict_slots"


def _scored_on(q: Question) -> None:
    if q.settings:
        st.caption(f":material/tune: Scored on: {q.settings_text()}. Change any of these and a new prediction opens.")


def _locked_line(where, q: Question, guess) -> None:
    with where:
        st.markdown(f":material/lock: **Your prediction:** {q.text} → **{q.show(guess)}**")
        st.caption("Locked: a result has been shown beside it"
                   + (f" for {q.settings_text()}" if q.settings else "")
                   + ". A new guess needs a new run: change a setting, or press Re-measure.")


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
        with slot.container():    # one container: a second slot.container() would replace the first
            cols = st.columns([4, 1])
            cols[0].markdown(f":material/psychology: **Your prediction:** {q.text} → **{q.show(guess)}**")
            cols[1].button("Predict again", key=f"{q.key}__again", on_click=_forget, args=(q,),
                           help="Forget this guess and make a new one; once a result is shown, it is locked.")
            _scored_on(q)
        st.session_state.setdefault(_SLOTS_KEY, {})[q.key] = slot
        return guess
    with st.container(border=True):
        st.markdown(f":material/psychology: **Predict first.** {q.text}")
        _scored_on(q)
        if q.choices:
            st.radio("Your prediction", list(q.choices), key=f"{q.key}__guess", help=q.help or None)
        else:
            st.number_input(f"Your prediction ({q.unit})" if q.unit else "Your prediction", float(q.lo),
                            float(q.hi), float(q.default), key=f"{q.key}__guess", help=q.help or None)
        st.button("Commit my prediction", key=f"{q.key}__commit", type="primary", on_click=_commit, args=(q,),
                  help="Your guess is kept; then the lab runs (or shows what it measured before).")
        why = "a guess made before you look is what makes the result surprising, and the surprise is what you remember."
        if (q.lab_id or q.lab) in st.session_state.get(REMEASURE_KEY, {}):
            st.caption("The re-measure you asked for runs as soon as your new predictions are in: "
                       "a new run is scored against a new guess.")
        else:
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


def source_label(source: str, label: str | None = None) -> str:
    """What a result says it comes from: `label` where the page names another machine (a GPU's roofline
    model), else measured on this machine's engine, or simulated on this machine's step model, a guessed
    one where this machine is not calibrated (engine.sim.machine_speed's kind: the page has read it
    already, so no spinner here)."""
    if label:
        return label
    if source == "measured":
        return machines.source_label(source, True)
    from engine.sim.machine_speed import machine_speed
    from ui.session import model_name        # it imports torch
    return machines.source_label(source, machine_speed(model_name()).calibrated)


def reveal(q: Question, guess, measured, why: str, measured_text: str | None = None,
           source: str = "measured", label: str | None = None) -> bool:
    """Show the guess beside the result with the gap explained, record it in the session's progress
    and lock the guess. `source`: "measured" (the real engine) or "simulated"; `label`: what the result
    is labelled where it is not this machine's (source_label). A choice is right or
    wrong; a number is close within CLOSE_FACTOR. Returns right/close."""
    right, words = _score(q, guess, measured)
    shown = measured_text or q.show(measured)
    entry = predictions().setdefault(q.slot, {"id": q.lab, "settings_key": q.asked, "settings": q.settings,
                                              "question": q.text, "lab": q.lab_id or q.lab, "guess": guess,
                                              "guess_shown": q.show(guess), "made_s": time.time()})
    before = (entry.get("shown"), entry.get("source"), entry.get("locked"))
    if source == "measured" or entry.get("source") != "measured":
        entry.update(measured=measured if not isinstance(measured, float) else round(measured, 4), verdict=words,
                     shown=shown, source=source, close=right)
    entry["locked"] = True
    if (entry.get("shown"), entry.get("source"), True) != before:       # a reveal is kept once, not every rerun
        learner.save("reveal_prediction", q.lab, q.asked, guess, entry["measured"], entry["shown"], entry["source"],
                     entry["verdict"], entry.get("close", right))
    slot = st.session_state.get(_SLOTS_KEY, {}).pop(q.key, None)
    if slot is not None:      # the "Predict again" line drawn above in this run: now locked
        _locked_line(slot.container(), q, guess)
    with st.container(border=True):
        cols = st.columns(2)
        label = source_label(source, label)
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


def simulated(q: Question, guess, answer, why: str, answer_text: str | None = None, label: str | None = None) -> bool:
    """reveal() with the simulator's answer, before the real run."""
    return reveal(q, guess, answer, why, answer_text, source="simulated", label=label)


def verdict_elsewhere(v, pick: str) -> None:
    """In place of a verdict whose claim is about other settings than the page's: a line saying what to
    pick to test it (a ✗ there would judge the claim where it makes no promise)."""
    st.caption(f"Not judged here, since this claim is about other settings: {pick} to test it (“{v.claim.text}”).")


def show_verdict(v, source: str = "measured", label: str | None = None) -> None:
    """The lab's claim and what this run says about it, in words computed from the run."""
    record_verdict(v, source)
    icon = {"shown": ":material/check_circle:", "not shown": ":material/cancel:"}.get(v.outcome, ":material/help:")
    mark = {"shown": "✓", "not shown": "✗"}.get(v.outcome, "?")
    run = "this run" if source == "measured" else "the simulation"
    outcome = v.outcome_words.replace("this run", run)
    with st.container(border=True):
        st.markdown(f"{icon} **Claim:** {v.claim.text}")
        st.markdown(machines.badge(machines.ENGINE if source == "measured" else machines.SIMULATOR,
                                   source_label(source, label)))
        st.markdown(f"**{mark} {outcome[0].upper() + outcome[1:]}** ({v.claim.metric}: {v.value_text()}; the claim "
                    f"needs {v.claim.threshold_text()}). " + ("Why: " if v.outcome == "undecided" else "") + v.words)
