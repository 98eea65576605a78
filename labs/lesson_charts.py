"""Chart builders for the lesson labs: DataFrame in, plotly Figure out (no Streamlit).

Like labs.charts, every figure has a title, axis labels and a subtitle saying what good
looks like, and empty input gives a valid "no data yet" figure. Curves that come from a
model (M/M/1, a linear fit) are drawn dashed and say "model" in their name, beside the
measured points.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.queueing import mm1_time_in_system
from analysis.style import COLORS, MODEL_COLOR, PAIR_COLORS, empty_figure, slo_line, vline, wrapped_layout

# ----------------------------------------------------------------------------- why batch


def amortization(table: pd.DataFrame, bend: int | None = None, fit: dict | None = None) -> go.Figure:
    """Tokens/s (left axis) and ms per token (right axis) against batch size, bend marked."""
    title = "Amortization: one decode step shared by the whole batch"
    good = ("Good: tokens/s climbs steeply while ms per token falls. Past the bend (dashed) doubling "
            "the batch buys less than 20% more throughput.")
    xlabel, ylabel = "batch size (sequences in one decode step)", "tokens / s"
    if table is None or len(table) == 0:
        return empty_figure(title, good, xlabel, ylabel)
    b = table["batch"].to_numpy(float)
    traces = [
        go.Scatter(name="tokens/s (measured)", x=b, y=table["tokens_per_s"], mode="lines+markers",
                   line=dict(color=COLORS["tokens"], width=2.5),
                   hovertemplate="batch %{x}: %{y:.0f} tokens/s<extra></extra>"),
        go.Scatter(name="ms per token (measured)", x=b, y=table["ms_per_token"], mode="lines+markers",
                   yaxis="y2", line=dict(color=COLORS["p95"], width=2),
                   hovertemplate="batch %{x}: %{y:.2f} ms per token<extra></extra>"),
    ]
    if fit and np.isfinite(fit.get("c_ms", math.nan)) and fit["c_ms"] > 0:
        xs = np.geomspace(b.min(), b.max(), 60)
        traces.append(go.Scatter(
            name=f"model: linear fit t = {fit['t0_ms']:.1f} + {fit['c_ms']:.2f}·B ms",
            x=xs, y=1000 * xs / (fit["t0_ms"] + fit["c_ms"] * xs), mode="lines",
            line=dict(color=MODEL_COLOR, width=1.5, dash="dot"),
            hovertemplate="model, batch %{x:.0f}: %{y:.0f} tokens/s<extra></extra>"))
    shapes, notes = [], []
    if bend is not None:
        s, n = vline(bend, f"bend: from batch {bend}, doubling gains < 20%")
        shapes, notes = [s], [n]
    return go.Figure(data=traces, layout=wrapped_layout(
        title, good, xlabel, ylabel, xaxis=dict(type="log", tickvals=b, ticktext=[f"{int(v)}" for v in b]),
        yaxis=dict(rangemode="tozero"),
        yaxis2=dict(title=dict(text="ms per token"), overlaying="y", side="right", rangemode="tozero",
                    showgrid=False),
        margin=dict(l=60, r=60, t=80, b=50), shapes=shapes, annotations=notes))


def step_time(table: pd.DataFrame, fit: dict | None = None) -> go.Figure:
    """Decode step time against batch size, with the straight-line fit drawn as a model."""
    title = "Decode step time against batch size"
    good = ("Good (for batching): a flat start, where extra sequences ride almost free. "
            "The slope is the per-sequence cost that eventually caps throughput.")
    xlabel, ylabel = "batch size", "step time (ms)"
    if table is None or len(table) == 0:
        return empty_figure(title, good, xlabel, ylabel)
    b = table["batch"].to_numpy(float)
    traces = [go.Scatter(name="measured", x=b, y=table["step_ms"], mode="lines+markers",
                         line=dict(color=COLORS["running"], width=2.5),
                         hovertemplate="batch %{x}: %{y:.1f} ms a step<extra></extra>")]
    if fit and np.isfinite(fit.get("c_ms", math.nan)):
        traces.append(go.Scatter(name=f"model: {fit['t0_ms']:.1f} + {fit['c_ms']:.2f}·B ms", x=b,
                                 y=fit["t0_ms"] + fit["c_ms"] * b, mode="lines",
                                 line=dict(color=MODEL_COLOR, width=1.5, dash="dot")))
    return go.Figure(data=traces, layout=wrapped_layout(title, good, xlabel, ylabel, yaxis=dict(rangemode="tozero")))


# ----------------------------------------------------------------------------- costs


def token_gaps(series: dict[str, pd.DataFrame], arrivals: list[float] | None = None) -> go.Figure:
    """Inter-token gaps of the running decodes over time, one colour per run, long-prompt arrivals marked.

    series: {run name: DataFrame with t_s and gap_ms}, e.g. {"chunked prefill off": ..., "on": ...}.
    """
    title = "Inter-token gaps of the running decodes"
    good = ("Each dot is one token of a request that was already decoding. Good: a flat band with no "
            "tall spikes; a spike is every running stream frozen while a long prompt prefills.")
    xlabel, ylabel = "time since the first arrival (s)", "gap since the previous token (ms)"
    traces = []
    for i, (name, df) in enumerate(series.items()):
        if df is None or len(df) == 0:
            continue
        df = df.dropna(subset=["gap_ms"])
        color = PAIR_COLORS[i] if len(series) == 2 else None
        traces.append(go.Scattergl(name=name, x=df["t_s"], y=df["gap_ms"], mode="markers",
                                   marker=dict(size=5, opacity=0.6, color=color),
                                   text=df["id"],
                                   hovertemplate="%{text}: %{y:.0f} ms gap at %{x:.2f} s<extra></extra>"))
    if not traces:
        return empty_figure(title, good, xlabel, ylabel)
    shapes, notes = [], []
    for k, t in enumerate(arrivals or []):
        s, n = vline(t, "long prompt arrives" if k == 0 else "", color="#7f7f7f", dash="dot")
        shapes.append(s)
        notes.append(n)
    return go.Figure(data=traces, layout=wrapped_layout(title, good, xlabel, ylabel, shapes=shapes,
                                                 annotations=notes, yaxis=dict(rangemode="tozero")))


# ----------------------------------------------------------------------------- SLO and goodput


def goodput_vs_rate(table: pd.DataFrame, selected: float | None = None) -> go.Figure:
    """All output tokens/s against tokens/s of requests that met the SLO, per arrival rate."""
    title = "Throughput vs goodput as the arrival rate rises"
    good = ("Good: the green line (tokens from requests within the SLO) hugs the blue one (all tokens). "
            "Where they part, the engine is busy making tokens that arrive too late to count.")
    xlabel, ylabel = "arrival rate (requests / s)", "output tokens / s"
    if table is None or len(table) == 0:
        return empty_figure(title, good, xlabel, ylabel)
    x = table["rate"]
    traces = [
        go.Scatter(name="all output tokens/s", x=x, y=table["output_tok_s"], mode="lines+markers",
                   line=dict(color=COLORS["tokens"], width=2.5)),
        go.Scatter(name="tokens/s within the SLO (useful)", x=x, y=table["useful_tok_s"],
                   mode="lines+markers", line=dict(color=COLORS["goodput"], width=2.5)),
    ]
    shapes, notes = [], []
    if selected is not None:
        s, n = vline(selected, "shown below", color="#999", dash="dot")
        shapes, notes = [s], [n]
    return go.Figure(data=traces, layout=wrapped_layout(title, good, xlabel, ylabel, yaxis=dict(rangemode="tozero"),
                                                 shapes=shapes, annotations=notes))


def slo_scatter(verdicts: pd.DataFrame, ttft_slo_s: float | None, tpot_slo_s: float | None) -> go.Figure:
    """Each finished request at (TTFT, TPOT), green when it met every SLO, red when not."""
    title = "Every request against the SLO box"
    good = "Good: dots inside the box (lower left of both dotted lines) — those requests count toward goodput."
    xlabel, ylabel = "TTFT (s)", "TPOT (ms)"
    if verdicts is None or len(verdicts) == 0:
        return empty_figure(title, good, xlabel, ylabel)
    traces = []
    for ok, name, color in ((True, "met the SLO", COLORS["goodput"]), (False, "missed", COLORS["bad"])):
        d = verdicts[verdicts["met_slo"] == ok]
        traces.append(go.Scatter(name=f"{name} ({len(d)})", x=d["ttft_s"], y=d["tpot_s"] * 1000, mode="markers",
                                 marker=dict(size=7, color=color, opacity=0.75), text=d["id"],
                                 hovertemplate="%{text}: TTFT %{x:.2f} s, TPOT %{y:.0f} ms<extra></extra>"))
    shapes, notes = [], []
    if ttft_slo_s is not None:
        s, n = slo_line(ttft_slo_s, f"TTFT SLO {ttft_slo_s:g} s", vertical=True)
        shapes.append(s)
        notes.append(n)
    if tpot_slo_s is not None:
        s, n = slo_line(tpot_slo_s * 1000, f"TPOT SLO {tpot_slo_s * 1000:g} ms")
        shapes.append(s)
        notes.append(n)
    return go.Figure(data=traces, layout=wrapped_layout(title, good, xlabel, ylabel, shapes=shapes, annotations=notes,
                                                 xaxis=dict(rangemode="tozero"), yaxis=dict(rangemode="tozero")))


# ----------------------------------------------------------------------------- queueing


def time_in_system(points: pd.DataFrame, mu: float, selected: float | None = None) -> go.Figure:
    """Measured mean time in system against utilization, beside the M/M/1 model W = 1/(mu - lambda)."""
    title = "Time in system as utilization rises"
    good = ("Dots: measured on the engine. Dashed: the M/M/1 model for the measured μ — a model, not a "
            "measurement. Good: stay left of where the curves turn steep.")
    xlabel, ylabel = "utilization ρ = λ / μ", "mean time in system W (s)"
    if points is None or len(points) == 0 or not (mu > 0):
        return empty_figure(title, good, xlabel, ylabel)
    rho = np.linspace(0.01, 0.99, 200)
    model_w = mm1_time_in_system(rho * mu, mu)
    measured_max = float(np.nanmax(points["W_s"]))
    traces = [
        go.Scatter(name=f"M/M/1 model, μ = {mu:.2f} req/s", x=rho, y=model_w, mode="lines",
                   line=dict(color=MODEL_COLOR, width=2, dash="dash"),
                   hovertemplate="model: ρ %{x:.0%}, W %{y:.2f} s<extra></extra>"),
        go.Scatter(name="measured mean time in system", x=points["rho"], y=points["W_s"], mode="lines+markers",
                   line=dict(color=COLORS["running"], width=2.5), marker=dict(size=9),
                   hovertemplate="measured: ρ %{x:.0%}, W %{y:.2f} s<extra></extra>"),
        go.Scatter(name="measured mean queue time", x=points["rho"], y=points["queue_mean_s"],
                   mode="lines+markers", line=dict(color=COLORS["waiting"], width=1.5, dash="dot"),
                   hovertemplate="measured: ρ %{x:.0%}, queue %{y:.2f} s<extra></extra>"),
    ]
    shapes, notes = [], []
    if selected is not None:
        s, n = vline(selected, "shown below", color="#999", dash="dot")
        shapes, notes = [s], [n]
    return go.Figure(data=traces, layout=wrapped_layout(
        title, good, xlabel, ylabel, xaxis=dict(range=[0, max(1.0, float(points["rho"].max()) + 0.05)],
                                                tickformat=".0%"),
        yaxis=dict(range=[0, max(3 * measured_max, 4 / mu)]), shapes=shapes, annotations=notes))


# ----------------------------------------------------------------------------- the knee


def knee(table: pd.DataFrame, x: str, knee_value: int | None = None, slo: float | None = None) -> go.Figure:
    """Throughput against a latency percentile, one point per max_num_seqs, the knee starred.

    x: "tpot_p95_ms" or "ttft_p95_s"; slo in the same unit as x.
    """
    label = {"tpot_p95_ms": ("p95 TPOT (ms)", "ms"), "ttft_p95_s": ("p95 TTFT (s)", "s")}[x]
    title = f"Throughput against {label[0].split(' (')[0]}"
    good = ("One point per max_num_seqs. Good: high and to the left. The knee (star) is where the curve "
            "leans right: more latency for little extra height.")
    xlabel, ylabel = label[0], "output tokens / s"
    if table is None or len(table) == 0:
        return empty_figure(title, good, xlabel, ylabel)
    t = table.sort_values("max_num_seqs")
    traces = [go.Scatter(name="measured", x=t[x], y=t["output_tok_s"], mode="lines+markers+text",
                         text=[f"{v}" for v in t["max_num_seqs"]], textposition="top left",
                         line=dict(color=COLORS["running"], width=2), marker=dict(size=8),
                         hovertemplate="max_num_seqs %{text}: %{y:.0f} tok/s at %{x:.2f}<extra></extra>")]
    if knee_value is not None and (t["max_num_seqs"] == knee_value).any():
        k = t[t["max_num_seqs"] == knee_value]
        traces.append(go.Scatter(name=f"knee: max_num_seqs {knee_value}", x=k[x], y=k["output_tok_s"],
                                 mode="markers", marker=dict(symbol="star", size=18, color=COLORS["p95"])))
    shapes, notes = [], []
    if slo is not None:
        s, n = slo_line(slo, f"SLO {slo:g} {label[1]}", vertical=True)
        shapes, notes = [s], [n]
    return go.Figure(data=traces, layout=wrapped_layout(title, good, xlabel, ylabel, shapes=shapes, annotations=notes,
                                                 xaxis=dict(rangemode="tozero"), yaxis=dict(rangemode="tozero")))


# ----------------------------------------------------------------------------- scheduler orders


def tenant_bars(table: pd.DataFrame, metric: str = "ttft_p95_s", slo_by_tenant: dict | None = None) -> go.Figure:
    """Grouped bars: one group per order, one bar per tenant."""
    what = {"ttft_p95_s": "p95 TTFT", "ttft_p50_s": "p50 TTFT"}.get(metric, metric)
    title = f"{what} per tenant under each order"
    good = ("Lower is better. Read across a group to see who an order favours; compare groups to see "
            "what each tenant gains or loses against fcfs.")
    xlabel, ylabel = "admission order", f"{what} (s)"
    if table is None or len(table) == 0:
        return empty_figure(title, good, xlabel, ylabel)
    traces = [go.Bar(name=str(tenant), x=g["order"], y=g[metric],
                     hovertemplate=f"{tenant} under %{{x}}: %{{y:.2f}} s<extra></extra>")
              for tenant, g in table.groupby("tenant", sort=True)]
    return go.Figure(data=traces, layout=wrapped_layout(title, good, xlabel, ylabel, barmode="group",
                                                 xaxis=dict(type="category")))


def oldest_waiting(series: dict[str, pd.DataFrame]) -> go.Figure:
    """Age of the oldest waiting request over time, one line per run (e.g. per order)."""
    title = "How long the oldest waiting request has waited"
    good = ("Good: a saw-tooth that keeps returning to zero. A line that climbs without coming down is a "
            "request being passed over again and again: starvation.")
    xlabel, ylabel = "time since the first arrival (s)", "oldest wait (s)"
    traces = [go.Scatter(name=name, x=df["t_s"], y=df["age_s"], mode="lines", line_shape="hv")
              for name, df in series.items() if df is not None and len(df)]
    if not traces:
        return empty_figure(title, good, xlabel, ylabel)
    return go.Figure(data=traces, layout=wrapped_layout(title, good, xlabel, ylabel, yaxis=dict(rangemode="tozero")))
