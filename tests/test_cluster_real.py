"""The router in front of real engine servers (two in-process servers of the tiny model)."""
import contextlib

import pytest

from replicas.autoscaler import AutoscalerSpec
from replicas.real import run_real
from engine.runs.arrivals import build_requests
from engine.core.config import SchedulerPolicy
from engine.core.metrics import SLO
from engine.runs.workload import WorkloadSpec
from tests.test_server import serving, tiny  # noqa: F401 (tiny is a fixture)

SPEC = WorkloadSpec(num_requests=16, rate=8, prompt_lo=8, prompt_hi=16, output_lo=3, output_hi=5, system_prompts=2,
                    system_prompt_tokens=48, conversations=4, turns=3, seed=5)


def test_real_replicas_serve_every_request_where_the_router_sent_it(tiny):  # noqa: F811
    reqs = build_requests(SPEC)
    policy = SchedulerPolicy(enable_prefix_caching=True)
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(serving(tiny, policy=policy)) for _ in range(2)]
        urls = [url for url, _ in servers]
        for router in ("round_robin", "prefix_affinity"):
            res = run_real(urls, reqs, router, slo=SLO(60, 60))
            assert res.summary["finished"] == len(reqs), [r["error"] for r in res.requests if r["error"]]
            assert sorted(c.request_id for c in res.choices) == sorted(r.id for r in reqs)
            routed = [sum(c.replica == i for c in res.choices) for i in range(2)]
            if router == "round_robin":
                assert routed == [8, 8]
            assert 0 < res.summary["prefix_hit_rate"] < 1 and res.summary["slo_attainment"] == 1.0
            # each row's times are the client's, on engine.core.metrics' definitions: they add up
            wanted = {r.id: r.max_new_tokens for r in reqs}
            for row in res.requests:
                assert row["output_tokens"] == wanted[row["id"]] and row["ttft_s"] > 0 and row["tpot_s"] > 0
                assert row["e2e_s"] == pytest.approx(row["ttft_s"] + row["tpot_s"] * (row["output_tokens"] - 1))
                assert row["first_token_s"] == pytest.approx(row["arrival_s"] + row["ttft_s"])
            # each replica that was sent requests had its steps read from /lab/steps (prefix affinity may
            # send every request to one replica)
            assert all(life.busy_s > 0 for life, n in zip(res.replicas, routed) if n), (routed, res.replicas)
        # the servers' own pools counted what /metrics said, over both runs
        hits = sum(service.engine.pool.prefix_hits for _, service in servers)
        assert hits > 0
        scaled = run_real(urls, reqs, "least_outstanding", slo=SLO(60, 60),
                          autoscaler=AutoscalerSpec("waiting", 1.0, interval_s=0.5, startup_s=0.5, max_replicas=2))
        assert scaled.summary["finished"] == len(reqs)
        assert all(c.replica == 0 for c in scaled.choices if c.t_s < 0.5), "replica 1 is not there before it is asked for"
