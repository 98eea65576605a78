"""Each claim of course/claims.py in a setting where its lesson says it shows, and in its counter-case, where
it must come out otherwise: the labs' own experiments on the simulator (no model is loaded).

tests/test_claims.py runs every case on two step models; `python -m tools.check_claims` prints the
counter-cases beside the real engine's and the simulator's verdicts. A case is a function of (kind,
step model), kind "cpu" or "h100": a few settings differ between a small CPU and an H100 (the knee's
sweep, the SLO targets). Lesson 10's claims run on a simulated cluster of GPU replicas instead
(`CLUSTER_CASES`, tests/test_cluster_claims.py). No Streamlit here.
"""
from __future__ import annotations

import functools

from course import claims
from engine.core.step_model import StepModel
from labs.benchmarking import experiment as bench
from labs.cluster import experiment as cluster
from labs.costs import experiment as costs
from labs.dynamic_batching import experiment as dynamic
from labs.knee import experiment as knee
from labs.kv_capacity import experiment as kv_capacity
from labs.queueing import experiment as queueing
from labs.runs import frames
from labs.scheduler_orders import experiment as orders
from labs.slo_goodput import experiment as slo
from labs.speculation import experiment as spec
from labs.speculation import break_even as spec_break_even
from labs.static_vs_continuous import experiment as svc
from labs.tail import experiment as tail
from labs.token_budget import experiment as token_budget
from labs.why_batch import experiment as why_batch

SHOWN, NOT_SHOWN, UNDECIDED = claims.SHOWN, claims.NOT_SHOWN, claims.UNDECIDED


# ----------------------------------------------------------------------------- one verdict per claim and setting
# Each function runs the lab's experiment on the simulator and returns the lab's verdict.


LONGEST_CONTEXT = 131072   # Llama-3.1's longest context: each sequence's own attention is then most of a CPU's step


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


def pool_caps_verdict(step_model, pool: int):
    table = kv_capacity.pool_table(kv_capacity.simulated_pool_runs(step_model, (pool,)))
    return kv_capacity.caps_verdict(table.to_dict("records")[0])


def prefix_verdict(step_model, workload: str):
    runs = kv_capacity.simulated_prefix_runs(step_model, workload)
    return kv_capacity.prefix_verdict(kv_capacity.prefix_summary(runs["off"][0]),
                                      kv_capacity.prefix_summary(runs["on"][0]), workload)


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


def knee_verdict(step_model, values, requests=None, limits=None):
    return knee.knee_verdict(knee.knee_table(knee.simulated_runs(step_model, values, requests=requests, limits=limits)))


# The knee's counter-case: a token budget of 8 a step, which (as in vLLM, where running requests take
# the budget first and a waiting one is admitted only with budget left) holds every setting's batch at 8.
COUNTER_BUDGET = {"max_num_batched_tokens": 8}


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


@functools.cache
def spec_table(step_model, big: int):
    """The speculation lab's cases on the simulator, its large batch `big` (the simulator's assumed acceptance)."""
    return spec.case_table(spec.simulated_runs(step_model, spec.K, big))


def spec_big_batch(kind: str) -> int:
    """The speculation lab's large batch on a step model: its own on a CPU; on the H100, a batch past the
    roofline's ridge (its batch of 64 is still bound by reading the weights, where speculation pays)."""
    from engine.sim.roofline import DEVICES
    return spec.BIG if kind == "cpu" else spec_break_even.past_ridge(DEVICES["h100-sxm"])


def budget_verdict(step_model, workload: str):
    """The token budget's sweep of its own workload, or of the short prompts alone (the counter-case),
    at the mixed workload's arrival rate."""
    rate = token_budget.rate_for(step_model)
    runs = token_budget.simulated_runs(step_model, rate, token_budget.BUDGETS, workload)
    return token_budget.budget_verdict(token_budget.budget_table(runs))


# The H100 serves an 8B model in milliseconds: its SLO targets are its own (as the Playground sizes its
# presets per engine), tight enough for its queue to matter.
SLO = {"cpu": (2.0, 0.1), "h100": (0.3, 0.02)}
# Where a counter-case cannot come out otherwise on a step model, and why: on an H100 an 8B model's
# decode step reads 16 GB of weights, and even 131,072 tokens of one sequence's keys and values (17 GB)
# only match it, so 8 sequences still make about twice the tokens per second of one. On a GPU, batching
# decode steps always pays at these sizes.
COUNTER_EXPECTED = {("batching_amortizes", "h100"): SHOWN}
LOOSE = (600.0, 10.0)

def hidden_queue_verdict(step_model, concurrency: int):
    closed, opened, x = bench.simulated(step_model, concurrency)
    return bench.hidden_queue_verdict(bench.run_numbers(closed, concurrency), bench.run_numbers(opened, concurrency), x,
                                      concurrency)


# claim -> (setting where it shows, counter-case, the counter-case's expected outcome); each setting is a
# function of (step model name, step model) returning the verdict.
CASES = {
    "batching_amortizes": (lambda n, m: why_batch_verdict(m),
                           lambda n, m: why_batch_verdict(m, LONGEST_CONTEXT), NOT_SHOWN),
    "continuous_beats_static": (lambda n, m: svc_verdicts(m, "short_long")["continuous_beats_static"],
                                lambda n, m: svc_verdicts(m, "offline_equal")["continuous_beats_static"], NOT_SHOWN),
    "static_fine_offline": (lambda n, m: svc_verdicts(m, "offline_equal")["static_fine_offline"],
                            lambda n, m: svc_verdicts(m, "short_long")["static_fine_offline"], NOT_SHOWN),
    "long_prompt_stalls": (lambda n, m: stall_verdict(m), lambda n, m: stall_verdict(m, 64), NOT_SHOWN),
    "scheduling_is_small": (lambda n, m: scheduling_verdict(m), lambda n, m: scheduling_verdict(FAST), NOT_SHOWN),
    "small_kv_preempts": (lambda n, m: kv_verdict(m, 1024), lambda n, m: kv_verdict(m, costs.KV_DEFAULT), NOT_SHOWN),
    "kv_pool_caps_batch": (lambda n, m: pool_caps_verdict(m, kv_capacity.SMALL_POOL),
                           lambda n, m: pool_caps_verdict(m, kv_capacity.ROOMY_POOL), NOT_SHOWN),
    "prefix_cache_cuts_ttft": (lambda n, m: prefix_verdict(m, "shared"), lambda n, m: prefix_verdict(m, "distinct"),
                               NOT_SHOWN),
    "goodput_falls": (lambda n, m: goodput_verdict(m, *SLO[n]), lambda n, m: goodput_verdict(m, *LOOSE), NOT_SHOWN),
    "queueing_explodes": (lambda n, m: explodes_verdict(m, (0.5, 0.9)),
                          lambda n, m: explodes_verdict(m, (0.3, 0.5)), NOT_SHOWN),
    "overload_shows_in_waiting": (lambda n, m: overload_verdict(m, queueing.OVERLOAD_RHOS),
                                  lambda n, m: overload_verdict(m, (0.5, 0.7)), NOT_SHOWN),
    "knee_below_max": (lambda n, m: knee_verdict(m, knee.VALUES if n == "cpu" else [1, 64, 256, 512, 1024]),
                       lambda n, m: knee_verdict(m, knee.VALUES, limits=COUNTER_BUDGET), NOT_SHOWN),
    "tail_has_a_cause": (lambda n, m: tail_verdicts(m, 0.1, True, tail.LOAD)["tail_has_a_cause"],
                         lambda n, m: tail_verdicts(m, 0.0, False, 0.3)["tail_has_a_cause"], NOT_SHOWN),
    "tail_by_window": (lambda n, m: tail_verdicts(m, 0.1, True, tail.LOAD)["tail_by_window"],
                       lambda n, m: tail_verdicts(m, 0.0, False, 0.3)["tail_by_window"], NOT_SHOWN),
    "orders_favour_someone": (lambda n, m: favour_verdict(m, orders.LOAD), lambda n, m: favour_verdict(m, orders.LIGHT),
                              NOT_SHOWN),
    "sjf_starves_long": (lambda n, m: starve_verdict(m, orders.LOAD), lambda n, m: starve_verdict(m, orders.LIGHT),
                         NOT_SHOWN),
    "closed_loop_hides_queue": (lambda n, m: hidden_queue_verdict(m, bench.NEAR),
                                lambda n, m: hidden_queue_verdict(m, bench.LIGHT), NOT_SHOWN),
    "waiting_to_batch": (lambda n, m: dynamic_verdict(m, dynamic.LOAD),
                         lambda n, m: dynamic_verdict(m, 3.0), NOT_SHOWN),
    "spec_pays_at_batch_1": (lambda n, m: spec.batch1_verdict(spec_table(m, spec.BIG)),
                             lambda n, m: spec.batch1_verdict(spec_table(m, spec.BIG), "free"), NOT_SHOWN),
    "spec_costs_compute_bound": (lambda n, m: spec.big_batch_verdict(spec_table(m, spec_big_batch(n)), spec_big_batch(n)),
                                 lambda n, m: spec.big_batch_verdict(spec_table(m, spec.BIG), 1), NOT_SHOWN),
    "budget_trades_ttft_for_itl": (lambda n, m: budget_verdict(m, token_budget.CLAIM_WORKLOAD),
                                   lambda n, m: budget_verdict(m, "short only"), NOT_SHOWN),
}


# Lesson 10's claims, on the cluster lab's simulated replicas: claim -> (the numbers where it shows, its
# counter-case's numbers, the counter-case's expected outcome); each a function of the replica's profile,
# judged by the lab's own verdict function (cluster.VERDICTS).
CLUSTER_CASES = {
    "prefix_affinity_hits": (cluster.CLAIM_RUNS["prefix_affinity_hits"],
                             lambda p: cluster.router_claim_runs(p, cluster.PLAIN, ("round_robin", "prefix_affinity")),
                             NOT_SHOWN),
    "affinity_needs_a_load_bound": (cluster.CLAIM_RUNS["affinity_needs_a_load_bound"],
                                    lambda p: cluster.router_claim_runs(p, cluster.SHARED, (
                                        "prefix_affinity", "prefix_affinity@unbounded")), NOT_SHOWN),
    "busy_fraction_overprovisions": (cluster.CLAIM_RUNS["busy_fraction_overprovisions"],
                                     lambda p: cluster.autoscaler_claim_runs(p, max_num_seqs=1), NOT_SHOWN),
    "startup_delay_costs_slo": (cluster.CLAIM_RUNS["startup_delay_costs_slo"],
                                lambda p: cluster.startup_claim_runs(p, cluster.GENTLE), NOT_SHOWN),
}
