"""`python -m engine serve`: the OpenAI API, errors, /metrics and the lab endpoints, on 127.0.0.1.

Each server runs uvicorn in a thread of the test process, on a port the OS picks.
"""
import asyncio
import contextlib
import json
import os
import socket
import sys
import threading
import time

import httpx2 as httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.runs.build import build_engine
from engine.cli import main as cli_main
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.model.model import load_model
from engine.server.app import create_app
from engine.server.connections import Server, server_config
from engine.server.limits import ServerLimits
from engine.server.service import ENGINE_NICE, THREAD_NAME, EngineService
from conftest import wait_until

TOKEN = "teacher-secret"
TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
GAPS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
           480.0, 960.0, 1920.0, 7680.0]
ITERATION = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
HISTOGRAMS = {"vllm:time_to_first_token_seconds": TTFT, "vllm:inter_token_latency_seconds": GAPS,
              "vllm:request_time_per_output_token_seconds": GAPS, "vllm:e2e_request_latency_seconds": LATENCY,
              "vllm:request_queue_time_seconds": LATENCY, "vllm:request_prefill_time_seconds": LATENCY,
              "vllm:request_decode_time_seconds": LATENCY, "vllm:iteration_tokens_total": ITERATION}
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
COUNTERS = ("vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success")


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", "cpu", "fp32")


@contextlib.contextmanager
def serving(model, name="tiny", policy=SchedulerPolicy(max_num_seqs=32, kv_capacity_tokens=16384),
            limits=ServerLimits(), docs=False, tokenizer=None, **service_kw):
    """A server for `model` on a free port of 127.0.0.1, as `engine serve` runs it (its
    connection guard, its stop); yields (base url, service). `tokenizer` replaces the model's."""
    engine = build_engine(EngineConfig(model=name), policy, model)
    engine.tokenizer = tokenizer or engine.tokenizer
    service = EngineService(engine, name, **service_kw)
    app = create_app(service, name, TOKEN, limits, docs=docs)
    server = Server(server_config(app, limits, log_level="warning"), on_stop=app.state.stop_streams)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", service
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


@pytest.fixture(scope="module")
def server(tiny):
    with serving(tiny) as (url, service):
        yield url, service


def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=60, max_retries=0)


def metrics(url) -> dict:
    """{name: family} of the parsed /metrics page."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(families, name, suffix="", **labels) -> float:
    return sum(s.value for s in families[name].samples
               if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items()))




# ----------------------------------------------------------------------------- the OpenAI API


def openai_round_trip(url, model):
    """Completions and chat, streaming and not, through the openai client; returns the texts."""
    c = client(url)
    out = {}
    r = c.completions.create(model=model, prompt="The sky is", max_tokens=8, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length"
    out["completion"] = r.choices[0].text
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].message.role == "assistant" and r.usage.completion_tokens == 8
    out["chat"] = r.choices[0].message.content
    pieces, usage = [], None
    for ch in c.completions.create(model=model, prompt="The sky is", max_tokens=8, stream=True,
                                   stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
        pieces += [x.text for x in ch.choices]
        usage = ch.usage or usage
    assert "".join(pieces) == out["completion"] and usage.completion_tokens == 8
    pieces = []
    for ch in c.chat.completions.create(model=model, messages=[{"role": "user", "content": [
            {"type": "text", "text": "Hi"}]}], max_completion_tokens=8, stream=True, extra_body={"ignore_eos": True}):
        pieces += [x.delta.content or "" for x in ch.choices]
    assert "".join(pieces) == out["chat"]
    return out


def test_openai_client_tiny(server):
    url, _ = server
    assert httpx.get(url + "/health").status_code == 200
    assert [m.id for m in client(url).models.list()] == ["tiny"]
    texts = openai_round_trip(url, "tiny")
    assert texts["completion"] and texts["chat"]


def test_openai_client_smollm2_and_greedy_text_equals_the_cli(tmp_path):
    model = load_model("smollm2", "cpu", "fp32")
    prompt = "Name three colours."
    line = {"id": "q", "prompt": prompt, "max_new_tokens": 12, "ignore_eos": True}
    (tmp_path / "w.jsonl").write_text(json.dumps(line) + "\n")
    assert cli_main(["run", "--workload", str(tmp_path / "w.jsonl"), "--out", str(tmp_path / "out"),
                     "--model", "smollm2", "--device", "cpu", "--dtype", "fp32"]) == 0
    import csv
    cli_text = next(csv.DictReader(open(tmp_path / "out" / "requests.csv")))["output_text"]
    with serving(model, "smollm2") as (url, _):
        openai_round_trip(url, "smollm2")
        r = client(url).chat.completions.create(model="smollm2", messages=[{"role": "user", "content": prompt}],
                                                max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    assert r.choices[0].message.content == cli_text


def test_greedy_text_equals_the_engine_in_process(server, tiny):
    url, _ = server
    from engine.core.request import Request
    ids = tiny.tokenizer.encode("Once upon a time")
    engine = build_engine(EngineConfig(model="tiny"), SchedulerPolicy(), tiny)
    engine.submit(Request("a", list(ids), 20))
    engine.run()
    r = client(url).completions.create(model="tiny", prompt=ids, max_tokens=20, extra_body={"ignore_eos": True})
    assert r.choices[0].text == engine.requests["a"].output_text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_the_engine_thread_yields_the_cpu_to_the_event_loop(server):
    """The engine thread runs ENGINE_NICE below the rest of the process, so taking in a burst of
    requests does not wait behind a step."""
    engine_thread = next(t for t in threading.enumerate() if t.name == THREAD_NAME)
    nice = lambda tid: os.getpriority(os.PRIO_PROCESS, tid)
    assert nice(engine_thread.native_id) == min(19, nice(threading.get_native_id()) + ENGINE_NICE)


def test_32_concurrent_streams_all_complete(server):
    url, _ = server

    async def one(c, i):
        n = 0
        async for ch in await c.completions.create(model="tiny", prompt=f"story {i}", max_tokens=10 + i,
                                                   stream=True, stream_options={"include_usage": True},
                                                   extra_body={"ignore_eos": True}):
            n = ch.usage.completion_tokens if ch.usage else n
        return n

    async def all_of_them():
        c = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", timeout=120, max_retries=0)
        return await asyncio.gather(*(one(c, i) for i in range(32)))

    assert asyncio.run(all_of_them()) == [10 + i for i in range(32)]


def test_stop_strings_min_tokens_and_sampling_fields(server):
    url, _ = server
    c = client(url)
    full = c.completions.create(model="tiny", prompt="abc", max_tokens=12, extra_body={"ignore_eos": True})
    text = full.choices[0].text
    stop = text[3:6]
    r = c.completions.create(model="tiny", prompt="abc", max_tokens=12, stop=[stop], extra_body={"ignore_eos": True})
    assert r.choices[0].text == text[:text.index(stop)] and r.choices[0].finish_reason == "stop"
    r = c.completions.create(model="tiny", prompt="abc", max_tokens=6, temperature=0.8, top_p=0.9, seed=3,
                             user="amy", extra_body={"min_tokens": 6, "priority": 1})
    assert r.usage.completion_tokens == 6


def test_a_disconnect_mid_stream_frees_the_kv_cache(server):
    url, _ = server
    before = sample(metrics(url), "vllm:request_success", "_total", finished_reason="abort")
    body = {"model": "tiny", "prompt": "go on", "max_tokens": 1800, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        assert sample(metrics(url), "vllm:kv_cache_usage_perc") > 0
    wait_until(lambda: sample(metrics(url), "vllm:kv_cache_usage_perc") == 0
             and sample(metrics(url), "vllm:num_requests_running") == 0)
    assert sample(metrics(url), "vllm:request_success", "_total", finished_reason="abort") == before + 1
    rows = httpx.get(url + "/lab/requests").json()["requests"]
    assert rows[-1]["status"] == "aborted" and rows[-1]["output_tokens"] < 1800


# ----------------------------------------------------------------------------- /metrics


def test_metrics_names_types_buckets_and_counts(tiny):
    with serving(tiny) as (url, _):
        c = client(url)
        used = [c.completions.create(model="tiny", prompt=f"count {i}", max_tokens=3 + i,
                                     extra_body={"ignore_eos": True}).usage for i in range(5)]
        fam = metrics(url)
    for name in GAUGES:
        assert fam[name].type == "gauge"
    for name in COUNTERS:
        assert fam[name].type == "counter"
    for name, buckets in HISTOGRAMS.items():
        assert fam[name].type == "histogram"
        bounds = [float(s.labels["le"]) for s in fam[name].samples if s.name == name + "_bucket"]
        assert bounds == [*buckets, float("inf")], name
    assert {s.labels["model_name"] for f in fam.values() if f.name.startswith("vllm:") for s in f.samples} == {"tiny"}
    assert sample(fam, "vllm:prompt_tokens", "_total") == sum(u.prompt_tokens for u in used)
    assert sample(fam, "vllm:generation_tokens", "_total") == sum(u.completion_tokens for u in used)
    assert sample(fam, "vllm:request_success", "_total", finished_reason="length") == 5
    assert sample(fam, "vllm:request_success", "_total") == 5
    for name in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                 "vllm:request_queue_time_seconds", "vllm:request_decode_time_seconds"):
        assert sample(fam, name, "_count") == 5, name
    assert sample(fam, "vllm:inter_token_latency_seconds", "_count") == sum(u.completion_tokens - 1 for u in used)
    assert sample(fam, "vllm:kv_cache_usage_perc") == 0 and sample(fam, "vllm:num_requests_running") == 0


# ----------------------------------------------------------------------------- bad input


TOO_LONG = list(range(5, 2305))
BAD = [
    ("/v1/completions", b"{not json", 400, "not valid JSON"),
    ("/v1/completions", b"[1, 2]", 400, "must be a JSON object"),
    ("/v1/completions", {"model": "gpt-9", "prompt": "x"}, 404, "gpt-9"),
    ("/v1/completions", {"prompt": TOO_LONG}, 400, "prompt is 2,300 tokens; this model takes 2,048"),
    ("/v1/completions", {"prompt": list(range(5, 2005)), "max_tokens": 100}, 400, "2,100 in all"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": -3}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "9"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "one prompt per request"),
    ("/v1/completions", {"prompt": [5, 6, -1]}, 400, "prompt[2] is -1; token ids are integers from 0 to"),
    ("/v1/completions", {"prompt": [5, True]}, 400, "prompt[1] is True; token ids"),
    ("/v1/completions", {"prompt": [5.0, 6]}, 400, "prompt[0] is 5.0; token ids"),
    ("/v1/completions", {"prompt": [5, 10 ** 9]}, 400, "prompt[1] is 1000000000; token ids"),
    ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n=2 is not supported"),
    ("/v1/completions", {"prompt": "x", "logprobs": 3}, 400, "logprobs"),
    ("/v1/completions", {"prompt": "x", "temperature": 7}, 400, "temperature"),
    ("/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
    ("/v1/completions", {"prompt": "x", "stop": [1]}, 400, "stop"),
    ("/v1/completions", {"prompt": "x", "min_tokens": 99, "max_tokens": 5}, 400, "min_tokens"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
     400, "tools"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "only text parts"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0},
     400, "max_completion_tokens"),
    ("/v1/completions", {"prompt": "x" * (1 << 20)}, 413, "over 1,048,576, the limit"),
]


@pytest.mark.parametrize("path, body, status, words", BAD, ids=[b[3][:30] for b in BAD])
def test_bad_input_gets_its_status_and_a_message(server, path, body, status, words):
    url, _ = server
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(url + path, content=content, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status
    error = r.json()["error"]
    assert words in error["message"] and error["type"] and error["code"] == status


def test_429_with_retry_after_when_the_queue_or_the_tenant_is_full(tiny):
    policy = SchedulerPolicy(max_num_seqs=1, max_waiting=1, kv_capacity_tokens=16384)
    with serving(tiny, policy=policy, max_inflight_per_tenant=1) as (url, _):
        long = {"model": "tiny", "prompt": "x", "max_tokens": 1800, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", url + "/v1/completions", json={**long, "user": "amy"}, timeout=30) as running:
            lines = running.iter_lines()      # kept: a dropped iterator closes the stream
            next(lines)
            r = httpx.post(url + "/v1/completions", json={**long, "user": "amy"}, timeout=30)
            assert r.status_code == 429 and "'amy' has 1 requests in flight" in r.json()["error"]["message"]
            assert r.headers["retry-after"]
            with httpx.stream("POST", url + "/v1/completions", json={**long, "user": "bob"}, timeout=30):
                wait_until(lambda: sample(metrics(url), "vllm:num_requests_waiting") == 1)
                r = httpx.post(url + "/v1/completions", json={**long, "user": "cyd"}, timeout=30)
                assert r.status_code == 429 and "max_waiting=1" in r.json()["error"]["message"]
                assert r.headers["retry-after"]


# ----------------------------------------------------------------------------- the lab endpoints


def test_a_policy_change_needs_the_instructor_token(server):
    url, _ = server
    assert httpx.put(url + "/lab/policy", json={"max_num_seqs": 4}).status_code == 401
    r = httpx.put(url + "/lab/policy", json={"max_num_seqs": 4}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 403
    assert httpx.get(url + "/lab/policy").json()["max_num_seqs"] == 32
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.put(url + "/lab/policy", json={"max_num_seqs": 0}, headers=auth)
    assert r.status_code == 400 and "max_num_seqs" in r.json()["error"]["message"]
    assert httpx.put(url + "/lab/policy", json={"max_num_seqs": 24}, headers=auth).json()["max_num_seqs"] == 24
    assert httpx.put(url + "/lab/policy", json={"max_num_seqs": 32}, headers=auth).status_code == 200


def test_the_instructor_check_answers_only_the_token(server):
    """The app's teacher view shows the class's progress only when the server says the token is its own."""
    from remote.lab_control import LabControl, LabRefused
    url, _ = server
    assert LabControl(url, TOKEN).check_token() == {"instructor": True}
    for token, status in (("", 401), ("wrong", 403)):
        with pytest.raises(LabRefused) as refused:
            LabControl(url, token).check_token()
        assert refused.value.status == status


def test_lab_steps_stream_live_records_with_structured_members(server):
    url, service = server
    start = service.engine.step_count
    r = client(url).completions.create(model="tiny", prompt="watch me", max_tokens=4, extra_body={"ignore_eos": True})
    with httpx.stream("GET", url + f"/lab/steps?since={start}", timeout=10) as s:
        records = []
        for line in s.iter_lines():
            if line.startswith("data:"):
                records.append(json.loads(line[5:]))
            if sum(len(x["members"]) for x in records) >= 4:
                break
    mine = [m for x in records for m in x["members"] if m[0] == r.id]
    assert [m[1] for m in mine] == ["prefill", "decode", "decode", "decode"]
    once = httpx.get(url + f"/lab/steps?since={start}&stream=false").json()
    assert once["steps"][0]["step"] == start and once["next"] > start
