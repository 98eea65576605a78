"""Speculative decoding on the real model: greedy outputs are the same token for token with it on
and off, over copies (where drafts are accepted) and free text (where most are rejected), in fp32
and bf16, with prompts prefilling in the same steps as drafts are checked."""
import random

import pytest

from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.metrics import summarize
from engine.core.request import Request, Status
from engine.model.model import load_model
from engine.runs.build import build_engine
from engine.runs.workload import PromptMaker


def workload(model) -> list[tuple[list[int], float]]:
    """(prompt, arrival) pairs: three passages to copy and three free questions, arriving over
    the first half second, so later prompts prefill beside earlier requests' drafts."""
    maker, rng = PromptMaker(model.tokenizer), random.Random(3)
    prompts = [maker.repeat_passage(i) for i in (0, 1, 3)] + [maker.make(60, rng) for _ in range(3)]
    order = [0, 3, 1, 4, 2, 5]
    return [(prompts[i], 0.1 * n) for n, i in enumerate(order)]


def run(model, method: str):
    policy = SchedulerPolicy(speculative_method=method, num_speculative_tokens=4, max_num_seqs=6,
                             max_num_batched_tokens=128, long_prefill_token_threshold=64)
    engine = build_engine(EngineConfig(), policy, model)
    for i, (prompt, arrival) in enumerate(workload(model)):
        engine.submit(Request(f"r{i}", list(prompt), 40, arrival_s=engine.clock.now() + arrival))
    engine.run()
    return engine


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_greedy_outputs_are_identical_with_speculation_on_and_off(dtype):
    model = load_model("smollm2", "cpu", dtype)
    off, on = run(model, "off"), run(model, "ngram")
    for rid, r in off.requests.items():
        assert r.status is Status.FINISHED and on.requests[rid].status is Status.FINISHED
        assert on.requests[rid].output_token_ids == r.output_token_ids, (dtype, rid)
    s = summarize(on.requests.values(), on.steps)
    drafted, accepted = s["spec_decode_num_draft_tokens"], s["spec_decode_num_accepted_tokens"]
    # the case means something: drafts were both accepted and rejected, and some were checked in a
    # step where a prompt was prefilling
    assert 0 < accepted < drafted, (accepted, drafted)
    assert any(st.drafts and st.prefill_tokens for st in on.steps)
    assert len(on.steps) < len(off.steps)
    assert on.pool.used_blocks == 0
