"""`python -m engine serve`'s per-client limits, as a user starts it: off on a loopback address
(one user, as `vllm serve`: a benchmark's 32 streams from one client all run), on where it
listens on a network (a classroom: the ninth request in flight from one address is refused),
and the start-up line saying which. Each server is its own process, on the tiny model.
"""
import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2 as httpx
import openai
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "serve-defaults-token"
STREAMS = 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp_path, host: str, *flags: str):
    """`engine serve` on `host`, with 32 slots so that 32 streams run at once; (process, base url
    through 127.0.0.1, log file). The log holds the start-up lines."""
    port = free_port()
    log = tmp_path / f"serve-{host}.log"
    env = {**os.environ, "BATCHING_LAB_INSTRUCTOR_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", "tiny", "--device", "cpu",
                             "--dtype", "fp32", "--host", host, "--port", str(port), "--max-num-seqs", str(STREAMS),
                             *flags], cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url, log
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.3)


@pytest.fixture
def serve(tmp_path):
    procs = []

    def start(host, *flags):
        proc, url, log = start_server(tmp_path, host, *flags)
        procs.append(proc)
        return url, log
    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)


async def many_streams(url: str, n: int, max_tokens: int) -> list[tuple[str, int]]:
    """n streaming completions at once from this one client: each one's (finish reason, tokens generated)."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", timeout=120, max_retries=0)

    async def one(i):
        stream = await client.completions.create(model="tiny", prompt=f"stream {i}", max_tokens=max_tokens,
                                                 stream=True, stream_options={"include_usage": True},
                                                 extra_body={"ignore_eos": True})
        reason, tokens = None, 0
        async for chunk in stream:
            if chunk.choices:
                reason = chunk.choices[0].finish_reason or reason
            if chunk.usage:
                tokens = chunk.usage.completion_tokens
        return reason, tokens
    try:
        return await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await client.close()


def most_running(url: str) -> int:
    steps = httpx.get(url + "/lab/steps?stream=false&since=0", timeout=30).json()["steps"]
    return max(s["running"] for s in steps)


def test_on_loopback_one_client_runs_32_streams_at_once(serve):
    url, log = serve("127.0.0.1")
    results = asyncio.run(many_streams(url, STREAMS, max_tokens=48))
    assert results == [("length", 48)] * STREAMS, results      # a refusal would have raised a 429 here
    assert most_running(url) == STREAMS, "all 32 were in flight, and ran, at once"
    assert "per-client limits: off" in log.read_text(), log.read_text()


def test_on_a_network_address_the_ninth_request_from_one_client_is_refused(serve):
    """Bound to 0.0.0.0 and reached through 127.0.0.1: that address is no one's exemption unless
    --trusted-client names it, so it is one client with the classroom's limit of 8."""
    url, log = serve("0.0.0.0")
    text = log.read_text()
    assert "per-client limits: on, per client address: 8 requests in flight" in text, text
    body = {"model": "tiny", "prompt": "x", "max_tokens": 1800, "stream": True, "ignore_eos": True}
    opened, first_chunks, stop = [], threading.Barrier(9), threading.Event()

    def hold_one():
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            opened.append(r.status_code)
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("data:"))     # running: its first token came
            first_chunks.wait(60)
            for _ in lines:                                               # then read it to its end
                if stop.is_set():
                    break
    threads = [threading.Thread(target=hold_one, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    first_chunks.wait(60)                   # 8 in flight from 127.0.0.1
    ninth = httpx.post(url + "/v1/completions", json={**body, "stream": False, "max_tokens": 1}, timeout=30)
    in_flight = most_running(url)
    stop.set()
    for t in threads:
        t.join(60)
    assert opened == [200] * 8
    assert ninth.status_code == 429, ninth.text
    assert "client (127.0.0.1) has 8 requests in flight" in ninth.json()["error"]["message"]
    assert in_flight >= 8
    # the instructor is exempt
    ok = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1},
                    headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert ok.status_code == 200, ok.text


def test_the_limits_follow_the_address_unless_asked():
    from engine.cli.serve import add_serve_parser, server_limits
    import argparse
    p = argparse.ArgumentParser()
    add_serve_parser(p.add_subparsers(dest="cmd"))

    def per_client(*argv):
        return server_limits(p.parse_args(["serve", *argv])).per_client
    assert not per_client() and not per_client("--host", "::1") and not per_client("--host", "localhost")
    assert per_client("--host", "0.0.0.0") and per_client("--host", "192.168.1.20") and per_client("--host", "example.org")
    assert per_client("--max-inflight-per-client", "24"), "asking for a limit on loopback turns the limits on"
    assert per_client("--client-limits", "on") and not per_client("--host", "0.0.0.0", "--client-limits", "off")
    assert server_limits(p.parse_args(["serve", "--host", "0.0.0.0"])).max_inflight_per_client == 8
