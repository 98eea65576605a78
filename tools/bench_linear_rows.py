"""Which route multiplies fastest at each row count on this machine: `python -m tools.bench_linear_rows`.

For SmolLM2-135M's four layer shapes, in fp32 and bf16, one product y = x @ W^T at M rows, timed
through cpu_kernels.few_rows_linear, through cpu_kernels.packed_linear (its panels of the weight:
float32, or bf16 pairs where the CPU has bf16 dot products) and through Linear's packed oneDNN path
(the best of five rounds), with the largest difference between their answers. As in a decode
step, where each layer's weights come from memory, every call takes the next of enough copies of
the weight to outgrow the cache (a weight used again and again from the cache favours the route
that does less arithmetic, not the one that reads less). engine/model/linear.py sends a row (or
up to FEW_ROWS where the other route reads more bytes than the weight) to the few-rows kernel and
more to packed_linear where the weight has panels (else to oneDNN: linear.onednn_multiplies); this
is how to check those choices on another CPU.
"""
from __future__ import annotations

import argparse
import time

import engine  # noqa: F401  (first, as the app: the engine's OpenMP wait, before torch loads)
import torch

from engine.model import cpu_kernels
from engine.model.linear import FEW_ROWS, FEW_ROWS_BESIDE_PANELS, Linear

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}


STREAM_BYTES = 96 * 2 ** 20      # copies of a weight, together past any last-level cache here


def best_us(fns: list, calls: int, rounds: int = 5) -> float:
    """Microseconds a call, best of `rounds` of `calls` calls going round `fns` (one per copy)."""
    for fn in fns[:10]:
        fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(calls):
            fns[i % len(fns)]()
        times.append((time.perf_counter() - start) / calls)
    return min(times) * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 12, 16, 32, 64, 256])
    args = p.parse_args()
    kernels = cpu_kernels.load()
    if kernels is None:
        print("no hand-written kernels here (no gcc, or BATCHING_LAB_KERNELS=0): nothing to compare")
        return 0
    beside = FEW_ROWS_BESIDE_PANELS
    print(f"Where a weight has panels of its own bytes Linear sends up to {beside[torch.float32]} row(s) to the "
          f"few-rows kernel in float32 and {beside[torch.bfloat16]} in bfloat16, else up to {FEW_ROWS}; each call "
          f"reads its own copy of the weight, from memory")
    print(f"{'dtype':<9}{'weight':<9}{'rows':>5}{'few-rows us':>13}{'packed us':>11}{'oneDNN us':>11}"
          f"{'fastest':>10}{'max diff':>10}")
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(0)
        for name, (n, k) in SHAPES.items():
            w = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
            copies = -(-STREAM_BYTES // w.nbytes)
            ws = [w.clone() for _ in range(copies)]
            onednns, panels = [Linear(c, None, pack=True) for c in ws], [kernels.pack_weight(c) for c in ws]
            for m in args.rows:
                x = torch.randn(m, k, generator=g).to(dtype)
                routes = {"few-rows": [lambda c=c: kernels.few_rows_linear(x, c) for c in ws],
                          "packed": [lambda p=p: kernels.packed_linear(x, p, n) for p in panels],
                          "oneDNN": [lambda o=o: o(x) for o in onednns]}
                answers = [fns[0]().float() for fns in routes.values()]
                diff = max((a - answers[-1]).abs().max().item() for a in answers)
                us = {route: best_us(fns, calls=copies) for route, fns in routes.items()}
                print(f"{str(dtype).removeprefix('torch.'):<9}{name:<9}{m:>5}{us['few-rows']:>13.1f}"
                      f"{us['packed']:>11.1f}{us['oneDNN']:>11.1f}{min(us, key=us.get):>10}{diff:>10.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
