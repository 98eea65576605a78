"""Workload knobs for shared system prompts and multi-turn conversations."""
from dataclasses import replace

from engine.runs.arrivals import build_requests
from engine.runs.workload import WorkloadSpec

SPEC = WorkloadSpec(num_requests=40, rate=5, prompt_lo=8, prompt_hi=24, output_lo=4, output_hi=9, seed=4)


def test_without_sharing_the_requests_are_those_drawn_before_the_knobs_existed():
    plain = build_requests(SPEC)
    # the same arrivals and lengths when prompts share parts: sharing draws from streams of its own
    shared = build_requests(replace(SPEC, system_prompts=3, system_prompt_tokens=32, conversations=5))
    assert [(r.arrival_s, r.max_new_tokens, r.tenant) for r in plain] == \
        [(r.arrival_s, r.max_new_tokens, r.tenant) for r in shared]
    assert [r.prompt_token_ids for r in build_requests(SPEC)] == [r.prompt_token_ids for r in plain]


def test_system_prompts_are_shared_exactly_and_drawn_the_same_for_a_seed():
    spec = replace(SPEC, system_prompts=3, system_prompt_tokens=32)
    reqs = build_requests(spec)
    heads = {tuple(r.prompt_token_ids[:32]) for r in reqs}
    assert len(heads) == 3
    for r in reqs:
        assert len(r.prompt_token_ids) - 32 in range(SPEC.prompt_lo, SPEC.prompt_hi + 1)
    assert [r.prompt_token_ids for r in build_requests(spec)] == [r.prompt_token_ids for r in reqs]


def test_a_conversation_turn_starts_with_the_whole_conversation_so_far():
    spec = replace(SPEC, system_prompts=2, system_prompt_tokens=16, conversations=4, turns=3)
    reqs = build_requests(spec)
    longer = 0
    for i, r in enumerate(reqs):
        earlier = [q for q in reqs[:i] if r.prompt_token_ids[:len(q.prompt_token_ids)] == q.prompt_token_ids]
        if earlier:       # a later turn: its prompt extends an earlier turn's prompt, plus that turn's reply
            q = max(earlier, key=lambda q: len(q.prompt_token_ids))
            assert len(r.prompt_token_ids) >= len(q.prompt_token_ids) + q.max_new_tokens + SPEC.prompt_lo
            longer += 1
    assert longer >= 15
    assert max(len(r.prompt_token_ids) for r in reqs) <= 16 + 3 * (SPEC.prompt_hi + SPEC.output_hi)
