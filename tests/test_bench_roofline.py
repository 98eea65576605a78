"""The bench's roofline: this machine's peaks, measured the way the bench measures them."""
import pytest
import torch

from engine.cli import bench
from engine.model.linear import onednn_available


def test_the_roofline_is_the_best_of_its_trials_beside_their_median():
    roof = bench.measure_roofline("cpu", torch.float32)
    assert roof["gemm_flops"] >= roof["gemm_median"] > 0 and roof["mem_bw"] >= roof["mem_median"] > 0
    assert roof["gemm_by"] in ("torch", "oneDNN", "C kernel")


def test_of_two_measurements_each_peak_comes_from_the_quieter():
    """A neighbour busy through one measurement's trials makes its peak low: the bench measures
    before and after the engine's run and keeps each peak's better measurement, with its median."""
    before = {"gemm_flops": 400e9, "gemm_median": 390e9, "gemm_by": "torch", "mem_bw": 45e9, "mem_median": 44e9}
    after = {"gemm_flops": 500e9, "gemm_median": 480e9, "gemm_by": "C kernel", "mem_bw": 30e9, "mem_median": 29e9}
    assert bench.better_roofline(before, after) == {"gemm_flops": 500e9, "gemm_median": 480e9, "gemm_by": "C kernel",
                                                    "mem_bw": 45e9, "mem_median": 44e9}
    assert bench.better_roofline(after, before) == bench.better_roofline(before, after)


@pytest.mark.skipif(not onednn_available(torch.device("cpu"), torch.float32), reason="no oneDNN in this torch")
def test_a_product_slower_than_any_peak_is_left_out(monkeypatch):
    """As torch's emulated bf16 product is on a CPU without bf16 instructions (a minute a trial)."""
    monkeypatch.setattr(bench, "SLOW_GEMM", 1e18)
    assert bench.measure_roofline("cpu", torch.float32)["gemm_by"] in ("oneDNN", "C kernel")


def test_the_roofline_counts_each_token_at_its_own_position(monkeypatch):
    """A prefill chunk scores a triangle of (query, key) pairs after its offset, and a decode token
    sees every key before it: each request's position is followed through the steps."""
    from types import SimpleNamespace as Step
    seen = []
    monkeypatch.setattr(bench, "step_roofline_s", lambda costs, roof, tokens, samples, pairs, kv_rows, in_turn:
                        seen.append((tokens, samples, pairs, kv_rows)) or 1.0)
    steps = [Step(members=(("a", "prefill", 4),), prefix_hits=(), prefill_tokens=4, decode_tokens=0, duration_s=1),
             Step(members=(("a", "prefill", 2), ("b", "prefill", 3)), prefix_hits=(("b", 16),),
                  prefill_tokens=5, decode_tokens=0, duration_s=1),
             Step(members=(("a", "decode", 1), ("b", "decode", 1)), prefix_hits=(), prefill_tokens=0,
                  decode_tokens=2, duration_s=2)]
    assert bench.roofline_share(Step(steps=steps), costs=None, roof=None) == 3 / 4
    assert seen == [(4, 1, 1 + 2 + 3 + 4, 4),
                    (5, 1, (5 + 6) + (17 + 18 + 19), 6 + 19),     # a at 4.., b after 16 cached tokens
                    (2, 2, 7 + 20, 7 + 20)]


COSTS = {"body_params": 100, "head_params": 10, "weight_bytes": 1000, "kv_bytes_per_token": 10,
         "attn_flops_per_pair": 4}
ROOF = {"gemm_flops": 1000.0, "mem_bw": 1000.0}


def test_the_roofline_in_turn_gives_products_and_attention_each_their_own_roof():
    """A decode step at a batch whose products are bound by their arithmetic and whose attention is
    bound by its K/V reads: the plain roofline lets the reads hide under the arithmetic, the
    roofline in turn adds them (as engine/sim/roofline.py models a step)."""
    # 8 rows: products 2*100*8 + 2*10*8 = 1,760 FLOPs (1.76 s) against 1,000 weight bytes (1 s);
    # attention: 800 (query, key) pairs, 3,200 FLOPs (3.2 s), against 800 K/V rows, 8,000 bytes (8 s)
    plain = bench.step_roofline_s(COSTS, ROOF, tokens=8, samples=8, pairs=800, kv_rows=800)
    in_turn = bench.step_roofline_s(COSTS, ROOF, tokens=8, samples=8, pairs=800, kv_rows=800, in_turn=True)
    assert plain == pytest.approx(max(1.76 + 3.2, 1 + 8))
    assert in_turn == pytest.approx(max(1.76, 1) + max(3.2, 8))
    assert in_turn > plain
    # where both phases hit the same roof, taking turns costs nothing
    same = dict(tokens=8, samples=8, pairs=800, kv_rows=10)       # both bound by their arithmetic
    assert bench.step_roofline_s(COSTS, ROOF, **same, in_turn=True) == pytest.approx(
        bench.step_roofline_s(COSTS, ROOF, **same))


def test_the_share_in_turn_is_never_below_the_plain_share():
    """The roofline in turn is never shorter than the plain one, so an engine's share of it is never lower."""
    import random
    rng = random.Random(3)
    for _ in range(500):
        shape = dict(tokens=rng.randint(1, 4096), samples=rng.randint(1, 64), pairs=rng.randint(0, 10**6),
                     kv_rows=rng.randint(0, 10**5))
        plain = bench.step_roofline_s(COSTS, ROOF, **shape)
        assert bench.step_roofline_s(COSTS, ROOF, **shape, in_turn=True) >= plain * (1 - 1e-12)   # (equal: rounding)


def test_each_decode_step_at_batch_1_is_compared_with_a_copy_made_a_step_before_it(monkeypatch):
    """Right after a copy a step first writes back the copy's lines: the step after it is the one
    compared. A read leaves nothing to write back: the step right after it is compared with it.
    Here the copies report 1, 2, 3, ... GB/s in turn and the reads 101, 102, ... (the first of
    each is the warm-up)."""
    from engine.model.model import load_model
    copies, reads = iter(range(1, 100)), iter(range(101, 200))
    monkeypatch.setattr(bench, "copy_rate", lambda device: lambda: next(copies) * 1e9)
    monkeypatch.setattr(bench, "read_rate", lambda device: lambda: next(reads) * 1e9)
    lm = load_model("tiny", device="cpu", dtype="fp32")
    costs = bench.model_costs(lm)
    got = bench.b1_against_copies(lm, costs, pairs=3)
    assert got["copies"] == [2e9, 3e9, 4e9], "a copy before every third step, after the warm-up"
    assert got["reads"] == [102e9, 103e9, 104e9], "a read before every third step, after the warm-up"
    assert len(got["steps_ms"]) == len(got["read_steps_ms"]) == 3
    for ms, bw, ratio in [*zip(got["steps_ms"], got["copies"], got["ratios"]),
                          *zip(got["read_steps_ms"], got["reads"], got["read_ratios"])]:
        assert ratio == pytest.approx(ms / (costs["weight_bytes"] / bw * 1000))
