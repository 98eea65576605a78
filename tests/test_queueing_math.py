"""The queueing lab's helpers: the M/M/1 model, and Little's Law on traces with known answers,
on traces built to break it, and on the engine's own counters."""
import math

import numpy as np
import pandas as pd
import pytest

from analysis.queueing import (littles_law_window, middle_window, mm1_time_in_system,
                                time_averaged_from_steps, time_averaged_in_system)
from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.runs.results import result_of
from engine.runs.workload import WorkloadSpec


@pytest.mark.parametrize("rho, w_times_mu", [(0.5, 2.0), (0.9, 10.0), (0.99, 100.0)])
def test_mm1_at_50_90_99_percent(rho, w_times_mu):
    mu = 20.0
    assert mm1_time_in_system(rho * mu, mu) == pytest.approx(w_times_mu / mu)


def test_mm1_lesson_example_and_overload():
    assert mm1_time_in_system(10, 20) == pytest.approx(0.1)
    assert mm1_time_in_system(18, 20) == pytest.approx(0.5)
    assert mm1_time_in_system(20, 20) == math.inf
    assert mm1_time_in_system(25, 20) == math.inf
    w = mm1_time_in_system(np.array([5.0, 10.0, 20.0]), 20.0)
    assert w[:2] == pytest.approx([1 / 15, 0.1]) and w[2] == math.inf


def test_time_average_of_two_overlapping_requests():
    # one request in [0, 4], one in [1, 3]: area 4 + 2 = 6 over 4 s
    assert time_averaged_in_system([0, 1], [4, 3]) == pytest.approx(1.5)
    # a window cuts each request's time inside it
    assert time_averaged_in_system([0, 1], [4, 3], t0=2, t1=4) == pytest.approx((2 + 1) / 2)


def test_time_average_rejects_bad_traces():
    with pytest.raises(ValueError):
        time_averaged_in_system([0, 1], [4])
    with pytest.raises(ValueError):
        time_averaged_in_system([2], [1])
    assert math.isnan(time_averaged_in_system([], []))


def steps_from_trace(arrivals, finishes, dt=0.01) -> pd.DataFrame:
    """Step records an honest engine would write: one step every dt, counting who is inside."""
    a, d = np.asarray(arrivals), np.asarray(finishes)
    starts = np.arange(a.min(), d.max(), dt)
    inside = ((a[None, :] <= starts[:, None]) & (d[None, :] > starts[:, None])).sum(axis=1)
    return pd.DataFrame({"t_start_s": starts, "t_end_s": starts + dt, "waiting": 0, "running": inside})


def trace(arrivals, stays) -> pd.DataFrame:
    arrivals = np.asarray(arrivals, dtype=float)
    return pd.DataFrame({"arrival_s": arrivals, "finish_s": arrivals + stays, "status": "finished"})


def test_littles_law_on_a_steady_trace_with_known_answers():
    # one arrival a second, each staying exactly 3 s: 3 inside at any time in steady state
    df = trace(np.arange(100.0), 3.0)
    t0, t1 = middle_window(df)
    assert (t0, t1) == pytest.approx((25.5, 76.5))      # the middle half of [0, 102]
    check = littles_law_window(df, steps_from_trace(df.arrival_s, df.finish_s), t0, t1)
    assert check.arrivals == 51 and check.lam == pytest.approx(1.0)            # arrivals at 26 ... 76
    assert check.W == pytest.approx(3.0)
    assert check.L == pytest.approx(3.0, abs=0.02)
    assert check.holds() and abs(check.gap) < 0.01


def test_the_edges_of_a_window_are_accounted_for():
    # two long stays cut by the window [5, 15]: one came before it (5 s inside), one in it
    # (10 s after it): L = 15 / 10 from the timestamps, lambda W = 1/10 * 20 = 2, edge = -0.5
    df = trace([0.0, 5.0], [10.0, 20.0])
    steps = steps_from_trace(df.arrival_s, df.finish_s)
    check = littles_law_window(df, steps, 5.0, 15.0)
    assert check.arrivals == 1 and check.lam_W == pytest.approx(2.0)
    assert check.edge == pytest.approx(-0.5)
    assert check.expected_L == pytest.approx(1.5)
    assert check.L == pytest.approx(1.5, abs=0.01) and check.holds()
    assert littles_law_window(df, steps, 12.0, 15.0) is None     # nobody arrived in it
    assert littles_law_window(df, steps, 5.0, 5.0) is None


def test_littles_law_fails_on_counters_that_do_not_match_the_requests():
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(0.5, 400))
    df = trace(arrivals, rng.exponential(1.2, 400))
    df.loc[len(df)] = {"arrival_s": 1.0, "finish_s": None, "status": "rejected"}   # ignored
    t0, t1 = middle_window(df)
    steps = steps_from_trace(df.arrival_s[:400], df.finish_s[:400])
    honest = littles_law_window(df, steps, t0, t1)
    assert honest.holds() and abs(honest.gap) < 0.02
    assert honest.L == pytest.approx(honest.lam_W, rel=0.1)    # edges are small on a long window
    # an engine that forgets to count its waiting requests, or counts each one twice
    for bad in (steps.assign(running=steps.running // 2), steps.assign(waiting=steps.running)):
        check = littles_law_window(df, bad, t0, t1)
        assert not check.holds(), check
    # requests whose finish times were shifted late (time in system overstated)
    late = df.assign(finish_s=df.finish_s + 1.0)
    assert not littles_law_window(late, steps, t0, t1).holds()


def test_littles_law_on_the_engine_itself():
    """The engine's own counters (on the cost model) against its requests' timestamps."""
    engine = build_engine(EngineConfig(), SchedulerPolicy(max_num_seqs=8))
    for r in build_requests(WorkloadSpec(num_requests=200, rate=3.0, output_lo=8, output_hi=48)):
        engine.submit(r)
    engine.run()
    result = result_of(engine, SchedulerPolicy(max_num_seqs=8))
    reqs, steps = pd.DataFrame(result.requests), pd.DataFrame(result.steps)
    check = littles_law_window(reqs, steps, *middle_window(reqs))
    assert check.arrivals > 50 and check.L > 1
    assert check.holds(), check


def test_middle_window_rejects_a_bad_share():
    with pytest.raises(ValueError, match="share"):
        middle_window(trace([0.0], 1.0), share=0)


def test_time_average_from_step_counters():
    steps = pd.DataFrame({"t_start_s": [0.0, 1.0, 3.0], "t_end_s": [1.0, 2.0, 4.0],
                          "waiting": [2, 1, 0], "running": [1, 1, 1]})
    # 3 for 1 s, 2 for 1 s, idle 1 s, 1 for 1 s: (3 + 2 + 0 + 1) / 4
    assert time_averaged_from_steps(steps, 0.0, 4.0) == pytest.approx(1.5)
