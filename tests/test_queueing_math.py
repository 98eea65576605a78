"""The queueing lab's helpers: the M/M/1 model and Little's Law on traces with known answers."""
import math

import numpy as np
import pandas as pd
import pytest

from analysis.queueing import (littles_law, mm1_time_in_system, time_averaged_from_steps,
                                time_averaged_in_system)


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


def test_littles_law_on_a_steady_trace_with_known_L():
    # one arrival a second for 1000 s, each staying exactly 3 s: N(t) = 3 in steady state,
    # and over [0, 1002] the area is 1000 * 3, so L = 3000 / 1002 exactly
    arrivals = np.arange(1000.0)
    df = pd.DataFrame({"arrival_s": arrivals, "finish_s": arrivals + 3.0, "status": "finished"})
    L, lam, W, lam_w = littles_law(df)
    assert L == pytest.approx(3000 / 1002)
    assert L == pytest.approx(3.0, rel=0.01)
    assert lam == pytest.approx(1000 / 1002)
    assert W == pytest.approx(3.0)
    assert lam_w == pytest.approx(L)


def test_littles_law_on_a_random_trace_and_ignores_unfinished():
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(0.5, 400))
    stays = rng.exponential(1.2, 400)
    df = pd.DataFrame({"arrival_s": arrivals, "finish_s": arrivals + stays, "status": "finished"})
    df.loc[len(df)] = {"arrival_s": 1.0, "finish_s": None, "status": "rejected"}
    L, lam, W, lam_w = littles_law(df)
    assert L == pytest.approx(lam_w)
    assert W == pytest.approx(stays.mean())
    # brute force: sample N(t) on a fine grid
    t = np.linspace(arrivals.min(), (arrivals + stays).max(), 400_001)
    n = (np.searchsorted(np.sort(arrivals), t, side="right")
         - np.searchsorted(np.sort(arrivals + stays), t, side="right"))
    assert L == pytest.approx(n.mean(), rel=1e-3)


def test_time_average_from_step_counters():
    steps = pd.DataFrame({"t_start_s": [0.0, 1.0, 3.0], "t_end_s": [1.0, 2.0, 4.0],
                          "waiting": [2, 1, 0], "running": [1, 1, 1]})
    # 3 for 1 s, 2 for 1 s, idle 1 s, 1 for 1 s: (3 + 2 + 0 + 1) / 4
    assert time_averaged_from_steps(steps, 0.0, 4.0) == pytest.approx(1.5)
