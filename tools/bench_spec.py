"""Speculative decoding on the real engine: output tokens a second with n-gram drafts off and on,
side by side, at batch 1 and at a large batch.
`python -m tools.bench_spec [--dtype fp32 --rounds 3 --batch 64]`

The workload is prompts that ask the model to copy a passage (PromptMaker.repeat_passage), where
the n-gram lookup guesses well. Each round runs it with speculative_method off, then ngram, then
off, then ngram... (A B A B, so the machine's slow spells fall on both), each run on a fresh
engine:
  - batch 1: the prompts one at a time (max_num_seqs 1), where a decode step is bound by reading
    the weights, and checking 4 more tokens in it costs little;
  - a large batch: the same prompts, `--batch` of them at once, where a step's products are bound
    by the CPU's arithmetic, and every drafted token verified costs its share of it.
Output tok/s = output tokens / the run's wall time (prefills included, as vLLM's benchmark counts
it); decode tok/s = the tokens made by the steps that ran no prompt / those steps' time (the part
speculation changes: a large batch's prompts take most of a short run's time). Prints every run,
the acceptance, then each batch's median ratios ngram/off over the rounds, the machine's CPU and
its load average. The greedy tokens of the two are compared too. A measurement, not a test.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.metrics import summarize
from engine.core.request import Request
from engine.model.model import load_model
from engine.runs.build import build_engine
from engine.runs.workload import PromptMaker


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def one_run(model, prompts: list[list[int]], method: str, seqs: int, max_new: int, k: int) -> dict:
    policy = SchedulerPolicy(speculative_method=method, num_speculative_tokens=k, max_num_seqs=seqs,
                             max_num_batched_tokens=max(512, seqs * (k + 1)),
                             kv_capacity_tokens=16384)
    engine = build_engine(EngineConfig(model=model.name, kv_pool_tokens=16384), policy, model)
    for i, p in enumerate(prompts):
        engine.submit(Request(f"r{i}", list(p), max_new))
    t0 = time.perf_counter()
    engine.run()
    wall = time.perf_counter() - t0
    s = summarize(engine.requests.values(), engine.steps)
    decode = [st for st in engine.steps if st.prefill_tokens == 0]        # every member decoding
    made = sum(len(st.members) + sum(a for _, _, a in st.drafts) for st in decode)
    return {"tok_s": s["output_tokens"] / wall, "wall_s": wall, "steps": len(engine.steps),
            "decode_tok_s": made / sum(st.duration_s for st in decode),
            "accepted": s["spec_decode_num_accepted_tokens"], "drafted": s["spec_decode_num_draft_tokens"],
            "tokens": [engine.requests[f"r{i}"].output_token_ids for i in range(len(prompts))]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--rounds", type=int, default=3, help="A B pairs per batch size")
    ap.add_argument("--prompts", type=int, default=6, help="passages to copy at batch 1")
    ap.add_argument("--batch", type=int, default=64, help="the large batch: requests running at once")
    ap.add_argument("--max-new", type=int, default=96, help="output tokens per request")
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    args = ap.parse_args()

    model = load_model(args.model, "cpu", args.dtype)
    maker = PromptMaker(model.tokenizer)
    cases = [("batch 1", [maker.repeat_passage(i) for i in range(args.prompts)], 1),
             (f"batch {args.batch}", [maker.repeat_passage(i) for i in range(args.batch)], args.batch)]
    print(f"{args.model} {args.dtype} on {cpu_name()} ({os.cpu_count()} CPUs); {args.max_new} output tokens "
          f"a request, up to {args.k} drafts; load average before: {os.getloadavg()[0]:.2f}")
    ratios = {}
    for name, prompts, seqs in cases:
        runs = {"off": [], "ngram": []}
        for r in range(args.rounds):
            for method in ("off", "ngram"):
                res = one_run(model, prompts, method, seqs, args.max_new, args.k)
                runs[method].append(res)
                acc = f", {res['accepted']}/{res['drafted']} drafts accepted" if res["drafted"] else ""
                print(f"  {name} round {r + 1} {method:5s}: {res['tok_s']:7.1f} output tok/s, "
                      f"{res['decode_tok_s']:7.1f} decode tok/s ({res['wall_s']:.1f} s, {res['steps']} steps{acc})",
                      flush=True)
        same = all(a["tokens"] == b["tokens"] for a, b in zip(runs["off"], runs["ngram"]))
        pair = [b["tok_s"] / a["tok_s"] for a, b in zip(runs["off"], runs["ngram"])]
        dec = [b["decode_tok_s"] / a["decode_tok_s"] for a, b in zip(runs["off"], runs["ngram"])]
        ratios[name] = statistics.median(pair), statistics.median(dec)
        print(f"{name}: ngram / off = {ratios[name][0]:.2f}x output tok/s (median of "
              f"{', '.join(f'{x:.2f}' for x in pair)}), {ratios[name][1]:.2f}x decode tok/s (median of "
              f"{', '.join(f'{x:.2f}' for x in dec)}); greedy tokens {'identical' if same else 'DIFFERENT'}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    (one, _), (big, big_dec) = ratios["batch 1"], ratios[f"batch {args.batch}"]
    print(f"At batch 1 speculation {'sped output up' if one > 1 else 'slowed output down'}: "
          f"{one:.2f}x output tok/s ({'meets' if one >= 1.3 else 'misses'} the 1.3x bar). At batch {args.batch} "
          f"its decode steps made tokens {big_dec:.2f}x as fast ({'a cost' if big_dec < 1 else 'no cost'}), "
          f"and the whole run's output tok/s was {big:.2f}x.")


if __name__ == "__main__":
    main()
