"""The KV pool's arithmetic (engine.sim.kv_sizing) and the KV capacity lab's analysis, on the simulator."""
import math

import pytest

from engine.core.validation import SMOLLM2_KV_BYTES_PER_TOKEN
from engine.sim import kv_sizing
from engine.sim.roofline import DEVICES, MODELS
from course import claims
from labs.kv_capacity import experiment as lab

H100 = DEVICES["h100-sxm"]


def test_bytes_per_token_follow_the_kv_heads():
    llama8 = kv_sizing.kv_pool(kv_sizing.SHAPES["llama-3.1-8b"], H100)
    assert llama8.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072          # GQA: 8 KV heads, not 32
    assert kv_sizing.kv_pool(kv_sizing.SHAPES["llama-3.1-70b"], H100, gpus=4).kv_bytes_per_token == 2 * 80 * 2 * 128 * 2
    row = lab.profile_table().iloc[1]
    assert row["KV bytes a token (all GPUs)"] == 131072 and row["without GQA"] == 4 * 131072


def test_the_bundled_config_is_read_and_matches_the_engine():
    shape = lab.bundled_shape()
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.heads) == (30, 3, 64, 9)
    assert shape.source.endswith("config.json")
    assert lab.bundled_bytes_per_token(4)["bytes"] == SMOLLM2_KV_BYTES_PER_TOKEN
    assert kv_sizing.shape_from_config({**_config(shape), "num_key_value_heads": 9}, "mha", "x").kv_heads == 9
    no_head_dim = {k: v for k, v in _config(shape).items() if k != "head_dim"}
    assert kv_sizing.shape_from_config(no_head_dim, "x", "x").head_dim == 576 // 9


def _config(shape) -> dict:
    return {"num_hidden_layers": shape.layers, "hidden_size": shape.hidden, "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.kv_heads, "head_dim": shape.head_dim,
            "intermediate_size": shape.intermediate, "vocab_size": shape.vocab, "tie_word_embeddings": True}


def test_the_pool_is_what_the_weights_leave_cut_into_blocks():
    m = MODELS["llama-3.1-8b"]
    p = kv_sizing.kv_pool(m, H100, 0.9, 8192)
    left = 80e9 * 0.9 - m.params * 2 - kv_sizing.ACTIVATION_GB * 1e9
    blocks = int(left // (131072 * 16))
    assert p.tokens == blocks * 16 and p.tokens % kv_sizing.BLOCK_SIZE == 0
    assert p.concurrency == pytest.approx(blocks / (8192 / 16))
    assert p.fits
    # more memory, more pool; half the max_model_len, twice the concurrency, the same pool
    assert kv_sizing.kv_pool(m, H100, 0.95, 8192).tokens > p.tokens
    half = kv_sizing.kv_pool(m, H100, 0.9, 4096)
    assert half.tokens == p.tokens and half.concurrency == pytest.approx(2 * p.concurrency)


def test_a_70b_model_needs_several_h100s():
    m = kv_sizing.SHAPES["llama-3.1-70b"]
    one, two, four = (kv_sizing.kv_pool(m, H100, 0.9, 8192, g) for g in (1, 2, 4))
    assert not one.fits and one.tokens == 0 and one.weights_gb > 80
    assert not two.fits, "half the weights leave no room for activations and cache at 0.9"
    assert four.fits and four.weights_gb == pytest.approx(one.weights_gb / 4)
    starts = lab.profile_table().set_index(["model", "GPUs"])["starts"]
    assert not starts[("Llama-3.1-70B", "1 × H100 SXM")] and starts[("Llama-3.1-70B", "4 × H100 SXM")]


@pytest.mark.parametrize("kw, field", [({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
                                       ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
                                       ({"gpus": 0}, "gpus"), ({"max_model_len": 0}, "max_model_len")])
def test_bad_settings_are_refused_by_name(kw, field):
    with pytest.raises(ValueError, match=field):
        kv_sizing.kv_pool(MODELS["llama-3.1-8b"], H100, **kw)


@pytest.fixture(scope="module")
def sweep():
    from engine.sim.simulate import resolve_profile
    return lab.pool_table(lab.simulated_pool_runs(resolve_profile("h100-sxm:llama-3.1-8b").step_model))


def test_the_sweep_counts_add_up(sweep):
    assert list(sweep["pool"]) == list(lab.POOLS)
    assert (sweep["peak_running"] <= lab.SLOTS).all() and (sweep["kv_peak_pct"] <= 100).all()
    small, roomy = (sweep[sweep["pool"] == p].iloc[0] for p in (lab.SMALL_POOL, lab.ROOMY_POOL))
    assert small["preemptions"] > 0 and small["recomputed_tokens"] > 0
    assert roomy["preemptions"] == 0 and roomy["recomputed_tokens"] == 0
    # a smaller pool never runs more at once
    assert list(sweep["mean_running_while_waiting"]) == sorted(sweep["mean_running_while_waiting"])
    assert roomy["pool"] >= lab.NEED > small["pool"]


def test_each_outcome_of_the_prefix_claim_has_its_own_words():
    base = {"prefill_tokens": 1000, "ttft_p50_s": 1.0}
    shown = lab.prefix_verdict(base, {**base, "hit_rate": 0.9, "prefill_tokens": 100, "ttft_p50_s": 0.2}, "shared")
    nothing = lab.prefix_verdict(base, {**base, "hit_rate": 0.0}, "distinct")
    small = lab.prefix_verdict(base, {**base, "hit_rate": 0.8, "ttft_p50_s": 0.9}, "shared")
    assert shown.outcome == claims.SHOWN and nothing.outcome == small.outcome == claims.NOT_SHOWN
    assert "Almost nothing was found" in nothing.words and "times shorter" in nothing.words and "too small a part" in small.words
    # found tokens but a TTFT past the threshold without hits is not the claim
    no_hits = lab.prefix_verdict(base, {**base, "hit_rate": 0.1, "ttft_p50_s": 0.2}, "shared")
    assert no_hits.outcome == claims.NOT_SHOWN
    assert len({shown.words, nothing.words, small.words}) == 3
    slower = lab.prefix_verdict(base, {**base, "hit_rate": 0.02, "ttft_p50_s": 1.25}, "distinct")
    assert "1.25 times longer" in slower.words and "shorter" not in slower.words


def test_a_run_where_nobody_waited_is_undecided():
    row = {"pool": 3072, "mean_running_while_waiting": math.nan, "kv_peak_pct": 50.0, "preemptions": 0,
           "recomputed_tokens": 0}
    assert lab.caps_verdict(row).outcome == claims.UNDECIDED


def test_the_charts_draw_each_run_and_count_its_preemptions():
    from engine.sim.simulate import resolve_profile
    runs = lab.simulated_pool_runs(resolve_profile("h100-sxm:llama-3.1-8b").step_model, (512, 3072))
    usage, running = lab.usage_over_time(runs), lab.running_over_time(runs)
    assert len(usage.data) == 2 and len(running.data) == 4
    assert all(0 <= y <= 100 for t in usage.data for y in t.y)
    for pool, (res, _) in runs.items():
        [line] = [t for t in running.data if t.name == f"preemptions, pool {pool:,}"]
        assert list(line.y)[-1] == res.summary["preemptions"], "the dotted line ends at the run's preemptions"
    assert res.summary["preemptions"] == 0 and runs[512][0].summary["preemptions"] > 0
    for empty in (lab.usage_over_time({}), lab.running_over_time({}), lab.ttft_bars({})):
        assert not empty.data and empty.layout.title.text
