"""Which route multiplies fastest at each row count on this machine: `python -m tools.bench_linear_rows`.

For SmolLM2-135M's four layer shapes, in fp32 and bf16, one product y = x @ W^T at M rows, timed
through cpu_kernels.few_rows_linear, through cpu_kernels.packed_linear (its panels of the weight:
float32, or bf16 pairs where the CPU has bf16 dot products) and through Linear's packed oneDNN path
(the best of five rounds of calls), with the largest difference between their answers.
engine/model/linear.py sends up to FEW_ROWS rows to the few-rows kernel and more to packed_linear
where the weight has panels (else to oneDNN: linear.onednn_multiplies); this is how to check those
choices on another CPU.
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
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 12, 16, 32, 64, 256])
    args = p.parse_args()
    kernels = cpu_kernels.load()
    if kernels is None:
        print("no hand-written kernels here (no gcc, or BATCHING_LAB_KERNELS=0): nothing to compare")
        return 0
    print(f"Linear sends up to FEW_ROWS = {FEW_ROWS} rows to the few-rows kernel")
    print(f"{'dtype':<9}{'weight':<9}{'rows':>5}{'few-rows us':>13}{'packed us':>11}{'oneDNN us':>11}"
          f"{'fastest':>10}{'max diff':>10}")
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(0)
        for name, (n, k) in SHAPES.items():
            w = (torch.randn(n, k, generator=g) * 0.05).to(dtype)
            onednn, panels = Linear(w, None, pack=True), kernels.pack_weight(w)
            for m in args.rows:
                x = torch.randn(m, k, generator=g).to(dtype)
                routes = {"few-rows": lambda: kernels.few_rows_linear(x, w),
                          "packed": lambda: kernels.packed_linear(x, panels, n),
                          "oneDNN": lambda: onednn(x)}
                answers = [route().float() for route in routes.values()]
                diff = max((a - answers[-1]).abs().max().item() for a in answers)
                calls = max(10, 200 * 16 // max(16, m))
                us = {route: best_us(fn, calls) for route, fn in routes.items()}
                print(f"{str(dtype).removeprefix('torch.'):<9}{name:<9}{m:>5}{us['few-rows']:>13.1f}"
                      f"{us['packed']:>11.1f}{us['oneDNN']:>11.1f}{min(us, key=us.get):>10}{diff:>10.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
