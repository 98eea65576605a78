"""Where a step's time goes: the model runner's parts timed one by one, for a few step shapes.

A runner is profiled by wrapping, on that one runner object, each part of its forward in a
timer: the linear layers (the GEMMs, the MLP's activation with them: the gate/up product takes it
as it stores its output), the vocabulary head, attention, RoPE with the KV cache write, the norms
(with their residual adds), and the step's index set-up.
Sampling is what `run` takes beyond the forward. Whatever the timers do not cover is Python and
the framework: the loop over layers, dispatching each call, the embedding, the gaps between
kernels (and the timers' own cost, about half a microsecond a call). CPU work is synchronous,
so a timer around a call is the call's time; on a GPU the timers would only see launches, so
`profile_shapes` synchronises after every part there (which removes the overlap it measures).

A step runs all its layers in one C call on the CPU (cpu_kernels.layers_in_one_call, where every
product has the kernel's panels), which no timer can split: the profiled runner takes the loop of
single kernels instead, the same kernels, and the table's "engine ms" column is the step as the
engine runs it, timed on a second runner without timers (where the engine takes the loop too, it
is the profiled step: the same path).
On a GPU a decode step replays a CUDA graph (decode_graphs.py), which no timer can split either:
the profiled runner runs it eagerly, and "engine ms" is the replayed step.
"""
from __future__ import annotations

import time
from collections import defaultdict

import torch

from ..core.step_model import causal_pairs
from .runner import ModelRunner, SeqInput

PARTS = ("gemm", "lm_head", "attention", "rope_kv", "norms", "set_up", "sampling")
LABELS = {"gemm": "GEMM+SiLU*up", "lm_head": "LM head", "attention": "attention", "rope_kv": "RoPE+KV write",
          "norms": "add+norm", "set_up": "step set-up", "sampling": "sampling",
          "other": "Python & gaps"}
DECODE_BATCHES = (1, 8, 32, 64)
DECODE_CONTEXT = 200            # tokens each decoding sequence already has (the bench's prompts average 136 + outputs)
PREFILL_PROMPTS = ((1, 256), (8, 256))   # (prompts, tokens each) in one step: a chunk, and a 2,048-token step
# (prompt tokens, chunk tokens): the last chunk of a long prompt prefilled in chunks, whose
# queries attend to every earlier chunk's keys (attention's largest share of a prefill step)
LAST_CHUNKS = ((2048, 512),)


def _timed(fn, part: str, spent: dict, sync):
    def timed(*args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        sync()
        spent[part] += time.perf_counter() - t
        return out
    return timed


class _Timed:
    """A linear layer's stand-in that times each call."""

    def __init__(self, linear, part: str, spent: dict, sync):
        self.call = _timed(linear, part, spent, sync)

    def __call__(self, x):
        return self.call(x)


def instrument(runner: ModelRunner) -> dict:
    """Wrap the parts of this runner's forward in timers; returns the dict they add seconds to."""
    spent: dict = defaultdict(float)
    sync = (lambda: torch.cuda.synchronize(runner.device)) if runner.device.type == "cuda" else (lambda: None)
    runner.linears = [{name: _Timed(lin, "gemm", spent, sync) for name, lin in layer.items()}
                      for layer in runner.linears]
    runner.lm_head_linear = _Timed(runner.lm_head_linear, "lm_head", spent, sync)
    runner.layer_weights = None          # the loop of single kernels, which the timers can split
    runner.graphs = None                 # and on a GPU, eager kernels rather than a replayed graph
    for method, part in (("_attention", "attention"), ("_rope_and_store", "rope_kv"), ("_add_norm", "norms"),
                         ("_prepare", "set_up"), ("forward_logits", "forward")):
        setattr(runner, method, _timed(getattr(runner, method), part, spent, sync))
    return spent


def step_shapes(block_size: int) -> list[tuple[str, list[SeqInput]]]:
    """(name, sequences) of each profiled step: decodes at each batch, and prefill steps."""
    shapes, block = [], 0

    def table(tokens: int) -> list[int]:
        nonlocal block
        n = -(-tokens // block_size)
        block += n
        return list(range(block - n, block))

    for b in DECODE_BATCHES:
        shapes.append((f"decode b{b}", [SeqInput(f"d{b}-{i}", [100 + i], DECODE_CONTEXT, table(DECODE_CONTEXT + 1), True)
                                        for i in range(b)]))
    for n, tokens in PREFILL_PROMPTS:
        shapes.append((f"prefill {n}x{tokens}", [SeqInput(f"p{n}-{i}", [200 + (i * 31 + j) % 4000 for j in range(tokens)],
                                                          0, table(tokens), True) for i in range(n)]))
    for prompt, chunk in LAST_CHUNKS:
        shapes.append((f"last {chunk} of {prompt}", [SeqInput(f"c{prompt}", [200 + j % 4000 for j in range(chunk)],
                                                              prompt - chunk, table(prompt), True)]))
    return shapes


def kv_blocks_needed(block_size: int) -> int:
    return sum(len(s.block_table) for _, seqs in step_shapes(block_size) for s in seqs)


def _timed_run(runner, seqs) -> float:
    t = time.perf_counter()
    runner.run(seqs)
    return time.perf_counter() - t


def profile_shapes(model, reps: int = 5, prefill_reps: int = 1) -> list[dict]:
    """Each shape run once to warm up, then `reps` times (`prefill_reps` for the long prefill
    steps); the median step's parts in ms, and its total."""
    block_size = 16
    runner = ModelRunner(model, kv_blocks_needed(block_size), block_size)
    engine_runner = ModelRunner(model, kv_blocks_needed(block_size), block_size)
    spent = instrument(runner)
    rows = []
    for name, seqs in step_shapes(block_size):
        tokens = sum(len(s.token_ids) for s in seqs)
        other_path = engine_runner.takes_one_call(tokens) or engine_runner.replays_graph(seqs)
        runs, engine_runs = [], []
        for i in range(1 + (reps if name.startswith("decode") else prefill_reps)):
            spent.clear()
            total = _timed_run(runner, seqs)
            engine_total = _timed_run(engine_runner, seqs) if other_path else total
            if i:
                runs.append((total, dict(spent)))
                engine_runs.append(engine_total)
        total, parts = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
        row = {"shape": name, "tokens": tokens, "step_ms": total * 1000,
               "engine_ms": sorted(engine_runs)[len(engine_runs) // 2] * 1000,
               "samples": sum(s.sample for s in seqs),
               # for the roofline: the (query, key) pairs its attention scores, the K/V rows it reads
               "pairs": sum(causal_pairs(s.start_pos, len(s.token_ids)) for s in seqs),
               "kv_rows": sum(s.start_pos + len(s.token_ids) for s in seqs)}
        for part in PARTS:
            row[part] = parts.get(part, 0.0) * 1000
        row["sampling"] = (total - parts.get("forward", 0.0)) * 1000
        row["other"] = row["step_ms"] - sum(row[p] for p in PARTS)
        rows.append(row)
    return rows


def format_table(rows: list[dict], roofline_ms=None, in_turn_ms=None) -> str:
    """The breakdown as a text table, in ms and as shares of each step; `roofline_ms(row)` adds
    the roofline time of the shape and the step's share of it, and `in_turn_ms(row)` the share of
    the roofline with the products and the attention in turn (engine/cli/bench.step_roofline_s)."""
    cols = [*PARTS, "other"]
    head = f"{'step':<16}{'ms':>9}" + "".join(f"{LABELS[c]:>15}" for c in cols) + f"{'engine ms':>11}"
    if roofline_ms:
        head += f"{'roofline ms':>13}{'share':>7}"
    if in_turn_ms:
        head += f"{'in turn':>9}"
    lines = [head]
    for r in rows:
        line = f"{r['shape']:<16}{r['step_ms']:>9.1f}" + "".join(
            f"{r[c]:>8.1f} {r[c] / r['step_ms'] * 100:>4.0f}% " for c in cols) + f"{r['engine_ms']:>11.1f}"
        if roofline_ms:
            roof = roofline_ms(r)
            line += f"{roof:>13.1f}{roof / r['engine_ms'] * 100:>6.0f}%"
        if in_turn_ms:
            line += f"{in_turn_ms(r) / r['engine_ms'] * 100:>8.0f}%"
        lines.append(line)
    return "\n".join(lines)
