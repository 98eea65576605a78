"""Prefix caching on the real model: the same greedy tokens with it on and off (and as transformers
generates them), while the cached prefix's tokens really are skipped by the forward."""
import os

import pytest

from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.model.model import load_model
from engine.core.request import Status
from engine.sim.simulate import fresh_copy
from engine.runs.workload import PromptMaker, WorkloadSpec
from tests.test_engine_model import reference_greedy

MODEL = os.environ.get("PREFIX_TEST_MODEL", "tiny")


@pytest.fixture(scope="module")
def smollm2():
    return load_model(MODEL, "cpu", "fp32")


def run(model, requests, caching, **policy):
    engine = build_engine(EngineConfig(kv_pool_tokens=2048),
                          SchedulerPolicy(enable_prefix_caching=caching, **policy), model)
    for r in requests:
        engine.submit(r)
    engine.run()
    return engine


def test_greedy_tokens_are_the_same_with_prefix_caching_on_and_off(smollm2):
    # Two system prompts and three conversations of up to three turns: requests share system
    # prompts and their own earlier turns. A small KV cache also forces preemptions, after which
    # a request finds its own blocks again.
    spec = WorkloadSpec(num_requests=9, rate=6, prompt_lo=8, prompt_hi=24, output_lo=6, output_hi=10,
                        system_prompts=2, system_prompt_tokens=64, conversations=3, turns=3, seed=2)
    requests = build_requests(spec, PromptMaker(smollm2.tokenizer))
    policy = dict(max_num_seqs=4, max_num_batched_tokens=96, kv_capacity_tokens=384)
    on = run(smollm2, [fresh_copy(r) for r in requests], True, **policy)
    off = run(smollm2, [fresh_copy(r) for r in requests], False, **policy)
    hits = sum(r.num_cached_tokens for r in on.requests.values())
    assert hits >= 6 * 64, "the workload meant most requests to find a system prompt in the cache"
    assert sum(s.prefill_tokens for s in on.steps) < sum(s.prefill_tokens for s in off.steps)
    for a, b in zip(on.requests.values(), off.requests.values()):
        assert a.status is b.status is Status.FINISHED, (a.error, b.error)
        assert a.output_token_ids == b.output_token_ids, a.id
    hit = max(on.requests.values(), key=lambda r: r.num_cached_tokens)
    assert hit.output_token_ids == reference_greedy(smollm2, hit)
