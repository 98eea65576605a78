"""The packed, paged forward must give the transformers forward's logits, whatever the batch.

Every test uses shuffled (non-contiguous) block ids. "tiny" is a random 2-layer model;
"smollm2" is the real model in fp32 (converted once into the cache, ~20 s the very first time).
"""
from __future__ import annotations

import random

import pytest
import torch

from engine.model.model import load_model, resolve_dtype
from engine.model.runner import ModelRunner, SeqInput

NUM_BLOCKS = 64


@pytest.fixture(scope="module", params=["tiny", "smollm2"])
def lm(request):
    return load_model(request.param, device="cpu", dtype="fp32")


@pytest.fixture(scope="module")
def smol():
    return load_model("smollm2", device="cpu", dtype="fp32")


def prompt(n: int, seed: int, vocab: int = 49152) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()


def tables(num_seqs: int, blocks_each: int, seed: int = 0) -> list[list[int]]:
    """Disjoint, shuffled block tables: consecutive positions land in scattered blocks."""
    ids = list(range(NUM_BLOCKS))
    random.Random(seed).shuffle(ids)
    assert num_seqs * blocks_each <= NUM_BLOCKS
    return [ids[i * blocks_each:(i + 1) * blocks_each] for i in range(num_seqs)]


@torch.inference_mode()
def reference(lm, tokens: list[int]) -> torch.Tensor:
    return lm.hf_model(torch.tensor([tokens])).logits[0, -1].float()


def assert_close(got: torch.Tensor, want: torch.Tensor, rel: float = 1e-4):
    """fp32: the packed forward sums in a different order, so allow rounding, scaled to the logits."""
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    assert err <= rel * scale, f"max abs diff {err:.3g} vs logit scale {scale:.3g}"


def test_different_lengths_in_one_step(lm):
    prompts = [prompt(n, seed=n) for n in (1, 5, 37, 70)]
    runner = ModelRunner(lm, NUM_BLOCKS, block_size=16)
    seqs = [SeqInput(f"r{i}", p, 0, t, True) for i, (p, t) in enumerate(zip(prompts, tables(4, 8)))]
    logits = runner.forward_logits(seqs)
    assert logits.shape == (4, lm.config.vocab_size) and logits.dtype == torch.float32
    for got, p in zip(logits, prompts):
        assert_close(got, reference(lm, p))


@pytest.mark.parametrize("block_size", [4, 16])
def test_prefill_in_chunks(lm, block_size):
    p = prompt(70, seed=1)
    runner = ModelRunner(lm, NUM_BLOCKS, block_size=block_size)
    table = tables(1, 70 // block_size + 1)[0]
    # 30 + 39 tokens take the prefill path with an offset; the last 1 takes the decode path.
    for start, end in ((0, 30), (30, 69), (69, 70)):
        (got,) = runner.forward_logits([SeqInput("a", p[start:end], start, table, True)])
        assert_close(got, reference(lm, p[:end]))


def test_decode_mixed_with_prefill(lm):
    a, b, c = prompt(20, seed=2), prompt(90, seed=3), prompt(9, seed=4)
    ta, tb, tc = tables(3, 8, seed=5)
    runner = ModelRunner(lm, NUM_BLOCKS, block_size=16)
    runner.forward_logits([SeqInput("a", a, 0, ta, True), SeqInput("c", c, 0, tc, True)])
    # a and c decode one token per step while b's prompt arrives in chunks (sample only at its end)
    for step, (lo, hi) in enumerate(((0, 40), (40, 80), (80, 90))):
        a.append(100 + step)
        c.append(200 + step)
        got = runner.forward_logits([
            SeqInput("a", a[-1:], len(a) - 1, ta, True),
            SeqInput("b", b[lo:hi], lo, tb, hi == len(b)),
            SeqInput("c", c[-1:], len(c) - 1, tc, True),
        ])
        assert got.shape[0] == (3 if hi == len(b) else 2)
        assert_close(got[0], reference(lm, a))
        assert_close(got[-1], reference(lm, c))
        if hi == len(b):
            assert_close(got[1], reference(lm, b))


def test_run_returns_none_for_non_sampling_seqs(lm):
    runner = ModelRunner(lm, NUM_BLOCKS, block_size=16)
    t = tables(2, 4)
    out = runner.run([SeqInput("a", prompt(10, 6), 0, t[0], False), SeqInput("b", prompt(7, 7), 0, t[1], True)])
    assert out[0] is None and isinstance(out[1], int)
    assert out[1] == int(reference(lm, prompt(7, 7)).argmax())


def test_greedy_batch_equals_generate(smol):
    tok = smol.tokenizer
    questions = ["What is the capital of France?", "Write a haiku about the sea.",
                 "List three prime numbers.", "Hi!"]
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                       tokenize=False) for q in questions]
    prompts = [tok(p).input_ids for p in prompts]
    n_new = 16
    want = []
    with torch.inference_mode():
        for p in prompts:
            out = smol.hf_model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=n_new)
            want.append(out[0, len(p):].tolist())

    runner = ModelRunner(smol, NUM_BLOCKS, block_size=16)
    tabs = tables(len(prompts), 6)
    seqs = [list(p) for p in prompts]
    # step 1: all prefills packed together; then all decodes packed together
    new = runner.run([SeqInput(str(i), p, 0, tabs[i], True) for i, p in enumerate(seqs)])
    got = [[t] for t in new]
    for _ in range(n_new - 1):
        for s, t in zip(seqs, new):
            s.append(t)
        new = runner.run([SeqInput(str(i), s[-1:], len(s) - 1, tabs[i], True) for i, s in enumerate(seqs)])
        for g, t in zip(got, new):
            g.append(t)
    for g, w in zip(got, want):
        assert g[:len(w)] == w   # generate stops at EOS; the runner just keeps going


def sample_run(lm, batch_mates: int, steps: int = 8) -> list[int]:
    """Sample request 'x' for `steps` tokens next to `batch_mates` other requests."""
    runner = ModelRunner(lm, NUM_BLOCKS, block_size=16)
    tabs = tables(batch_mates + 1, 2)
    x = prompt(6, seed=8)
    others = [prompt(3 + i, seed=20 + i) for i in range(batch_mates)]
    pos = [0] * (batch_mates + 1)
    out = []
    for step in range(steps):
        seqs = [SeqInput("x", x[pos[0]:], pos[0], tabs[0], True, temperature=1.0, top_p=0.9, seed=1234)]
        for i, o in enumerate(others, 1):
            seqs.append(SeqInput(f"o{i}", o[pos[i]:], pos[i], tabs[i], True,
                                 temperature=0.7 * (i % 2), seed=i))  # some greedy, some sampled
        toks = runner.run(seqs)
        pos = [len(x)] + [len(o) for o in others]
        x.append(toks[0])
        for o, t in zip(others, toks[1:]):
            o.append(t)
        out.append(toks[0])
    return out


def test_seeded_sampling_ignores_batch_mates():
    lm = load_model("tiny", device="cpu", dtype="fp32")
    alone = sample_run(lm, batch_mates=0)
    assert sample_run(lm, batch_mates=3) == alone
    assert sample_run(lm, batch_mates=5) == alone
    assert len(set(alone)) > 1   # really sampled, not stuck on one token


def test_tiny_top_p_is_greedy():
    lm = load_model("tiny", device="cpu", dtype="fp32")
    runner = ModelRunner(lm, NUM_BLOCKS, block_size=16)
    p = prompt(12, seed=9)
    t = tables(2, 2)
    out = runner.run([SeqInput("a", p, 0, t[0], True, temperature=2.0, top_p=1e-6, seed=3),
                      SeqInput("b", p, 0, t[1], True)])
    assert out[0] == out[1] == int(reference(lm, p).argmax())


def test_bf16_close_to_transformers():
    lm = load_model("tiny", device="cpu", dtype="bf16")
    runner = ModelRunner(lm, NUM_BLOCKS, block_size=16)
    assert runner.k_cache.dtype == torch.bfloat16
    prompts = [prompt(n, seed=n) for n in (3, 40)]
    t = tables(2, 4)
    runner.forward_logits([SeqInput("a", prompts[0][:-1], 0, t[0], False)])
    got = runner.forward_logits([SeqInput("a", prompts[0][-1:], 2, t[0], True),
                                 SeqInput("b", prompts[1], 0, t[1], True)])
    for g, p in zip(got, prompts):
        assert_close(g, reference(lm, p), rel=3e-2)


def test_resolve_dtype():
    assert resolve_dtype("fp32") == resolve_dtype("float32") == torch.float32
    assert resolve_dtype("bf16") == resolve_dtype("bfloat16") == torch.bfloat16
    assert resolve_dtype("fp16") == torch.float16
    assert resolve_dtype("auto", "cpu") in (torch.float32, torch.bfloat16)
    with pytest.raises(ValueError):
        resolve_dtype("int8")
