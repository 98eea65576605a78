"""The quiz cannot be gamed: answers spread over positions, right answers not the longest, choices
shuffled per learner, a reason for every wrong choice, a learner's own measurement where a lab has
one, and only a right first try scores."""
from collections import Counter

import pytest

from lessons.catalog import LAB_IDS, MEASURE, choice_order, load_lessons
from lessons.progress import Attempts

LESSONS, ERRORS = load_lessons()
QUESTIONS = [q for l in LESSONS for q in l.quiz]
MAX_SHARE = 0.4


def position_shares(answers: list[int]) -> dict[int, float]:
    return {pos: n / len(answers) for pos, n in Counter(answers).items()}


def test_answer_positions_are_spread():
    assert ERRORS == [] and len(QUESTIONS) >= 27
    shares = position_shares([q.answer for q in QUESTIONS])
    assert max(shares.values()) <= MAX_SHARE, shares
    assert set(shares) == {0, 1, 2, 3}, "the last choice is right sometimes too"
    assert max(position_shares([0] * 12 + [1] * 8).values()) > MAX_SHARE   # the check can fail


def test_shown_positions_are_spread_for_any_learner():
    for seed in ("a1b2c3d4", "00000000", "learner-7"):
        shown = [choice_order(len(q.choices), f"{seed}:{l.id}:{n}").index(q.answer)
                 for l in LESSONS for n, q in enumerate(l.quiz)]
        assert max(position_shares(shown).values()) <= 0.5, (seed, shown)


def test_the_right_choice_is_not_systematically_the_longest():
    longest = [q for q in QUESTIONS if max(range(len(q.choices)), key=lambda i: len(q.choices[i])) == q.answer]
    assert len(longest) / len(QUESTIONS) <= 0.3, [q.question for q in longest]


def test_every_wrong_choice_says_why():
    for q in QUESTIONS:
        assert all(w.strip() for i, w in enumerate(q.why) if i != q.answer), q.question
        assert q.why[q.answer] == "" and q.explanation


def test_choice_order_is_stable_per_learner_and_differs_between_learners():
    assert choice_order(4, "s1:why-batch:0") == choice_order(4, "s1:why-batch:0")
    assert sorted(choice_order(4, "s1:why-batch:0")) == [0, 1, 2, 3]
    orders = {tuple(choice_order(4, f"seed{k}:why-batch:0")) for k in range(40)}
    assert len(orders) > 10
    firsts = Counter(choice_order(4, f"seed{k}:q")[0] for k in range(400))
    assert min(firsts.values()) > 60, firsts   # each choice comes first about a quarter of the time


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_each_lesson_asks_about_the_learners_own_measurement(lesson):
    measured = [q for q in lesson.quiz if q.measured_with]
    assert measured, f"{lesson.path.name}: no question uses the learner's lab measurement"
    for q in measured:
        assert q.measures() and {lab for lab, _ in q.measures()} <= set(LAB_IDS)
        assert not MEASURE.search(q.measured_without)


def test_a_measured_question_uses_the_value_or_its_fallback():
    q = next(q for l in LESSONS if l.id == "latency-metrics" for q in l.quiz if q.measured_with)
    values = {("slo_goodput", "top_rate"): "8 req/s", ("slo_goodput", "ttft_p95_top_rate"): "3.2 s"}
    lead = q.lead(lambda lab, name: values.get((lab, name)))
    assert "8 req/s" in lead and "3.2 s" in lead and "{" not in lead
    assert q.lead(lambda lab, name: None) == q.measured_without
    half = q.lead(lambda lab, name: "3.2 s" if name == "ttft_p95_top_rate" else None)
    assert half == q.measured_without, "a lead with one value missing falls back as a whole"


def test_only_a_right_first_try_scores():
    a = Attempts(answer=2, tries=[2])
    assert a.first_try_right and a.solved and a.revealed
    a = Attempts(answer=2, tries=[0])
    assert not a.first_try_right and not a.solved and not a.revealed   # no reveal after one wrong try
    a.tries.append(2)
    assert a.solved and not a.first_try_right                          # a retry solves, but does not score
    a = Attempts(answer=2, tries=[0, 1])
    assert a.revealed and not a.solved
    assert not Attempts(answer=0).first_try_right
