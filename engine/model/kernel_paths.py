"""Which vector path of the C kernels (cpu_kernels.c) a process runs, chosen at load time.

The kernels are written once for several widths of vector registers; each path is a build of
that file with the instructions above it turned off. By default the widest path this CPU runs is
taken; BATCHING_LAB_KERNELS names a path to force one (so a machine with AVX-512 still runs,
tests and times the AVX2 path), 0 turns the kernels off, 1 takes the widest. Kept apart from
cpu_kernels.py, which needs torch, so that a record of which code ran needs no torch.
"""
from __future__ import annotations

import platform
from pathlib import Path

from .. import settings

ENV = settings.KERNELS

# The vector paths, widest first: the CPU features each needs (as Linux's /proc/cpuinfo names
# them) and the gcc flags that hold a -march=native build to them. cpu_kernels.c picks its code
# from the compiler's own macros (__AVX512F__, __AVX512BF16__, __AVX2__) and says which path it
# was built as (kernel_path), which load() checks.
PATHS = {
    "avx512_bf16": (("avx512f", "avx512_bf16"), ()),    # 16 floats a register, bf16 dot products
    "avx512": (("avx512f",), ("-mno-avx512bf16",)),      # 16 floats a register
    "avx2": (("avx2", "fma"), ("-mno-avx512f",)),        # 8 floats a register
    "portable": ((), ("-mno-avx512f", "-mno-avx2")),     # gcc's vector extensions, whatever the CPU has
}


def cpu_id() -> str:
    """Model name and feature flags: a library built with -march=native only runs where these match."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(lines)))


def cpu_flags() -> set[str]:
    """This CPU's feature flags, as Linux lists them (none where /proc/cpuinfo cannot be read)."""
    flags = next((ln for ln in cpu_id().splitlines() if ln.startswith("flags")), "")
    return set(flags.partition(":")[2].split())


def missing_features(path: str, flags: set[str] | None = None) -> list[str]:
    """The CPU features `path` needs that this CPU (or `flags`) lacks: none where it can run."""
    needs, _ = PATHS[path]
    have = cpu_flags() if flags is None else flags
    return [f for f in needs if f not in have]


def widest_path(flags: set[str] | None = None) -> str:
    return next(p for p in PATHS if not missing_features(p, flags))


def _env_value() -> str:
    return settings.kernels()


def forced() -> bool:
    """Does BATCHING_LAB_KERNELS name a path (else the widest is taken, or none)?"""
    return _env_value() not in ("1", "", "0")


def chosen_path() -> str | None:
    """The path BATCHING_LAB_KERNELS asks for (the widest this CPU has by default), or None for
    no kernels. ValueError, saying what is allowed here, for a name it does not know or a path
    this CPU cannot run."""
    value = _env_value()
    if value == "0":
        return None
    if not forced():
        return widest_path()
    runnable = [p for p in PATHS if not missing_features(p)]
    allowed = f"allowed here: 1 (the widest, {runnable[0]}), 0 (no kernels), or one of {', '.join(runnable)}"
    if value not in PATHS:
        raise ValueError(f"{ENV}={value!r} is not a kernel path; {allowed}")
    if missing_features(value):
        raise ValueError(f"{ENV}={value}: this CPU lacks {', '.join(missing_features(value))}; {allowed}")
    return value


def in_words() -> str:
    """Which path this process takes, and why (for `engine bench`)."""
    path = chosen_path()
    if path is None:
        return f"off ({ENV}=0): PyTorch ops instead"
    why = f"forced by {ENV}" if forced() else f"the widest this CPU runs; {ENV}=<path> forces another"
    runnable = [p for p in PATHS if not missing_features(p)]
    return f"the {path} path ({why}; this CPU runs {', '.join(runnable)})"
