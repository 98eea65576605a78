"""Keep the memory one step frees for the next step, instead of handing it back to the system.

Every step allocates its activations and logits afresh (at 64 decode rows the logits alone are
12.6 MB), and glibc's malloc gives large freed blocks back to the kernel: it serves blocks over
its mmap threshold from fresh mappings, and trims its heap once more than its trim threshold lies
free at the top. The next step then touches every page of those blocks again, and each first
touch is a page fault, which on a virtual machine can cost tens of microseconds. Raising both
thresholds lets the process keep up to KEEP_FREE_BYTES of freed memory for reuse, so a steady
stream of steps allocates without faulting once the heap holds a few blocks of each size (torch's
blocks are 64-byte aligned, and glibc reuses a freed block for an aligned request only where it
fits with the alignment's slack, so the first few steps still carve new ones). Blocks over
MMAP_THRESHOLD_BYTES (long prefill steps' largest buffers) are still mapped afresh: few, and a
fault's cost is small beside such a step's arithmetic.

glibc only (Linux); elsewhere this does nothing (`keep_freed_memory` returns False).
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3     # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD_BYTES = 32 << 20                 # the largest glibc accepts on 64-bit
KEEP_FREE_BYTES = 256 << 20

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set malloc's thresholds once per process; True where they were set (glibc)."""
    global _done
    if _done is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _done = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                         and libc.mallopt(M_TRIM_THRESHOLD, KEEP_FREE_BYTES))
        except (OSError, AttributeError):        # not glibc: no mallopt
            _done = False
    return _done
