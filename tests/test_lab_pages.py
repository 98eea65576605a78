"""Every lesson lab page renders under AppTest; some press their run button on the tiny model.

Runs use BATCHING_LAB_MODEL=tiny and a fresh BATCHING_LAB_CACHE, so nothing here reads or
writes the machine's real cached results.
"""
import json
from pathlib import Path

import pytest

from course.machines import SOURCE_LABEL
from streamlit.testing.v1 import AppTest

from engine.core.config import SchedulerPolicy
from labs import runs
from labs.knee import experiment as knee
from ui.predict import MEASUREMENTS_KEY, PREDICTIONS_KEY
from course.registry import LESSON_LABS
from conftest import commit_predictions as commit

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120





def page(path: str) -> AppTest:
    return AppTest.from_file(str(ROOT / path), default_timeout=TIMEOUT)


def texts(at: AppTest) -> str:
    return "\n".join([c.value for c in at.caption] + [m.value for m in at.markdown])


def test_registry_lists_every_lesson_lab_once():
    from lessons.catalog import LAB_IDS
    ids = [lab.url_path for lab in LESSON_LABS]
    assert len(ids) == len(set(ids)) == len(list(ROOT.glob("labs/*/page.py")))
    assert set(ids) == set(LAB_IDS) - {"playground"}
    for lab in LESSON_LABS:
        assert (ROOT / lab.path).is_file() and lab.title and lab.icon.startswith(":material/")


def kept(at: AppTest, question: str) -> dict:
    """The prediction kept for `question` (one per question here: the settings never change)."""
    [entry] = [e for e in at.session_state[PREDICTIONS_KEY].values() if e["id"] == question]
    return entry



def simulated_answer(at: AppTest) -> bool:
    """The simulator's answer is on the page: a guess shown beside a simulated result, and the claim's
    verdict said of the simulation."""
    label = SOURCE_LABEL["guessed"]     # every result names its machine: no profile in lab_env, so the guess
    beside = (any(m.label == label for m in at.metric)
              or any(m.value.startswith(label + "  \n") for m in at.markdown))   # a long choice, as text
    return beside and "The simulation" in texts(at)


@pytest.mark.parametrize("lab_id, path", [(lab.url_path, lab.path) for lab in LESSON_LABS],
                         ids=[lab.url_path for lab in LESSON_LABS])
def test_page_asks_for_a_prediction_before_anything_else(lab_env, lab_id, path):
    at = page(path).run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.title, "every lab has a title"
    # first the prediction: a commit button, and neither a run button nor any result
    assert any(b.key.endswith("__commit") for b in at.button), [b.key for b in at.button]
    assert not any(b.key.endswith("__run") for b in at.button)
    assert not at.metric and not at.get("plotly_chart")
    assert any(c.value.startswith(":material/tune: Scored on: ") for c in at.caption), "the question names its settings"
    for s in at.slider:
        assert s.help, f"slider {s.label!r} needs a help tooltip"
    # committed: the guess is kept and the page offers its run; nothing is measured yet
    commit(at)
    assert not at.exception, [e.message for e in at.exception]
    assert at.session_state[PREDICTIONS_KEY], "the prediction is kept in the session's progress"
    assert all(e["settings"] for e in at.session_state[PREDICTIONS_KEY].values()), \
        "every prediction names the settings it is scored on"
    assert any(b.key.endswith("__run") for b in at.button), [b.key for b in at.button]
    assert "Expected run time: about" in texts(at)
    assert not list(lab_env.glob("results/run-*.json")) and not list(lab_env.glob("results/scaling-*.json"))


def test_why_batch_measures_then_shows_the_cached_result(lab_env):
    at = page("labs/why_batch/page.py").run()
    at.multiselect(key="wb_sizes").set_value([1, 2, 8]).run()
    at.slider(key="wb_context").set_value(32).run()
    at.slider(key="wb_repeats").set_value(2).run()
    at.number_input(key="predict_why_batch__guess").set_value(3.0).run()
    commit(at).button(key="why_batch__run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    labels = [m.label for m in at.metric]
    assert "tokens/s at batch 8" in labels and "the knee" in labels
    assert "You predicted" in labels and SOURCE_LABEL["measured"] in labels      # the guess beside the result
    assert kept(at, "why_batch")["guess"] == 3.0
    assert kept(at, "why_batch")["measured"] > 0
    assert at.session_state[MEASUREMENTS_KEY]["why_batch"]["step_ms_1"].endswith(" ms"), "kept for the quiz"
    assert "Measured just now" in texts(at)
    assert len(at.get("plotly_chart")) == 2
    assert "step (ms), step model's prediction" in at.dataframe[0].value.columns, "the prediction beside the measurement"
    assert at.get("download_button"), "lab results download as CSV"
    # a second visit with the same settings is served from the cache, with a re-measure button
    again = page("labs/why_batch/page.py")
    again.session_state["wb_sizes"] = [1, 2, 8]
    again.session_state["wb_context"] = 32
    again.session_state["wb_repeats"] = 2
    again.run()
    assert not again.get("plotly_chart"), "stored results wait for the prediction too"
    commit(again)
    assert "Cached result from this machine" in texts(again)
    assert any(b.key == "why_batch__refresh" for b in again.button)
    assert len(again.get("plotly_chart")) == 2
    # Re-measure is a new run: the guesses are set aside and asked for again before it runs, so the
    # learner guesses before the wait and the new result shows at once beside the new guesses.
    [stored] = lab_env.glob("results/scaling-*.json")
    before = stored.stat().st_mtime_ns
    again.button(key="why_batch__refresh").click().run()
    assert not again.exception, [e.message for e in again.exception]
    assert any(b.key.endswith("__commit") for b in again.button) and not again.get("plotly_chart")
    assert "runs as soon as your new predictions are in" in texts(again)
    assert stored.stat().st_mtime_ns == before, "it waits for the new guesses before it measures"
    commit(again)
    assert not again.exception, [e.message for e in again.exception]
    assert stored.stat().st_mtime_ns > before, "the new guesses in, it measured again"
    assert "Measured just now" in texts(again) and len(again.get("plotly_chart")) == 2
    assert "You predicted" in [m.label for m in again.metric]
    after = stored.stat().st_mtime_ns
    again.run()
    assert stored.stat().st_mtime_ns == after, "it measures once, not at every rerun"


def test_knee_sweep_runs_and_marks_the_knee(lab_env):
    at = page("labs/knee/page.py").run()
    at.multiselect(key="kn_values").set_value([1, 4]).run()
    at.slider(key="kn_repeats").set_value(2).run()
    commit(at).button(key="knee__run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    knee = next(m for m in at.metric if m.label == "Knee (max_num_seqs)")
    assert knee.value in ("1", "4")
    assert kept(at, "knee")["measured"] == int(knee.value)
    assert len(at.get("plotly_chart")) == 2
    assert len(list(lab_env.glob("results/run-*.json"))) == 4, "two settings, two runs each"


def test_static_vs_continuous_runs_both_modes_and_replays(lab_env):
    at = page("labs/static_vs_continuous/page.py").run()
    at.slider(key="svc_slots").set_value(4).run()
    commit(at)
    # the simulator's answer at once: its numbers and its replay, before anything real is run
    assert simulated_answer(at) and "Simulated" in texts(at)
    assert any(m.label.startswith("Wasted slot-steps") for m in at.metric)
    assert list(at.dataframe[0].value.columns) == ["", "static (simulated)", "continuous (simulated)"]
    assert not list(lab_env.glob("results/run-*.json"))
    at.button(key="svc__run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not simulated_answer(at) and "This run" in texts(at)
    assert list(at.dataframe[0].value.columns) == ["", "static", "continuous", "static (simulated)",
                                                   "continuous (simulated)"], "real beside simulated"
    assert any(m.label.startswith("Wasted slot-steps") for m in at.metric)
    step = at.slider(key="svc_t")
    assert step.value == step.max > 0
    step.set_value(round(step.max / 2, 2)).run()
    assert not at.exception
    at.button(key="svc_play").click().run()
    assert at.session_state["svc_playing"]
    assert any(b.label.startswith("⏸") for b in at.button)


def test_dynamic_batching_sweeps_max_wait(lab_env):
    at = page("labs/dynamic_batching/page.py").run()
    at.multiselect(key="db_waits").set_value([0, 1000]).run()
    at.slider(key="db_repeats").set_value(1).run()
    commit(at)
    # the simulator's answer at once: its outcome and its dotted lines, before anything real is run
    assert simulated_answer(at) and not list(lab_env.glob("results/run-*.json"))
    names = [t["name"] for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert names and all("simulated" in n for n in names), names
    at.button(key="dynamic_batching__run").click().run()
    assert not simulated_answer(at)
    names = [t["name"] for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert any("simulated" in n for n in names) and any("simulated" not in n for n in names), names
    assert not at.exception, [e.message for e in at.exception]
    from labs.dynamic_batching.experiment import OUTCOMES
    assert kept(at, "dynamic_batching")["measured"] in OUTCOMES
    assert len(at.get("plotly_chart")) == 1
    assert len(list(lab_env.glob("results/run-*.json"))) == 2


def test_kv_capacity_sweeps_the_pool_then_runs_prefix_caching(lab_env):
    at = page("labs/kv_capacity/page.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert "bytes a token" in texts(at), "the bundled model's arithmetic is shown from its config"
    assert "Llama-3.1-70B" in at.dataframe[0].value["model"].tolist()
    commit(at).button(key="kv_pools__run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    from labs.kv_capacity import experiment as kv
    assert len(list(lab_env.glob("results/run-*.json"))) == len(kv.POOLS)
    running = next(m for m in at.metric if m.label == "Running while others waited")
    assert kept(at, "kv_running")["measured"] == pytest.approx(float(running.value), abs=0.05)
    table = at.dataframe[1].value
    assert table["most running"].max() <= kv.SLOTS and (table["peak use %"] <= 100).all()
    assert len(at.get("plotly_chart")) == 3, "two charts of the sweep, and the prefix part's simulated bars"
    # the prefix part asked its own question (commit answered both) and answers from the simulator first
    assert any(m.label == "Prefix cache hit rate" for m in at.metric)
    at.button(key="kv_prefix__run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert len(list(lab_env.glob("results/run-*.json"))) == len(kv.POOLS) + 2
    hit = next(m for m in at.metric if m.label == "Prefix cache hit rate")
    assert hit.value.endswith("%") and int(hit.value[:-1]) > 0, "a shared system prompt is found in the cache"
    assert kept(at, "kv_prefix")["measured"] > 0
def test_token_budget_sweeps_the_budget_then_judges_only_the_mixed_workload(lab_env, monkeypatch):
    from labs.token_budget import experiment
    monkeypatch.setattr(experiment, "REQUESTS", 12)    # the arrivals come in real time: a short sweep
    at = page("labs/token_budget/page.py").run()
    at.multiselect(key="tb_budgets").set_value([128, 1024]).run()
    commit(at)
    # the simulator's answer at once, labelled as such, before anything real is run
    assert simulated_answer(at) and not list(lab_env.glob("results/*.json"))
    names = [t["name"] for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert names and all("simulated" in n for n in names), names
    at.button(key="token_budget__run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not simulated_answer(at)
    names = [t["name"] for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert any("measured" in n for n in names) and any("simulated" in n for n in names), names
    from labs.token_budget.experiment import OUTCOMES
    assert kept(at, "token_budget")["measured"] in OUTCOMES
    assert len(list(lab_env.glob("results/mix-*.json"))) == 2, "one stored run per budget"
    assert "Interactive chat" in texts(at) and "Batch or throughput" in texts(at)
    # the counter-case: short prompts only is not judged against the claim; it is read in words
    at.radio(key="tb_workload").set_value("short only").run()
    commit(at)
    assert not at.exception, [e.message for e in at.exception]
    assert "Not judged here" in texts(at) and "Short prompts only:" in texts(at)


def test_peek_finds_what_cached_run_stored(lab_env):
    from engine.model.model import load_model
    model = load_model("tiny")
    spec = knee.SPEC.__class__.from_dict({**knee.SPEC.to_dict(), "num_requests": 3})
    policy = SchedulerPolicy(max_num_seqs=2)
    ref = "tiny"   # a model name finds stored results without loading the model
    assert runs.single_run(ref, policy, spec, peek=True) is None
    res, hit = runs.single_run(model, policy, spec)
    assert not hit
    peeked, hit = runs.single_run(ref, policy, spec, peek=True)
    assert hit and peeked.summary["output_tokens"] == res.summary["output_tokens"] and peeked.requests == res.requests
    with pytest.raises(RuntimeError):
        runs.single_run(ref, policy.changed(max_num_seqs=3), spec)


@pytest.mark.parametrize("path", ["labs/tail/page.py", "labs/static_vs_continuous/page.py", "labs/scheduler_orders/page.py",
                                  "labs/queueing/page.py", "labs/why_batch/page.py", "labs/costs/page.py",
                                  "labs/dynamic_batching/page.py", "labs/benchmarking/page.py", "labs/kv_capacity/page.py",
                                  "labs/token_budget/page.py"])
def test_a_lab_answers_from_the_simulator_before_anything_is_run(lab_env, path):
    at = commit(page(path).run())
    assert not at.exception, [e.message for e in at.exception]
    assert simulated_answer(at) and "Simulated" in texts(at)
    assert at.get("plotly_chart"), "the simulated answer is drawn at once"
    assert any(b.key.endswith("__run") for b in at.button), "and the real run is one press away"
    assert not list(lab_env.glob("results/*.json")), "nothing real was run or stored"


def test_speculation_runs_off_and_on_and_shows_its_drafts(lab_env):
    at = page("labs/speculation/page.py").run()
    at.selectbox(key="sp_big").set_value(16).run()
    at.slider(key="sp_pairs").set_value(1).run()
    commit(at)
    assert not at.exception, [e.message for e in at.exception]
    # the simulator's answer at once, the GPU roofline's bars beside it, nothing real run yet
    assert simulated_answer(at) and not list(lab_env.glob("results/spec-*.json"))
    bars = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
    assert [b["name"] for b in bars][1].startswith("H100 SXM roofline"), [b["name"] for b in bars]
    at.button(key="speculation__run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert len(list(lab_env.glob("results/spec-*.json"))) == 6, "three cases, each off and on"
    assert not simulated_answer(at) and SOURCE_LABEL["measured"] in [m.label for m in at.metric]
    assert "**Greedy outputs identical**: in 3 pairs of runs" in texts(at)
    names = [b["name"] for b in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert names[0] == "this machine's engine" and names[1].startswith("H100 SXM roofline"), names
    # the drafts chart of the run picked: each step's accepted and rejected bars add up to its drafts
    drafts = json.loads(at.get("plotly_chart")[-1].proto.spec)["data"]
    assert [d["name"] for d in drafts] == ["accepted", "rejected"]
    assert kept(at, "spec_one")["measured"] > 0
