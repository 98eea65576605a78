"""Command line: `python -m engine run ...` and `python -m engine bench ...`.

run: serve a workload file (or one generated from flags) and write requests.csv, steps.csv
and summary.json. bench: this engine against transformers, side by side.

The policy and workload flags are generated from the knobs (engine.knobs): every
SchedulerPolicy and WorkloadSpec field is a flag spelled like the field (--max-num-seqs),
with its default, range check and help text. Only the length ranges read two numbers at once.
"""
from __future__ import annotations

import argparse
import os
import sys

from ..config import EngineConfig, SchedulerPolicy
from ..knobs import Knob, knobs_of
from ..workload import WorkloadSpec
from .bench import add_bench_flags, bench_command
from .run import run_command

# Flags that set two fields at once: --prompt-len LO HI sets prompt_lo and prompt_hi.
RANGE_FLAGS = {"--prompt-len": ("prompt_lo", "prompt_hi"), "--output-len": ("output_lo", "output_hi")}
RANGE_FLAG_OF = {lo: flag for flag, (lo, hi) in RANGE_FLAGS.items()}
IN_A_RANGE = {name for pair in RANGE_FLAGS.values() for name in pair}

TYPES = {"int": int, "float": float}


def add_knob_flag(p: argparse.ArgumentParser, k: Knob) -> None:
    help_text = k.help.replace("%", "%%")
    if k.kind == "bool":
        p.add_argument(k.cli_flag, dest=k.name, action=argparse.BooleanOptionalAction, default=k.default,
                       help=help_text)
    elif k.kind == "choice":
        p.add_argument(k.cli_flag, dest=k.name, choices=k.choices, default=k.default, help=help_text)
    else:
        p.add_argument(k.cli_flag, dest=k.name, type=TYPES[k.kind], default=k.default,
                       help=f"{help_text} ({k.range_text()})")


def add_knob_flags(p: argparse.ArgumentParser, cls) -> None:
    """A flag for every knob of `cls` (SchedulerPolicy or WorkloadSpec)."""
    knobs = knobs_of(cls)
    for name, k in knobs.items():
        if name in RANGE_FLAG_OF:
            flag = RANGE_FLAG_OF[name]
            hi = knobs[RANGE_FLAGS[flag][1]]
            p.add_argument(flag, dest=_dest(flag), type=int, nargs=2, metavar=("LO", "HI"),
                           default=[k.default, hi.default], help=f"{k.help} {hi.help}".replace("%", "%%"))
        elif name not in IN_A_RANGE:
            add_knob_flag(p, k)


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def knob_values(args, cls) -> dict:
    """The values of `cls`'s knobs from parsed flags."""
    knobs = knobs_of(cls)
    values = {name: getattr(args, name) for name in knobs if name not in IN_A_RANGE}
    for flag, (lo, hi) in RANGE_FLAGS.items():
        if lo in knobs:
            values[lo], values[hi] = getattr(args, _dest(flag))
    return values


def policy_from(args) -> SchedulerPolicy:
    return SchedulerPolicy(**knob_values(args, SchedulerPolicy)).validate()


def spec_from(args) -> WorkloadSpec:
    return WorkloadSpec(**knob_values(args, WorkloadSpec)).validate()


def add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2", help="smollm2 (bundled), tiny, or a Llama-family dir / hub id")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", help="auto, fp32 or bf16")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engine", description="Batching Lab inference engine")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="serve a workload and write requests.csv, steps.csv, summary.json")
    run.add_argument("--workload", help="JSONL file, one request a line; omit to generate one from the flags")
    run.add_argument("--out", required=True, help="output folder")
    run.add_argument("--cost-model", action="store_true", help="use the cost model (virtual clock) instead of the real model")
    run.add_argument("--allowed-tenants", default="", help="comma-separated tenant names; others are rejected")
    add_knob_flag(run, knobs_of(EngineConfig)["kv_pool_tokens"])
    add_knob_flags(run, SchedulerPolicy)
    add_model_flags(run)
    add_knob_flags(run, WorkloadSpec)
    add_bench_flags(sub.add_parser("bench", help="this engine vs transformers generate and its continuous batching"))
    return ap


def main(argv=None) -> int:
    """Run a command; every error ends as one line on stderr, never a traceback
    (BATCHING_LAB_DEBUG=1 shows it). Status 2: bad input or settings; 1: anything else."""
    args = parser().parse_args(argv)
    try:
        if args.cmd == "run":
            return run_command(args, policy_from(args), spec_from(args))
        return bench_command(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("BATCHING_LAB_DEBUG") == "1":
            raise
        expected = isinstance(exc, (ValueError, OSError))
        text = " ".join(str(exc).split()) or "no details"
        print(f"error: {text}" if expected else f"error: {type(exc).__name__}: {text}", file=sys.stderr)
        return 2 if expected else 1
