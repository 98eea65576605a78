"""Lesson 10's claims, each decided on the simulated cluster, with its counter-case."""
import pytest

from labs.cluster.claims import CLAIMS, verdict


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_the_claim_holds_and_its_counter_case_does_not_show_it(claim):
    v = verdict(claim)
    assert v["holds"], (claim.text, v["numbers"])
    assert v["counter_holds"], (claim.counter, v["counter_numbers"])
    # the counter-case must not show the claim's own outcome either, where the two are alike
    if claim.id == "busy_fraction_overprovisions":
        assert not claim.holds(v["counter_numbers"])
