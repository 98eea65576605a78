"""A page's headline (DataFrames of rows) and the CLI's summary (Request objects) agree, mid-run too."""
import math

import pandas as pd
import pytest

from analysis import frame_metrics
from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.metrics import SLO, STEP_COLUMNS, percentile, request_row, step_row, summarize, tpot_so_far, ttft
from engine.runs.workload import WorkloadSpec


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
    if stop_after is None:          # every request finished: the headline's percentiles are the summary's
        assert h["ttft_p50_s"] == pytest.approx(summary["ttft_s"]["p50"], nan_ok=True)
        assert h["tpot_p95_s"] == pytest.approx(summary["tpot_s"]["p95"], nan_ok=True)
        assert not h["provisional"] or summary["finished"] < frame_metrics.PROVISIONAL_UNTIL
    else:
        # mid-run the headline counts requests in flight too, from their first (second) token
        live = [r for r in reqs if r.status.value in ("finished", "running", "waiting")]
        assert h["ttft_p50_s"] == pytest.approx(percentile([ttft(r) for r in live if r.first_token_s], 50), nan_ok=True)
        assert h["tpot_p95_s"] == pytest.approx(percentile([tpot_so_far(r) for r in live if len(r.token_times) > 1], 95),
                                                nan_ok=True)
        assert h["provisional"]
        assert summary["finished"] < len(reqs)       # really part-way through


def test_the_headline_has_ttft_with_the_first_token_and_tpot_with_the_second():
    engine = build_engine(EngineConfig(), SchedulerPolicy(max_num_seqs=4))
    for r in build_requests(WorkloadSpec(num_requests=4, rate=0, output_kind="fixed", output_lo=50, output_hi=50)):
        engine.submit(r)

    def headline():
        rows = pd.DataFrame([request_row(r) for r in engine.requests.values()])
        return frame_metrics.headline(rows, pd.DataFrame([step_row(s) for s in engine.steps], columns=STEP_COLUMNS))

    engine.step()                          # the prompts: each request's first token
    h = headline()
    assert h["finished"] == 0 and h["provisional"] and h["ttft_n"] == 4
    assert h["ttft_p50_s"] > 0 and math.isnan(h["tpot_p50_s"])
    engine.step()                          # the second token
    h = headline()
    assert h["tpot_n"] == 4 and h["tpot_p50_s"] == pytest.approx(engine.steps[-1].duration_s)
