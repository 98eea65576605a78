"""The Playground's refresh pace: every view.REFRESH_S where a refresh is cheap, less often where it
costs more, so that the refreshes' share of a core stays near pace.SHARE (playground/pace.py)."""
from __future__ import annotations

import math
import random

from playground.pace import FIRST, SAMPLES, SETTLE, SHARE, SLOWEST_S, STEP_S, RefreshPace, interval_said
from playground.view import REFRESH_S, TIME_CHARTS_EVERY_S


def pace_of(*costs: float) -> RefreshPace:
    pace = RefreshPace()
    for c in costs:
        pace.record(c)
    return pace


def test_the_page_refreshes_at_its_fastest_until_refreshes_were_measured():
    assert pace_of(*[1.0] * (FIRST - 1)).interval_s() == REFRESH_S
    assert pace_of(*[1.0] * FIRST).interval_s() == SLOWEST_S


def test_cheap_refreshes_keep_the_fastest_pace_and_costly_ones_stop_at_the_slowest():
    cheap = pace_of(*[0.5 * SHARE * REFRESH_S] * SAMPLES)
    assert cheap.interval_s() == REFRESH_S
    assert cheap.time_charts_every_s() == TIME_CHARTS_EVERY_S
    costly = pace_of(*[10 * SHARE * SLOWEST_S] * SAMPLES)
    assert costly.interval_s() == SLOWEST_S
    assert costly.time_charts_every_s() == TIME_CHARTS_EVERY_S * SLOWEST_S / REFRESH_S   # still every other refresh


def test_the_interval_keeps_the_share_under_its_bound_and_is_no_slower_than_that_needs():
    """After every refresh of random runs whose cost drifts: whole quarter seconds, the share held
    (or the interval at its slowest), and no quarter second faster would have held it with room."""
    rng = random.Random(7)
    seen = set()
    for _ in range(200):
        pace, level = RefreshPace(), rng.uniform(0.0, 0.1)
        for _ in range(rng.randint(FIRST, 4 * SAMPLES)):
            level = min(0.12, max(0.0, level + rng.uniform(-0.01, 0.01)))
            pace.record(level * rng.uniform(0.8, 1.2))
            every, cost = pace.interval_s(), pace.cost_s()
            seen.add(every)
            assert REFRESH_S <= every <= SLOWEST_S
            assert abs(every / STEP_S - round(every / STEP_S)) < 1e-9         # whole quarter seconds
            if cost is None:
                continue
            assert every == SLOWEST_S or cost / every <= SHARE + 1e-12        # the share holds, or it is capped
            assert every == REFRESH_S or cost / (every - STEP_S) > SHARE * SETTLE   # no faster one holds it with room
    assert seen == {REFRESH_S + k * STEP_S for k in range(round((SLOWEST_S - REFRESH_S) / STEP_S) + 1)}


def test_a_cost_near_a_boundary_does_not_switch_the_interval_back_and_forth():
    boundary = 0.75 * SHARE                        # 0.75 s holds it exactly; a little more needs 1 s
    pace = pace_of(*[boundary * 1.02] * SAMPLES)
    assert pace.interval_s() == 1.0
    switches, last = 0, 1.0
    for i in range(40):
        pace.record(boundary * (0.98 if i % 2 else 1.02))
        switches += pace.interval_s() != last
        last = pace.interval_s()
    assert switches == 0
    for _ in range(SAMPLES):                     # clearly cheaper: faster again
        pace.record(0.5 * boundary)
    assert pace.interval_s() == 0.5


def test_refreshes_that_alternate_between_two_costs_keep_one_interval():
    """Every other refresh rebuilds the time charts and costs more: the interval is the one for
    their mean, and stays there (each switch would redraw the whole page)."""
    cheap, dear = 0.5 * SHARE, 0.9 * SHARE        # alone, each would call for a different interval
    pace = pace_of(*[cheap, dear] * SAMPLES)
    held = pace.interval_s()
    assert held == math.ceil((cheap + dear) / 2 / SHARE / STEP_S) * STEP_S
    for i in range(40):
        pace.record(cheap if i % 2 else dear)
        assert pace.interval_s() == held


def test_a_slow_refresh_or_two_do_not_move_the_pace():
    assert pace_of(*[0.01] * (SAMPLES - 1), 5.0).interval_s() == REFRESH_S
    assert pace_of(*[0.01] * (SAMPLES - 2), 5.0, 5.0).interval_s() == REFRESH_S


def test_the_page_says_how_often_it_refreshes_and_why_from_the_measured_cost():
    assert pace_of().words() == f"The charts refresh every {REFRESH_S:g} s."
    fast = pace_of(*[0.02] * SAMPLES).words()
    assert f"every {REFRESH_S:g} s" in fast and "20 ms" in fast and "would take" not in fast
    slow = pace_of(*[0.07] * SAMPLES).words()
    assert f"every {SLOWEST_S:g} s" in slow and "70 ms" in slow and "at least 14% of a core" in slow


def test_the_interval_the_page_says_reads_back_as_the_interval_it_keeps():
    for pace in (pace_of(), pace_of(*[0.02] * SAMPLES), pace_of(*[0.07] * SAMPLES), pace_of(*[0.04] * SAMPLES)):
        assert interval_said("Real engine. " + pace.words()) == pace.interval_s()
    assert interval_said("Real engine.") is None
