"""Counts are invariants: at every step, arrived = waiting + running + finished + rejected + failed +
aborted, and no step runs more requests than its own max_num_seqs, under random policy changes
(max_num_seqs up and down, mode, order, KV capacity) during continuous traffic: in the engine, in
a LiveRun read as the Playground reads it, and through a shared server read as its pages read it."""
import random
import time
from types import SimpleNamespace

import httpx2 as httpx
import pytest

from analysis import frame_metrics
from analysis.tables import TraceTables
from engine.runs.arrivals import ArrivalFeed
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.runs.live import LiveRun
from engine.core.metrics import Counts
from engine.model.model import load_model
from engine.runs.workload import WorkloadSpec
from playground import engines, status
from playground.run import PlaygroundRun
from playground.setup import Setup
from test_server import TOKEN, serving

TRAFFIC = WorkloadSpec(continuous=True, rate=40.0, prompt_lo=16, prompt_hi=300, output_lo=4, output_hi=60,
                       tenants=3)


def random_change(rng: random.Random) -> dict:
    knob = rng.choice(["max_num_seqs", "max_num_seqs", "mode", "order", "kv_capacity_tokens"])
    return {knob: {"max_num_seqs": rng.choice([1, 2, 3, 4, 8, 16, 32]),
                   "mode": rng.choice(["static", "continuous"]),
                   "order": rng.choice(["fcfs", "priority", "sjf", "fair", "edf"]),
                   "kv_capacity_tokens": rng.choice([512, 1024, 2048, 4096])}[knob]}


def check_step(s) -> None:
    """One step record: its counts add up, and its batch and its slots held keep its own limit."""
    n = Counts.of_step(s)
    assert n.adds_up(), f"step {s.step}: {n.text()} does not add up ({n})"
    assert 0 < s.max_num_seqs and len(s.members) <= s.max_num_seqs, f"step {s.step}: batch of {len(s.members)} in {s.max_num_seqs} slots"
    assert s.running <= s.max_num_seqs, f"step {s.step}: {s.running} running in {s.max_num_seqs} slots"


def test_the_engine_counts_add_up_at_every_step_with_rejections_and_aborts():
    rng = random.Random(3)
    eng = build_engine(EngineConfig(), SchedulerPolicy(max_num_seqs=16, max_waiting=60))
    feed = ArrivalFeed(TRAFFIC.changed(rate=25.0, prompt_hi=700))   # some never fit a lowered KV capacity
    for i in range(2000):
        for r in feed.due(eng.clock.now()):
            eng.submit(r)
        if i % 25 == 0:
            eng.set_policy(eng.policy.changed(**random_change(rng)))
        if i % 7 == 0:                                     # a client hangs up: waiting, running or not yet arrived
            live = [*eng.scheduler.waiting, *eng.scheduler.running, *eng.pending]
            if live:
                eng.abort(rng.choice(live), "client disconnected")
        rec = eng.step()
        assert eng.counts().adds_up()
        if rec is None:
            eng.clock.sleep_until(min(t for t in (eng.next_wake_s(), feed.next_s) if t is not None))
            continue
        check_step(rec)
    n = eng.counts()
    assert n.finished and n.rejected and n.aborted and n.waiting
    # the statuses of the requests themselves say the same
    by_status = {}
    for r in eng.requests.values():
        if r not in eng.pending:
            by_status[r.status.value] = by_status.get(r.status.value, 0) + 1
    assert by_status == {k: v for k, v in vars_of(n).items() if v and k != "arrived"}
    # wasted slot-steps: each step against its own limit, never more than its empty slots or its waiting
    assert frame_metrics.wasted_slot_steps(steps_frame(eng.steps)) == sum(
        min(s.max_num_seqs - len(s.members), s.waiting) for s in eng.steps)


def vars_of(n: Counts) -> dict:
    return {f: getattr(n, f) for f in ("arrived", "waiting", "running", "finished", "rejected", "failed", "aborted")}


def steps_frame(steps):
    return TraceTables().steps(list(steps))


def test_a_live_run_counts_add_up_at_every_step_as_the_playground_reads_them():
    """A LiveRun on the cost model, paced fast, steered at random while the page's reads go on:
    every step seen once, each adding up; every snapshot's counts add up, agree with its rows,
    and the status line and headline show those very counts."""
    rng = random.Random(7)
    run = LiveRun(SchedulerPolicy(max_num_seqs=16), TRAFFIC, keep_steps=None)
    tables = TraceTables()
    checked = -1
    setup = Setup(continuous=True, max_num_seqs=16)
    try:
        run.start()
        deadline = time.monotonic() + 60.0              # a busy machine takes longer; a quiet one ~4 s
        changes = 0
        while checked <= 300 or changes <= 40:
            assert time.monotonic() < deadline, f"{checked} steps and {changes} changes in 60 s"
            change = random_change(rng)
            run.set_policy(run.engine.policy.changed(**change))
            changes += 1
            time.sleep(rng.uniform(0.0, 0.05))
            snap = run.snapshot(summary=False)
            for s in snap.steps[checked + 1:]:
                assert s.step == checked + 1, "every step is seen, in order"
                check_step(s)
                checked = s.step
            n = snap.counts
            assert n.adds_up(), n
            statuses = [row["status"] for row in snap.requests]
            assert n.arrived == len(statuses) and n.finished == statuses.count("finished")
            assert n.waiting == statuses.count("waiting") and n.running == statuses.count("running")
            t = tables.update(snap)
            line = status.status_text("running", t, setup.changed(max_num_seqs=snap.policy.max_num_seqs), snap.arrived)
            assert n.text() in line
            h = frame_metrics.headline(t.requests, t.steps, 2.0, 0.5, None, t.retired, t.now())
            assert (h["waiting_now"], h["running_now"]) == (n.waiting, n.running)
    finally:
        run.close()


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", "cpu", "fp32")


def test_pause_stops_the_run_clock_and_its_arrivals(tiny):
    """Paused for a while, the run's clock stands still: no arrivals are due meanwhile, and the step
    after it brings what one step's time brings, not the pause's worth."""
    run = LiveRun(SchedulerPolicy(max_num_seqs=8), WorkloadSpec(continuous=True, rate=20.0, prompt_lo=8,
                                                                prompt_hi=16, output_lo=4, output_hi=8),
                  model=tiny)
    try:
        run.start()
        deadline = time.monotonic() + 30
        while run.feed.count < 5:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        run.pause()
        time.sleep(0.3)                              # the step in progress ends
        before = run.snapshot(summary=False)
        time.sleep(2.0)                              # 40 arrivals' worth at 20 req/s
        after = run.snapshot(summary=False)
        assert after.now_s == before.now_s and after.counts == before.counts and run.feed.count == before.arrived
        steps = len(after.steps)
        run.step_once()
        while len(run.snapshot(summary=False).steps) == steps:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stepped = run.snapshot(summary=False)
        assert stepped.counts.arrived - before.counts.arrived <= 3, "one step's worth of arrivals"
        assert stepped.now_s - before.now_s < 1.0
    finally:
        run.close()


def test_counts_add_up_at_every_step_through_the_shared_server(tiny):
    """Continuous traffic from a Playground on the shared server, the policy changed at random with
    the instructor token, a second client hanging up: every step the server publishes adds up, and
    the Playground's status line shows the shared engine's counts."""
    rng = random.Random(11)
    with serving(tiny, policy=SchedulerPolicy(max_num_seqs=16, kv_capacity_tokens=4096)) as (url, service):
        setup = Setup(continuous=True, rate=25.0, prompt_lo=8, prompt_hi=120, output_lo=4, output_hi=24)
        lab = PlaygroundRun(setup, tiny, engine_choice=engines.SERVER, seat=engines.Seat(url, "playground-amy", TOKEN))
        other = PlaygroundRun(setup.changed(rate=10.0, seed=5), tiny, engine_choice=engines.SERVER,
                              seat=engines.Seat(url, "playground-bo"))
        checked, aborted_once = -1, False
        try:
            lab.start()
            other.start()
            deadline, changes = time.monotonic() + 90.0, 0     # a quiet machine takes ~8 s
            while checked <= 40 or changes <= 12:
                assert time.monotonic() < deadline, f"{checked} steps and {changes} changes in 90 s"
                lab.apply(lab.setup.changed(**random_change(rng)))
                changes += 1
                time.sleep(rng.uniform(0.05, 0.25))
                got = httpx.get(url + "/lab/steps", params={"stream": "false", "since": checked + 1}).json()
                for d in got["steps"]:
                    assert d["step"] == checked + 1, "every step is seen, in order"
                    check_step(SimpleNamespace(**d))
                    checked, last = d["step"], SimpleNamespace(**d)
                if not aborted_once and changes > 6:
                    other.close()                    # hangs up on its requests in flight: aborted
                    aborted_once = True
                snap, tables = lab.read()
                if snap.steps:
                    n = tables.now()
                    assert n.adds_up() and n == Counts.of_step(snap.steps[-1])
                    line = status.status_text("running", tables, lab.setup, lab.arrived, shared=True)
                    assert "shared engine, everyone's requests: " + n.text() in line
            assert Counts.of_step(last).finished > 0
        finally:
            lab.close()
            other.close()
