"""A real cluster: the same router (and autoscaler) in front of real engine servers.

`Servers(n, ...)` starts n `python -m engine serve` processes on this machine, each on a free
port of 127.0.0.1, and stops them (only them) at the end; any OpenAI-compatible endpoints can
stand in for them (`run_real(urls, ...)`). The router runs in the client that sends the traffic:
each request, at its arrival time, goes to the replica the router picks, as a streamed
/v1/completions call with the prompt's token ids. The router sees what a gateway sees: the
requests it has sent and not had back, and each replica's /metrics page (waiting queue, KV
usage), read every `scrape_s`. TTFT is timed at the client, from the request's arrival.

With an autoscaler, every server is started up front, but a replica takes requests only once the
autoscaler has asked for it and its start-up delay has passed (the delay is imposed here: the
process is already warm); replica-seconds count from the ask, as in the simulation. Busy
fraction is read from each server's /lab/steps (this engine's own endpoint).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time

import httpx2 as httpx
from prometheus_client.parser import text_string_to_metric_families

from engine.cli.flags import policy_flags
from engine.cli.launch import start
from engine.core.config import SchedulerPolicy
from engine.core.kv_cache import block_keys
from engine.core.metrics import SLO
from engine.core.request import Request

from .autoscaler import Autoscaler, AutoscalerSpec
from .result import Choice, ClusterResult, ReplicaLife
from .router import ReplicaState, Router

START_TIMEOUT_S = 300


class Servers:
    """n engine servers on this machine, started and stopped together (a context manager)."""

    def __init__(self, n: int, model: str = "tiny", policy: SchedulerPolicy = SchedulerPolicy(),
                 extra_args: tuple = (), log_dir: str | None = None):
        self.n, self.model, self.policy, self.extra_args = n, model, policy, list(extra_args)
        self.log_dir = log_dir
        self._stack = contextlib.ExitStack()
        self.urls: list[str] = []

    def __enter__(self) -> "Servers":
        flags = ["--model", self.model, *policy_flags(self.policy), *self.extra_args]
        with contextlib.ExitStack() as stack:      # one that fails to start stops them all
            servers = []
            for i in range(self.n):                # all start at once, then each is waited for
                log = os.path.join(self.log_dir, f"replica-{i}.log") if self.log_dir else None
                servers.append(start(flags, env={"BATCHING_LAB_INSTRUCTOR_TOKEN": "cluster"}, log=log))
                stack.callback(servers[-1].stop)
            for server in servers:
                server.wait_until_up(START_TIMEOUT_S)
            self.urls = [server.url for server in servers]
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()               # only the processes started here


def metric_values(text: str) -> dict[str, float]:
    """The /metrics page's samples summed by sample name (over label sets)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


class _Replica:
    def __init__(self, name: int, url: str, life: ReplicaLife):
        self.name, self.url, self.life = name, url, life
        self.outstanding = 0
        self.waiting = 0
        self.kv = 0.0
        self.steps_seen = 0
        self.busy_s = 0.0

    def state(self) -> ReplicaState:
        return ReplicaState(self.name, self.outstanding, self.waiting, self.kv)


async def _scrape(client: httpx.AsyncClient, r: _Replica) -> None:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        m = metric_values((await client.get(r.url + "/metrics", timeout=5)).text)
        r.waiting = int(m.get("vllm:num_requests_waiting", 0))
        r.kv = m.get("vllm:kv_cache_usage_perc", 0.0)


async def _busy(client: httpx.AsyncClient, r: _Replica) -> None:
    """Add the time the replica's engine spent in steps since the last look (its /lab/steps)."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        page = (await client.get(f"{r.url}/lab/steps", params={"since": r.steps_seen, "stream": "false"},
                                 timeout=10)).json()
        r.busy_s += sum(s["t_end_s"] - s["t_start_s"] for s in page["steps"])
        r.steps_seen = page["next"]


async def _send(client: httpx.AsyncClient, r: _Replica, req: Request, model: str, t0: float, row: dict) -> None:
    body = {"model": model, "prompt": req.prompt_token_ids, "max_tokens": req.max_new_tokens, "stream": True,
            "ignore_eos": True, "temperature": 0}
    r.outstanding += 1
    first = None
    tokens = 0
    try:
        async with client.stream("POST", r.url + "/v1/completions", json=body, timeout=600) as resp:
            if resp.status_code != 200:
                row.update(status="failed", error=f"HTTP {resp.status_code}")
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0].get("text") is not None:
                    tokens += 1
                    if first is None:
                        first = time.monotonic() - t0
        end = time.monotonic() - t0
        row.update(status="finished", first_token_s=first, finish_s=end, ttft_s=None if first is None else first - req.arrival_s,
                   e2e_s=end - req.arrival_s, output_tokens=tokens,
                   tpot_s=(end - first) / (req.max_new_tokens - 1) if first is not None and req.max_new_tokens > 1 else None)
    except (httpx.HTTPError, ValueError) as exc:
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        r.outstanding -= 1


async def _run(urls, requests, router: Router, slo: SLO, model: str, scaler: Autoscaler | None,
               scrape_s: float) -> ClusterResult:
    reqs = sorted(requests, key=lambda q: q.arrival_s)
    n0 = len(urls) if scaler is None else scaler.spec.min_replicas
    fleet = [_Replica(i, u, ReplicaLife(i, 0.0, 0.0 if i < n0 else math.inf, stopped_s=None if i < n0 else 0.0))
             for i, u in enumerate(urls)]
    choices, rows, tasks, timeline = [], [], [], []
    block = 16
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None)) as client:
        before = [metric_values((await client.get(u + "/metrics")).text) for u in urls]
        for r in fleet:
            await _busy(client, r)
            r.busy_s = 0.0
        t0 = time.monotonic()
        stop = asyncio.Event()

        async def scraper():
            while not stop.is_set():
                await asyncio.gather(*(_scrape(client, r) for r in fleet if r.life.stopped_s is None))
                await asyncio.sleep(scrape_s)

        async def autoscaler():
            interval = scaler.spec.interval_s
            while not stop.is_set():
                await asyncio.sleep(interval)
                t = time.monotonic() - t0
                live = [r for r in fleet if r.life.stopped_s is None and not r.life.draining]
                ready = [r for r in live if r.life.ready_s <= t]
                await asyncio.gather(*(_busy(client, r) for r in ready))
                if scaler.spec.metric == "busy":
                    values = [min(1.0, (r.busy_s - r.life.busy_at_tick) / interval) for r in ready]
                else:
                    values = [r.waiting for r in ready]
                for r in ready:
                    r.life.busy_at_tick = r.busy_s
                per = sum(values) / len(values) if values else 0.0
                want = min(scaler.desired(t, len(live), len(ready), per), len(fleet))
                for r in [r for r in fleet if r.life.stopped_s is not None][:max(0, want - len(live))]:
                    r.life.asked_s, r.life.ready_s, r.life.stopped_s = t, t + scaler.spec.startup_s, None
                    r.life.draining, r.life.busy_at_tick = False, r.busy_s
                for r in sorted(live, key=lambda r: (r.life.ready_s <= t, r.outstanding, -r.name))[:max(0, len(live) - want)]:
                    r.life.draining, r.life.drain_s = True, t
                timeline.append((t, sum(1 for r in live if r.life.ready_s <= t and not r.life.draining),
                                 sum(1 for r in live if r.life.ready_s > t and not r.life.draining), per))
                for r in fleet:            # a drained replica is gone once its last request is back
                    if r.life.draining and r.outstanding == 0 and r.life.stopped_s is None:
                        r.life.stopped_s = t

        background = [asyncio.create_task(scraper())] + ([asyncio.create_task(autoscaler())] if scaler else [])
        for req in reqs:
            delay = req.arrival_s - (time.monotonic() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            t = time.monotonic() - t0
            ready = [r for r in fleet if r.life.takes_requests(t)] or \
                [min((r for r in fleet if r.life.stopped_s is None and not r.life.draining), key=lambda r: r.life.ready_s)]
            keys = block_keys(req, block, (req.num_tokens - 1) // block) if router.policy == "prefix_affinity" else []
            chosen, why = router.pick([r.state() for r in ready], keys)
            replica = next(r for r in ready if r.name == chosen.name)
            replica.life.routed += 1
            choices.append(Choice(t, req.id, replica.name, why))
            row = {"id": req.id, "arrival_s": req.arrival_s, "prompt_tokens": req.prompt_tokens, "replica": replica.name,
                   "status": "failed", "ttft_s": None, "tpot_s": None, "e2e_s": None, "error": ""}
            rows.append(row)
            tasks.append(asyncio.create_task(_send(client, replica, req, model, t0, row)))
        await asyncio.gather(*tasks)
        end = time.monotonic() - t0
        stop.set()
        for task in background:
            task.cancel()
        await asyncio.gather(*(_busy(client, r) for r in fleet))
        after = [metric_values((await client.get(u + "/metrics")).text) for u in urls]
    lives = []
    for r in fleet:
        life = r.life
        if life.stopped_s is None:
            life.stopped_s = end
        life.busy_s = r.busy_s
        if life.ready_s != math.inf:       # a server never asked for is no replica of this run
            lives.append(life)
    q = sum(a.get("vllm:prefix_cache_queries_total", 0) - b.get("vllm:prefix_cache_queries_total", 0)
            for a, b in zip(after, before))
    h = sum(a.get("vllm:prefix_cache_hits_total", 0) - b.get("vllm:prefix_cache_hits_total", 0) for a, b in zip(after, before))
    return ClusterResult(requests=rows, steps={}, replicas=lives, choices=choices, timeline=timeline, slo=slo,
                         end_s=end, prefix_queries=int(q), prefix_hits=int(h), label=f"real: {len(urls)} servers")


def run_real(urls: list[str], requests: list[Request], router: str = "round_robin", load_bound: float = 1.25,
             slo: SLO = SLO(), model: str = "tiny", autoscaler: AutoscalerSpec | None = None,
             scrape_s: float = 0.25) -> ClusterResult:
    """Send `requests` (token-id prompts, at their arrival times) through the router to `urls`."""
    scaler = Autoscaler(autoscaler) if autoscaler else None
    return asyncio.run(_run(urls, requests, Router(router, load_bound), slo, model, scaler, scrape_s))
