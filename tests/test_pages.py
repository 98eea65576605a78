"""Every page renders under AppTest; the Playground drives the real (tiny) engine; presets,
input checks and the query-parameter round trip are sound.

BATCHING_LAB_MODEL=tiny keeps these fast: the same engine and runner code as SmolLM2,
with a two-layer random-weight model. The browser test (test_browser.py) uses SmolLM2.
The Playground's tests run it under tests/apps/playground_app.py (the page wired as app.py
wires it, without the other pages); home and About run under app.py.
"""
import json
import re
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.core.metrics import REQUEST_COLUMNS, STEP_COLUMNS
from engine.core.step_model import StepModel
from playground.checks import check
from engine.runs.live import engine_threads
import playground.run as playground_run
from playground.run import REST_S, PlaygroundRun
from playground.setup import KNOBS, Setup
from playground.presets import PRESETS, matching_preset
from analysis.tables import requests_csv, steps_csv

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PLAYGROUND_APP = str(ROOT / "tests" / "apps" / "playground_app.py")
PLAYGROUND = "playground/page.py"
# Step times of a CPU-like machine (as tests/test_presets.py), to size the presets with.
MACHINE = StepModel(9.0, (2, 8, 32, 128), (2.0, 0.5, 1.0, 0.8, 0.75), 0.4, 1.5, 0.7, "a CPU-like machine")


@pytest.fixture(autouse=True)
def tiny_model(monkeypatch):
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")


@pytest.fixture
def app():
    """An AppTest of the whole app; any run it started is stopped afterwards."""
    tests = []

    def make(page=None, query=None):
        at = AppTest.from_file(PLAYGROUND_APP if page == PLAYGROUND else APP, default_timeout=120)
        for k, v in (query or {}).items():
            at.query_params[k] = v
        at.run()
        if page and page != PLAYGROUND:
            at.switch_page(page).run()
        tests.append(at)
        return at

    yield make
    for at in tests:
        lab = at.session_state["lab_run"] if "lab_run" in at.session_state else None
        if lab is not None:
            lab.stop()


def lab_of(at):
    return at.session_state["lab_run"] if "lab_run" in at.session_state else None


def wait_for_steps(lab, n, timeout=60):
    deadline = time.monotonic() + timeout
    while len(lab.live.engine.steps) < n and time.monotonic() < deadline:
        assert lab.state != "error", lab.live.message
        time.sleep(0.05)
    assert len(lab.live.engine.steps) >= n, f"only {len(lab.live.engine.steps)} steps ({lab.state})"


def status(at) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("**Engine:"))


def figures(at) -> list[dict]:
    """The figures of the page's live charts (ui/live_chart.py), in page order."""
    return [json.loads(json.loads(c.proto.json_args)["figure_json"]) for c in at.get("component_instance")]


def rest_and_run(at):
    """Let the sliders rest (the page applies a change once they have), then refresh."""
    time.sleep(REST_S + 0.05)
    at.run()


def no_exception(at):
    assert not at.exception, [e.value for e in at.exception]


# ----------------------------------------------------------------------------- pages


def test_home_renders(app):
    at = app()
    no_exception(at)
    text = " ".join(m.value for m in at.markdown)
    assert "Batching Lab" in " ".join(t.value for t in at.title)
    assert "Where to start" in " ".join(h.value for h in at.header)
    assert "Playground" in text
    # every lesson and every lab is a link on Home itself (a phone's navigation folds them away)
    from lessons.catalog import load_lessons
    from course.registry import LABS
    labels = [link.proto.label for link in at.get("page_link")]
    lessons = load_lessons()[0]
    assert all(any(label.startswith(f"{l.order}. {l.title}") for label in labels) for l in lessons)
    assert all(lab.title in labels for lab in LABS) and len(lessons) > 5


def test_about_renders_device_dtype_model_and_step_time(app):
    at = app("app_pages/about.py")
    no_exception(at)
    text = " ".join(m.value for m in at.markdown)
    assert "`tiny`" in text and "`cpu`" in text or "`cuda" in text
    assert "Dtype" in text and "Engines running on this server" in text
    table = at.dataframe[0].value
    assert list(table["batch (sequences)"]) == [1, 8, 32]
    assert (table["decode step (ms)"] > 0).all()
    # the sentence under the table is the table's own: its step-time and tokens/s ratios
    ms = table.set_index("batch (sequences)")["decode step (ms)"]
    words = " ".join(c.value for c in at.caption)
    said = re.search(r"From batch 1 to 32 a step took ×([\d.]+) as long and made ×32 the tokens: ×([\d.]+)", words)
    assert said and said[1] == f"{ms[32] / ms[1]:.1f}" and said[2] == f"{32 * ms[1] / ms[32]:.1f}", words
    assert ("why batching pays" in words) == (float(said[2]) >= 1.5)


def test_playground_renders_idle(app):
    at = app(PLAYGROUND)
    no_exception(at)
    assert status(at).startswith("**Engine: idle**")
    assert at.button(key="start").disabled is False
    assert at.button(key="pause").disabled is True
    assert len(at.metric) == 9          # the headline strip
    assert len(figures(at)) == 7        # the batch chart and six time charts, drawn from the start
    assert lab_of(at) is None


def test_a_plain_visit_starts_on_a_preset_sized_to_this_machine(app):
    """Without a setup in its address the Playground opens on Interactive chat at its share of
    this machine's capacity, not at a fixed rate a slow machine cannot serve; a link keeps its own."""
    from playground.capacity import capacity
    at = app(PLAYGROUND)
    no_exception(at)
    step_model = at.session_state["pg_sizing"][1]
    want = PRESETS["interactive_chat"].setup_for(step_model)
    assert at.selectbox(key="pg_preset").value == "interactive_chat"
    assert at.slider(key="pg_rate").value == want.rate < capacity(step_model, want).rate
    assert at.toggle(key="pg_continuous").value is True
    assert float(at.query_params["rate"]) == want.rate
    linked = app(PLAYGROUND, {"rate": "3"})
    assert linked.selectbox(key="pg_preset").value == "custom" and linked.slider(key="pg_rate").value == 3


def test_start_steps_snapshot_pause_scrub_reset(app):
    at = app(PLAYGROUND, {"rate": "0", "num_requests": "12", "output_lo": "8", "output_hi": "24"})
    at.button(key="start").click().run()
    no_exception(at)
    lab = lab_of(at)
    assert lab is not None and lab.model_name == "tiny"
    wait_for_steps(lab, 5)
    at.button(key="pause").click().run()     # drawn enabled while running (the last refresh)
    no_exception(at)
    assert lab.state in ("paused", "finished")
    assert "steps: " in status(at)
    if lab.state == "paused":                      # the way on is Resume: it is the one primary button
        assert (at.button(key="resume").proto.type, at.button(key="start").proto.type) == ("primary", "secondary")
    snap, tables = lab.read()
    assert len(snap.steps) >= 5 and len(tables.steps) == len(snap.steps)
    assert list(tables.steps.columns) == STEP_COLUMNS
    assert list(tables.requests.columns)[:len(REQUEST_COLUMNS)] == REQUEST_COLUMNS
    assert snap.arrived == 12                       # rate 0: everything arrives at once

    scrub = at.slider(key="pg_scrub")
    n = len(lab.live.engine.steps)
    assert scrub.value == n - 1 and scrub.max == n - 1
    scrub.set_value(1).run()
    no_exception(at)
    assert any(c.value.startswith("Step 1 at") for c in at.caption)

    at.button(key="reset").click().run()
    no_exception(at)
    assert lab_of(at) is None
    assert lab.state in ("stopped", "finished")
    assert not lab.live.thread_alive


def test_step_once_runs_exactly_one_step(app):
    at = app(PLAYGROUND, {"rate": "0", "num_requests": "4"})
    at.button(key="step").click().run()
    no_exception(at)
    lab = lab_of(at)
    assert lab.state == "paused"
    assert len(lab.live.engine.steps) == 1
    at.button(key="step").click().run()
    assert len(lab.live.engine.steps) == 2
    assert "steps: 2" in status(at)


def started_with_16_slots(app):
    """A running page: 400 long requests at once, 16 slots: a run that outlasts the test on a fast
    machine (with 40, the tiny model finished all of them, 601 steps, before a change could apply)."""
    at = app(PLAYGROUND, {"rate": "0", "num_requests": "400", "output_lo": "200", "output_hi": "200",
                          "max_num_seqs": "16"})
    at.button(key="start").click().run()
    return at, lab_of(at)


def test_policy_change_applies_live_and_is_marked(app):
    at, lab = started_with_16_slots(app)
    wait_for_steps(lab, 3)
    at.slider(key="pg_max_num_seqs").set_value(2).run()
    no_exception(at)
    assert lab.pending and lab.live.engine.policy.max_num_seqs == 16   # waits for the slider to rest
    rest_and_run(at)
    no_exception(at)
    assert lab.live.engine.policy.max_num_seqs == 2 and not lab.pending
    assert any(t.value.replace("\\", "") == "Applied at the next step: max_num_seqs 16→2" for t in at.toast)
    before = len(lab.live.engine.steps)
    wait_for_steps(lab, before + 3)
    snap, tables = lab.read()
    assert list(tables.marks["label"]) == ["max_num_seqs 16→2"]
    later = [s for s in snap.steps if s.step > before]
    assert later and all(s.running <= 2 for s in later)
    # the next page refresh draws the mark on the time charts (the tiny model's steps soon push
    # it out of the batch chart's window), and the status says 2 of 2
    lab.pause()
    at.run()
    queue_chart = figures(at)[4]          # batch, timeline, TTFT, TPOT, queue, throughput, KV
    assert queue_chart["layout"]["title"]["text"].startswith("Queue")
    assert "max_num_seqs 16→2" in [a.get("text") for a in queue_chart["layout"]["annotations"]]
    assert "of 2 slots" in status(at) and "of 16 slots" not in status(at)
    lab.resume()
    # a workload change is marked too
    at.slider(key="pg_rate").set_value(2.0).run()
    rest_and_run(at)
    snap, tables = lab.read()
    assert any(label.startswith("workload: rate 0.0→2.0") for label in tables.marks["label"]), \
        list(tables.marks["label"])


def test_two_knobs_moved_together_make_one_mark(app, monkeypatch):
    at, lab = started_with_16_slots(app)
    wait_for_steps(lab, 2)
    # the knobs move faster than they rest however slowly this machine runs the page (under load
    # one run of it outlasted REST_S, and a value was applied mid-drag): a long rest while they move
    monkeypatch.setattr(playground_run, "REST_S", 60.0)
    for value in (12, 8, 4):                   # a slider dragged on: nothing applied meanwhile
        at.slider(key="pg_max_num_seqs").set_value(value).run()
    at.selectbox(key="pg_order").set_value("sjf").run()
    assert lab.live.engine.policy.max_num_seqs == 16
    monkeypatch.setattr(playground_run, "REST_S", REST_S)
    rest_and_run(at)
    no_exception(at)
    marks = lab.read()[1].marks
    assert len(marks) == 1, list(marks["label"])
    assert marks["label"].iloc[0] == "max_num_seqs 16→4 +1 more"
    assert marks["detail"].iloc[0] == "max_num_seqs 16→4, order fcfs→sjf"


def test_is_alive_false_stops_the_engine_thread():
    from engine.model.model import load_model
    alive = {"yes": True}
    lab = PlaygroundRun(Setup(rate=0, num_requests=30, output_lo=300, output_hi=300),
                 load_model("tiny"), is_alive=lambda: alive["yes"])
    lab.start()
    wait_for_steps(lab, 2)
    alive["yes"] = False
    deadline = time.monotonic() + 10
    while lab.live.thread_alive and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lab.live.thread_alive and lab.state == "stopped"


def test_lab_run_refuses_to_run_without_a_model():
    with pytest.raises(ValueError, match="real model"):
        PlaygroundRun(Setup(), None)


# ----------------------------------------------------------------------------- simulated engines


def test_a_simulated_run_draws_the_same_requests_as_the_real_one():
    from engine.model.model import load_model
    tiny, setup = load_model("tiny"), Setup(continuous=False, rate=4.0, num_requests=20, seed=7)
    real = PlaygroundRun(setup, tiny)
    simulated = PlaygroundRun(setup, tiny, engine_choice="sim_h100")
    assert simulated.simulated and not real.simulated and simulated.live.engine.clock.virtual

    def drawn(lab):
        return [(r.id, r.arrival_s, r.prompt_token_ids, r.max_new_tokens, r.tenant)
                for r in lab.live.feed.due(float("inf"))]

    requests = drawn(real)
    assert len(requests) == 20 and drawn(simulated) == requests
    for lab in (real, simulated):
        lab.close()


def test_playground_runs_a_simulated_h100(app):
    at = app(PLAYGROUND)
    at.selectbox(key="pg_engine").set_value("sim_h100").run()
    at.slider(key="pg_speed").set_value(30).run()
    at.button(key="start").click().run()
    no_exception(at)
    lab = lab_of(at)
    assert lab.engine_choice == "sim_h100" and lab.live.speed == 30
    wait_for_steps(lab, 5)
    for _ in range(3):
        at.run()
        no_exception(at)
    assert "steps: " in status(at)
    assert any(c.value.startswith("Simulated: step times predicted by roofline model: Llama-3.1-8B "
                                  "on H100") for c in at.caption)
    assert at.query_params["engine"] in ("sim_h100", ["sim_h100"])


def test_a_preset_is_sized_again_for_the_engine_chosen(app, monkeypatch):
    """A preset left as it was follows the engine: on the simulated H100 its rate and targets are
    the H100's (past this machine's slider end), and back on the real engine this machine's. The
    machine's step model is made 10 ms a step slower than measured: the tiny model, refit on a fast
    CPU, can serve as many requests a second as the simulated H100, and the two must differ here."""
    import dataclasses
    from engine.sim.roofline import roofline_profile
    from playground import engines
    from engine.sim.machine_speed import CALIBRATED, MachineSpeed, machine_speed
    from playground.capacity import rate_slider_hi
    from playground.engines import H100_PROFILE
    from ui import session
    measured = machine_speed(session._load("tiny"), measure_if_missing=True).step_model
    h100, here = roofline_profile(H100_PROFILE), dataclasses.replace(measured, fixed_ms=measured.fixed_ms + 10)
    monkeypatch.setattr(engines, "machine_speed", lambda model, **kw: MachineSpeed(here, CALIBRATED))
    at = app(PLAYGROUND)
    at.selectbox(key="pg_preset").set_value("rush_hour").run()
    at.selectbox(key="pg_engine").set_value("sim_h100").run()
    no_exception(at)
    want = PRESETS["rush_hour"].setup_for(h100)
    assert want.rate > KNOBS["rate"].hi
    assert at.slider(key="pg_rate").max == rate_slider_hi(h100) and at.slider(key="pg_rate").value == want.rate
    assert at.slider(key="pg_ttft_slo_s").value == want.ttft_slo_s
    assert not any("modified since" in c.value for c in at.caption)
    at.selectbox(key="pg_engine").set_value("real").run()
    no_exception(at)
    # the tiny model is fast too: this machine's slider ends where its capacity says
    assert at.slider(key="pg_rate").max == rate_slider_hi(here) != rate_slider_hi(h100)
    assert at.slider(key="pg_rate").value == PRESETS["rush_hour"].setup_for(here).rate


def test_a_preset_stays_intact_when_this_machines_step_model_is_refit(app, monkeypatch):
    """This machine's step model is refit from every real step, so after a run the same preset sized
    anew has another rate. A preset the learner did not touch is still that preset (not "modified
    since"), and its sliders stay where it put them; one moved slider makes it modified."""
    import dataclasses
    from playground import engines
    from engine.sim.machine_speed import CALIBRATED, MachineSpeed, machine_speed
    from ui import session
    measured = machine_speed(session._load("tiny"), measure_if_missing=True).step_model
    now = {"model": dataclasses.replace(measured, fixed_ms=measured.fixed_ms + 10)}
    monkeypatch.setattr(engines, "machine_speed", lambda model, **kw: MachineSpeed(now["model"], CALIBRATED))
    at = app(PLAYGROUND)
    at.selectbox(key="pg_preset").set_value("rush_hour").run()
    no_exception(at)
    rate = at.slider(key="pg_rate").value
    assert rate == PRESETS["rush_hour"].setup_for(now["model"]).rate
    now["model"] = dataclasses.replace(measured, fixed_ms=measured.fixed_ms + 20)    # a run refit it
    assert PRESETS["rush_hour"].setup_for(now["model"]).rate != rate
    at.run()
    no_exception(at)
    assert at.selectbox(key="pg_preset").value == "rush_hour"
    assert at.slider(key="pg_rate").value == rate
    assert not any("modified since" in c.value for c in at.caption)
    at.slider(key="pg_max_num_seqs").set_value(at.slider(key="pg_max_num_seqs").value + 1).run()
    assert any("modified since" in c.value for c in at.caption)


def test_a_link_to_the_simulated_h100_keeps_its_rate(app):
    at = app(PLAYGROUND, {"engine": "sim_h100", "rate": "64"})
    no_exception(at)
    assert at.slider(key="pg_rate").value == 64 and not at.warning


# ----------------------------------------------------------------------------- bad input


EXTREMES = [
    {"rate": "0"},
    {"rate": str(KNOBS["rate"].hi)},
    {"max_num_seqs": "1"},
    {"kv_capacity_tokens": "16"},                                     # smaller than one prompt
    {"max_num_batched_tokens": "16", "enable_chunked_prefill": "0"},  # budget below a prompt
    {"max_waiting": "1", "rate": "20"},
    {"mode": "static", "max_num_seqs": "64", "max_wait_ms": "0"},
    {"prompt_kind": "short_plus_long", "prompt_lo": "8", "prompt_hi": "1536", "output_hi": "512"},
]


@pytest.mark.parametrize("query", EXTREMES, ids=lambda q: ",".join(f"{k}={v}" for k, v in q.items()))
def test_extremes_render_a_message_never_a_trace(app, query):
    at = app(PLAYGROUND, query)
    no_exception(at)
    assert at.warning or at.info
    at.button(key="step").click().run()
    no_exception(at)


def test_requests_that_never_fit_are_listed_rejected_with_a_reason(app):
    at = app(PLAYGROUND, {"rate": "0", "num_requests": "5", "kv_capacity_tokens": "16"})
    assert any("Every request will be rejected" in w.value for w in at.warning)
    at.button(key="start").click().run()
    lab = lab_of(at)
    deadline = time.monotonic() + 30
    while lab.state == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    at.run()
    no_exception(at)
    assert any(h.value.startswith("Rejected requests (5)") for h in at.subheader)
    table = at.dataframe[-1].value
    assert set(table["status"]) == {"rejected"}
    assert table["reason"].str.contains("KV capacity").all()


def test_latest_texts_shows_decoding_requests_first_then_the_latest_finished():
    import pandas as pd
    from analysis.tables import Tables
    from engine.core.metrics import LIVE_REQUEST_COLUMNS
    from playground import view
    nan = float("nan")
    rows = [  # id, status, output tokens, output text, text so far, first token at, finished at
        ("a", "finished", 5, "done early", None, 1.0, 2.0),
        ("b", "finished", 6, "done late", None, 1.5, 4.0),
        ("c", "running", 3, None, "going", 3.0, nan),
        ("d", "running", 1, None, "newest", 3.5, nan),
        ("e", "running", 0, None, "", nan, nan),           # no text yet: not shown
        ("f", "waiting", 0, None, None, nan, nan),
        ("g", "finished", 0, "", None, nan, 3.0),          # finished with no text: not shown
    ]
    requests = pd.DataFrame([{c: None for c in LIVE_REQUEST_COLUMNS} | dict(zip(
        ["id", "status", "output_tokens", "output_text", "partial_text", "first_token_s", "finish_s"], r))
        for r in rows])
    tables = Tables(view.empty_tables().steps, requests, view.empty_tables().marks)
    texts = view.latest_texts(tables, n=3)
    assert list(texts["request"]) == ["d", "c", "b"]
    assert list(texts["text"]) == ["newest", "going", "done late"]
    assert list(texts["tokens"]) == [1, 3, 6]
    assert list(view.latest_texts(tables, n=9)["request"]) == ["d", "c", "b", "a"]
    assert list(view.latest_texts(view.empty_tables()).columns) == ["request", "status", "tokens", "text"]


STEP_DETAIL_APP = """
import pandas as pd
import streamlit as st
from analysis.tables import Tables
from engine.core.metrics import STEP_COLUMNS
from playground import view
rows = [dict.fromkeys(STEP_COLUMNS, 0) | {"step": n, "t_start_s": n / 10, "t_end_s": n / 10 + 0.05,
        "members": (("r1", "decode", 1), ("r%d" % n, "prefill", 30)), "max_num_seqs": 4, "error": ""}
        for n in (5, 6, 7)]
tables = Tables(pd.DataFrame(rows, columns=STEP_COLUMNS), view.empty_tables().requests, view.empty_tables().marks)
view.step_detail(tables, st.session_state.get("step"))
"""


@pytest.mark.parametrize("step, says", [(6, "Step 6 at 0.60–0.65 s (50 ms): a batch of 2 of 4 slots"),
                                        (7, r"r1 \(decode 1\)\, r7 \(prefill 30\)"),   # escaped: ids are user text
                                        (9, "Each engine step appears here"), (4, "Each engine step appears here"),
                                        (None, "Each engine step appears here")])
def test_step_detail_describes_the_chosen_step(step, says):
    at = AppTest.from_string(STEP_DETAIL_APP)
    at.session_state["step"] = step
    at.run()
    assert not at.exception
    assert says in at.caption[0].value


def test_input_checks():
    assert check(Setup()) == []
    texts = [n.text for n in check(Setup(kv_capacity_tokens=16))]
    assert any(t.startswith("Every request will be rejected") for t in texts)
    texts = [n.text for n in check(Setup(prompt_lo=32, prompt_hi=1024, kv_capacity_tokens=512))]
    assert any(t.startswith("Some requests will be rejected") for t in texts)
    texts = [n.text for n in check(Setup(max_num_batched_tokens=16, enable_chunked_prefill=False))]
    assert any("token budget" in t for t in texts)
    assert check(Setup(max_num_batched_tokens=16, enable_chunked_prefill=True)) == []
    assert any("arrive at once" in n.text for n in check(Setup(rate=0)))
    assert any("no batching" in n.text for n in check(Setup(max_num_seqs=1)))
    assert any("context" in n.text for n in check(Setup(prompt_hi=1536, output_hi=512), 1024))


# ----------------------------------------------------------------------------- presets


@pytest.mark.parametrize("pid", list(PRESETS))
def test_presets_are_valid_and_reject_nothing(pid):
    preset = PRESETS[pid]
    setup = preset.setup_for(MACHINE)
    assert preset.title and preset.why and len(preset.why) < 240
    setup.policy().validate()
    setup.workload().validate()
    assert [n for n in check(setup, 2048) if n.level == "warning"] == []
    for name, value in setup.to_dict().items():   # every value sits on its slider
        assert KNOBS[name].clamp(value) == value, name
    assert matching_preset(setup.changed(seed=7), MACHINE) == pid


def test_choosing_a_preset_sets_workload_policy_and_link(app):
    from engine.sim.machine_speed import machine_speed
    from ui import session
    at = app(PLAYGROUND)
    at.selectbox(key="pg_preset").set_value("multi_tenant_api").run()
    no_exception(at)
    want = PRESETS["multi_tenant_api"].setup_for(machine_speed(session._load("tiny"), measure_if_missing=True).step_model)
    assert at.selectbox(key="pg_order").value == "fair"
    assert at.slider(key="pg_tenants").value == want.tenants
    assert at.slider(key="pg_prompt_len").value == (want.prompt_lo, want.prompt_hi)
    assert at.query_params["order"] in ("fair", ["fair"])
    assert at.slider(key="pg_rate").value == want.rate <= at.slider(key="pg_rate").max   # on its slider
    assert any(PRESETS["multi_tenant_api"].caption in c.value for c in at.caption)


# ----------------------------------------------------------------------------- links


def test_setup_query_round_trip():
    for setup in [Setup(), *(p.setup_for(MACHINE) for p in PRESETS.values()),
                  Setup(rate=0.5, burstiness=2.25, enable_chunked_prefill=False, ttft_slo_s=0.35,
                        tpot_slo_s=0.07, seed=12345, mode="static", order="edf")]:
        query = setup.to_query()
        assert all(isinstance(v, str) for v in query.values())
        back, problems = Setup.from_query(query)
        assert back == setup and problems == []


def test_bad_link_values_are_clamped_or_ignored_with_a_message():
    setup, problems = Setup.from_query({"max_num_seqs": "999", "order": "random", "rate": "abc",
                                        "prompt_lo": "200", "prompt_hi": "100", "junk": "1"})
    assert setup.max_num_seqs == KNOBS["max_num_seqs"].hi
    assert setup.order == Setup().order and setup.rate == Setup().rate
    assert setup.prompt_hi == setup.prompt_lo == 200
    assert len(problems) == 4


def test_link_fills_the_widgets_and_the_page_writes_its_link(app):
    want = Setup(rate=1.5, max_num_seqs=3, order="sjf", enable_chunked_prefill=False,
                 prompt_lo=40, prompt_hi=200, seed=99, ttft_slo_s=0.75)
    at = app(PLAYGROUND, want.to_query())
    no_exception(at)
    assert at.slider(key="pg_max_num_seqs").value == 3
    assert at.selectbox(key="pg_order").value == "sjf"
    assert at.toggle(key="pg_enable_chunked_prefill").value is False
    assert at.number_input(key="pg_seed").value == 99
    at.slider(key="pg_max_num_seqs").set_value(5).run()
    got, problems = Setup.from_query(dict(at.query_params))
    assert problems == [] and got == want.changed(max_num_seqs=5)


def test_bad_link_shows_a_warning_not_a_trace(app):
    at = app(PLAYGROUND, {"max_num_seqs": "-5", "mode": "nonsense"})
    no_exception(at)
    assert at.slider(key="pg_max_num_seqs").value == 1
    assert len(at.warning) >= 2


# ----------------------------------------------------------------------------- downloads


def test_downloads_use_the_cli_formats():
    from engine.model.model import load_model
    lab = PlaygroundRun(Setup(rate=0, num_requests=3, output_lo=4, output_hi=4), load_model("tiny"))
    lab.start()
    deadline = time.monotonic() + 30
    while lab.state == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    snap = lab.live.snapshot()
    req_lines = requests_csv(snap).splitlines()
    step_lines = steps_csv(snap).splitlines()
    assert req_lines[0] == ",".join(REQUEST_COLUMNS)
    assert step_lines[0] == ",".join(STEP_COLUMNS)
    assert len(step_lines) == len(snap.steps) + 1
    assert lab.requests_csv().count("\n") >= 4
    assert engine_threads() >= 0
    lab.stop()


def test_sidebar_values_come_back_after_streamlit_forgets_them(monkeypatch):
    """After a run that raises before the sidebar, Streamlit forgets the sidebar widgets' values
    (the browser then draws each slider at its minimum); the page puts the last drawn ones back."""
    from types import SimpleNamespace

    from playground import controls
    state = {}
    monkeypatch.setattr(controls, "st", SimpleNamespace(session_state=state))
    drawn = Setup(max_num_seqs=5, rate=2.5, output_lo=20, output_hi=40)
    state.update({"pg_initialised": True, controls.SAVED: (drawn, "sim_h100", 30)})
    assert controls.init_from_link(MACHINE) == []
    assert controls.current_setup() == drawn
    assert controls.current_engine() == ("sim_h100", 30)
    state["pg_rate"] = 3.0                          # nothing forgotten: the widgets' values stand
    controls.init_from_link(MACHINE)
    assert state["pg_rate"] == 3.0
