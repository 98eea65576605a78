"""What one client may cost the server, and who is exempt.

A classroom's network reaches the server, so every limit is checked before the work it bounds:
a body's size before it is read (413), its arrival within BODY_TIMEOUT_S (408), a prompt's
characters before it is tokenized, and a client's requests in flight before anything is
tokenized (429 with Retry-After). A client is its connection's address: a new `user` string
is a new tenant, not a new client. A client's place is taken before its body is even read.
A client's bodies are metered too (ByteBudget): BYTES_PER_S_PER_CLIENT sustained, a burst of
two full bodies; a body over what is left waits for it (up to MAX_BUDGET_WAIT_S, else 429), so
a client sending megabytes in a loop costs the server a megabyte a second, not all it can read.
A refusal for a client's own limit is held before it is answered (RefusalPacing): a second for a
client refused now and then, longer the more of its refusals are being held at once, up to
MAX_REFUSAL_DELAY_S: a client retrying in a loop on many connections is answered about
REFUSALS_PER_S times a second in all, not as fast as it can ask. The instructor (a request with the instructor token) and
the trusted addresses (the app of a classroom, which sends every student's requests from its
one address) are exempt from the per-client limits; the waiting line's cap (max_waiting) and
the per-tenant cap hold for everyone.

The per-client limits (requests in flight, connections, body bytes and the pacing of their
refusals) are for a server on a network, where many clients share it. A server on a loopback
address has one user, as `vllm serve` does, whose benchmark may open dozens of streams at once:
`engine serve` turns them off there unless asked (`per_client` False; see `describe`).

Connections are bounded too (engine/server/connections.py): at most MAX_CONNECTIONS_PER_CLIENT
open from one address, a request's headers within HEADER_TIMEOUT_S of the connection or of the
previous answer, at most MAX_HEADER_BYTES of them, and an idle kept-alive connection closed
after KEEP_ALIVE_S (uvicorn's own timeout_keep_alive). A connection over a client's limit is
held unread, paced the same way, before it is closed (up to MAX_HELD_CONNECTIONS of them at a
time, then closed at once).

Tokenizing runs on a small thread pool, one prompt at a time per client: the event loop that
takes in every other request never waits for it, and a client with many long prompts holds one
of the pool's threads at most.
"""
from __future__ import annotations

import asyncio
import ipaddress
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..core.validation import MAX_REQUEST_BYTES
from .openai_schema import ApiError

# A client's requests being read, tokenized, waiting or running. Below the default batch
# (max_num_seqs 16), so one client cannot fill every slot and queue everyone else behind it.
MAX_INFLIGHT_PER_CLIENT = 8
MAX_CONNECTIONS_PER_CLIENT = 128
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
KEEP_ALIVE_S = 5               # uvicorn's default, stated
MAX_HEADER_BYTES = 64 << 10
TOKENIZER_THREADS = 2
BYTES_PER_S_PER_CLIENT = 1 << 20    # a client's request bodies, sustained: a prompt of a few thousand
                                    # tokens is a few kilobytes, so only a flood of big bodies waits
MAX_BUDGET_WAIT_S = 10.0
REFUSAL_DELAY_S = 1.0               # the least a refusal for a client's own limit is held
MAX_REFUSAL_DELAY_S = 10.0
REFUSALS_PER_S = 20                 # per client address, however many connections it retries on
MAX_HELD_CONNECTIONS = 4096         # and at most a quarter of the process's file descriptors


@dataclass(frozen=True, slots=True)
class ServerLimits:
    per_client: bool = True          # False: no per-client limit holds anyone (one user on loopback)
    max_body_bytes: int = MAX_REQUEST_BYTES
    max_inflight_per_client: int = MAX_INFLIGHT_PER_CLIENT
    max_connections_per_client: int = MAX_CONNECTIONS_PER_CLIENT
    trusted_clients: frozenset[str] = frozenset()
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    keep_alive_s: int = KEEP_ALIVE_S
    max_header_bytes: int = MAX_HEADER_BYTES
    bytes_per_s_per_client: int = BYTES_PER_S_PER_CLIENT
    max_budget_wait_s: float = MAX_BUDGET_WAIT_S
    refusal_delay_s: float = REFUSAL_DELAY_S
    max_refusal_delay_s: float = MAX_REFUSAL_DELAY_S
    refusals_per_s: float = REFUSALS_PER_S
    max_held_connections: int = MAX_HELD_CONNECTIONS


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches: 127.0.0.0/8, ::1, or the name localhost.
    Any other name may resolve to a network address, so it counts as a network."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def describe(limits: ServerLimits) -> str:
    """The per-client limits in force, in one line for the server's start-up."""
    if not limits.per_client:
        return "per-client limits: off (one user on loopback; --client-limits on turns them on)"
    exempt = ", ".join(["the instructor token", *sorted(limits.trusted_clients)])
    return (f"per-client limits: on, per client address: {limits.max_inflight_per_client:,} requests in flight, "
            f"{limits.max_connections_per_client:,} connections, {limits.bytes_per_s_per_client / (1 << 20):g} MiB/s "
            f"of request bodies (exempt: {exempt}; --client-limits off turns them off)")


class RefusalPacing:
    """How long a refusal of a client is held before it is answered: as many seconds as the
    client's refusals held at once, this one included, divided by `per_s`, within [least, most].
    Holding costs nothing but a socket, and a client that retries at once can only retry when
    answered: with N connections it gets about `per_s` refusals a second, whatever N is."""

    def __init__(self, limits: ServerLimits):
        self.per_s, self.least, self.most = limits.refusals_per_s, limits.refusal_delay_s, limits.max_refusal_delay_s
        self.held: dict[str, int] = {}
        self.total = 0                          # refusals held now, every client's

    def delay(self, client: str) -> float:
        return min(self.most, max(self.least, (self.held.get(client, 0) + 1) / self.per_s))

    def hold(self, client: str) -> float:
        """Count a refusal of `client` as held; the seconds to hold it. Call `release` after."""
        seconds = self.delay(client)
        self.held[client] = self.held.get(client, 0) + 1
        self.total += 1
        return seconds

    def release(self, client: str) -> None:
        self.held[client] -= 1
        self.total -= 1
        if not self.held[client]:
            del self.held[client]


class ByteBudget:
    """Body bytes per client address, as a token bucket: `rate` bytes a second, up to `burst`
    saved. `take` reserves a body's bytes, sleeping until the bucket covers them; a wait over
    `max_wait_s` takes nothing and is a 429."""

    def __init__(self, rate: float, burst: float, max_wait_s: float):
        self.rate, self.burst, self.max_wait_s = rate, burst, max_wait_s
        self._level: dict[str, tuple[float, float]] = {}          # client -> (bytes saved, at)

    def reserve(self, client: str, n: int, now: float | None = None) -> float:
        """Seconds until `n` bytes of `client` may be read (0: now); math.inf, reserving nothing,
        when that is over max_wait_s."""
        now = time.monotonic() if now is None else now
        level, at = self._level.get(client, (self.burst, now))
        level = min(self.burst, level + (now - at) * self.rate) - n
        wait = max(0.0, -level / self.rate)
        if wait > self.max_wait_s:
            return math.inf
        self._level[client] = (level, now)
        if len(self._level) > 4096:                  # forget the clients whose bucket is full again
            self._level = {c: (lv, t) for c, (lv, t) in self._level.items()
                           if lv + (now - t) * self.rate < self.burst}
        return wait

    async def take(self, client: str | None, n: int) -> None:
        if client is None or self.rate <= 0:
            return
        wait = self.reserve(client, n)
        if wait == math.inf:
            raise ApiError(429, f"this client ({client}) has sent more than {self.rate:,.0f} bytes a second of "
                                f"request bodies; {n:,} more would wait over {self.max_wait_s:g} s (the limit "
                                "per client address; --trusted-client lifts it)",
                           retry_after_s=math.ceil(n / self.rate))
        if wait:
            await asyncio.sleep(wait)


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
