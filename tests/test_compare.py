"""Comparing two runs: the before/after table and the end-of-run summary, worked out by hand."""
import math

import pandas as pd
import pytest

from analysis import compare
from analysis.tables import Tables
from engine.core.config import SchedulerPolicy
from engine.runs.workload import WorkloadSpec

BEFORE = {"ttft_p50_s": 0.5, "ttft_p95_s": 2.0, "tpot_p50_s": 0.1, "tpot_p95_s": 0.2,
          "throughput_tok_s": 40.0, "goodput_req_s": 1.0, "waiting_now": 5, "finished": 30,
          "duration_s": 60.0}


def after(**changed):
    return {**BEFORE, **changed}


def test_before_after_table_values_and_directions():
    table = compare.before_after(BEFORE, after(ttft_p95_s=0.8, tpot_p95_s=0.3, throughput_tok_s=52.0,
                                               goodput_req_s=1.01, finished=45))
    rows = table.set_index("metric")
    assert list(table.columns) == ["metric", "unit", "before", "after", "change", "change %", "verdict"]
    assert rows.loc["TTFT p95", "change"] == pytest.approx(-1.2)
    assert rows.loc["TTFT p95", "change %"] == pytest.approx(-60)
    assert rows.loc["TTFT p95", "verdict"] == "better"              # lower latency is better
    assert rows.loc["TPOT p95", ["before", "after", "unit"]].tolist() == [200.0, 300.0, "ms"]
    assert rows.loc["TPOT p95", "verdict"] == "worse"
    assert rows.loc["Throughput", "verdict"] == "better"            # higher throughput is better
    assert rows.loc["Goodput", "verdict"] == "same"                  # +1% is within SAME_WITHIN
    assert rows.loc["Finished", "verdict"] == "—"                    # depends on run length
    assert rows.loc["TTFT p50", "verdict"] == "same"


def test_before_after_with_missing_numbers():
    table = compare.before_after(after(ttft_p95_s=math.nan), BEFORE, names=("pinned", "now"))
    row = table.set_index("metric").loc["TTFT p95"]
    assert math.isnan(row["pinned"]) and row["now"] == 2.0
    assert row["verdict"] == "—" and math.isnan(row["change %"])


def test_changes_between_names_policy_and_workload_knobs():
    p, w = SchedulerPolicy(), WorkloadSpec()
    found = compare.changes_between(p, p.changed(max_num_seqs=4), w, WorkloadSpec(rate=w.rate + 2))
    assert found == [f"max_num_seqs {p.max_num_seqs}→4", f"rate {w.rate}→{w.rate + 2}"]
    assert compare.changes_between(p, p) == []


def growing_queue(n=30):
    return pd.DataFrame({"waiting": list(range(n)), "running": [4] * n})


def test_summary_names_the_change_its_effect_and_the_next_step_for_a_growing_queue():
    policy = SchedulerPolicy(max_num_seqs=4)
    tables = Tables(growing_queue(), pd.DataFrame({"prompt_tokens": [50] * 10}), pd.DataFrame())
    said = compare.run_summary(BEFORE, after(ttft_p95_s=3.0, throughput_tok_s=30.0),
                               ["max_num_seqs 16→4"], policy, tables)
    assert said[0] == "You changed max_num_seqs 16→4."
    assert said[1] == "TTFT p95 went from 2 to 3 s (worse, +50%)."
    assert said[2] == "Throughput went from 40 to 30 tok/s (worse, -25%)."
    assert said[3] == "The numbers cover 30 finished requests in the earlier run and 30 in this run."
    # waiting means 4.5 over the first third, 24.5 over the last
    assert said[4].startswith("The queue kept growing (about 4 waiting early on, 24 at the end)")
    assert "raise max_num_seqs (now 4)" in said[4]


def test_summary_suggests_chunked_prefill_for_long_prompts_over_the_ttft_target():
    policy = SchedulerPolicy(enable_chunked_prefill=False, ttft_slo_s=1.0)
    flat = pd.DataFrame({"waiting": [3] * 30, "running": [4] * 30})
    tables = Tables(flat, pd.DataFrame({"prompt_tokens": [600, 700, 800]}), pd.DataFrame())
    said = compare.run_summary(BEFORE, BEFORE, [], policy, tables)
    assert said[0].startswith("Nothing changed")
    assert said[1] == "No headline number moved by more than 2%."
    assert said[-1] == ("TTFT p95 (2.00 s) is over its 1 s target and prompts are long (median 700 "
                        "tokens). Next: turn on chunked prefill.")
    # the same with chunked prefill on: a bigger token budget instead
    said = compare.run_summary(BEFORE, BEFORE, [], policy.changed(enable_chunked_prefill=True), tables)
    assert "raise the token budget (now 512)" in said[-1]
    # short prompts: the admission order or more slots
    short = Tables(flat, pd.DataFrame({"prompt_tokens": [20, 30]}), pd.DataFrame())
    assert "sjf admission order" in compare.run_summary(BEFORE, BEFORE, [], policy, short)[-1]


def test_summary_for_tpot_over_target_and_for_targets_met():
    tables = Tables(pd.DataFrame({"waiting": [0] * 9}), pd.DataFrame({"prompt_tokens": [20]}), pd.DataFrame())
    slow = compare.run_summary(BEFORE, BEFORE, [], SchedulerPolicy(ttft_slo_s=5.0, tpot_slo_s=0.1), tables)
    assert slow[-1].startswith("TPOT p95 (200 ms) is over its 100 ms target")
    met = compare.run_summary(BEFORE, BEFORE, [], SchedulerPolicy(ttft_slo_s=5.0, tpot_slo_s=0.5), tables)
    assert met[-1].startswith("Both latency targets are met. Next: raise the arrival rate")


def test_the_summary_says_every_change_both_ways_largest_first_with_the_tables_counts():
    """TPOT got much better while TTFT, its p95 and throughput got worse: all four are said, the
    largest change first, and the request counts are the table's."""
    before = after(ttft_p50_s=1.0, ttft_p95_s=2.5, tpot_p50_s=0.390, throughput_tok_s=40.0, finished=64)
    later = after(ttft_p50_s=1.41, ttft_p95_s=3.6, tpot_p50_s=0.115, throughput_tok_s=30.0, finished=41,
                  goodput_req_s=1.01)
    said = compare.run_summary(before, later, ["max_num_seqs 4→16"], names=("pinned run", "this run"))
    table = compare.before_after(before, later)
    moved = table[table["verdict"].isin(["better", "worse"])]
    assert said[1:5] == ["TPOT p50 went from 390 to 115 ms (better, -71%).",
                         "TTFT p95 went from 2.5 to 3.6 s (worse, +44%).",
                         "TTFT p50 went from 1 to 1.41 s (worse, +41%).",
                         "Throughput went from 40 to 30 tok/s (worse, -25%)."]
    assert len(moved) == 4                            # the table marks exactly these
    assert said[5] == "The numbers cover 64 finished requests in the pinned run and 41 in this run."
    assert not any("Goodput" in x for x in said)      # +1%: within SAME_WITHIN, "same" in the table too
