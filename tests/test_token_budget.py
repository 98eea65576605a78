"""The token budget lab's computations: each stream's longest gap read off the steps, the outcome the
prediction is scored on, the claim's verdict in each of its ways, and where each goal would set the budget."""
import math

import pandas as pd
import pytest

from course import claims
from labs.token_budget import experiment as lab


def steps(*rows):
    return pd.DataFrame([{"t_end_s": t, "members": members} for t, members in rows])


def test_longest_gap_starts_at_the_last_prefill_step():
    table = steps((0.1, [("a", "prefill", 64)]),
                  (0.3, [("a", "prefill", 36), ("b", "prefill", 20)]),   # a's last chunk: its first token
                  (0.4, [("a", "decode", 1), ("b", "decode", 1)]),
                  (1.4, [("a", "decode", 1), ("b", "decode", 1), ("c", "prefill", 900)]),
                  (1.5, [("a", "decode", 1), ("c", "decode", 1)]))
    gaps = lab.longest_gaps(table)
    assert gaps["a"] == pytest.approx(1.0) and gaps["b"] == pytest.approx(1.0) and gaps["c"] == pytest.approx(0.1)
    # a request with a single token has no gap
    assert "d" not in lab.longest_gaps(steps((0.1, [("d", "prefill", 10)])))


def table(ttft, stall, largest=(128, 1024), budgets=(128, 1024)):
    rows = [{"budget": b, "ttft_p50_s": t / 2, "ttft_p95_s": t, "stall_p95_ms": g, "itl_p95_ms": g / 2,
             "itl_p99_ms": g, "tpot_p95_ms": 20.0, "work_tok_s": w, "max_step_tokens": m, "chunked_prompts": 3,
             "requests": 48}
            for b, t, g, m, w in zip(budgets, ttft, stall, largest, (100.0, 120.0))]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("ttft, stall, expected", [
    ((2.0, 1.0), (100, 400), lab.OUTCOMES[0]),
    ((2.0, 1.95), (100, 400), lab.OUTCOMES[1]),
    ((2.0, 1.0), (100, 105), lab.OUTCOMES[2]),
    ((2.0, 2.05), (100, 95), lab.OUTCOMES[3]),
    ((1.0, 2.0), (100, 400), lab.OUTCOMES[4]),
    ((2.0, 1.0), (400, 100), lab.OUTCOMES[4]),
])
def test_outcome_reads_both_directions(ttft, stall, expected):
    assert lab.outcome(table(ttft, stall)) == expected


def test_the_verdict_comes_out_each_way_with_its_own_words():
    shown = lab.budget_verdict(table((2.0, 1.0), (100, 400)))
    assert shown.outcome == claims.SHOWN and shown.value == pytest.approx(4.0)
    flat = lab.budget_verdict(table((2.0, 2.0), (100, 100), largest=(96, 96)))
    assert flat.outcome == claims.NOT_SHOWN and "never bound" in flat.words
    no_ttft = lab.budget_verdict(table((2.0, 1.95), (100, 400)))
    assert no_ttft.outcome == claims.NOT_SHOWN and "finish a prompt no sooner" in no_ttft.words
    no_gap = lab.budget_verdict(table((2.0, 1.0), (100, 150)))
    assert no_gap.outcome == claims.NOT_SHOWN and "did not grow as much" in no_gap.words
    rose = lab.budget_verdict(table((2.0, 3.0), (100, 400)))
    assert rose.outcome == claims.NOT_SHOWN and "TTFT even rose" in rose.words and "100 → 120" in rose.words
    assert len({shown.words, flat.words, no_ttft.words, no_gap.words, rose.words}) == 5
    one = lab.budget_verdict(table((2.0,), (100,), largest=(128,), budgets=(128,)))
    assert one.outcome == claims.UNDECIDED and math.isnan(one.value)


def test_each_goal_is_set_from_the_sweep():
    t = pd.DataFrame([{"budget": b, "ttft_p95_s": ttft, "stall_p95_ms": gap, "work_tok_s": work}
                      for b, ttft, gap, work in ((128, 3.0, 100, 90.0), (256, 2.5, 140, 95.0),
                                                 (512, 2.0, 300, 99.0), (1024, 1.9, 600, 100.0))])
    advice = lab.advice(t)
    assert "**Interactive chat**" in advice["chat"] and ": 256 tokens" in advice["chat"]   # within 1.5x of 100 ms
    assert ": 512 tokens" in advice["batch"] and "within 2%" in advice["batch"]          # 99 is within 2% of 100
    assert "both" not in advice


def test_the_lessons_picture_shows_the_trade_on_the_recorded_model():
    from course.pictures_budget import BUDGETS, budget_gaps, budget_run
    small, large = (budget_run(b) for b in BUDGETS)
    assert small["chunks"] > 1 == large["chunks"], "the small budget cuts the prompt, the large one does not"
    assert small["ttft"] > large["ttft"] and small["longest_gap"] < large["longest_gap"]
    picture = budget_gaps()
    assert f"took {small['chunks']} steps" in picture.alt and "took 1 step " in picture.alt
    assert len(picture.figure.data) == 2 and all(len(t.x) == len(t.y) > 10 for t in picture.figure.data)


@pytest.mark.parametrize("figure", [lab.trade_off, lab.by_budget])
def test_the_charts_draw_no_data_the_simulation_and_the_measurement(figure):
    import plotly.graph_objects as go
    empty = figure(None, None)
    assert isinstance(empty, go.Figure) and empty.layout.title.text
    sim = table((2.0, 1.0), (100, 400))
    alone = figure(None, sim)
    assert alone.data and all("simulated" in t.name for t in alone.data)
    both = figure(table((2.1, 1.1), (110, 420)), sim)
    names = [t.name for t in both.data]
    assert any("measured" in n for n in names) and any("simulated" in n for n in names)
    go.Figure(both)        # every property valid
