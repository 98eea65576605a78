"""`python -m engine validate-sim`: the simulator against the real engine, workload by workload.

Each validation workload (engine/sim/validate_sim.py) runs on the real model and on the simulator
with the same requests (the real engine --repeats times, each metric the median); the table gives the relative error of p50/p95 TTFT, p50/p95 TPOT,
output throughput and makespan. Exit status 0 when every error is within --tolerance, 1 when not.

With a calibrated profile of SmolLM2 on the CPU, a second table checks the roofline model of
this CPU (engine/sim/roofline.py) against the calibrated step times, shape by shape.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

from ..sim.roofline import CPU_DEVICE, roofline_profile
from ..sim.simulate import resolve_profile
from ..sim.validate_sim import (CASES, REPEATS, TOLERANCE, error_table, gap_table, roofline_gap, spread_table,
                            validate, within, within_noise, worst)
from .flags import add_model_flags


def add_validate_sim_parser(sub) -> None:
    p = sub.add_parser("validate-sim", help="the simulator against the real engine on workloads not used for fitting")
    p.add_argument("--profile", metavar="P",
                   help="the simulator's profile: a calibrated profile file or a roofline model DEVICE:MODEL; "
                        "default: this machine's calibrated profile of --model")
    p.add_argument("--tolerance", type=_fraction, default=TOLERANCE,
                   help=f"the largest relative error that passes (default {TOLERANCE:g}, that is {TOLERANCE * 100:g} percent)")
    p.add_argument("--repeats", type=int, default=REPEATS,
                   help=f"real runs of each workload, the median of each metric taken (1-20, default {REPEATS})")
    p.add_argument("--calibrate", action="store_true",
                   help="calibrate this machine first (about two minutes) and validate against that fresh "
                        "profile, which is also saved: a shared machine's speed drifts by 10%% and more "
                        "over hours, and a profile measured minutes before the real runs sees the machine "
                        "they see")
    p.add_argument("--retime", action="store_true",
                   help="time a few reference steps again before each round of real runs and scale the "
                        "simulator's step times by how much faster or slower the machine is now than when "
                        "it was calibrated: for a profile measured hours ago (off by default: a few seconds "
                        "of timing can fall in a slow or fast spell that the real runs do not share)")
    add_model_flags(p)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 10:
        raise argparse.ArgumentTypeError(f"tolerance {text} is not allowed (a number > 0 and < 10, e.g. 0.1 for 10%)")
    return value


def validate_sim_command(args) -> int:
    from ..model.model import load_model
    if not 1 <= args.repeats <= 20:
        raise ValueError(f"--repeats {args.repeats} is not allowed (1 to 20)")
    if args.calibrate and args.profile:
        raise ValueError("--calibrate measures this machine's profile: give it or --profile, not both")
    if not args.calibrate:      # no profile: say so before loading
        profile = resolve_profile(args.profile, args.model, args.dtype, args.device)
    print(f"loading {args.model} ...", file=sys.stderr)
    model = load_model(args.model, args.device, args.dtype)
    if args.calibrate:
        from ..sim.calibrate import calibrate
        from ..sim.profile import save_profile
        save_profile(calibrate(model, progress=lambda f, text: print(f"  calibrating: {text}", file=sys.stderr)))
        profile = resolve_profile(None, args.model, args.dtype, args.device)
    print(f"simulator: {profile.label}", file=sys.stderr)

    def report(result: dict) -> None:
        real, sim = result["real"], result["sim"]
        rate = (f"{result['rate']:g} req/s, {result['load']:.0%} of its capacity here" if result["load"]
                else "all at once" if not result["rate"] else f"{result['rate']:g} req/s")
        print(f"  {result['case']} ({rate}): real (median of {result['real_runs']}) {real['duration_s']:.2f} s, "
              f"{real['steps']} steps, "
              f"{real['preemptions']} preemptions; simulated {sim['duration_s']:.2f} s, {sim['steps']} steps, "
              f"{sim['preemptions']} preemptions", file=sys.stderr)

    load = os.getloadavg()[0]
    results = validate(model, profile, CASES, progress=report, repeats=args.repeats, retime=args.retime)
    factors = results[0].get("speed_factors") if results else None
    if factors:
        print(f"the machine's speed now: reference steps take x{statistics.median(factors):.3f} their "
              f"calibrated time (median of the rounds: {', '.join(f'x{f:.3f}' for f in factors)}); the "
              f"simulator's step times are scaled by it")
    print(error_table(results, args.tolerance))
    if factors:
        name, label, err = worst(results, "errors_as_stored")
        ok, n = within(results, args.tolerance, "errors_as_stored")
        print(f"with the profile's step times as stored (not scaled): {ok} of {n} within {args.tolerance:.0%}; "
              f"worst {label} of '{name}', {err:+.1%}")
    if args.repeats > 1:
        print(f"\nThe real engine against itself: (largest - smallest) / median of its {args.repeats} runs "
              f"of each workload. Where the real runs spread wider than the tolerance, a miss says as much about "
              f"the machine as about the simulator:")
        print(spread_table(results))
        ok, n = within_noise(results, args.tolerance)
        print(f"{ok} of {n} errors are within {args.tolerance:.0%} or within the real engine's own spread "
              f"on that metric")
    load, cores = max(load, os.getloadavg()[0]), os.cpu_count()
    print(f"machine load while validating: {load:.1f} runnable tasks on {cores} cores"
          + (" (other programs were running: the real runs are slower and noisier than on an idle machine)"
             if load > cores else ""))
    if profile.calibrated and args.model == "smollm2" and str(model.device) == CPU_DEVICE:
        roofline = roofline_profile(f"{CPU_DEVICE}:smollm2-135m", profile.dtype)
        print(f"\nThe {roofline.label} against the calibrated profile (a model, not a measurement):")
        print(gap_table(roofline_gap(profile.step_model, roofline)))
    ok, n = within(results, args.tolerance)
    return 0 if ok == n else 1
