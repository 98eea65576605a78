"""Roofline models of other hardware: shapes that match the published parameter counts, and
step times that obey the roofs they are built from."""
import json

import pytest

from engine.sim.roofline import (DEVICES, MEMORY_UTILIZATION, MODELS, Device, RooflineStepModel,
                             is_roofline_name, model_named, roofline_profile, this_cpu)

H100_8B = "h100-sxm:llama-3.1-8b"


@pytest.mark.parametrize("key, published", [("smollm2-135m", 134.5e6), ("llama-3.1-8b", 8.03e9),
                                            ("qwen2.5-7b", 7.61e9)])
def test_the_shapes_give_the_published_parameter_counts(key, published):
    assert model_named(key).params == pytest.approx(published, rel=0.01)


def test_the_smollm2_shape_is_the_bundled_models():
    from engine.model.model import smollm2_dir
    c = json.loads((smollm2_dir() / "config.json").read_text())
    m = model_named("smollm2-135m")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.intermediate, m.vocab, m.tied_embeddings) == (
        c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
        c["head_dim"], c["intermediate_size"], c["vocab_size"], c["tie_word_embeddings"])


def test_8b_decode_on_an_h100_is_memory_bound_at_a_plausible_speed():
    r = roofline_profile(H100_8B)
    assert r.bound([(1024, 1, True)]) == "memory"
    # One token a step cannot beat reading every weight once at the spec-sheet bandwidth...
    ceiling = DEVICES["h100-sxm"].bandwidth / r.weight_bytes            # about 209 tokens/s
    tokens_per_s = r.decode_tokens_per_s(1, 1024)
    assert 0.5 * ceiling < tokens_per_s < ceiling
    # ...and batching shares that read: 32 sequences make far more tokens a second, less than 32x.
    assert 8 * tokens_per_s < r.decode_tokens_per_s(32, 1024) < 32 * tokens_per_s


def test_a_long_prefill_is_compute_bound_and_no_faster_than_peak():
    r = roofline_profile(H100_8B)
    chunks = [(0, 4096, True)]
    assert r.bound(chunks) == "compute"
    flops = 2 * 4096 * r.model.layers * r.model.layer_params
    assert r.breakdown(chunks)["step_ms"] > flops / DEVICES["h100-sxm"].peak_flops * 1000


def test_steps_cost_more_with_more_sequences_and_longer_context():
    r = roofline_profile("a100-80gb:qwen2.5-7b")
    ms = lambda chunks: r.breakdown(chunks)["step_ms"]
    assert ms([(512, 1, True)] * 8) < ms([(512, 1, True)] * 64) < ms([(4096, 1, True)] * 64)
    assert ms([(0, 256, True)]) < ms([(1024, 256, True)])


def test_kv_capacity_is_what_the_memory_holds_after_the_weights():
    r = roofline_profile(H100_8B)
    kv_per_token = 2 * 32 * 8 * 128 * 2                                   # K and V, 32 layers, 8 heads of 128, bf16
    assert r.kv_capacity_tokens == int((80e9 * MEMORY_UTILIZATION - r.weight_bytes) // kv_per_token)
    assert roofline_profile("l4:llama-3.1-8b").kv_capacity_tokens < r.kv_capacity_tokens / 5
    small = Device("10 GB card", 100e12, 1e12, 10e9, "bf16", 0.5, 0.8, 1.0, "test")
    with pytest.raises(ValueError, match="does not fit on 10 GB card"):
        RooflineStepModel(small, model_named("llama-3.1-8b"))


def test_names_are_checked():
    assert is_roofline_name(H100_8B) and is_roofline_name("cpu:smollm2-135m")
    assert not is_roofline_name("h100:llama") and not is_roofline_name("profile.json")
    with pytest.raises(ValueError, match="h100-sxm, a100-80gb, l4, cpu"):
        roofline_profile("h200:llama-3.1-8b")
    with pytest.raises(ValueError, match=", ".join(MODELS)):
        roofline_profile("l4:mistral-7b")
    with pytest.raises(ValueError, match="DEVICE:MODEL"):
        roofline_profile("l4")


def test_every_roofline_label_says_it_is_a_model():
    for device in DEVICES:
        for model in MODELS:
            r = roofline_profile(f"{device}:{model}")
            assert r.label.startswith("roofline model:")
            assert r.describe()["device_source"] and r.describe()["model_source"]


def test_this_cpu_is_measured():
    cpu = this_cpu("fp32")
    assert cpu.name == "this CPU" and cpu.dtype == "fp32"
    assert 1e8 < cpu.peak_flops < 1e14 and 1e8 < cpu.bandwidth < 1e13
    assert roofline_profile("cpu:smollm2-135m", "fp32").device is cpu
