"""/metrics counts prefix-cache queries and hits in tokens, under vLLM's names."""
from engine.core.config import SchedulerPolicy
from tests.test_server import client, metrics, sample, serving, tiny  # noqa: F401 (tiny is a fixture)

SHARED = list(range(1000, 1040))      # 40 tokens: two full blocks of 16


def test_metrics_count_prefix_cache_queries_and_hits_in_tokens(tiny):  # noqa: F811
    policy = SchedulerPolicy(enable_prefix_caching=True)
    with serving(tiny, policy=policy) as (url, _):
        c = client(url)
        for tail in (1, 2, 3):        # one after another: each later one finds the shared blocks
            c.completions.create(model="tiny", prompt=SHARED + [tail] * 10, max_tokens=2,
                                 extra_body={"ignore_eos": True})
        fam = metrics(url)
    assert fam["vllm:prefix_cache_queries"].type == "counter" and fam["vllm:prefix_cache_hits"].type == "counter"
    assert sample(fam, "vllm:prefix_cache_queries", "_total") == 3 * 50
    assert sample(fam, "vllm:prefix_cache_hits", "_total") == 2 * 32
