"""The files a run writes (the CLI contract in docs/ARCHITECTURE.md): requests.csv, steps.csv
and summary.json, from the rows engine.metrics defines."""
from __future__ import annotations

import csv
import json
import math
import os

from ..core.metrics import REQUEST_COLUMNS, STEP_COLUMNS, request_row, step_row


def members_text(members) -> str:
    """Members as steps.csv writes them: "r3:prefill:128 r7:decode:1"."""
    return " ".join(f"{rid}:{phase}:{n}" for rid, phase, n in members)


def step_csv_row(s) -> dict:
    """A StepRecord as a line of steps.csv."""
    return {**step_row(s), "members": members_text(s.members),
            "prefix_hits": " ".join(f"{rid}:{n}" for rid, n in s.prefix_hits),
            "drafts": " ".join(f"{rid}:{d}:{a}" for rid, d, a in s.drafts)}


def write_csv(f, rows, columns: list[str]) -> None:
    """Rows (dicts) as CSV with `columns` in order; any other keys are left out."""
    w = csv.DictWriter(f, columns, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)


def write_run(out_dir: str, requests, steps, summary: dict) -> None:
    """requests.csv, steps.csv and summary.json, as the CLI contract specifies. No text can make
    the writing fail after the run: a character UTF-8 cannot hold (a lone surrogate) is written
    as its backslash escape. summary.json is strict JSON: a number that is not one (the NaN
    percentile of a run where nothing finished) is written as null."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "requests.csv"), "w", newline="", errors="backslashreplace") as f:
        write_csv(f, (request_row(r) for r in requests), REQUEST_COLUMNS)
    with open(os.path.join(out_dir, "steps.csv"), "w", newline="", errors="backslashreplace") as f:
        write_csv(f, (step_csv_row(s) for s in steps), STEP_COLUMNS)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(_json_safe(summary), f, indent=2, default=str, allow_nan=False)


def _json_safe(value):
    """`value` with every NaN or infinite float replaced by None, at any depth."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
