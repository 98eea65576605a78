"""This engine beside llama.cpp's server: the same requests through both, over HTTP, on this machine.

Both serve SmolLM2 in the same dtype: `engine serve --dtype D`, and `llama-server` on the bundled
GGUF converted to D by llama-quantize (tools/llama_cpp.py finds or builds llama-server). Both get
the same knobs: slots = max_num_seqs, the step's token budget = max_num_batched_tokens (-b),
continuous batching (llama-server's default), and no reuse of earlier prompts' keys and values
(the engine's prefix caching is off by default; llama-server gets --no-cache-prompt), or with
--prompt-cache reuse in both. One client (tools/bench_serve.one_stream) sends the bench workload
(`engine bench`'s: all requests at t=0, greedy, each forced to its output length with ignore_eos)
to each in turn, after a warm-up, in alternating rounds (ours, llama.cpp, ours, ...).

Reported per server and dtype, the median over rounds with the spread [lowest-highest]:
- output tokens per second over the burst;
- TTFT p50 and TPOT p50 over its requests (client-side, from the moment a request's body was sent);
- batch-1 TTFT and TPOT: one stream alone on the idle server, on the workload's longest prompt
  (or --lone-prompt-len tokens): its prompt's prefill (as llama.cpp's prompt processing), then
  decode speed with nothing to batch.

    .venv/bin/python -m tools.bench_llamacpp                      # fp32 and bf16, 3 rounds
    .venv/bin/python -m tools.bench_llamacpp --dtype bf16 --rounds 5
    .venv/bin/python -m tools.bench_llamacpp --lone-prompt-len 1920  # a long prompt's prefill alone
"""
from __future__ import annotations

import engine  # noqa: F401  (first: the OpenMP wait `engine serve` has, before torch loads)
import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys

from engine.cli.launch import free_port, launched, stop_process
from engine.core.config import EngineConfig
from engine.model import kernel_paths
from engine.model.model import load_model
from engine.runs.arrivals import build_requests
from engine.runs.workload import LengthDist, PromptMaker, WorkloadSpec
from engine.server.service import ENGINE_NICE
from engine.sim.profile import machine_name
from tools import llama_cpp
from tools.bench_serve import http_client, one_stream, serve_flags


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", nargs="+", choices=sorted(llama_cpp.GGUF_TYPES), default=["fp32", "bf16"])
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--slots", type=int, default=16, help="max_num_seqs here, -np there")
    p.add_argument("--batch-tokens", type=int, default=2048, help="max_num_batched_tokens here, -b there")
    p.add_argument("--prompt-len", type=int, nargs=2, default=[16, 256])
    p.add_argument("--output-len", type=int, nargs=2, default=[8, 128])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--lone", type=int, default=3, help="batch-1 streams per server and round")
    p.add_argument("--lone-tokens", type=int, default=128)
    p.add_argument("--lone-prompt-len", type=int, default=0,
                   help="the lone stream's prompt in tokens (1920: a long prompt's prefill, with the lone "
                        "stream's tokens out the engine's whole context); 0: the workload's longest prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt-cache", action="store_true",
                   help="both servers keep earlier prompts' keys and values (the engine's prefix caching, "
                        "llama-server's prompt cache); by default neither does")
    args = p.parse_args()
    context = EngineConfig().max_model_len                # engine serve's context: prompt and output
    if args.lone_prompt_len and not 1 <= args.lone_prompt_len <= context - args.lone_tokens:
        p.error(f"--lone-prompt-len {args.lone_prompt_len}: allowed 1 to {context - args.lone_tokens} (the prompt "
                f"and its --lone-tokens {args.lone_tokens} fit engine serve's {context}-token context)")
    return args


# Each figure a round reports (burst_figures, lone_figures) and the digits it is printed with
DIGITS = {"tok/s": 1, "TTFT p50 (s)": 2, "TPOT p50 (ms)": 1, "batch-1 TTFT (ms)": 1, "batch-1 TPOT (ms)": 1}


def ttft_s(stream: dict) -> float:
    """One stream's TTFT, from the moment its request's body was sent (bench_serve.one_stream)."""
    return stream["first"] - stream["send"]


def tpot_s(stream: dict) -> float:
    """One stream's mean time between its output tokens, after the first."""
    return (stream["end"] - stream["first"]) / (stream["tokens"] - 1)


def burst_figures(served: list[dict]) -> dict:
    """Output tok/s over the burst, and the p50 of TTFT and TPOT over its requests."""
    t0 = min(s["send"] for s in served)
    span = max(s["end"] for s in served) - t0
    return {"tok/s": sum(s["tokens"] for s in served) / span,
            "TTFT p50 (s)": statistics.median(ttft_s(s) for s in served),
            "TPOT p50 (ms)": statistics.median(tpot_s(s) for s in served if s["tokens"] > 1) * 1000}


def lone_figures(served: list[dict]) -> dict:
    """The median TTFT and TPOT of streams sent one at a time to an idle server."""
    return {"batch-1 TTFT (ms)": statistics.median(ttft_s(s) for s in served) * 1000,
            "batch-1 TPOT (ms)": statistics.median(tpot_s(s) for s in served) * 1000}


def spread(values: list[float], digits: int) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def server_commands(server, gguf, port: int, dtype: str, args, kv_tokens: int,
                    longest_prompt: int) -> tuple[list[str], list[str]]:
    """(engine serve's flags, llama-server's command) with the same knobs. The bench repeats its
    prompts (warm-up, rounds, the lone stream) and they share the chat template's system prompt, so
    a server that keeps earlier prompts' keys and values skips work: both keep them (--prompt-cache)
    or neither does."""
    ours_args = argparse.Namespace(model="smollm2", device="cpu", dtype=dtype, max_num_seqs=args.slots,
                                   max_num_batched_tokens=args.batch_tokens, concurrency=args.num_requests)
    ours = serve_flags(ours_args, kv_tokens) + (["--enable-prefix-caching"] if args.prompt_cache else [])
    ctx = longest_prompt + max(args.output_len[1], args.lone_tokens) + 64      # a slot's context
    theirs = llama_cpp.server_command(server, gguf, port, args.slots, ctx, args.batch_tokens,
                                      prompt_cache=args.prompt_cache)
    return ours, theirs


@contextlib.contextmanager
def llama_serving(cmd: list[str], port: int):
    """llama-server on `port`, up; its URL. Stopped and reaped on the way out."""
    print("  " + " ".join(cmd))
    # at the priority engine serve gives its engine thread (nice +ENGINE_NICE), so on a busy machine
    # neither server gets more of the CPU than the other
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=lambda: os.nice(ENGINE_NICE))
    try:
        llama_cpp.wait_ready(f"http://127.0.0.1:{port}", process)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process)


def bench_dtype(dtype: str, server, tokenizer, args) -> dict:
    spec = WorkloadSpec(num_requests=args.num_requests, rate=0, seed=args.seed,
                        **LengthDist("uniform", *args.prompt_len).as_fields("prompt"),
                        **LengthDist("uniform", *args.output_len).as_fields("output"))
    prompts = PromptMaker(tokenizer)
    requests = build_requests(spec, prompts)
    if args.lone_prompt_len:
        lone_prompt = prompts.make(args.lone_prompt_len, random.Random(args.seed))
    else:                                                # the workload's longest: a prefill worth timing
        lone_prompt = max(requests, key=lambda r: r.prompt_tokens).prompt_token_ids
    longest = max(len(lone_prompt), args.prompt_len[1])
    kv_tokens = max(sum(r.prompt_tokens + r.max_new_tokens for r in requests), longest + args.lone_tokens) + 1024
    gguf = llama_cpp.gguf_for(dtype, server)
    port = free_port()
    ours_flags, llama_cmd = server_commands(server, gguf, port, dtype, args, kv_tokens, longest)
    print(f"\n{dtype}: {len(requests)} requests, {sum(r.max_new_tokens for r in requests)} output tokens, "
          f"{args.slots} slots, a step's budget {args.batch_tokens} tokens, earlier prompts' keys and values "
          f"{'kept' if args.prompt_cache else 'not kept'}; alone: a {len(lone_prompt)}-token prompt, "
          f"{args.lone_tokens} tokens out; llama.cpp serves {gguf.name}")
    token = {"BATCHING_LAB_INSTRUCTOR_TOKEN": "bench"}
    with launched(ours_flags, env=token, timeout_s=180) as ours, llama_serving(llama_cmd, port) as llama_url:
        return _rounds({"ours": ours.url, "llama.cpp": llama_url}, requests, lone_prompt, args)


def _rounds(urls: dict, requests, lone_prompt, args) -> dict:
    results = {name: {key: [] for key in DIGITS} for name in urls}

    async def session():
        # a new client for every burst and stream: both servers close a connection kept idle for 5 s
        # (uvicorn's and cpp-httplib's keep-alive), and the other server's turn is longer than that
        async def burst(url):
            async with http_client(args.num_requests) as client:
                return await asyncio.gather(*(one_stream(client, url, "smollm2", r.prompt_token_ids,
                                                         r.max_new_tokens) for r in requests))

        async def alone(url):
            async with http_client(1) as client:
                return await one_stream(client, url, "smollm2", lone_prompt, args.lone_tokens)
        for name, url in urls.items():          # warm-up: every shape seen once
            await burst(url)
        for i in range(args.rounds):
            order = list(urls) if i % 2 == 0 else list(reversed(urls))
            for name in order:
                figures = burst_figures(await burst(urls[name]))
                figures.update(lone_figures([await alone(urls[name]) for _ in range(args.lone)]))
                for key, value in figures.items():
                    results[name][key].append(value)
                print(f"  round {i + 1}, {name:9}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()),
                      flush=True)
    asyncio.run(session())
    return results


def report(dtype: str, results: dict) -> None:
    ours, theirs = results["ours"], results["llama.cpp"]
    print(f"\n{dtype}, median over {len(ours['tok/s'])} rounds [lowest-highest]:")
    cells = {key: (spread(ours[key], d), spread(theirs[key], d)) for key, d in DIGITS.items()}
    width = 2 + max(24, *(len(cell) for pair in cells.values() for cell in pair))   # a gap, whatever the figures
    print(f"  {'':20}{'engine serve':>{width}}{'llama-server':>{width}}")
    for key, (a, b) in cells.items():
        print(f"  {key:20}{a:>{width}}{b:>{width}}")

    def by_round(tops, bottoms) -> str:
        return ", ".join(f"{a / b:.2f}x" for a, b in zip(tops, bottoms))
    print(f"  output tok/s, ours / llama-server, round by round: {by_round(ours['tok/s'], theirs['tok/s'])}")
    print(f"  batch-1 TTFT (the lone prompt's prefill), llama-server / ours, round by round: "
          f"{by_round(theirs['batch-1 TTFT (ms)'], ours['batch-1 TTFT (ms)'])}")


def main() -> int:
    args = parse_args()
    server = llama_cpp.find_or_build()
    tokenizer = load_model("smollm2", "cpu", "fp32").tokenizer
    print(f"llama-server: {server}\nthis machine: {machine_name('cpu')}; this engine's C kernels: {kernel_paths.in_words()}")
    every = {dtype: bench_dtype(dtype, server, tokenizer, args) for dtype in args.dtype}
    for dtype, results in every.items():
        report(dtype, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
