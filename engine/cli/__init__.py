"""Command line: `python -m engine run ...`, `python -m engine bench ...`, `python -m engine serve ...`.

run: serve a workload file (or one generated from flags) and write requests.csv, steps.csv
and summary.json; with --simulate, on the simulator. validate-sim: the simulator against the
real engine. calibrate: time this machine's steps and save the simulator's profile. bench:
this engine against transformers, side by side.

serve: one engine behind an OpenAI-compatible HTTP server (engine/server). The policy and
workload flags are generated from the knobs (engine/cli/flags.py).
"""
from __future__ import annotations

import argparse
import sys

from ..core.config import EngineConfig, SchedulerPolicy
from ..core.knobs import knobs_of
from ..runs.workload import WorkloadSpec
from .bench import add_bench_flags, bench_command
from .calibrate import add_calibrate_parser, calibrate_command
from .flags import add_knob_flag, add_knob_flags, add_model_flags, add_simulate_flags, policy_from, spec_from
from .run import run_command
from .serve import add_serve_parser, serve_command
from .validate_sim import add_validate_sim_parser, validate_sim_command
from .. import settings

def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engine", description="Batching Lab inference engine")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="serve a workload and write requests.csv, steps.csv, summary.json")
    run.add_argument("--workload", help="JSONL file, one request a line; omit to generate one from the flags")
    run.add_argument("--out", required=True, help="output folder")
    run.add_argument("--cost-model", action="store_true", help="use the hand-set cost model (virtual clock) instead of the real model")
    add_simulate_flags(run)
    run.add_argument("--allowed-tenants", default="", help="comma-separated tenant names; others are rejected")
    add_knob_flag(run, knobs_of(EngineConfig)["kv_pool_tokens"])
    add_knob_flags(run, SchedulerPolicy)
    add_model_flags(run)
    add_knob_flags(run, WorkloadSpec)
    add_bench_flags(sub.add_parser("bench", help="this engine vs transformers generate and its continuous batching"))
    add_serve_parser(sub)
    add_calibrate_parser(sub)
    add_validate_sim_parser(sub)
    return ap


def main(argv=None) -> int:
    """Run a command; every error ends as one line on stderr, never a traceback
    (BATCHING_LAB_DEBUG=1 shows it). Status 2: bad input or settings; 1: anything else; `run` exits
    with 3 when it wrote its files but no request finished."""
    args = parser().parse_args(argv)
    try:
        if args.cmd == "run":
            return run_command(args, policy_from(args), spec_from(args))
        if args.cmd == "serve":
            return serve_command(args)
        if args.cmd == "calibrate":
            return calibrate_command(args)
        if args.cmd == "validate-sim":
            return validate_sim_command(args)
        return bench_command(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if settings.debug():
            raise
        expected = isinstance(exc, (ValueError, OSError))
        text = " ".join(str(exc).split()) or "no details"
        print(f"error: {text}" if expected else f"error: {type(exc).__name__}: {text}", file=sys.stderr)
        return 2 if expected else 1
