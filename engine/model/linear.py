"""A linear layer (y = x @ W^T) that picks the fastest way to multiply on its device.

Nearly all of a step's arithmetic is in these products, so how they run sets the engine's
speed. On CPU there are three routes, chosen per call:

- A row in fp32 (decode at batch 1), or up to FEW_ROWS rows where the other route reads more
  bytes than the weight: cpu_kernels.few_rows_linear. With few rows the time is reading the
  weight from memory; the kernel reads it once, in plain streams, and for more than two rows
  goes over each small block of it again from the cache.
- More rows: cpu_kernels.packed_linear, on its own copy of the weight in panels (see the C
  file), in float32 (an fp32 model, or bf16 on a CPU without bf16 products) or in bf16 pairs
  where the CPU has AVX512-BF16 dot products. These products are bound by arithmetic; the kernel
  keeps a block of the output in registers so that each value it loads feeds many multiply-adds.
- bf16 on a CPU with other bf16 products (AMX, AVX-NE-CONVERT), or no C kernels at all: oneDNN
  (`torch.ops.mkldnn._linear_pointwise`, the kernel torch.compile itself uses for a CPU linear
  layer) on its own copy of the weight, re-laid out once ("packed") into its blocked format.

`tools/bench_linear_rows.py` measures the routes side by side on this machine, each call on its
own copy of the weight from memory, as in a step. On a 2-core AVX-512 EPYC, fp32, GFLOP/s at 12 /
32 / 64 / 2,048 rows (the model's four weight shapes): packed_linear 245-295 / 360-410 / 405-445 /
490-505, oneDNN 160-230 / 260-350 / 310-420 / 495-515: the same at prefill sizes, up to half as
fast again at decode sizes, where oneDNN's blocked kernel is tuned for bigger matrices than a
576-wide model's; in bf16 (bf16 pairs against oneDNN's native bf16) 415-570 / 675-780 / 770-860 /
960-995 against 245-405 / 440-635 / 525-800 / 985-1,005.
Elsewhere (CUDA, or a torch without oneDNN) it is plain F.linear. The model's own weight
tensors are used as they are; the packed copies are the kernels' own.

oneDNN multiplies bf16 natively only where the CPU has the instructions for it (AVX-512 BF16,
AMX, or AVX-NE-CONVERT); elsewhere it refuses to pack a bf16 weight, and torch's own bf16
product is emulated (2-3 GFLOP/s on an AVX2-only 2-core EPYC, against 110-150 in fp32). There
the packed copy is fp32 (the weights widened once, exactly) and a bf16 input is widened, multiplied
and rounded back: what a native bf16 GEMM does too (it accumulates in fp32). It is detected,
not assumed: `native_bf16()` asks oneDNN. Without the C kernels (no compiler) oneDNN takes the
fp32 products too.

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


def onednn_multiplies(dtype: torch.dtype, kernels) -> bool:
    """Does oneDNN take a packed Linear's products of more than a few rows (else the C kernel)?
    Without the C kernels, yes; with them, only native bf16 ones on a CPU whose bf16 products the
    kernel does not use (it does AVX512-BF16's, and widens bf16 to float32 where there are none)."""
    return kernels is None or (dtype == torch.bfloat16 and native_bf16() and not kernels.bf16_dot)


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


# Up to how many rows the few-rows kernel multiplies, by the route that takes more. Panels that
# hold the weight's own bytes (fp32, or bf16 pairs) read no more than it does, and their tiles
# keep more sums going: from 2 rows they are faster (whole decode steps of 2, 3 and 4 rows took
# 0.74, 0.64 and 0.51 of the time in bf16, 0.88, 0.80 and 0.77 in fp32). At one row bf16 pairs
# are faster too, read as one stream a thread with each next panel asked for (whole decode steps
# at batch 1: 0.94-0.97x in runs where memory was busy, 0.84x where quiet, 1.04x in one run), and
# fp32's panels slower (1.04-1.08x). oneDNN, or panels widened to fp32 (a bf16 weight's bytes twice
# over), take over from FEW_ROWS + 1.
FEW_ROWS_BESIDE_PANELS = {torch.float32: 1, torch.bfloat16: 0}
FEW_ROWS = 4
EXACT_ROWS = 16          # up to this many rows (decode batches) are multiplied as they are
SIZES_PER_DOUBLING = 8


def padded_rows(rows: int) -> int:
    """`rows` rounded up to one of SIZES_PER_DOUBLING sizes between each power of two above
    EXACT_ROWS (17-32 in steps of 2, 33-64 in steps of 4, ...)."""
    if rows <= EXACT_ROWS:
        return rows
    step = max(1, (1 << (rows - 1).bit_length()) // (2 * SIZES_PER_DOUBLING))
    return -(-rows // step) * step


def silu_times_up(gate_up: torch.Tensor, kernels=None) -> torch.Tensor:
    """The MLP's activation, silu(gate) * up, of a product's output [rows, 2n]: gate, then up."""
    if kernels is not None:
        return kernels.silu_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)                     # in place: one big temporary fewer


class Linear:
    """y = x @ W^T for one weight matrix W [out, in]; call it on x [rows, in].
    gated: W is an MLP's gate rows then its up rows, and a call returns silu(gate) * up
    [rows, out / 2]. On the C kernel's panels the activation is taken as each tile of the product
    is stored (cpu_kernels.gated_linear): the [rows, out] product is never written and read back."""

    def __init__(self, weight: torch.Tensor, kernels=None, pack: bool = False, gated: bool = False):
        self.weight = weight                  # the model's own tensor, used as it is
        self.kernels = kernels                # cpu_kernels.CpuKernels or None
        self.gated = gated
        # the C kernel's own copy of the weight, in panels (cpu_kernels.packed_linear, gated_linear)
        self.panels = (kernels.pack_weight(weight, gated) if pack and not onednn_multiplies(weight.dtype, kernels)
                       else None)
        # oneDNN's own copy of the weight, in its blocked layout (where the C kernel has none); bf16 on
        # a CPU without native bf16 products: oneDNN multiplies an fp32 copy instead ("widen")
        self.widen, self.packed = False, None
        if pack and self.panels is None:
            self.widen = weight.dtype == torch.bfloat16 and not native_bf16()
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.float() if self.widen else weight, None)
        own_bytes = self.panels is not None and (weight.dtype != torch.bfloat16 or kernels.bf16_dot)
        self.few_rows = FEW_ROWS_BESIDE_PANELS[weight.dtype] if own_bytes else FEW_ROWS   # the few-rows kernel's rows

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n = self.weight.shape[0]
        if self.kernels is not None and x.shape[0] <= self.few_rows:
            y = self.kernels.few_rows_linear(x.contiguous(), self.weight)
        elif self.panels is not None and self.gated:
            return self.kernels.gated_linear(x.contiguous(), self.panels, n)      # the activation taken
        elif self.panels is not None:
            y = self.kernels.packed_linear(x.contiguous(), self.panels, n)
        elif self.packed is not None:
            rows = x.shape[0]
            padded = padded_rows(rows)
            if padded != rows:
                x = F.pad(x, (0, 0, 0, padded - rows))
            y = torch.ops.mkldnn._linear_pointwise(x.float() if self.widen else x, self.packed, None,
                                                   "none", [], "")[:rows]
            y = y.to(self.weight.dtype) if self.widen else y
        else:
            y = F.linear(x, self.weight)
        return silu_times_up(y, self.kernels) if self.gated else y
