"""Prefix caching on the real engine: TTFT with it off and on, side by side.
`python -m tools.bench_prefix_cache [--model smollm2 --pairs 3]`

One shared-prefix workload (requests after one of two 512-token system prompts, a short
question each, arriving at a steady rate) runs on the real model with enable_prefix_caching off,
then on, then off, then on... (A B A B, so the machine's slow spells fall on both), each run on a
fresh engine. Prints each run's TTFT p50 and p95, the prefill tokens computed and the hit rate,
then the median ratio on/off of the pairs. A measurement, not a test.
"""
from __future__ import annotations

import argparse
import statistics

from engine.runs.arrivals import build_requests
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.metrics import summarize
from engine.model.model import load_model
from engine.sim.simulate import fresh_copy
from engine.runs.workload import PromptMaker, WorkloadSpec

SPEC = WorkloadSpec(num_requests=16, rate=1.0, prompt_lo=16, prompt_hi=48, output_lo=8, output_hi=16,
                    system_prompts=2, system_prompt_tokens=512, seed=11)


def one_run(model, requests, caching: bool) -> dict:
    engine = build_engine(EngineConfig(model=model.name), SchedulerPolicy(enable_prefix_caching=caching), model)
    for r in requests:
        engine.submit(fresh_copy(r))
    engine.run()
    s = summarize(engine.requests.values(), engine.steps)
    return {"ttft_p50_s": s["ttft_s"]["p50"], "ttft_p95_s": s["ttft_s"]["p95"], "hit_rate": s["prefix_cache_hit_rate"],
            "prefill_tokens": sum(st.prefill_tokens for st in engine.steps), "finished": s["finished"],
            "tokens": [r.output_token_ids for r in engine.requests.values()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    model = load_model(args.model)
    requests = build_requests(SPEC, PromptMaker(model.tokenizer))
    print(f"{len(requests)} requests at {SPEC.rate:g}/s, prompts {min(r.prompt_tokens for r in requests)}-"
          f"{max(r.prompt_tokens for r in requests)} tokens ({SPEC.system_prompts} shared system prompts of "
          f"{SPEC.system_prompt_tokens}); model {args.model} on {model.device}")
    ratios, same = [], True
    for pair in range(args.pairs):
        off, on = one_run(model, requests, False), one_run(model, requests, True)
        same &= off["tokens"] == on["tokens"]
        ratios.append(on["ttft_p50_s"] / off["ttft_p50_s"])
        for name, r in (("off", off), ("on ", on)):
            print(f"pair {pair + 1} caching {name}: TTFT p50 {r['ttft_p50_s'] * 1000:7.1f} ms  p95 "
                  f"{r['ttft_p95_s'] * 1000:7.1f} ms  prefill tokens {r['prefill_tokens']:6,}  "
                  f"hit rate {r['hit_rate']:.2f}  finished {r['finished']}")
    print(f"TTFT p50 on/off: {', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}); "
          f"greedy tokens {'identical' if same else 'DIFFERENT'} in every pair")


if __name__ == "__main__":
    main()
