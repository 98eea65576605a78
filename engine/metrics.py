"""Metrics with the definitions vLLM's benchmarks use (and the UI prints).

  TTFT  = first token time - arrival time
  TPOT  = (E2E - TTFT) / (output_tokens - 1), only for requests with more than one token
  ITL   = every gap between consecutive tokens of a request, pooled over requests
  E2E   = last token time - arrival time
  queue = first scheduled time - arrival time
  output throughput = output tokens / duration
  goodput = requests that met every SLO that is set (TTFT, TPOT, E2E) / duration
Percentiles are reported as mean, p50, p90, p95, p99.
"""
from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import asdict, dataclass

from .request import Request, Status

PERCENTILES = (50, 90, 95, 99)

REQUEST_COLUMNS = ["id", "tenant", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s",
                   "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s", "queue_s",
                   "preemptions", "status", "error", "output_token_ids", "output_text"]
STEP_COLUMNS = ["step", "t_start_s", "t_end_s", "waiting", "running", "prefill_tokens",
                "decode_tokens", "kv_used_blocks", "kv_total_blocks", "members", "preempted", "error"]


def ttft(r: Request) -> float | None:
    return None if r.first_token_s is None else r.first_token_s - r.arrival_s


def e2e(r: Request) -> float | None:
    return None if r.status is not Status.FINISHED else r.finish_s - r.arrival_s


def tpot(r: Request) -> float | None:
    n = len(r.output_token_ids)
    if r.status is not Status.FINISHED or n < 2:
        return None
    return (e2e(r) - ttft(r)) / (n - 1)


def queue_time(r: Request) -> float | None:
    return None if r.first_scheduled_s is None else r.first_scheduled_s - r.arrival_s


def itls(requests) -> list[float]:
    """Every inter-token gap of every request, pooled."""
    return [b - a for r in requests for a, b in zip(r.token_times, r.token_times[1:])]


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), without numpy."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def distribution(values: list[float]) -> dict[str, float]:
    vals = [v for v in values if v is not None]
    out = {"mean": sum(vals) / len(vals) if vals else math.nan}
    out.update({f"p{q}": percentile(vals, q) for q in PERCENTILES})
    return out


@dataclass(slots=True)
class SLO:
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met(self, r: Request) -> bool:
        if r.status is not Status.FINISHED:
            return False
        checks = ((self.ttft_s, ttft(r)), (self.tpot_s, tpot(r)), (self.e2e_s, e2e(r)))
        return all(limit is None or value is None or value <= limit for limit, value in checks)


def duration(requests, steps) -> float:
    """The run's span: first arrival to the end of the last step."""
    arrivals = [r.arrival_s for r in requests]
    if not steps or not arrivals:
        return 0.0
    return max(steps[-1].t_end_s - min(arrivals), 1e-9)


def summarize(requests, steps, slo: SLO | None = None) -> dict:
    requests = list(requests)
    slo = slo or SLO()
    finished = [r for r in requests if r.status is Status.FINISHED]
    span = duration(requests, steps)
    out_tokens = sum(len(r.output_token_ids) for r in requests)
    busy = sum(s.t_end_s - s.t_start_s for s in steps)
    return {
        "requests": len(requests),
        "finished": len(finished),
        "rejected": sum(r.status is Status.REJECTED for r in requests),
        "failed": sum(r.status is Status.FAILED for r in requests),
        "preemptions": sum(r.preemptions for r in requests),
        "steps": len(steps),
        "duration_s": span,
        "busy_s": busy,
        "output_tokens": out_tokens,
        "prompt_tokens": sum(r.prompt_tokens for r in finished),
        "output_throughput_tok_s": out_tokens / span if span else 0.0,
        "request_throughput_req_s": len(finished) / span if span else 0.0,
        "goodput_req_s": sum(slo.met(r) for r in finished) / span if span else 0.0,
        "slo": asdict(slo),
        "ttft_s": distribution([ttft(r) for r in finished]),
        "tpot_s": distribution([tpot(r) for r in finished]),
        "itl_s": distribution(itls(finished)),
        "e2e_s": distribution([e2e(r) for r in finished]),
        "queue_s": distribution([queue_time(r) for r in finished]),
        "step_ms": distribution([(s.t_end_s - s.t_start_s) * 1000 for s in steps]),
    }


def request_row(r: Request) -> dict:
    return {
        "id": r.id, "tenant": r.tenant, "arrival_s": r.arrival_s,
        "first_scheduled_s": r.first_scheduled_s, "first_token_s": r.first_token_s,
        "finish_s": r.finish_s, "prompt_tokens": r.prompt_tokens,
        "output_tokens": len(r.output_token_ids), "ttft_s": ttft(r), "tpot_s": tpot(r),
        "e2e_s": e2e(r), "queue_s": queue_time(r), "preemptions": r.preemptions,
        "status": r.status.value, "error": r.error,
        "output_token_ids": " ".join(map(str, r.output_token_ids)), "output_text": r.output_text,
    }


def step_row(s) -> dict:
    row = {k: getattr(s, k) for k in STEP_COLUMNS if k != "members"}
    row["members"] = " ".join(f"{rid}:{phase}:{n}" for rid, phase, n in s.members)
    return row


def write_run(out_dir: str, requests, steps, summary: dict) -> None:
    """requests.csv, steps.csv and summary.json, as the CLI contract specifies."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "requests.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, REQUEST_COLUMNS)
        w.writeheader()
        w.writerows(request_row(r) for r in requests)
    with open(os.path.join(out_dir, "steps.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, STEP_COLUMNS)
        w.writeheader()
        w.writerows(step_row(s) for s in steps)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
