"""The hand-written CPU kernels and the oneDNN linear must compute what plain PyTorch computes.

They are only a faster route to the same numbers: each is checked against the PyTorch
expression it replaces, in fp32 and bf16, on the shapes the engine meets (batch 1 and 2, odd
widths, paged caches with shuffled blocks, contexts of one token, grouped-query heads) and on
shapes that take the kernel's general path, on every vector path this CPU runs (AVX-512 with
bf16 dot products, AVX-512, AVX2, portable); a path it cannot run is skipped, naming the missing
CPU feature.
"""
from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from engine.model import cpu_kernels, kernel_paths
from engine.model.linear import EXACT_ROWS, Linear, onednn_available, padded_rows

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None,
                               reason="no C compiler: the runner uses PyTorch ops instead")
DTYPES = [torch.float32, torch.bfloat16]


def kernels_of(path: str):
    """The kernels built as `path`, or a skip naming the CPU features it needs and this CPU lacks."""
    missing = kernel_paths.missing_features(path)
    if missing:
        pytest.skip(f"the {path} path needs {', '.join(missing)}, which this CPU lacks")
    k = cpu_kernels.load(path)
    assert k is not None, "gcc is present, so the kernels must build (see the log for the compiler's message)"
    assert k.path == path
    return k


@pytest.fixture(scope="module", params=list(kernel_paths.PATHS))
def kernels(request):
    return kernels_of(request.param)


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    tol = 1e-5 if dtype == torch.float32 else 2e-2          # bf16 keeps ~3 significant digits
    scale = want.float().abs().max().item() + 1e-6
    err = (got.float() - want.float()).abs().max().item()
    assert err <= tol * scale, f"max abs diff {err:.3g} at scale {scale:.3g} ({dtype})"


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(1, 576), (2, 576), (1, 50), (3, 64), (3, 576), (4, 576), (5, 576)])
def test_few_rows_linear_matches_torch(kernels, dtype, rows, width):
    g = torch.Generator().manual_seed(rows * 100 + width)
    x = torch.randn(rows, width, generator=g).to(dtype)
    w = torch.randn(1003, width, generator=g).to(dtype)       # 1003 rows: a tail past the kernel's 4-row groups
    close(kernels.few_rows_linear(x, w), F.linear(x, w), dtype)


@needs_gcc
def test_few_rows_linear_with_no_rows(kernels):
    """A step where no sequence samples sends zero rows to the vocabulary head: an empty answer."""
    w = torch.randn(1003, 64)
    assert kernels.few_rows_linear(torch.randn(0, 64), w).shape == (0, 1003)


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,n,width", [(9, 1003, 576), (17, 64, 100), (64, 960, 576), (70, 33, 96),
                                          (130, 200, 1536), (5, 40, 8), (12, 50, 35), (0, 64, 64)])
def test_packed_linear_matches_torch(kernels, dtype, rows, n, width):
    """Whole tiles of rows and the rows left after them, a panel past the last weight row (1003, 33,
    40), a width that is not whole vectors (100), more rows than one pass over the panels takes,
    and no rows."""
    g = torch.Generator().manual_seed(rows * 7 + n + width)
    x = torch.randn(rows, width, generator=g).to(dtype)
    w = torch.randn(n, width, generator=g).to(dtype)
    got = kernels.packed_linear(x, kernels.pack_weight(w), n)
    assert got.dtype == dtype and got.shape == (rows, n)
    if rows:                                                  # none: a step where nobody samples
        close(got, F.linear(x.float(), w.float()).to(dtype), dtype)


def sequence_kv(k_cache, v_cache, table, n, block_size, group):
    """The first n keys and values of the sequence whose block table is `table`, gathered out of
    the paged cache and repeated for each query head of a group: k, v [kv_heads * group, n, d]."""
    t = torch.arange(n)
    where = table[t // block_size] * block_size + t % block_size
    return (c[where].transpose(0, 1).repeat_interleave(group, 0) for c in (k_cache, v_cache))


def paged_case(dtype, B, kv_heads, group, d, lengths, block_size=16, seed=0, runs=None):
    """Random q and a paged cache whose blocks are shuffled; returns inputs and the SDPA answer.
    `runs`: rows per sequence, in order (default one each); the rows of a sequence share its blocks,
    as the tokens of a prefill chunk do."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths, dtype=torch.int64)
    runs = runs or [1] * B
    firsts = [sum(runs[:i]) for i in range(len(runs))]
    blocks_each = (lengths + block_size - 1) // block_size
    order = torch.randperm(int(sum(blocks_each[f + n - 1] for f, n in zip(firsts, runs))) + 3, generator=g)
    max_blocks = int(blocks_each.max())
    tables = torch.zeros(B, max_blocks, dtype=torch.int64)
    used = 0
    for f, n in zip(firsts, runs):
        need = int(blocks_each[f + n - 1])                       # the sequence's last row sees the most
        tables[f:f + n, :need] = order[used:used + need]
        used += need
    slots = len(order) * block_size
    k_cache = torch.randn(slots, kv_heads, d, generator=g).to(dtype)
    v_cache = torch.randn(slots, kv_heads, d, generator=g).to(dtype)
    q = torch.randn(B, kv_heads * group, d, generator=g).to(dtype)
    want = torch.empty_like(q)
    for b in range(B):                                            # one sequence at a time, plainly
        k, v = sequence_kv(k_cache, v_cache, tables[b], int(lengths[b]), block_size, group)
        o = F.scaled_dot_product_attention(q[b].view(kv_heads * group, 1, d).float(), k.float(), v.float(),
                                           scale=d ** -0.5)
        want[b] = o[:, 0].to(dtype)
    return (q, k_cache, v_cache, tables, lengths, block_size, d ** -0.5), want


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_heads,group,d", [(3, 3, 64),     # SmolLM2: the vector-register path
                                              (2, 1, 64),     # plain multi-head attention
                                              (1, 8, 64),     # a group too big for the fast path
                                              (2, 2, 32),     # another head size
                                              (5, 2, 64)])    # more KV heads than a decode job takes
def test_paged_attention_matches_sdpa(kernels, dtype, kv_heads, group, d):
    lengths = [1, 16, 17, 40, 333, 5]                             # one key; exactly a block; ragged
    args, want = paged_case(dtype, len(lengths), kv_heads, group, d, lengths)
    close(kernels.paged_attention(*args), want, dtype)


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_heads,group,d", [(3, 3, 64), (5, 2, 64)])
def test_one_decode_row_matches_sdpa(kernels, dtype, kv_heads, group, d):
    """Fewer rows than threads: the row's KV heads go to separate jobs."""
    args, want = paged_case(dtype, 1, kv_heads, group, d, [333])
    close(kernels.paged_attention(*args), want, dtype)


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_heads,group,d", [(3, 3, 64), (2, 2, 32), (1, 8, 64)])
def test_paged_attention_of_prefill_chunks_matches_sdpa(kernels, dtype, kv_heads, group, d):
    """Rows that are consecutive tokens of one sequence (a chunk: each sees one key more) are
    attended together, a tile of rows at a time; beside them decode rows, a chunk longer than a
    tile, and a chunk after a cached prefix."""
    chunks = [(1, 40), (200, 1), (33, 2), (1, 17), (70, 5), (300, 1), (16, 1), (18, 1), (1, 1), (3, 70)]
    lengths = [first + i for first, n in chunks for i in range(n)]
    args, want = paged_case(dtype, len(lengths), kv_heads, group, d, lengths, runs=[n for _, n in chunks])
    close(kernels.paged_attention(*args), want, dtype)


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_heads,group,d", [(3, 3, 64), (2, 2, 32), (2, 1, 64)])
@pytest.mark.parametrize("spread", [1.0, 8.0])
def test_long_chunks_attend_over_several_key_blocks_as_sdpa_does(kernels, dtype, kv_heads, group, d, spread):
    """A tile's keys go a block at a time (KEY_BLOCK, 256), its softmax taken online: where a later
    block holds a larger score, what was summed before is scaled down. Chunks here see up to 830
    keys: rows on both sides of a block's edge (some see none of the last block), a chunk that
    starts past a block's edge, and one of 600 rows. With queries 8 times larger a row's scores
    span up to 78, and its largest rises by up to 18 past its first block, whose weights shrink
    by e^-18."""
    chunks = [(200, 130), (500, 70), (1, 600), (257, 64), (760, 71)]
    lengths = [first + i for first, n in chunks for i in range(n)]
    args, _ = paged_case(dtype, len(lengths), kv_heads, group, d, lengths, runs=[n for _, n in chunks])
    q, k_cache, v_cache, tables, _, block_size, scale = args
    q = (q.float() * spread).to(dtype)
    want = torch.empty_like(q)
    for b, n in enumerate(lengths):
        k, v = sequence_kv(k_cache, v_cache, tables[b], n, block_size, group)
        want[b] = F.scaled_dot_product_attention(q[b].view(-1, 1, d).float(), k.float(), v.float(),
                                                 scale=scale)[:, 0].to(dtype)
    close(kernels.paged_attention(q, *args[1:]), want, dtype)


@needs_gcc
def test_bf16_decode_attention_weighs_values_as_torch_does(kernels):
    """Decode rows in bf16 against PyTorch's own bf16 attention: each query's exponentials are
    rounded to bf16 before they meet the values and their sum divided out after, as PyTorch's
    flash kernel does, so the two differ by a mean of 2e-5 here; weights normalised in float32
    differed from it by 2e-4."""
    lengths = [1, 16, 17, 40, 333, 5, 200, 128]
    kv_heads, group, d = 3, 3, 64
    args, _ = paged_case(torch.bfloat16, len(lengths), kv_heads, group, d, lengths)
    q, k_cache, v_cache, tables, _, block_size, scale = args
    got = kernels.paged_attention(*args).float()
    diffs = []
    for b, n in enumerate(lengths):
        k, v = sequence_kv(k_cache, v_cache, tables[b], n, block_size, group)
        want = F.scaled_dot_product_attention(q[b].view(kv_heads * group, 1, d)[None], k[None], v[None],
                                              scale=scale)[0, :, 0]
        diffs.append((got[b] - want.float()).abs().mean())
    assert sum(diffs) / len(diffs) < 6e-5


@needs_gcc
def test_bf16_prefill_attention_rounds_as_torch_does(kernels):
    """A bf16 prefill chunk's attention against PyTorch's own bf16 attention, not float32's. With
    the CPU's bf16 dot products the weights meet the values rounded to bf16, and the softmax's sum
    is divided out after, as PyTorch's flash kernel does: the two then differ by little more than
    their output roundings (a mean of 3e-5 here), where weights kept in float32 differed from it
    by 1.9e-4."""
    if not kernels.bf16_dot:
        pytest.skip(f"the {kernels.path} path has no bf16 dot products: its values pass is float32's")
    n, kv_heads, group, d = 200, 3, 3, 64
    args, _ = paged_case(torch.bfloat16, n, kv_heads, group, d, list(range(1, n + 1)), runs=[n])
    q, k_cache, v_cache, tables, _, block_size, scale = args
    k, v = sequence_kv(k_cache, v_cache, tables[0], n, block_size, group)
    # [batch, heads, tokens, d], as a model calls it: PyTorch's flash kernel (3-D inputs take its
    # math path, which keeps the weights in float32)
    want = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k[None], v[None], is_causal=True,
                                          scale=scale)[0].transpose(0, 1)
    assert (kernels.paged_attention(*args).float() - want.float()).abs().mean() < 6e-5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 7, 8, 9, 17, 64, 300])
def test_linear_paths_agree(dtype, rows):
    """Every route Linear may take (kernel, packed oneDNN, F.linear) gives F.linear's answer."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 96, generator=g).to(dtype)
    w = torch.randn(200, 96, generator=g).to(dtype)
    want = F.linear(x, w)
    pack = onednn_available(torch.device("cpu"), dtype)
    close(Linear(w, cpu_kernels.load(), pack)(x), want, dtype)
    close(Linear(w, None, pack)(x), want, dtype)
    close(Linear(w, None, False)(x), want, dtype)


def test_padded_rows_bound_the_row_counts_onednn_meets():
    """oneDNN keeps a kernel per row count: padding leaves few counts, for little extra work."""
    assert len({padded_rows(m) for m in range(1, 2049)}) <= 80      # exact counts: 2,048
    assert all(padded_rows(m) == m for m in range(1, EXACT_ROWS + 1))
    assert all(m <= padded_rows(m) <= m * 1.125 for m in range(1, 5000))


def runners_on_and_off(monkeypatch, path, lm):
    """A runner on `path`'s kernels, then one on plain PyTorch; a skip where this CPU cannot run `path`."""
    from engine.model.runner import ModelRunner
    if shutil.which("gcc"):
        kernels_of(path)                                     # a skip where this CPU cannot run it
    for use in (path, "0"):
        monkeypatch.setenv("BATCHING_LAB_KERNELS", use)
        runner = ModelRunner(lm, 32, block_size=16)
        assert (runner.kernels is None) == (use == "0" or shutil.which("gcc") is None)
        assert runner.kernels is None or runner.kernels.path == path
        yield runner


@pytest.mark.parametrize("path", list(kernel_paths.PATHS))
def test_runner_gives_the_same_logits_with_and_without_kernels(monkeypatch, path):
    """The whole forward, kernels on vs plain PyTorch: decode at batch 1 and batch 3, one step."""
    from engine.model.model import load_model
    from engine.model.runner import SeqInput
    lm = load_model("tiny", device="cpu", dtype="fp32")
    prompts = [[5 + (i * 7 + j) % 200 for j in range(n)] for i, n in enumerate((30, 7, 50))]
    results = []
    for runner in runners_on_and_off(monkeypatch, path, lm):
        tables = [[3 * i, 3 * i + 1, 3 * i + 2, 20 + i] for i in range(3)]
        runner.forward_logits([SeqInput(f"r{i}", p, 0, t, True) for i, (p, t) in enumerate(zip(prompts, tables))])
        one = runner.forward_logits([SeqInput("r0", [9], 30, tables[0], True)])
        three = runner.forward_logits([SeqInput(f"r{i}", [9], len(p), t, True)
                                       for i, (p, t) in enumerate(zip(prompts, tables))])
        results.append((one, three))
    close(results[0][0], results[1][0], torch.float32)
    close(results[0][1], results[1][1], torch.float32)


@pytest.mark.parametrize("path", list(kernel_paths.PATHS))
def test_prefill_chunks_beside_decodes_give_the_same_logits_with_and_without_kernels(monkeypatch, path):
    """Steps that mix a prompt's later chunk (it starts past position 0, so PyTorch's path masks
    its keys), a whole prompt, a chunk held back from sampling, and decodes: the same logits on
    both paths, step after step, whatever the index bookkeeping does."""
    from engine.model.model import load_model
    from engine.model.runner import SeqInput
    lm = load_model("tiny", device="cpu", dtype="fp32")
    p = [[5 + (i * 7 + j) % 200 for j in range(n)] for i, n in enumerate((40, 7, 50))]
    t = [[3 * i, 3 * i + 1, 3 * i + 2, 20 + i] for i in range(3)]
    steps = [[SeqInput("r0", p[0][:20], 0, t[0], False), SeqInput("r1", p[1], 0, t[1], True)],
             [SeqInput("r0", p[0][20:], 20, t[0], True), SeqInput("r1", [9], 7, t[1], True),
              SeqInput("r2", p[2][:30], 0, t[2], False)],
             [SeqInput("r2", p[2][30:], 30, t[2], True), SeqInput("r1", [9], 8, t[1], True)]]
    results = []
    for runner in runners_on_and_off(monkeypatch, path, lm):
        results.append([runner.forward_logits(step) for step in steps])
    for ours, plain in zip(*results):
        close(ours, plain, torch.float32)


@needs_gcc
@pytest.mark.parametrize("path", list(kernel_paths.PATHS))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_all_layers_in_one_call_give_the_loops_numbers_to_the_bit(dtype, path, monkeypatch):
    """A step runs every layer in one C call: the same kernels in the same order as the runner's
    loop (the few-rows kernel up to Linear's few_rows, the panels above), so the logits and the KV
    written are exactly the loop's. A prefill step of 600 tokens, then steps of 1 to 8, 12 and 16
    rows: decodes, and a short prefill chunk beside them."""
    from engine.model.model import load_model
    from engine.model.runner import ModelRunner, SeqInput
    if not kernels_of(path).bf16_dot and dtype == "bf16":
        # as on a CPU whose oneDNN has no bf16 products (an AVX2 one): else oneDNN multiplies here
        # and a step cannot run in one call; there the kernel's panels hold bf16 widened to fp32
        monkeypatch.setattr("engine.model.linear.native_bf16", lambda: False)
    monkeypatch.setenv(kernel_paths.ENV, path)
    lm = load_model("tiny", device="cpu", dtype=dtype)
    one_call, loop = ModelRunner(lm, 160, block_size=16), ModelRunner(lm, 160, block_size=16)
    assert one_call.kernels.path == path
    loop.layer_weights = None
    assert one_call.layer_weights is not None and one_call.takes_one_call(600) and not loop.takes_one_call(1)
    prompts = [[5 + (i * 7 + j) % 200 for j in range(20 + 3 * i)] for i in range(16)]
    tables = [list(range(8 * i, 8 * i + 8)) for i in range(16)]
    first = [SeqInput(f"r{i}", p, 0, t, True) for i, (p, t) in enumerate(zip(prompts, tables))]
    assert torch.equal(one_call.forward_logits(first), loop.forward_logits(first)), "600 prompt tokens"
    for rows in [*range(1, 9), 12, 16]:
        step = [SeqInput(f"r{i}", [9 + rows], len(prompts[i]) + rows - 1, tables[i], True) for i in range(rows)]
        if rows <= 5:            # a 3-token prefill chunk of a new sequence beside the decodes
            step = step[:rows - 1] + [SeqInput("new", [7, 8, 9], 0, [140 + rows], True)]
        got, want = one_call.forward_logits(step), loop.forward_logits(step)
        assert torch.equal(got, want), f"{rows} rows: max diff {(got - want).abs().max().item()}"
    assert torch.equal(one_call.k_cache, loop.k_cache) and torch.equal(one_call.v_cache, loop.v_cache)


@needs_gcc
def test_the_one_call_returns_an_error_where_its_buffers_cannot_be_had(kernels):
    """A step's tokens have no cap of their own (the token budget allows a million): where the one
    call's buffers cannot be allocated it says so (-1, a MemoryError in Python) before touching
    anything. 2^30 rows ask for terabytes, which Linux refuses outright unless it promises all."""
    import pathlib
    policy = pathlib.Path("/proc/sys/vm/overcommit_memory")
    if not policy.exists() or policy.read_text().strip() == "1":
        pytest.skip("this system may promise any allocation (overcommit_memory 1, or not Linux)")
    null = [None] * 10                                     # no layers: nothing is read from these
    got = kernels.lib.layers_in_one_call(None, None, 2 ** 30, 576, 1536, 0, *null, 1, None, None, None, None,
                                         None, None, 0, None, 0, None, 9, 3, 64, 16, 0.125, 1e-5, 1)
    assert got == -1


def test_the_widest_path_the_cpu_has_is_chosen(monkeypatch):
    """Each path needs its CPU features; the default is the widest a CPU runs."""
    avx2_only = {"sse2", "avx", "avx2", "fma"}
    assert kernel_paths.widest_path({"avx2", "fma", "avx512f", "avx512_bf16"}) == "avx512_bf16"
    assert kernel_paths.widest_path({"avx2", "fma", "avx512f"}) == "avx512"
    assert kernel_paths.widest_path(avx2_only) == "avx2"
    assert kernel_paths.widest_path({"sse2", "avx"}) == "portable"
    assert kernel_paths.missing_features("avx512_bf16", avx2_only) == ["avx512f", "avx512_bf16"]
    monkeypatch.setattr(kernel_paths, "cpu_flags", lambda: avx2_only)
    for value in ("1", ""):
        monkeypatch.setenv(kernel_paths.ENV, value)
        assert kernel_paths.chosen_path() == "avx2" and not kernel_paths.forced()
    monkeypatch.setenv(kernel_paths.ENV, "0")
    assert kernel_paths.chosen_path() is None and cpu_kernels.load() is None
    assert kernel_paths.in_words() == "off (BATCHING_LAB_KERNELS=0): PyTorch ops instead"
    monkeypatch.setenv(kernel_paths.ENV, "Portable")
    assert kernel_paths.chosen_path() == "portable" and kernel_paths.forced()
    assert kernel_paths.in_words() == ("the portable path (forced by BATCHING_LAB_KERNELS; this CPU runs avx2, "
                                       "portable)")
    monkeypatch.setenv(kernel_paths.ENV, "1")
    assert kernel_paths.in_words().startswith("the avx2 path (the widest this CPU runs;")


def test_a_path_the_cpu_lacks_or_does_not_know_is_refused_saying_what_is_allowed(monkeypatch):
    """A forced path must be one this CPU runs: no silent fall-back to another (an A/B run would
    time the same path twice)."""
    monkeypatch.setattr(kernel_paths, "cpu_flags", lambda: {"avx", "avx2", "fma"})
    monkeypatch.setenv(kernel_paths.ENV, "avx512_bf16")
    with pytest.raises(ValueError) as lacks:
        kernel_paths.chosen_path()
    assert str(lacks.value) == ("BATCHING_LAB_KERNELS=avx512_bf16: this CPU lacks avx512f, avx512_bf16; allowed "
                                "here: 1 (the widest, avx2), 0 (no kernels), or one of avx2, portable")
    monkeypatch.setenv(kernel_paths.ENV, "avx1024")
    with pytest.raises(ValueError, match=r"BATCHING_LAB_KERNELS='avx1024' is not a kernel path; allowed here: "
                                         r"1 \(the widest, avx2\)"):
        cpu_kernels.for_device(torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match="this CPU lacks avx512f"):
        cpu_kernels.load("avx512")


@needs_gcc
def test_a_changed_source_builds_a_new_library_and_an_unchanged_one_does_not(monkeypatch, tmp_path):
    """The build is cached under a digest of the source, the path's flags and the CPU: editing
    the C file must not load the old library."""
    source = tmp_path / "cpu_kernels.c"
    source.write_text(cpu_kernels.SOURCE.read_text())
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cpu_kernels, "SOURCE", source)
    monkeypatch.setattr(cpu_kernels, "_loaded", {})
    built = []
    real_build = cpu_kernels._build
    monkeypatch.setattr(cpu_kernels, "_build", lambda target, flags: (built.append(target), real_build(target, flags)))
    path = kernel_paths.widest_path()

    def load_fresh():                                   # as a new process would: nothing remembered
        cpu_kernels._library_key.cache_clear()
        cpu_kernels._loaded.clear()
        return cpu_kernels.load(path)

    try:
        assert load_fresh() is not None and len(built) == 1
        assert load_fresh() is not None and len(built) == 1, "the same source: the cached library"
        # a comment added: every path, and the name its library reports (the loader refuses a library
        # whose name is not its path's), stays as it was, whichever path this CPU loads
        source.write_text(source.read_text() + "\n/* edited */\n")
        assert load_fresh() is not None and len(built) == 2, "a changed source: built again"
        assert built[0] != built[1] and built[0].exists() and built[1].exists()
    finally:
        cpu_kernels._library_key.cache_clear()


def test_without_a_compiler_load_says_why_and_returns_none(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("BATCHING_LAB_CACHE", str(tmp_path))        # nothing cached there
    monkeypatch.setattr(cpu_kernels, "_loaded", {})
    monkeypatch.setattr(cpu_kernels.shutil, "which", lambda name: None)
    with caplog.at_level("WARNING"):
        assert cpu_kernels.load() is None
    assert "no C compiler" in caplog.text


def test_stacked_weights_leave_the_model_unchanged():
    """Stacking q/k/v re-points the model's parameters at one matrix: same values, same forward,
    and a second stacking (a second runner on the same model) reuses it."""
    from engine.model.linear import stack_rows
    from engine.model.model import load_model
    lm = load_model("tiny", device="cpu", dtype="fp32")
    attn = lm.hf_model.model.layers[0].self_attn
    params = [attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]
    before = [p.detach().clone() for p in params]
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        want = lm.hf_model(ids).logits
    stacked = stack_rows(params)
    assert stacked.shape == (sum(b.shape[0] for b in before), before[0].shape[1])
    assert torch.equal(stacked, torch.cat(before))
    assert all(torch.equal(p, b) for p, b in zip(params, before))
    assert stack_rows(params).data_ptr() == stacked.data_ptr()
    with torch.inference_mode():
        assert torch.equal(lm.hf_model(ids).logits, want)


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 3, 40])
def test_rms_norm_matches_the_llama_reference(kernels, dtype, rows):
    g = torch.Generator().manual_seed(rows)
    x = (torch.randn(rows, 576, generator=g) * 3).to(dtype)
    w = torch.randn(576, generator=g).to(dtype)
    h = x.float()
    want = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype)
    close(kernels.rms_norm(x, w, 1e-5), want, dtype)


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 40])
def test_residual_add_then_rms_norm_matches_pytorch(kernels, dtype, rows):
    g = torch.Generator().manual_seed(rows)
    x = (torch.randn(rows, 576, generator=g) * 3).to(dtype)
    delta = torch.randn(rows, 576, generator=g).to(dtype)
    w = torch.randn(576, generator=g).to(dtype)
    summed = x + delta
    h = summed.float()
    want = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype)
    got = kernels.rms_norm(x, w, 1e-5, residual=delta)
    assert torch.equal(x, summed), "the residual stream is updated in place, rounded as PyTorch's add"
    close(got, want, dtype)


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T", [1, 3, 33])
def test_rope_and_cache_write_match_pytorch(kernels, dtype, T):
    H, KV, d, slots_n = 9, 3, 64, 80
    g = torch.Generator().manual_seed(T)
    qkv = torch.randn(T, (H + 2 * KV) * d, generator=g).to(dtype)
    angles = torch.arange(200)[:, None] * torch.rand(d // 2, generator=g)[None, :]
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(dtype)
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(dtype)
    positions = torch.randperm(200, generator=g)[:T]
    slots = torch.randperm(slots_n, generator=g)[:T]
    k_cache, v_cache = torch.zeros(slots_n, KV, d, dtype=dtype), torch.zeros(slots_n, KV, d, dtype=dtype)
    q = kernels.rope_store(qkv, cos, sin, positions, slots, k_cache, v_cache, H)
    qk, v = qkv.split([(H + KV) * d, KV * d], dim=-1)
    qk = qk.view(T, H + KV, d)
    c, s = cos[positions][:, None, :], sin[positions][:, None, :]
    want = qk * c + torch.cat([-qk[..., d // 2:], qk[..., :d // 2]], dim=-1) * s
    close(q, want[:, :H], dtype)
    close(k_cache[slots], want[:, H:], dtype)
    assert torch.equal(v_cache[slots], v.view(T, KV, d))
    others = torch.ones(slots_n, dtype=torch.bool)
    others[slots] = False
    assert not k_cache[others].any() and not v_cache[others].any(), "only the step's slots are written"


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 20])
def test_silu_mul_matches_pytorch(kernels, dtype, rows):
    g = torch.Generator().manual_seed(rows)
    gate_up = (torch.randn(rows, 2 * 1536, generator=g) * 4).to(dtype)
    gate, up = gate_up.chunk(2, dim=-1)
    close(kernels.silu_mul(gate_up), F.silu(gate) * up, dtype)


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gated", [False, True])
def test_a_row_of_a_packed_product_is_the_same_whatever_rows_share_its_call(kernels, dtype, gated):
    """The tiles a product's rows are split into (as many rows to a tile as the fewest tiles
    need: 25 rows as 9, 8 and 8), and the chunks of rows the threads take (65 rows as 33 and 32),
    change nothing in any row: every row count from 1 to 2 tiles and more, and to 3 chunks, gives
    each row the bits it gets alone, so a request's tokens do not depend on the batch."""
    g = torch.Generator().manual_seed(7 + gated)
    x = torch.randn(150, 576, generator=g).to(dtype)
    w = (torch.randn(960, 576, generator=g) * 0.05).to(dtype)
    packed = kernels.pack_weight(w, gated=gated)
    product = (lambda rows: kernels.gated_linear(rows, packed, 960)) if gated else \
        (lambda rows: kernels.packed_linear(rows, packed, 960))
    alone = torch.cat([product(x[i:i + 1]) for i in range(len(x))])
    for rows in [*range(1, 26), 33, 45, 64, 65, 70, 129, 150]:     # 65 and more: chunks of rows shared evenly
        assert torch.equal(product(x[:rows]), alone[:rows]), f"{rows} rows"


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,n", [(5, 3072), (64, 3072), (300, 3072), (9, 66), (17, 40), (3, 64)])
def test_gated_linear_is_the_product_then_silu_mul(kernels, dtype, rows, n):
    """The activation taken as each tile is stored is the product and then silu_mul: to the bit
    at the model's gate/up width (3072: 1536 outputs, whole vectors, where both take expf a vector
    at a time), within rounding at widths whose gate rows are not whole vectors (33 and 20 gate
    rows: a panel with a partial gate block, whose last outputs silu_mul takes one by one); rows
    in whole and partial tiles."""
    g = torch.Generator().manual_seed(rows * 13 + n)
    x = torch.randn(rows, 96, generator=g).to(dtype)
    w = (torch.randn(n, 96, generator=g) * 0.3).to(dtype)
    got = kernels.gated_linear(x, kernels.pack_weight(w, gated=True), n)
    assert got.dtype == dtype and got.shape == (rows, n // 2)
    unfused = kernels.silu_mul(kernels.packed_linear(x, kernels.pack_weight(w), n))
    if n == 3072:
        assert torch.equal(got, unfused)
    close(got, unfused, dtype)
    gate, up = F.linear(x.float(), w.float()).to(dtype).chunk(2, dim=-1)
    close(got, F.silu(gate) * up, dtype)


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_takes_panels_from_two_rows_where_they_hold_the_weights_own_bytes(kernels, dtype):
    """One row goes through the few-rows kernel. More go to the panels where they read no more
    than the weight (fp32, bf16 pairs); where they hold a bf16 weight widened to fp32, twice its
    bytes, the few-rows kernel keeps up to FEW_ROWS rows."""
    from engine.model.linear import FEW_ROWS
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(960, 576, generator=g) * 0.05).to(dtype)
    lin = Linear(w, kernels, pack=True)
    if lin.panels is None:
        pytest.skip(f"oneDNN multiplies this dtype here beside the {kernels.path} path: no panels")
    own_bytes = dtype == torch.float32 or kernels.bf16_dot
    for rows in (1, 2, 3, 4, 5):
        x = torch.randn(rows, 576, generator=g).to(dtype)
        few = rows == 1 or (rows <= FEW_ROWS and not own_bytes)
        want = kernels.few_rows_linear(x, w) if few else kernels.packed_linear(x, lin.panels, 960)
        assert torch.equal(lin(x), want), f"{rows} rows: expected the {'few-rows kernel' if few else 'panels'}"


@needs_gcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 4, 5, 64])
def test_gated_linear_layer_gives_the_activation_on_every_route(dtype, rows):
    """Linear(gated=True) returns silu(gate) * up whichever route multiplies: the C kernel (few
    rows, or its gated panels), oneDNN's packed weight, F.linear."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 96, generator=g).to(dtype)
    w = (torch.randn(200, 96, generator=g) * 0.3).to(dtype)
    gate, up = F.linear(x.float(), w.float()).to(dtype).chunk(2, dim=-1)
    want = F.silu(gate) * up
    pack = onednn_available(torch.device("cpu"), dtype)
    for linear in (Linear(w, cpu_kernels.load(), pack, gated=True), Linear(w, None, pack, gated=True),
                   Linear(w, None, False, gated=True)):
        got = linear(x)
        assert got.shape == (rows, 100)
        close(got, want, dtype)


@needs_gcc
@pytest.mark.parametrize("rows,n", [(1, 49152), (64, 49152), (3, 5), (7, 37), (2, 16)])
def test_argmax_rows_is_torchs(kernels, rows, n):
    """Greedy sampling: the first index of each row's largest value, as torch.argmax; with ties
    (the max repeated later in a row, and in every lane of a vector) and rows of any width."""
    g = torch.Generator().manual_seed(rows * n)
    x = torch.randn(rows, n, generator=g)
    x[0, n // 2:] = x[0].max()               # the max again and again after its first place
    if rows > 1:
        x[1] = 3.0                           # a row of one value: index 0
    assert kernels.argmax_rows(x.contiguous()) == x.argmax(dim=-1).tolist()


@needs_gcc
@pytest.mark.parametrize("march", ["haswell", "skylake-avx512", "cooperlake"])
def test_panel_tiles_load_each_panel_vector_once(march, tmp_path):
    """A tile's multiply-adds take the panel's vectors from registers, loaded once a k. Where a
    tile has registers to spare (1 to 4 rows on AVX2), gcc otherwise folds the load into each row's
    multiply-add, and the loads (with the rows' broadcasts, 1.5x the multiply-adds) set the pace.
    Checked in the assembly gcc makes of the panels' loop for AVX2 (haswell) and both AVX-512 paths,
    whatever this CPU runs: a multiply-add may read memory only as a broadcast ({1toN}) or a
    constant (rip-relative)."""
    import re
    import subprocess
    cc = shutil.which("gcc") or shutil.which("cc")
    asm = tmp_path / "k.s"
    made = subprocess.run([cc, "-O3", f"-march={march}", "-fopenmp", "-ffast-math", "-S", str(cpu_kernels.SOURCE),
                           "-o", str(asm)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"this gcc does not build for -march={march}: {made.stderr.strip()[:200]}")
    text = asm.read_text()
    body = text[text.index("\npanel_rows:"):]
    body = body[:body.index(".size\tpanel_rows")]
    fmas = [ln.strip() for ln in body.splitlines() if re.match(r"\s+v(fn?m(add|sub)\w*ps|dpbf16ps)\b", ln)]
    assert len(fmas) > 20, f"no tile loops found in panel_rows for -march={march}"
    folded = [ln for ln in fmas if "(" in ln and "{1to" not in ln and "(%rip)" not in ln]
    assert not folded, f"{len(folded)} multiply-adds read a panel vector from memory, e.g. {folded[:3]}"
