"""The cluster's charts: routers compared, the router's choices, each replica's batch and queue
(small multiples) and replicas over time. ClusterResult in, a plotly figure out; no Streamlit."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.style import COLORS, REQUEST_COLORS, empty_figure, layout, room_above
from replicas.result import ClusterResult
from replicas.traffic import rate_at



def _grid_layout(title: str, subtitle: str, xlabel: str, ylabel: str, **kw) -> dict:
    """layout for a figure of subplots: their titles are annotations, and their axes are
    set up already, so this leaves both alone."""
    out = layout(title, subtitle, xlabel, ylabel, **kw)
    for key in ("annotations", "shapes", "xaxis", "yaxis"):
        out.pop(key)
    return out


def routing_bars(runs: dict[str, ClusterResult]) -> go.Figure:
    """p95 TTFT, prefix hit rate and load imbalance, one bar per router."""
    if not runs:
        return go.Figure(empty_figure("Routers compared", "No runs yet.", "", ""))
    names = list(runs)
    # each title in two short lines: three side by side on a phone's chart are about 100 px wide each
    fig = make_subplots(rows=1, cols=3, subplot_titles=("p95 TTFT (s)<br>lower is better",
                                                        "prefix hit rate<br>higher is better",
                                                        "load imbalance<br>1.0 is even"))
    colors = [REQUEST_COLORS[i % len(REQUEST_COLORS)] for i in range(len(names))]
    for col, key, fmt in ((1, "ttft_p95_s", ".2f"), (2, "prefix_hit_rate", ".2f"), (3, "load_imbalance", ".2f")):
        values = [runs[n].summary[key] for n in names]
        fig.add_trace(go.Bar(x=names, y=values, marker_color=colors, text=[f"{v:{fmt}}" for v in values],
                             textposition="outside", showlegend=False, cliponaxis=False), row=1, col=col)
        fig.update_yaxes(room_above(max(values, default=0.0)), row=1, col=col)   # the values above the bars
    out = _grid_layout(f"{len(names)} routers, one shared-prefix workload",
                       "The same requests for every router. Good: a low p95 TTFT with a high hit rate "
                       "and an imbalance near 1.", "", "", height=420)
    out["margin"]["t"] += 36                  # the subplot titles' two lines, above the plots
    fig.update_layout(out)
    return fig


def prefix_groups(res: ClusterResult, requests) -> dict[str, int]:
    """Each request's system prompt, as a number (its first 16 tokens told apart), for colouring."""
    seen: dict[tuple, int] = {}
    return {r.id: seen.setdefault(tuple(r.prompt_token_ids[:16]), len(seen)) for r in requests}


def router_choices(res: ClusterResult, groups: dict[str, int], title: str) -> go.Figure:
    """Where the router sent each request over time, coloured by the request's system prompt."""
    if not res.choices:
        return go.Figure(empty_figure(title, "No requests.", "time (s)", "replica"))
    t = np.array([c.t_s for c in res.choices])
    rep = np.array([c.replica for c in res.choices])
    g = np.array([groups.get(c.request_id, 0) for c in res.choices])
    jitter = (np.array([hash(c.request_id) % 1000 for c in res.choices]) / 1000 - 0.5) * 0.6
    traces = [go.Scattergl(x=t[g == k], y=rep[g == k] + jitter[g == k], mode="markers", name=f"system prompt {k + 1}",
                           marker=dict(size=4, color=REQUEST_COLORS[k % len(REQUEST_COLORS)]),
                           hovertemplate="%{x:.1f} s → replica %{customdata}<extra></extra>", customdata=rep[g == k])
              for k in sorted(set(g.tolist()))]
    return go.Figure(traces, layout(title, "A dot per request on the replica chosen; colour = its system "
                                            "prompt. Good for the cache: each colour on few replicas.",
                                            "time (s)", "replica", yaxis=dict(dtick=1), height=420))


def replica_strips(res: ClusterResult, bins: int = 120, title: str = "Each replica's batch and queue") -> go.Figure:
    """Small multiples, one strip per replica: the batch size of its steps (bars) and its waiting
    queue (line) over time, binned."""
    names = [r.name for r in res.replicas if res.steps.get(r.name)]
    if not names:
        return go.Figure(empty_figure(title, "No steps.", "time (s)", "requests"))
    shown = names[:8]
    end = max(res.end_s, 1e-9)
    edges = np.linspace(0, end, bins + 1)
    fig = make_subplots(rows=len(shown), cols=1, shared_xaxes=True, vertical_spacing=0.02,
                        row_titles=[f"r{n}" for n in shown])
    top = 1
    for i, name in enumerate(shown, 1):
        steps = res.steps[name]
        t = np.array([s.t_start_s for s in steps])
        which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
        count = np.bincount(which, minlength=bins)
        batch = np.bincount(which, weights=[s.running for s in steps], minlength=bins) / np.maximum(count, 1)
        waiting = np.bincount(which, weights=[s.waiting for s in steps], minlength=bins) / np.maximum(count, 1)
        top = max(top, float(batch.max()), float(waiting.max()))
        mid = (edges[:-1] + edges[1:]) / 2
        fig.add_trace(go.Bar(x=mid, y=batch, marker_color=COLORS["running"], name="batch (running)",
                             showlegend=i == 1, width=end / bins), row=i, col=1)
        fig.add_trace(go.Scatter(x=mid, y=waiting, mode="lines", line=dict(color=COLORS["waiting"], width=1.5),
                                 name="waiting", showlegend=i == 1), row=i, col=1)
    fig.update_yaxes(range=[0, top * 1.05], showticklabels=False)
    fig.update_xaxes(title_text="time (s)", row=len(shown), col=1)
    fig.update_layout(_grid_layout(title, "A strip per replica" + (f" (8 of {len(names)})" if len(names) > 8 else "")
                                   + ": bars = requests in its steps, line = its queue. Good: full bars, a flat line.",
                                   "time (s)", ""),
                      height=90 + 70 * len(shown), bargap=0)
    return fig


def replicas_over_time(runs: dict[str, ClusterResult], phases, names: dict | None = None) -> go.Figure:
    """Replicas (ready and starting) over time under each autoscaler (named by `names`), and the traffic."""
    names = names or {}
    title = "Replicas over time"
    if not runs:
        return go.Figure(empty_figure(title, "No runs yet.", "time (s)", "replicas"))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    dashes = {"busy": "solid", "waiting": "dash"}
    for metric, res in runs.items():
        t = [0.0] + [x[0] for x in res.timeline]
        n = [len([r for r in res.replicas if r.asked_s == 0])] + [x[1] + x[2] for x in res.timeline]
        fig.add_trace(go.Scatter(x=t, y=n, mode="lines", line_shape="hv", name=names.get(metric, metric),
                                 line=dict(width=3, dash=dashes.get(metric))), secondary_y=False)
    end = sum(s for s, _ in phases)
    ts = np.linspace(0, end, 400)
    fig.add_trace(go.Scatter(x=ts, y=[rate_at(phases, x) for x in ts], mode="lines", name="traffic (req/s)",
                             line=dict(color="#999", width=1.5), fill="tozeroy", fillcolor="rgba(150,150,150,0.15)"),
                  secondary_y=True)
    fig.update_layout(_grid_layout(title, "Replicas asked for (ready or still starting) by each autoscaler, over "
                                   "the traffic ramp (grey, right axis). Good: replicas that follow the traffic.",
                                   "time (s)", "replicas", height=380))
    fig.update_xaxes(title_text="time (s)")
    fig.update_yaxes(title_text="requests/s", secondary_y=True, rangemode="tozero")
    fig.update_yaxes(rangemode="tozero", secondary_y=False)
    return fig
