"""Command line: `python -m engine run ...` and `python -m engine bench ...`.

run: serve a workload file (or one generated from flags) and write requests.csv, steps.csv
and summary.json. Flags are spelled like the policy knobs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .config import MODES, ORDERS, EngineConfig, SchedulerPolicy
from .workload import LENGTH_KINDS, LengthDist, WorkloadSpec


def add_policy_flags(p: argparse.ArgumentParser) -> None:
    d = SchedulerPolicy()
    p.add_argument("--mode", choices=MODES, default=d.mode)
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--max-wait-ms", type=float, default=d.max_wait_ms)
    p.add_argument("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens)
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=d.enable_chunked_prefill)
    p.add_argument("--long-prefill-token-threshold", type=int, default=d.long_prefill_token_threshold)
    p.add_argument("--order", choices=ORDERS, default=d.order)
    p.add_argument("--kv-capacity-tokens", type=int, default=d.kv_capacity_tokens)
    p.add_argument("--max-waiting", type=int, default=d.max_waiting)
    p.add_argument("--ttft-slo-s", type=float, default=d.ttft_slo_s)
    p.add_argument("--tpot-slo-s", type=float, default=d.tpot_slo_s)


def policy_from(args) -> SchedulerPolicy:
    return SchedulerPolicy(
        mode=args.mode, max_num_seqs=args.max_num_seqs, max_wait_ms=args.max_wait_ms,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enable_chunked_prefill=args.enable_chunked_prefill,
        long_prefill_token_threshold=args.long_prefill_token_threshold, order=args.order,
        kv_capacity_tokens=args.kv_capacity_tokens, max_waiting=args.max_waiting,
        ttft_slo_s=args.ttft_slo_s, tpot_slo_s=args.tpot_slo_s).validate()


def add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2", help="smollm2 (bundled), tiny, or a Llama-family dir / hub id")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", help="auto, fp32 or bf16")


def add_workload_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-requests", type=int, default=32)
    p.add_argument("--rate", type=float, default=4.0, help="arrivals per second; 0 = all at once")
    p.add_argument("--burstiness", type=float, default=1.0, help="1 = Poisson, >1 = bursty")
    p.add_argument("--prompt-dist", choices=LENGTH_KINDS, default="uniform")
    p.add_argument("--prompt-len", type=int, nargs=2, default=[32, 128], metavar=("LO", "HI"))
    p.add_argument("--output-dist", choices=LENGTH_KINDS, default="uniform")
    p.add_argument("--output-len", type=int, nargs=2, default=[16, 64], metavar=("LO", "HI"))
    p.add_argument("--tenants", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)


def spec_from(args) -> WorkloadSpec:
    return WorkloadSpec(num_requests=args.num_requests, rate=args.rate, burstiness=args.burstiness,
                        **LengthDist(args.prompt_dist, *args.prompt_len).as_fields("prompt"),
                        **LengthDist(args.output_dist, *args.output_len).as_fields("output"),
                        tenants=args.tenants, seed=args.seed).validate()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine", description="Batching Lab inference engine")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="serve a workload and write requests.csv, steps.csv, summary.json")
    run.add_argument("--workload", help="JSONL file, one request a line; omit to generate one from the flags")
    run.add_argument("--out", required=True, help="output folder")
    run.add_argument("--cost-model", action="store_true", help="use the cost model (virtual clock) instead of the real model")
    run.add_argument("--allowed-tenants", default="", help="comma-separated tenant names; others are rejected")
    run.add_argument("--kv-pool-tokens", type=int, default=EngineConfig().kv_pool_tokens)
    add_policy_flags(run)
    add_model_flags(run)
    add_workload_flags(run)
    bench = sub.add_parser("bench", help="this engine vs transformers generate and its continuous batching")
    from .bench import add_bench_flags
    add_bench_flags(bench)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            from .cli_run import run_command
            return run_command(args, policy_from(args), spec_from(args))
        from .bench import bench_command
        return bench_command(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
