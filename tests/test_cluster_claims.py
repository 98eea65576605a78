"""Lesson 10's claims, each decided on the simulated cluster, with its counter-case."""
import pytest

from labs import claims
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
