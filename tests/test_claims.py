"""Every claim the lessons make shows in its lab's own experiment, and comes out the other way in a
setting where it must not (course/claims.py holds the claims and their thresholds).

Each claim runs twice per step model, on the simulator only (no model is loaded): once in a setting
where the lesson says it shows, once in its counter-case. Two step models: a calibrated-style model of
a small CPU (the shape `python -m engine calibrate` fits on a 2-core machine, fixed here so the test
does not depend on which machine runs it or on a profile being saved), and the H100 roofline profile.
The experiments are the labs' own functions, so a lab whose verdict is written in advance, or whose
workload cannot show its claim, fails here.
"""
from __future__ import annotations

import pytest

from course import claims
from engine.sim.simulate import resolve_profile
from engine.core.step_model import StepModel
from labs.claim_cases import CASES, COUNTER_EXPECTED, costs, dynamic, queueing

SHOWN, NOT_SHOWN, UNDECIDED = claims.SHOWN, claims.NOT_SHOWN, claims.UNDECIDED

# A 2-core CPU running SmolLM2 in float32, as calibrated here (a fixed cost per step, a cost per row,
# a cost per key read): what decides every claim is this shape, not the exact figures.
CPU = StepModel(fixed_ms=67.6, knots=(), token_ms=(3.53,), sample_ms=0.0, decode_read_ms=7.97,
                prefill_pair_ms=0.0, label="a 2-core CPU's calibrated shape (fixed for the test)")
H100 = resolve_profile("h100-sxm:llama-3.1-8b").step_model
MODELS = {"cpu": CPU, "h100": H100}


# Where a claim does not show on a step model at the lab's own workload, and why (the table in the
# report says so too): on the H100 a 1,024-token prompt prefills in ~30 ms, so long prompts make no
# tail of their own; the tail there is the bursty tenant's, which the window claim shows.
EXPECTED = {("tail_has_a_cause", "h100"): NOT_SHOWN}


def test_every_claim_has_a_case_and_the_table_is_consistent():
    # the cluster lab's claims run on a simulated cluster of GPU profiles: tests/test_cluster_claims.py
    cluster = {c.id for c in claims.for_lab("cluster")}
    assert set(CASES) == set(claims.CLAIMS) - cluster, "each claim is tested, and each test is a claim"
    from lessons.catalog import LAB_IDS, load_lessons
    lessons = {lesson.id for lesson in load_lessons()[0]}
    for c in claims.CLAIMS.values():
        assert c.lab in LAB_IDS and c.lesson in lessons, c
        assert c.text and c.metric and c.counter and c.threshold_text()


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("claim", list(CASES))
def test_the_claim_shows_and_its_counter_case_does_not(claim, model):
    shows, counter, counter_outcome = CASES[claim]
    v = shows(model, MODELS[model])
    assert v.claim.id == claim
    assert v.outcome == EXPECTED.get((claim, model), SHOWN), f"{claim} on {model}: {v.outcome}: {v.words}"
    assert v.words and (v.outcome != SHOWN or claims.CLAIMS[claim].passes(v.value)), "shown means past the threshold"
    w = counter(model, MODELS[model])
    expected = COUNTER_EXPECTED.get((claim, model), counter_outcome)
    assert w.outcome == expected, f"{claim} counter-case on {model}: {w.outcome}: {w.words}"
    assert w.words and (w.outcome == v.outcome or w.words != v.words), "each outcome has its own words"


def test_judge_words_follow_the_outcome():
    c = "queueing_explodes"
    assert claims.judge(c, 9.0, "yes", "no").outcome == SHOWN
    assert claims.judge(c, 2.0, "yes", "no").outcome == NOT_SHOWN
    assert claims.judge(c, 9.0, "yes", "no", extra_test=False).outcome == NOT_SHOWN
    v = claims.judge(c, 9.0, "yes", "no", "too few requests")
    assert v.outcome == UNDECIDED and v.words == "too few requests"
    assert claims.judge(c, float("nan"), "yes", "no").outcome == NOT_SHOWN


def test_a_decision_beside_a_short_step_is_worded_by_its_size():
    """The scheduling claim's sentence for a 0.2 ms step: a decision shorter than the step is a share
    of it ("0 times the step" was printed for 0.07 ms), a longer one so many times the step."""
    assert costs.share_of_step(0.07, 0.2) == "35% of the step"
    assert costs.share_of_step(0.3, 0.2) == "1.5 times the step"
    assert costs.share_of_step(4.0, 0.2) == "20 times the step"
    numbers = {"scheduler_ms": 0.07, "running": 51, "waiting": 1000, "step_ms": 40.0, "share": 0.07 / 40}
    words = costs.scheduling_verdict(numbers, "the step model").words
    assert "would be 35% of the step" in words and "0 times" not in words


def test_the_claims_words_quote_the_numbers_their_labs_run():
    """The claims are written in words (a lesson reads them); the numbers in those words are the
    labs' own: a changed constant fails here instead of leaving a sentence behind."""
    from labs.costs.experiment import SCHED_WAITING
    from labs.tail.experiment import TAIL_SHARE
    from labs.why_batch.experiment import CLAIM_BATCH
    from course.predictions import ASKS
    b = CLAIM_BATCH
    amortizes = claims.CLAIMS["batching_amortizes"]
    assert f"a step of {b} sequences makes more tokens per second than a step of 1" in amortizes.text
    assert amortizes.metric == f"tokens/s at batch {b} ÷ tokens/s at batch 1" and amortizes.above
    assert f"at least {amortizes.threshold:g} times as many" in amortizes.text, "the words say the threshold"
    assert f"a step of {b} sequences" in ASKS["why_batch"].text
    assert f"slowest {TAIL_SHARE:.0%} ÷" in claims.CLAIMS["tail_has_a_cause"].metric
    scheduling = claims.CLAIMS["scheduling_is_small"]
    assert "with a thousand requests waiting" in " ".join(scheduling.text.split()) and SCHED_WAITING == 1000
    assert "at most a fifth of the step" in scheduling.text and scheduling.threshold == 0.20


def test_the_questions_default_words_are_the_labs_defaults():
    """A lesson shows a lab's question before the lab has filled in its settings: the words it
    shows then are the lab's own first settings."""
    from analysis.knee import KNEE_SHARE
    from course.predictions import ASKS
    assert ASKS["why_batch_knee"].defaults == {"share": f"{KNEE_SHARE:.0%}"}
    utilizations, waits = queueing.UTILIZATIONS, dynamic.WAITS_MS
    assert ASKS["queueing"].defaults == {"lo": f"{min(utilizations):.0%}", "hi": f"{max(utilizations):.0%}"}
    assert ASKS["dynamic_batching"].defaults == {"first": f"{waits[0]:,g}", "last": f"{waits[-1]:,g}"}
    assert ASKS["costs_kv"].defaults == {"capacity": f"{costs.KV_SMALL:,}"}


def test_the_knee_is_undecided_where_the_sweep_cannot_tell():
    """A knee at the largest setting tried says only that it lies there or beyond: undecided, not 'not
    shown'; so does a sweep with fewer requests than its larger settings hold."""
    from labs.claim_cases import knee, knee_verdict
    climbing = knee_verdict(CPU, [1, 2, 4, 8])
    assert climbing.outcome == UNDECIDED and "largest setting tried" in climbing.words, climbing.words
    few = knee_verdict(CPU, [1, 4, 16, 64], requests=8)
    assert few.outcome == UNDECIDED and "only 8 requests" in few.words, few.words
    capped = knee_verdict(CPU, knee.VALUES, limits={"max_num_batched_tokens": 8})
    assert capped.outcome == NOT_SHOWN and "never held more than 8" in capped.words, capped.words


def test_a_run_that_strays_from_the_step_model_unevenly_is_undecided():
    """The noise check compares the run with this machine's step model, not only with its own repeats: a
    batch-8 step that ran twice as slow as the model says, beside a batch-1 step on time, means the machine's
    load changed between them, whatever the ratio came out."""
    import pandas as pd
    from labs.why_batch import experiment as why_batch
    model = StepModel(fixed_ms=10.0, knots=(), token_ms=(0.5,), sample_ms=0.0, decode_read_ms=0.0,
                      prefill_pair_ms=0.0, label="a test step model")
    on_time = {b: model.decode_ms(b, why_batch.CONTEXT) for b in (1, 8)}

    def table(ms):
        return pd.DataFrame([{"batch": b, "step_ms": t, "tokens_per_s": 1000 * b / t} for b, t in ms.items()])
    assert why_batch.amortization_verdict(table(on_time), model).outcome == SHOWN
    strayed = why_batch.amortization_verdict(table({1: on_time[1], 8: 2 * on_time[8]}), model)
    assert strayed.outcome == UNDECIDED and "step model" in strayed.words, strayed.words
    assert why_batch.amortization_verdict(table({1: on_time[1], 8: 2 * on_time[8]})).outcome == SHOWN, \
        "without the step model only the repeats can say"


@pytest.mark.parametrize("model", list(MODELS))
def test_the_knee_labs_slo_targets_start_where_they_separate_the_settings(model):
    """The knee lab's SLO sliders start from the machine's own step model: some settings meet the targets
    and some miss them, and the most goodput is at the knee or below it, never past it (on the H100 the
    knee is the largest setting: its decode steps hardly grow over the sweep, so only TTFT separates).
    A fixed 250 ms / 30 s, a 2-core CPU's numbers, is met by every request of every setting on the H100."""
    from labs.claim_cases import knee
    tpot_ms, ttft_s = knee.slo_defaults(MODELS[model])
    table = knee.knee_table(knee.simulated_runs(MODELS[model], knee.VALUES), ttft_s, tpot_ms / 1000)
    best = int(table.loc[table.goodput_req_s.idxmax()].max_num_seqs)
    assert table.goodput_req_s.max() > 0 and table.met_share.min() < 0.5, table
    assert best <= knee.find_knee(table), f"best goodput at {best}, past the knee"
