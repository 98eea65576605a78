"""The figures the lesson labs read off their runs, on small synthetic data with known answers."""
import math

import pandas as pd
import pytest

from engine.results import RunResult
from labs.costs import experiment as costs
from labs.knee import experiment as knee
from labs.queueing import experiment as queueing
from labs.scheduler_orders import experiment as orders
from labs.slo_goodput import experiment as slo
from labs.static_vs_continuous import experiment as svc
from labs.tail import experiment as tail_lab
from labs.why_batch import experiment as why_batch


def scaling_rows(step_ms: dict[int, float]) -> list[dict]:
    return [{"batch": b, "step_ms": t, "tokens_per_s": 1000 * b / t, "ms_per_token": t / b}
            for b, t in step_ms.items()]


def test_bend_is_the_first_size_where_doubling_gains_under_20_percent():
    # t(B) = 10 + 1 * B ms: tokens/s 1000 B / (10 + B)
    rows = scaling_rows({b: 10 + b for b in (1, 2, 4, 8, 16, 32, 64)})
    table = why_batch.scaling_table(rows)
    assert table["gain_per_doubling"].iloc[0] == pytest.approx((2000 / 12) / (1000 / 11))
    # 16 -> 32: (32/42) / (16/26) = 1.238; 32 -> 64: (64/74) / (32/42) = 1.135
    assert why_batch.bend(rows) == 32
    assert why_batch.bend(rows, min_gain=1.5) == 8
    assert why_batch.bend(scaling_rows({1: 10.0, 2: 10.0})) is None
    fit = why_batch.linear_fit(rows)
    assert fit["t0_ms"] == pytest.approx(10) and fit["c_ms"] == pytest.approx(1)
    assert fit["ceiling_tok_s"] == pytest.approx(1000) and fit["half_batch"] == pytest.approx(10)


def test_bend_handles_uneven_steps_per_doubling():
    # 1 -> 4 is two doublings: a 3x gain is sqrt(3) = 1.73 per doubling
    rows = [{"batch": 1, "step_ms": 10, "tokens_per_s": 100, "ms_per_token": 10},
            {"batch": 4, "step_ms": 13.3, "tokens_per_s": 300, "ms_per_token": 3.3},
            {"batch": 8, "step_ms": 24, "tokens_per_s": 330, "ms_per_token": 3}]
    table = why_batch.scaling_table(rows)
    assert table["gain_per_doubling"].iloc[0] == pytest.approx(math.sqrt(3))
    assert why_batch.bend(rows) == 4


def test_knee_is_the_point_furthest_above_the_chord():
    # throughput rises fast while TPOT barely moves, then TPOT grows for little extra throughput
    table = pd.DataFrame({"max_num_seqs": [1, 2, 4, 8, 16, 32],
                          "tpot_p95_ms": [30, 31, 33, 40, 70, 130],
                          "output_tok_s": [30, 60, 110, 180, 200, 210]})
    # scaled: x = (tpot - 30) / 100, y = (tok/s - 30) / 180; y - x is largest at 8 (0.833 - 0.10)
    assert knee.find_knee(table) == 8
    assert knee.find_knee(table.iloc[:2]) is None
    straight = pd.DataFrame({"max_num_seqs": [1, 2, 4], "tpot_p95_ms": [10, 20, 30], "output_tok_s": [1, 2, 3]})
    assert knee.find_knee(straight) is None


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
    parts = orders.order_parts()
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
    from engine.results import cache_path
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
