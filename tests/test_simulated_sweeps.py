"""The lesson labs' simulated sweeps: the knee over every max_num_seqs 1..64 and goodput over 24
arrival rates, on the simulator (engine.simulate) with a known step model, answered at once; and
the lab pages showing the simulated chart right after the prediction, before any real run."""
import json
import time
from pathlib import Path

import pandas as pd
import pytest

from course.machines import SOURCE_LABEL
from streamlit.testing.v1 import AppTest

from engine.core.step_model import StepModel
from labs.knee import experiment as knee
from labs.runs import simulated_name
from labs.slo_goodput import experiment as slo

ROOT = Path(__file__).resolve().parents[1]
# A step model with a large fixed cost per step and a small cost per row: batching pays, then saturates.
FIXED = StepModel(20.0, (), (0.2,), 0.1, 0.5, 0.1, "fixed-cost test machine")
CPU = StepModel(9.0, (2, 8, 32, 128), (2.0, 0.5, 1.0, 0.8, 0.75), 0.4, 1.5, 0.7, "a CPU-like machine")


def test_the_simulated_knee_sweep_spans_1_to_128_and_is_fast():
    start, cpu_start = time.perf_counter(), time.thread_time()
    table = knee.simulated_sweep(CPU)
    wall, took = time.perf_counter() - start, time.thread_time() - cpu_start
    # This thread's CPU seconds: the sweep's own cost, not how busy the machine's other processes are.
    # The bound is loose (about 1 s here; a slow or shared machine takes longer): what it catches is
    # a sweep that runs anything real, which takes minutes
    print(f"simulated knee sweep: {len(table)} points in {wall:.2f} s ({took:.2f} s of CPU)")
    assert table["max_num_seqs"].tolist() == list(knee.SIM_VALUES) and table["max_num_seqs"].max() == 128
    real_columns = knee.knee_table([((1, 0), knee.simulated_run(CPU, knee.SchedulerPolicy(), knee.SPEC), False)])
    assert list(table.columns) == list(real_columns.columns), "the real sweep's columns"
    assert table["output_tok_s"].gt(0).all()
    assert took < 15.0, f"the sweep took {took:.2f} s of CPU ({wall:.2f} s); it should answer at once"


def test_the_simulated_sweep_is_deterministic_for_a_seed():
    first, again = knee.simulated_sweep(CPU, values=range(1, 17)), knee.simulated_sweep(CPU, values=range(1, 17))
    pd.testing.assert_frame_equal(first, again)
    other = knee.simulated_sweep(CPU, values=range(1, 17), seed=1)
    assert not other["ttft_p95_s"].equals(first["ttft_p95_s"]), "another seed draws another workload"


def test_throughput_rises_then_flattens_with_max_num_seqs():
    sweep = knee.simulated_sweep(FIXED)
    t = sweep.set_index("max_num_seqs")["output_tok_s"]
    assert t[1] < t[2] < t[4] < t[8] < t[16], "more slots share the fixed cost of a step"
    assert t[8] > 3 * t[1]
    assert (sweep["fill"] == 1).all(), "every setting is given enough work to fill its batch"
    assert t[128] / t[64] < t[2] / t[1], "the gain per doubling shrinks: the curve bends"
    assert sweep["requests"].nunique() == 1, "every setting gets the same requests"
    k = knee.find_knee(sweep)
    assert k is not None and 2 < k < 128


def test_the_simulated_goodput_sweep_spans_the_labs_rates():
    table = slo.simulated_goodput(CPU, 2.0, 0.1)
    assert len(table) >= 20 and len(slo.SIM_LOADS) >= 20
    rates = slo.rates_for(CPU, slo.SIM_LOADS)
    assert table["rate"].min() == min(rates) and table["rate"].max() == max(rates)
    assert min(slo.SIM_LOADS) <= min(slo.LOADS) and max(slo.SIM_LOADS) >= max(slo.LOADS), "the sweep spans the real runs"
    assert table["output_tok_s"].iloc[-1] > table["output_tok_s"].iloc[0], "more arrivals, more tokens"
    assert (table["useful_tok_s"] <= table["output_tok_s"] + 1e-9).all()
    pd.testing.assert_frame_equal(table, slo.simulated_goodput(CPU, 2.0, 0.1))


def test_the_figures_draw_the_simulated_line_under_the_measured_points():
    sim = knee.simulated_sweep(CPU)
    name = simulated_name(CPU)
    assert name == "simulated (step model: a CPU-like machine)"
    fig = knee.throughput_vs_latency(sim[sim.max_num_seqs.isin([1, 4])], "tpot_p95_ms", 4, 60.0, sim, name)
    traces = {t.name: t for t in fig.data}
    assert traces[name].mode == "lines" and len(traces[name].x) == len(knee.SIM_VALUES)   # one point per simulated value
    assert traces["measured on this machine's engine"].mode.startswith("markers")
    assert [t.name for t in fig.data].index(name) < [t.name for t in fig.data].index("measured on this machine's engine")
    only_sim = knee.throughput_vs_latency(pd.DataFrame(), "ttft_p95_s", 8, None, sim, name)
    assert [t.name for t in only_sim.data] == [name, "knee: max_num_seqs 8"]
    g = slo.simulated_goodput(CPU, 2.0, 0.1)
    fig = slo.goodput_vs_rate(g.iloc[[0, -1]], 8.0, g, name)
    groups = [t.legendgrouptitle.text for t in fig.data]
    assert groups == [name, name, "measured on this machine's engine", "measured on this machine's engine"]
    assert [t.mode for t in fig.data] == ["lines", "lines", "markers", "markers"]
    hand_set = simulated_name(StepModel(1.0, (), (1.0,), 0, 0, 0, "uncalibrated: a guess (run `calibrate`)"))
    assert hand_set == "simulated (step model: uncalibrated: a guess)", "the label without its advice"
    refit = StepModel(1.0, (), (1.0,), 0, 0, 0, "quick estimate, smollm2 in bfloat16 on AMD EPYC, 2 cores, refit on "
                      "47,680 of this app's real steps (each profiled time × 1.04 + 0.0 ms), current error 9% (median over "
                      "the steps before the app last stopped)", error=0.091)
    assert simulated_name(refit) == "simulated (step model: quick estimate, current error 9%)", \
        "what it is and its error: the whole label ran past the chart's edge"


# ----------------------------------------------------------------------------- the lab pages


@pytest.fixture
def lab_env(lab_env, monkeypatch):
    """The shared lab set-up (tests/conftest.py), and any attempt to run the real engine fails."""
    def no_real_engine(*args, **kw):
        raise AssertionError("the real engine ran")
    monkeypatch.setattr("engine.runs.results.run_workload", no_real_engine)
    monkeypatch.setattr("ui.session.model", no_real_engine)
    return lab_env


def chart_traces(at: AppTest) -> list[list[str]]:
    """Each chart's trace names, and their legend group titles."""
    return [[t.get("name", "") + " " + t.get("legendgrouptitle", {}).get("text", "")
             for t in json.loads(c.proto.spec)["data"]] for c in at.get("plotly_chart")]


@pytest.mark.parametrize("path, lab_id, charts", [("labs/knee/page.py", "knee", 2),
                                                  ("labs/slo_goodput/page.py", "slo_goodput", 1)])
def test_a_lab_page_shows_the_simulated_chart_right_after_the_prediction(lab_env, path, lab_id, charts):
    at = AppTest.from_file(str(ROOT / path), default_timeout=120).run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.get("plotly_chart"), "nothing before the prediction"
    start = time.perf_counter()
    for _ in range(3):       # every question the page asks, one after another
        button = next((b for b in at.button if b.key.endswith("__commit")), None)
        if button is None:
            break
        button.click().run()
    print(f"{lab_id}: the page with its simulated chart in {time.perf_counter() - start:.2f} s")
    assert not at.exception, [e.message for e in at.exception]
    traces = chart_traces(at)
    assert len(traces) == charts
    assert all(any("simulated (step model: " in n for n in names)
               for names in traces), traces
    captions = " ".join(c.value for c in at.caption)
    assert "Simulated" in captions and "Run it on the real engine" in captions
    assert "uncalibrated" in captions, "the step model is named (no profile in an empty cache: the guess)"
    labels = [m.label for m in at.metric]
    assert SOURCE_LABEL["guessed"] in labels, "the guess beside the simulator's answer, on a guessed step model"
    assert SOURCE_LABEL["simulated"] not in labels, "an uncalibrated machine's model is never called this machine's"
    assert "The simulation" in " ".join(m.value for m in at.markdown), "and the claim judged on the simulation"
    assert any(b.key.endswith("__run") for b in at.button), "the real run stays one button away"
    assert not list(lab_env.glob("results/run-*.json")) and not list(lab_env.glob("*/run-*.json"))


def test_the_waiting_chart_names_its_step_model_once_in_its_subtitle():
    """Each legend entry of the dynamic batching chart repeated the step model's whole label and ran off
    the chart; the legend now says "simulated", and the subtitle which model."""
    from labs.dynamic_batching import experiment as dynamic
    model = StepModel(9.0, (2, 8, 32, 128), (2.0, 0.5, 1.0, 0.8, 0.75), 0.4, 1.5, 0.7,
                      "quick estimate, smollm2 in bfloat16 on a CPU, 2 cores, refit on 100 of this app's real steps "
                      "(each profiled time × 1.04 + 0.0 ms), current error 9% (median over 100)", error=0.09)
    sim = dynamic.wait_table(dynamic.simulated_wait_runs(model, dynamic.rate_for(model, dynamic.LOAD)))
    fig = dynamic.ttft_and_throughput(None, sim, simulated_name(model))
    assert all(len(t.name) <= 45 and t.name.endswith("simulated") for t in fig.data), [t.name for t in fig.data]
    subtitle = fig.layout.title.subtitle.text.replace("<br>", " ")
    assert "Dotted: simulated (step model: quick estimate, current error 9%)." in subtitle
    assert "Each point" not in subtitle, "no points before a real run: the subtitle does not promise them"


def test_the_labs_arrival_rates_are_the_numbers_their_pages_show():
    """'arriving at 16.493 per second', '6.636, 13.271, 19.907': the rates a lab runs at are cut to three
    significant digits where they are made, so the page shows the rate the runs use, briefly."""
    from labs.dynamic_batching import experiment as dynamic
    from labs.scheduler_orders import experiment as orders
    from labs.tail import experiment as tail
    rates = [*slo.rates_for(CPU), dynamic.rate_for(CPU, dynamic.LOAD), orders.rate_for(CPU), tail.rate_for(CPU)]
    assert all(r > 0 and float(f"{r:.3g}") == r for r in rates), rates


def test_the_knee_chart_says_what_it_draws_in_each_mode():
    """Before a real sweep the knee chart promised 'one point per max_num_seqs ... bars' over a dotted
    line with neither, and its star (the knee among the values chosen) sat past the line's own knee
    unexplained: the subtitle says what is drawn."""
    sim = knee.simulated_sweep(CPU)
    only_sim = knee.throughput_vs_latency(pd.DataFrame(), "ttft_p95_s", 32, None, sim, "simulated")
    words = only_sim.layout.title.subtitle.text.replace("<br>", " ")
    assert "dotted line is the simulated sweep" in words and "among the values chosen" in words
    assert "bars" not in words
    both = knee.throughput_vs_latency(sim[sim.max_num_seqs.isin([1, 4])], "ttft_p95_s", 4, None, sim, "simulated")
    assert "bars: lowest to highest run" in both.layout.title.subtitle.text.replace("<br>", " ")


def test_the_prompt_length_table_counts_the_long_prompts_the_starvation_sentence_names():
    """The scheduler-orders lab said '48 long prompts (over 256 tokens)' beside a table bucketed at 128
    and 512: the table splits where the sentence does, so its long row holds the same requests."""
    from labs.scheduler_orders import experiment as orders
    runs = orders.simulated_order_runs(CPU, orders.rate_for(CPU, 0.9), ["fcfs", "sjf"], requests=120)
    table = orders.bucket_table(runs)
    assert list(table["prompt length"].unique()) == [name for _, _, name in orders.LENGTHS]
    for order in ("fcfs", "sjf"):
        long_row = table[(table.order == order) & (table["prompt length"] == orders.LENGTHS[-1][2])].iloc[0]
        assert long_row.n == orders.long_waits(runs[order][0])[1] > 0


def test_the_slo_counts_add_up_to_the_finished_requests_under_any_targets():
    """Missed TTFT and missed TPOT both count a request that missed both: with the 'of them both'
    column, met + missed TTFT + missed TPOT - both is every finished request, whatever the targets."""
    import random
    runs = slo.simulated_rate_runs(CPU, slo.rates_for(CPU, slo.LOADS))
    rng, both = random.Random(5), 0
    for _ in range(12):
        ttft, tpot = rng.choice([None, rng.uniform(0.1, 3.0)]), rng.choice([None, rng.uniform(0.01, 0.09)])
        for (rate, res, _), row in zip(runs, slo.goodput_table(runs, ttft, tpot).itertuples()):
            both += row.missed_both
            finished = round(row.request_s * res.summary["duration_s"])
            met = round(row.met_share * finished)
            assert met + row.missed_ttft + row.missed_tpot - row.missed_both == finished, (ttft, tpot, rate)
            assert row.missed_both <= min(row.missed_ttft, row.missed_tpot)
    assert both > 0, "the targets drawn make some requests miss both"
