"""`python -m engine serve`'s per-client limits, as a user starts it: off on a loopback address
(one user, as `vllm serve`: a benchmark's 32 streams from one client all run), on where it
listens on a network (a classroom: the ninth request in flight from one address is refused),
and the start-up line saying which. Each server is its own process, on the tiny model.
"""
import asyncio
import contextlib
import threading
import time

import httpx2 as httpx
import openai
import pytest

from engine.cli.launch import ServerNotStarted, launched

TOKEN = "serve-defaults-token"
STREAMS = 32


@pytest.fixture
def serve(tmp_path):
    """`engine serve` on `host`, with 32 slots so that 32 streams run at once: (base url through
    127.0.0.1, log file). The log holds the start-up lines."""
    with contextlib.ExitStack() as stack:
        def start(host, *flags):
            server = stack.enter_context(launched(
                ["--model", "tiny", "--device", "cpu", "--dtype", "fp32", "--max-num-seqs", str(STREAMS), *flags],
                host=host, env={"BATCHING_LAB_INSTRUCTOR_TOKEN": TOKEN}, log=tmp_path / f"serve-{host}.log",
                timeout_s=120))
            return server.url, server.log
        yield start


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


def test_a_server_that_exits_at_once_is_a_clear_error_not_a_hang(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(ServerNotStarted) as err:
        with launched(["--model", "tiny", "--max-num-seqs", "0"], log=tmp_path / "bad.log", timeout_s=120):
            pass
    message = str(err.value)
    assert time.monotonic() - t0 < 60, "it gave up at the exit, not at the timeout"
    assert "exited with status 2 while starting" in message, message
    assert "max_num_seqs" in message, "the server's own reason is in the error"
    assert err.value.process.returncode == 2


def test_a_server_not_up_in_time_is_stopped_and_reaped(tmp_path):
    with pytest.raises(ServerNotStarted, match="did not answer .*/health within 0.01 s") as err:
        with launched(["--model", "tiny"], log=tmp_path / "slow.log", timeout_s=0.01):
            pass
    assert err.value.process.returncode is not None


def test_a_launched_server_answers_and_is_reaped_on_the_way_out(tmp_path):
    with launched(["--model", "tiny", "--device", "cpu"], log=tmp_path / "ok.log", timeout_s=120) as server:
        assert httpx.get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"] == "tiny"
        assert server.process.poll() is None
    assert server.process.returncode is not None
    assert "serving on http://127.0.0.1:" in server.output()
