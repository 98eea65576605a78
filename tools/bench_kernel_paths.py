"""Two vector paths of the C kernels, side by side: `python -m tools.bench_kernel_paths`.

Each step shape of `engine bench --profile` (decode at batch 1, 8, 32 and 64 with 200 tokens of
context; prefill steps of 1 and 8 prompts of 256 tokens; the last 512-token chunk of a 2,048-token
prompt), and a whole 2,048-token prompt in four chunks of 512 (its four steps timed together),
runs on a runner of each path in turn, in one process: A B, then B A, and so on, so that a
neighbour's burst falls on both alike. It prints each path's median ms, the median of the pairs'
ratios (B over A) with their range, and the load average before and after (the machine is named
beside the figures). BATCHING_LAB_KERNELS is set only while each runner is built: a runner keeps
the kernels it was built with, and each path has its own panels of the weights.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import engine  # noqa: F401  (first, as the app: the engine's OpenMP wait, before torch loads)
import torch

from engine.model import kernel_paths
from engine.model.model import load_model
from engine.model.runner import ModelRunner, SeqInput
from engine.model.step_profile import step_shapes
from engine.sim.profile import machine_name

BLOCK = 16
PROMPT, CHUNK = 2048, 512


def shapes() -> list[tuple[str, list[list[SeqInput]]]]:
    """(name, the steps it times): the profile's shapes, one step each, then the chunked prompt."""
    out = [(name, [seqs]) for name, seqs in step_shapes(BLOCK)]
    used = max(b for _, seqs in step_shapes(BLOCK) for s in seqs for b in s.block_table) + 1
    table = list(range(used, used + PROMPT // BLOCK))
    prompt = [200 + (j * 37) % 4000 for j in range(PROMPT)]
    out.append((f"prompt {PROMPT:,} in {CHUNK}s", [[SeqInput("chunked", prompt[at:at + CHUNK], at, table,
                                                              at + CHUNK == PROMPT)]
                                                   for at in range(0, PROMPT, CHUNK)]))
    return out


def runner_on(model, path: str, blocks: int) -> ModelRunner:
    before = os.environ.get(kernel_paths.ENV)
    os.environ[kernel_paths.ENV] = path
    try:
        runner = ModelRunner(model, blocks, BLOCK)
    finally:
        if before is None:
            os.environ.pop(kernel_paths.ENV)
        else:
            os.environ[kernel_paths.ENV] = before
    assert runner.kernels is not None and runner.kernels.path == path, f"the {path} path did not load"
    return runner


def timed_ms(runner: ModelRunner, steps: list[list[SeqInput]]) -> float:
    t = time.perf_counter()
    for seqs in steps:
        runner.run(seqs)
    return (time.perf_counter() - t) * 1000


def main() -> int:
    runnable = [p for p in kernel_paths.PATHS if not kernel_paths.missing_features(p)]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paths", default=f"avx2,{runnable[0]}",
                   help=f"A,B: the two paths (this CPU runs {', '.join(runnable)})")
    p.add_argument("--dtype", default="fp32,bf16")
    p.add_argument("--pairs", type=int, default=7, help="A/B pairs timed per shape")
    p.add_argument("--only", default="", help="shapes whose name contains this (e.g. 'prefill')")
    args = p.parse_args()
    a, b = args.paths.split(",")
    for path in (a, b):
        if path not in runnable:
            p.error(f"--paths: {path!r} is not one this CPU runs ({', '.join(runnable)})")
    chosen = [(n, s) for n, s in shapes() if args.only in n]
    blocks = max(blk for _, steps in shapes() for seqs in steps for s in seqs for blk in s.block_table) + 1
    print(f"{machine_name('cpu')}; torch threads {torch.get_num_threads()}; load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    for dtype in args.dtype.split(","):
        model = load_model("smollm2", "cpu", dtype)
        runners = {path: runner_on(model, path, blocks) for path in (a, b)}
        print(f"\n{dtype}: ms (median of {args.pairs}) on each path, and {b} over {a}, pair by pair")
        print(f"{'shape':<22}{a + ' ms':>16}{b + ' ms':>16}{'ratio':>8}{'range':>14}")
        for name, steps in chosen:
            for r in runners.values():
                timed_ms(r, steps)                               # warm-up
            times = {a: [], b: []}
            for i in range(args.pairs):
                for path in ((a, b) if i % 2 == 0 else (b, a)):
                    times[path].append(timed_ms(runners[path], steps))
            ratios = [tb / ta for ta, tb in zip(times[a], times[b])]
            print(f"{name:<22}{statistics.median(times[a]):>16.1f}{statistics.median(times[b]):>16.1f}"
                  f"{statistics.median(ratios):>8.2f}{min(ratios):>7.2f}-{max(ratios):.2f}")
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
