"""Lesson 10's picture: one chat workload through three replicas, routed two ways, and where each
system prompt's requests went. Drawn from the cluster simulator (every replica is the engine's own
scheduler on a virtual clock, step times from a GPU roofline), so the counts and hit rates in the
alt text are this run's. No Streamlit."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from course.pictures import Picture
from analysis.style import layout
from replicas.simulated import SimCluster
from engine.runs.arrivals import build_requests
from engine.core.config import SchedulerPolicy
from engine.sim.simulate import resolve_profile
from engine.runs.workload import WorkloadSpec

PROFILE = "l4:llama-3.1-8b"
REPLICAS = 3
LOAD = 0.8          # the traffic, as a share of what the replicas serve together
ROUTERS = ("round_robin", "prefix_affinity")
# More system prompt tokens than one replica's KV cache holds, so where a prompt goes decides
# whether its blocks are still cached when it comes back.
SPEC = WorkloadSpec(num_requests=240, prompt_lo=32, prompt_hi=96, output_lo=16, output_hi=64,
                    system_prompts=12, system_prompt_tokens=768, seed=3)
POLICY = SchedulerPolicy(max_num_seqs=32, enable_prefix_caching=True, kv_capacity_tokens=8192)


def _spread(requests, choices) -> np.ndarray:
    """(system prompt, replica) -> requests sent there."""
    group: dict[tuple, int] = {}
    prompt_of = {r.id: group.setdefault(tuple(r.prompt_token_ids[:16]), len(group)) for r in requests}
    counts = np.zeros((len(group), REPLICAS), dtype=int)
    for c in choices:
        counts[prompt_of[c.request_id], c.replica] += 1
    return counts


def router_cache() -> Picture:
    """Round-robin against prefix affinity on the same requests: a table of where each system
    prompt went, and the prefix-cache hit rate each gets."""
    profile = resolve_profile(PROFILE)
    alone = SimCluster(profile, POLICY, 1).run(build_requests(replace(SPEC, rate=0)))
    capacity = alone.summary["finished"] / alone.summary["duration_s"]
    requests = build_requests(replace(SPEC, rate=LOAD * REPLICAS * capacity))
    runs = {name: SimCluster(profile, POLICY, REPLICAS, name).run(requests) for name in ROUTERS}
    spreads = {name: _spread(requests, res.choices) for name, res in runs.items()}
    hit = {name: res.summary["prefix_hit_rate"] for name, res in runs.items()}
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=[f"{name.replace('_', ' ')}: hit rate {hit[name]:.0%}" for name in ROUTERS])
    top = max(int(s.max()) for s in spreads.values())
    for col, name in enumerate(ROUTERS, 1):
        counts = spreads[name]
        fig.add_trace(go.Heatmap(z=counts, x=[f"replica {i}" for i in range(REPLICAS)],
                                 y=[f"prompt {k + 1}" for k in range(counts.shape[0])], zmin=0, zmax=top,
                                 colorscale="Blues", showscale=False, text=counts, texttemplate="%{text}",
                                 hovertemplate="%{y} → %{x}: %{z} requests<extra></extra>"), row=1, col=col)
    look = layout("Where each system prompt's requests went",
                  f"{len(requests)} chat requests, {SPEC.system_prompts} system prompts of "
                  f"{SPEC.system_prompt_tokens} tokens, {REPLICAS} replicas at {LOAD:.0%} load. "
                  "A number is requests sent there.", "", "", height=340)
    for key in ("annotations", "xaxis", "yaxis"):
        look.pop(key, None)
    fig.update_layout(look)
    fig.update_yaxes(autorange="reversed")
    held = {n: float(np.mean((spreads[n] > 0).sum(axis=0))) * SPEC.system_prompt_tokens for n in ROUTERS}
    spread_over = {n: float(np.mean((spreads[n] > 0).sum(axis=1))) for n in ROUTERS}
    better = max(ROUTERS, key=lambda n: hit[n])
    alt = (f"Two tables of {SPEC.system_prompts} system prompts by {REPLICAS} replicas, counting the requests "
           f"each router sent where, for the same {len(requests)} requests. Round-robin sends each prompt to "
           f"{spread_over['round_robin']:.1f} replicas on average, so a replica sees {held['round_robin']:,.0f} "
           f"tokens of system prompts; prefix affinity sends each to {spread_over['prefix_affinity']:.1f}, "
           f"{held['prefix_affinity']:,.0f} tokens a replica. Each replica's KV cache holds "
           f"{POLICY.kv_capacity_tokens:,} tokens, running requests included. Hit rate: round-robin "
           f"{hit['round_robin']:.0%}, prefix affinity {hit['prefix_affinity']:.0%}"
           + (f"; {better.replace('_', ' ')} finds more of its prompts still cached." if hit[ROUTERS[0]] != hit[ROUTERS[1]]
              else "; the same."))
    return Picture(fig, alt, "The router decides where each prompt's KV lives: round-robin spreads every system prompt "
                             "over every replica, prefix affinity keeps each on few. The titles give each one's "
                             "hit rate in this run.")


PICTURES = {"router_cache": router_cache}
