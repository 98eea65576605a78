"""Bounded memory: a live run keeps a window of steps, events and ended requests while its
whole-run counts stay exact, and closing a run (or losing its page) frees its KV pool."""
import gc
import time
import types
import weakref
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from analysis.tables import TraceTables
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.engine import StepRecord
from engine.runs.live import LiveRun
from engine.core.metrics import summarize, SLO
from engine.model.model import load_model
from engine.runs.workload import WorkloadSpec
from playground.run import PlaygroundRun
from playground.setup import Setup
from conftest import wait_until

WINDOW = 40
# A tight KV cache (preemptions), prompts that can never fit (rejections), steady arrivals.
KV = 1024
POLICY = SchedulerPolicy(max_num_seqs=8, kv_capacity_tokens=KV, ttft_slo_s=2.0, tpot_slo_s=0.1)
SPEC = WorkloadSpec(num_requests=150, rate=2, prompt_lo=16, prompt_hi=1100, output_lo=8,
                    output_hi=32, seed=3)
EXACT = ["requests", "finished", "rejected", "failed", "preemptions", "steps", "output_tokens",
         "prompt_tokens"]
CLOSE = ["busy_s", "duration_s", "output_throughput_tok_s", "request_throughput_req_s",
         "goodput_req_s"]


def run_to_the_end(live: LiveRun, watch=None, timeout_s: float = 120) -> None:
    live.start()
    deadline = time.monotonic() + timeout_s
    while live.state == "running" and time.monotonic() < deadline:
        if watch:
            watch()
        time.sleep(0.005)
    live.stop()
    assert live.state == "finished", live.message


def test_a_windowed_live_run_stays_bounded_and_counts_the_whole_run_exactly():
    windowed = LiveRun(POLICY, SPEC, config=EngineConfig(kv_pool_tokens=KV), keep_steps=WINDOW)
    most = {"steps": 0, "events": 0, "ended requests": 0}
    counts = []

    def watch():
        eng = windowed.engine
        ended = sum(r.done for r in tuple(eng.requests.values()))
        for name, n in (("steps", len(eng.steps)), ("events", len(eng.events)),
                        ("ended requests", ended)):
            most[name] = max(most[name], n)
        counts.append(eng.step_count)

    run_to_the_end(windowed, watch)
    full = LiveRun(POLICY, SPEC, config=EngineConfig(kv_pool_tokens=KV), keep_steps=None)
    run_to_the_end(full)

    eng, whole = windowed.engine, full.engine
    assert whole.retired.steps == 0 and len(whole.requests) == SPEC.num_requests
    assert len(whole.steps) > 10 * WINDOW                   # the run really outgrew the window
    assert most["steps"] <= WINDOW * 1.1
    assert most["events"] < len(whole.events) / 5
    assert most["ended requests"] < SPEC.num_requests / 10
    assert counts == sorted(counts) and eng.step_count == len(whole.steps)

    live, ref = windowed.snapshot().summary, full.snapshot().summary
    cli = summarize(whole.requests.values(), whole.steps, SLO(POLICY.ttft_slo_s, POLICY.tpot_slo_s))
    assert ref["preemptions"] > 0 and ref["rejected"] > 0 and ref["finished"] > 0
    for key in EXACT:
        assert live[key] == ref[key] == cli[key], key
    for key in CLOSE:
        assert live[key] == pytest.approx(ref[key]) == pytest.approx(cli[key]), key
    assert live["percentiles_over"].startswith(f"the last {len(eng.steps):,} steps")
    assert ref["percentiles_over"] == "the whole run"
    assert "percentiles_over" not in cli                     # summary.json keeps its format


def test_snapshot_rows_and_tables_follow_the_window():
    live = LiveRun(POLICY, SPEC, config=EngineConfig(kv_pool_tokens=KV), keep_steps=WINDOW)
    tables = TraceTables()
    live.start()
    deadline = time.monotonic() + 60
    seen_first = []
    while live.state == "running" and time.monotonic() < deadline:
        snap = live.snapshot(summary=False)
        steps = tables.steps(snap.steps)
        assert list(steps["step"]) == [s.step for s in snap.steps]
        pd.testing.assert_frame_equal(steps, TraceTables().steps(snap.steps))   # kept rows = a fresh conversion
        assert {r["id"] for r in snap.requests} == set(live._rows) | {
            r["id"] for r in snap.requests if r["status"] in ("waiting", "running")}
        if snap.steps:
            seen_first.append(snap.steps[0].step)
        time.sleep(0.01)
    live.stop()
    assert max(seen_first) > 0                               # the window really moved
    assert len(live._rows) <= len(live.engine.requests)


def test_trace_tables_drop_rows_that_left_the_window_and_restart_for_a_new_run():
    def recs(lo, hi):
        return tuple(StepRecord(i, i * 0.1, i * 0.1 + 0.1, 0, 1, 0, 1, 1, 8, (("r", "decode", 1),))
                     for i in range(lo, hi))

    tables = TraceTables()
    assert list(tables.steps(recs(0, 5))["step"]) == [0, 1, 2, 3, 4]
    assert list(tables.steps(recs(3, 9))["step"]) == [3, 4, 5, 6, 7, 8]
    for window in (recs(4, 9), recs(4, 12)):        # the start moves with no new step, then both move
        pd.testing.assert_frame_equal(tables.steps(window), TraceTables().steps(window))
    assert list(tables.steps(recs(20, 23))["step"]) == [20, 21, 22]      # jumped past it all
    assert list(tables.steps(recs(0, 2))["step"]) == [0, 1]              # a new run
    assert len(tables.steps(())) == 0


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")




def test_close_frees_the_runner_and_its_kv_pool(tiny):
    lab = PlaygroundRun(Setup(rate=0, num_requests=6, output_lo=4, output_hi=8), tiny)
    runner = weakref.ref(lab.live.engine.executor.runner)
    lab.start()
    assert wait_until(lambda: lab.state == "finished")
    assert runner() is not None                  # finished, the page still holds it
    lab.close()
    gc.collect()
    assert runner() is None and not lab.live.thread_alive
    assert lab.live.snapshot().summary["finished"] == 6      # what was recorded stays readable
    with pytest.raises(RuntimeError, match="closed"):
        lab.start()


def test_a_run_whose_page_is_gone_frees_its_kv_pool(tiny):
    alive = {"yes": True}
    lab = PlaygroundRun(Setup(rate=0, num_requests=4, output_lo=4, output_hi=4), tiny,
                 is_alive=lambda: alive["yes"])
    runner = weakref.ref(lab.live.engine.executor.runner)
    lab.start()
    assert wait_until(lambda: lab.state == "finished")   # finished: its thread still watches
    assert lab.live.thread_alive
    alive["yes"] = False
    assert wait_until(lambda: not lab.live.thread_alive)
    gc.collect()
    assert runner() is None and lab.state == "stopped"


def test_the_playground_refuses_a_run_past_the_engine_cap(monkeypatch, tiny):
    monkeypatch.setenv("BATCHING_LAB_MODEL", "tiny")
    monkeypatch.setenv("BATCHING_LAB_MAX_ENGINES", "1")
    other = LiveRun(SchedulerPolicy(), WorkloadSpec(num_requests=1))   # another session's run
    other.step_once()
    try:
        at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"),
                               default_timeout=120)
        at.run()
        at.switch_page("playground/page.py").run()
        at.button(key="start").click().run()
        assert not at.exception
        assert any("1 runs are active on this server" in e.value for e in at.error)
        assert "lab_run" not in at.session_state
    finally:
        other.close()


# ----------------------------------------------------------------------------- continuous traffic

def held_objects(*roots) -> int:
    """How many objects `roots` hold, following references down to (not into) modules, classes and
    functions. Not the whole process's count: other tests' threads in this worker would move that."""
    seen, todo = set(), list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        todo.extend(gc.get_referents(obj))
    return len(seen)


def test_fifty_thousand_steps_of_continuous_traffic_hold_a_bounded_set_of_objects():
    """The engine loop itself (LiveRun._step on the cost model, no pacing), read like the page
    reads it, with a policy change every 5,000 steps: what it holds stops growing."""
    spec = WorkloadSpec(continuous=True, rate=3.0, prompt_lo=32, prompt_hi=256, output_lo=16,
                        output_hi=96, seed=1)
    live = LiveRun(SchedulerPolicy(max_num_seqs=16), spec, keep_steps=500)
    live.state, live.pace_s = "running", 0.0
    tables, held, objects = TraceTables(), [], {}
    while live.engine.step_count < 50_000:
        live._step()
        n = live.engine.step_count
        if n % 5_000 == 0:
            live.set_policy(live.engine.policy.changed(max_num_seqs=8 if n % 10_000 else 16))
        if n % 500 == 0:
            snap = live.snapshot(summary=False)
            tables.update(snap)
            eng = live.engine
            held.append((len(eng.steps), len(eng.events), len(eng.requests), len(live._rows),
                         len(eng.marks), len(tables.steps(snap.steps))))
            if n in (10_000, 50_000):
                objects[n] = held_objects(live, tables)
    eng = live.engine
    assert not live.feed.exhausted and live.state == "running"
    assert eng.step_count == eng.retired.steps + len(eng.steps) == 50_000
    assert eng.retired.requests + len(eng.requests) == live.feed.count > 5_000
    steps, events, requests, rows, marks, table_rows = (max(col) for col in zip(*held))
    assert steps <= 550 and table_rows <= 550
    assert events < 20_000 and requests < 400 and rows <= requests and marks <= 1
    assert objects[50_000] < objects[10_000] * 1.05          # no growth after warm-up


def test_an_overloaded_live_run_turns_arrivals_away_past_the_queue_cap(monkeypatch):
    monkeypatch.setattr("engine.runs.live.QUEUE_CAP", 30)
    spec = WorkloadSpec(continuous=True, rate=500.0, prompt_lo=64, prompt_hi=128, output_lo=64,
                        output_hi=128, seed=2)
    live = LiveRun(SchedulerPolicy(max_num_seqs=4), spec, keep_steps=200)
    live.state, live.pace_s = "running", 0.0
    most = 0
    while live.engine.step_count < 1_000:
        live._step()
        most = max(most, len(live.engine.scheduler.waiting))
    assert most == 30
    summary = live.snapshot().summary
    assert summary["rejected"] > 100
    reasons = {r["error"] for r in live.snapshot().requests if r["status"] == "rejected"}
    assert reasons and all("waiting line is full" in r and "at most 30" in r for r in reasons)
