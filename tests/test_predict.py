"""Predict, then observe (ui/predict.py): nothing is shown before the learner commits, the guess
is kept in the session's progress, and the result appears beside it with a verdict."""
from streamlit.testing.v1 import AppTest

from ui.predict import PREDICTIONS_KEY, number_verdict


def test_number_verdict_is_close_within_a_factor():
    assert number_verdict(10, 12)[0] and number_verdict(10, 8)[0]
    close, words = number_verdict(10, 40)
    assert not close and "×4" in words
    close, words = number_verdict(10, 2)
    assert not close and "5× smaller" in words
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
    entry = at.session_state[PREDICTIONS_KEY]["demo"]
    assert entry["guess"] == "static" and entry["measured"] == "continuous" and entry["verdict"] == "not what happened"
    assert [m.value for m in at.metric] == ["static", "continuous"]
    assert any("✗" in m.value for m in at.markdown), "the verdict is said in text, not by colour alone"


def test_a_new_question_or_predict_again_asks_again():
    at = AppTest.from_function(lab_script).run()
    at.button(key="predict_demo__commit").click().run()
    assert "RESULT SHOWN" in [m.value for m in at.markdown]
    at.button(key="predict_demo__again").click().run()
    assert "RESULT SHOWN" not in [m.value for m in at.markdown]
    at.button(key="predict_demo__commit").click().run()
    at.session_state["question_text"] = "Another question?"
    at.run()
    assert "RESULT SHOWN" not in [m.value for m in at.markdown], "a guess answers only its own question"


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
