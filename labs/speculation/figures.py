"""The speculation lab's charts: speculation on ÷ off case by case, and the share of guesses accepted. No
Streamlit."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from analysis.style import COLORS, empty_figure, layout
from labs.speculation.experiment import case_label


def speedup_chart(table: pd.DataFrame, gpu: pd.DataFrame | None = None, source: str = "measured",
                  gpu_name: str = "") -> go.Figure:
    """ngram ÷ off for each case, as bars: output tok/s at batch 1, decode tok/s at the large batch (the
    part speculation changes there), with the GPU profile's prediction beside; a line at 1 (no change)."""
    title = "Speculation on ÷ off, case by case"
    what = "Above the line at 1 speculation made tokens faster; below it, slower. Good: above 1 where it is used."
    if table.empty:
        return go.Figure(empty_figure(title, what, "case", "ngram ÷ off"))

    def bars(t, name, color):
        labels = [case_label(r.workload, r.batch) for r in t.itertuples()]
        values = [r.speedup if r.batch == 1 else r.decode_speedup for r in t.itertuples()]
        return go.Bar(name=name, x=labels, y=values, marker_color=color, text=[f"{v:.2f}×" for v in values],
                      textposition="outside", hovertemplate="%{x}: %{y:.2f}×<extra>" + name + "</extra>")
    traces = [bars(table, "this machine's engine" if source == "measured" else "this machine's step model, simulated",
                   COLORS["running"])]
    if gpu is not None and not gpu.empty:
        traces.append(bars(gpu, gpu_name or "GPU roofline, simulated", COLORS["points"]))
    return go.Figure(data=traces, layout=layout(title, what, "case", "ngram ÷ off", barmode="group",
                                                shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=1, y1=1,
                                                             line=dict(color="#555", dash="dot"))],
                                                yaxis=dict(rangemode="tozero")))


def acceptance_chart(table: pd.DataFrame, source: str = "measured") -> go.Figure:
    """The share of drafted tokens accepted, by case."""
    title = "How many guesses the model accepted, by workload"
    what = "Accepted ÷ drafted tokens. Good: high. Copying a passage repeats the prompt; free writing rarely does."
    t = table[table.drafted > 0] if not table.empty else table
    if t.empty:
        return go.Figure(empty_figure(title, what, "case", "accepted share"))
    labels = [case_label(r.workload, r.batch).split(" (")[0] for r in t.itertuples()]
    fig = go.Bar(x=labels, y=t.acceptance, marker_color=COLORS["running"],
                 text=[f"{a:.0%} of {d:,}" for a, d in zip(t.acceptance, t.drafted)], textposition="outside",
                 hovertemplate="%{x}: %{y:.0%}<extra></extra>", name=source)
    return go.Figure(data=[fig], layout=layout(title, what, "case", "accepted share",
                                               yaxis=dict(range=[0, 1.1], tickformat=".0%")))
