"""The closed loop (engine/runs/closed_loop.py): never more than `concurrency` requests inside the engine,
each request sent the moment a client is free, every request run once; and the benchmarking lab's
measures read from it (no model: the simulator's clock)."""
from dataclasses import replace

import pytest

from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.step_model import StepModel
from engine.runs.arrivals import build_requests
from engine.runs.closed_loop import ClosedLoop, run_closed_loop
from engine.runs.workload import WorkloadSpec
from engine.sim.simulate import SimProfile, build_simulation
from labs.benchmarking import experiment as bench

STEP = StepModel(fixed_ms=60.0, knots=(), token_ms=(3.5,), sample_ms=0.0, decode_read_ms=8.0,
                 prefill_pair_ms=0.0, label="a fixed test step model")
SPEC = WorkloadSpec(num_requests=60, rate=1.0, prompt_lo=16, prompt_hi=64, output_lo=8, output_hi=24)
POLICY = SchedulerPolicy(max_num_seqs=8)


def engine():
    return build_simulation(EngineConfig(), POLICY, SimProfile("test", "test", STEP))


def inside_at_each_step(e) -> list[int]:
    return [s.waiting + s.running for s in e.steps]


@pytest.mark.parametrize("clients", [1, 3, 8])
def test_never_more_than_the_clients_inside_and_each_sent_when_a_client_frees(clients):
    e = engine()
    reqs = build_requests(SPEC)
    run_closed_loop(e, reqs, clients)
    assert all(r.status.value == "finished" for r in reqs) and len(e.requests) == len(reqs)
    assert max(inside_at_each_step(e)) <= clients
    # the first `clients` go at once; every later one at the moment an earlier one finished
    arrivals = sorted(r.arrival_s for r in reqs)
    finishes = {r.finish_s for r in reqs}
    assert arrivals[:clients] == [arrivals[0]] * clients
    assert all(t in finishes for t in arrivals[clients:])
    # and in the spec's order: the i-th request is sent no later than the (i+1)-th
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:]))


def test_open_load_of_the_same_requests_does_hold_more_than_that():
    """The check above can fail: open load near capacity puts more than 3 requests inside at some step."""
    e = engine()
    closed = engine()
    run_closed_loop(closed, build_requests(SPEC), 3)
    rate = len(closed.requests) / max(r.finish_s for r in closed.requests.values())
    for r in build_requests(replace(SPEC, rate=rate * 1.5)):
        e.submit(r)
    e.run()
    assert max(inside_at_each_step(e)) > 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_bad_concurrency_is_refused_naming_the_allowed_values(bad):
    with pytest.raises(ValueError, match="concurrency .* 1 or more"):
        ClosedLoop([], bad)


def test_the_open_run_draws_the_closed_loops_requests():
    """The pair compares the same requests: an open spec at another rate draws the same lengths and prompts."""
    a, b = build_requests(bench.closed_spec(6, True)), build_requests(bench.open_spec(6, 2.345, True))
    assert [(r.max_new_tokens, r.prompt_token_ids) for r in a] == [(r.max_new_tokens, r.prompt_token_ids) for r in b]


def test_the_hidden_backlog_counts_what_the_open_schedule_sent_and_the_loop_had_not():
    closed, opened, x = bench.simulated(STEP, bench.NEAR)
    c, o = bench.run_numbers(closed, bench.NEAR), bench.run_numbers(opened, bench.NEAR)
    assert c["waiting_max"] == 0 and o["waiting_max"] > 0
    backlog = bench.hidden_backlog(closed, opened)
    assert len(backlog) == len(closed.steps) and backlog["backlog"].max() > 0 and backlog["backlog"].min() >= 0
    assert abs(c["throughput"] / x - 1) < 0.01, "the open load is given the closed loop's own throughput"


def test_warm_up_requests_are_left_out_and_spread_is_high_over_low():
    closed, _, _ = bench.simulated(STEP, 2)
    assert bench.run_numbers(closed, 2)["requests"] == bench.SIM_REQUESTS - bench.WARMUP
    closed, _, _ = bench.simulated(STEP, 8)
    assert bench.run_numbers(closed, 8)["requests"] == bench.SIM_REQUESTS - 8, "one warm-up request per client"
    assert bench.spread([1.0, 2.5, 2.0]) == 2.5
    assert bench.spread([1.0]) != bench.spread([1.0])     # nan: one repeat has no spread


def test_a_pair_run_at_two_machine_speeds_is_not_judged():
    """The speed check can fail: the same open run with every step stretched ×1.6 (a busier machine) is
    flagged, and the verdict is then undecided, however large the ratio."""
    closed, opened, x = bench.simulated(STEP, bench.NEAR)
    assert bench.speed_check(closed, opened) is None, "one step model: one speed"
    slow = replace(opened, steps=[{**s, "t_end_s": s["t_start_s"] + 1.6 * (s["t_end_s"] - s["t_start_s"])}
                                  for s in opened.steps])
    words = bench.speed_check(closed, slow)
    assert words and "×1.60" in words
    v = bench.hidden_queue_verdict(bench.run_numbers(closed, 6), bench.run_numbers(opened, 6), x, 6, words)
    assert v.outcome == "undecided" and "Measure again" in v.words


def test_the_lab_page_runs_the_real_engine_and_shows_the_measured_pair(lab_env):
    """On the tiny model: the closed loop, the open load at its throughput and the repeats are stored,
    and the page then shows them as measured, each number beside its verdict, with no exception."""
    from tests.test_lab_pages import commit, page, texts
    at = page("labs/benchmarking/page.py").run()
    at.select_slider(key="bench_clients").set_value(2).run()
    commit(at)
    assert "Simulated" in texts(at) and not list(lab_env.glob("results/*.json"))
    at.button(key="benchmarking__run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert len(list(lab_env.glob("results/closed-*.json"))) == 1
    assert len(list(lab_env.glob("results/run-*.json"))) == bench.REPEATS, "the pair's open run is repeat 1"
    shown = texts(at)
    assert "Measured on this machine's engine" in shown and f"{bench.REPEATS} repeats of" in shown
    assert "Not judged here" in shown, "two clients are a light load: the claim is about near capacity"
