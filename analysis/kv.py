"""KV cache use over time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.style import (COLORS, downsample_max, empty_figure, figure, is_empty, layout, mark_legend, num,
                            time_marks)


def kv_usage(steps: pd.DataFrame, marks: pd.DataFrame | None = None, presenter: bool = False,
             x_range=None) -> dict:
    """KV-cache blocks in use as a share of all blocks, with preemptions marked.
    x_range: (lo, hi) seconds to hold the x-axis still."""
    texts = ("KV cache use",
             "Good: high use without touching 100%. Red x = preemption: a request lost its "
             "blocks and must recompute its prompt.",
             "time (s)", "KV blocks used (%)")   # title, what good looks like, x and y axis
    if is_empty(steps, "t_end_s", "kv_used_blocks", "kv_total_blocks"):
        return empty_figure(*texts, presenter)
    t = num(steps, "t_end_s")
    used, total = num(steps, "kv_used_blocks"), num(steps, "kv_total_blocks")
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(total > 0, 100.0 * used / total, np.nan)
    x, (y, used_ds) = downsample_max(t, [pct, used])
    pre = num(steps, "preempted") if "preempted" in steps.columns else np.zeros(len(steps))
    hit = np.nan_to_num(pre) > 0
    shapes, notes = time_marks(marks, t, x_range, presenter)
    return figure(
        data=[
            dict(type="scatter", name="KV used", x=x, y=y, mode="lines", line_shape="hv",
                 line=dict(color=COLORS["kv"], width=2), fill="tozeroy",
                 customdata=used_ds,
                 hovertemplate="%{y:.1f}% (%{customdata:.0f} blocks) at %{x:.2f} s"
                               "<extra></extra>"),
            dict(type="scatter", name="preemption", x=t[hit], y=pct[hit], mode="markers", showlegend=bool(hit.any()),
                 marker=dict(symbol="x", size=9, color=COLORS["bad"]),
                 customdata=pre[hit],
                 hovertemplate="%{customdata:.0f} preempted at %{x:.2f} s<extra></extra>"),
            *mark_legend(shapes),
        ],
        layout=layout(*texts, yaxis=dict(range=[0, 105]), shapes=shapes, annotations=notes,
                      presenter=presenter, x_range=x_range),
    )
