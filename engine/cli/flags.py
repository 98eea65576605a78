"""CLI flags generated from the knobs (engine.knobs), shared by `run`, `bench` and `serve`.

Every SchedulerPolicy and WorkloadSpec field is a flag spelled like the field (--max-num-seqs),
with its default, range check and help text. Only the length ranges read two numbers at once.
"""
from __future__ import annotations

import argparse

from ..core.config import SchedulerPolicy
from ..core.knobs import Knob, knobs_of
from ..runs.workload import LENGTH_RANGES, WorkloadSpec

# Flags that set two fields at once: --prompt-len LO HI sets prompt_lo and prompt_hi.
RANGE_FLAGS = {f"--{what}-len": pair for what, pair in LENGTH_RANGES.items()}
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


def add_knob_flags(p: argparse.ArgumentParser, cls, only=None) -> None:
    """A flag for every knob of `cls` (SchedulerPolicy or WorkloadSpec), or for those in `only`."""
    knobs = knobs_of(cls)
    for name, k in knobs.items():
        if only is not None and name not in only:
            continue
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
    """The policy the flags ask for; the scheduler checks it, once, as the engine is built."""
    return SchedulerPolicy(**knob_values(args, SchedulerPolicy))


def spec_from(args) -> WorkloadSpec:
    return WorkloadSpec(**knob_values(args, WorkloadSpec)).validate()


def policy_flags(policy: SchedulerPolicy) -> list[str]:
    """The policy as `engine serve` (or `run`) flags, each knob's own: policy_from reads them back."""
    out = []
    for name, k in knobs_of(SchedulerPolicy).items():
        value = getattr(policy, name)
        if k.kind == "bool":
            out.append(k.cli_flag if value else "--no-" + k.cli_flag[2:])
        else:
            out += [k.cli_flag, str(value)]
    return out


def add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2", help="smollm2 (bundled), tiny, or a Llama-family dir / hub id")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", help="auto, fp32 or bf16")


def add_simulate_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--simulate", action="store_true",
                   help="simulate: the same scheduler on a virtual clock, step times from a profile "
                        "(token ids are stand-ins)")
    p.add_argument("--profile", metavar="P",
                   help="with --simulate: a profile file from `python -m engine calibrate`, a roofline "
                        "model DEVICE:MODEL (e.g. h100-sxm:llama-3.1-8b), or hand-set; default: this "
                        "machine's calibrated profile")
