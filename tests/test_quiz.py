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


def shown_choices(q) -> tuple[list[str], int]:
    """The choices as a learner reads them (a measured question worked out from its example) and the right one."""
    if q.measured_with:
        s = q.shown(q.example)
        return list(s.choices), s.answer
    return list(q.choices), q.answer


def right_is_the_longest(choices: list[str], answer: int) -> bool:
    """True when the right choice is longer than every other one: a learner who picks the longest wins."""
    return len(choices[answer]) > max(len(c) for i, c in enumerate(choices) if i != answer)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_no_right_choice_is_the_longest(lesson):
    longest = [q.question for q in lesson.quiz if right_is_the_longest(*shown_choices(q))]
    assert not longest, f"{lesson.path.name}: the right choice is the longest in {longest}"


def test_the_length_check_can_fail():
    assert right_is_the_longest(["no", "the right one, spelled out", "nope"], 1)
    assert not right_is_the_longest(["a long wrong answer", "right", "no"], 1)
    assert not right_is_the_longest(["same", "size"], 0)     # a tie gives nothing away


def test_every_wrong_choice_says_why():
    for q in QUESTIONS:
        assert all(w.strip() for i, w in enumerate(q.why) if i != q.answer), q.question
        assert (q.why[q.answer] == "" or q.answer_rule) and q.explanation


def test_choice_order_is_stable_per_learner_and_differs_between_learners():
    assert choice_order(4, "s1:why-batch:0") == choice_order(4, "s1:why-batch:0")
    assert sorted(choice_order(4, "s1:why-batch:0")) == [0, 1, 2, 3]
    orders = {tuple(choice_order(4, f"seed{k}:why-batch:0")) for k in range(40)}
    assert len(orders) > 10
    firsts = Counter(choice_order(4, f"seed{k}:q")[0] for k in range(400))
    assert min(firsts.values()) > 60, firsts   # each choice comes first about a quarter of the time


# Lessons whose quizzes have fixed answers only (lesson 12: its quiz asks what the lesson explains, not its lab's run).
FIXED_ONLY = {"token-budget"}


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda l: l.id)
def test_each_lesson_asks_about_the_learners_own_measurement(lesson):
    measured = [q for q in lesson.quiz if q.measured_with]
    assert measured or lesson.id in FIXED_ONLY, f"{lesson.path.name}: no question uses the learner's lab measurement"
    for q in measured:
        assert q.measures() and {lab for lab, _ in q.measures()} <= set(LAB_IDS)
        assert not MEASURE.search(q.measured_without)


def test_a_measured_question_uses_the_value_or_its_fallback():
    q = next(q for l in LESSONS if l.id == "latency-metrics" for q in l.quiz if q.measured_with)
    values = {("slo_goodput", "top_rate"): "6 requests/s", ("slo_goodput", "ttft_p95_top_rate"): "3.20 s"}
    shown = q.render(lambda lab, name: values.get((lab, name)))
    assert "6 requests/s" in shown.lead and "3.20 s" in shown.lead and "{" not in shown.lead and shown.measured
    assert shown.choices[shown.answer] == "About 5.70 requests/s"          # 0.95 x the learner's 6
    fallback = q.render(lambda lab, name: None)
    assert fallback.lead == q.measured_without and not fallback.measured
    assert fallback.choices[fallback.answer] == "About 7.60 requests/s"    # 0.95 x the example's 8
    half = q.render(lambda lab, name: "3.20 s" if name == "ttft_p95_top_rate" else None)
    assert half.lead == q.measured_without, "a lead with one value missing falls back as a whole"
    assert q.render(lambda lab, name: "n/a").lead == q.measured_without, "text that is no number falls back"


MEASURED = [(l.id, n, q) for l in LESSONS for n, q in enumerate(l.quiz) if q.measured_with]


def right_answer(q, values) -> str:
    s = q.shown(values)
    return s.choices[s.answer]


def answer_depends_on_the_measurement(q) -> bool:
    """Some other plausible measurement (each value 0.6 to 1.6 times the example) makes another right answer."""
    base = right_answer(q, q.example)
    for factor in (0.6, 0.8, 1.25, 1.6):
        for key in q.example:
            try:
                if right_answer(q, {**q.example, key: q.example[key] * factor}) != base:
                    return True
            except (ValueError, ArithmeticError):
                continue
    return False


@pytest.mark.parametrize("lesson_id, n, q", MEASURED, ids=[f"{l}-{n}" for l, n, _ in MEASURED])
def test_the_answer_of_a_measured_question_depends_on_the_measurement(lesson_id, n, q):
    assert set(q.example) == {f"{lab}.{name}" for lab, name in q.measures()}
    for lab, name in q.measures():
        assert f"{q.example[f'{lab}.{name}']:g}" in q.measured_without.replace(",", "") or \
            f"{q.example[f'{lab}.{name}'] / 1000:g}" in q.measured_without, \
            f"the worked fallback states the example's {name}"
    assert answer_depends_on_the_measurement(q), f"{lesson_id} question {n + 1}: same answer whatever was measured"


def test_the_dependence_check_can_fail():
    from course.quizzes import parse_quiz
    fixed = parse_quiz([{"question": "Which?", "answer": 0, "explanation": "Because.",
                         "measured": {"with": "You measured {queueing.mu}.", "without": "Suppose mu = 2.",
                                      "example": {"queueing.mu": 2}, "answers": "five_times_service"},
                         "choices": [{"text": "0.9 mu"}, {"text": "0.5 mu", "why": "No."}]}], "queueing")[0]
    assert not answer_depends_on_the_measurement(fixed)


def test_a_measured_value_reads_with_its_unit():
    from course.quizzes import number
    assert number("21.0 ms") == 21.0 and number("1.23 s") == 1230 and number("2.10 requests/s") == 2.1
    assert number("16") == 16 and number("1,024 tokens") == 1024 and number("—") is None and number(None) is None


def measured_question(**changes) -> dict:
    question = {"question": "At which rate?", "answer": 1, "explanation": "At {eighty_percent:.2f}.",
                "measured": {"with": "You measured {queueing.mu}.", "without": "Suppose mu = 2.",
                             "example": {"queueing.mu": 2}, "answers": "five_times_service"},
                "choices": [{"text": "{sixty_percent:.2f}", "why": "Too low."}, {"text": "{eighty_percent:.2f}"}]}
    return {**question, **changes}


def test_a_measured_question_quotes_its_answers_functions_numbers():
    from course.quizzes import parse_quiz
    q = parse_quiz([measured_question()], "queueing")[0]
    shown = q.render(lambda lab, name: "2.50 requests/s")
    assert shown.measured and shown.choices == ["1.50", "2.00"] and shown.explanation == "At 2.00."
    assert q.render(lambda lab, name: "0").choices == ["1.20", "1.60"], "mu = 0 is unfair: the example's"


@pytest.mark.parametrize("change, reason", [
    ({"choices": [{"text": "{sixty_percent:.2f}", "why": "No."}, {"text": "{nine:.2f}"}]}, "does not give"),
    ({"choices": [{"text": "{= 0.6 * queueing.mu :.2f}", "why": "No."}, {"text": "b"}]}, "formulas are gone"),
    ({"measured": {"with": "You measured {queueing.mu}.", "without": "Suppose mu = 2.", "example": {"queueing.mu": 2},
                   "answers": "no_such_function"}}, "not a function of course/quiz_answers.py"),
    ({"measured": {"with": "You measured {queueing.mu}.", "without": "Suppose mu = 2.", "example": {"queueing.mu": 2},
                   "let": {"x": "queueing.mu"}}}, "are gone"),
    ({"explanation": "At {eighty_percent.nope:.2f}."}, "other than a number by name"),
    ({"answer": "eighty_percent", "choices": [{"text": "{sixty_percent:.2f}", "why": "Too low."},
                                              {"text": "{eighty_percent:.2f}", "why": "Unless."}]}, "not a choice"),
])
def test_a_measured_question_that_cannot_be_worked_out_is_refused(change, reason):
    from course.quizzes import parse_quiz
    with pytest.raises(ValueError, match=reason):
        parse_quiz([measured_question(**change)], "queueing")


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


def measured_positions(lessons) -> list[int]:
    return [n for l in lessons for n, q in enumerate(l.quiz) if q.measured_with]


def test_the_measured_question_is_not_one_template_in_one_place():
    """A learner should not meet the same plug-in question in the same place in every lesson."""
    places = measured_positions(LESSONS)
    assert len(set(places)) >= 3 and max(Counter(places).values()) <= len(LESSONS) // 2, places
    leads = [q.measured_with.split()[:3] for l in LESSONS for q in l.quiz if q.measured_with]
    assert max(Counter(map(tuple, leads)).values()) <= len(LESSONS) // 2, "most leads open the same way"


def test_every_answers_function_is_named_by_one_measured_question():
    from course.quiz_answers import ANSWERS
    named = [(l.id, q.answers.__name__) for l in LESSONS for q in l.quiz if q.measured_with]
    assert sorted(named) == sorted(ANSWERS), "an answers function no question names, or one named twice"
    assert all(ANSWERS[key] is q.answers for key, q in zip(named, (q for l in LESSONS for q in l.quiz
                                                                  if q.measured_with)))
