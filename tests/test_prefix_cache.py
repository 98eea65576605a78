"""Prefix caching: the block pool's cache, the scheduler's use of it, and its counts (cost model, no torch)."""
import pytest

from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.kv_cache import BlockPool
from engine.core.metrics import summarize
from engine.core.request import Request, Status
from engine.sim.simulate import HAND_SET, fresh_copy, resolve_profile, simulate
from engine.runs.workload import WorkloadSpec

S = list(range(1000, 1040))          # a 40-token shared prefix: two full blocks of 16, and 8 more
T = list(range(2000, 2040))          # another one


def req(rid, prompt, arrival, out=2):
    return Request(id=rid, prompt_token_ids=list(prompt), max_new_tokens=out, arrival_s=arrival)


def run(requests, caching=True, **policy):
    eng = build_engine(EngineConfig(kv_pool_tokens=4096), SchedulerPolicy(enable_prefix_caching=caching, **policy))
    for r in requests:
        eng.submit(r)
    eng.run()
    return eng


def hand_built():
    """Requests whose hits are known in advance, block by block (16 tokens a block)."""
    a_prompt = S + list(range(1, 11))                       # 50 tokens
    return [req("a", a_prompt, 0.0),                       # first: nothing cached
            req("b", S + list(range(11, 21)), 10.0),       # S's two full blocks: 32
            req("c", a_prompt, 20.0),                      # a's three full blocks (a computed 51 tokens): 48
            req("e", T + [5] * 10, 30.0),                  # T is new: 0
            req("f", T + [6] * 10, 30.0),                  # same step as e: e's blocks not computed yet: 0
            req("g", T + [7] * 10, 40.0),                  # T's two blocks, computed by e and f: 32
            req("h", S[:31] + [9], 50.0)]                  # S's first block only (the second differs): 16


EXPECTED_HITS = {"a": 0, "b": 32, "c": 48, "e": 0, "f": 0, "g": 32, "h": 16}


def test_hits_are_counted_exactly_on_a_hand_built_workload():
    eng = run(hand_built())
    got = {r.id: r.num_cached_tokens for r in eng.requests.values()}
    assert got == EXPECTED_HITS
    assert all(r.status is Status.FINISHED for r in eng.requests.values())
    queries = sum(r.prompt_tokens for r in eng.requests.values())       # each started once
    s = summarize(eng.requests.values(), eng.steps)
    assert (s["prefix_cache_queries"], s["prefix_cache_hits"]) == (queries, sum(EXPECTED_HITS.values()))
    assert (eng.pool.prefix_queries, eng.pool.prefix_hits) == (queries, sum(EXPECTED_HITS.values()))
    # the step that started each request names its hit, and its prefill carries only the rest
    for st in eng.steps:
        for rid, n in st.prefix_hits:
            prefill = next(t for m, phase, t in st.members if m == rid)
            assert prefill == eng.requests[rid].prompt_tokens - n
    assert eng.pool.used_blocks == 0


def test_caching_off_counts_nothing_and_computes_every_token():
    eng = run(hand_built(), caching=False)
    assert all(r.num_cached_tokens == 0 for r in eng.requests.values())
    s = summarize(eng.requests.values(), eng.steps)
    assert s["prefix_cache_queries"] == 0 and s["prefix_cache_hits"] == 0
    assert sum(st.prefill_tokens for st in eng.steps) == sum(r.prompt_tokens for r in eng.requests.values())


def filled(pool, rid, tokens):
    """A request that held its blocks and computed every token, then ended."""
    r = req(rid, tokens, 0.0)
    pool.take_cached(r, pool.lookup(r))
    pool.allocate(r, r.remaining_tokens)
    r.num_computed_tokens = r.num_tokens
    pool.free(r)
    return r


def test_least_recently_used_blocks_are_evicted_first_and_a_tail_before_its_head():
    pool = BlockPool(num_blocks=4, block_size=4)
    pool.caching = True
    filled(pool, "old", [1] * 8)                      # two blocks, freed first
    filled(pool, "new", [2] * 8)                      # two blocks, freed last
    assert pool.cached_blocks == 4 and pool.used_blocks == 0 and pool.free_blocks == 4
    grab = req("grab", [3] * 4, 0.0)
    pool.allocate(grab, 4)                            # one block: evicts old's tail (its second block)
    assert len(pool.lookup(req("q", [1] * 9, 0.0))) == 1 and len(pool.lookup(req("q", [2] * 9, 0.0))) == 2
    pool.allocate(grab, 8)                            # one more: old's head goes too
    assert len(pool.lookup(req("q", [1] * 9, 0.0))) == 0 and len(pool.lookup(req("q", [2] * 9, 0.0))) == 2


def test_a_shared_block_stays_held_until_its_last_holder_ends():
    pool = BlockPool(num_blocks=4, block_size=4)
    pool.caching = True
    filled(pool, "first", [1] * 5)                    # caches one block ([1]*4)
    a, b = req("a", [1] * 5, 0.0), req("b", [1] * 5, 0.0)
    for r in (a, b):
        hit = pool.lookup(r)
        assert pool.can_allocate(r, 1, hit)
        pool.take_cached(r, hit)
        pool.allocate(r, 1)
    assert a.block_table[0] == b.block_table[0] and pool.used_blocks == 3
    pool.free(a)
    assert pool.used_blocks == 2                      # b still holds the shared block
    pool.free(b)
    assert pool.used_blocks == 0


def test_preempted_requests_find_their_own_blocks_again_and_everyone_finishes():
    spec = WorkloadSpec(num_requests=40, rate=0, prompt_kind="uniform", prompt_lo=40, prompt_hi=120,
                        output_kind="uniform", output_lo=20, output_hi=80, seed=3)
    eng = run(build_requests(spec), max_num_seqs=16, kv_capacity_tokens=640)
    assert sum(r.preemptions for r in eng.requests.values()) > 0
    assert eng.pool.prefix_hits > 0
    assert all(r.status is Status.FINISHED for r in eng.requests.values())
    assert eng.pool.used_blocks == 0


@pytest.mark.parametrize("mode", ["continuous", "static"])
@pytest.mark.parametrize("chunked", [True, False])
def test_limits_hold_with_caching_on_a_shared_prefix_workload(mode, chunked):
    spec = WorkloadSpec(num_requests=120, rate=30, burstiness=2.0, prompt_lo=20, prompt_hi=200, output_lo=1,
                        output_hi=60, system_prompts=3, system_prompt_tokens=100, conversations=10, turns=3, seed=7)
    policy = dict(mode=mode, max_num_seqs=6, max_num_batched_tokens=320, enable_chunked_prefill=chunked,
                  kv_capacity_tokens=1200, max_wait_ms=50)
    eng = run(build_requests(spec), **policy)
    for s in eng.steps:
        assert s.running <= 6 and s.prefill_tokens + s.decode_tokens <= 320 and s.kv_used_blocks <= 1200 // 16
    done = [r for r in eng.requests.values() if r.status is Status.FINISHED]
    assert len(done) + sum(r.status is Status.REJECTED for r in eng.requests.values()) == spec.num_requests
    assert len(done) > 60 and eng.pool.prefix_hits > 0 and eng.pool.used_blocks == 0
    off = run(build_requests(spec), caching=False, **policy)    # the same requests end the same way
    assert [(r.status, r.output_token_ids) for r in eng.requests.values()] == \
        [(r.status, r.output_token_ids) for r in off.requests.values()]


def test_the_simulator_prices_only_the_uncached_tokens():
    """A shared 512-token system prompt: with caching, prefill work and TTFT both fall."""
    spec = WorkloadSpec(num_requests=60, rate=4, prompt_lo=16, prompt_hi=48, output_lo=8, output_hi=16,
                        system_prompts=1, system_prompt_tokens=512, seed=1)
    profile = resolve_profile(HAND_SET)
    reqs = build_requests(spec)
    on = simulate(EngineConfig(), SchedulerPolicy(enable_prefix_caching=True), profile, [fresh_copy(r) for r in reqs])
    off = simulate(EngineConfig(), SchedulerPolicy(), profile, [fresh_copy(r) for r in reqs])
    s_on, s_off = (summarize(e.requests.values(), e.steps) for e in (on, off))
    saved = s_on["prefix_cache_hits"]
    assert saved >= 59 * 512 - 60 * 16             # every request after the first finds the system prompt
    assert sum(s.prefill_tokens for s in off.steps) - sum(s.prefill_tokens for s in on.steps) == saved
    assert s_on["ttft_s"]["p50"] < 0.7 * s_off["ttft_s"]["p50"]


def test_the_membership_chart_marks_each_hit_with_the_tokens_it_skipped():
    import pandas as pd
    import plotly.graph_objects as go

    from analysis.membership import batch_membership
    from engine.core.metrics import STEP_COLUMNS, step_row

    def hit_traces(eng):
        steps = pd.DataFrame([step_row(s) for s in eng.steps], columns=STEP_COLUMNS)
        fig = batch_membership(steps, max_slots=4)
        go.Figure(fig)                                      # a valid plotly figure
        return [t for t in fig["data"] if t.get("marker", {}).get("symbol") == "diamond" and t.get("x") is not None
                and list(t["x"]) != [None]]

    on = run(hand_built())
    (trace,) = hit_traces(on)
    hits = {rid: n for rid, n in EXPECTED_HITS.items() if n}
    assert len(trace["x"]) == len(hits)
    for text in trace["text"]:
        rid, rest = text.split(": ", 1)
        assert rest.startswith(f"{hits[rid]} prompt tokens from the prefix cache, "
                               f"{on.requests[rid].prompt_tokens - hits[rid]} computed")
    assert hit_traces(run(hand_built(), caching=False)) == []
