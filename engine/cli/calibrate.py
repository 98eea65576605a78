"""`python -m engine calibrate`: measure this machine's step times and save the fitted profile.

It loads the model, times the grid of step shapes (engine/sim/calibrate.py) within the time budget,
fits the step model, saves it where `run --simulate` and the Playground find it
(engine/sim/profile.py), and prints the fitted parameters and the error on held-out steps.
"""
from __future__ import annotations

import argparse
import sys

from .flags import add_model_flags


def add_calibrate_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("calibrate", help="measure this machine's step times and fit the simulator's step model")
    add_model_flags(p)
    p.add_argument("--max-num-seqs", type=int, default=64,
                   help="largest decode batch to time (1-4096; the Playground's slider ends at 64)")
    p.add_argument("--budget-s", type=float, default=100.0,
                   help="seconds to spend timing, model loading aside (at least 10)")
    p.add_argument("--quick", action="store_true",
                   help="a rough estimate in seconds: fewer step shapes, one or two timed passes")
    return p


def calibrate_command(args) -> int:
    from ..sim.calibrate import calibrate
    from ..model.model import load_model
    from ..sim.profile import save_profile
    if not 1 <= args.max_num_seqs <= 4096:
        raise ValueError(f"--max-num-seqs {args.max_num_seqs} is not allowed (1 to 4096)")
    if not args.budget_s >= 10:
        raise ValueError(f"--budget-s {args.budget_s} is not allowed (at least 10 seconds)")
    print(f"loading {args.model} ...", file=sys.stderr)
    model = load_model(args.model, args.device, args.dtype)
    profile = calibrate(model, args.max_num_seqs, args.budget_s, args.quick,
                        progress=lambda f, text: print(f"  {text}", file=sys.stderr))
    profile = save_profile(profile)
    print(report(profile))
    return 0


def report(profile) -> str:
    m, fit = profile.step_model, profile.fit
    edges = [0, *m.knots, None]
    segments = ", ".join(f"{a}-{b if b is not None else ''} rows: {ms:.3f}"
                         for a, b, ms in zip(edges, edges[1:], m.token_ms))
    forms = "; ".join(f"knots {c['knots'] or 'none'}: {100 * c['heldout_mean_error']:.1f}% mean, "
                      f"{100 * c['heldout_max_error']:.1f}% max" for c in fit["candidates"])
    return "\n".join([
        f"profile: {profile.describe()}",
        f"  measured {len(profile.measurements)} step shapes in {profile.measured_s:.0f} s",
        f"  step_ms = {m.fixed_ms:.2f} + body(tokens) + {m.sample_ms:.3f}·samples "
        f"+ {m.decode_read_ms:.3f}·decode_context/1000 + {m.prefill_pair_ms:.3f}·prefill_pairs/1000"
        f" + {m.prefill_step_ms:.3f}·[a prefill chunk in the step]",
        f"  body, ms per token: {segments}",
        *([f"  of the fixed term, {fit['loop_ms']:.2f} ms is the engine loop: the mean time between one "
           "step and the next in a real run"] if "loop_ms" in fit else []),
        f"  held-out error ({fit['heldout_shapes']} shapes not fitted on) by form: {forms}",
        f"  kept form, held-out median error: {100 * fit['heldout_median_error']:.1f}%",
        f"  kept: knots {fit['knots'] or 'none'}",
        f"  machine load while measuring: {fit['load_average']:.1f} runnable tasks on {fit['cores']} cores"
        + (" (other programs were running: these times are slower than an idle machine's; "
           "measure again when it is idle)"
           if fit["load_average"] > fit["cores"] else ""),
        f"  saved to {profile.path}",
    ])
