"""`python -m engine run`: one workload through the engine, with a progress bar and a summary table."""
from __future__ import annotations

import sys
from dataclasses import asdict

from ..arrivals import build_requests
from ..build import build_engine, size_kv_pool
from ..config import EngineConfig
from ..metrics import SLO, summarize, write_run
from ..request import Request
from ..workload import PromptMaker, read_jsonl, write_jsonl


def run_command(args, policy, spec) -> int:
    from tqdm import tqdm

    config = size_kv_pool(EngineConfig(model=args.model, device=args.device, dtype=args.dtype,
                                       kv_pool_tokens=args.kv_pool_tokens, seed=args.seed), policy)
    model = None
    if not args.cost_model:
        from ..model import load_model
        print(f"loading {config.model} ...", file=sys.stderr)
        model = load_model(config.model, config.device, config.dtype)
    engine = build_engine(config, policy, model)
    tokenizer = engine.tokenizer

    if args.workload:
        requests, errors = read_jsonl(args.workload, tokenizer)
        if not requests and not errors:
            raise ValueError(f"workload {args.workload} is empty")
    else:
        requests, errors = build_requests(spec, PromptMaker(tokenizer) if tokenizer else None), []
    for line_no, rid, err in errors:
        print(f"rejected {err}", file=sys.stderr)
        engine.reject(Request(id=rid, prompt_token_ids=[], max_new_tokens=0), err)
    allowed = {t for t in args.allowed_tenants.split(",") if t}
    for r in requests:
        if allowed and r.tenant not in allowed:
            engine.reject(r, f"unknown tenant {r.tenant!r} (allowed: {', '.join(sorted(allowed))})")
            continue
        try:
            engine.submit(r)
        except ValueError as exc:
            print(f"rejected {r.id}: {exc}", file=sys.stderr)

    total = sum(r.max_new_tokens for r in engine.pending)
    with tqdm(total=total, unit="tok", desc="generating", file=sys.stderr) as bar:
        def on_step(rec):
            bar.n = sum(len(r.output_token_ids) for r in engine.requests.values())
            bar.refresh()
        engine.run(on_step=on_step)

    reqs = list(engine.requests.values())
    summary = summarize(reqs, engine.steps, SLO(policy.ttft_slo_s, policy.tpot_slo_s))
    summary.update(config=asdict(config),
                   policy=policy.to_dict(), device=engine.executor.device, dtype=engine.executor.dtype)
    write_run(args.out, reqs, engine.steps, summary)
    if not args.workload:
        write_jsonl(f"{args.out}/workload.jsonl", requests)
    print_summary(summary)
    for r in reqs:
        if r.error:
            print(f"  {r.id}: {r.status.value}: {r.error}", file=sys.stderr)
    print(f"wrote {args.out}/requests.csv, steps.csv, summary.json")
    return 0


def print_summary(s: dict) -> None:
    print(f"\nrequests {s['requests']}  finished {s['finished']}  rejected {s['rejected']}  "
          f"failed {s['failed']}  preemptions {s['preemptions']}  steps {s['steps']}")
    print(f"duration {s['duration_s']:.2f} s   output throughput {s['output_throughput_tok_s']:.1f} tok/s   "
          f"goodput {s['goodput_req_s']:.2f} req/s")
    print(f"{'metric':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p95':>10}{'p99':>10}")
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s"):
        d = s[name]
        print(f"{name[:-2] + ' (ms)':<10}" + "".join(f"{d[k] * 1000:>10.1f}" for k in ("mean", "p50", "p90", "p95", "p99")))
