"""The course's worked examples of serving traffic (lessons 7 to 9): a tail split by prompt length,
starvation under shortest-job-first, and replicas behind a gateway with an autoscaler watching them.
The same simulator as course/examples.py; lessons 7, 8 and 9 run on the step model they are given (the learner's own, on the lesson page).
"""
from __future__ import annotations

import functools

from course.examples import (COURSE_MODEL, QUEUE_SLOTS, QUEUE_SPEC, capacity, mixed, percentile, run)
from engine.runs.build import build_engine
from engine.core.config import EngineConfig, SchedulerPolicy
from engine.core.step_model import StepModel
from engine.runs.workload import WorkloadSpec


# ---- lesson 7: one tail, split by segment -------------------------------------------------------

TAIL_SHORT = WorkloadSpec(num_requests=190, rate=0.95, prompt_kind="uniform", prompt_lo=32, prompt_hi=128,
                          output_kind="uniform", output_lo=8, output_hi=24, seed=7)
TAIL_LONG = WorkloadSpec(num_requests=10, rate=0.05, prompt_kind="uniform", prompt_lo=768, prompt_hi=1024,
                         output_kind="uniform", output_lo=8, output_hi=24, seed=8)
SHORTER_PROMPT_HI = 64    # the optimization: the short prompts' longest, shortened
TAIL_SLOTS = 16
TAIL_LOAD = 0.58           # arrivals (both kinds together) this share of what the engine serves of the mix with
                           # every slot busy; the specs' rates give the two kinds' shares of the arrivals
LONG_PROMPT = 512          # a prompt longer than this is "long" in the split


@functools.lru_cache(maxsize=4)
def tail_capacity(cost: StepModel = COURSE_MODEL) -> float:
    """Requests a second the engine finishes of the mix (TAIL_SHORT and TAIL_LONG) sent all at once, counted
    while every slot is busy (as course.examples.capacity counts one workload's)."""
    requests = mixed(WorkloadSpec(**{**TAIL_SHORT.to_dict(), "rate": 0}),
                     WorkloadSpec(**{**TAIL_LONG.to_dict(), "rate": 0}))
    rows, moments = run(SchedulerPolicy(max_num_seqs=TAIL_SLOTS), None, cost=cost, requests=requests)
    full_until = next(m.t_end_s for m in moments if not m.waiting)
    return sum(1 for r in rows if r["finish_s"] <= full_until) / full_until


def tail_rate(cost: StepModel = COURSE_MODEL) -> float:
    """Lesson 7's arrivals a second, both kinds together, on the machine `cost` models."""
    return TAIL_LOAD * tail_capacity(cost)


@functools.lru_cache(maxsize=8)
def tail_run(short_prompt_hi: int = TAIL_SHORT.prompt_hi, cost: StepModel = COURSE_MODEL) -> list[dict]:
    """The mixed workload's request rows at TAIL_LOAD on `cost`; `short_prompt_hi` shrinks the short prompts (a
    speed-up for them only)."""
    scale = tail_rate(cost) / (TAIL_SHORT.rate + TAIL_LONG.rate)
    short = WorkloadSpec(**{**TAIL_SHORT.to_dict(), "prompt_hi": short_prompt_hi, "rate": scale * TAIL_SHORT.rate,
                            "prompt_lo": min(TAIL_SHORT.prompt_lo, short_prompt_hi)})
    long = WorkloadSpec(**{**TAIL_LONG.to_dict(), "rate": scale * TAIL_LONG.rate})
    rows, _ = run(SchedulerPolicy(max_num_seqs=TAIL_SLOTS), None, cost=cost, requests=mixed(short, long))
    return rows


def tail_stats(rows: list[dict]) -> dict:
    ttft = [r["ttft_s"] for r in rows]
    long = [r["ttft_s"] for r in rows if r["prompt_tokens"] > LONG_PROMPT]
    short = [r["ttft_s"] for r in rows if r["prompt_tokens"] <= LONG_PROMPT]
    return {"n": len(rows), "n_long": len(long), "mean": sum(ttft) / len(ttft), "p50": percentile(ttft, 50),
            "p99": percentile(ttft, 99), "short_p50": percentile(short, 50), "short_p99": percentile(short, 99),
            "long_p50": percentile(long, 50), "long_p99": percentile(long, 99)}


# ---- lesson 8: starvation -----------------------------------------------------------------------

STARVE_SPEC = WorkloadSpec(num_requests=240, rate=0, prompt_kind="longtail", prompt_lo=32, prompt_hi=1024,
                           output_kind="uniform", output_lo=8, output_hi=24, seed=9)
STARVE_SLOTS = 8
STARVE_LOAD = 0.9          # arrivals this share of what the engine serves: below capacity, so that a
                           # wait that keeps growing comes from the order, not from overload


@functools.lru_cache(maxsize=8)
def oldest_wait(order: str, cost: StepModel = COURSE_MODEL) -> tuple[list[float], list[float], dict]:
    """Under `order`, with step times from `cost`, after every step: (times, the age of the oldest waiting
    request, that run's longest queue time by prompt)."""
    policy = SchedulerPolicy(max_num_seqs=STARVE_SLOTS, max_num_batched_tokens=256, order=order)
    rate = STARVE_LOAD * capacity(STARVE_SPEC, STARVE_SLOTS, cost)
    rows, moments = run(policy, WorkloadSpec(**{**STARVE_SPEC.to_dict(), "rate": rate}), cost=cost)
    arrived = {r["id"]: r["arrival_s"] for r in rows}
    ages = [max((m.t_end_s - arrived[i] for i in m.waiting), default=0.0) for m in moments]
    longest = max(rows, key=lambda r: r["queue_s"])
    return [m.t_end_s for m in moments], ages, longest


# ---- lesson 9: a gateway, replicas, an autoscaler -------------------------------------------------

REPLICAS = 2
RAMP_AT_S = 40.0           # traffic steps up here
RAMP = (0.6, 1.15)         # arrival rate before and after, as a share of what the replicas serve together
WAITING_ALARM = 4          # the autoscaler's threshold on waiting requests, summed over replicas
ALARM_FOR_S = 10.0         # ... held this long


def ramp_requests(mu: float, replicas: int = REPLICAS) -> list:
    """Traffic at RAMP[0] of the replicas' joint capacity until RAMP_AT_S, then RAMP[1] for as long again."""
    before, after = (share * mu * replicas for share in RAMP)
    first = WorkloadSpec(**{**QUEUE_SPEC.to_dict(), "rate": before, "num_requests": round(before * RAMP_AT_S),
                            "seed": 10})
    second = WorkloadSpec(**{**QUEUE_SPEC.to_dict(), "rate": after, "num_requests": round(after * RAMP_AT_S),
                             "seed": 11})
    late = mixed(second)
    for r in late:
        r.arrival_s += RAMP_AT_S
        r.id = "t" + r.id
    return mixed(first) + late


@functools.lru_cache(maxsize=4)
def gateway_run(cost: StepModel = COURSE_MODEL) -> dict:
    """Requests routed by a gateway to the replica with the fewest requests in it (waiting + running),
    each replica an engine that batches its own with step times from `cost`; sampled every step: each
    replica's waiting and running, and when an autoscaler watching the summed waiting count would ask
    for another replica."""
    mu = capacity(cost=cost)
    engines = [build_engine(EngineConfig(), SchedulerPolicy(max_num_seqs=QUEUE_SLOTS), cost=cost)
               for _ in range(REPLICAS)]
    routed = [0] * REPLICAS
    samples = []           # (t, replica, waiting, running)

    def advance(engine, k, until):
        while engine.clock.now() < until and engine.has_work():
            rec = engine.step()
            if rec is None:
                wake = engine.next_wake_s()
                if wake is None:
                    break
                engine.clock.sleep_until(min(max(wake, engine.clock.now()), until))
                continue
            samples.append((rec.t_end_s, k, len(engine.scheduler.waiting), len(engine.scheduler.running)))
        if engine.clock.now() < until:
            engine.clock.sleep_until(until)

    requests = ramp_requests(mu)
    for r in requests:
        for k, e in enumerate(engines):
            advance(e, k, r.arrival_s)
        load = [len(e.scheduler.waiting) + len(e.scheduler.running) + len(e.pending) for e in engines]
        k = load.index(min(load))
        routed[k] += 1
        engines[k].submit(r)
    end = requests[-1].arrival_s + 1
    for k, e in enumerate(engines):
        advance(e, k, end)
    samples.sort()
    total, alarm, since = {}, None, None
    for t, k, w, _ in samples:
        total[k] = w
        if sum(total.values()) >= WAITING_ALARM:
            since = t if since is None else since
            if alarm is None and t - since >= ALARM_FOR_S:
                alarm = t
        else:
            since = None
    return {"mu": mu, "samples": samples, "routed": routed, "alarm_s": alarm, "end_s": end,
            "rates": tuple(share * mu * REPLICAS for share in RAMP)}
