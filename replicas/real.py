"""A real cluster: the same router (and autoscaler) in front of real engine servers.

`Servers(n, ...)` starts n `python -m engine serve` processes on this machine, each on a free
port of 127.0.0.1, and stops them (only them) at the end; any OpenAI-compatible endpoints can
stand in for them (`run_real(urls, ...)`). The router runs in the client that sends the traffic:
each request, at its arrival time, goes to the replica the router picks, as a streamed
/v1/completions call with the prompt's token ids (remote/load.py's client: its TTFT, TPOT and
E2E are engine.core.metrics' definitions on the client's timestamps, TTFT from the request's
arrival). The router sees what a gateway sees: the requests it has sent and not had back, and
each replica's /metrics page (waiting queue, KV usage: remote/prometheus.py), read every `scrape_s`.

With an autoscaler, every server is started up front, but a replica takes requests only once the
autoscaler has asked for it and its start-up delay has passed (the delay is imposed here: the
process is already warm); replica-seconds count from the ask, as in the simulation. Busy
fraction is read from each server's /lab/steps (this engine's own endpoint, remote/lab_stream.py).
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import os

import httpx2 as httpx
import openai

from engine.cli.flags import policy_flags
from engine.cli.launch import start
from engine.core.config import SchedulerPolicy
from engine.core.kv_cache import block_keys
from engine.core.metrics import SLO
from engine.core.request import Request

from remote import prometheus
from remote.lab_stream import LabStream
from remote.load import ClientRecord, now_s, stream_into

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


class _Replica:
    def __init__(self, name: int, url: str, life: ReplicaLife, model: str):
        self.name, self.url, self.life = name, url, life
        self.outstanding = 0
        self.waiting = 0
        self.kv = 0.0
        self.busy_s = 0.0
        self.steps = LabStream(url, keep_steps=1)     # read for the time its engine spent in steps
        self.client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
        self.model = model

    def state(self) -> ReplicaState:
        return ReplicaState(self.name, self.outstanding, self.waiting, self.kv)


async def _metrics(http: httpx.AsyncClient, r: _Replica) -> str:
    return (await http.get(r.url + "/metrics", timeout=5)).text


async def _scrape(http: httpx.AsyncClient, r: _Replica) -> None:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        gauges = prometheus.gauges(await _metrics(http, r))
        r.waiting, r.kv = int(gauges.waiting or 0), gauges.kv_usage or 0.0


def _prefix_counts(text: str) -> tuple[float, float]:
    """The prefix cache's queries and hits so far, from a /metrics page (vLLM's counters)."""
    found = prometheus.values(text)
    return (sum(found.get("vllm:prefix_cache_queries_total", [0.0])),
            sum(found.get("vllm:prefix_cache_hits_total", [0.0])))


async def _busy(r: _Replica) -> None:
    """Add the time the replica's engine spent in steps since the last look (its /lab/steps)."""
    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
        steps, _ = await asyncio.to_thread(r.steps.read_steps)
        r.busy_s += sum(s.t_end_s - s.t_start_s for s in steps)


async def _send(r: _Replica, req: Request, rec: ClientRecord) -> None:
    """The request streamed to replica r by remote/'s client, its times kept in `rec`."""
    r.outstanding += 1
    try:
        await stream_into(rec, r.client, r.model, {"prompt": req.prompt_token_ids, "max_tokens": req.max_new_tokens,
                                                   "temperature": 0}, ignore_eos=True)
    finally:
        r.outstanding -= 1


def _row(req: Request, rec: ClientRecord, replica: int, t0: float) -> dict:
    """The request's row (requests.csv's columns, times from the run's start) and its replica.
    TTFT, TPOT and E2E are engine.core.metrics' definitions, from the client's timestamps."""
    row = rec.row()
    for key in ("first_scheduled_s", "first_token_s", "finish_s"):
        row[key] = None if row[key] is None else row[key] - t0
    return {**row, "id": req.id, "arrival_s": req.arrival_s, "replica": replica}


async def _run(urls, requests, router: Router, slo: SLO, model: str, scaler: Autoscaler | None,
               scrape_s: float) -> ClusterResult:
    reqs = sorted(requests, key=lambda q: q.arrival_s)
    n0 = len(urls) if scaler is None else scaler.spec.min_replicas
    fleet = [_Replica(i, u, ReplicaLife(i, 0.0, 0.0 if i < n0 else math.inf, stopped_s=None if i < n0 else 0.0),
                      model) for i, u in enumerate(urls)]
    choices, sent, tasks, timeline = [], [], [], []
    block = 16
    async with httpx.AsyncClient() as http:
        before = [_prefix_counts(await _metrics(http, r)) for r in fleet]
        for r in fleet:
            await _busy(r)
            r.busy_s = 0.0
        t0 = now_s()                     # remote/'s clock, the one its client times requests on
        stop = asyncio.Event()

        async def scraper():
            while not stop.is_set():
                await asyncio.gather(*(_scrape(http, r) for r in fleet if r.life.stopped_s is None))
                await asyncio.sleep(scrape_s)

        async def autoscaler():
            interval = scaler.spec.interval_s
            while True:
                with contextlib.suppress(asyncio.TimeoutError):     # a look every interval, until the run ends
                    await asyncio.wait_for(stop.wait(), interval)
                if stop.is_set():
                    return
                t = now_s() - t0
                live = [r for r in fleet if r.life.stopped_s is None and not r.life.draining]
                ready = [r for r in live if r.life.ready_s <= t]
                await asyncio.gather(*(_busy(r) for r in ready))
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

        scraping = asyncio.create_task(scraper())
        scaling = asyncio.create_task(autoscaler()) if scaler else None
        for req in reqs:
            delay = req.arrival_s - (now_s() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            t = now_s() - t0
            ready = [r for r in fleet if r.life.takes_requests(t)] or \
                [min((r for r in fleet if r.life.stopped_s is None and not r.life.draining), key=lambda r: r.life.ready_s)]
            keys = block_keys(req, block, (req.num_tokens - 1) // block) if router.policy == "prefix_affinity" else []
            chosen, why = router.pick([r.state() for r in ready], keys)
            replica = next(r for r in ready if r.name == chosen.name)
            replica.life.routed += 1
            choices.append(Choice(t, req.id, replica.name, why))
            rec = ClientRecord(req.id, "", t0 + req.arrival_s)       # TTFT counts from its arrival
            sent.append((req, rec, replica.name))
            tasks.append(asyncio.create_task(_send(replica, req, rec)))
        await asyncio.gather(*tasks)
        end = now_s() - t0
        stop.set()
        scraping.cancel()
        if scaling:
            await scaling                  # it ends at the stop: no look at /lab/steps is left half-read
        await asyncio.gather(*(_busy(r) for r in fleet))
        after = [_prefix_counts(await _metrics(http, r)) for r in fleet]
        for r in fleet:
            await r.client.close()
            r.steps.close()
    lives = []
    for r in fleet:
        life = r.life
        if life.stopped_s is None:
            life.stopped_s = end
        life.busy_s = r.busy_s
        if life.ready_s != math.inf:       # a server never asked for is no replica of this run
            lives.append(life)
    q = sum(a[0] - b[0] for a, b in zip(after, before))
    h = sum(a[1] - b[1] for a, b in zip(after, before))
    rows = [_row(req, rec, replica, t0) for req, rec, replica in sent]
    return ClusterResult(requests=rows, steps={}, replicas=lives, choices=choices, timeline=timeline, slo=slo,
                         end_s=end, prefix_queries=int(q), prefix_hits=int(h), label=f"real: {len(urls)} servers")


def run_real(urls: list[str], requests: list[Request], router: str = "round_robin", load_bound: float = 1.25,
             slo: SLO = SLO(), model: str = "tiny", autoscaler: AutoscalerSpec | None = None,
             scrape_s: float = 0.25) -> ClusterResult:
    """Send `requests` (token-id prompts, at their arrival times) through the router to `urls`."""
    scaler = Autoscaler(autoscaler) if autoscaler else None
    return asyncio.run(_run(urls, requests, Router(router, load_bound), slo, model, scaler, scrape_s))
