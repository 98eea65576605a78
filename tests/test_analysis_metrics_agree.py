"""A page's headline (DataFrames of rows) and the CLI's summary (Request objects) agree, mid-run too."""
import pandas as pd
import pytest

from analysis import frame_metrics
from engine.arrivals import build_requests
from engine.build import build_engine
from engine.config import EngineConfig, SchedulerPolicy
from engine.metrics import SLO, STEP_COLUMNS, request_row, step_row, summarize
from engine.workload import WorkloadSpec


@pytest.mark.parametrize("stop_after", [15, 60, None])   # part-way through, and at the end
def test_headline_and_summary_agree_on_the_same_snapshot(stop_after):
    policy = SchedulerPolicy(max_num_seqs=4, ttft_slo_s=1.0, tpot_slo_s=0.05)
    engine = build_engine(EngineConfig(), policy)
    for r in build_requests(WorkloadSpec(num_requests=24, rate=8.0, seed=3)):
        engine.submit(r)
    engine.run(should_stop=None if stop_after is None else lambda: len(engine.steps) >= stop_after)
    reqs = list(engine.requests.values())
    summary = summarize(reqs, engine.steps, SLO(policy.ttft_slo_s, policy.tpot_slo_s))
    h = frame_metrics.headline(pd.DataFrame([request_row(r) for r in reqs]),
                               pd.DataFrame([step_row(s) for s in engine.steps], columns=STEP_COLUMNS),
                               policy.ttft_slo_s, policy.tpot_slo_s, policy.max_num_seqs)
    assert h["duration_s"] == pytest.approx(summary["duration_s"])
    assert h["throughput_tok_s"] == pytest.approx(summary["output_throughput_tok_s"])
    assert h["goodput_req_s"] == pytest.approx(summary["goodput_req_s"])
    assert h["finished"] == summary["finished"]
    assert h["ttft_p50_s"] == pytest.approx(summary["ttft_s"]["p50"], nan_ok=True)
    assert h["tpot_p95_s"] == pytest.approx(summary["tpot_s"]["p95"], nan_ok=True)
    if stop_after is not None:
        assert summary["finished"] < len(reqs)       # really part-way through
