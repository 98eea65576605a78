"""One request generator: the same seed and workload settings give the same requests whether
they are drawn live, step by step (the Playground), or all at once (the CLI and the labs)."""
import json
import math
import time

import pytest

from engine.runs.arrivals import ArrivalFeed, build_requests
from engine.cli import main
from engine.core.config import SchedulerPolicy
from engine.runs.live import LiveRun
from engine.runs.workload import PromptMaker, WorkloadSpec

SPECS = [
    WorkloadSpec(num_requests=40, rate=6, burstiness=2.0, prompt_lo=20, prompt_hi=200, output_kind="longtail",
                 output_lo=4, output_hi=90, tenants=3, seed=11),
    WorkloadSpec(num_requests=12, rate=0, prompt_kind="short_plus_long", prompt_lo=10, prompt_hi=300, seed=2),
    WorkloadSpec(num_requests=10, rate=2, burstiness=0.5, tenants=2, seed=0, start_s=3.0, id_prefix="q"),
]


def described(requests) -> list[tuple]:
    return [(r.id, round(r.arrival_s, 6), r.prompt_tokens, r.max_new_tokens, r.tenant, r.priority,
             tuple(r.prompt_token_ids)) for r in requests]


@pytest.mark.parametrize("spec", SPECS)
def test_drawing_step_by_step_gives_the_same_requests_as_all_at_once(spec):
    feed = ArrivalFeed(spec)
    live, t = [], 0.0
    while not feed.exhausted:
        live += feed.due(t)
        t += 0.037
    assert described(live) == described(build_requests(spec))


def test_the_same_with_real_prompts():
    from engine.model.model import load_model
    prompts = PromptMaker(load_model("tiny").tokenizer)
    feed, live = ArrivalFeed(SPECS[0], prompts), []
    for t in range(100):
        live += feed.due(t * 0.5)
    assert described(live) == described(build_requests(SPECS[0], prompts))


def test_a_live_run_the_cli_and_build_requests_draw_the_same_workload(tmp_path):
    spec = WorkloadSpec(num_requests=15, rate=8, burstiness=1.5, prompt_lo=16, prompt_hi=64,
                        output_lo=2, output_hi=8, tenants=2, seed=5)
    live = LiveRun(SchedulerPolicy(), spec)             # the cost model on a virtual clock
    live.start()
    deadline = time.monotonic() + 60
    while live.state != "finished" and time.monotonic() < deadline:
        time.sleep(0.02)
    live.stop()
    assert live.state == "finished"
    drawn = described(build_requests(spec))
    assert described(live.engine.requests.values()) == drawn

    out = tmp_path / "run"
    assert main(["run", "--cost-model", "--out", str(out), "--num-requests", "15", "--rate", "8",
                 "--burstiness", "1.5", "--prompt-len", "16", "64", "--output-len", "2", "8",
                 "--tenants", "2", "--seed", "5"]) == 0
    lines = [json.loads(line) for line in (out / "workload.jsonl").read_text().splitlines()]
    assert [(d["id"], d["arrival_s"], len(d["prompt_token_ids"]), d["max_new_tokens"], d["tenant"],
             d["priority"], tuple(d["prompt_token_ids"])) for d in lines] == drawn


# ----------------------------------------------------------------------------- continuous traffic

ENDLESS = WorkloadSpec(continuous=True, num_requests=5, rate=50, prompt_lo=8, prompt_hi=32, seed=4)


def test_continuous_traffic_never_runs_out_and_draws_what_a_long_finite_workload_draws():
    feed, drawn, t = ArrivalFeed(ENDLESS), [], 0.0
    while len(drawn) < 400:               # far past num_requests, which continuous traffic ignores
        assert not feed.exhausted
        drawn += feed.due(t)
        t += 0.25
    finite = build_requests(WorkloadSpec(**{**ENDLESS.to_dict(), "continuous": False,
                                            "num_requests": len(drawn)}))
    assert described(drawn) == described(finite)


def test_an_endless_workload_cannot_be_drawn_all_at_once():
    with pytest.raises(ValueError, match=r"continuous traffic \(continuous=true, rate 50 req/s\) "
                                         r"never runs out.*continuous=false with num_requests"):
        build_requests(ENDLESS)
    with pytest.raises(ValueError, match="never runs out"):
        ArrivalFeed(ENDLESS).due(math.inf)


def test_continuous_at_rate_0_is_one_batch_of_num_requests():
    spec = WorkloadSpec(continuous=True, rate=0, num_requests=7)
    assert not spec.endless
    assert len(build_requests(spec)) == 7


def test_the_cli_refuses_continuous_traffic_with_a_clear_error(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--cost-model", "--out", str(out), "--continuous", "--rate", "3"]) == 2
    err = capsys.readouterr().err
    assert "error: continuous traffic (continuous=true, rate 3 req/s) never runs out" in err
    assert not out.exists()


def test_real_prompts_and_stand_ins_draw_the_same_lengths_arrivals_and_tenants():
    """A simulated run (stand-in prompt ids) draws the requests the real run (the model's own text)
    draws: the prompt's content comes from a stream of its own. Prompts here are longer than the
    chat template, which sets a real prompt's shortest length."""
    from engine.model.model import load_model
    spec = WorkloadSpec(num_requests=40, rate=5, prompt_kind="longtail", prompt_lo=64, prompt_hi=900,
                        output_lo=8, output_hi=64, tenants=3, burstiness=2, seed=4)
    drawn = lambda rs: [(r.id, r.prompt_tokens, r.max_new_tokens, r.arrival_s, r.tenant) for r in rs]  # noqa: E731
    real = build_requests(spec, PromptMaker(load_model("tiny").tokenizer))
    assert drawn(real) == drawn(build_requests(spec))
    assert real[0].prompt_token_ids != build_requests(spec)[0].prompt_token_ids    # the content does differ
