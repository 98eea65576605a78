"""What serving over HTTP costs: the bench workload through `engine serve`, against the same
requests run in-process, measured side by side in pairs (in-process, HTTP, in-process, HTTP...).

The workload is `python -m engine bench`'s (all requests at t=0, greedy, outputs forced to
their length). In-process, the engine runs them directly. Over HTTP, a server process runs
the same policy and 64 concurrent streaming clients send the same prompt token ids to
/v1/completions over kept-alive connections (opened before the clock starts: a load generator
holds its connections, and opening 64 at once is the client's cost, ~0.2 s of Python here).

Reported:
- output tokens/s of each, and their ratio pair by pair (goal >= 90%); both run with `engine
  serve`'s process setting (the engine's own OpenMP wait, engine/__init__.py), so the ratio is what HTTP costs: the
  server's side and, on a machine this small, the CPU its 64 clients take (printed per pair);
- the TTFT the server adds (the client's TTFT, from the moment its request had been written
  to the socket, minus the TTFT its engine recorded, per request):
  for a lone request on an idle server (goal < 10 ms), and under the 64-stream burst, where
  taking in 64 requests at once shares this machine's cores with the engine and the client;

    .venv/bin/python -m tools.bench_serve --model smollm2
"""
from __future__ import annotations

import engine  # noqa: E402,F401  (first: the OpenMP wait `engine serve` has, before torch loads)
import argparse
import asyncio
import json
import statistics
import sys
import time

import httpx2 as httpx

from engine.runs.arrivals import build_requests
from engine.cli.bench import run_engine
from engine.cli.launch import launched
from engine.model.model import load_model
from engine.runs.workload import LengthDist, PromptMaker, WorkloadSpec


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
    p.add_argument("--pairs", type=int, default=2, help="in-process/HTTP pairs to run")
    p.add_argument("--lone", type=int, default=20, help="lone requests timed on the idle server")
    return p.parse_args()


def server_stack() -> str:
    """What uvicorn picks by itself in this environment (its "auto" choices)."""
    from importlib.util import find_spec
    parser = "httptools" if find_spec("httptools") else "h11"
    return f"{parser}, {'uvloop' if find_spec('uvloop') else 'asyncio'}"


def serve_flags(args, kv_tokens: int) -> list[str]:
    """`engine serve`'s flags for the bench's policy, its KV pool and `args.concurrency` clients of one tenant."""
    return ["--model", args.model, "--device", args.device, "--dtype", args.dtype,
            "--max-num-seqs", str(args.max_num_seqs), "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            "--kv-capacity-tokens", str(kv_tokens), "--kv-pool-tokens", str(kv_tokens),
            "--max-inflight-per-tenant", str(args.concurrency), "--trusted-client", "127.0.0.1"]


async def one_stream(client, url, model, prompt_ids, max_tokens) -> dict:
    """One streaming request. "send" is when its body had been written to the socket (the HTTP
    client's trace event): 64 requests started at once leave this one client one after another,
    and that wait is the client's, not the server's."""
    body = {"model": model, "prompt": prompt_ids, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    sent: dict[str, float] = {}

    async def trace(event: str, _info) -> None:
        if event.endswith("send_request_body.complete"):
            sent["at"] = time.perf_counter()

    t_first, tokens, rid = None, 0, ""
    async with client.stream("POST", url + "/v1/completions", json=body, extensions={"trace": trace}) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if t_first is None and chunk["choices"]:
                t_first, rid = time.perf_counter(), chunk["id"]
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return {"id": rid, "send": sent["at"], "first": t_first, "end": time.perf_counter(), "tokens": tokens}


async def through_http(client, url, model, requests, concurrency) -> list[dict]:
    gate = asyncio.Semaphore(concurrency)

    async def limited(r):
        async with gate:
            return await one_stream(client, url, model, r.prompt_token_ids, r.max_new_tokens)
    return await asyncio.gather(*(limited(r) for r in requests))


async def open_connections(client, url, model, prompt_ids, n) -> None:
    """n requests at once, one token each: the client's pool then holds n open connections."""
    await asyncio.gather(*(one_stream(client, url, model, prompt_ids[:8], 1) for _ in range(n)))


def http_client(concurrency: int):
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(timeout=600, limits=limits)


def added_ms(served, rows) -> float:
    """p50 over requests of (client's TTFT - the server engine's TTFT), in ms."""
    inside = {r["id"]: r["ttft_s"] for r in rows}
    return statistics.median(s["first"] - s["send"] - inside[s["id"]] for s in served) * 1000


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
          f"{str(model.dtype).replace('torch.', '')}; {args.pairs} pairs; the server's HTTP parser and event "
          f"loop: {server_stack()}")

    async def session(url):
        get_rows = lambda n: httpx.get(url + f"/lab/requests?limit={n}", timeout=30).json()["requests"]

        async def lone_requests(client):
            """Sequential requests on the idle server: what HTTP adds when nothing else competes."""
            return [await one_stream(client, url, args.model, r.prompt_token_ids, 1)
                    for r in (requests * args.lone)[:args.lone]]

        async with http_client(args.concurrency) as client:
            await open_connections(client, url, args.model, requests[0].prompt_token_ids, args.concurrency)
            lone = await lone_requests(client)
            lone_added = added_ms(lone, get_rows(args.lone))
            pairs = []
            for i in range(args.pairs):
                elapsed, _, engine = run_engine(model, fresh(), args)
                del engine
                local_tps = total_out / elapsed
                t0, cpu0 = time.perf_counter(), time.process_time()
                served = await through_http(client, url, args.model, fresh(), args.concurrency)
                span = max(s["end"] for s in served) - t0
                client_cores = (time.process_time() - cpu0) / span
                http_tps = sum(s["tokens"] for s in served) / span
                burst_added = added_ms(served, get_rows(len(served)))
                pairs.append((local_tps, http_tps, burst_added))
                print(f"pair {i + 1}: in-process {local_tps:.1f} output tok/s; through HTTP ({args.concurrency} "
                      f"streaming clients) {http_tps:.1f} tok/s = {http_tps / local_tps * 100:.1f}%; "
                      f"TTFT added by the server under the burst, p50 {burst_added:.1f} ms; the 64 clients used "
                      f"{client_cores:.2f} of a core on the same machine")
            return lone_added, pairs

    token = {"BATCHING_LAB_INSTRUCTOR_TOKEN": "bench"}
    with launched(serve_flags(args, kv_tokens), env=token, timeout_s=180) as server:
        lone_added, pairs = asyncio.run(session(server.url))
    ratios = [h / l for l, h, *_ in pairs]
    print(f"\nHTTP / in-process output tok/s, median of {len(pairs)} pairs: {statistics.median(ratios) * 100:.1f}% "
          f"(pairs: {', '.join(f'{r * 100:.1f}%' for r in ratios)}; goal >= 90%)")
    print(f"TTFT added by the server (client's TTFT - the server engine's), p50: {lone_added:.1f} ms for a lone "
          f"request on the idle server (goal < 10 ms); {statistics.median(a for *_, a in pairs):.1f} ms under the "
          f"{args.concurrency}-stream burst, where parsing 64 requests at once shares this machine's cores with "
          f"the engine and the client")
    return 0


if __name__ == "__main__":
    sys.exit(main())
