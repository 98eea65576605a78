"""Every claim the lessons make shows in its lab's own experiment, and comes out the other way in a
setting where it must not (labs/claims.py holds the claims and their thresholds).

Each claim runs twice per step model, on the simulator only (no model is loaded): once in a setting
where the lesson says it shows, once in its counter-case. Two step models: a calibrated-style model of
a small CPU (the shape `python -m engine calibrate` fits on a 2-core machine, fixed here so the test
does not depend on which machine runs it or on a profile being saved), and the H100 roofline profile.
The experiments are the labs' own functions, so a lab whose verdict is written in advance, or whose
workload cannot show its claim, fails here.
"""
from __future__ import annotations

import functools

import pytest

from engine.sim.simulate import resolve_profile
from engine.core.step_model import StepModel
from labs import claims
from labs.costs import experiment as costs
from labs.dynamic_batching import experiment as dynamic
from labs.knee import experiment as knee
from labs.queueing import experiment as queueing
from labs.runs import frames
from labs.scheduler_orders import experiment as orders
from labs.slo_goodput import experiment as slo
from labs.static_vs_continuous import experiment as svc
from labs.tail import experiment as tail
from labs.why_batch import experiment as why_batch

SHOWN, NOT_SHOWN, UNDECIDED = claims.SHOWN, claims.NOT_SHOWN, claims.UNDECIDED

# A 2-core CPU running SmolLM2 in float32, as calibrated here (a fixed cost per step, a cost per row,
# a cost per key read): what decides every claim is this shape, not the exact figures.
CPU = StepModel(fixed_ms=67.6, knots=(), token_ms=(3.53,), sample_ms=0.0, decode_read_ms=7.97,
                prefill_pair_ms=0.0, label="a 2-core CPU's calibrated shape (fixed for the test)")
H100 = resolve_profile("h100-sxm:llama-3.1-8b").step_model
MODELS = {"cpu": CPU, "h100": H100}


# ----------------------------------------------------------------------------- one verdict per claim and setting
# Each function runs the lab's experiment on the simulator and returns the lab's verdict.


def why_batch_verdict(step_model, context: int = why_batch.CONTEXT):
    rows = why_batch.predicted_scaling(step_model, why_batch.BATCH_SIZES, context)
    return why_batch.amortization_verdict(why_batch.scaling_table(rows))


def svc_verdicts(step_model, workload: str):
    runs = svc.simulated_modes(step_model, workload)
    s, c = (svc.mode_summary(runs[m][0], svc.SLOTS) for m in ("static", "continuous"))
    return {v.claim.id: v for v in svc.verdicts(s, c, workload)}


def stall_verdict(step_model, long_prompt: int = costs.LONG_PROMPT):
    runs = costs.simulated_stall_runs(step_model, long_prompt)
    return costs.stall_verdict(costs.stall_summary(runs["off"][0]), costs.stall_summary(runs["on"][0]), long_prompt)


def kv_verdict(step_model, capacity: int):
    res, _ = costs.simulated_kv_run(step_model, capacity)
    return costs.kv_verdict(costs.kv_summary(res), capacity)


# A small model's decode step on a fast accelerator: a fixed 0.2 ms, whatever the batch.
FAST = StepModel(fixed_ms=costs.FAST_STEP_MS, knots=(), token_ms=(0.0,), sample_ms=0.0, decode_read_ms=0.0,
                 prefill_pair_ms=0.0, label="a 0.2 ms step")


def scheduling_verdict(step_model):
    numbers = costs.scheduling_numbers(costs.scheduling_step_ms(step_model))
    return costs.scheduling_verdict(numbers, step_model.label)


def goodput_verdict(step_model, ttft_s: float, tpot_s: float):
    table = slo.goodput_table(slo.simulated_rate_runs(step_model, slo.rates_for(step_model)), ttft_s, tpot_s)
    return slo.falls_verdict(table, ttft_s, tpot_s)


# The slower simulations are shared by the claims that read them (one queueing sweep, one tail run,
# one set of orders per step model and setting): the verdicts only read them.
@functools.cache
def queue_points(step_model):
    mu, runs = queueing.simulated_capacity_and_runs(step_model, (0.3, 0.5, 0.7, 0.9, 1.2))
    return queueing.points_table(runs, mu), mu


def explodes_verdict(step_model, rhos):
    points, mu = queue_points(step_model)
    return queueing.explodes_verdict(points[points["rho"].isin(rhos)], mu)


def overload_verdict(step_model, rhos):
    points, _ = queue_points(step_model)
    return queueing.overload_verdict(points[points["rho"].isin(rhos)])


def knee_verdict(step_model, values, requests=None):
    return knee.knee_verdict(knee.knee_table(knee.simulated_runs(step_model, values, requests=requests)))


@functools.cache
def tail_verdicts(step_model, share: float, bursty: bool, load: float):
    rate = tail.rate_for(step_model, share, load)
    reqs, _ = frames(tail.simulated_tail_run(step_model, rate, share, bursty)[0])
    return {"tail_has_a_cause": tail.cause_verdict(reqs), "tail_by_window": tail.window_verdict(reqs)}


@functools.cache
def order_runs(step_model, load: float, names: tuple, requests: int):
    return orders.simulated_order_runs(step_model, orders.rate_for(step_model, load), list(names), requests=requests)


def favour_verdict(step_model, load: float):
    return orders.favour_verdict(orders.tenant_table(order_runs(step_model, load, tuple(orders.ORDER_NAMES), 200)))


def starve_verdict(step_model, load: float):
    return orders.starve_verdict(order_runs(step_model, load, ("fcfs", "sjf"), orders.SIM_REQUESTS))


def dynamic_verdict(step_model, load: float):
    rate = dynamic.rate_for(step_model, load)
    return dynamic.waiting_verdict(dynamic.wait_table(dynamic.simulated_wait_runs(step_model, rate)))


# The H100 serves an 8B model in milliseconds: its SLO targets are its own (as the Playground sizes its
# presets per engine), tight enough for its queue to matter.
SLO = {"cpu": (2.0, 0.1), "h100": (0.3, 0.02)}
LOOSE = (600.0, 10.0)

# claim -> (setting where it shows, counter-case, the counter-case's expected outcome); each setting is a
# function of (step model name, step model) returning the verdict.
CASES = {
    "batching_amortizes": (lambda n, m: why_batch_verdict(m),
                           lambda n, m: why_batch_verdict(m, 32768), NOT_SHOWN),
    "continuous_beats_static": (lambda n, m: svc_verdicts(m, "short_long")["continuous_beats_static"],
                                lambda n, m: svc_verdicts(m, "offline_equal")["continuous_beats_static"], NOT_SHOWN),
    "static_fine_offline": (lambda n, m: svc_verdicts(m, "offline_equal")["static_fine_offline"],
                            lambda n, m: svc_verdicts(m, "short_long")["static_fine_offline"], NOT_SHOWN),
    "long_prompt_stalls": (lambda n, m: stall_verdict(m), lambda n, m: stall_verdict(m, 64), NOT_SHOWN),
    "scheduling_is_small": (lambda n, m: scheduling_verdict(m), lambda n, m: scheduling_verdict(FAST), NOT_SHOWN),
    "small_kv_preempts": (lambda n, m: kv_verdict(m, 1024), lambda n, m: kv_verdict(m, costs.KV_DEFAULT), NOT_SHOWN),
    "goodput_falls": (lambda n, m: goodput_verdict(m, *SLO[n]), lambda n, m: goodput_verdict(m, *LOOSE), NOT_SHOWN),
    "queueing_explodes": (lambda n, m: explodes_verdict(m, (0.5, 0.9)),
                          lambda n, m: explodes_verdict(m, (0.3, 0.5)), NOT_SHOWN),
    "overload_shows_in_waiting": (lambda n, m: overload_verdict(m, queueing.OVERLOAD_RHOS),
                                  lambda n, m: overload_verdict(m, (0.5, 0.7)), NOT_SHOWN),
    "knee_below_max": (lambda n, m: knee_verdict(m, [1, 4, 16, 32, 128] if n == "cpu" else [1, 64, 256, 512, 1024]),
                       lambda n, m: knee_verdict(m, [1, 4, 16, 64], requests=8), UNDECIDED),
    "tail_has_a_cause": (lambda n, m: tail_verdicts(m, 0.1, True, tail.LOAD)["tail_has_a_cause"],
                         lambda n, m: tail_verdicts(m, 0.0, False, 0.3)["tail_has_a_cause"], NOT_SHOWN),
    "tail_by_window": (lambda n, m: tail_verdicts(m, 0.1, True, tail.LOAD)["tail_by_window"],
                       lambda n, m: tail_verdicts(m, 0.0, False, 0.3)["tail_by_window"], NOT_SHOWN),
    "orders_favour_someone": (lambda n, m: favour_verdict(m, orders.LOAD), lambda n, m: favour_verdict(m, 0.3),
                              NOT_SHOWN),
    "sjf_starves_long": (lambda n, m: starve_verdict(m, orders.LOAD), lambda n, m: starve_verdict(m, 1.3), UNDECIDED),
    "waiting_to_batch": (lambda n, m: dynamic_verdict(m, dynamic.LOAD),
                         lambda n, m: dynamic_verdict(m, 3.0), NOT_SHOWN),
}
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
    assert w.outcome == counter_outcome, f"{claim} counter-case on {model}: {w.outcome}: {w.words}"
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
    from ui.questions import ASKS
    b = CLAIM_BATCH
    assert f"{b} sequences takes far less than {b} times" in claims.CLAIMS["batching_amortizes"].text
    assert claims.CLAIMS["batching_amortizes"].metric == f"step time at batch {b} ÷ step time at batch 1"
    assert f"a step of {b} sequences" in ASKS["why_batch"].text
    assert f"slowest {TAIL_SHARE:.0%} ÷" in claims.CLAIMS["tail_has_a_cause"].metric
    scheduling = claims.CLAIMS["scheduling_is_small"]
    assert "with a thousand requests waiting" in " ".join(scheduling.text.split()) and SCHED_WAITING == 1000
    assert "at most a fifth of the step" in scheduling.text and scheduling.threshold == 0.20


def test_the_questions_default_words_are_the_labs_defaults():
    """A lesson shows a lab's question before the lab has filled in its settings: the words it
    shows then are the lab's own first settings."""
    from analysis.knee import KNEE_SHARE
    from ui.questions import ASKS
    assert ASKS["why_batch_knee"].defaults == {"share": f"{KNEE_SHARE:.0%}"}
    utilizations, waits = queueing.UTILIZATIONS, dynamic.WAITS_MS
    assert ASKS["queueing"].defaults == {"lo": f"{min(utilizations):.0%}", "hi": f"{max(utilizations):.0%}"}
    assert ASKS["dynamic_batching"].defaults == {"first": f"{waits[0]:,g}", "last": f"{waits[-1]:,g}"}
    assert ASKS["costs_kv"].defaults == {"capacity": f"{costs.KV_SMALL:,}"}
