"""Where the hand-written few-rows kernel beats oneDNN on this machine: `python -m tools.bench_linear_rows`.

For SmolLM2-135M's four layer shapes, in fp32 and bf16, one product y = x @ W^T at M rows, timed
through cpu_kernels.few_rows_linear and through Linear's packed oneDNN path (the best of five
rounds of 200 calls each), with the largest difference between their answers. engine/model/linear.py
sends up to FEW_ROWS rows to the kernel; this is how to check that choice on another CPU.
"""
from __future__ import annotations

import argparse
import time

import engine  # noqa: F401  (first, as the app: the engine's OpenMP wait, before torch loads)
import torch

from engine.model import cpu_kernels
from engine.model.linear import FEW_ROWS, Linear

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}


def best_us(fn, calls: int = 200, rounds: int = 5) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return min(times) * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = p.parse_args()
    kernels = cpu_kernels.load()
    if kernels is None:
        print("no hand-written kernels here (no gcc, or BATCHING_LAB_KERNELS=0): nothing to compare")
        return 0
    print(f"Linear sends up to FEW_ROWS = {FEW_ROWS} rows to the kernel")
    print(f"{'dtype':<9}{'weight':<9}{'rows':>5}{'kernel us':>11}{'oneDNN us':>11}{'oneDNN/kernel':>15}{'max diff':>10}")
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(0)
        for name, (n, k) in SHAPES.items():
            w = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
            packed = Linear(w, None, pack=True)
            for m in args.rows:
                x = torch.randn(m, k, generator=g).to(dtype)
                diff = (kernels.few_rows_linear(x, w).float() - packed(x).float()).abs().max().item()
                a, b = best_us(lambda: kernels.few_rows_linear(x, w)), best_us(lambda: packed(x))
                print(f"{str(dtype).removeprefix('torch.'):<9}{name:<9}{m:>5}{a:>11.1f}{b:>11.1f}{b / a:>15.2f}{diff:>10.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
