"""Does a well-behaved client still get served while a hostile one does its worst?

`engine serve` runs with its default limits on 127.0.0.1. A well-behaved client (this process,
from 127.0.0.1) sends one short streaming request after another and times each TTFT. A hostile
client (a second process, connecting from 127.0.0.2: another address, as another machine on a
classroom's network would be) does one of:

  megabyte   20 prompts of 1,000,000 characters at once, each sent again as soon as it is answered
  queued     2,000 requests at once, each under a fresh `user` name, each sent again when refused
  readers    100 followers of /lab/steps, reading every event
  idle       5,000 connections that send nothing
  cpu        a control, not an attack: no network at all, the hostile process only spins on one
             core; what sharing this machine's CPU with it does to the good client
  neighbour  a control, not an attack: a well-behaved client keeping as many long requests in
             flight as the per-client limit lets any client keep; what sharing the engine's
             steps with what a client may fairly ask costs the good client (the floor under
             the queued attack, which also gets that many in)

The hostile process runs at nice 19 by default (--hostile-nice): it stands for another machine
on the network, whose CPU is not the server's; on a small box its own busy loop would otherwise
be most of the attack. It still takes every cycle the server, the engine and the good client
leave. --hostile-nice 0 lets it compete as an equal.

The machine is shared, so rounds are interleaved (alone, attack, alone, attack, ...) and each
attack's p50 TTFT is divided by the mean p50 of the two alone rounds beside it (goal: under 2).
The ratio of those two alone rounds to each other is printed too: it is how far the machine
alone moves the figure between rounds, the noise any attack's ratio is read against.
After every attack nothing may have leaked: the server's KV usage back to 0 with nothing running
or waiting, and its open file descriptors (/proc/PID/fd) back to the count before the attack.

    .venv/bin/python -m tools.bench_abuse                      # SmolLM2, every attack, twice
    .venv/bin/python -m tools.bench_abuse --model tiny --attacks idle queued --repeats 3
    .venv/bin/python -m tools.bench_abuse --hostile-nice 0       # the hostile client as an equal
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter

import httpx2 as httpx

from engine.cli.launch import launched

ATTACKS = ("megabyte", "queued", "readers", "idle", "cpu", "neighbour")
HOSTILE_ADDRESS = "127.0.0.2"
GOOD_BODY = {"prompt": "Write one sentence about the sea.", "max_tokens": 2, "stream": True, "ignore_eos": True}


# ----------------------------------------------------------------------------- the hostile client


async def raw_request(head: bytes, body: bytes = b"", read: bool = True) -> str:
    """One HTTP/1.1 request on its own connection from the hostile address; its status or what went wrong."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", PORT, local_addr=(HOSTILE_ADDRESS, 0))
    except OSError as exc:
        return f"connect: {exc.strerror or exc}"
    try:
        writer.write(head + body)
        await writer.drain()
        status = (await reader.readline()).split(b" ")[1:2]
        if read:
            while await reader.read(1 << 16):
                pass
        return status[0].decode() if status else "closed"
    except (OSError, asyncio.IncompleteReadError) as exc:
        return f"{type(exc).__name__}"
    finally:
        writer.close()


def post_head(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()


async def hostile(kind: str, seconds: float, outcomes: Counter) -> None:
    end = time.monotonic() + seconds

    async def again_and_again(make):
        while time.monotonic() < end:
            outcomes[await make()] += 1

    if kind == "megabyte":
        body = json.dumps({"prompt": ("hello world " * 83_334)[:1_000_000], "max_tokens": 16}).encode()
        await asyncio.gather(*(again_and_again(lambda: raw_request(post_head("/v1/completions", body), body))
                               for _ in range(20)))
    elif kind == "queued":
        counter = iter(range(10**9))

        def one():
            body = json.dumps({"prompt": "x", "max_tokens": 200, "ignore_eos": True,
                               "user": f"fresh-{next(counter)}"}).encode()
            return raw_request(post_head("/v1/completions", body), body)
        await asyncio.gather(*(again_and_again(one) for _ in range(2000)))
    elif kind == "readers":
        head = b"GET /lab/steps HTTP/1.1\r\nHost: x\r\n\r\n"

        async def follow():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", PORT, local_addr=(HOSTILE_ADDRESS, 0))
            except OSError as exc:
                outcomes[f"connect: {exc.strerror}"] += 1
                return
            writer.write(head)
            got = 0
            try:
                while time.monotonic() < end:
                    chunk = await asyncio.wait_for(reader.read(1 << 16), max(0.01, end - time.monotonic()))
                    if not chunk:
                        outcomes["closed early"] += 1
                        break
                    got += len(chunk)
            except (asyncio.TimeoutError, OSError):
                pass
            outcomes["read events"] += got > 0
            writer.close()
        await asyncio.gather(*(follow() for _ in range(100)))
    elif kind == "neighbour":
        from engine.server.limits import MAX_INFLIGHT_PER_CLIENT

        def one():
            body = json.dumps({"prompt": "x", "max_tokens": 200, "ignore_eos": True}).encode()
            return raw_request(post_head("/v1/completions", body), body)
        await asyncio.gather(*(again_and_again(one) for _ in range(MAX_INFLIGHT_PER_CLIENT)))
    elif kind == "cpu":
        spins = 0
        while time.monotonic() < end:
            spins += 1
        outcomes["spun"] += 1
    elif kind == "idle":
        async def hold():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", PORT, local_addr=(HOSTILE_ADDRESS, 0))
            except OSError as exc:
                outcomes[f"connect: {exc.strerror}"] += 1
                return
            try:
                chunk = await asyncio.wait_for(reader.read(1), max(0.01, end - time.monotonic()))
                outcomes["closed by the server" if not chunk else "got bytes"] += 1
            except asyncio.TimeoutError:
                outcomes["still open at the end"] += 1
            except OSError:
                outcomes["closed by the server"] += 1
            writer.close()
        await asyncio.gather(*(hold() for _ in range(5000)))


# ----------------------------------------------------------------------------- the bench


def good_client_ttfts(url: str, seconds: float) -> list[float]:
    """TTFTs of one short streaming request after another, for `seconds`. A request refused, cut
    or not answered within 30 s counts as an infinite TTFT: its p50 then says so."""
    out = []
    end = time.monotonic() + seconds
    with httpx.Client(timeout=30) as c:
        while time.monotonic() < end:
            sent = time.perf_counter()
            ttft = float("inf")
            try:
                with c.stream("POST", url + "/v1/completions", json=GOOD_BODY) as r:
                    for line in r.iter_lines():       # read to the end: the connection is kept for the next
                        if r.status_code == 200 and ttft == float("inf") and line.startswith("data: {") \
                                and json.loads(line[5:])["choices"][0]["text"]:
                            ttft = time.perf_counter() - sent
            except httpx.HTTPError:
                pass
            out.append(ttft)
    return out


def gauges(url: str) -> dict:
    text = httpx.get(url + "/metrics", timeout=30).text
    names = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")
    return {n: float(line.split()[-1]) for line in text.splitlines() for n in names if line.startswith(n + "{")}


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def settled(url: str, pid: int, baseline_fds: int, timeout_s: float) -> tuple[dict, int, float]:
    """Wait for the server to be empty and its descriptors back to the baseline; what it came to."""
    start = time.monotonic()
    while True:
        g, fds = gauges(url), open_fds(pid)
        if (not any(g.values()) and fds <= baseline_fds) or time.monotonic() - start > timeout_s:
            return g, fds, time.monotonic() - start
        time.sleep(0.25)


def p50(xs):
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--attacks", nargs="+", choices=ATTACKS, default=list(ATTACKS))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seconds", type=float, default=10.0, help="length of each round")
    p.add_argument("--hostile-nice", type=int, default=19, help="the hostile process's nice value")
    p.add_argument("--hostile", choices=ATTACKS, help=argparse.SUPPRESS)      # the hostile process
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    global PORT
    if args.hostile:
        PORT = args.port
        outcomes = Counter()

        async def bounded():                     # every attack ends on time, finished or not
            try:
                await asyncio.wait_for(hostile(args.hostile, args.seconds, outcomes), args.seconds + 5)
            except asyncio.TimeoutError:
                outcomes["cut at the end"] += 1
        asyncio.run(bounded())
        print(json.dumps(outcomes))
        return 0

    token = {"BATCHING_LAB_INSTRUCTOR_TOKEN": "bench"}
    with launched(["--model", args.model], env=token, timeout_s=300) as launch:
        url, port, server = launch.url, launch.port, launch.process
        good_client_ttfts(url, 3)                                   # warm up
        baseline = settled(url, server.pid, 10**9, 10)[1]
        print(f"server: engine serve --model {args.model}, default limits; {open_fds(server.pid)} fds at rest; "
              f"hostile at nice {args.hostile_nice}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        print(f"{'attack':<10}{'alone p50':>11}{'attacked':>10}{'ratio':>7}{'alone p50':>11}{'noise':>7}   "
              f"{'KV after':>8}{'fds':>9}  hostile's outcomes")
        verdicts = []
        for rep in range(args.repeats):
            alone_before = p50(good_client_ttfts(url, args.seconds))
            for kind in args.attacks:
                proc = subprocess.Popen(["nice", "-n", str(args.hostile_nice), sys.executable, "-m", "tools.bench_abuse", "--hostile",
                                         kind, "--port", str(port), "--seconds", str(args.seconds + 2)],
                                        stdout=subprocess.PIPE)
                time.sleep(2)                                       # let the attack build up first
                attacked = good_client_ttfts(url, args.seconds)
                try:
                    outcome = json.loads(proc.communicate(timeout=args.seconds + 60)[0] or "{}")
                except subprocess.TimeoutExpired:
                    proc.kill()
                    outcome = {"did not end on time": 1}
                g, fds, waited = settled(url, server.pid, baseline, 30)
                alone_after = p50(good_client_ttfts(url, args.seconds))
                ratio = p50(attacked) / ((alone_before + alone_after) / 2)
                noise = max(alone_before, alone_after) / min(alone_before, alone_after)
                leak = g["vllm:kv_cache_usage_perc"] > 0 or fds > baseline
                verdicts.append((kind, ratio, leak, noise))
                shown = ", ".join(f"{v} {k}" for k, v in sorted(outcome.items(), key=lambda kv: -kv[1])[:4])
                print(f"{kind:<10}{alone_before * 1000:>9.1f}ms{p50(attacked) * 1000:>8.1f}ms{ratio:>7.2f}"
                      f"{alone_after * 1000:>9.1f}ms{noise:>7.2f}   {g['vllm:kv_cache_usage_perc']:>8.0%}{fds:>5}/{baseline:<3}  "
                      f"{shown} (n={len(attacked)}, settled in {waited:.1f} s)", flush=True)
                alone_before = alone_after
        print()
        noises = [n for *_, n in verdicts]
        print(f"the machine alone moved p50 TTFT between neighbouring rounds by x{min(noises):.2f} to "
              f"x{max(noises):.2f} (median x{statistics.median(noises):.2f})")
        for kind in args.attacks:
            ratios = [r for k, r, _, _ in verdicts if k == kind]
            leaks = sum(leak for k, _, leak, _ in verdicts if k == kind)
            within = sum(r < 2 for r in ratios)
            print(f"{kind}: p50 TTFT ratio {', '.join(f'{r:.2f}' for r in ratios)} (median {p50(ratios):.2f}): "
                  f"{'within 2x every time' if within == len(ratios) else f'within 2x {within} of {len(ratios)} times'}; "
                  f"{'nothing leaked' if not leaks else f'leaked after {leaks} of {len(ratios)} rounds'}")
        floor = p50([r for k, r, _, _ in verdicts if k == "neighbour"])
        if floor == floor and "queued" in args.attacks:       # the neighbour ran: read queued against it
            print(f"queued against a fair neighbour (as many requests in flight as the limit lets one client "
                  f"keep): x{p50([r for k, r, _, _ in verdicts if k == 'queued']) / floor:.2f}")
        return 0 if all(p50([r for k, r, _, _ in verdicts if k == kind]) < 2 for kind in args.attacks) \
            and not any(leak for _, _, leak, _ in verdicts) else 1


PORT = 0

if __name__ == "__main__":
    sys.exit(main())
