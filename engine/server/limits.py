"""What one client may cost the server, and who is exempt.

A classroom's network reaches the server, so every limit is checked before the work it bounds:
a body's size before it is read (413), its arrival within BODY_TIMEOUT_S (408), a prompt's
characters before it is tokenized, and a client's requests in flight before anything is
tokenized (429 with Retry-After). A client is its connection's address: a new `user` string
is a new tenant, not a new client. A client's place is taken before its body is even read. The instructor (a request with the instructor token) and
the trusted addresses (the app of a classroom, which sends every student's requests from its
one address) are exempt from the per-client limits; the waiting line's cap (max_waiting) and
the per-tenant cap hold for everyone.

Connections are bounded too (engine/server/connections.py): at most MAX_CONNECTIONS_PER_CLIENT
open from one address, a request's headers within HEADER_TIMEOUT_S of the connection or of the
previous answer, at most MAX_HEADER_BYTES of them, and an idle kept-alive connection closed
after KEEP_ALIVE_S (uvicorn's own timeout_keep_alive).

Tokenizing runs on a small thread pool, one prompt at a time per client: the event loop that
takes in every other request never waits for it, and a client with many long prompts holds one
of the pool's threads at most.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..core.validation import MAX_REQUEST_BYTES

# A client's requests being read, tokenized, waiting or running. Below the default batch
# (max_num_seqs 16), so one client cannot fill every slot and queue everyone else behind it.
MAX_INFLIGHT_PER_CLIENT = 8
MAX_CONNECTIONS_PER_CLIENT = 128
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
KEEP_ALIVE_S = 5               # uvicorn's default, stated
MAX_HEADER_BYTES = 64 << 10
TOKENIZER_THREADS = 2


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_bytes: int = MAX_REQUEST_BYTES
    max_inflight_per_client: int = MAX_INFLIGHT_PER_CLIENT
    max_connections_per_client: int = MAX_CONNECTIONS_PER_CLIENT
    trusted_clients: frozenset[str] = frozenset()
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    keep_alive_s: int = KEEP_ALIVE_S
    max_header_bytes: int = MAX_HEADER_BYTES


class Tokenizing:
    """Tokenization off the event loop, one prompt at a time per client."""

    def __init__(self, threads: int = TOKENIZER_THREADS):
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="batching-lab-tokenizer")
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}     # client -> (its lock, users)

    async def run(self, client: str | None, fn, *args):
        """fn(*args) on the pool; `client` None (exempt) waits for no one but a free thread."""
        loop = asyncio.get_running_loop()
        if client is None:
            return await loop.run_in_executor(self.pool, fn, *args)
        lock, users = self._locks.get(client, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[client] = (lock, users + 1)
        try:
            async with lock:
                return await loop.run_in_executor(self.pool, fn, *args)
        finally:
            lock, users = self._locks[client]
            if users == 1:
                del self._locks[client]
            else:
                self._locks[client] = (lock, users - 1)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
