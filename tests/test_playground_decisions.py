"""Changes read as decisions: slider moves are applied once the sliders rest, knobs moved
together make one mark with a short label, and the status line and notices describe the run
as it is now (not "8 of 2 slots", not "Applied" for a change that can do nothing, not "will be
rejected" beside "rejected: 0")."""
import pandas as pd
import pytest

from analysis.tables import MARK_COLUMNS, Tables
from engine.core.engine import StepRecord
from engine.core.metrics import REQUEST_COLUMNS, STEP_COLUMNS, step_row
from engine.model.model import load_model
from playground.checks import check
from playground.run import REST_S, PlaygroundRun
from playground.setup import Setup
from playground.status import status_text

EMPTY_REQUESTS = pd.DataFrame(columns=REQUEST_COLUMNS + ["partial_text"])
EMPTY_MARKS = pd.DataFrame(columns=MARK_COLUMNS)
BATCH = Setup(continuous=False, rate=0.0, num_requests=12, output_lo=64, output_hi=64, max_num_seqs=16)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


@pytest.fixture
def lab(tiny):
    run = PlaygroundRun(BATCH, tiny)
    yield run
    run.close()


def test_five_arrow_presses_in_a_row_make_exactly_one_change_and_one_mark(lab):
    t, setup = 100.0, lab.setup
    for _ in range(5):                                   # each press 0.3 s after the last
        setup = setup.changed(max_num_seqs=setup.max_num_seqs - 1)
        assert lab.apply_when_rested(setup, t) is None and lab.pending
        t += 0.3
    assert lab.apply_when_rested(setup, t - 0.3 + REST_S / 2) is None      # not rested yet
    decision = lab.apply_when_rested(setup, t - 0.3 + REST_S)
    assert decision.changes == ("max_num_seqs 16→11",) and decision.label == "max_num_seqs 16→11"
    assert decision.message == "Applied at the next step: max_num_seqs 16→11"
    assert lab.live.engine.policy.max_num_seqs == 11 and not lab.pending
    assert lab.apply_when_rested(setup, t + 5) is None                       # nothing more to do
    _, tables = lab.read()
    assert list(tables.marks.columns) == MARK_COLUMNS
    assert list(tables.marks["label"]) == ["max_num_seqs 16→11"]
    assert len(lab.live.engine.marks) == 1


def test_knobs_moved_together_are_one_mark_with_a_short_label_and_the_full_list(lab):
    new = lab.setup.changed(max_num_seqs=4, ttft_slo_s=1.0, num_requests=20)
    assert lab.apply_when_rested(new, 0.0) is None
    decision = lab.apply_when_rested(new, REST_S)
    assert decision.label == "workload: num_requests 12→20 +2 more"
    assert decision.detail == "workload: num_requests 12→20, max_num_seqs 16→4, ttft_slo_s 2.0→1.0"
    assert decision.knobs == ("num_requests", "max_num_seqs", "ttft_slo_s")
    _, tables = lab.read()
    assert len(tables.marks) == 1
    assert tables.marks["detail"].iloc[0] == decision.detail


def test_moving_a_slider_back_before_it_rests_changes_nothing(lab):
    assert lab.apply_when_rested(lab.setup.changed(max_num_seqs=3), 0.0) is None
    assert lab.apply_when_rested(BATCH, 0.1) is None and not lab.pending
    assert lab.apply_when_rested(BATCH, 5.0) is None
    assert lab.live.engine.marks == []


def test_a_refused_setup_is_reported_once_then_left_alone(lab):
    bad = lab.setup.changed(max_num_seqs=0)
    assert lab.apply_when_rested(bad, 0.0) is None
    with pytest.raises(ValueError, match="max_num_seqs must be at least 1"):
        lab.apply_when_rested(bad, REST_S)
    assert lab.apply_when_rested(bad, 2 * REST_S) is None and not lab.pending
    assert lab.setup == BATCH and lab.live.engine.marks == []


def test_a_workload_change_after_the_last_arrival_is_not_called_applied(lab):
    lab.step_once()                                      # rate 0: all 12 arrive at the first step
    assert lab.live.feed.exhausted
    decision = lab.apply(lab.setup.changed(rate=2.0))
    assert decision.changes == () and decision.held == ("rate 0.0→2.0",)
    assert not decision.message.startswith("Applied") and "Every request has arrived" in decision.message
    assert lab.live.engine.marks == []                   # nothing happened: no mark
    decision = lab.apply(lab.setup.changed(num_requests=20))     # more requests: this acts
    assert decision.changes == ("workload: num_requests 12→20",) and not decision.held
    decision = lab.apply(lab.setup.changed(continuous=True))    # rate 2.0: traffic without end
    assert decision.changes == ("workload: continuous False→True",)
    assert not lab.live.feed.exhausted and lab.setup.endless


def steps_frame(batches: list[int], limits: list[int] | None = None) -> pd.DataFrame:
    """Steps of `batches` members each, under `limits` slots; 40 arrived, 30 still waiting."""
    limits = limits or batches
    recs = [StepRecord(i, i * 0.1, i * 0.1 + 0.1, 40 - n - 2, n, 0, n, n, 64,
                       tuple((f"r{j}", "decode", 1) for j in range(n)), max_num_seqs=limit,
                       arrived=40, finished=2)
            for i, (n, limit) in enumerate(zip(batches, limits))]
    return pd.DataFrame([step_row(r) for r in recs], columns=STEP_COLUMNS)


def test_the_largest_batch_is_read_since_max_num_seqs_last_changed():
    # the change was made while step 10 ran: it still ran 8 requests under the old limit
    steps = steps_frame([8] * 11 + [2] * 4, [8] * 11 + [2] * 4)
    marks = pd.DataFrame([(10, 1.0, "max_num_seqs 8→2", "max_num_seqs 8→2", ("max_num_seqs",)),
                          (12, 1.2, "workload: rate 4.0→5.0", "workload: rate 4.0→5.0", ("rate",))],
                         columns=MARK_COLUMNS)
    line = status_text("running", Tables(steps, EMPTY_REQUESTS, marks), Setup(max_num_seqs=2), 40)
    assert "largest batch since the change at step 10: 2 of 2 slots" in line
    assert "8 of 2" not in line and "40 arrived = 36 waiting + 2 running + 2 finished (endless traffic)" in line
    assert "(continuous)" not in line and "· continuous batching ·" in line
    static = status_text("running", Tables(steps, EMPTY_REQUESTS, marks), Setup(max_num_seqs=2, mode="static"), 40)
    assert "· static batching ·" in static and "continuous" not in static
    before = status_text("running", Tables(steps.iloc[:10], EMPTY_REQUESTS, marks.iloc[:0]),
                         Setup(max_num_seqs=8, continuous=False, num_requests=64), 40)
    assert "largest batch: 8 of 8 slots" in before and "40 arrived = 30 waiting + 8 running + 2 finished (of 64)" in before


def test_the_status_line_never_states_the_old_batch_against_the_new_limit():
    """Right after max_num_seqs 16 -> 4, before any step ran under 4 (no mark yet either): the
    counts and the limit come from the same step."""
    steps = steps_frame([16] * 6, [16] * 6)
    line = status_text("running", Tables(steps, EMPTY_REQUESTS, EMPTY_MARKS), Setup(max_num_seqs=4), 40)
    assert "16 running" in line and "of 4 slots" not in line, line
    assert "largest batch: 16 of 16 slots, 4 from the next step" in line
    after = steps_frame([16] * 6 + [4] * 2, [16] * 6 + [4] * 2)
    line = status_text("running", Tables(after, EMPTY_REQUESTS, EMPTY_MARKS), Setup(max_num_seqs=4), 40)
    assert "4 running" in line and "16 of 4" not in line and "of 4 slots" in line, line


def test_the_rejection_notice_agrees_with_what_was_measured():
    setup = Setup(prompt_lo=32, prompt_hi=1024, kv_capacity_tokens=512)

    def notice(rejected):
        return next(n.text for n in check(setup, rejected_so_far=rejected) if "rejected" in n.text)

    assert notice(None).startswith("Some requests will be rejected")
    assert notice(0).startswith("Some requests can be rejected") and "None so far." in notice(0)
    assert notice(3).startswith("Some requests will be rejected") and "3 so far." in notice(3)


def test_notices_know_continuous_traffic():
    static = Setup(mode="static", max_num_seqs=32, num_requests=8)
    assert static.endless and not any("Static batches" in n.text for n in check(static))
    assert any("Static batches" in n.text for n in check(static.changed(continuous=False)))
    assert any("continuous traffic needs a rate above 0" in n.text
               for n in check(Setup(rate=0.0)))
