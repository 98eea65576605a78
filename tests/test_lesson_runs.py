"""The figures the lesson labs read off their runs, on small synthetic data with known answers."""
import math

import pandas as pd
import pytest

from engine.runs.results import RunResult
from labs import knee_rule, runs
from labs.costs import experiment as costs
from labs.dynamic_batching import experiment as dynamic
from labs.knee import experiment as knee
from labs.queueing import experiment as queueing
from labs.scheduler_orders import experiment as orders
from labs.slo_goodput import experiment as slo
from labs.static_vs_continuous import experiment as svc
from labs.tail import experiment as tail_lab
from labs.repeats import error_bars
from labs.why_batch import experiment as why_batch


def scaling_rows(step_ms: dict[int, float]) -> list[dict]:
    return [{"batch": b, "step_ms": t, "tokens_per_s": 1000 * b / t, "ms_per_token": t / b}
            for b, t in step_ms.items()]


def test_one_knee_rule_the_smallest_setting_with_90_percent_of_the_best():
    assert knee_rule.KNEE_SHARE == 0.9
    assert knee_rule.knee([1, 2, 4, 8], [10, 50, 91, 100]) == 4
    assert knee_rule.knee([8, 1, 4, 2], [100, 10, 91, 50]) == 4, "order of the settings does not matter"
    assert knee_rule.knee([1, 2, 4, 8], [10, 50, 89, 100]) == 8
    # a noisy dip (4 slots slower than 2) does not move it: only the best point and the 90% line count
    assert knee_rule.knee([1, 2, 4, 8, 16], [10, 95, 80, 100, 98]) == 2
    assert knee_rule.knee([1], [10]) is None and knee_rule.knee([1, 2], [float("nan"), 3]) is None


def test_why_batch_knee_uses_the_rule_on_the_mean_of_the_passes():
    # t(B) = 10 + 1 * B ms: tokens/s 1000 B / (10 + B); best 864.9 at 64, 90% = 778; 32 gives 761.9
    rows = scaling_rows({b: 10 + b for b in (1, 2, 4, 8, 16, 32, 64)})
    table = why_batch.scaling_table(rows)
    assert table["gain_per_doubling"].iloc[0] == pytest.approx((2000 / 12) / (1000 / 11))
    assert why_batch.knee(rows) == 64
    assert why_batch.knee(rows[:-1]) == 32     # without 64: best 761.9 at 32, 90% = 685.7; 16 gives 615
    fit = why_batch.linear_fit(rows)
    assert fit["t0_ms"] == pytest.approx(10) and fit["c_ms"] == pytest.approx(1)
    assert fit["ceiling_tok_s"] == pytest.approx(1000) and fit["half_batch"] == pytest.approx(10)
    # two passes: the table holds their mean and range
    passes = [{**r, "repeat": 0} for r in scaling_rows({1: 10.0, 2: 12.0})] + \
             [{**r, "repeat": 1} for r in scaling_rows({1: 14.0, 2: 12.0})]
    t = why_batch.scaling_table(passes)
    assert t["step_ms"].tolist() == pytest.approx([12.0, 12.0])
    assert t["step_ms_lo"].iloc[0] == 10.0 and t["step_ms_hi"].iloc[0] == 14.0 and t["runs"].tolist() == [2, 2]
    bars = error_bars(t, "step_ms")
    assert list(bars["array"]) == [2.0, 0.0] and list(bars["arrayminus"]) == [2.0, 0.0]
    assert error_bars(why_batch.scaling_table(rows), "step_ms") is None, "one pass: no bars"


def test_why_batch_knee_words_follow_where_the_knee_fell():
    """The knee's sentence is read off the numbers: batches past the knee add what they add; a knee at
    the largest batch tried says tokens/s was still climbing, with the fit's ceiling above it (the old
    words promised 'larger batches add at most the last 10%' while the fit put the ceiling 25% higher)."""
    rows = scaling_rows({b: 10 + b for b in (1, 2, 4, 8, 16, 32, 64)})      # best 864.9 at 64, the knee
    table, fit = why_batch.scaling_table(rows), why_batch.linear_fit(rows)
    at_edge = why_batch.knee_words(table, why_batch.knee(rows), fit, "measured")
    assert "largest batch tried, **64**" in at_edge and "still climbing" in at_edge
    assert "ceiling near 1,000 tokens/s, 16% above it" in at_edge and "at most" not in at_edge
    flat = scaling_rows({1: 10.0, 2: 11.0, 4: 12.0, 8: 20.0, 16: 38.0})   # 400 tok/s at 8, best 421 at 16
    t = why_batch.scaling_table(flat)
    inside = why_batch.knee_words(t, why_batch.knee(flat), why_batch.linear_fit(flat), "predicted")
    assert why_batch.knee(flat) == 8
    assert "batch **8** already makes 95% of the best tokens/s predicted here (421, at batch 16)" in inside
    assert "the larger batches tried add the last 5%" in inside
    shown = why_batch.gains_shown(table["gain_per_doubling"])
    assert shown.iloc[-1] == "—" and shown.iloc[0].startswith("×"), "no next size: no gain, and no 'None'"


def test_bend_handles_uneven_steps_per_doubling():
    # 1 -> 4 is two doublings: a 3x gain is sqrt(3) = 1.73 per doubling
    rows = [{"batch": 1, "step_ms": 10, "tokens_per_s": 100, "ms_per_token": 10},
            {"batch": 4, "step_ms": 13.3, "tokens_per_s": 300, "ms_per_token": 3.3},
            {"batch": 8, "step_ms": 24, "tokens_per_s": 330, "ms_per_token": 3}]
    table = why_batch.scaling_table(rows)
    assert table["gain_per_doubling"].iloc[0] == pytest.approx(math.sqrt(3))
    assert why_batch.knee(rows) == 4


def test_knee_of_the_sweep_reads_the_mean_throughput():
    table = pd.DataFrame({"max_num_seqs": [1, 2, 4, 8, 16, 32],
                          "tpot_p95_ms": [30, 31, 33, 40, 70, 130],
                          "output_tok_s": [30, 60, 110, 180, 200, 210]})
    assert knee.find_knee(table) == 16       # 90% of 210 = 189: 8 gives 180, 16 gives 200
    assert knee.find_knee(table.iloc[:1]) is None
    assert knee.settings([1, 4], 2) == [(1, 0), (1, 1), (4, 0), (4, 1)]


def test_winners_names_who_gains_and_loses_against_fcfs():
    table = pd.DataFrame({
        "order": ["fcfs"] * 3 + ["fair"] * 3 + ["sjf"] * 3,
        "tenant": ["a", "b", "c"] * 3,
        "ttft_p95_s": [1.0, 2.0, 3.0, 1.5, 1.0, 1.2, 1.0, 2.0, 3.0],
    })
    s = orders.winners(table)
    assert s["fcfs"].startswith("fcfs: a has the best") and "c the worst" in s["fcfs"]
    assert "c wins (p95 TTFT 3.00 → 1.20 s)" in s["fair"] and "a loses (p95 TTFT 1.00 → 1.50 s)" in s["fair"]
    assert "no tenant's p95 TTFT moved" in s["sjf"]


def test_token_times_rebuilds_gaps_from_the_step_records():
    steps = [
        {"step": 0, "t_start_s": 0.0, "t_end_s": 0.1, "members": [("d0", "prefill", 10)]},
        {"step": 1, "t_start_s": 0.1, "t_end_s": 0.15, "members": [("d0", "decode", 1), ("long0", "prefill", 100)]},
        {"step": 2, "t_start_s": 0.15, "t_end_s": 0.9, "members": [("d0", "decode", 1), ("long0", "prefill", 900)]},
        {"step": 3, "t_start_s": 0.9, "t_end_s": 0.95, "members": [("d0", "decode", 1), ("long0", "decode", 1)]},
    ]
    reqs = [{"id": "d0", "first_token_s": 0.1, "arrival_s": 0.0},
            {"id": "long0", "first_token_s": 0.9, "arrival_s": 0.1}]
    tt = costs.token_times(RunResult(reqs, steps, {}))
    d0 = tt[tt["id"] == "d0"]
    assert d0["t_s"].tolist() == pytest.approx([0.1, 0.15, 0.9, 0.95])
    assert d0["gap_ms"].tolist()[1:] == pytest.approx([50, 750, 50])
    assert tt[tt["id"] == "long0"]["t_s"].tolist() == pytest.approx([0.9, 0.95])


def test_slo_verdicts_and_goodput():
    reqs = pd.DataFrame({
        "id": ["a", "b", "c", "d"], "status": "finished", "output_tokens": [10, 20, 30, 1],
        "ttft_s": [0.5, 2.0, 0.5, 0.1], "tpot_s": [0.05, 0.05, 0.2, None],
    })
    v = slo.slo_verdicts(reqs, 1.0, 0.1)
    assert v["met_slo"].tolist() == [True, False, False, True]
    assert v["missed"].tolist() == ["", "TTFT", "TPOT", ""]
    res = RunResult(reqs.to_dict("records"), [], {"duration_s": 2.0})
    g = slo.goodput(res, 1.0, 0.1)
    assert g["output_tok_s"] == pytest.approx(61 / 2) and g["useful_tok_s"] == pytest.approx(11 / 2)
    assert g["goodput_req_s"] == pytest.approx(1.0) and g["met_share"] == pytest.approx(0.5)


def test_percentile_table_by_prompt_bucket_keeps_size_order():
    reqs = pd.DataFrame({"status": "finished", "prompt_tokens": [50, 60, 900, 300, 70],
                         "ttft_s": [0.1, 0.2, 3.0, 1.0, 0.3]})
    t = tail_lab.percentile_table(reqs, "ttft_s", tail_lab.prompt_bucket(reqs["prompt_tokens"]), scale=1000)
    assert t["group"].tolist() == ["all", "≤128 tokens", "129–512 tokens", ">512 tokens"]
    assert t["n"].tolist() == [5, 3, 1, 1]
    assert t.loc[1, "p50"] == pytest.approx(200)


def test_workloads_are_valid_and_parts_relabel_tenants():
    for _, spec in svc.WORKLOADS.values():
        spec.validate()
    parts = orders.order_parts(orders.LOAD)
    assert [p.tenant for p in parts] == ["tenant-a", "tenant-b", "tenant-c"]
    assert sum(p.spec.num_requests for p in parts) == orders.REQUESTS
    tail = tail_lab.tail_parts(0.1)
    assert {p.tenant for p in tail} == {"steady", "bursty"}
    assert sum(p.spec.num_requests for p in tail) == tail_lab.REQUESTS
    assert len({p.spec.id_prefix for p in tail}) == len(tail), "request ids must not collide"
    assert costs.stall_policy(False, 256, 1024).max_num_batched_tokens >= 1024 + costs.DECODE_STREAMS


def test_lab_figures_build_on_empty_and_real_shaped_input():
    rows = scaling_rows({b: 10 + b for b in (1, 2, 4)})
    table = why_batch.scaling_table(rows)
    fit = why_batch.linear_fit(rows)
    for fig in (why_batch.amortization(table, 2, fit), why_batch.step_time(table, fit),
                why_batch.amortization(pd.DataFrame()), costs.token_gaps({}), slo.goodput_vs_rate(pd.DataFrame()),
                queueing.time_in_system(pd.DataFrame(), 1.0), knee.throughput_vs_latency(pd.DataFrame(), "tpot_p95_ms"),
                orders.tenant_bars(pd.DataFrame())):
        assert fig.layout.title.text
        assert fig.layout.title.subtitle.text, "every chart says what good looks like"
    fig = why_batch.amortization(table, 2, fit)
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.range[1] < 1, "a log axis spans log10 of the batches"
    assert fig.layout.shapes[0].x0 == 2, "the knee line stands at batch 2 (a shape's x in data units)"
    assert fig.layout.annotations[0].x == pytest.approx(math.log10(2)), "its label too (in log10 units)"
    assert fig.layout.yaxis.range[1] >= 1.2 * max(fig.data[0].y) and fig.layout.yaxis2.range[1] >= \
        1.2 * max(fig.data[1].y), "the knee's label along the top covers no point"
    wide = why_batch.scaling_table(scaling_rows({b: 10 + b for b in (1, 2, 4, 8, 16, 32, 64)}))
    sides = {k: why_batch.amortization(wide, k).layout.annotations[0].xanchor for k in (2, 16, 64)}
    assert sides == {2: "left", 16: "right", 64: "right"}, "the knee's label runs into the side with more room"
    pts = pd.DataFrame({"rho": [0.5, 0.9], "W_s": [1.0, 2.0], "queue_mean_s": [0.1, 0.5]})
    fig = queueing.time_in_system(pts, 2.0)
    assert any("model" in t.name for t in fig.data) and any("measured" in t.name for t in fig.data)


def test_oldest_waiting_age_from_request_rows():
    reqs = [{"id": "a", "arrival_s": 0.0, "first_scheduled_s": 0.0, "status": "finished"},
            {"id": "b", "arrival_s": 0.5, "first_scheduled_s": 2.0, "status": "finished"},
            {"id": "c", "arrival_s": 1.0, "first_scheduled_s": 1.5, "status": "finished"}]
    steps = [{"t_end_s": t} for t in (0.4, 1.2, 1.8, 2.5)]
    age = orders.oldest_waiting_age(RunResult(reqs, steps, {}))
    # 0.4: nobody waits; 1.2: b (0.7 s) and c; 1.8: b alone (1.3 s); 2.5: nobody
    assert age["age_s"].tolist() == pytest.approx([0.0, 0.7, 1.3, 0.0])


def test_stall_runs_are_keyed_by_step_priority(tmp_path, monkeypatch):
    from engine.runs.results import cache_path
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    for chunked in (False, True):
        first = costs.stall_policy(chunked)
        other = costs.stall_policy(chunked, step_priority="prefill_first")
        assert first.step_priority == "decode_first" and other == first.changed(step_priority="prefill_first")
        assert cache_path("mix", first.to_dict()) != cache_path("mix", other.to_dict())


def test_run_each_reports_progress_and_stops_at_the_first_missing_run():
    from labs.runs import run_each
    seen = []
    got = run_each([1, 2], lambda v, p: (p(1.0, "done"), f"result {v}", True)[1:],
                   progress=lambda f, text: seen.append((f, text)), describe=lambda v: f"v={v}")
    assert got == [(1, "result 1", True), (2, "result 2", True)]
    assert seen == [(0.5, "v=1: done"), (1.0, "v=2: done")]
    assert run_each([1, 2], lambda v, p: None if v == 2 else ("r", True)) is None


def test_first_to_finish_and_the_dynamic_batching_outcome():
    assert svc.first_to_finish({"static": 10.0, "continuous": 8.0}) == "continuous"
    assert svc.first_to_finish({"static": 10.0, "continuous": 9.8}) == svc.SAME
    # the question asks about delivered tokens per second (output_tok_s), not tokens per second of work
    t = pd.DataFrame({"max_wait_ms": [0, 1000], "ttft_p50_s": [0.2, 0.9], "busy_tok_s": [100, 180],
                      "output_tok_s": [50, 51]})
    assert dynamic.outcome(t) == "TTFT up, delivered tok/s about the same"
    assert dynamic.outcome(t.assign(output_tok_s=[50, 80])) == "TTFT up, delivered tok/s up"
    assert dynamic.outcome(t.assign(output_tok_s=[50, 30])) == "TTFT up, delivered tok/s down"
    assert dynamic.outcome(t.assign(ttft_p50_s=[0.2, 0.21])) == "TTFT about the same or down"
    assert dynamic.wait_policy(250).mode == "static" and dynamic.wait_policy(250).max_wait_ms == 250



def test_the_waiting_verdict_says_which_way_delivered_throughput_went_and_counts_the_slots_set():
    """The verdict judged 'already full' against 8 slots whatever the slider held, and said only that
    delivered tokens per second 'moved' when they fell: its words follow the run's numbers."""
    t = pd.DataFrame({"max_wait_ms": [0, 1000], "ttft_p50_s": [0.2, 0.9], "busy_tok_s": [100, 180],
                      "output_tok_s": [50, 51], "mean_batch": [3.0, 7.5]})
    assert dynamic.waiting_verdict(t).shown
    fell = dynamic.waiting_verdict(t.assign(output_tok_s=[50, 30])).words
    rose = dynamic.waiting_verdict(t.assign(output_tok_s=[50, 80])).words
    assert "Delivered tokens per second fell" in fell and "took longer" in fell
    assert "delivered more tokens per second" in rose and "per second fell" not in rose
    flat = t.assign(busy_tok_s=[100, 101], mean_batch=[7.4, 7.9])      # no gain: full already, or not filled
    assert "nearly full (7.4 of 8)" in dynamic.waiting_verdict(flat, 8).words
    assert "did not fill the batches here (7.9 of 16" in dynamic.waiting_verdict(flat, 16).words
    assert "nearly full" in dynamic.waiting_verdict(flat.assign(mean_batch=[3.8, 4.0]), 4).words

def test_tail_trust_warns_below_100_samples():
    assert tail_lab.MIN_TAIL_SAMPLES == 100
    assert tail_lab.tail_trust(5).startswith("⚠ only 5 samples")
    assert not tail_lab.tail_trust(400).startswith("⚠") and "about 4 values above" in tail_lab.tail_trust(400)



def test_the_tail_is_named_a_groups_only_where_its_p99_stands_out():
    """'The tail belongs to X' was said of whichever group's p99 was highest, ×1.02 or ×5: the words
    follow the ratio, and a small group's p99 is called what it is."""
    fmt = lambda v, unit: f"{v:.2f} {unit}"
    table = pd.DataFrame({"group": ["all", "steady", "bursty"], "n": [300, 150, 150],
                          "p50": [0.2, 0.2, 0.21], "p99": [2.0, 1.0, 3.0]})
    assert tail_lab.owner_words(table, "TTFT", "s", fmt).startswith("The tail belongs to **bursty**: p99 TTFT 3.00 s")
    alike = tail_lab.owner_words(table.assign(p99=[1.0, 1.0, 1.2]), "TTFT", "s", fmt)
    assert alike.startswith("The groups' tails are alike here") and "×1.2" in alike
    assert "medians differ" not in alike
    slower = tail_lab.owner_words(table.assign(p99=[1.0, 1.0, 1.2], p50=[0.2, 0.1, 0.5]), "TTFT", "s", fmt)
    assert "The medians differ more (×5.0): bursty is slower for most of its requests" in slower
    few = tail_lab.owner_words(table.assign(n=[160, 150, 10]), "TTFT", "s", fmt)
    assert "From only 10 requests" in few
    assert tail_lab.owner_words(table.iloc[:2], "TTFT", "s", fmt) == ""
    reqs = pd.DataFrame({"arrival_s": [i * 0.1 for i in range(80)], "ttft_s": [0.1] * 70 + [0.2] * 10,
                         "status": "finished"})
    assert "only a little in time" in tail_lab.window_verdict(reqs).words          # ×2: worse, under ×3
    assert "The windows are alike" in tail_lab.window_verdict(reqs.assign(ttft_s=0.1)).words
    assert tail_lab.window_verdict(reqs.assign(ttft_s=[0.1] * 70 + [0.5] * 10)).shown

def test_kv_demand_is_littles_law_times_tokens():
    need = queueing.kv_demand(10, 20, 2000, bytes_per_token=1000)
    assert need["inside"] == pytest.approx(200) and need["tokens"] == pytest.approx(400_000)
    assert need["bytes"] == pytest.approx(4e8)


def test_a_run_estimate_is_the_run_on_this_machines_step_model(tmp_path, monkeypatch):
    """A lab's run-time estimate is its runs on the simulator with this machine's step model
    (engine.sim.machine_speed): the guess where nothing was measured, said so; a machine twice as
    slow takes twice as long (every request arrives at once: no idle gaps to keep)."""
    from dataclasses import replace

    from engine.core.step_model import UNCALIBRATED
    from engine.sim.machine_speed import CALIBRATED, MachineSpeed
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))
    seconds, speed = runs.estimate("tiny", [knee_job(), knee_job()])
    assert not speed.calibrated and speed.step_model == UNCALIBRATED
    policy, parts = knee_job()
    alone = runs.simulated_run(UNCALIBRATED, policy, parts[0].spec).summary["duration_s"]
    assert seconds == pytest.approx(2 * alone)
    slower = replace(UNCALIBRATED.scaled(2.0, "twice as slow"), error=0.1)
    monkeypatch.setattr(runs, "machine_speed", lambda model: MachineSpeed(slower, CALIBRATED))
    twice, speed = runs.estimate("tiny", [knee_job()])
    assert speed.calibrated and speed.error == 0.1
    assert twice == pytest.approx(2 * alone)


def knee_job():
    from engine.core.config import SchedulerPolicy
    from labs.part import Part
    return SchedulerPolicy(max_num_seqs=4), [Part(knee.SPEC)]


def test_a_short_time_beside_a_long_one_keeps_its_digits():
    """The queueing lab showed 'Queue time at 90% vs 30%: 0.24 vs 0.00 s' where the short one was
    0.0038 s: times keep two significant digits, in ms below 0.1 s."""
    from ui.widgets import seconds
    assert [seconds(v) for v in (0.24, 0.0038, 0.045, 0.0996, 0.0, 1.5, 12.3)] == \
        ["0.24 s", "3.8 ms", "45 ms", "100 ms", "0 s", "1.5 s", "12 s"]
    assert seconds(float("nan")) == "—"


def test_a_tie_in_missed_targets_is_a_tie():
    """0 TTFT misses against 0 TPOT misses was scored as 'TTFT' (a guess of TTFT marked right): which
    target more requests missed has a third answer."""
    assert slo.most_missed(3, 1) == "TTFT" and slo.most_missed(1, 3) == "TPOT"
    assert slo.most_missed(0, 0) == slo.most_missed(2, 2) == "about as many of each"
    # "within a tenth of each other counts as about as many", as the question says
    assert slo.most_missed(20, 19) == slo.TIE and slo.most_missed(20, 15) == "TTFT"
    from course.predictions import ASKS
    assert slo.TIE in ASKS["slo_first_miss"].choices and "within a tenth" in ASKS["slo_first_miss"].text


def test_the_orders_question_scores_what_the_orders_move():
    """Under fcfs every tenant waits alike, so 'whose p95 TTFT is worst under fcfs' was noise; the question
    asks whose p95 TTFT the other orders move the most, and the answer is that tenant."""
    import pandas as pd
    from labs.scheduler_orders import experiment as orders
    table = pd.DataFrame([("fcfs", "tenant-a", 2.0), ("fcfs", "tenant-b", 2.1), ("priority", "tenant-a", 1.0),
                          ("priority", "tenant-b", 2.2), ("sjf", "tenant-a", 2.0), ("sjf", "tenant-b", 2.6)],
                         columns=["order", "tenant", "ttft_p95_s"])
    moves = orders.tenant_moves(table)
    assert moves == pytest.approx({"tenant-a": 0.5, "tenant-b": 2.6 / 2.1 - 1})
    from course.predictions import ASKS
    assert "move the most" in ASKS["scheduler_orders"].text


def test_a_peak_at_the_last_rate_is_not_compared_with_itself():
    """Where goodput was highest at the highest rate, the SLO verdict read 'throughput goes 679 → 679
    tok/s' and '(100% of the peak)': the peak is named once, and the verdict says it has not fallen."""
    table = pd.DataFrame({"rate": [2.0, 4.0], "goodput_req_s": [1.9, 3.8], "output_tok_s": [340.0, 679.0],
                          "met_share": [1.0, 0.95]})
    v = slo.falls_verdict(table, 2.0, 0.1)
    assert "→" not in v.words and "of the peak" not in v.words
    assert "highest at the highest rate tried, 4 requests/s" in v.words and "679 tok/s" in v.words
    assert "within the targets" in v.words
    fell = slo.falls_verdict(table.assign(goodput_req_s=[1.9, 0.5]), 2.0, 0.1)
    assert "340 → 679 tok/s" in fell.words and "26% of the peak" in fell.words


def test_the_fit_sentence_shows_the_slope_its_arithmetic_uses():
    """'1000 / 0.31 ≈ 3,268' divided by a slope rounded to two decimals (0.306), and '1000 / 1.76 ≈ 569'
    by one rounded to three (1.7575): the slope keeps the digits that make the division shown give the
    ceiling shown."""
    import re
    for c in (0.30598, 0.0812, 1.234, 12.5, 1.7575):
        fit = why_batch.linear_fit([{"batch": 1, "step_ms": 8 + c}, {"batch": 65, "step_ms": 8 + 65 * c}])
        words = why_batch.fit_words(fit, "measured")
        shown_c, shown_ceiling = re.search(r"1000 / ([\d.]+) ≈ ([\d,]+) tokens/s", words).groups()
        assert round(1000 / float(shown_c)) == int(shown_ceiling.replace(",", "")), words
    assert "no positive slope" in why_batch.fit_words(why_batch.linear_fit(
        [{"batch": 1, "step_ms": 9.0}, {"batch": 8, "step_ms": 9.0}]), "measured")


def test_the_scheduling_sentence_says_why_its_step_has_that_many_requests():
    """'Deciding a step of 51 running requests' left a learner asking why 51 of the 64 slots: the
    sentence says what filled the step."""
    from engine.sim.step_times import TIMED_BUDGET
    words = costs.scheduling_verdict(costs.scheduling_numbers(5.0), "a test").words
    assert f"their prompts fill its {TIMED_BUDGET:,}-token budget" in words


def test_table_columns_show_the_digits_their_values_need():
    """Tables showed '224.526 tok/s' (every float rounded to three decimals): a column's decimals
    follow its values, three significant digits of its largest and two of its smallest."""
    from ui.widgets import decimals
    assert decimals([224.526, 900.1]) == 0 and decimals([8.52, 224.5]) == 1
    assert decimals([0.3, 0.5, 1.2]) == 2 and decimals([0.0038, 0.24]) == 3
    assert decimals([64.0, 1.0]) == 0 and decimals([0.0, float("nan")]) == 0


def test_no_lab_rounds_a_table_before_its_columns_do():
    """The queueing lab's table showed a growth of 3.15 beside its verdict's 3.14: the page rounded the
    value to 3.145 and the table's column format rounded that again. Tables get their values whole."""
    import ast
    from pathlib import Path
    rounded = []
    for page in sorted(Path(__file__).resolve().parents[1].glob("labs/*/page.py")):
        for node in ast.walk(ast.parse(page.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "widgets.table":
                rounded += [f"{page.parent.name}:{node.lineno}" for inner in ast.walk(node)
                            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                            and inner.func.attr == "round"]
    assert not rounded, rounded


def test_a_metric_s_delta_is_the_difference_of_the_values_shown():
    """The costs lab showed TTFT 1.23 s off, 1.40 s on and '+0.18 s vs off' (1.404 - 1.226): a delta is
    the subtraction of the numbers on the screen."""
    from ui.widgets import difference
    assert difference(1.404, 1.226, 2, "s vs off") == "+0.17 s vs off"
    assert difference(1221.4, 366.6, 0, "ms") == "+854 ms" and difference(0.5, 0.75, 2, "s") == "-0.25 s"


def test_the_queueing_verdict_gives_service_against_1_over_mu_for_both_ends():
    """'service took 0.48–0.78 s, 4.9× the 1/μ = 0.10 s' matched only the low end: the ratio is a range
    as the times are."""
    points = pd.DataFrame({"rho": [0.3, 0.9], "finished": [200, 200], "queue_mean_s": [0.01, 0.9],
                           "service_mean_s": [0.48, 0.78], "W_s": [0.49, 1.68], "W_mm1_s": [0.14, 1.0]})
    words = queueing.explodes_verdict(points, 10.0).words
    assert "0.48–0.78 s, 4.8–7.8× the 1/μ = 0.10 s" in words, words
    assert "That fixed part dilutes the queue's growth" in words     # W ×3.4 against M/M/1's ×7.1
    faster = queueing.explodes_verdict(points.assign(W_s=[0.49, 4.0]), 10.0).words    # W ×8.2: nothing diluted
    assert "dilutes" not in faster and "outweigh that fixed part" in faster


def test_the_tallest_gap_sits_below_the_arrival_label():
    """On a phone the costs lab's 'long prompt arrives' label covered the two stall spikes it points
    at (drawn at the plot's top, where the tallest spike is): the y-axis leaves room above them."""
    gaps = {"off": pd.DataFrame({"t_s": [0.0, 1.0, 2.0], "gap_ms": [30.0, 1221.0, 31.0], "id": ["a", "b", "c"]}),
            "on": pd.DataFrame({"t_s": [0.0, 1.0], "gap_ms": [30.0, 40.0], "id": ["a", "b"]})}
    fig = costs.token_gaps(gaps, [0.9])
    assert fig.layout.yaxis.range[1] >= 1.2 * 1221


def test_the_queueing_lab_says_when_its_arrivals_strayed_from_the_rate_set():
    """The queueing table showed λ drawn 7% above λ set at every row, so its '90%' run ran at 97%,
    unsaid: the page says each run's real utilization where the draws stray."""
    points = pd.DataFrame({"rho": [0.3, 0.9, 1.2], "lambda_set": [3.03, 9.10, 12.13],
                           "lambda_arrivals": [3.25, 9.76, 13.0]})
    words = queueing.drawn_words(points)
    assert "7% faster" in words and "90% ran at 97%" in words and "30% ran at 32%" in words
    assert "120%" not in words, "past capacity there is no steady utilization to name"
    assert queueing.drawn_words(points.assign(lambda_arrivals=points.lambda_set * 1.01)) == ""
    one = queueing.drawn_words(points.assign(lambda_arrivals=[3.03, 9.10, 13.0]))    # one row strays
    assert "0%" not in one.split("(")[0] and "strayed from the rates set in some runs" in one, one


def test_the_orders_verdict_names_which_orders_moved_a_wait():
    """'Each favours someone (priority hardly differs from fcfs here)' said two things at once: the
    verdict names the orders that moved a tenant's wait and those that did not."""
    rows = [("fcfs", "a", 1.0), ("fcfs", "b", 2.0), ("sjf", "a", 0.5), ("sjf", "b", 3.0),
            ("priority", "a", 1.05), ("priority", "b", 2.05), ("fair", "a", 1.6), ("fair", "b", 2.0)]
    table = pd.DataFrame(rows, columns=["order", "tenant", "ttft_p95_s"])
    words = orders.favour_verdict(table).words
    assert "sjf and fair moved somebody's wait" in words and "priority hardly differs from fcfs" in words
    assert "each favours someone" not in words
    assert "each favours someone" in orders.favour_verdict(table[table.order != "priority"]).words
