"""The Playground is derived from the knobs the engine declares: every workload and policy knob
has a widget and a link parameter without the Playground naming it, and step_priority (a knob
the Playground code never mentions) goes from the sidebar and the link to the running engine.
"""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.core.config import SchedulerPolicy
from engine.core.knobs import knobs_of
from engine.model.model import load_model
from engine.core.step_model import StepModel
from engine.runs.workload import WorkloadSpec
from playground.controls import IN_RANGE, RANGES
from playground.presets import PRESETS
from playground.run import PlaygroundRun
from playground.setup import KNOBS, PLAYGROUND_DEFAULTS, Setup

APP = str(Path(__file__).resolve().parent.parent / "app.py")
ENGINE_KNOBS = {**knobs_of(WorkloadSpec), **knobs_of(SchedulerPolicy)}
WIDGETS = ("slider", "toggle", "radio", "selectbox", "number_input")


@pytest.fixture(autouse=True)
def tiny_model(monkeypatch):
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")


def playground(query: dict) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    return at.switch_page("playground/page.py").run()


def widget_key(name: str) -> str:
    """A knob's widget: its own, or the from–to slider it shares."""
    return "pg_" + (IN_RANGE[name] + "_len" if name in IN_RANGE else name)


def test_setup_fields_are_the_knobs_with_the_engine_defaults():
    assert list(Setup.__dataclass_fields__) == list(ENGINE_KNOBS) == list(KNOBS)
    for name, k in ENGINE_KNOBS.items():
        assert getattr(Setup(), name) == PLAYGROUND_DEFAULTS.get(name, k.default), name
    assert Setup().policy() == SchedulerPolicy()


def test_every_knob_has_a_widget_and_a_link_parameter_and_step_priority_drives_the_link():
    at = playground({"step_priority": "sideways"})
    assert not at.exception, [e.value for e in at.exception]
    assert any("step_priority" in w.value for w in at.warning)        # the bad value is reported
    keys = {w.key for kind in WIDGETS for w in at.get(kind)}
    for name in ENGINE_KNOBS:
        assert widget_key(name) in keys, name
        assert name in at.query_params, name
    radio = at.radio(key="pg_step_priority")
    assert radio.value == "decode_first"                              # ...and ignored
    radio.set_value("prefill_first").run()
    assert at.query_params["step_priority"] in ("prefill_first", ["prefill_first"])


def test_step_priority_round_trips_through_the_link():
    setup = Setup(step_priority="prefill_first")
    query = setup.to_query()
    assert query["step_priority"] == "prefill_first"
    assert Setup.from_query(query) == (setup, [])


def test_a_bad_step_priority_in_a_link_is_reported_and_ignored():
    setup, problems = Setup.from_query({"step_priority": "sideways", "max_num_seqs": "4"})
    assert setup == Setup(max_num_seqs=4)
    assert len(problems) == 1 and "step_priority" in problems[0] and "sideways" in problems[0]


def test_step_priority_reaches_the_running_engine():
    lab = PlaygroundRun(Setup(rate=0.0, num_requests=4, output_lo=4, output_hi=4), load_model("tiny"))
    try:
        decision = lab.apply(lab.setup.changed(step_priority="prefill_first"))
        assert decision.changes == ("step_priority decode_first→prefill_first",)
        assert lab.live.engine.policy.step_priority == "prefill_first"
        lab.step_once()
        assert lab.steps_taken == 1 and lab.state != "error"
    finally:
        lab.stop()


MACHINE = StepModel(9.0, (2, 8, 32, 128), (2.0, 0.5, 1.0, 0.8, 0.75), 0.4, 1.5, 0.7, "a machine")
SIZED = ("rate", "ttft_slo_s", "tpot_slo_s")      # a preset sizes these to the machine


@pytest.mark.parametrize("pid", list(PRESETS))
def test_a_preset_lists_only_the_knobs_it_changes(pid):
    changes = PRESETS[pid].changes
    for name, value in changes.items():
        assert name in KNOBS and name not in SIZED and value != KNOBS[name].default, name
    sized = PRESETS[pid].setup_for(MACHINE).to_dict()
    assert {k: v for k, v in sized.items() if k not in SIZED} == {
        k: v for k, v in {**Setup().to_dict(), **changes}.items() if k not in SIZED}


def test_range_sliders_cover_both_of_their_knobs():
    assert {name for pair in RANGES.values() for name in pair} == set(IN_RANGE) <= set(KNOBS)


def test_switching_the_engine_keeps_the_learners_rate():
    """The H100 simulation's rate slider ends further out; Streamlit takes a slider whose end
    moved for a new one and would start it at 0, turning continuous traffic into one burst."""
    at = playground({"rate": "3.5"})
    assert at.slider(key="pg_rate").value == 3.5
    at.selectbox(key="pg_engine").set_value("sim_h100").run()
    assert at.slider(key="pg_rate").max > KNOBS["rate"].hi
    assert at.slider(key="pg_rate").value == 3.5 and float(at.query_params["rate"]) == 3.5
    at.selectbox(key="pg_engine").set_value("real").run()
    assert at.slider(key="pg_rate").value == 3.5 and float(at.query_params["rate"]) == 3.5
