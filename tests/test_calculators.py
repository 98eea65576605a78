"""The lessons' calculators: the queueing formulas give textbook values, each widget shows them for
its slider values, the step-time one reads this machine's step model, and lessons embed them."""
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from analysis.queueing import (littles_law_in_system, mm1_p99_chart, mm1_time_in_system,
                               mm1_time_in_system_quantile)
from engine.core.step_model import UNCALIBRATED, StepModel
from lessons.catalog import FOLDER, load_lessons
from lessons.markers import split_pictures
from lessons.views import FOLDER_ENV, LESSON_URL_PREFIX
from ui.calculators import CALCULATOR_IDS

LESSONS_APP = str(Path(__file__).parent / "apps" / "lessons_app.py")


# ---- the formulas ---------------------------------------------------------------------------

@pytest.mark.parametrize("lam, mu", [(5, 10), (9, 10), (9.9, 10), (0, 4)])
def test_mm1_mean_and_p99_are_the_textbook_ones(lam, mu):
    w = 1 / (mu - lam)
    assert mm1_time_in_system(lam, mu) == pytest.approx(w)
    assert mm1_time_in_system_quantile(lam, mu, 0.99) == pytest.approx(math.log(100) / (mu - lam))
    assert mm1_time_in_system_quantile(lam, mu, 0.5) == pytest.approx(math.log(2) * w)   # the median


def test_mm1_flags_an_unstable_queue():
    for lam in (10, 12):
        assert mm1_time_in_system(lam, 10) == math.inf
        assert mm1_time_in_system_quantile(lam, 10) == math.inf
    p99 = mm1_time_in_system_quantile(np.array([5.0, 10.0]), 10.0)
    assert p99[0] == pytest.approx(math.log(100) / 5) and p99[1] == math.inf
    for q in (0, 1, 99):
        with pytest.raises(ValueError, match="q must be in"):
            mm1_time_in_system_quantile(5, 10, q)


def test_littles_law():
    assert littles_law_in_system(20, 2) == pytest.approx(40)
    assert littles_law_in_system(9.9, 10) == pytest.approx(99)
    with pytest.raises(ValueError):
        littles_law_in_system(-1, 2)


def test_p99_chart_marks_the_current_utilization():
    fig = mm1_p99_chart(5, 10)
    marker = next(t for t in fig.data if t.mode == "markers")
    assert marker.x[0] == pytest.approx(0.5) and marker.y[0] == pytest.approx(math.log(100) / 5)
    assert "50%" in marker.name
    unstable = mm1_p99_chart(12, 10)
    assert not [t for t in unstable.data if t.mode == "markers"]
    assert unstable.layout.shapes[0].x0 == 1 and "unstable" in unstable.layout.annotations[0].text
    assert mm1_p99_chart(1, 0).layout.annotations[0].text == "no data yet"


# ---- the widgets ----------------------------------------------------------------------------

def calculator_page():
    import streamlit as st

    from ui.calculators import show_calculator
    show_calculator(st.session_state.get("calculator", "mm1"))


def calculator(calc_id: str, **sliders) -> AppTest:
    at = AppTest.from_function(calculator_page, default_timeout=60)
    at.session_state["calculator"] = calc_id
    at.run()
    for key, value in sliders.items():
        at.slider(key=key).set_value(value)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def text(at: AppTest) -> str:
    return "\n".join(m.value for m in [*at.markdown, *at.caption])


def test_mm1_widget_shows_w_and_p99():
    at = calculator("mm1", calc_mm1_lam=9.0, calc_mm1_mu=10.0)
    assert metrics(at) == {"Utilization ρ = λ/μ": "90%", "Mean time in system W = 1/(μ−λ)": "1.00 s",
                           "p99 time in system = ln(100)·W": "4.61 s"}
    assert len(at.get("plotly_chart")) == 1 and "grows without end" not in text(at)
    at.slider(key="calc_mm1_lam").set_value(2.0).run()
    assert metrics(at)["Mean time in system W = 1/(μ−λ)"] == "125 ms"
    assert metrics(at)["p99 time in system = ln(100)·W"] == "576 ms"
    at.slider(key="calc_mm1_lam").set_value(12.0).run()
    assert metrics(at)["Mean time in system W = 1/(μ−λ)"] == "unstable"
    assert "Unstable: the queue grows without end" in text(at)


def test_kv_budget_widget_is_littles_law_times_the_tokens_each_holds():
    at = calculator("kv_budget", calc_kv_lam=9.5, calc_kv_w=4.0, calc_kv_tokens=512, calc_kv_pool=8192)
    assert metrics(at) == {"Requests running L = λ × run time": "38.0", "KV tokens held on average": "19,456",
                           "Share of the cache": "238%"}
    assert "does not fit" in text(at)
    at.slider(key="calc_kv_pool").set_value(32768).run()
    assert metrics(at)["Share of the cache"] == "59%" and "does not fit" not in text(at)


def test_step_table_recomputes_the_table_and_moves_the_knee():
    from course.examples import BATCHES
    at = calculator("step_table", calc_tb_t0=10.0, calc_tb_c=2.0)
    table = next(m.value for m in at.markdown if m.value.startswith("| Batch B"))
    assert "| 1 | 12.0 ms | 83 |" in table and "| 64 | 138.0 ms | 464 |" in table
    assert "half of it at $B = t_0/c$ = **5.0**" in text(at)
    knees = [line.split(" |")[0] for line in table.splitlines() if "knee" in line]
    assert knees == ["| 32 ← knee"]                           # 32: 444 of 464 tokens/s, 96%
    at.slider(key="calc_tb_c").set_value(0.1).run()           # a tiny c: the curve never flattens
    table = next(m.value for m in at.markdown if m.value.startswith("| Batch B"))
    assert [line.split(" |")[0] for line in table.splitlines() if "knee" in line] == [f"| {BATCHES[-1]} ← knee"]


def test_slots_runs_the_scheduler_static_and_continuous():
    from course.examples import slot_grid
    at = calculator("slots")
    at.text_input(key="calc_slots_lengths").set_value("2, 4, 3, 4, 1, 1").run()
    shown = text(at)
    for mode in ("static", "continuous"):
        g = slot_grid([2, 4, 3, 4, 1, 1], 4, mode)
        assert f"**{mode}**: {g['steps']} steps, 15 of {g['held']} slot-steps used" in shown
    assert slot_grid([2, 4, 3, 4, 1, 1], 4, "continuous")["steps"] < slot_grid([2, 4, 3, 4, 1, 1], 4, "static")["steps"]
    at.text_input(key="calc_slots_lengths").set_value("2, lots").run()
    assert at.error and "2 to 8 whole numbers from 1 to 12" in at.error[0].value and "'2, lots'" in at.error[0].value


def test_unknown_calculator_is_named():
    at = calculator("no_such_calculator")
    assert at.error and "mm1" in at.error[0].value


def test_step_time_widget_without_a_profile_says_it_is_a_guess(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))     # no profile there
    at = calculator("step_time", calc_step_batch=16, calc_step_context=256)
    t = UNCALIBRATED.decode_ms(16, 256)
    assert metrics(at) == {"Step time t(B)": f"{t:.1f} ms", "Time per token t(B)/B": f"{t / 16:.2f} ms",
                           "Tokens per second B/t(B)": f"{16000 / t:,.0f}"}
    assert "no step model yet" in text(at) and UNCALIBRATED.label in text(at)


def test_step_time_widget_reads_this_machines_profile(tmp_path, monkeypatch):
    from engine.sim.profile import Profile, current_key, save_profile
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    # t(B) = 5 ms + 1 ms x B: nothing else costs anything
    line = StepModel(fixed_ms=5.0, knots=(), token_ms=(1.0,), sample_ms=0.0, decode_read_ms=0.0,
                     prefill_pair_ms=0.0, label="calibrated: tiny, a test line")
    save_profile(Profile(**current_key("tiny", "auto", "auto"), step_model=line, fit={}))
    at = calculator("step_time", calc_step_batch=10)
    assert metrics(at) == {"Step time t(B)": "15.0 ms", "Time per token t(B)/B": "1.50 ms",
                           "Tokens per second B/t(B)": "667"}
    assert "$t_0$ = 5.0 ms" in text(at) and "$c$ = 1.00 ms per sequence" in text(at)
    assert ("Numbers from this machine's step model: calibrated: tiny, a test line; not yet checked "
            "against this app's own steps.") in text(at)


def test_step_time_widget_reads_the_refit_from_the_apps_own_steps(tmp_path, monkeypatch):
    """The app's steps took 3 ms + 2 x the profile: the calculator (and every lab) reads the refit,
    with its current error beside the numbers."""
    import json

    from engine.core import step_fit
    from engine.sim.profile import Profile, current_key, save_profile
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(step_fit, "_fits", {})
    line = StepModel(fixed_ms=5.0, knots=(), token_ms=(1.0,), sample_ms=0.0, decode_read_ms=0.0,
                     prefill_pair_ms=0.0, label="calibrated: tiny, a test line")
    saved = save_profile(Profile(**current_key("tiny", "auto", "auto"), step_model=line, fit={}))
    with open(step_fit.refit_path(saved.path), "w") as f:
        json.dump({"offset_ms": 3.0, "scale": 2.0, "steps": 900, "error": 0.07, "base": line.to_dict()}, f)
    at = calculator("step_time", calc_step_batch=10)
    assert metrics(at)["Step time t(B)"] == "33.0 ms"           # 3 + 2 x (5 + 10)
    assert "refit on 900 of this app's real steps" in text(at) and "current error 7%" in text(at)


# ---- in the lessons -------------------------------------------------------------------------

def test_lessons_name_only_known_calculators_and_use_each():
    lessons, _ = load_lessons()
    used = {part for l in lessons for kind, part in split_pictures(l.body) if kind == "calculator"}
    assert used == set(CALCULATOR_IDS)
    where = {l.id: [p for k, p in split_pictures(l.body) if k == "calculator"] for l in lessons}
    assert where["queueing"] == ["mm1", "kv_budget"] and where["why-batch"] == ["step_example", "step_table", "step_time"]
    assert where["static-vs-continuous"] == ["slots"]


def lesson(lesson_id: str) -> AppTest:
    at = AppTest.from_file(LESSONS_APP, default_timeout=60)
    at.run()
    at.session_state["goto"] = LESSON_URL_PREFIX + lesson_id
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_queueing_lesson_reads_the_step_model_its_session_holds():
    """The worked example's numbers and its calculator come from runs on the session's step model: a faster
    model gives the faster model's mu, in the text and in the slider, and the picture says which model."""
    from course.numbers import on_step_model
    from tests.test_lesson_examples import FASTER
    from ui.calculators import LESSON_MODEL_KEY
    at = AppTest.from_file(LESSONS_APP, default_timeout=90)
    at.run()
    at.session_state[LESSON_MODEL_KEY] = FASTER
    at.session_state["goto"] = LESSON_URL_PREFIX + "queueing"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    mu = on_step_model(FASTER)["mu"]
    assert f"it finishes $\\mu =$ {mu} requests per second" in text(at)
    assert at.slider(key="calc_mm1_mu").value == min(round(mu, 1), 20.0)
    assert any(FASTER.label in c.value for c in at.caption)


def test_queueing_lesson_embeds_its_calculators():
    from course import examples as course
    from ui.calculators import learner_step_model
    at = lesson("queueing")
    mu, lam = at.slider(key="calc_mm1_mu").value, at.slider(key="calc_mm1_lam").value
    here = learner_step_model()                # the lesson's worked example runs on this machine's step model
    assert mu == min(round(course.capacity(cost=here), 1), 20.0) and lam == round(0.9 * mu, 1)
    assert mu != round(course.capacity(), 1), "not the recorded model's capacity"
    assert metrics(at)["Mean time in system W = 1/(μ−λ)"] == f"{1 / (mu - lam):.2f} s"
    ex = course.load_example(course.LOADS[-1], here)
    running = max(round(ex["w"] - ex["queue"], 2), 0.1)   # waiting requests hold no KV: only the time running counts
    assert metrics(at)["Requests running L = λ × run time"] == f"{round(ex['rate'], 2) * running:.1f}"
    assert not at.warning and "{{" not in text(at)
    at.slider(key="calc_mm1_mu").set_value(10.0).run()
    at.slider(key="calc_mm1_lam").set_value(9.9).run()
    assert metrics(at)["p99 time in system = ln(100)·W"] == "46.05 s"
    assert "| **99.0%** | **9.90** |" in text(at)               # the table marks the chosen utilization


def test_why_batch_lesson_embeds_the_step_time_calculator(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    at = lesson("why-batch")
    assert metrics(at)["Step time t(B)"] == f"{UNCALIBRATED.decode_ms(8, 128):.1f} ms"
    assert not at.warning


def line_rows(t0: float, c: float) -> list[dict]:
    from course.examples import step_table
    line = StepModel(fixed_ms=t0, knots=(), token_ms=(c,), sample_ms=0.0, decode_read_ms=0.0,
                     prefill_pair_ms=0.0, label="a test line")
    return step_table(line)


def test_lesson_1_reading_has_words_for_each_outcome():
    from course.readings import step_example_reading
    fixed = step_example_reading(line_rows(5.0, 1.0), "M")             # the weight read dominates: 8 pays
    assert "sharing the step pays" in fixed and "the knee is 32, at 93% of the best" in fixed
    assert "half of it at $B = t_0/c \\approx$ 5," in fixed
    per_seq = step_example_reading(line_rows(0.1, 10.0), "M")          # each sequence costs its own step
    assert "each sequence already costs about as much as it brings" in per_seq and "sharing" not in per_seq
    flat = step_example_reading(line_rows(10.0, 0.001), "M")           # a GPU-like line: no ceiling to quote
    assert "so flat over these rows" in flat and "ceiling $1/c$ of" not in flat
    assert "the knee is 64, the last row" in flat and "has not flattened by 64" in flat


def test_why_batch_worked_example_is_the_learners_own_profile_beside_a_named_gpu(tmp_path, monkeypatch):
    """Lesson 1's worked table is this machine's calibrated step model (here a saved line, 5 ms + 1 ms x B),
    badged as this machine's, beside the named GPU's roofline, badged with its name: no frozen record."""
    from course import examples as course, machines
    from engine.sim.profile import Profile, current_key, save_profile
    from engine.sim.roofline import roofline_profile
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path / "cache"))
    line = StepModel(fixed_ms=5.0, knots=(), token_ms=(1.0,), sample_ms=0.0, decode_read_ms=0.0,
                     prefill_pair_ms=0.0, label="calibrated: tiny, a test line")
    save_profile(Profile(**current_key("tiny", "auto", "auto"), step_model=line, fit={}))
    at = lesson("why-batch")
    shown = text(at)
    here = next(m.value for m in at.markdown if m.value.startswith(machines.badge(machines.SIMULATOR, "this machine's step model")))
    assert "| 1 | 6.0 ms | 167 |" in here and "| 32 ← knee | 37.0 ms | 865 |" in here and "| 64 | 69.0 ms | 928 |" in here
    assert "$t_0 \\approx$ 5.0 ms and $c \\approx$ 1 ms" in here and "half of it at $B = t_0/c \\approx$ 5" in here
    assert "grows 3.7 times while each user's gap between tokens grows 2.2 times: sharing the step pays" in here
    assert "By the rule the knee is 32, at 93% of the best" in here
    gpu = roofline_profile(course.KNEE_GPU)
    there = next(m.value for m in at.markdown if m.value.startswith(machines.badge(course.KNEE_GPU)))
    assert f"| 1 | {gpu.decode_ms(1, course.CONTEXT):,.1f} ms |" in there and course.knee_gpu_name() in there
    assert "calibrated: tiny, a test line" in shown and course.COURSE_MODEL.label not in shown
    assert at.slider(key="calc_tb_t0").value == 5.0 and at.slider(key="calc_tb_c").value == 1.0
    assert not at.warning


def test_an_unknown_calculator_marker_is_named(tmp_path, monkeypatch):
    for p in [FOLDER / "05-queueing.md", FOLDER / "glossary.md"]:
        shutil.copy(p, tmp_path / p.name)
    five = tmp_path / "05-queueing.md"
    five.write_text(five.read_text(encoding="utf-8").replace("{{place:calculator:mm1}}", "{{place:calculator:no_such}}"),
                    encoding="utf-8")
    monkeypatch.setenv(FOLDER_ENV, str(tmp_path))
    at = lesson("queueing")
    assert len(at.warning) == 1 and "calculator 'no_such' is not available" in at.warning[0].value
    assert "Requests running L = λ × run time" in metrics(at), "the other calculator still shows"
