"""Two runs side by side: a before/after table of headline numbers, and a few plain sentences
that say what changed, what it did, and what to try next. No Streamlit.

The headline dicts are frame_metrics.headline's. The suggestions are a handful of explicit
rules (SUGGESTIONS below), each reading the later run's numbers and settings.
"""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Sequence

import numpy as np
import pandas as pd

from analysis.style import is_empty, num
from analysis.tables import Tables
from engine.core.config import SchedulerPolicy
from engine.core.knobs import changes
from engine.runs.workload import WorkloadSpec

# headline key -> (label, unit, scale to the unit, which way is better: "lower", "higher" or None
# for a count that depends on how long each run went)
ROWS = {
    "ttft_p50_s": ("TTFT p50", "s", 1.0, "lower"),
    "ttft_p95_s": ("TTFT p95", "s", 1.0, "lower"),
    "tpot_p50_s": ("TPOT p50", "ms", 1000.0, "lower"),
    "tpot_p95_s": ("TPOT p95", "ms", 1000.0, "lower"),
    "throughput_tok_s": ("Throughput", "tok/s", 1.0, "higher"),
    "goodput_req_s": ("Goodput", "req/s", 1.0, "higher"),
    "waiting_now": ("Waiting at the end", "requests", 1.0, "lower"),
    "finished": ("Finished", "requests", 1.0, None),
    "duration_s": ("Duration", "s", 1.0, None),
}
SAME_WITHIN = 0.02       # a change under 2% of the earlier value reads "same"
QUEUE_GROWTH = 2.0       # the queue "grows" when its mean over the last third of the steps
                         # beats the first third's by more than this many requests
LONG_PROMPT_TOKENS = 256  # a median prompt this long makes prefill the thing to work on


def verdict(before: float, after: float, better: str | None) -> str:
    """"better", "worse" or "same" for a metric whose good direction is `better`; "—" when
    there is no direction or a value is missing."""
    if better is None or math.isnan(before) or math.isnan(after):
        return "—"
    if abs(after - before) <= SAME_WITHIN * abs(before):
        return "same"
    return "better" if (after < before) == (better == "lower") else "worse"


def before_after(headline_a: dict, headline_b: dict,
                 names: tuple[str, str] = ("before", "after")) -> pd.DataFrame:
    """The headline numbers of two runs side by side, in display units: metric, unit, the two
    values, change (after − before), change % and the verdict in words."""
    rows = []
    for key, (label, unit, scale, better) in ROWS.items():
        a = float(headline_a.get(key, math.nan)) * scale
        b = float(headline_b.get(key, math.nan)) * scale
        pct = (b - a) / abs(a) * 100 if a and not math.isnan(a) else math.nan
        rows.append((label, unit, a, b, b - a, pct, verdict(a, b, better)))
    return pd.DataFrame(rows, columns=["metric", "unit", names[0], names[1], "change", "change %",
                                       "verdict"])


def changes_between(policy_a: SchedulerPolicy, policy_b: SchedulerPolicy,
                    workload_a: WorkloadSpec | None = None,
                    workload_b: WorkloadSpec | None = None) -> list[str]:
    """What differs between two runs' settings, in words: ['max_num_seqs 8→16', 'rate 4.0→6.0']."""
    found = policy_a.diff(policy_b)
    if workload_a is not None and workload_b is not None:
        found += changes(asdict(workload_a), asdict(workload_b))
    return found


def queue_trend(steps: pd.DataFrame | None) -> tuple[float, float]:
    """Mean waiting requests over the first and the last third of the steps."""
    if is_empty(steps, "waiting") or len(steps) < 3:
        return math.nan, math.nan
    waiting = num(steps, "waiting")
    third = len(waiting) // 3
    return float(np.nanmean(waiting[:third])), float(np.nanmean(waiting[-third:]))


def _effects(table: pd.DataFrame) -> list[str]:
    """A sentence for every metric the table marks better or worse (a change over SAME_WITHIN),
    the largest change first, whichever way it went."""
    moved = table[table["verdict"].isin(["better", "worse"])]
    moved = moved.loc[moved["change %"].abs().sort_values(ascending=False, kind="stable").index]
    return [f"{metric} went from {a:.3g} to {b:.3g} {unit} ({word}, {pct:+.0f}%)."
            for metric, unit, a, b, pct, word in zip(moved["metric"], moved["unit"], moved["before"],
                                                      moved["after"], moved["change %"], moved["verdict"])]


def _counts(headline_a: dict, headline_b: dict, names: tuple[str, str]) -> str:
    """How many finished requests each side's numbers come from: the table's own counts."""
    a, b = headline_a.get("finished", math.nan), headline_b.get("finished", math.nan)
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in (a, b)):
        return ""
    return f"The numbers cover {int(a):,} finished requests in the {names[0]} and {int(b):,} in {names[1]}."


def _suggest(after: dict, policy: SchedulerPolicy | None, tables: Tables | None) -> str:
    """The next experiment: the first rule that applies."""
    first, last = queue_trend(tables.steps if tables is not None else None)
    if not math.isnan(first) and last - first > QUEUE_GROWTH:
        slots = f" (now {policy.max_num_seqs})" if policy is not None else ""
        return (f"The queue kept growing (about {first:.0f} waiting early on, {last:.0f} at the end): "
                "requests arrive faster than the engine finishes them. Next: lower the arrival "
                f"rate, or raise max_num_seqs{slots} if the KV cache has room.")
    if policy is None:
        return "Next: change one knob at a time, and compare again."
    ttft, tpot = after.get("ttft_p95_s", math.nan), after.get("tpot_p95_s", math.nan)
    prompts = (num(tables.requests, "prompt_tokens") if tables is not None
               and not is_empty(tables.requests, "prompt_tokens") else np.zeros(0))
    prompt_p50 = float(np.nanmedian(prompts)) if len(prompts) and not np.isnan(prompts).all() else 0.0
    if ttft > policy.ttft_slo_s and prompt_p50 >= LONG_PROMPT_TOKENS:
        if not policy.enable_chunked_prefill:
            return (f"TTFT p95 ({ttft:.2f} s) is over its {policy.ttft_slo_s:g} s target and prompts "
                    f"are long (median {prompt_p50:.0f} tokens). Next: turn on chunked prefill.")
        return (f"TTFT p95 ({ttft:.2f} s) is over its {policy.ttft_slo_s:g} s target with long prompts "
                f"(median {prompt_p50:.0f} tokens). Next: raise the token budget "
                f"(now {policy.max_num_batched_tokens}) so more prompt fits in each step.")
    if ttft > policy.ttft_slo_s:
        return (f"TTFT p95 ({ttft:.2f} s) is over its {policy.ttft_slo_s:g} s target. Next: try the "
                f"sjf admission order (now {policy.order}), or more slots "
                f"(max_num_seqs, now {policy.max_num_seqs}).")
    if tpot > policy.tpot_slo_s:
        return (f"TPOT p95 ({tpot * 1000:.0f} ms) is over its {policy.tpot_slo_s * 1000:g} ms target: "
                f"each step carries too much. Next: lower max_num_seqs (now {policy.max_num_seqs}) "
                f"or the token budget (now {policy.max_num_batched_tokens}).")
    if math.isnan(ttft):
        return "No request has finished yet: let the run go on a little longer before comparing."
    return ("Both latency targets are met. Next: raise the arrival rate step by step until p95 "
            "crosses a target; that is this machine's limit for this workload.")


def run_summary(headline_a: dict, headline_b: dict, changed: Sequence[str] = (),
                policy: SchedulerPolicy | None = None, tables: Tables | None = None,
                names: tuple[str, str] = ("earlier run", "this run")) -> list[str]:
    """Plain sentences about two runs: what changed between them (`changed`, e.g. from
    changes_between), every headline number that moved by more than SAME_WITHIN, better and worse,
    largest first (the table's verdicts), how many requests each side counts, and the next experiment.

    policy and tables are the later run's: its knobs and SLO targets, and its steps (for the
    queue's trend) and requests (for prompt lengths)."""
    said = ["You changed " + ", ".join(changed) + "." if changed else
            "Nothing changed between the two runs' settings, so differences are run-to-run noise."]
    effects = _effects(before_after(headline_a, headline_b))
    said += effects or [f"No headline number moved by more than {SAME_WITHIN:.0%}."]
    counted = _counts(headline_a, headline_b, names)
    if counted:
        said.append(counted)
    said.append(_suggest(headline_b, policy, tables))
    return said
