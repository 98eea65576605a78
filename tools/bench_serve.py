"""What serving over HTTP costs: the bench workload through `engine serve`, against the same
requests run in-process.

The workload is `python -m engine bench`'s (all requests at t=0, greedy, outputs forced to
their length). In-process, the engine runs them directly. Over HTTP, a server process runs
the same policy and 64 concurrent streaming clients send the same prompt token ids to
/v1/completions. Reported: output tokens/s of each and their ratio (goal >= 90%), and p50 TTFT
in-process, through HTTP as the clients see it, and as the server's engine saw it in the same
run (the difference is what HTTP, JSON and the event loop add; goal < 10 ms).

    .venv/bin/python tools/bench_serve.py --model smollm2
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx2 as httpx

from engine.arrivals import build_requests
from engine.cli.bench import run_engine
from engine.model import load_model
from engine.workload import LengthDist, PromptMaker, WorkloadSpec


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--num-requests", type=int, default=64)
    p.add_argument("--prompt-len", type=int, nargs=2, default=[16, 256])
    p.add_argument("--output-len", type=int, nargs=2, default=[8, 128])
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args, kv_tokens: int, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "engine.server.cli", "--model", args.model, "--device", args.device,
           "--dtype", args.dtype, "--port", str(port), "--max-num-seqs", str(args.max_num_seqs),
           "--max-num-batched-tokens", str(args.max_num_batched_tokens),
           "--kv-capacity-tokens", str(kv_tokens), "--kv-pool-tokens", str(kv_tokens),
           "--max-inflight-per-tenant", str(args.concurrency)]
    server = subprocess.Popen(cmd, env={**os.environ, "BATCHING_LAB_INSTRUCTOR_TOKEN": "bench"})
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.5)
        if server.poll() is not None:
            break
    server.kill()
    raise RuntimeError("the server did not start")


async def one_stream(client, url, model, prompt_ids, max_tokens) -> dict:
    body = {"model": model, "prompt": prompt_ids, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    t_send, t_first, tokens, rid = time.perf_counter(), None, 0, ""
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if t_first is None and chunk["choices"]:
                t_first, rid = time.perf_counter(), chunk["id"]
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return {"id": rid, "send": t_send, "first": t_first, "end": time.perf_counter(), "tokens": tokens}


async def through_http(url, model, requests, concurrency) -> list[dict]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await one_stream(client, url, model, requests[0].prompt_token_ids[:32], 4)      # warm-up
        gate = asyncio.Semaphore(concurrency)

        async def limited(r):
            async with gate:
                return await one_stream(client, url, model, r.prompt_token_ids, r.max_new_tokens)
        return await asyncio.gather(*(limited(r) for r in requests))


def main() -> int:
    args = parse_args()
    model = load_model(args.model, args.device, args.dtype)
    spec = WorkloadSpec(num_requests=args.num_requests, rate=0, seed=args.seed,
                        **LengthDist("uniform", *args.prompt_len).as_fields("prompt"),
                        **LengthDist("uniform", *args.output_len).as_fields("output"))
    fresh = lambda: build_requests(spec, PromptMaker(model.tokenizer))
    requests = fresh()
    total_out = sum(r.max_new_tokens for r in requests)
    kv_tokens = sum(r.prompt_tokens + r.max_new_tokens for r in requests) + 1024
    print(f"workload: {len(requests)} requests, {total_out} output tokens; {model.name} on {model.device}, "
          f"{str(model.dtype).replace('torch.', '')}")

    elapsed, _, engine = run_engine(model, requests, args)
    local_tps = total_out / elapsed
    local_ttft = statistics.median(r.first_token_s - r.arrival_s for r in requests)
    print(f"in-process: {elapsed:.2f} s, {local_tps:.1f} output tok/s, p50 TTFT {local_ttft * 1000:.1f} ms")
    del engine

    port = free_port()
    server = start_server(args, kv_tokens, port)
    url = f"http://127.0.0.1:{port}"
    try:
        served = asyncio.run(through_http(url, args.model, fresh(), args.concurrency))
        rows = httpx.get(url + f"/lab/requests?limit={len(requests)}", timeout=30).json()["requests"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    span = max(s["end"] for s in served) - min(s["send"] for s in served)
    http_tps = sum(s["tokens"] for s in served) / span
    http_ttft = statistics.median(s["first"] - s["send"] for s in served)
    engine_ttft = statistics.median(r["ttft_s"] for r in rows)
    inside = {r["id"]: r["ttft_s"] for r in rows}
    added = statistics.median(s["first"] - s["send"] - inside[s["id"]] for s in served)
    print(f"through HTTP, {args.concurrency} streaming clients: {span:.2f} s, {http_tps:.1f} output tok/s, "
          f"p50 TTFT {http_ttft * 1000:.1f} ms as the clients saw it, {engine_ttft * 1000:.1f} ms inside the server")
    print(f"\nHTTP / in-process output tok/s: {http_tps / local_tps * 100:.1f}% (goal >= 90%)")
    print(f"TTFT added by HTTP, per request (client's TTFT - the server engine's), p50: {added * 1000:.1f} ms "
          f"(goal < 10 ms); p50 TTFT {(http_ttft - local_ttft) * 1000:+.1f} ms against the in-process run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
