"""Lesson 10's claims, each decided on the simulated cluster by the lab's own verdict, with its counter-case."""
import pytest

from course import claims
from labs.claim_cases import CLUSTER_CASES
from labs.cluster import experiment as lab

# What each counter-case's words in the claims table promise, beyond "not shown".
COUNTER_PROMISES = {
    "prefix_affinity_hits": lambda m: abs(m["prefix_affinity"]["prefix_hit_rate"]
                                          - m["round_robin"]["prefix_hit_rate"]) <= 0.01,
    "affinity_needs_a_load_bound": lambda m: m["prefix_affinity@unbounded"]["load_imbalance"] < 1.3,
    "busy_fraction_overprovisions": lambda m: m["busy"]["end_replicas"] <= m["waiting"]["end_replicas"] + 1,
    "startup_delay_costs_slo": lambda m: abs(m["slow"]["slo_attainment"] - m["quick"]["slo_attainment"]) <= 0.01,
}


def test_every_cluster_claim_in_the_table_has_a_case_and_a_verdict():
    ids = {c.id for c in claims.for_lab("cluster")}
    assert set(CLUSTER_CASES) == set(lab.VERDICTS) == set(lab.CLAIM_RUNS) == set(COUNTER_PROMISES) == ids


@pytest.mark.parametrize("claim", sorted(CLUSTER_CASES))
def test_the_claim_shows_and_its_counter_case_does_not(claim):
    shows, counter, counter_outcome = CLUSTER_CASES[claim]
    v = lab.VERDICTS[claim](shows(lab.PROFILE))
    assert v.claim.id == claim and v.outcome == claims.SHOWN, v.words
    assert claims.CLAIMS[claim].passes(v.value), "shown means past the threshold"
    numbers = counter(lab.PROFILE)
    w = lab.VERDICTS[claim](numbers)
    assert w.outcome == counter_outcome, w.words
    assert w.words != v.words, "each outcome has its own words"
    assert COUNTER_PROMISES[claim](numbers), (claims.CLAIMS[claim].counter, numbers)


def test_each_verdict_has_words_for_each_way_it_can_come_out():
    """The verdicts on hand-made numbers: past the threshold with the second condition, past it without,
    and short of it, each in its own words."""
    def routed(rr_hit, aff_hit, rr_p50, aff_p50):
        row = {"ttft_p95_s": 1.0, "load_imbalance": 1.0}
        return {"round_robin": {**row, "prefix_hit_rate": rr_hit, "ttft_p50_s": rr_p50},
                "prefix_affinity": {**row, "prefix_hit_rate": aff_hit, "ttft_p50_s": aff_p50}}
    shown = lab.affinity_hits_verdict(routed(0.6, 0.8, 1.0, 0.5))
    slower = lab.affinity_hits_verdict(routed(0.6, 0.8, 0.5, 1.0))
    short = lab.affinity_hits_verdict(routed(0.6, 0.62, 1.0, 0.5))
    assert (shown.outcome, slower.outcome, short.outcome) == (claims.SHOWN, claims.NOT_SHOWN, claims.NOT_SHOWN)
    assert len({shown.words, slower.words, short.words}) == 3
    assert "80%" in shown.words and "2 points more" in short.words, short.words
    quick = {"slo_attainment": 0.9, "max_replicas": 3, "startup_s": 6.0}
    lost = lab.startup_delay_verdict({"quick": quick, "slow": {**quick, "slo_attainment": 0.7, "startup_s": 30.0}})
    assert lost.outcome == claims.SHOWN and "6 s start-up" in lost.words and "30 s one" in lost.words


def test_the_cluster_claims_quote_the_settings_their_runs_use():
    """The claims table is written in words; the numbers in them are the ones the runs use."""
    busy, waiting = lab.AUTOSCALERS["busy"].target, lab.AUTOSCALERS["waiting"].target
    assert f"busy fraction (target {busy:g})" in claims.CLAIMS["busy_fraction_overprovisions"].text
    assert f"(target {waiting:g} per replica)" in claims.CLAIMS["busy_fraction_overprovisions"].text
    quick, slow = lab.STARTUPS_S
    assert f"with a {slow:g} s start-up than with a {quick:g} s one" in claims.CLAIMS["startup_delay_costs_slo"].text
    assert f"with a {quick:g} s start-up − with a {slow:g} s" in claims.CLAIMS["startup_delay_costs_slo"].metric
    assert lab.AUTOSCALER_NAMES == {"busy": f"busy fraction ≥ {busy:g}",
                                    "waiting": f"waiting ≥ {waiting:g} per replica"}
