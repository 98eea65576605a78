"""Speculative decoding (n-gram drafts, greedy verification): the lookup, the scheduler's budget,
the KV blocks of rejected drafts, exact acceptance counts on a hand-built case (no torch), and the
simulator's acceptance as a workload property."""
import math

import numpy as np

import pytest

from engine.core.clock import VirtualClock
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.engine import Engine, accept
from engine.core.kv_cache import BlockPool, blocks_for
from engine.core.metrics import STEP_COLUMNS, summarize
from engine.core.ngram import propose
from engine.core.request import Request, Status
from engine.runs.build import build_engine
from engine.runs.run_files import step_csv_row

NGRAM = dict(speculative_method="ngram", num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=3)


# ----------------------------------------------------------------------------- the lookup


def test_lookup_takes_the_longest_match_and_its_earliest_place():
    # vLLM's own example (vllm/v1/spec_decode/ngram_proposer.py): [4,2,3] has no earlier match, [2,3] does
    assert propose([1, 2, 3, 4, 2, 3], 2, 3, 4) == [4, 2, 3]
    # two places match the last 3 tokens equally well: the earlier one's followers are drafted
    assert propose([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 2, 5, 2) == [9, 1]
    # a longer match wins over an earlier shorter one
    assert propose([2, 3, 8, 1, 2, 3, 5, 1, 2, 3], 2, 3, 1) == [5]
    assert propose([5, 6, 7], 1, 3, 2) == []                 # nothing earlier to match
    assert propose([1, 2, 9, 2], 2, 3, 4) == []               # a 1-token match is under prompt_lookup_min
    assert propose([1, 2, 9, 2], 1, 3, 4) == [9, 2]           # ...and enough at min 1
    assert propose([1, 2, 3, 4, 5, 1, 2], 2, 3, 0) == []


def test_greedy_verification_keeps_the_agreeing_prefix_and_one_token_of_the_model():
    assert accept((4, 5, 6), [4, 5, 6, 7]) == [4, 5, 6, 7]    # all accepted: the model's next comes free
    assert accept((4, 5, 6), [4, 9, 6, 7]) == [4, 9]          # the first disagreement is replaced
    assert accept((4, 5, 6), [1, 5, 6, 7]) == [1]             # none accepted: one token, as plain decoding
    with pytest.raises(ValueError, match="3 verified tokens for 3 drafts"):
        accept((4, 5, 6), [4, 5, 6])


def test_a_lookup_range_upside_down_is_refused_naming_both_knobs():
    with pytest.raises(ValueError, match=r"prompt_lookup_max must be at least prompt_lookup_min .*"
                                         r"prompt_lookup_max=2, prompt_lookup_min=4"):
        SchedulerPolicy(prompt_lookup_min=4, prompt_lookup_max=2).validate()
    with pytest.raises(ValueError, match="speculative_method"):
        SchedulerPolicy(speculative_method="eagle").validate()


# ----------------------------------------------------------------------------- a hand-built case

PROMPT = [1, 2, 3, 4, 5, 6, 7, 1, 2]
# What the "model" writes after the prompt, token by token (greedy, so the same whatever was drafted)
MODEL_TEXT = PROMPT + [3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 9, 5]


class TextModel:
    """A fake executor for the hand-built case: the model's token after position p is MODEL_TEXT[p + 1]
    (0 past its end)."""
    device, dtype = "fake", "n/a"

    def __init__(self):
        self.checked = []                 # (start, drafts) of every chunk that verified drafts

    def execute(self, plan):
        out = {}
        for c in plan.chunks:
            if not c.samples:
                continue
            last = c.start + c.num_tokens - len(c.draft) - 1        # the request's last real token
            targets = [MODEL_TEXT[p + 1] if p + 1 < len(MODEL_TEXT) else 0
                       for p in range(last, last + 1 + len(c.draft))]
            out[c.request] = targets if c.draft else targets[0]
            if c.draft:
                self.checked.append((c.start, c.draft))
        return out


def hand_built_run(max_new_tokens=12, **policy):
    model = TextModel()
    pool = BlockPool(64, block_size=4)
    eng = Engine(model, VirtualClock(), SchedulerPolicy(**{**NGRAM, **policy}), pool)
    eng.submit(Request("r", list(PROMPT), max_new_tokens))
    eng.run()
    return eng, model


def test_accepted_tokens_are_counted_exactly_on_a_hand_built_case():
    """Step by step, worked out by hand (lookup n-grams of 2-3 tokens, up to 4 drafts):
    1. prefill; the model writes 3.                      text: 1 2 3 4 5 6 7 1 2 3
    2. [1 2 3] occurred at the start: draft 4 5 6 7; the model agrees with all four, and adds 8
    3. 8 never occurred before: nothing drafted; the model writes 1
    4. [8 1] never occurred, [1] alone is under the shortest n-gram: nothing; the model writes 2
    5. [1 2] occurred at 0 and at 7 (the earlier wins): draft 3 4 5, cut to 3 by max_new_tokens
       (8 written, 12 allowed: 3 drafts and the model's token); the model says 3 4 9: two accepted
    6. 11 written: no room for a draft; the model writes 5, the twelfth token."""
    eng, model = hand_built_run()
    r = eng.requests["r"]
    assert r.status is Status.FINISHED
    assert r.output_token_ids == MODEL_TEXT[len(PROMPT):]          # exactly what the model would write
    assert [s.drafts for s in eng.steps] == [(), (("r", 4, 4),), (), (), (("r", 3, 2),), ()]
    assert [d for _, d in model.checked] == [(4, 5, 6, 7), (3, 4, 5)]
    s = summarize(eng.requests.values(), eng.steps)
    assert (s["spec_decode_num_drafts"], s["spec_decode_num_draft_tokens"],
            s["spec_decode_num_accepted_tokens"]) == (2, 7, 6)
    assert s["spec_decode_num_accepted_tokens_per_pos"] == [2, 2, 1, 1]
    assert s["spec_decode_acceptance_rate"] == 6 / 7
    assert s["spec_decode_mean_acceptance_length"] == 1 + 6 / 2
    # each step's members carry its verified tokens: 1 + drafts for the chunk that checked them
    assert [m for st in eng.steps for m in st.members][1] == ("r", "decode", 5)
    assert step_csv_row(eng.steps[4])["drafts"] == "r:3:2" and "drafts" in STEP_COLUMNS
    assert eng.pool.used_blocks == 0


def test_speculation_off_drafts_nothing_on_the_same_case():
    eng, model = hand_built_run(speculative_method="off")
    assert eng.requests["r"].output_token_ids == MODEL_TEXT[len(PROMPT):]
    assert model.checked == [] and all(s.drafts == () for s in eng.steps) and len(eng.steps) == 12
    assert math.isnan(summarize(eng.requests.values(), eng.steps)["spec_decode_acceptance_rate"])


def test_rejected_drafts_give_their_kv_blocks_back():
    """After step 5 of the hand-built case (20 tokens, 4 a block) the chunk held the slots of
    positions 17..20; the rejected draft's position is given back: blocks for 19 computed tokens."""
    model = TextModel()
    pool = BlockPool(64, block_size=4)
    eng = Engine(model, VirtualClock(), SchedulerPolicy(**NGRAM), pool)
    eng.submit(Request("r", list(PROMPT), 40))   # longer: the step that rejects does not end the request
    held = []
    for _ in range(5):
        eng.step()
        r = eng.requests["r"]
        held.append((len(r.block_table), blocks_for(r.num_computed_tokens, 4), r.num_computed_tokens))
    assert eng.steps[4].drafts == (("r", 4, 2),)               # 3 4 accepted, 5 rejected (the model says 9)
    # every step, the request holds just the blocks of its computed tokens
    assert all(have == need for have, need, _ in held), held
    r = eng.requests["r"]
    assert r.num_computed_tokens == len(r.prompt_token_ids) + len(r.output_token_ids) - 1


def test_rejected_drafts_blocks_return_to_the_pool():
    """A draft that reaches into a new block, all rejected: that block goes back at once."""
    model = TextModel()
    pool = BlockPool(8, block_size=4)
    eng = Engine(model, VirtualClock(), SchedulerPolicy(**NGRAM), pool)
    global MODEL_TEXT
    saved = MODEL_TEXT
    MODEL_TEXT = PROMPT + [3, 0, 0, 0, 0, 0, 0, 0]            # the model never agrees with a draft
    try:
        eng.submit(Request("r", list(PROMPT), 8))
        eng.step()                                            # prefill: 9 tokens in 3 blocks, writes 3
        eng.step()                                            # draft 4 5 6 7 at positions 10-13: blocks 3
        r = eng.requests["r"]
        assert eng.steps[1].drafts == (("r", 4, 0),)
        assert r.num_computed_tokens == 10 and len(r.block_table) == 3 and pool.used_blocks == 3
    finally:
        MODEL_TEXT = saved


def test_drafts_count_against_the_token_budget_and_are_cut_to_fit():
    """As vLLM's scheduler does: a decoding request's drafts take budget, and are cut to what is left."""
    eng, model = hand_built_run(max_num_batched_tokens=3, enable_chunked_prefill=True)
    assert [len(d) for _, d in model.checked][0] == 2          # 1 token + 2 drafts = the budget of 3
    assert all(st.prefill_tokens + st.decode_tokens <= 3 for st in eng.steps)
    assert eng.requests["r"].output_token_ids == MODEL_TEXT[len(PROMPT):]


def test_sampled_requests_are_not_drafted():
    model = TextModel()
    eng = Engine(model, VirtualClock(), SchedulerPolicy(**NGRAM), BlockPool(64, 4))
    eng.submit(Request("r", list(PROMPT), 6, temperature=0.7, seed=1))
    eng.run()
    assert model.checked == []


# ----------------------------------------------------------------------------- the simulator


def simulated(acceptance, method="ngram", seqs=4):
    eng = build_engine(EngineConfig(), SchedulerPolicy(**{**NGRAM, "speculative_method": method},
                                                       max_num_seqs=seqs), draft_acceptance=acceptance)
    for i in range(seqs):
        eng.submit(Request(f"r{i}", list(range(1, 50)), 40))
    eng.run()
    return eng


def test_simulator_acceptance_is_a_workload_property_and_every_verified_token_costs():
    off = simulated(0.0, "off")
    runs = {a: simulated(a) for a in (0.0, 0.5, 0.9, 1.0)}
    for a, eng in runs.items():
        assert all(len(r.output_token_ids) == 40 for r in eng.requests.values())
        for st in eng.steps:
            for rid, drafted, accepted in st.drafts:
                assert 0 <= accepted <= drafted <= 4
                verified = next(n for m, _, n in st.members if m == rid)
                assert verified == 1 + drafted
        s = summarize(eng.requests.values(), eng.steps)
        if a in (0.0, 1.0):
            assert s["spec_decode_acceptance_rate"] == a
    rates = [summarize(e.requests.values(), e.steps)["spec_decode_acceptance_rate"] for e in runs.values()]
    # each draft token is right with the chance p given the ones before it were, so 4 drafts keep
    # p + p^2 + p^3 + p^4 of them on average: a rate of 0.234 at p = 0.5
    assert rates == sorted(rates) and abs(rates[1] - (0.5 + 0.25 + 0.125 + 0.0625) / 4) < 0.08
    steps = [len(e.steps) for e in runs.values()]
    assert steps == sorted(steps, reverse=True)
    # all rejected: as many steps as without speculation, each dearer (it verified 4 more tokens)
    assert len(runs[0.0].steps) == len(off.steps) and runs[0.0].clock.now() > off.clock.now()
    # all accepted: 5 tokens a step, far less time
    assert runs[1.0].clock.now() < 0.5 * off.clock.now()


# ----------------------------------------------------------------------------- the charts


def steps_table(eng):
    import pandas as pd
    from engine.core.metrics import step_row
    return pd.DataFrame([step_row(s) for s in eng.steps], columns=STEP_COLUMNS)


def test_membership_chart_marks_every_checked_draft_with_counts_that_add_up():
    import re

    import plotly.graph_objects as go

    from analysis.membership import batch_membership, slot_grid
    eng = simulated(0.5)
    steps = steps_table(eng)
    grid = slot_grid(steps, 4)
    # cell by cell, the grid holds each step's drafts; rejected = drafted - accepted never below 0
    want = {(st.step, rid): (d, a) for st in eng.steps for rid, d, a in st.drafts}
    got = {(int(grid.steps[i]), str(grid.ids[i, j])): (int(grid.drafted[i, j]), int(grid.accepted[i, j]))
           for i, j in zip(*np.nonzero(grid.drafted))}
    assert got == want and len(want) > 20
    assert (grid.accepted <= grid.drafted).all()
    fig = batch_membership(steps, 4)
    go.Figure(fig)
    marks = [t for t in fig["data"] if t.get("hovertemplate", "").startswith("step %{x} · slot %{y}<br>%{text}")]
    texts = [(x, text) for t in marks for x, text in zip(t["x"], t["text"])]
    assert len(texts) == len(want)
    for x, text in texts:
        rid, d, a, r, new = re.fullmatch(r"(\w+): (\d+) drafted, (\d+) accepted, (\d+) rejected; (\d+) new tokens",
                                         text).groups()
        assert (int(d), int(a)) == want[(int(x), rid)] and int(a) + int(r) == int(d) and int(new) == int(a) + 1
    legend = {t["name"] for t in fig["data"] if t.get("name")}
    assert {"drafts checked, some accepted (△)", "drafts checked, all rejected (▼)"} <= legend


def test_drafts_chart_adds_up_at_every_step_and_matches_the_summary():
    import plotly.graph_objects as go

    from analysis.speculation import draft_counts, drafts_by_step
    eng = simulated(0.5)
    steps = steps_table(eng)
    counts = draft_counts(steps)
    assert (counts["accepted"] + counts["rejected"] == counts["drafted"]).all()
    assert list(counts["drafted"]) == [sum(d for _, d, _ in st.drafts) for st in eng.steps]
    s = summarize(eng.requests.values(), eng.steps)
    assert (counts["drafted"].sum(), counts["accepted"].sum()) == (s["spec_decode_num_draft_tokens"],
                                                                    s["spec_decode_num_accepted_tokens"])
    fig = drafts_by_step(steps)
    go.Figure(fig)
    accepted, rejected = (next(t for t in fig["data"] if t["name"] == n) for n in ("accepted", "rejected"))
    assert list(np.add(accepted["y"], rejected["y"])) == list(counts["drafted"])
    acc, dr = s["spec_decode_num_accepted_tokens"], s["spec_decode_num_draft_tokens"]
    assert f"{acc:,} of {dr:,} drafted tokens accepted ({acc / dr:.0%})" in str(fig["layout"])
    off = drafts_by_step(steps_table(simulated(0.5, "off")))
    assert off["data"] == [] and "Nothing drafted yet" in str(off["layout"])


def test_metrics_page_counts_drafts_under_vllms_names():
    from engine.server.prom import ServerMetrics
    eng, _ = hand_built_run()
    m = ServerMetrics("smollm2")
    for st in eng.steps:
        m.drafts(st.drafts)
    text = m.text().decode()

    def value(name, extra=""):
        line = next(l for l in text.splitlines()
                    if l.startswith(name + "{") and extra in l)
        return float(line.rsplit(" ", 1)[1])
    assert value("vllm:spec_decode_num_drafts_total") == 2
    assert value("vllm:spec_decode_num_draft_tokens_total") == 7
    assert value("vllm:spec_decode_num_accepted_tokens_total") == 6
    per_pos = [value("vllm:spec_decode_num_accepted_tokens_per_pos_total", f'position="{p}"') for p in range(4)]
    assert per_pos == [2, 2, 1, 1]


def test_playground_link_with_the_lookup_upside_down_is_raised_and_said():
    from playground.setup import Setup
    setup, problems = Setup.from_query({"speculative_method": "ngram", "prompt_lookup_min": "6",
                                        "prompt_lookup_max": "3"})
    assert (setup.prompt_lookup_min, setup.prompt_lookup_max) == (6, 6)
    assert "lookup 'to' was below 'from': raised to match" in problems
    assert setup.policy().speculative_method == "ngram" and setup.policy().prompt_lookup_max == 6
