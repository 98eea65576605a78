"""A paged KV cache, bookkeeping only, with automatic prefix caching.

The cache is a pool of fixed-size blocks (block_size tokens each). A request owns a list of
block ids, its *block table*; token at position p lives in block `block_table[p // block_size]`
at offset `p % block_size`. Nothing here touches tensors: the model runner owns the memory,
this pool decides who may use which block. That keeps the scheduler testable without torch.

`capacity_blocks` is how much of the physical pool the scheduler may use. A learner can
shrink it while the engine runs; blocks already handed out stay handed out, and the
scheduler preempts until usage fits again.

Prefix caching, as vLLM's automatic prefix caching does it:
  - a *full* block whose keys and values have been computed gets a key: the hash of its own
    tokens and of the key of the block before it (a chain), so a key stands for every token
    from the start of the sequence to the end of that block;
  - a request about to start looks its tokens up block by block and takes every leading block
    already in the cache; those tokens are not computed again (the model runner starts after
    them, reading their keys and values where they are);
  - blocks are shared by reference count; a block whose count falls to 0 keeps its contents
    and its key and joins the free queue. Free blocks are handed out least recently freed
    first, so the cached block evicted is the one unused the longest (LRU); a request's
    blocks are freed last-block-first, so its tail goes before its head.
With caching off the free blocks are a stack: the most recently freed is handed out first.
"""
from __future__ import annotations

from collections import OrderedDict

from .request import Request


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def block_keys(req: Request, block_size: int, num_blocks: int) -> list[int]:
    """The chained keys of `req`'s first `num_blocks` full blocks, worked out once per block and
    kept on the request (a block's tokens never change, so neither does its key).

    Python's hash of a tuple of ints is the same in every process (only str and bytes hashes
    are salted); vLLM offers sha256 instead where tenants might craft collisions on purpose."""
    keys = req.block_hashes
    for b in range(len(keys), num_blocks):
        parent = keys[-1] if keys else 0
        keys.append(hash((parent, tuple(req.token_ids(b * block_size, block_size)))))
    return keys[:num_blocks]


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int = 16):
        assert num_blocks > 0 and block_size > 0
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.capacity_blocks = num_blocks
        # Free block ids in the order they were freed (the last one is the most recent).
        # Block 0 is last, so with caching off it is handed out first.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks - 1, -1, -1))
        self._refs = [0] * num_blocks             # requests holding each block
        self._key_of: dict[int, int] = {}         # block id -> its key, for cached blocks
        self._block_of: dict[int, int] = {}       # key -> block id: the prefix cache
        self.caching = False                      # set by the scheduler from the policy
        # Whole-life counts, in tokens, as vLLM counts them: a query is a request's tokens
        # looked up as it starts, a hit the tokens found.
        self.prefix_queries = 0
        self.prefix_hits = 0

    @property
    def used_blocks(self) -> int:
        """Blocks some request holds (cached blocks nobody holds are free: they can be evicted)."""
        return self.num_blocks - len(self._free)

    @property
    def free_blocks(self) -> int:
        """Blocks that may still be handed out under the current capacity."""
        return max(0, self.capacity_blocks - self.used_blocks)

    @property
    def cached_blocks(self) -> int:
        """Blocks holding a cached prefix, whether a request holds them now or not."""
        return len(self._block_of)

    def set_capacity_tokens(self, tokens: int) -> None:
        self.capacity_blocks = max(1, min(self.num_blocks, tokens // self.block_size))

    def blocks_needed(self, req: Request, new_tokens: int) -> int:
        """Extra blocks `req` needs to hold `new_tokens` more tokens of KV."""
        want = blocks_for(req.num_computed_tokens + new_tokens, self.block_size)
        return max(0, want - len(req.block_table))

    def can_allocate(self, req: Request, new_tokens: int, hit: list[int] = ()) -> bool:
        """Would `new_tokens` more fit, after taking the cached blocks `hit` (which use up free
        capacity too where nobody holds them now)?"""
        idle = sum(1 for b in hit if self._refs[b] == 0) if hit else 0
        return self.blocks_needed(req, new_tokens) + idle <= self.free_blocks

    def allocate(self, req: Request, new_tokens: int) -> None:
        n = self.blocks_needed(req, new_tokens)
        assert n <= self.free_blocks, "allocate() without can_allocate()"
        for _ in range(n):
            req.block_table.append(self._take_free())

    def free(self, req: Request) -> None:
        """Give back the request's blocks. With caching on, its full computed blocks are cached
        first, so a later request (or this one, after a preemption) can take them again."""
        if self.caching:
            self.cache_computed(req)
        for b in reversed(req.block_table):
            self._refs[b] -= 1
            if self._refs[b] == 0:
                self._free[b] = None
        req.block_table = []
        req.num_cached_blocks = 0

    def trim(self, req: Request) -> None:
        """Give back the blocks past those that hold `req`'s computed tokens: after speculative
        decoding rejected drafts, the blocks taken only for them return to the pool."""
        keep = max(blocks_for(req.num_computed_tokens, self.block_size), req.num_cached_blocks)
        while len(req.block_table) > keep:
            b = req.block_table.pop()
            self._refs[b] -= 1
            if self._refs[b] == 0:
                self._free[b] = None

    # ----- the prefix cache -----

    def lookup(self, req: Request) -> list[int]:
        """The cached blocks that hold the longest leading run of `req`'s tokens. At least one
        token is always left to compute: its logits give the next token."""
        full = (req.num_tokens - 1) // self.block_size
        hit = []
        for key in block_keys(req, self.block_size, full):
            b = self._block_of.get(key)
            if b is None:
                break
            hit.append(b)
        return hit

    def take_cached(self, req: Request, hit: list[int]) -> None:
        """`req` starts with the cached blocks `hit`: they become its first blocks, their tokens
        count as computed, and the lookup is counted (queries and hits, in tokens)."""
        assert not req.block_table, "take_cached() on a request that holds blocks"
        for b in hit:
            if self._refs[b] == 0:
                del self._free[b]
            self._refs[b] += 1
        req.block_table = list(hit)
        req.num_computed_tokens = len(hit) * self.block_size
        req.num_cached_blocks = len(hit)
        req.num_cached_tokens = req.num_computed_tokens
        self.prefix_queries += req.num_tokens
        self.prefix_hits += req.num_computed_tokens

    def cache_computed(self, req: Request) -> None:
        """Key every full block of `req` whose keys and values are computed, and cache it
        unless a block with the same key is cached already."""
        full = min(req.num_computed_tokens // self.block_size, len(req.block_table))
        start = req.num_cached_blocks
        if full <= start:
            return
        keys = block_keys(req, self.block_size, full)
        for i in range(start, full):
            b = req.block_table[i]
            if b not in self._key_of and keys[i] not in self._block_of:
                self._key_of[b] = keys[i]
                self._block_of[keys[i]] = b
        req.num_cached_blocks = full

    def _take_free(self) -> int:
        """A free block for new contents: with caching on the least recently freed (its cached
        prefix, if any, is evicted); with caching off the most recently freed."""
        b, _ = self._free.popitem(last=not self.caching)
        key = self._key_of.pop(b, None)
        if key is not None:
            del self._block_of[key]
        self._refs[b] = 1
        return b
