"""A paged KV cache, bookkeeping only.

The cache is a pool of fixed-size blocks (block_size tokens each). A request owns a list of
block ids, its *block table*; token at position p lives in block `block_table[p // block_size]`
at offset `p % block_size`. Nothing here touches tensors: the model runner owns the memory,
this pool decides who may use which block. That keeps the scheduler testable without torch.

`capacity_blocks` is how much of the physical pool the scheduler may use. A learner can
shrink it while the engine runs; blocks already handed out stay handed out, and the
scheduler preempts until usage fits again.
"""
from __future__ import annotations

from .request import Request


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int = 16):
        assert num_blocks > 0 and block_size > 0
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.capacity_blocks = num_blocks
        # A stack of free block ids, block 0 on top: the most recently freed blocks are handed
        # out first (they are the likeliest to be warm in the CPU's caches).
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def free_blocks(self) -> int:
        """Blocks that may still be handed out under the current capacity."""
        return max(0, self.capacity_blocks - self.used_blocks)

    def set_capacity_tokens(self, tokens: int) -> None:
        self.capacity_blocks = max(1, min(self.num_blocks, tokens // self.block_size))

    def blocks_needed(self, req: Request, new_tokens: int) -> int:
        """Extra blocks `req` needs to hold `new_tokens` more tokens of KV."""
        want = blocks_for(req.num_computed_tokens + new_tokens, self.block_size)
        return max(0, want - len(req.block_table))

    def can_allocate(self, req: Request, new_tokens: int) -> bool:
        return self.blocks_needed(req, new_tokens) <= self.free_blocks

    def allocate(self, req: Request, new_tokens: int) -> None:
        n = self.blocks_needed(req, new_tokens)
        assert n <= self.free_blocks, "allocate() without can_allocate()"
        for _ in range(n):
            req.block_table.append(self._free.pop())

    def free(self, req: Request) -> None:
        self._free.extend(reversed(req.block_table))
        req.block_table = []
