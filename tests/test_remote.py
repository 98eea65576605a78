"""The app's client side (remote/) against our own server running SmolLM2: the load generator's
client-side timings, the Prometheus reader (ours, and canned SGLang and TGI pages), /lab/steps
as Tables, and the instructor's controls."""
import time

import pytest

from analysis.tables import StreamTables
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.runs.arrivals import build_requests
from engine.model.model import load_model
from engine.runs.workload import WorkloadSpec
from remote import attach, prometheus
from remote.lab_control import LabControl, LabRefused
from remote.lab_stream import LabStream
from remote.load import LoadGenerator
from test_server import TOKEN, serving
from conftest import wait_until

SGLANG = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.42
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8128902.0
"""
TGI = """# TYPE tgi_queue_size gauge
tgi_queue_size 5
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 12
# TYPE tgi_request_count counter
tgi_request_count 301
"""
VLLM_OLD = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 2.0
vllm:num_requests_running{model_name="b"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 4.0
vllm:num_requests_waiting{model_name="b"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="a"} 0.5
vllm:gpu_cache_usage_perc{model_name="b"} 0.25
"""

# llama-server --metrics as it prints the page (tools/server/server-task.cpp, to_metrics: HELP, TYPE
# and the value for each counter, then each gauge); this build publishes no KV cache gauge
LLAMACPP = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 5214
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 0
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 1638
# HELP llamacpp:n_decode_total Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 211
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 1433.02
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 98.2213
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 16
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 9
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 11.6445
"""
# An older llama-server, which printed its KV cache's use beside the same two gauges
LLAMACPP_WITH_KV = """# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 7801
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.3125
# HELP llamacpp:kv_cache_tokens KV-cache tokens.
# TYPE llamacpp:kv_cache_tokens gauge
llamacpp:kv_cache_tokens 2560
# HELP llamacpp:requests_processing Number of request processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# HELP llamacpp:requests_deferred Number of request deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""


@pytest.fixture(scope="module")
def smol():
    model = load_model("smollm2", "cpu", "fp32")
    policy = SchedulerPolicy(max_num_seqs=8, kv_capacity_tokens=8192)
    rebuild = lambda p: build_engine(EngineConfig(model="smollm2"), p, model)  # noqa: E731
    with serving(model, "smollm2", policy=policy, rebuild=rebuild) as (url, service):
        yield url, service


# ----------------------------------------------------------------------------- the engine choice


def test_engine_choice_from_the_environment():
    assert attach.from_env({}).kind == "embedded" and not attach.from_env({}).remote
    ours = attach.from_env({"BATCHING_LAB_ENGINE_URL": "http://10.0.0.5:8000/v1/"})
    assert (ours.kind, ours.url, ours.api_url, ours.metrics) == (
        "server", "http://10.0.0.5:8000", "http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/metrics")
    vllm = attach.from_env({"BATCHING_LAB_ENGINE_URL": "https://gpu:8000", "BATCHING_LAB_ENGINE_KIND": "openai",
                             "BATCHING_LAB_ENGINE_MODEL": "Qwen/Qwen2.5-7B", "BATCHING_LAB_METRICS_URL": "http://gpu:9000/m"})
    assert (vllm.kind, vllm.model, vllm.metrics) == ("openai", "Qwen/Qwen2.5-7B", "http://gpu:9000/m")
    assert "does not publish its steps" in vllm.hidden and ours.hidden == ""
    for env, words in [({"BATCHING_LAB_ENGINE_URL": "gpu:8000"}, "give http://host:port"),
                       ({"BATCHING_LAB_ENGINE_URL": "http://gpu", "BATCHING_LAB_ENGINE_KIND": "openai"}, "model name"),
                       ({"BATCHING_LAB_ENGINE_URL": "http://gpu", "BATCHING_LAB_ENGINE_KIND": "tgi"}, "one of embedded"),
                       ({"BATCHING_LAB_ENGINE_KIND": "server"}, "needs a URL")]:
        with pytest.raises(ValueError, match=words) as err:
            attach.from_env(env)
        assert "environment variables" in str(err.value)


# ----------------------------------------------------------------------------- Prometheus


def test_a_streaming_requests_row_counts_the_tokens_received_so_far():
    """The classroom's "your requests" table read TTFT 3.65 s beside 0 tokens: the count came only
    with the last chunk's usage."""
    from remote.load import ClientRecord
    rec = ClientRecord("r1", "amy", 0.0, first_token_s=0.5, token_times=[0.5, 0.6, 0.7])
    row = rec.row()
    assert row["status"] == "running" and row["output_tokens"] == 3 and row["ttft_s"] == 0.5
    rec.output_tokens = 5                                     # the server's usage, at the end
    assert rec.row()["output_tokens"] == 5


def test_prometheus_reader_knows_sglang_tgi_and_vllm_names():
    assert prometheus.gauges(SGLANG) == prometheus.EngineGauges("sglang", 7.0, 3.0, 0.42)
    assert prometheus.gauges(TGI) == prometheus.EngineGauges("tgi", 12.0, 5.0, None)
    assert prometheus.gauges(VLLM_OLD) == prometheus.EngineGauges("vllm", 3.0, 4.0, 0.375)
    with pytest.raises(ValueError, match="no known engine gauges"):
        prometheus.gauges("# TYPE other gauge\nother 1\n")


def test_prometheus_reader_knows_llama_cpp_names_with_and_without_the_kv_gauge():
    """llama-server's busy slots are running, its deferred requests waiting; its KV use is read where
    the page has it and left None where it does not (never a made-up 0)."""
    assert prometheus.gauges(LLAMACPP) == prometheus.EngineGauges("llamacpp", 16.0, 9.0, None)
    assert prometheus.gauges(LLAMACPP_WITH_KV) == prometheus.EngineGauges("llamacpp", 4.0, 0.0, 0.3125)
    assert prometheus.ENGINE_NAMES["llamacpp"].startswith("llama.cpp")
    # its other names (the decode calls' average busy slots) are not taken for running or waiting
    only_busy = "\n".join(l for l in LLAMACPP.splitlines() if "requests_" not in l) + "\n"
    with pytest.raises(ValueError, match="llamacpp:requests_processing"):
        prometheus.gauges(only_busy)


def test_load_generator_times_each_stream_and_prometheus_sees_it_running(smol):
    url, _ = smol
    gen = LoadGenerator(url + "/v1", "smollm2", "amy")
    futures = gen.send_prompt("Name a colour.", max_tokens=400, n=3, ignore_eos=True)
    wait_until(lambda: gen.in_flight == 3 and all(r.first_token_s is not None for r in gen.records), timeout=60)
    busy = prometheus.fetch(url + "/metrics")
    assert busy.engine == "vllm" and busy.running + busy.waiting == 3 and busy.kv_usage > 0
    for f in futures:
        f.result(timeout=300)
    idle = prometheus.fetch(url + "/metrics")
    assert (idle.running, idle.waiting, idle.kv_usage) == (0, 0, 0)
    rows = gen.table()
    assert list(rows["status"]) == ["finished"] * 3 and list(rows["output_tokens"]) == [400] * 3
    assert (rows["tenant"] == "amy").all() and rows["id"].str.startswith("chatcmpl-").all()
    assert (rows["ttft_s"] > 0).all() and (rows["tpot_s"] > 0).all()
    # A gap per text chunk: mostly one per token (a token that ends mid-character, or makes no
    # text, comes with the next one)
    assert 0.9 * 3 * 399 <= len(gen.itls()) <= 3 * 399
    # The client's TTFT holds the server's, plus the trip across the wire.
    server_rows = {r["id"]: r for r in StreamTables(LabStream(url)).poll().requests.to_dict("records")}
    for r in rows.to_dict("records"):
        mine = server_rows[r["id"]]
        assert mine["tenant"] == "amy" and r["ttft_s"] >= mine["ttft_s"] > 0
        assert r["e2e_s"] >= mine["e2e_s"] * 0.98


def test_load_generator_sends_a_workload_at_its_arrival_times(smol):
    url, _ = smol
    spec = WorkloadSpec(num_requests=4, rate=2.0, prompt_kind="fixed", prompt_lo=12, output_kind="fixed",
                        output_lo=5, seed=3)
    requests = build_requests(spec)
    gen = LoadGenerator(url + "/v1", "smollm2", "bob")
    records = gen.send_requests(requests).result(timeout=120)
    assert [r.output_tokens for r in records] == [5] * 4 and [r.prompt_tokens for r in records] == [12] * 4
    sent = [r.arrival_s - records[0].arrival_s for r in records]
    wanted = [r.arrival_s - requests[0].arrival_s for r in requests]
        # Gaps of ~0.5 s: sent on time within 0.25 s (the same process runs the server's engine), and
    # sending all at once would miss by far more
    assert all(abs(a - b) < 0.25 for a, b in zip(sent, wanted)), (sent, wanted)
    refused = LoadGenerator(url + "/v1", "gpt-9", "bob").send_prompt("hi", 4)[0].result(timeout=30)
    assert refused.status.value == "failed" and "404" in refused.error and "gpt-9" in refused.error


# ----------------------------------------------------------------------------- /lab as Tables


def test_lab_stream_gives_tables_with_structured_members_and_marks(smol):
    url, _ = smol
    stream = StreamTables(LabStream(url))
    stream.poll()
    gen = LoadGenerator(url + "/v1", "smollm2", "cy")
    rec = gen.send_prompt("Hello", max_tokens=6, ignore_eos=True)[0].result(timeout=60)
    LabControl(url, TOKEN).set_policy(max_num_seqs=6)
    LabControl(url, TOKEN).set_policy(max_num_seqs=8)
    tables = stream.poll()
    mine = [m for members in tables.steps["members"] for m in members if m[0] == rec.id]
    assert mine and all(isinstance(m, tuple) for m in mine)
    assert [m[1] for m in mine] == ["prefill"] + ["decode"] * 5
    assert list(tables.marks["label"][-2:]) == ["max_num_seqs 8→6", "max_num_seqs 6→8"]
    row = tables.requests.set_index("id").loc[rec.id]
    assert row["tenant"] == "cy" and row["status"] == "finished" and row["output_tokens"] == 6
    again = stream.poll()                         # nothing new: the same steps, none repeated
    assert list(again.steps["step"]) == list(tables.steps["step"])


def test_controls_need_the_token_and_drive_background_load_and_reset(smol):
    url, service = smol
    for token, status in [("", 401), ("wrong", 403)]:
        for call in (lambda c: c.set_policy(max_num_seqs=2), lambda c: c.start_load(rate=2.0), lambda c: c.reset()):
            with pytest.raises(LabRefused) as err:
                call(LabControl(url, token))
            assert err.value.status == status
    teacher = LabControl(url, TOKEN)
    with pytest.raises(LabRefused, match="rate"):
        teacher.start_load(rate=-1.0)
    with pytest.raises(LabRefused, match="unknown workload knob"):
        teacher.start_load(speed=3)
    teacher.start_load(rate=20.0, num_requests=6, prompt_kind="fixed", prompt_lo=16, output_kind="fixed",
                       output_lo=300, output_hi=300, seed=1)
    wait_until(lambda: teacher.load()["sent"] == 6, timeout=30)
    rows = StreamTables(LabStream(url)).poll().requests
    background = rows[rows["id"].str.startswith("bg1-")]
    assert len(background) == 6 and set(background["tenant"]) <= {"tenant-a", "tenant-b", "tenant-c", "tenant-d"}
    stream = StreamTables(LabStream(url))
    before = stream.poll()
    assert "background load on: 20 req/s" in list(before.marks["label"])
    eve = LoadGenerator(url + "/v1", "smollm2", "eve")
    in_flight = eve.send_prompt("Go on", 1500, ignore_eos=True)[0]
    wait_until(lambda: eve.records and eve.records[0].first_token_s is not None, timeout=60)
    runs = service.run
    assert teacher.reset()["run"] == runs + 1
    wait_until(lambda: service.engine.step_count == 0 and not service.engine.has_work(), timeout=30)
    assert teacher.load()["running"] is False
    cut = in_flight.result(timeout=30)
    assert cut.status.value == "aborted" and 0 < cut.output_tokens < 1500
    after = stream.poll()
    assert len(after.steps) == 0 and len(after.requests) == 0 and len(after.marks) == 0
    gen = LoadGenerator(url + "/v1", "smollm2", "dee")
    gen.send_prompt("Hi", max_tokens=3, ignore_eos=True)[0].result(timeout=60)
    fresh = stream.poll()
    assert list(fresh.steps["step"]) == [0, 1, 2] and list(fresh.requests["tenant"]) == ["dee"]


def test_after_a_reset_the_stream_shows_only_the_new_runs_steps_even_when_it_runs_past_the_old_one():
    """The old run's window started at step 0 and the new run soon has more steps: its table must
    hold the new run's rows, not keep the old run's rows for the step numbers they share."""
    from engine.core.engine import StepRecord
    from engine.server.lab_feed import step_json

    def steps(run, lo, hi):
        return [step_json(StepRecord(i, run + i * 0.1, run + i * 0.1 + 0.1, 0, 1, 0, 1, 1, 8,
                                     ((f"run{run}-r", "decode", 1),))) for i in range(lo, hi)]
    server = {"run": 1, "steps": steps(1, 0, 3)}

    def answer(path, params):
        if path == "/lab/requests":
            return {"requests": []}
        since = params.get("since", 0)
        sent = [d for d in server["steps"] if d["step"] >= since]
        return {"run": server["run"], "steps": sent, "next": len(server["steps"]), "marks": []}
    reader = LabStream("http://127.0.0.1:9")
    reader._get = answer
    stream = StreamTables(reader)
    assert list(stream.poll().steps["t_start_s"]) == [1.0, 1.1, 1.2]
    server.update(run=2, steps=steps(2, 0, 5))           # reset, and the new run is already longer
    table = stream.poll().steps
    assert list(table["step"]) == [0, 1, 2, 3, 4]
    assert [m[0][0] for m in table["members"]] == ["run2-r"] * 5
