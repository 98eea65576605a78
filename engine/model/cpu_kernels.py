"""Build and call the hand-written CPU kernels in cpu_kernels.c.

The C file is compiled with the system's gcc (`-march=native`, tuned for this CPU) and cached
next to the converted model. It is written once for several vector paths (kernel_paths.PATHS:
AVX-512 with bf16 dot products, AVX-512, AVX2, and plain vector code for any other CPU); the
build of a path turns off the instructions above it, and `load()` picks the widest path this
CPU has when the kernels are first loaded. BATCHING_LAB_KERNELS names a path to force one (so a machine with
AVX-512 can still run, test and time the AVX2 path), 0 turns the kernels off, and 1 (the
default) takes the widest. Each path is its own library, built once and keyed by a digest of the
source, its flags and this CPU: a changed source builds anew.

The library links against the OpenMP runtime torch has already loaded, so its threads are
torch's threads: nobody spins while the other works. When no compiler is found, or
BATCHING_LAB_KERNELS=0, `load()` returns None and the runner computes the same maths with
PyTorch ops.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from .kernel_paths import PATHS, chosen_path, cpu_id, missing_features
from ..settings import cache_root

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("cpu_kernels.c")
_lock = threading.Lock()
_loaded: dict[str, object] = {}


def _build(target: Path, flags: tuple[str, ...]) -> None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc) on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        obj, lib = Path(tmp) / "k.o", Path(tmp) / "k.so"
        # -ffast-math only while compiling (vectorised expf and reductions); linking with it
        # would add a start-up routine that flushes denormals to zero for the whole process.
        subprocess.run([cc, "-O3", "-march=native", *flags, "-fopenmp", "-ffast-math", "-fPIC", "-c",
                        str(SOURCE), "-o", str(obj)], check=True, capture_output=True, text=True)
        subprocess.run([cc, "-shared", "-fopenmp", str(obj), "-o", str(lib), "-lm"],
                       check=True, capture_output=True, text=True)
        os.replace(lib, target)                         # atomic: a parallel build never sees half a file


class CpuKernels:
    """ctypes wrappers that take and return torch tensors."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        lib.kernel_path.restype = ctypes.c_char_p
        self.path = lib.kernel_path().decode()    # the vector path it was built as (PATHS)
        # int64 arrays are passed as plain addresses too: a ctypes.cast per argument cost ~2 us a call
        vp, i32, i64p = ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p
        lib.few_rows_linear.argtypes = [vp, vp, vp, i32, i32, i32, i32]
        lib.packed_size.argtypes, lib.packed_size.restype = [i32, i32, i32], ctypes.c_int64
        lib.bf16_dot.restype = i32
        self.bf16_dot = bool(lib.bf16_dot())      # packs bf16 weights as bf16 pairs (AVX512-BF16)
        lib.pack_weight.argtypes = [vp, vp, i32, i32, i32, i32]
        lib.packed_linear.argtypes = [vp, vp, vp, i32, i32, i32, i32]
        lib.gated_linear.argtypes = [vp, vp, vp, i32, i32, i32, i32]
        lib.rms_norm.argtypes = [vp, vp, vp, vp, i32, i32, ctypes.c_float, i32]
        lib.rope_store.argtypes = [vp, vp, vp, i64p, i64p, vp, vp, vp, i32, i32, i32, i32, i32]
        lib.silu_mul.argtypes = [vp, vp, i32, i32, i32]
        lib.argmax_rows.argtypes = [vp, vp, i32, i32]
        lib.paged_attention.argtypes = [vp, vp, vp, i64p, i32, i64p, i32, i32, i32, i32, i32,
                                               ctypes.c_float, vp, i32]
        lib.layers_in_one_call.argtypes = [vp, vp, i32, i32, i32, i32, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp,
                                           i32, vp, vp, i64p, i64p,
                                           vp, vp, ctypes.c_int64, i64p, i32, i64p, i32, i32, i32, i32,
                                           ctypes.c_float, ctypes.c_float, i32]
        lib.layers_in_one_call.restype = i32                # 0, or -1: no memory for its buffers

    @staticmethod
    def _bf16(t: torch.Tensor) -> int:
        assert t.dtype in (torch.float32, torch.bfloat16), t.dtype
        return int(t.dtype == torch.bfloat16)

    def few_rows_linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x [M, K] @ w[N, K].T, for M of 1 or 2 (it works for any M, but is slow beyond)."""
        assert x.is_contiguous() and w.is_contiguous() and x.dtype == w.dtype
        M, K = x.shape
        N = w.shape[0]
        y = x.new_empty((M, N))
        self.lib.few_rows_linear(x.data_ptr(), w.data_ptr(), y.data_ptr(), M, N, K, self._bf16(x))
        return y

    def pack_weight(self, w: torch.Tensor, gated: bool = False) -> torch.Tensor:
        """w [N, K] re-laid out for packed_linear: panels of weight rows, k-major, in float32 (bf16
        pairs where the CPU has bf16 dot products). An opaque buffer of 32-bit elements.
        gated: w is gate rows then up rows, laid out for gated_linear instead."""
        assert w.is_contiguous() and w.dim() == 2
        N, K = w.shape
        assert not gated or N % 2 == 0, "a gated weight has as many up rows as gate rows"
        packed = torch.empty(self.lib.packed_size(N, K, self._bf16(w)), dtype=torch.int32)
        self.lib.pack_weight(w.data_ptr(), packed.data_ptr(), N, K, self._bf16(w), int(gated))
        return packed

    def gated_linear(self, x: torch.Tensor, packed: torch.Tensor, n: int) -> torch.Tensor:
        """silu(x @ gate.T) * (x @ up.T) [M, n / 2], the MLP's activation in the product, for the
        gate and up rows [n, K] packed by pack_weight(gated=True) from a weight of x's dtype."""
        assert x.is_contiguous() and packed.dtype == torch.int32
        M, K = x.shape
        assert packed.numel() == self.lib.packed_size(n, K, self._bf16(x)), "packed from another shape or dtype"
        y = x.new_empty((M, n // 2))
        self.lib.gated_linear(x.data_ptr(), packed.data_ptr(), y.data_ptr(), M, n, K, self._bf16(x))
        return y

    def packed_linear(self, x: torch.Tensor, packed: torch.Tensor, n: int) -> torch.Tensor:
        """x [M, K] @ W.T for W [n, K] packed by pack_weight from a weight of x's dtype."""
        assert x.is_contiguous() and packed.dtype == torch.int32
        M, K = x.shape
        assert packed.numel() == self.lib.packed_size(n, K, self._bf16(x)), "packed from another shape or dtype"
        y = x.new_empty((M, n))
        self.lib.packed_linear(x.data_ptr(), packed.data_ptr(), y.data_ptr(), M, n, K, self._bf16(x))
        return y

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
        """x [rows, dim] normalised and scaled, as the Llama RMSNorm (float32 statistics). With
        `residual`, x += residual first, in place (x is the residual stream)."""
        assert x.is_contiguous() and weight.is_contiguous() and x.dtype == weight.dtype
        if residual is not None:
            assert residual.is_contiguous() and residual.shape == x.shape and residual.dtype == x.dtype
        out = torch.empty_like(x)
        self.lib.rms_norm(x.data_ptr(), None if residual is None else residual.data_ptr(), weight.data_ptr(),
                          out.data_ptr(), x.shape[0], x.shape[1], float(eps), self._bf16(x))
        return out

    def rope_store(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                   slots: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, heads: int) -> torch.Tensor:
        """qkv [T, (heads + 2 kv_heads) * d] from the stacked product: rotary embedding on q and k,
        k and v written into the cache layer [slots, kv_heads, d] at `slots` [T]. Returns the
        rotated queries [T, heads, d]. cos and sin are [positions, d] tables, positions [T]."""
        T = qkv.shape[0]
        _, kv_heads, d = k_cache.shape
        assert qkv.is_contiguous() and qkv.shape[1] == (heads + 2 * kv_heads) * d
        assert cos.is_contiguous() and sin.is_contiguous() and cos.shape[1] == d
        assert k_cache.is_contiguous() and v_cache.is_contiguous()
        assert positions.dtype == slots.dtype == torch.int64 and positions.is_contiguous() and slots.is_contiguous()
        assert qkv.dtype == cos.dtype == k_cache.dtype == v_cache.dtype
        q = qkv.new_empty((T, heads, d))
        self.lib.rope_store(qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), positions.data_ptr(), slots.data_ptr(),
                            q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), T, heads, kv_heads, d,
                            self._bf16(qkv))
        return q

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up [rows, 2n] (gate, then up) -> silu(gate) * up [rows, n]."""
        assert gate_up.is_contiguous() and gate_up.shape[1] % 2 == 0
        rows, n = gate_up.shape[0], gate_up.shape[1] // 2
        out = gate_up.new_empty((rows, n))
        self.lib.silu_mul(gate_up.data_ptr(), out.data_ptr(), rows, n, self._bf16(gate_up))
        return out

    def argmax_rows(self, x: torch.Tensor) -> list[int]:
        """Each row's largest value's index (the first, if several), as torch.argmax(dim=-1) gives
        it for finite float32 values."""
        assert x.dtype == torch.float32 and x.is_contiguous() and x.dim() == 2
        out = torch.empty(x.shape[0], dtype=torch.int64)
        self.lib.argmax_rows(x.data_ptr(), out.data_ptr(), x.shape[0], x.shape[1])
        return out.tolist()

    def paged_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               block_tables: torch.Tensor, context_lens: torch.Tensor, block_size: int,
                               scale: float) -> torch.Tensor:
        """q [B, heads, d], one query token per row; caches [slots, kv_heads, d]; block_tables
        [B, max_blocks] (row b's sequence) and context_lens [B] (keys row b sees) as int64.
        Returns [B, heads, d]."""
        B, H, d = q.shape
        kv_heads = k_cache.shape[1]
        assert q.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous()
        assert block_tables.dtype == context_lens.dtype == torch.int64 and block_tables.is_contiguous()
        out = torch.empty_like(q)
        self.lib.paged_attention(
            q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
            block_tables.data_ptr(), block_tables.shape[1],
            context_lens.data_ptr(), B, kv_heads, H // kv_heads, d, block_size,
            float(scale), out.data_ptr(), self._bf16(q))
        return out

    @staticmethod
    def layer_weights(*per_layer: list[torch.Tensor | None]) -> tuple:
        """For layers_in_one_call: each list of per-layer tensors (norm 1, qkv, o, norm 2, gate_up,
        down, then the panels of qkv, o, gate_up and down, or None where a product has none) as a
        C array of their addresses. The tensors must outlive the arrays."""
        for tensors in per_layer:
            assert all(t is None or t.is_contiguous() for t in tensors)
        return tuple((ctypes.c_void_p * len(ts))(*[None if t is None else t.data_ptr() for t in ts])
                     for ts in per_layer)

    def layers_in_one_call(self, x: torch.Tensor, weights: tuple, inter: int, cos: torch.Tensor, sin: torch.Tensor,
                           positions: torch.Tensor, slots: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor,
                           heads: int, block_size: int, scale: float, eps: float, few: int) -> torch.Tensor:
        """Every layer of a step in one call (x [T, hidden], the residual stream, is updated in
        place); returns the last layer's MLP output [T, hidden]. `weights` from layer_weights;
        above `few` rows a product with panels goes through packed_linear; the caches [layers,
        slots, kv_heads, d]; the rest as rope_store and paged_attention take them. MemoryError
        where the call's buffers (about 19 KB a row in fp32) could not be allocated."""
        T, hidden = x.shape
        layers, _, kv_heads, d = k_cache.shape
        assert x.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous()
        assert x.dtype == k_cache.dtype == cos.dtype and len(weights) == 10 and len(weights[0]) == layers
        assert positions.dtype == slots.dtype == block_tables.dtype == context_lens.dtype == torch.int64
        delta = torch.empty_like(x)
        failed = self.lib.layers_in_one_call(
            x.data_ptr(), delta.data_ptr(), T, hidden, inter, layers, *weights, few, cos.data_ptr(), sin.data_ptr(),
            positions.data_ptr(), slots.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), k_cache[0].numel(),
            block_tables.data_ptr(), block_tables.shape[1], context_lens.data_ptr(), heads, kv_heads, d,
            block_size, float(scale), float(eps), self._bf16(x))
        if failed:
            raise MemoryError(f"a step of {T} tokens: no memory for its layers' buffers")
        return delta


@functools.cache
def _library_key(path: str) -> str:
    """The source, the path's flags and this CPU, hashed: read once per process, not on every load()."""
    flags = " ".join(PATHS[path][1])
    return hashlib.sha256(SOURCE.read_bytes() + f"\n{path} {flags}\n".encode() + cpu_id().encode()).hexdigest()[:16]


def for_device(device: torch.device, dtype: torch.dtype) -> CpuKernels | None:
    """The kernels where a runner on this device and dtype can use them (CPU, fp32 or bf16)."""
    if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
        return None
    return load()


def load(path: str | None = None) -> CpuKernels | None:
    """The compiled kernels for this machine, or None (with one log line saying why): the path
    BATCHING_LAB_KERNELS asks for (chosen_path), or `path` (which must be one this CPU can run)."""
    path = path or chosen_path()
    if path is None:
        return None
    if missing_features(path):
        raise ValueError(f"kernel path {path}: this CPU lacks {', '.join(missing_features(path))}")
    key = _library_key(path)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        target = cache_root() / "kernels" / f"cpu_kernels-{path}-{key}.so"
        kernels = None
        try:
            if not target.exists():
                _build(target, PATHS[path][1])
            kernels = CpuKernels(ctypes.CDLL(str(target)))
            if kernels.path != path:
                raise RuntimeError(f"built as the {path} path, the library says it is {kernels.path}'s")
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or exc
            log.warning("CPU kernels unavailable, using PyTorch ops instead: %s", detail)
            kernels = None
        _loaded[key] = kernels
        return kernels
