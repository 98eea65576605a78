"""Lesson 10's claims, each decided on the simulated cluster, with its counter-case."""
import pytest

from course import claims
from labs.cluster.claims import CHECKS, judge, verdict


def test_every_cluster_claim_in_the_table_has_a_check():
    assert {c.id for c in CHECKS} == {c.id for c in claims.for_lab("cluster")}


@pytest.mark.parametrize("claim", CHECKS, ids=[c.id for c in CHECKS])
def test_the_claim_holds_and_its_counter_case_does_not_show_it(claim):
    v = verdict(claim)
    assert v["holds"], (claim.claim.text, v["numbers"])
    assert v["verdict"].outcome == claims.SHOWN and v["verdict"].words
    assert v["counter_holds"], (claim.claim.counter, v["counter_numbers"])
    if claim.id != "affinity_needs_a_load_bound":   # its counter-case runs the unbounded router only
        counter = judge(claim, v["counter_numbers"])
        assert counter.outcome == claims.NOT_SHOWN, counter.words
    # the counter-case must not show the claim's own outcome either, where the two are alike
    if claim.id == "busy_fraction_overprovisions":
        assert not claim.holds(v["counter_numbers"])


def test_the_cluster_claims_quote_the_settings_their_checks_run():
    """The claims table is written in words; the numbers in them are the ones the checks use."""
    from labs.cluster import experiment as lab
    from labs.cluster.claims import STARTUPS_S
    busy, waiting = lab.AUTOSCALERS["busy"].target, lab.AUTOSCALERS["waiting"].target
    assert f"busy fraction (target {busy:g})" in claims.CLAIMS["busy_fraction_overprovisions"].text
    assert f"(target {waiting:g} per replica)" in claims.CLAIMS["busy_fraction_overprovisions"].text
    quick, slow = STARTUPS_S
    assert f"with a {slow:g} s start-up than with a {quick:g} s one" in claims.CLAIMS["startup_delay_costs_slo"].text
    assert f"with a {quick:g} s start-up − with a {slow:g} s" in claims.CLAIMS["startup_delay_costs_slo"].metric
    assert lab.AUTOSCALER_NAMES == {"busy": f"busy fraction ≥ {busy:g}",
                                    "waiting": f"waiting ≥ {waiting:g} per replica"}
