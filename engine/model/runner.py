"""The model runner: one packed forward over every token of every sequence in a step.

A step carries prefill chunks and single decode tokens from many sequences. We flatten all of
them into one [T, hidden] matrix, so every matmul (q/k/v, o, MLP) runs once for the whole step;
that is where batching buys its speed. Only attention needs to know which token belongs to
which sequence: each token writes its K/V into the paged cache at its slot, and reads back the
keys of its own sequence. The HF model's weights are used as they are; its forward is not called.

Attention, measured on a 2-core CPU (SmolLM2: 9 query heads, 3 KV heads, head_dim 64):
- decode tokens are batched: queries [B, kv_heads, group, d] (the GQA group folded into the
  query axis, 0.41 ms for B=32, ctx 150, bf16, vs 2.3 ms with enable_gqa=True and 2.6 ms with
  repeat_interleave) against keys gathered from the cache, padded to the longest context.
- prefill chunks run one sequence at a time, causal with an offset of start_pos.
- gathers use index_select into buffers reused by all layers (advanced indexing was 5x slower,
  and a fresh multi-MB tensor per layer pays page faults on every call).
On a CPU, linear layers run through linear.Linear (C kernels or oneDNN on packed weights), and with a C
compiler a hand-written kernel (cpu_kernels.c) computes all of a step's attention in one call:
each token reads its own sequence's keys and values in place through the block table, up to
its own position (so prefill is causal and decode sees the whole context): no gather, no
padding, no loop over prefill chunks. Measured: decode attention 3-4x faster, prefill
attention ~3x. Tests hold both to the plain PyTorch path, which the text above describes.
Where every product has the C kernel's panels, a step runs all its layers in one C call, the same
kernels in the same order: at one row the calls between kernels cost as much as the kernels, at
64 rows about 3 ms a step, and a prefill step of 2,048 tokens took 4% longer through the loop.
On a GPU a step of decodes alone replays a CUDA graph of forward_decode_rows (decode_graphs.py).
"""
from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from . import cpu_kernels, host_memory
from .decode_graphs import DecodeGraphs, graphs_on
from .linear import Linear, onednn_available, onednn_multiplies, stack_rows
from .model import LoadedModel
from .sampling import sample_token


def fast_paths(device: torch.device, dtype: torch.dtype) -> list[str]:
    """In words, which faster routes a runner on this device and dtype takes (for the About page)."""
    paths = []
    kernels = cpu_kernels.for_device(device, dtype)
    if onednn_available(device, dtype) and onednn_multiplies(dtype, kernels):
        paths.append("oneDNN linear layers with packed weights")
    if graphs_on(device):
        paths.append("CUDA graphs: each decode step replayed with one launch")
    if kernels is not None:
        paths.append(f"C kernels ({kernels.path} path): paged attention, residual add + RMSNorm, RoPE + KV write, "
                     "few-rows linear, linear layers on packed weights (SiLU taken in the gate/up product), greedy argmax, "
                     "and every layer of a step in one call")
    return paths


_linears_lock = threading.Lock()
_linears_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # hf model -> {key: linears}


def model_linears(model: LoadedModel, kernels) -> tuple[list[dict[str, Linear]], Linear]:
    """Each layer's linear layers, and the vocabulary head, ready to call.

    Built once per loaded model (a runner is made for every engine run, and the packed copy of
    the weights, the C kernel's or oneDNN's, takes ~0.2 s and the weights' size again), and shared by its runners.
    q, k and v share their input, as do gate and up: each trio/pair becomes one stacked
    matrix, so one product computes them all (5-20% faster than separate ones, measured); the
    gate/up product returns the MLP's activation, silu(gate) * up (Linear's `gated`)."""
    pack = onednn_available(model.device, model.dtype)
    with _linears_lock:
        built = _linears_of.setdefault(model.hf_model, {})
        # each kernel path lays out its own panels
        key = (kernels.path if kernels is not None else None, pack, onednn_multiplies(model.dtype, kernels))
        if key not in built:
            lin = lambda w, gated=False: Linear(w, kernels, pack, gated)
            layers = [dict(qkv=lin(stack_rows([ly.self_attn.q_proj.weight, ly.self_attn.k_proj.weight,
                                               ly.self_attn.v_proj.weight])),
                           o=lin(ly.self_attn.o_proj.weight),
                           gate_up=lin(stack_rows([ly.mlp.gate_proj.weight, ly.mlp.up_proj.weight]), gated=True),
                           down=lin(ly.mlp.down_proj.weight))
                      for ly in model.hf_model.model.layers]
            built[key] = (layers, lin(model.hf_model.lm_head.weight))
        return built[key]


@dataclass(slots=True)
class SeqInput:
    request_id: str
    token_ids: list[int]      # the new tokens this step: a prefill chunk or one decode token
    start_pos: int            # how many tokens of this sequence already have KV in the cache
    block_table: list[int]    # KV block ids for this sequence, enough for start_pos+len(token_ids) tokens
    sample: bool              # True when this chunk ends at the sequence's last token: we need next-token logits
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    drafts: int = 0           # speculative decoding: the last `drafts` of token_ids are guesses to verify;
                              # logits come back at each of the last 1 + drafts positions (greedy only)


@dataclass(slots=True)
class _Step:
    """Index tensors for one step, built once and shared by all layers."""
    positions: torch.Tensor       # [T] position of each token in its sequence
    slots: torch.Tensor           # [T] where each token's K/V goes in the cache
    sample_rows: torch.Tensor     # [S] flat rows whose logits are wanted: each sampling sequence's last
                                  # token, and a sequence with drafts its last 1 + drafts tokens
    cos: torch.Tensor | None = None   # [T, 1, d] RoPE factors of each token (the PyTorch path)
    sin: torch.Tensor | None = None
    # the C kernel's path: what each token attends to
    row_tables: torch.Tensor | None = None  # [T, max_blocks] its sequence's block table
    row_lens: torch.Tensor | None = None    # [T] how many keys it sees (its position + 1)
    # the PyTorch path: decode rows batched against gathered keys, prefill chunks one by one
    dec_rows: torch.Tensor | None = None   # [B] flat rows of the single-token (decode) sequences
    dec_slots: torch.Tensor | None = None  # [B*Lmax] cache slots of their contexts, padded
    dec_mask: torch.Tensor | None = None   # [B, 1, 1, Lmax] True where a key is real, not padding
    prefills: list[tuple[int, int, torch.Tensor, torch.Tensor | None]] = field(default_factory=list)  # (row0, n, slots, mask)
    order: np.ndarray | None = None  # [T] which of the step's tokens each row runs, where not in turn


class ModelRunner:
    def __init__(self, model: LoadedModel, num_kv_blocks: int, block_size: int = 16):
        cfg, hf = model.config, model.hf_model
        self.model, self.device, self.dtype = model, model.device, model.dtype
        self.block_size, self.num_kv_blocks = block_size, num_kv_blocks
        self.num_heads, self.num_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.group = self.num_heads // self.num_kv_heads
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim ** -0.5
        a0 = hf.model.layers[0].self_attn
        assert cfg.hidden_act == "silu" and a0.q_proj.bias is None and a0.o_proj.bias is None, \
            "plain Llama only: SiLU MLP, no projection biases"
        self.embed = hf.model.embed_tokens.weight
        self.vocab_size = self.embed.shape[0]
        self.norm = hf.model.norm.weight
        self.layers = list(hf.model.layers)
        # RoPE: cos/sin for every position once, from the model's own inv_freq (so any rope
        # scaling the config asks for is included), rounded to the model dtype as HF does.
        rot = hf.model.rotary_emb
        assert "dynamic" not in rot.rope_type, "dynamic RoPE changes with length: not supported"
        pos = torch.arange(model.max_model_len, device=self.device, dtype=torch.float32)
        freqs = pos[:, None] * rot.inv_freq.to(self.device, torch.float32)[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos = (emb.cos() * rot.attention_scaling).to(self.dtype)
        self.sin = (emb.sin() * rot.attention_scaling).to(self.dtype)
        # one block more than the pool: the spare block, no sequence's, where a decode graph's
        # padding rows write their K/V
        shape = (len(self.layers), (num_kv_blocks + 1) * block_size, self.num_kv_heads, self.head_dim)
        self.k_cache = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.v_cache = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.kernels = cpu_kernels.for_device(self.device, self.dtype)
        if self.device.type == "cpu":
            host_memory.keep_freed_memory()      # steps reuse freed memory, not fault it in again
        self.linears, self.lm_head_linear = model_linears(model, self.kernels)
        self.inter = cfg.intermediate_size
        products = ("qkv", "o", "gate_up", "down")
        self.layer_weights = None if self.kernels is None else self.kernels.layer_weights(
            [ly.input_layernorm.weight for ly in self.layers], [w["qkv"].weight for w in self.linears],
            [w["o"].weight for w in self.linears], [ly.post_attention_layernorm.weight for ly in self.layers],
            [w["gate_up"].weight for w in self.linears], [w["down"].weight for w in self.linears],
            *[[w[name].panels for w in self.linears] for name in products])
        # the one call takes the few-rows kernel up to the rows Linear does (the same for every
        # product of a model), and past them needs every product's panels (it cannot call oneDNN)
        self.few_rows = max(w[name].few_rows for w in self.linears for name in products)
        with_panels = all(w[name].panels is not None for w in self.linears for name in products)
        self.one_call_rows = math.inf if with_panels else self.few_rows
        # on a GPU, decode steps replay CUDA graphs (BATCHING_LAB_CUDA_GRAPHS=0 turns them off)
        self.graphs = DecodeGraphs(self, record=True) if graphs_on(self.device) else None

    # ---- index bookkeeping: Python over sequences, numpy over tokens ----

    def _prepare(self, seqs: list[SeqInput]) -> _Step:
        assert seqs, "a step needs at least one sequence"
        dev, bs = self.device, self.block_size
        lens = [len(s.token_ids) for s in seqs]
        max_blocks = max(len(s.block_table) for s in seqs)
        for s, n in zip(seqs, lens):
            assert n > 0 and len(s.block_table) * bs >= s.start_pos + n, f"{s.request_id}: too few blocks"
            assert s.start_pos + n <= self.model.max_model_len, f"{s.request_id}: longer than max_model_len"
        # The bookkeeping in numpy, whose operations on a step's few small arrays cost far less
        # than torch's dispatch of each one; then onto the device together (on_device).
        starts = np.array([s.start_pos for s in seqs], dtype=np.int64)
        counts = np.array(lens, dtype=np.int64)
        tables = np.array([s.block_table + [0] * (max_blocks - len(s.block_table)) for s in seqs], dtype=np.int64)
        seq_of = np.repeat(np.arange(len(seqs)), counts)                       # [T] each token's sequence
        first_row = np.cumsum(counts) - counts
        within = np.arange(len(seq_of)) - first_row[seq_of]                    # [T] its place in its chunk
        # Drafts to verify, with the C kernels: a chunk's rows go last position first. The attention
        # kernel attends a run of consecutive positions as a prefill tile, whose bf16 sums round
        # otherwise than a decode row's; rows in reverse are each a decode row, so every verified
        # token is, to the bit, the one plain decoding would make (greedy outputs stay the same).
        backwards = np.array([s.drafts > 0 and self.kernels is not None for s in seqs])[seq_of]
        within = np.where(backwards, counts[seq_of] - 1 - within, within)
        order = first_row[seq_of] + within                                     # [T] the token each row runs
        positions = starts[seq_of] + within
        slots = tables[seq_of, positions // bs] * bs + positions % bs
        row_of = np.empty_like(order)
        row_of[order] = np.arange(len(order))                                  # each token's row
        sample_rows = row_of[[t for i, s in enumerate(seqs) if s.sample
                              for t in range(first_row[i] + lens[i] - 1 - s.drafts, first_row[i] + lens[i])]]

        if self.kernels is not None:
            # The C kernel needs no more: every token attends to its own sequence's keys up to
            # its own position, read in place through the block table. That is causal prefill
            # and decode alike, for the whole step in one call.
            positions, slots, sample_rows, row_tables, row_lens = self.on_device(
                positions, slots, sample_rows, tables[seq_of], positions + 1)
            return _Step(positions, slots, sample_rows, row_tables=row_tables, row_lens=row_lens,
                         order=order if backwards.any() else None)
        dec = [i for i, n in enumerate(lens) if n == 1]
        ctx = starts[dec] + 1                                    # keys each decode token sees
        chunks = [(i, np.arange(seqs[i].start_pos + n)) for i, n in enumerate(lens) if n > 1]   # prefill chunks
        positions, slots, sample_rows, dec_rows, dec_tables, ctx, *kv_slots = self.on_device(
            positions, slots, sample_rows, first_row[dec], tables[dec], ctx,
            *[tables[i, j // bs] * bs + j % bs for i, j in chunks])
        cos, sin = self.cos[positions][:, None, :], self.sin[positions][:, None, :]
        dec_slots = dec_mask = None
        if dec:
            dec_slots, dec_mask = self._decode_keys(dec_tables, ctx, int(starts[dec].max()) + 1)
        prefills = []
        for (i, j), chunk_slots in zip(chunks, kv_slots):
            s, n = seqs[i], lens[i]
            # query q (at position start_pos+q) sees key k iff k <= start_pos+q; None = plain causal
            keys = torch.arange(len(j), device=dev)
            mask = None if s.start_pos == 0 else keys[None, :] <= keys[s.start_pos:, None]
            prefills.append((int(first_row[i]), n, chunk_slots, mask))
        return _Step(positions, slots, sample_rows, cos, sin, dec_rows=dec_rows if dec else None,
                     dec_slots=dec_slots, dec_mask=dec_mask, prefills=prefills)

    def on_device(self, *arrays: np.ndarray) -> list[torch.Tensor]:
        """Integer arrays as tensors on the runner's device: on a CPU the same memory, elsewhere all
        of them in one copy (a copy from the host's memory waits for the device)."""
        if self.device.type == "cpu":
            return [torch.from_numpy(a) for a in arrays]
        flat = torch.from_numpy(np.concatenate([a.reshape(-1) for a in arrays])).to(self.device)
        return [part.view(a.shape) for part, a in zip(flat.split([a.size for a in arrays]), arrays)]

    # ---- the forward, top to bottom ----

    def _decode_keys(self, tables: torch.Tensor, context_lens: torch.Tensor, keys: int):
        """Decode rows' key slots, `keys` per row through its block table [B * keys], and the mask
        [B, 1, 1, keys] that is True where a key is within the row's own context: the padding
        past it reads whatever block the table holds there, and is masked out."""
        j = torch.arange(keys, device=tables.device)
        slots = (tables[:, j // self.block_size] * self.block_size + j % self.block_size).reshape(-1)
        return slots, (j[None, :] < context_lens[:, None])[:, None, None, :]

    def _add_norm(self, x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor) -> torch.Tensor:
        """x += delta (the residual stream, in place), then RMSNorm(x)."""
        if self.kernels is not None:
            return self.kernels.rms_norm(x, weight, self.eps, residual=delta)
        if delta is not None:
            x += delta
        # as HF: statistics in float32; one fused op, not five, as on a GPU every op is a kernel launch
        return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)

    def _rope_and_store(self, layer: int, qkv: torch.Tensor, step: _Step) -> torch.Tensor:
        """The q/k/v product's output: RoPE on q and k, k and v into the cache at the step's
        slots (slot = block_table[p // bs] * bs + p % bs). Returns q [T, heads, d]."""
        H, KV, d = self.num_heads, self.num_kv_heads, self.head_dim
        if self.kernels is not None:
            return self.kernels.rope_store(qkv, self.cos, self.sin, step.positions, step.slots,
                                           self.k_cache[layer], self.v_cache[layer], H)
        qk, v = qkv.split([(H + KV) * d, KV * d], dim=-1)
        qk = qk.view(-1, H + KV, d)                      # q and k heads rotate alike
        half = d // 2                                    # Llama "rotate half" layout
        qk = qk * step.cos + torch.cat([-qk[..., half:], qk[..., :half]], dim=-1) * step.sin
        self.k_cache[layer].index_copy_(0, step.slots, qk[:, H:])
        self.v_cache[layer].index_copy_(0, step.slots, v.view(-1, KV, d))
        return qk[:, :H]

    def _attention(self, layer: int, q: torch.Tensor, step: _Step, bufs: dict) -> torch.Tensor:
        """q: [T, heads, d] -> [T, heads, d]. K/V of this step are already in the cache."""
        kc, vc = self.k_cache[layer], self.v_cache[layer]
        KV, G, d = self.num_kv_heads, self.group, self.head_dim
        if step.row_tables is not None:                  # the C kernel: every row, one call
            return self.kernels.paged_attention(q.contiguous(), kc, vc, step.row_tables, step.row_lens,
                                                self.block_size, self.scale)
        out = q.new_empty(q.shape)
        if step.dec_rows is not None:
            B, L = step.dec_mask.shape[0], step.dec_mask.shape[-1]
            k = torch.index_select(kc, 0, step.dec_slots, out=bufs["dk"]).view(B, L, KV, d).transpose(1, 2)
            v = torch.index_select(vc, 0, step.dec_slots, out=bufs["dv"]).view(B, L, KV, d).transpose(1, 2)
            qd = q[step.dec_rows].view(B, KV, G, d)      # query head h uses kv head h // G
            o = F.scaled_dot_product_attention(qd, k, v, attn_mask=step.dec_mask, scale=self.scale)
            out[step.dec_rows] = o.reshape(B, KV * G, d)
        for row0, n, kv_slots, mask in step.prefills:
            k = kc.index_select(0, kv_slots).transpose(0, 1)[None]          # [1, KV, S, d]
            v = vc.index_select(0, kv_slots).transpose(0, 1)[None]
            qp = q[row0:row0 + n].transpose(0, 1)[None]                     # [1, heads, n, d]
            o = F.scaled_dot_product_attention(qp, k, v, attn_mask=mask, is_causal=mask is None,
                                               scale=self.scale, enable_gqa=True)
            out[row0:row0 + n] = o[0].transpose(0, 1)
        return out

    def takes_one_call(self, tokens: int) -> bool:
        """Does a step of `tokens` run every layer in one C call? Any step where every product has
        panels (else up to the few-rows kernel's rows): the loop of forward_step, all of it in C (the
        same kernels, bit for bit), which saves the calls between kernels. layer_weights = None
        turns it off."""
        return self.layer_weights is not None and tokens <= self.one_call_rows

    def graph_shape(self, seqs: list[SeqInput]) -> tuple[int, int] | None:
        """The (batch, context) CUDA graph this step replays (decode_graphs.py), or None.
        graphs = None turns them off."""
        return None if self.graphs is None else self.graphs.shape_for(seqs)

    def replays_graph(self, seqs: list[SeqInput]) -> bool:
        return self.graph_shape(seqs) is not None

    @torch.inference_mode()
    def forward_logits(self, seqs: list[SeqInput]) -> torch.Tensor:
        """Run one step; returns float32 logits [rows, vocab]: a row for each seq with sample=True,
        1 + drafts rows for one with drafts."""
        shape = self.graph_shape(seqs)
        if shape is not None:
            return self.graphs.logits(seqs, shape)
        step = self._prepare(seqs)
        flat = [t for s in seqs for t in s.token_ids]
        if step.order is not None:
            flat = [flat[i] for i in step.order]
        ids = torch.tensor(flat, dtype=torch.long, device=self.device)
        return self.forward_step(ids, step)

    def forward_decode_rows(self, tokens, positions, slots, context_lens, tables, context: int) -> torch.Tensor:
        """A step of decode rows given as device tensors alone (no Python lists, nothing the host
        must wait for), each row reading `context` key slots of its block table, masked to its own
        context length: what a CUDA graph records (decode_graphs.py)."""
        rows = torch.arange(len(tokens), device=tokens.device)
        dec_slots, dec_mask = self._decode_keys(tables, context_lens, context)
        step = _Step(positions, slots, rows, self.cos[positions][:, None, :], self.sin[positions][:, None, :],
                     dec_rows=rows, dec_slots=dec_slots, dec_mask=dec_mask)
        return self.forward_step(tokens, step)

    def forward_step(self, ids: torch.Tensor, step: _Step) -> torch.Tensor:
        """The layers, the final norm and the vocabulary head over a prepared step's tokens `ids`."""
        T, H, KV, d = len(ids), self.num_heads, self.num_kv_heads, self.head_dim
        bufs = {}
        if step.dec_slots is not None:                   # gather buffers shared by all layers
            shape = (len(step.dec_slots), KV, d)
            bufs = {"dk": self.k_cache.new_empty(shape), "dv": self.v_cache.new_empty(shape)}

        # x is the residual stream [T, hidden]; each block's output (delta) is added to it by the
        # norm that follows, in the same call
        x, delta = F.embedding(ids, self.embed), None
        if step.row_tables is not None and self.takes_one_call(T):
            delta = self.kernels.layers_in_one_call(x, self.layer_weights, self.inter, self.cos, self.sin,
                                                    step.positions, step.slots, self.k_cache, self.v_cache,
                                                    step.row_tables, step.row_lens, H, self.block_size,
                                                    self.scale, self.eps, self.few_rows)
        else:
            for i, layer in enumerate(self.layers):
                w = self.linears[i]
                h = self._add_norm(x, delta, layer.input_layernorm.weight)
                q = self._rope_and_store(i, w["qkv"](h), step)
                o = self._attention(i, q, step, bufs)
                h = self._add_norm(x, w["o"](o.reshape(T, H * d)), layer.post_attention_layernorm.weight)
                delta = w["down"](w["gate_up"](h))          # gate_up: silu(gate) * up (Linear, gated)
        # lm_head only where a next token is wanted: the vocab matmul is the biggest one
        rows = step.sample_rows
        h = self._add_norm(x[rows], delta[rows], self.norm)
        return self.lm_head_linear(h).float()

    def run(self, seqs: list[SeqInput]) -> list[int | list[int] | None]:
        """One step: the sampled next token for each seq with sample=True, None for the others; for
        a seq with drafts, the greedy token at each of its 1 + drafts last positions (a list)."""
        logits = self.forward_logits(seqs)
        if any(s.drafts for s in seqs):
            return self._run_verifying(seqs, logits)
        out: list[int | None] = [None] * len(seqs)
        samplers = [i for i, s in enumerate(seqs) if s.sample]
        sampled = [seqs[i].temperature > 0 for i in samplers]
        greedy = [r for r, i in enumerate(samplers) if not sampled[r]]
        if greedy:
            rows = logits if len(greedy) == len(samplers) else logits[greedy]   # no copy when all are greedy
            tokens = self.kernels.argmax_rows(rows) if self.kernels is not None else rows.argmax(dim=-1).tolist()
            for r, tok in zip(greedy, tokens):
                out[samplers[r]] = tok
        for r, i in enumerate(samplers):
            s = seqs[i]
            if sampled[r]:
                out[i] = sample_token(logits[r], s.temperature, s.top_p, s.seed, s.start_pos + len(s.token_ids))
        return out


    def _run_verifying(self, seqs: list[SeqInput], logits: torch.Tensor) -> list[int | list[int] | None]:
        """run() for a step where some sequences verify drafts: the argmax of every row, then each
        sequence's share (sampling as run() does for a sampled sequence, which has no drafts)."""
        tokens = self.kernels.argmax_rows(logits) if self.kernels is not None else logits.argmax(dim=-1).tolist()
        out: list[int | list[int] | None] = [None] * len(seqs)
        row = 0
        for i, s in enumerate(seqs):
            if s.sample:
                out[i] = list(tokens[row:row + 1 + s.drafts]) if s.drafts else tokens[row] if s.temperature == 0 \
                    else sample_token(logits[row], s.temperature, s.top_p, s.seed, s.start_pos + len(s.token_ids))
                row += 1 + s.drafts
        return out
