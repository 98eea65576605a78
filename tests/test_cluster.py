"""The cluster: the router's policies, the autoscaler's arithmetic, and the simulated cluster's
bookkeeping (every request routed once and served where it was sent; replica-seconds add up)."""
import math

import pytest

from replicas.autoscaler import Autoscaler, AutoscalerSpec
from replicas.router import ReplicaState, Router
from replicas.simulated import SimCluster
from replicas.traffic import ramp, rate_at
from engine.runs.arrivals import build_requests
from engine.core.config import SchedulerPolicy
from engine.sim.simulate import HAND_SET, resolve_profile
from engine.runs.workload import WorkloadSpec

PROFILE = resolve_profile(HAND_SET)


def states(*outstanding, waiting=None, kv=None):
    return [ReplicaState(i, o, (waiting or [0] * len(outstanding))[i], (kv or [0.0] * len(outstanding))[i])
            for i, o in enumerate(outstanding)]


def test_round_robin_takes_turns_blind_to_load():
    r = Router("round_robin")
    assert [r.pick(states(9, 0, 0))[0].name for _ in range(5)] == [0, 1, 2, 0, 1]


def test_least_outstanding_and_least_waiting_kv_read_their_own_numbers():
    assert Router("least_outstanding").pick(states(3, 1, 2))[0].name == 1
    s = states(0, 5, 5, waiting=[4, 1, 1], kv=[0.0, 0.9, 0.2])
    assert Router("least_waiting_kv").pick(s)[0].name == 2       # shortest queue, then least KV


def test_prefix_affinity_follows_the_longest_prefix_within_its_load_bound():
    r = Router("prefix_affinity", load_bound=1.5)
    first, why = r.pick(states(0, 0, 0), [11, 12, 13])
    assert first.name == 0 and why.startswith("no prefix")
    other, _ = r.pick(states(1, 0, 0), [21, 22])                  # another prefix: the least loaded
    assert other.name == 1
    again, why = r.pick(states(1, 1, 0), [11, 12, 99])           # shares two blocks with the first
    assert again.name == 0 and why == "prefix: 2 blocks"
    # replica 0 is far over a fair share (bound: ceil(1.5 * 10 / 3) = 5): the least loaded instead
    over, why = r.pick(states(8, 1, 0), [11, 12, 13])
    assert over.name == 2 and why.startswith("over the load bound")
    assert r.pick(states(2, 2, 2), [11, 12])[0].name == 2         # ...which now owns the prefix


def test_bad_router_and_autoscaler_settings_are_refused_with_the_allowed_range():
    with pytest.raises(ValueError, match="round_robin, least_outstanding"):
        Router("random")
    with pytest.raises(ValueError, match="load_bound must be a number from 1 to 100"):
        Router("prefix_affinity", load_bound=0.5)
    with pytest.raises(ValueError, match="target must be a number from 0.01 to 1"):
        AutoscalerSpec("busy", 1.5).validate()
    with pytest.raises(ValueError, match="metric 'gpu'"):
        AutoscalerSpec("gpu").validate()
    with pytest.raises(ValueError, match="replicas must be a whole number from 1 to 64"):
        SimCluster(PROFILE, replicas=65)


def test_the_autoscaler_works_out_the_count_as_the_hpa_does():
    a = Autoscaler(AutoscalerSpec("waiting", 2.0, max_replicas=10, scale_down_window_s=60))
    assert a.desired(0, current=2, ready=2, per_replica=5.0) == 5             # ceil(2 * 5 / 2)
    assert a.desired(15, current=5, ready=5, per_replica=2.1) == 5            # within the tolerance
    assert a.desired(30, current=5, ready=5, per_replica=0.0) == 5            # down waits for the window
    assert a.desired(80, current=5, ready=5, per_replica=0.0) == 1            # 5 fell out of the window
    assert a.desired(95, current=1, ready=1, per_replica=100.0) == 10         # held to max_replicas


def hand_requests(n=200, **kw):
    spec = dict(num_requests=n, rate=20, prompt_lo=32, prompt_hi=64, output_lo=4, output_hi=12, system_prompts=4,
                system_prompt_tokens=64, seed=3)
    return build_requests(WorkloadSpec(**{**spec, **kw}))


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "least_waiting_kv", "prefix_affinity"])
def test_every_request_is_routed_once_and_served_where_it_was_sent(router):
    reqs = hand_requests()
    res = SimCluster(PROFILE, SchedulerPolicy(enable_prefix_caching=True), 3, router).run(reqs)
    assert sorted(c.request_id for c in res.choices) == sorted(r.id for r in reqs)
    served = {m[0]: name for name, steps in res.steps.items() for s in steps for m in s.members}
    assert served == {c.request_id: c.replica for c in res.choices}
    assert sum(r.routed for r in res.replicas) == len(reqs) == res.summary["finished"]
    assert res.summary["replica_seconds"] == pytest.approx(3 * res.end_s)
    assert [r.id for r in reqs] == [r.id for r in hand_requests()], "the caller's requests are left as they were"
    assert all(not r.output_token_ids for r in reqs)


def test_prefix_affinity_sends_a_conversation_back_to_the_replica_that_holds_its_history():
    reqs = hand_requests(rate=40, conversations=20, turns=5)
    hit = {p: SimCluster(PROFILE, SchedulerPolicy(enable_prefix_caching=True), 4, p).run(reqs).summary["prefix_hit_rate"]
           for p in ("round_robin", "prefix_affinity")}
    assert hit["prefix_affinity"] > hit["round_robin"]


def test_the_autoscaler_adds_replicas_after_their_start_up_and_counts_their_seconds():
    phases = [(30, 2.0), (30, 30.0), (60, 2.0)]
    reqs = ramp(WorkloadSpec(prompt_lo=32, prompt_hi=64, output_lo=8, output_hi=16, seed=1), phases)
    assert rate_at(phases, 45) == 30.0 and rate_at(phases, 500) == 0.0
    spec = AutoscalerSpec("waiting", 2.0, interval_s=5, startup_s=20, max_replicas=6, scale_down_window_s=20)
    res = SimCluster(PROFILE, SchedulerPolicy(), 1, "least_outstanding", autoscaler=spec).run(reqs)
    assert res.summary["finished"] == len(reqs)
    added = [r for r in res.replicas if r.name > 0]
    assert added and all(r.ready_s == r.asked_s + 20 for r in added)
    first_serve = {}
    for c in res.choices:
        first_serve.setdefault(c.replica, c.t_s)
    assert all(first_serve[r.name] >= r.ready_s for r in added if r.name in first_serve)
    assert res.summary["replica_seconds"] == pytest.approx(sum(r.stopped_s - r.asked_s for r in res.replicas))
    assert any(r.stopped_s < res.end_s for r in added), "the quiet end should retire replicas"
    assert max(n + s for _, n, s, _ in res.timeline) <= 6
    assert not math.isnan(res.summary["slo_attainment"])


def test_the_labs_figures_draw_each_replica_and_each_router():
    from analysis import cluster as charts
    reqs = hand_requests(60)
    res = SimCluster(PROFILE, SchedulerPolicy(enable_prefix_caching=True), 3, "prefix_affinity").run(reqs)
    strips = charts.replica_strips(res)
    assert len(strips.data) == 2 * 3                     # a batch and a queue trace per replica
    assert sum(len(t.x) for t in charts.router_choices(res, charts.prefix_groups(res, reqs), "t").data) == len(reqs)
    bars = charts.routing_bars({"round_robin": res, "prefix_affinity": res})
    assert [len(t.x) for t in bars.data] == [2, 2, 2]
    assert charts.routing_bars({}).layout.annotations[0].text      # "no data" note
