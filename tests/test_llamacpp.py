"""llama.cpp's server as the Any engine page meets it: a real llama-server serving the bundled model,
read through its metrics page and its streams. Runs when BATCHING_LAB_LLAMA_SERVER names a
llama-server (with llama-quantize beside it: `python -m tools.llama_cpp` builds both); skipped
otherwise."""
import argparse
import os
import subprocess
import time

import pytest
from streamlit.testing.v1 import AppTest

from engine.cli.launch import free_port
from engine.runs.arrivals import build_requests
from engine.runs.workload import WorkloadSpec
from remote import attach, prometheus
from remote.load import LoadGenerator
from tools import llama_cpp

from test_classroom import EXTERNAL
from conftest import send_any_engine_load

SLOTS = 2


def test_a_named_llama_server_that_is_not_there_is_refused_by_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="BATCHING_LAB_LLAMA_SERVER='/no/such/llama-server'"):
        llama_cpp.find_server({llama_cpp.SERVER_ENV: "/no/such/llama-server"})
    with pytest.raises(ValueError, match="dtype 'fp16' is not allowed: choose one of fp32, bf16"):
        llama_cpp.gguf_for("fp16", tmp_path / "llama-server")


@pytest.fixture(scope="module")
def llama():
    named = os.environ.get(llama_cpp.SERVER_ENV)
    if not named:
        pytest.skip(f"no llama-server: set {llama_cpp.SERVER_ENV} to one (python -m tools.llama_cpp builds it)")
    server = llama_cpp.find_server()
    port = free_port()
    cmd = llama_cpp.server_command(server, llama_cpp.gguf_for("fp32", server), port, SLOTS, 512, 512)
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        llama_cpp.wait_ready(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_llama_server_streams_the_workload_and_its_metrics_page_counts_slots_and_waiting(llama):
    """Six requests on two slots: the page sees at most two running and the rest waiting while they
    stream, and nothing once they are done; every request generates exactly its length."""
    assert attach.kind_of(llama) == "llamacpp"
    assert attach.KIND_WORDS["llamacpp"] == "a llama.cpp server (llama-server)"
    gen = LoadGenerator(llama + "/v1", "smollm2", "you")
    requests = build_requests(WorkloadSpec(num_requests=6, rate=0, output_lo=24, output_hi=24, seed=1))
    future = gen.send_requests(requests)
    seen = []
    while not future.done():
        g = prometheus.fetch(llama + "/metrics")
        assert g.engine == "llamacpp" and g.running <= SLOTS
        seen.append((g.running, g.waiting))
        time.sleep(0.05)
    records = future.result(timeout=5)
    assert [r.status.value for r in records] == ["finished"] * 6
    assert [r.output_tokens for r in records] == [24] * 6
    assert max(r for r, _ in seen) == SLOTS and max(w for _, w in seen) > 0, seen
    idle = prometheus.fetch(llama + "/metrics")
    assert (idle.running, idle.waiting) == (0, 0)
    assert len(gen.gaps()) == sum(len(r.token_times) - 1 for r in records)


def test_any_engine_page_names_llama_cpp_and_charts_its_gauges(llama, monkeypatch):
    monkeypatch.delenv("BATCHING_LAB_ENGINE_URL", raising=False)
    at = AppTest.from_file(EXTERNAL, default_timeout=60).run()
    at.text_input(key="ext_url").set_value(llama)
    at.button[0].click().run()
    caption = at.caption[0].value.replace("\\", "")
    assert not at.error and "a llama.cpp server (llama-server)" in caption
    gen = send_any_engine_load(at, 4, 16, 16, timeout=120, rerun=True)
    assert list(gen.table()["status"]) == ["finished"] * 4
    readings = at.session_state["ext_gauges"]
    assert readings and {r["engine"] for r in readings} == {"llamacpp"}
    assert not at.warning and not at.exception
    assert any("KV cache use: this engine's metrics page does not publish it" in c.value for c in at.caption)
    assert any("busy slots" in i.value for i in at.info)


def test_the_llama_cpp_bench_gives_both_servers_the_same_prompt_caching():
    """Neither server keeps earlier prompts' keys and values by default (llama-server's prompt cache
    is on unless told otherwise, and the bench repeats its prompts), and both do with --prompt-cache."""
    from tools import bench_llamacpp
    for cached in (False, True):
        args = argparse.Namespace(slots=16, batch_tokens=2048, num_requests=64, prompt_len=[16, 256],
                                  output_len=[8, 128], lone_tokens=128, prompt_cache=cached)
        ours, theirs = bench_llamacpp.server_commands("llama-server", "m.gguf", 8080, "bf16", args, 10_000, 2048)
        assert ("--enable-prefix-caching" in ours) == cached
        assert ("--no-cache-prompt" in theirs) == (not cached)
        assert ours[ours.index("--max-num-seqs") + 1] == theirs[theirs.index("-np") + 1] == "16"
        assert ours[ours.index("--max-num-batched-tokens") + 1] == theirs[theirs.index("-b") + 1] == "2048"
        assert theirs[theirs.index("-c") + 1] == str(16 * (2048 + 128 + 64))   # each slot fits the longest prompt


def test_the_lone_streams_figures_are_their_medians():
    from tools import bench_llamacpp
    # TTFT 0.1, 0.2 and 0.6 s (the mean would be 0.3); TPOT 10, 12 and 30 ms over 50 gaps
    served = [{"send": 1.0, "first": 1.0 + ttft, "end": 1.0 + ttft + 0.05 * tpot, "tokens": 51}
              for ttft, tpot in ((0.1, 10), (0.6, 12), (0.2, 30))]
    figures = bench_llamacpp.lone_figures(served)
    assert figures["batch-1 TTFT (ms)"] == pytest.approx(200.0)
    assert figures["batch-1 TPOT (ms)"] == pytest.approx(12.0)


def test_the_llama_cpp_bench_table_keeps_its_columns_apart_whatever_the_figures(capsys):
    """A long prompt's batch-1 TTFT on a slow CPU (9118.4 [9101.7-9135.0] ms) is wider than the
    usual column: every row must still read as three cells, the figure's name and one per server."""
    from tools import bench_llamacpp
    rounds = {"ours": [1.0, 2.0], "llama.cpp": [3.0, 4.0]}
    results = {name: {key: list(values) for key in bench_llamacpp.DIGITS} for name, values in rounds.items()}
    results["ours"]["batch-1 TTFT (ms)"] = [9101.7, 9135.0]
    results["llama.cpp"]["batch-1 TTFT (ms)"] = [15318.3, 15549.6]
    bench_llamacpp.report("bf16", results)
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.strip().startswith(tuple(bench_llamacpp.DIGITS))]
    assert len(rows) == len(bench_llamacpp.DIGITS)
    for row in rows:
        cells = [cell for cell in row.strip().split("  ") if cell.strip()]
        assert len(cells) == 3, row
