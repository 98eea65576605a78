"""Screens a class can trust: every grid drawn solid, every pair of numbers that name one thing
agreeing, every verdict shown only on the workload it is about, simulated numbers labelled so.
On the Static vs continuous lab's simulated answer (no real run needed) and the chart builders."""
import re

import pytest

from course.machines import SOURCE_LABEL, roofline_label
from streamlit.testing.v1 import AppTest

from analysis import membership
from labs import runs
from labs.cluster import experiment as cluster_lab
from labs.static_vs_continuous import experiment as svc
from test_lab_pages import ROOT, TIMEOUT, commit, texts

WORKLOADS = list(svc.WORKLOADS)


def sim_summaries(workload):
    from engine.sim.machine_speed import step_model_here
    from ui import session
    step_model = step_model_here(session.model_name())
    sim = svc.simulated_modes(step_model, workload, svc.SLOTS, 0)
    return sim, {m: svc.mode_summary(res, svc.SLOTS) for m, (res, _) in sim.items()}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_membership_grid_is_solid_at_every_width(lab_env, workload):
    """A gap between steps is a fixed pixel: on a grid a few pixels a step wide it shows as white
    stripes hiding the grey empty slots. No grid has one, whatever its number of steps; slots keep
    a gap only where a row is tall enough."""
    sim, _ = sim_summaries(workload)
    for mode, (res, _) in sim.items():
        steps = runs.frames(res)[1].drop(columns="max_num_seqs")      # rows: the slots asked for
        for upto in (5, len(steps) // 2, len(steps)):
            for slots in (svc.SLOTS, 64, 256):
                heat = membership.batch_membership(steps, slots, upto_step=upto)["data"][0]
                assert heat["type"] == "heatmap" and heat["xgap"] == 0, (mode, upto, heat["xgap"])
                rows_px = max(220, min(520, membership.ROW_PX * slots)) / slots
                assert heat["ygap"] == (1 if rows_px >= membership.MIN_GAPPED_PX else 0)


# Every way the lab's text states a count of wasted (empty) slot-steps, old wordings included.
WASTED_PHRASES = [r"slot-steps so far ([\d,]+)", r"([\d,]+) under static, ([\d,]+) under continuous",
                  r"with ([\d,]+) and ([\d,]+) (?:wasted )?slot-steps", r"([\d,]+) \(continuous\) and ([\d,]+) \(static\)",
                  r"\*\*([\d,]+)\*\* slot-steps.*?static's \*\*([\d,]+)\*\*", r"\*\*([\d,]+)\*\* against \*\*([\d,]+)\*\*"]


def shown_numbers(text: str) -> list[int]:
    """Every count of wasted or empty slot-steps the text states."""
    return [int(n.replace(",", "")) for pattern in WASTED_PHRASES
            for match in re.findall(pattern, text) for n in (match if isinstance(match, tuple) else (match,))]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_sentence_gives_the_same_wasted_slot_steps(lab_env, workload):
    """The card, its help, the claims' boxes and the closing sentence name one thing, wasted
    slot-steps, by one definition: the same two numbers everywhere; and on mixed lengths static
    wastes at least as many as continuous (the lab's whole point)."""
    _, summ = sim_summaries(workload)
    s, c = summ["static"]["wasted_slot_steps"], summ["continuous"]["wasted_slot_steps"]
    if workload != "offline_equal":
        assert s >= c, (s, c)
    at = AppTest.from_file(str(ROOT / "labs/static_vs_continuous/page.py"), default_timeout=TIMEOUT)
    at.session_state["svc_workload"] = workload
    at.run()
    commit(at)
    assert not at.exception, [e.message for e in at.exception]
    card = next(m for m in at.metric if m.label.startswith("Wasted slot-steps"))
    assert card.value == f"{c:,}" and card.delta == f"{c - s:+d} vs static"
    words = texts(at) + "\n" + card.help
    numbers = shown_numbers(words)
    assert len(numbers) >= 6 and set(numbers) <= {s, c}, (numbers, s, c)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_claims_verdict_is_shown_only_on_the_workload_it_is_about(lab_env, workload):
    at = AppTest.from_file(str(ROOT / "labs/static_vs_continuous/page.py"), default_timeout=TIMEOUT)
    at.session_state["svc_workload"] = workload
    at.run()
    commit(at)
    words = texts(at)
    for claim_id, about in svc.CLAIM_WORKLOADS.items():
        from course.claims import CLAIMS
        claim = CLAIMS[claim_id]
        box = f"**Claim:** {claim.text}"
        assert (box in words) == (workload in about), (claim_id, workload)
        if workload not in about:
            assert "pick" in words and svc.WORKLOADS[about[0]][0] in words, "it says where that claim is tested"


def test_the_cluster_labs_simulated_answers_are_labelled_simulated(lab_env):
    """Before any real server runs, every number the cluster lab reveals beside a guess is the
    simulator's: labelled "Simulated", never "Measured"."""
    at = AppTest.from_file(str(ROOT / "labs/cluster/page.py"), default_timeout=300)
    at.run()
    commit(at)
    assert not at.exception, [e.message for e in at.exception]
    labels = [m.label for m in at.metric]
    gpu = roofline_label(cluster_lab.PROFILE)            # the replicas are a GPU's roofline model, not this machine
    assert gpu in labels and not any(l.startswith("Measured") or l in SOURCE_LABEL.values() for l in labels), labels


def test_a_run_estimate_is_a_range_from_the_step_models_measured_error():
    """The run buttons' estimate: the step model's median error on this app's own steps makes it
    a range (a run with a browser attached took 2.1x one number once); unchecked, it says so; on the
    hand-set guess it says the machine is not calibrated, never a range it has not earned."""
    from dataclasses import replace

    from engine.core.step_model import UNCALIBRATED
    from engine.sim.machine_speed import CALIBRATED, GUESS, MachineSpeed
    from ui import estimates

    def here(error):
        return MachineSpeed(replace(UNCALIBRATED, error=error), CALIBRATED)
    assert estimates.estimate_text(50, here(0.2)) == "40–60 s (± the step model's current error here, 20%)"
    assert estimates.estimate_text(200, here(0.5)).startswith("1.7–5.0 min")
    assert estimates.estimate_text(60, here(0.22)).startswith("47–73 s")
    assert "not yet checked" in estimates.estimate_text(100, here(None))
    guessed = estimates.estimate_text(100, MachineSpeed(UNCALIBRATED, GUESS))
    assert "guessed step model" in guessed and "not calibrated" in guessed and "±" not in guessed


def test_a_committed_guess_stays_on_the_page_while_the_next_question_is_asked(lab_env):
    """Static vs continuous asks two questions: after the first is committed, its line ("Your prediction:
    …", with Predict again and the settings it is scored on) stays above the second question. It was
    drawn into a placeholder that the settings caption then replaced, so the guess vanished."""
    at = AppTest.from_file(str(ROOT / "labs/static_vs_continuous/page.py"), default_timeout=TIMEOUT)
    at.run()
    next(b for b in at.button if b.key.endswith("__commit")).click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(m.value.startswith(":material/psychology: **Your prediction:**") for m in at.markdown), \
        [m.value for m in at.markdown]
    assert any(b.label == "Predict again" for b in at.button)
    assert any("Predict first." in m.value for m in at.markdown), "the second question is asked"


def claim_boxes(at: AppTest) -> dict[str, bool]:
    """For each claim of course/claims.py: whether the page shows its verdict box."""
    from course.claims import CLAIMS
    words = texts(at)
    return {cid: f"**Claim:** {c.text}" in words for cid, c in CLAIMS.items()}


def elsewhere(at: AppTest, claim_id: str) -> bool:
    """Whether the page says where `claim_id` is tested, in place of its verdict."""
    from course.claims import CLAIMS
    return any("Not judged here" in c.value and CLAIMS[claim_id].text in c.value for c in at.caption)


@pytest.mark.parametrize("rhos, about", [([0.3, 0.5, 0.7, 0.9], True), ([0.3, 0.5], False), ([0.5, 0.95], True)])
def test_the_queueing_claim_is_judged_only_on_a_sweep_near_full_use(lab_env, rhos, about):
    """"Waiting explodes as the server nears full use" says nothing of a sweep at 30% and 50%: there
    the page names the setting that tests it, in place of a ✗. The overload claim keeps its own runs
    past capacity, so it shows either way."""
    at = AppTest.from_file(str(ROOT / "labs/queueing/page.py"), default_timeout=300)
    at.session_state["qu_rhos"] = rhos
    at.run()
    commit(at)
    assert not at.exception, [e.message for e in at.exception]
    boxes = claim_boxes(at)
    assert boxes["queueing_explodes"] == about and elsewhere(at, "queueing_explodes") != about, rhos
    assert boxes["overload_shows_in_waiting"], rhos


@pytest.mark.parametrize("share, bursty", [(0.1, True), (0.0, False), (0.1, False), (0.0, True)])
def test_the_tail_claims_are_judged_only_on_a_workload_with_their_cause(lab_env, share, bursty):
    """"The slowest requests share a cause (long prompts, bursts)" says nothing of traffic with
    neither; "the tail gathers in busy windows (bursts)" nothing of traffic without bursts. There the
    page names the setting that tests each, in place of a ✗."""
    at = AppTest.from_file(str(ROOT / "labs/tail/page.py"), default_timeout=300)
    at.session_state["ta_long"], at.session_state["ta_bursty"] = share, bursty
    at.run()
    commit(at)
    assert not at.exception, [e.message for e in at.exception]
    boxes = claim_boxes(at)
    for claim_id, about in (("tail_has_a_cause", share > 0 or bursty), ("tail_by_window", bursty)):
        assert boxes[claim_id] == about and elsewhere(at, claim_id) != about, (claim_id, share, bursty)


@pytest.mark.parametrize("capacity", [1024, 4096])
def test_the_kv_claim_is_judged_only_on_a_cache_too_small_for_the_batch(lab_env, capacity):
    """"A cache too small for the running batch forces preemptions" makes no promise about a cache
    with room for every slot at its longest: there the page names the setting that tests it, in place
    of a ✗. The long-prompt claim beside it stays (every prompt the page offers is long)."""
    from labs.costs import experiment as costs
    at = AppTest.from_file(str(ROOT / "labs/costs/page.py"), default_timeout=300)
    at.session_state["co_kv"] = capacity
    at.run()
    commit(at)
    assert not at.exception, [e.message for e in at.exception]
    boxes, about = claim_boxes(at), capacity < costs.KV_NEED
    assert boxes["small_kv_preempts"] == about and elsewhere(at, "small_kv_preempts") != about, capacity
    assert boxes["long_prompt_stalls"], capacity


@pytest.mark.parametrize("load, about", [(0.85, True), (0.3, False), (0.2, False), (0.35, True)])
def test_the_scheduler_claims_are_judged_only_where_requests_queue(lab_env, load, about):
    """Both claims of the orders lab are about requests that queue; at a light load (up to 30% of
    capacity) the queue empties often, and the page names the setting that tests them in place of a ✗."""
    at = AppTest.from_file(str(ROOT / "labs/scheduler_orders/page.py"), default_timeout=300)
    at.session_state["so_load"] = load
    at.run()
    commit(at)
    assert not at.exception, [e.message for e in at.exception]
    boxes = claim_boxes(at)
    for claim_id in ("orders_favour_someone", "sjf_starves_long"):
        assert boxes[claim_id] == about and elsewhere(at, claim_id) != about, (claim_id, load)
