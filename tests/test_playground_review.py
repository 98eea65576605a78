"""Reviewing a paused Playground run: the tables rewound to a chosen step must equal the tables
a snapshot took at that step (a cost-model run, read at step k and again much later)."""
import numpy as np
import pandas as pd
import pytest

from analysis import frame_metrics
from analysis.tables import TraceTables
from engine.runs.arrivals import build_requests
from engine.core.config import EngineConfig
from engine.runs.live import LiveRun
from playground.review import step_end, tables_at
from playground.setup import Setup

COMPARED = ["id", "status", "first_scheduled_s", "first_token_s", "finish_s", "output_tokens",
            "ttft_s", "tpot_s", "e2e_s", "queue_s"]


def run_until(live, steps: int) -> None:
    live.engine.run(should_stop=lambda: len(live.engine.steps) >= steps)


@pytest.fixture(scope="module")
def two_readings():
    setup = Setup(continuous=False, rate=6.0, num_requests=60, max_num_seqs=6, prompt_lo=32, prompt_hi=200,
                  output_lo=20, output_hi=60, kv_capacity_tokens=8192, ttft_slo_s=2.0, tpot_slo_s=0.1)
    live = LiveRun(setup.policy(), setup.workload(), model=None, config=EngineConfig(kv_pool_tokens=8192))
    for r in build_requests(setup.workload()):
        live.engine.submit(r)
    run_until(live, 90)
    then = TraceTables().update(live.snapshot(summary=False))
    run_until(live, 400)
    later = TraceTables().update(live.snapshot(summary=False))
    return setup, then, later


def test_rewound_tables_equal_a_snapshot_taken_at_that_step(two_readings):
    setup, then, later = two_readings
    k = int(then.steps["step"].iloc[-1])
    assert len(later.steps) > len(then.steps) + 100       # much happened after step k
    got = tables_at(later, k)
    pd.testing.assert_frame_equal(got.steps.reset_index(drop=True), then.steps.reset_index(drop=True))
    want = then.requests[then.requests["arrival_s"] <= step_end(then, k)]
    a = got.requests[COMPARED].sort_values("id").reset_index(drop=True)
    b = want[COMPARED].sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
    assert (a["status"] == "running").any() and (a["status"] == "finished").any()
    h_got = frame_metrics.headline(got.requests, got.steps, 2.0, 0.1, setup.max_num_seqs)
    h_want = frame_metrics.headline(want, then.steps, 2.0, 0.1, setup.max_num_seqs)
    assert h_got == pytest.approx(h_want, nan_ok=True)


def test_rewinding_to_the_latest_step_changes_nothing(two_readings):
    _, _, later = two_readings
    got = tables_at(later, int(later.steps["step"].iloc[-1]))
    pd.testing.assert_frame_equal(got.requests, later.requests)


def test_headline_follows_the_step(two_readings):
    _, _, later = two_readings
    steps = later.steps["step"].to_numpy()
    a = frame_metrics.headline(*_tabs(tables_at(later, int(steps[100]))))
    b = frame_metrics.headline(*_tabs(tables_at(later, int(steps[300]))))
    assert a["finished"] < b["finished"]
    assert not np.isnan(b["ttft_p50_s"])


def _tabs(t):
    return t.requests, t.steps


def test_a_step_the_run_does_not_keep_is_refused(two_readings):
    _, _, later = two_readings
    with pytest.raises(ValueError, match="step 99999 is not among"):
        tables_at(later, 99999)
