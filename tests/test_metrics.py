"""Metric definitions on hand-built traces with known answers."""
import math

import pytest

from engine.core.engine import StepRecord
from engine.core.metrics import SLO, distribution, e2e, itls, percentile, queue_time, summarize, ttft, tpot
from engine.core.request import Request, Status


def finished(rid, arrival, scheduled, token_times, tenant="a"):
    r = Request(rid, [1] * 10, len(token_times), arrival_s=arrival, tenant=tenant)
    r.first_scheduled_s = scheduled
    r.token_times = list(token_times)
    r.output_token_ids = [3] * len(token_times)
    r.first_token_s = token_times[0]
    r.finish_s = token_times[-1]
    r.status = Status.FINISHED
    return r


def step(i, t0, t1):
    return StepRecord(i, t0, t1, 0, 1, 0, 1, 1, 10, ())


def test_per_request_definitions():
    r = finished("x", 1.0, 1.5, [2.0, 2.5, 3.5])
    assert ttft(r) == pytest.approx(1.0)
    assert e2e(r) == pytest.approx(2.5)
    assert tpot(r) == pytest.approx((2.5 - 1.0) / 2)
    assert queue_time(r) == pytest.approx(0.5)
    assert itls([r]) == pytest.approx([0.5, 1.0])


def test_tpot_undefined_for_one_token_and_unfinished():
    one = finished("o", 0.0, 0.0, [0.3])
    assert tpot(one) is None
    running = finished("r", 0.0, 0.0, [0.3, 0.4])
    running.status = Status.RUNNING
    assert tpot(running) is None and e2e(running) is None


def test_percentiles_match_linear_interpolation():
    xs = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert percentile(xs, 50) == pytest.approx(5.5)
    assert percentile(xs, 90) == pytest.approx(9.1)
    assert percentile(xs, 99) == pytest.approx(9.91)
    d = distribution(xs)
    assert d["mean"] == pytest.approx(5.5) and d["p95"] == pytest.approx(9.55)
    assert math.isnan(percentile([], 50))


def test_summary_throughput_and_goodput():
    a = finished("a", 0.0, 0.0, [0.2, 0.3, 0.4, 0.5])      # ttft 0.2, tpot 0.1
    b = finished("b", 1.0, 1.0, [2.0, 3.0])                # ttft 1.0, tpot 1.0
    rej = Request("c", [1], 5, arrival_s=0.5)
    rej.status = Status.REJECTED
    steps = [step(0, 0.0, 0.2), step(1, 1.9, 3.0)]
    s = summarize([a, b, rej], steps, SLO(ttft_s=0.5, tpot_s=0.5))
    assert s["duration_s"] == pytest.approx(3.0)
    assert s["output_tokens"] == 6
    assert s["output_throughput_tok_s"] == pytest.approx(2.0)
    assert s["goodput_req_s"] == pytest.approx(1 / 3)          # only a meets both SLOs
    assert s["rejected"] == 1 and s["finished"] == 2
    assert s["ttft_s"]["p50"] == pytest.approx(0.6)
    assert s["itl_s"]["mean"] == pytest.approx((0.1 * 3 + 1.0) / 4)
    # no SLO set: every finished request counts
    assert summarize([a, b], steps)["goodput_req_s"] == pytest.approx(2 / 3)
