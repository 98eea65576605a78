"""Predict, then observe (ui/predict.py): nothing is shown before the learner commits, the guess
is kept in the session's progress, and the result appears beside it with a verdict."""
from streamlit.testing.v1 import AppTest

from ui.predict import PREDICTIONS_KEY, number_verdict


def entry_of(at, question: str = "demo"):
    """The one prediction kept for `question` (whatever settings it was asked with), or None."""
    mine = [e for e in at.session_state[PREDICTIONS_KEY].values() if e["id"] == question]
    assert len(mine) <= 1, mine
    return mine[0] if mine else None


def test_number_verdict_is_close_within_a_factor():
    assert number_verdict(10, 12)[0] and number_verdict(10, 8)[0]
    close, words = number_verdict(10, 40)
    assert not close and "4 times your guess" in words
    close, words = number_verdict(10, 2)
    assert not close and "5 times smaller" in words
    assert number_verdict(0, 0)[0] and not number_verdict(3, 0)[0]


def lab_script():
    import streamlit as st

    from ui import predict
    text = st.session_state.get("question_text", "Which finishes first?")
    q = predict.Question("demo", text, choices=("static", "continuous"))
    guess = predict.gate(q)
    st.markdown("RESULT SHOWN")
    predict.reveal(q, guess, "continuous", "Continuous refills a free slot at the next step.")


def test_gate_hides_the_result_until_the_learner_commits():
    at = AppTest.from_function(lab_script).run()
    assert not at.exception
    assert "RESULT SHOWN" not in [m.value for m in at.markdown]
    assert not at.session_state[PREDICTIONS_KEY]
    at.radio(key="predict_demo__guess").set_value("static").run()
    at.button(key="predict_demo__commit").click().run()
    assert "RESULT SHOWN" in [m.value for m in at.markdown]
    entry = entry_of(at)
    assert entry["guess"] == "static" and entry["measured"] == "continuous" and entry["verdict"] == "not what happened"
    assert [m.value for m in at.metric] == ["static", "continuous"]
    assert any("✗" in m.value for m in at.markdown), "the verdict is said in text, not by colour alone"


def playground_script():
    from playground import prediction
    prediction.show(None, None, None)     # before a guess is in it reads none of them


def test_the_control_says_whether_the_page_waits_for_the_guess():
    """A lab holds its results until the commit and says so; the Playground runs either way, and its
    control must not claim otherwise."""
    held = AppTest.from_function(lab_script).run()
    assert any("shows nothing until you commit" in c.value for c in held.caption)
    free = AppTest.from_function(playground_script).run()
    assert not free.exception
    words = " ".join(c.value for c in free.caption)
    assert "shows nothing" not in words and "Nothing here waits for your guess" in words


def test_a_guess_locks_once_its_result_is_shown_and_a_new_run_asks_again():
    at = AppTest.from_function(lab_script).run()
    at.radio(key="predict_demo__guess").set_value("static").run()
    at.button(key="predict_demo__commit").click().run()
    assert "RESULT SHOWN" in [m.value for m in at.markdown]
    assert entry_of(at)["locked"]
    assert not any(b.key == "predict_demo__again" for b in at.button), "no second guess once the answer is out"
    assert any("Locked" in c.value for c in at.caption)
    at.run()
    assert entry_of(at)["guess"] == "static", "the guess stays as it was"
    at.session_state["question_text"] = "Another question?"      # other settings: a new run, a new guess
    at.run()
    assert "RESULT SHOWN" not in [m.value for m in at.markdown], "a guess answers only its own question"


def gated_script():
    import streamlit as st

    from ui import predict
    q = predict.Question("demo", "Which finishes first?", choices=("static", "continuous"))
    guess = predict.gate(q)
    if st.session_state.get("new_run"):
        predict.unlock("demo")                 # what Re-measure does before it measures again
        st.session_state.new_run = False
        st.rerun()
    if st.session_state.get("show"):
        predict.reveal(q, guess, "continuous", "because")
    st.markdown("PAGE END")


def test_predict_again_works_until_the_result_is_shown_and_re_measure_asks_anew():
    at = AppTest.from_function(gated_script).run()
    at.button(key="predict_demo__commit").click().run()
    assert "PAGE END" in [m.value for m in at.markdown]
    at.button(key="predict_demo__again").click().run()          # no result yet: the guess may change
    assert "PAGE END" not in [m.value for m in at.markdown]
    at.button(key="predict_demo__commit").click().run()
    at.session_state["show"] = True
    at.run()
    assert not any(b.key == "predict_demo__again" for b in at.button)
    at.session_state["new_run"] = True
    at.run()
    assert "PAGE END" not in [m.value for m in at.markdown], "a new run needs a new guess"
    assert entry_of(at) is None


def measured_script():
    import streamlit as st

    from ui import predict
    if st.button("show", key="show"):
        predict.record("tail", ttft_p50="0.40 s")
    st.markdown(f"VALUE {predict.measurement('tail', 'ttft_p50')}")


def test_measurements_are_kept_for_the_quiz():
    at = AppTest.from_function(measured_script).run()
    assert at.markdown[0].value == "VALUE None"
    at.button(key="show").click().run()
    assert at.markdown[0].value == "VALUE 0.40 s"


def test_a_tie_for_the_best_makes_every_tied_choice_right():
    """'Which router gives the lowest p95 TTFT?' named the first of two routers 0.3% apart and
    marked the learner who picked the other wrong: values within TIE_WITHIN of the best tie."""
    from ui.predict import Question, _score, best_of
    assert best_of({"a": 1.0, "b": 1.5, "c": 2.0}) == "a"
    assert best_of({"a": 1.0, "b": 1.005, "c": 2.0}) == ("a", "b")
    assert best_of({"a": 1.0, "b": 1.5, "c": 1.49}, highest=True) == ("b", "c")
    assert best_of({"a": float("nan"), "b": 3.0}) == "b" and best_of({"a": float("nan")}) is None
    q = Question("demo", "Which is best?", choices=("a", "b", "c"))
    assert _score(q, "b", ("a", "b")) == (True, "right: a tie")
    assert _score(q, "c", ("a", "b")) == (False, "not what happened")
    assert _score(q, "a", "a") == (True, "right")
    assert q.show(("a", "b")) == "a and b (a tie)" and q.show("a") == "a"


def settings_script():
    import streamlit as st

    from ui import predict
    q = predict.question("knee", choices=("1", "8", "64"), settings={"requests": st.session_state.get("n", 200),
                                                                     "prompts": "32–128 tokens"})
    guess = predict.gate(q)
    predict.reveal(q, guess, st.session_state.get("answer", "8"), "because")
    st.markdown("PAGE END")


def test_a_prediction_names_its_settings_and_a_new_setting_opens_a_new_one():
    """Issue 50: a guess locked for one setting was scored against the next setting's run. Each
    prediction now belongs to the settings it was asked with, named on the page."""
    at = AppTest.from_function(settings_script).run()
    words = " ".join(c.value for c in at.caption)
    assert "Scored on: requests 200 · prompts 32–128 tokens" in words, words
    at.radio(key="predict_knee__guess").set_value("64").run()
    at.button(key="predict_knee__commit").click().run()
    assert "PAGE END" in [m.value for m in at.markdown]
    assert any("Locked" in c.value and "requests 200" in c.value for c in at.caption)
    at.session_state["n"], at.session_state["answer"] = 400, "64"        # another setting, another answer
    at.run()
    assert "PAGE END" not in [m.value for m in at.markdown], "the old guess is not scored against the new run"
    assert "Scored on: requests 400" in " ".join(c.value for c in at.caption)
    at.radio(key="predict_knee__guess").set_value("8").run()
    at.button(key="predict_knee__commit").click().run()
    entries = sorted(at.session_state[PREDICTIONS_KEY].values(), key=lambda e: e["made_s"])
    assert [(dict(e["settings"])["requests"], e["guess"], e["measured"]) for e in entries] == \
        [("200", "64", "8"), ("400", "8", "64")], "each guess scored against its own setting's answer"
    at.session_state["n"], at.session_state["answer"] = 200, "8"        # back: the first guess, still locked
    at.run()
    assert "PAGE END" in [m.value for m in at.markdown]
    assert any("Locked" in c.value and "requests 200" in c.value for c in at.caption)


def test_every_lesson_asks_its_labs_questions_and_never_says_predict_again_without_one():
    """Issue 50: lessons said "predict again" where no widget asks, and lesson 10's questions were
    not declared, so the lesson could not show them or end with them."""
    import re

    from lessons.catalog import load_lessons
    from lessons.markers import find_predictions
    from course.predictions import ASKS
    lessons, _ = load_lessons()
    asked = {a for l in lessons for a in find_predictions(l.body)}
    assert set(ASKS) - asked == set(), "a lab question that no lesson shows"
    for l in lessons:
        for para in l.body.split("\n\n"):
            if re.search(r"predict again", para, re.I):
                assert "{{place:predict:" in para, f"{l.id}: 'predict again' with no question: {para[:80]}"
