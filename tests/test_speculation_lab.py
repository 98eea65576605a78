"""The speculation lab's own computations: the break-even of a step with guesses, the simulator's
acceptance chance fitted to a measured count, and the words for greedy identity."""
import math

import pandas as pd
import pytest

from engine.core.step_model import StepModel
from labs.speculation import break_even, experiment as lab


def model(fixed_ms: float, row_ms: float) -> StepModel:
    return StepModel(fixed_ms=fixed_ms, knots=(), token_ms=(row_ms,), sample_ms=0.0, decode_read_ms=0.0,
                     prefill_pair_ms=0.0, label="a test step model")


def test_extra_rows_are_free_when_the_step_is_its_weight_read_and_cost_k_plus_1_when_it_is_arithmetic():
    k = 4
    assert break_even.step_cost_ratio(model(20.0, 0.0), 64, k, 100) == pytest.approx(1.0)      # all fixed: rows free
    assert break_even.step_cost_ratio(model(0.0, 1.0), 64, k, 100) == pytest.approx(k + 1)    # all per row
    between = break_even.step_cost_ratio(model(20.0, 1.0), 1, k, 100), break_even.step_cost_ratio(model(20.0, 1.0), 64, k, 100)
    assert 1 < between[0] < between[1] < k + 1, "a bigger batch is nearer the arithmetic bound"


@pytest.mark.parametrize("chance", [0.0, 0.15, 0.55, 0.9, 1.0])
def test_the_fitted_chance_makes_the_measured_tokens_per_step(chance):
    k = 4
    accepted = sum(chance ** i for i in range(1, k + 1))
    assert lab.chance_for(accepted, k) == pytest.approx(chance, abs=1e-6)
    assert math.isnan(lab.chance_for(math.nan, k))


def table(differ):
    return pd.DataFrame([{"workload": "copy", "batch": 1, "pairs": 2, "differ": []},
                         {"workload": "copy", "batch": 64, "pairs": 2, "differ": differ}])


def test_identity_words_name_the_case_request_and_position_that_differ():
    same, words = lab.identity_words(table([]))
    assert same and words.startswith("in 4 pairs of runs every request wrote the same tokens")
    same, words = lab.identity_words(table([(1, "r19", 1, [125], [124, 1]), (2, "r19", 1, [125], [124, 1])]))
    assert not same and "2 request(s)" in words
    assert "copies, batch 64, pair 1: request r19 from output token 2 (its prompt ran in chunks of 125 tokens " \
           "without speculation, 124 + 1 with)" in words
    assert "had its prompt split differently, which alone can change a bf16 token" in words
    same, words = lab.identity_words(table([(1, "r3", 7, [40], [40])]))
    assert not same and "a difference is a defect to report" in words and "split differently" not in words


def test_prompt_chunks_follow_a_request_through_the_steps():
    steps = [{"members": [["r1", "prefill", 124], ["r2", "decode", 1]]}, {"members": [["r1", "prefill", 1]]},
             {"members": [["r1", "decode", 5]]}]
    assert lab.prompt_chunks(steps, "r1") == [124, 1] and lab.prompt_chunks(steps, "r2") == []


def test_first_difference_reads_stored_and_listed_tokens():
    assert lab.first_difference("198 67 11", "198 1787 11") == 1
    assert lab.first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert lab.first_difference([1, 2], [1, 2, 3]) == 2


def test_the_big_batch_question_is_answered_by_the_ratio():
    assert break_even.direction(0.61) == "slower" and break_even.direction(2.4) == "faster"
    assert break_even.direction(1.03) == "about the same (within 5%)"
