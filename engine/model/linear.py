"""A linear layer (y = x @ W^T) that picks the fastest way to multiply on its device.

Nearly all of a step's arithmetic is in these products, so how they run sets the engine's
speed. On CPU, measured on a 2-core AMD EPYC (fp32 / bf16 GFLOP/s at M rows, 1536x576 weights):

    M rows               1        8        64       2048
    torch F.linear       6 / 10   34 / 73  101/258  192/327
    oneDNN, packed W     12 / 22  98 /155  194/360  218/419

`torch.ops.mkldnn._linear_pointwise` is the kernel torch.compile itself uses for a CPU linear
layer: the weight is re-laid out once ("packed") into oneDNN's blocked format, so every call
streams it in the order the kernel wants. For up to FEW_ROWS rows (decode at small batches)
the hand-written cpu_kernels.few_rows_linear is faster still: it reads the weight once, in plain
streams, and for more than two rows goes over each small block of it again from the cache.
Past eight rows oneDNN's blocked kernel wins on the wider weights (`tools/bench_linear_rows.py`
measures where on this machine).
Elsewhere (CUDA, or a torch without oneDNN) it is plain F.linear. The model's own weight
tensors are used as they are; the packed copy is oneDNN's.

oneDNN multiplies bf16 natively only where the CPU has the instructions for it (AVX-512 BF16,
AMX, or AVX-NE-CONVERT); elsewhere it refuses to pack a bf16 weight, and torch's own bf16
product is emulated (2-3 GFLOP/s on an AVX2-only 2-core EPYC, against 110-150 in fp32). There
the packed copy is fp32 (the weights widened once, exactly) and a bf16 input is widened, multiplied
and rounded back: what a native bf16 GEMM does too (it accumulates in fp32). It is detected,
not assumed: `native_bf16()` asks oneDNN.

oneDNN builds a kernel for each row count it meets and keeps it (up to 1,024, then it evicts
and rebuilds). A step's rows are its token count, which takes hundreds of values under
continuous batching, so a long run kept allocating: four layers' shapes at 600 row counts left
glibc 460 MB more in use and, as kernels were evicted and rebuilt, 960 MB free but fragmented
(the same sweep padded: 135 MB and 22 MB). Rows are therefore padded up to one of a few sizes
(padded_rows: exact up to 16, then 8 sizes per doubling, at most 12.5% extra rows; 4.5% in a
continuous-batching trace), as vLLM pads a batch to the sizes it captured CUDA graphs for.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def onednn_available(device: torch.device, dtype: torch.dtype) -> bool:
    return (device.type == "cpu" and dtype in (torch.float32, torch.bfloat16)
            and torch.backends.mkldnn.is_available())


def native_bf16() -> bool:
    """Does oneDNN multiply bf16 natively on this CPU (else Linear widens bf16 to fp32)?"""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def stack_rows(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """One [sum of rows, in] matrix holding several weights that share an input (q, k, v).

    The parameters are re-pointed at row slices of the stacked matrix, so the model still
    owns one copy of its weights and its own forward keeps working; calling this again on
    the same parameters finds them already stacked and returns the same matrix."""
    first = params[0]
    rows = sum(p.shape[0] for p in params)
    adjacent = all(p.is_contiguous() and p.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
                   for p in params)
    if adjacent:
        offsets = [p.storage_offset() for p in params]
        adjacent = all(offsets[i + 1] == offsets[i] + params[i].numel() for i in range(len(params) - 1))
    if adjacent:
        return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (rows, first.shape[1]))
    stacked = torch.cat([p.data for p in params])
    row = 0
    for p in params:
        p.data = stacked[row:row + p.shape[0]]
        row += p.shape[0]
    return stacked


FEW_ROWS = 8             # up to this many rows the hand-written kernel multiplies
EXACT_ROWS = 16          # up to this many rows (decode batches) are multiplied as they are
SIZES_PER_DOUBLING = 8


def padded_rows(rows: int) -> int:
    """`rows` rounded up to one of SIZES_PER_DOUBLING sizes between each power of two above
    EXACT_ROWS (17-32 in steps of 2, 33-64 in steps of 4, ...)."""
    if rows <= EXACT_ROWS:
        return rows
    step = max(1, (1 << (rows - 1).bit_length()) // (2 * SIZES_PER_DOUBLING))
    return -(-rows // step) * step


class Linear:
    """y = x @ W^T for one weight matrix W [out, in]; call it on x [rows, in]."""

    def __init__(self, weight: torch.Tensor, kernels=None, pack: bool = False):
        self.weight = weight                  # the model's own tensor, used as it is
        self.kernels = kernels                # cpu_kernels.CpuKernels or None
        # bf16 on a CPU without native bf16 products: oneDNN multiplies an fp32 copy instead
        self.widen = pack and weight.dtype == torch.bfloat16 and not native_bf16()
        # oneDNN's own copy of the weight, in its blocked layout
        self.packed = None
        if pack:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.float() if self.widen else weight, None)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernels is not None and x.shape[0] <= FEW_ROWS:
            return self.kernels.few_rows_linear(x.contiguous(), self.weight)
        if self.packed is not None:
            rows = x.shape[0]
            padded = padded_rows(rows)
            if padded != rows:
                x = F.pad(x, (0, 0, 0, padded - rows))
            y = torch.ops.mkldnn._linear_pointwise(x.float() if self.widen else x, self.packed, None,
                                                   "none", [], "")[:rows]
            return y.to(self.weight.dtype) if self.widen else y
        return F.linear(x, self.weight)
