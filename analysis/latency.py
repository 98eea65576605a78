"""Per-request latency charts: the request timeline (Gantt), latency over time and CDFs.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from engine.core.metrics import UNSERVED
from analysis.style import (COLORS, MAX_POINTS, METRICS, empty_figure, figure, font_px, ghost_line, is_empty, layout,
                            mark_legend, num, slo_line, stride, time_marks)
from analysis.tables import Tables

PREFILL_PATTERN = "/"   # prefill bars are hatched, so they differ from decode without colour


def request_timeline(requests: pd.DataFrame, now_s: float | None = None,
                     limit: int = 200, presenter: bool = False, x_range=None,
                     marks: pd.DataFrame | None = None) -> dict:
    """Gantt chart, one row per request: queued -> prefill -> decode.

    Shows the requests being served at now_s (default: the latest time in the table) and the
    most recent arrivals, `limit` rows in all, in order of arrival: past capacity the newest
    arrivals are all still waiting, and the ones in the batch would otherwise drop out of view.
    Phases still open at now_s are drawn up to now_s, so this works live and while scrubbing a
    replay. Rejected and failed requests get a red x at their arrival.
    x_range: (lo, hi) seconds to hold the x-axis still (style.live_x_range).
    marks: setting changes, drawn as dashed lines like on the other time charts.
    """
    texts = ("Request timeline",
             "Grey = queued, hatched dark = prefill, light = decode. "
             "Good: short grey bars; long grey bars mean requests wait for a slot.",
             "time (s)", "request")   # title, what good looks like, x and y axis
    if is_empty(requests, "id", "arrival_s"):
        return empty_figure(*texts, presenter)
    arrival_all = num(requests, "arrival_s")
    if now_s is None:
        known = [arrival_all] + [num(requests, c) for c in
                                 ("first_scheduled_s", "first_token_s", "finish_s")]
        now_s = float(np.nanmax(np.concatenate(known)))
    df = requests[arrival_all <= now_s]
    if len(df) == 0:
        return empty_figure(*texts, presenter)
    df = df.iloc[np.argsort(num(df, "arrival_s"), kind="stable")]
    limit = max(1, limit)
    if len(df) > limit:
        serving = (num(df, "first_scheduled_s") <= now_s) & ~(num(df, "finish_s") <= now_s)
        kept = np.flatnonzero(serving)[-limit:]
        room = limit - len(kept)
        recent = np.flatnonzero(~serving)[-room:] if room else kept[:0]
        df = df.iloc[np.sort(np.concatenate([kept, recent]))]

    ids = df["id"].astype(str).to_numpy()
    arrival = num(df, "arrival_s")
    # a phase that has not started yet (NaN or after now) starts "at now" and so has no length
    sched, first, finish = (np.minimum(np.nan_to_num(num(df, c), nan=now_s), now_s)
                            for c in ("first_scheduled_s", "first_token_s", "finish_s"))
    status = (df["status"].astype(str).to_numpy() if "status" in df.columns
              else np.full(len(df), "finished"))
    bad = np.isin(status, UNSERVED)
    preempt = num(df, "preemptions")

    def bar(name, start, end, color, pattern=""):
        length = np.where(bad, np.nan, end - start)
        length[length <= 0] = np.nan
        return dict(
            type="bar", name=name, orientation="h", y=ids, x=length, base=start,
            marker=dict(color=color, pattern=dict(shape=pattern, fgcolor="white")),
            customdata=np.stack([status, np.nan_to_num(preempt)], axis=-1),
            hovertemplate=(f"<b>%{{y}}</b> {name}<br>from %{{base:.2f}} s for %{{x:.3f}} s"
                           "<br>%{customdata[0]}, preempted %{customdata[1]}×<extra></extra>"),
        )

    errors = (df["error"].fillna("").astype(str).to_numpy() if "error" in df.columns
              else np.full(len(df), ""))
    rejected = dict(
        type="scatter", name="rejected / failed", x=arrival[bad], y=ids[bad], mode="markers",
        showlegend=bool(bad.any()),
        marker=dict(symbol="x", size=9, color=COLORS["bad"]),
        customdata=np.stack([status[bad], errors[bad]], axis=-1),
        hovertemplate="<b>%{y}</b> %{customdata[0]} at %{x:.2f} s<br>%{customdata[1]}<extra></extra>",
    )
    px = font_px(presenter)
    row_px = px + 4
    plot_px = min(780, max(200, row_px * len(df)))
    shapes, notes = time_marks(marks, np.concatenate([arrival, finish]), x_range, presenter)
    out = layout(*texts, barmode="overlay", bargap=0.15, presenter=presenter, x_range=x_range,
                 shapes=shapes, annotations=notes,
                 yaxis=dict(type="category", autorange="reversed",
                            showticklabels=plot_px / len(df) >= row_px))   # ids only where they fit
    out["height"] = plot_px + out["margin"]["t"] + out["margin"]["b"]
    return figure(
        data=[bar("queued", arrival, sched, COLORS["queued"]),
              bar("prefill", sched, first, COLORS["prefill"], PREFILL_PATTERN),
              bar("decode", first, finish, COLORS["decode"]), rejected, *mark_legend(shapes)],
        layout=out,
    )


def _rolling_p95(requests: pd.DataFrame, metric: str, window: int):
    """(time, rolling p95 over the last `window` requests) for a previous run's ghost line."""
    _, time_col, scale, _ = METRICS[metric]
    if is_empty(requests, metric, time_col):
        return np.zeros(0), np.zeros(0)
    t, y = num(requests, time_col), num(requests, metric) * scale
    ok = ~(np.isnan(t) | np.isnan(y))
    order = np.argsort(t[ok], kind="stable")
    t, y = t[ok][order], y[ok][order]
    line = stride(len(t))
    return t[line], pd.Series(y).rolling(window, min_periods=1).quantile(0.95).to_numpy()[line]


def latency_over_time(requests: pd.DataFrame, metric: str = "ttft_s", slo: float | None = None,
                      marks: pd.DataFrame | None = None, window: int = 50, presenter: bool = False,
                      x_range=None, ghost: Tables | None = None,
                      ghost_name: str = "previous run") -> dict:
    """One point per request (TTFT at its first token, TPOT at its finish), with rolling
    p50 and p95 over the last `window` requests, the SLO line and policy-change marks.

    slo is in seconds, like the columns. x_range: (lo, hi) seconds to hold the x-axis still.
    ghost: another run's tables (the previous or a pinned run): its p95 drawn faint grey.
    """
    label, time_col, scale, unit = METRICS[metric]
    title = f"{label} over time"
    good = ("Good: the p95 line stays under the SLO; after a policy change (dashed) "
            "watch whether p95 bends down.")
    xlabel, ylabel = "time (s)", f"{label} ({unit})"
    if is_empty(requests, metric, time_col):
        return empty_figure(title, good, xlabel, ylabel, presenter)
    t, y = num(requests, time_col), num(requests, metric) * scale
    ok = ~(np.isnan(t) | np.isnan(y))
    if not ok.any():
        return empty_figure(title, good, xlabel, ylabel, presenter)
    order = np.argsort(t[ok], kind="stable")
    t, y = t[ok][order], y[ok][order]
    ids = requests["id"].astype(str).to_numpy()[ok][order] if "id" in requests.columns else None

    rolling = pd.Series(y).rolling(window, min_periods=1)
    p50, p95 = rolling.quantile(0.5).to_numpy(), rolling.quantile(0.95).to_numpy()
    pts = stride(len(t), 5 * MAX_POINTS)  # WebGL copes with many points, but not unlimited
    line = stride(len(t))
    shapes, notes = time_marks(marks, t, x_range, presenter)
    legend = mark_legend(shapes)
    if slo is not None:
        shape, note = slo_line(slo * scale, f"SLO {slo * scale:g} {unit}", presenter=presenter)
        shapes.append(shape)
        notes.append(note)
    gx, gy = _rolling_p95(ghost.requests, metric, window) if ghost is not None else ((), ())
    behind = [ghost_line(gx, gy, f"{ghost_name} (p95)")] if len(gx) else []
    return figure(
        data=[
            *behind,
            dict(type="scattergl", name="each request", x=t[pts], y=y[pts], mode="markers",
                 marker=dict(size=5, color=COLORS["points"], opacity=0.45),
                 text=None if ids is None else ids[pts],
                 hovertemplate=f"%{{text}}<br>{label} %{{y:.3f}} {unit} at %{{x:.2f}} s"
                               "<extra></extra>"),
            dict(type="scatter", name=f"p50 (last {window})", x=t[line], y=p50[line], mode="lines",
                 line=dict(color=COLORS["p50"], width=2, dash="dot")),
            dict(type="scatter", name=f"p95 (last {window})", x=t[line], y=p95[line], mode="lines",
                 line=dict(color=COLORS["p95"], width=2)),
            *legend,
        ],
        # The y-axis fits the points and reaches the SLO line, which the subtitle asks the reader to
        # compare p95 with: a target above every point so far is still drawn.
        layout=layout(title, good, xlabel, ylabel, shapes=shapes, annotations=notes,
                      yaxis=None if slo is None else dict(autorangeoptions=dict(include=[0, slo * scale])),
                      presenter=presenter, x_range=x_range),
    )


def gauges_over_time(readings: pd.DataFrame, engine: str, presenter: bool = False, x_range=None) -> dict:
    """Running and waiting as an engine's metrics page reported them, one reading a row
    (columns t, running, waiting). A gauge the engine does not publish is left out."""
    title = "Running and waiting"
    good = (f"From the metrics page of {engine}. Good: waiting stays near 0; "
            "a waiting line that climbs means requests arrive faster than the engine admits them.")
    xlabel, ylabel = "time (s)", "requests"
    drawn = [n for n in ("running", "waiting") if not is_empty(readings, "t", n) and readings[n].notna().any()]
    if not drawn:
        return empty_figure(title, good, xlabel, ylabel, presenter)
    t = num(readings, "t")
    return figure(
        data=[dict(type="scatter", name=n, x=t, y=num(readings, n), mode="lines",
                   line=dict(color=COLORS[n], width=2, shape="hv")) for n in drawn],
        layout=layout(title, good, xlabel, ylabel, presenter=presenter, x_range=x_range,
                      yaxis=dict(rangemode="tozero")),
    )


def _buckets(values: pd.Series, n: int = 4) -> pd.Series:
    """Split a numeric column into n quantile buckets labelled by their ranges."""
    edges = np.unique(np.nanquantile(values.to_numpy(dtype=float, na_value=np.nan),
                                     np.linspace(0, 1, n + 1)))
    if len(edges) < 2:
        return values.astype(str)
    labels = [f"{edges[i]:g}–{edges[i + 1]:g}" for i in range(len(edges) - 1)]
    return pd.cut(values, edges, labels=labels, include_lowest=True).astype(str)


def cdf(requests: pd.DataFrame, metric: str = "ttft_s", by=None,
        slo: float | None = None, presenter: bool = False) -> dict:
    """Empirical CDF of a per-request metric, one curve per group.

    by: None, a column name (e.g. "tenant"), or a Series aligned with requests. A numeric
    column with many values (e.g. "prompt_tokens") is split into 4 quantile buckets.
    """
    label, _, scale, unit = METRICS.get(metric, (metric, None, 1.0, ""))
    title = f"{label} distribution (CDF)"
    good = ("Read across at 0.95 for p95. Good: curves rise steeply and early; "
            "a long flat tail to the right is the slow minority.")
    xlabel, ylabel = f"{label} ({unit})" if unit else label, "share of requests ≤ x"
    if is_empty(requests, metric):
        return empty_figure(title, good, xlabel, ylabel, presenter)
    values = pd.Series(num(requests, metric) * scale, index=requests.index)
    if by is None:
        groups = pd.Series("all", index=requests.index)
    else:
        groups = requests[by] if isinstance(by, str) else pd.Series(by, index=requests.index)
        if pd.api.types.is_numeric_dtype(groups) and groups.nunique() > 8:
            groups = _buckets(groups)
        groups = groups.astype(str)
    traces = []
    dashes = ("solid", "dash", "dot", "dashdot")   # curves differ without colour too
    for name, vals in values.groupby(groups, sort=True):
        v = np.sort(vals.dropna().to_numpy())
        if len(v) == 0:
            continue
        idx = stride(len(v), 400)
        traces.append(dict(
            type="scatter", name=f"{name} (n={len(v)})", x=v[idx], y=(idx + 1) / len(v), mode="lines",
            line_shape="hv", line=dict(dash=dashes[len(traces) % len(dashes)]),
            hovertemplate=f"{name}: %{{y:.0%}} of requests ≤ %{{x:.3f}} {unit}<extra></extra>"))
    if not traces:
        return empty_figure(title, good, xlabel, ylabel, presenter)
    shapes, notes = [], []
    if slo is not None:
        shape, note = slo_line(slo * scale, f"SLO {slo * scale:g} {unit}", vertical=True,
                               presenter=presenter)
        shapes, notes = [shape], [note]
    return figure(data=traces, layout=layout(
        title, good, xlabel, ylabel, yaxis=dict(range=[0, 1.02], tickformat=".0%"),
        shapes=shapes, annotations=notes, presenter=presenter))
