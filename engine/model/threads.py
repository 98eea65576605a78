"""Why set-up work that touches torch runs on a thread of its own.

PyTorch on the CPU runs its parallel loops on OpenMP (libgomp). Every thread that starts a
parallel loop gets its own team of worker threads, kept for as long as that thread lives. Once
the process holds more OpenMP threads than the machine has cores, libgomp stops letting idle
workers spin between loops and puts them to sleep, so every loop then pays to wake them again.

A server that loads the model on its main thread and then steps the engine on another holds two
teams for good: on two cores, the engine's matmuls then ran about a quarter slower than on the
thread that loaded the model. `in_passing_thread` runs set-up work on a thread that ends at
once, taking its team with it, so the engine's thread is the only one left with a team.
"""
from __future__ import annotations

import os
import threading


def in_passing_thread(fn, *args, **kwargs):
    """fn(*args, **kwargs), run on a short-lived thread; its result, or its exception re-raised."""
    out: dict = {}

    def work():
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as exc:          # re-raised in the caller's thread
            out["error"] = exc

    t = threading.Thread(target=work, name="batching-lab-set-up", daemon=True)   # Ctrl-C need not wait
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


OS_THREAD_NAME = "bl-engine"    # what `top -H` and /proc/PID/task/TID/comm show for the engine's threads


def name_os_thread(name: str = OS_THREAD_NAME) -> None:
    """Give the calling thread this name in the operating system (at most 15 bytes; Python's own
    thread names stay inside Python). The threads it starts inherit the name, OpenMP's workers
    included, so the engine's CPU time can be told apart from the rest of its process. Linux only:
    elsewhere this does nothing."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)      # 15: PR_SET_NAME
    except (OSError, AttributeError):
        pass


def lower_os_priority(nice: int) -> None:
    """Make the calling thread, and the threads it starts from now on (its OpenMP workers), yield
    the CPU to the rest of the process: `nice` is added to its Linux nice value (0 = normal, 19 =
    lowest). Any process may lower its own priority; where it cannot (another OS), nothing happens."""
    try:
        me = threading.get_native_id()      # on Linux a thread id names one thread, not its process
        os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + nice)
    except (OSError, AttributeError):
        pass
