"""Decode steps on a GPU, replayed from CUDA graphs.

Eager PyTorch launches a decode step as a few dozen kernels per layer, each one the CPU's work
(Python, dispatch, the launch itself), while each kernel runs for a few microseconds on the GPU:
the launches are the step. A CUDA graph records a step's kernels once, and replays all of them
with one launch. A graph replays fixed shapes on fixed memory, so:
  - a step's batch is padded up to a bucket (1, 2, 4 ... 256 sequences) and its context up to a
    bucket of key slots (256, 512 ... the model's length): one graph per (batch, context) pair,
    recorded when the engine is built for the first context (record_ahead, up to its batch
    limit), and for longer contexts the first time a step needs it;
  - each graph reads one input tensor (each row's token, position, cache slot, context length
    and block table), which a step overwrites with one copy from the host;
  - padding rows write their K/V into the cache's spare block, which no sequence owns, and
    attend to that one slot.
The recorded kernels are the runner's own PyTorch path run on the padded rows. Without a GPU the
same padded forward runs eagerly (record=False), which is how the tests hold it to the unpadded one.
"""
from __future__ import annotations


import torch

from .. import settings

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FIRST_CONTEXT = 256
MAX_KEY_ROWS = 256 * 2048       # batch x context of the largest graph: its key gathers take ~0.4 GB in bf16
COLUMNS = ("token", "position", "slot", "context")   # then the block table


def graphs_on(device: torch.device) -> bool:
    """Decode steps replay graphs on a CUDA device, unless BATCHING_LAB_CUDA_GRAPHS=0."""
    return device.type == "cuda" and settings.cuda_graphs()


def bucket(n: int, sizes) -> int | None:
    return next((s for s in sizes if s >= n), None)


class DecodeGraphs:
    def __init__(self, runner, record: bool):
        self.runner, self.record = runner, record
        bs = runner.block_size
        self.spare_block = runner.num_kv_blocks             # the cache holds one block more than the pool
        self.contexts, c = [], FIRST_CONTEXT
        longest = -(-runner.model.max_model_len // bs) * bs
        while c < longest:
            self.contexts.append(c)
            c *= 2
        self.contexts.append(longest)
        self.graphs: dict[tuple[int, int], tuple] = {}      # (batch, context) -> (graph, inputs, logits)
        self.refused: dict[tuple[int, int], str] = {}       # pairs whose recording failed: run eagerly
        self.pool = torch.cuda.graph_pool_handle() if record else None

    def shape_for(self, seqs) -> tuple[int, int] | None:
        """The (batch, context) graph that takes this step, or None: only steps of decodes alone."""
        if not all(len(s.token_ids) == 1 and s.sample for s in seqs):
            return None
        batch = bucket(len(seqs), BATCHES)
        context = bucket(max(s.start_pos for s in seqs) + 1, self.contexts)
        if batch is None or context is None or batch * context > MAX_KEY_ROWS:
            return None
        return batch, context

    @torch.inference_mode()
    def record_ahead(self, max_batch: int) -> None:
        """Record every batch bucket up to `max_batch` at the first context now, before a run needs
        them: a recording costs a few eager steps, which would otherwise show in a run's first steps."""
        top = bucket(max_batch, BATCHES) or BATCHES[-1]
        for shape in [(batch, self.contexts[0]) for batch in BATCHES if batch <= top]:
            self._try_record(self._inputs([], *shape), shape)   # padding rows alone: the spare block

    def logits(self, seqs, shape: tuple[int, int]) -> torch.Tensor:
        """float32 logits [len(seqs), vocab] of a step that shape_for took."""
        inputs = self._inputs(seqs, *shape)
        self._try_record(inputs, shape)
        if shape not in self.graphs:
            return self._forward(inputs.to(self.runner.device), shape[1])[:len(seqs)]
        graph, static_inputs, out = self.graphs[shape]
        static_inputs.copy_(inputs)
        graph.replay()
        return out[:len(seqs)].clone()                        # the next replay overwrites `out`

    def _try_record(self, inputs: torch.Tensor, shape: tuple[int, int]) -> None:
        """Record this shape's graph if it is not yet recorded, nor has failed to be."""
        if self.record and shape not in self.graphs and shape not in self.refused:
            try:
                self.graphs[shape] = self._record(inputs, shape[1])
            except RuntimeError as exc:                      # e.g. out of memory: this shape runs eagerly
                self.refused[shape] = f"{type(exc).__name__}: {exc}"[:200]

    def _inputs(self, seqs, batch: int, context: int) -> torch.Tensor:
        """One row per sequence (COLUMNS, then its block table), padding rows after them, on the host."""
        bs, blocks, spare = self.runner.block_size, context // self.runner.block_size, self.spare_block
        rows = []
        for s in seqs:
            p, table = s.start_pos, s.block_table[:blocks]
            rows.append([s.token_ids[0], p, s.block_table[p // bs] * bs + p % bs, p + 1,
                         *table, *[spare] * (blocks - len(table))])
        rows += [[0, 0, spare * bs, 1, *[spare] * blocks]] * (batch - len(seqs))
        return torch.tensor(rows, dtype=torch.long)

    def _forward(self, inputs: torch.Tensor, context: int) -> torch.Tensor:
        """The padded decode step from its input tensor, in device ops alone (so it can be recorded)."""
        tokens, positions, slots, ctx = (inputs[:, i].contiguous() for i in range(len(COLUMNS)))
        return self.runner.forward_decode_rows(tokens, positions, slots, ctx, inputs[:, len(COLUMNS):], context)

    def _record(self, inputs: torch.Tensor, context: int) -> tuple:
        static_inputs = inputs.to(self.runner.device)
        side = torch.cuda.Stream(self.runner.device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                        # warm up: cuBLAS handles, the allocator
            for _ in range(2):
                self._forward(static_inputs, context)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            out = self._forward(static_inputs, context)
        return graph, static_inputs, out
