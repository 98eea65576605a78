"""The padded decode step that CUDA graphs record (decode_graphs.py) against the runner's own step.

On a GPU the padded forward is recorded once and replayed; here (no GPU) the same padded forward
runs eagerly, so what is held is everything but the recording: padding the batch and the context,
the spare block, the one input tensor, and the step's logits and K/V.
"""
from __future__ import annotations

import random

import pytest
import torch

from engine.model.decode_graphs import BATCHES, DecodeGraphs, bucket
from engine.model.model import load_model
from engine.model.runner import ModelRunner, SeqInput

NUM_BLOCKS, BS = 64, 16


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", device="cpu", dtype="fp32")


def runners(model):
    plain, padded = ModelRunner(model, NUM_BLOCKS, BS), ModelRunner(model, NUM_BLOCKS, BS)
    plain.graphs = None
    padded.graphs = DecodeGraphs(padded, record=padded.device.type == "cuda")
    return plain, padded


def shuffled_tables(lengths: list[int]) -> list[list[int]]:
    ids = list(range(NUM_BLOCKS))
    random.Random(1).shuffle(ids)
    tables, at = [], 0
    for n in lengths:
        k = -(-n // BS)
        tables.append(ids[at:at + k])
        at += k
    return tables


@pytest.fixture(scope="module")
def tiny_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here: recording and replaying graphs is checked where there is one")
    return load_model("tiny", device="cuda", dtype="fp32")


@pytest.mark.parametrize("prompts", [[250, 7, 40], [1], [30, 31, 32, 33, 34]])
def test_padded_decode_equals_the_runners_step(tiny, prompts):
    """Decode steps through the padded path give the plain step's logits and tokens, and write the
    same K/V, as contexts cross a bucket (250 + 12 > 256) and the batch pads (3 -> 4, 5 -> 8)."""
    check_decode_steps(tiny, prompts)


@pytest.mark.parametrize("prompts", [[250, 7, 40], [30, 31, 32, 33, 34]])
def test_replayed_graphs_equal_eager_steps_on_a_gpu(tiny_cuda, prompts):
    """The same on a GPU, where each (batch, context) shape is recorded once and then replayed."""
    padded = check_decode_steps(tiny_cuda, prompts)
    assert len(padded.graphs.graphs) >= 1 and not padded.graphs.refused


def check_decode_steps(model, prompts: list[int]) -> ModelRunner:
    steps = 12
    plain, padded = runners(model)
    if padded.graphs.record:                            # on a GPU: some shapes recorded ahead, on padding rows
        padded.graphs.record_ahead(2)
    tables = shuffled_tables([n + steps for n in prompts])
    g = torch.Generator().manual_seed(len(prompts))
    tokens = [torch.randint(3, model.config.vocab_size, (n,), generator=g).tolist() for n in prompts]
    seqs = [SeqInput(f"r{i}", t, 0, tab, True) for i, (t, tab) in enumerate(zip(tokens, tables))]
    assert padded.replays_graph(seqs) == (prompts == [1])   # a one-token prompt is decode-shaped
    nxt = plain.run(seqs)
    assert padded.run(seqs) == nxt
    seen_shapes = set()
    for _ in range(steps):
        seqs = [SeqInput(s.request_id, [t], s.start_pos + len(s.token_ids), s.block_table, True)
                for s, t in zip(seqs, nxt)]
        assert padded.replays_graph(seqs)
        seen_shapes.add(padded.graphs.shape_for(seqs))
        want = plain.forward_logits(seqs)
        got = padded.forward_logits(seqs)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
        nxt = want.argmax(-1).tolist()
    assert {b for b, _ in seen_shapes} == {bucket(len(prompts), BATCHES)}
    if max(prompts) == 250:
        assert {c for _, c in seen_shapes} == {256, 512}
    spare = NUM_BLOCKS * BS                             # the padding rows' block: only it may differ
    torch.testing.assert_close(padded.k_cache[:, :spare], plain.k_cache[:, :spare])
    torch.testing.assert_close(padded.v_cache[:, :spare], plain.v_cache[:, :spare])
    return padded


def test_padding_rows_stay_in_the_spare_block(tiny):
    """The padding rows of a step write K/V to the spare block and nowhere else."""
    _, padded = runners(tiny)
    seqs = [SeqInput("r0", [5, 6, 7], 0, [3], True)]
    padded.run(seqs)
    before_k, before_v = padded.k_cache.clone(), padded.v_cache.clone()
    padded.run([SeqInput("r0", [8], 3, [3], True)])      # batch 1: no padding rows
    padded.run([SeqInput("r0", [9], 4, [3], True), SeqInput("r1", [4], 0, [9], True)])
    changed = ((padded.k_cache != before_k) | (padded.v_cache != before_v)).any(-1).any(-1).any(0)
    slots = set(changed.nonzero().flatten().tolist())
    assert slots == {3 * BS + 3, 3 * BS + 4, 9 * BS}, slots
    seqs3 = [SeqInput(f"r{i}", [4], 0, [10 + i], True) for i in range(3)]    # 3 rows -> a batch of 4
    before_k = padded.k_cache.clone()
    padded.run(seqs3)
    changed = (padded.k_cache != before_k).any(-1).any(-1).any(0).nonzero().flatten().tolist()
    assert set(changed) <= {(10 + i) * BS for i in range(3)} | set(range(NUM_BLOCKS * BS, (NUM_BLOCKS + 1) * BS))
    assert any(s >= NUM_BLOCKS * BS for s in changed)   # the padding row wrote to the spare block


def test_which_steps_replay(tiny):
    _, padded = runners(tiny)
    dec = [SeqInput(f"d{i}", [5], 10, [i], True) for i in range(3)]
    assert padded.graphs.shape_for(dec) == (4, 256)
    assert padded.graphs.shape_for(dec + [SeqInput("p", [1, 2], 0, [9], True)]) is None      # a prefill chunk
    assert padded.graphs.shape_for([SeqInput("x", [5], 10, [1], False)]) is None             # no sample wanted
    assert padded.graphs.shape_for([SeqInput("x", [5], 1999, list(range(63)), True)]) == (1, 2048)
    many = [SeqInput(f"d{i}", [5], 10, [0], True) for i in range(BATCHES[-1] + 1)]
    assert padded.graphs.shape_for(many) is None
    assert padded.graphs.contexts == [256, 512, 1024, 2048]
    plain = ModelRunner(tiny, NUM_BLOCKS, BS)
    assert plain.graphs is None and not plain.replays_graph(dec)   # a CPU runner records no graphs


def test_a_shape_that_fails_to_record_runs_eagerly_and_says_why(tiny, monkeypatch):
    """Recording can fail (out of memory on a small GPU, say): that shape then runs eagerly, with the
    same logits, and the failure is kept in `refused`, tried once only."""
    plain, padded = runners(tiny)
    padded.graphs.record = True                        # as on a GPU, but recording fails
    calls = []

    def fail(inputs, context):
        calls.append(context)
        raise RuntimeError("CUDA out of memory (a stand-in)")
    monkeypatch.setattr(padded.graphs, "_record", fail)
    seqs = [SeqInput(f"r{i}", [5 + i, 6, 7], 0, [i], True) for i in range(3)]
    plain.run(seqs)
    padded.run(seqs)
    for step in range(2):
        dec = [SeqInput(f"r{i}", [9], 3 + step, [i], True) for i in range(3)]
        torch.testing.assert_close(padded.forward_logits(dec), plain.forward_logits(dec))
    assert calls == [256]                                 # one try for the shape (4, 256), not one a step
    assert "out of memory" in padded.graphs.refused[(4, 256)] and not padded.graphs.graphs


@pytest.mark.parametrize("max_batch, top", [(16, 16), (5, 8), (1, 1), (1000, 256)])
def test_graphs_up_to_the_batch_limit_are_recorded_ahead(tiny, monkeypatch, max_batch, top):
    """At the engine's build, every batch bucket up to its limit is recorded at the first context,
    on padding rows alone (they write only to the spare block); a step of those shapes then replays."""
    _, padded = runners(tiny)
    padded.graphs.record = True
    recorded = []

    def record(inputs, context):
        recorded.append((inputs.shape[0], context))
        assert (inputs[:, 2] == NUM_BLOCKS * BS).all()      # every row's K/V slot: the spare block's first
        return "graph"
    monkeypatch.setattr(padded.graphs, "_record", record)
    padded.graphs.record_ahead(max_batch)
    assert recorded == [(b, 256) for b in BATCHES if b <= top]
    padded.graphs.record_ahead(max_batch)
    assert len(recorded) == len([b for b in BATCHES if b <= top])   # recorded once
