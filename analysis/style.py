"""Shared look of every chart: palette, layout, the "no data yet" figure, SLO and policy-change lines,
and the small array helpers the builders use. No Streamlit.

A chart of a run (membership, latency, queue, kv) is plotly's own JSON kept as plain dicts:
{"data": [traces], "layout": {...}}, each trace a dict with its "type". Plotly's graph objects
(go.Figure, go.Scatter) check every property as they are built, which was three quarters of a
live page's chart time; plotly.js draws the dicts as they are. st.plotly_chart and
ui.live_chart take them as they are, and go.Figure(fig) checks one (the tests do).

Speed: a live page redraws charts several times a second, so builders work on numpy arrays, draw
many cells with one trace, and downsample long series to at most MAX_POINTS points.

Readable without colour: every builder takes `presenter` (text of at least PRESENTER_FONT_PX
instead of FONT_PX, for a room), and nothing is told by colour alone: lines differ in dash or
mark, cells carry labels, hover text and marks.
"""
from __future__ import annotations

import math
import re
import textwrap

import numpy as np
import pandas as pd

MAX_POINTS = 1500  # most points a line trace gets; longer series are downsampled
NO_DATA = "no data yet"

# Request colours: Paul Tol's "muted" qualitative scheme, told apart with the common colour
# vision deficiencies. analysis/membership.py decides which request gets which.
REQUEST_COLORS = ("#CC6677", "#332288", "#DDCC77", "#117733", "#88CCEE", "#882255", "#44AA99",
                  "#999933", "#AA4499")


def _luminance(hex_color: str) -> float:
    """WCAG relative luminance of "#rrggbb"."""
    channels = [int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def ink_on(hex_color: str) -> str:
    """Black or white, whichever contrasts more with the colour (for text and marks on it)."""
    lum = _luminance(hex_color)
    return "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"


EMPTY_COLOR = "#ececec"
GHOST_COLOR = "rgba(110, 110, 110, 0.45)"  # a previous or pinned run, drawn faintly behind this one

FONT_PX = 12             # the smallest text on any chart
PRESENTER_FONT_PX = 16   # the smallest text in presenter mode
SUBTITLE_WIDTH = 68      # characters per subtitle line at FONT_PX: a half-width chart at 1280 px, or a phone (~5 px each)
TITLE_WIDTH = 48         # characters per title line at FONT_PX + 4 across a phone's chart (~6.7 px each)

COLORS = {
    "waiting": "#d62728",
    "running": "#1f77b4",
    "queued": "#b0b0b0",
    "prefill": "#1f4e9c",
    "decode": "#9cbdf0",
    "p50": "#2a9d8f",
    "p95": "#e76f51",
    "points": "#7f7f7f",
    "tokens": "#1f77b4",
    "goodput": "#2ca02c",
    "finished": "#7f7f7f",
    "kv": "#9467bd",
    "bad": "#d62728",
}

# metric column -> (label, time column it is plotted at, unit scale, unit)
METRICS = {
    "ttft_s": ("TTFT", "first_token_s", 1.0, "s"),
    "tpot_s": ("TPOT", "finish_s", 1000.0, "ms"),
    "e2e_s": ("E2E latency", "finish_s", 1.0, "s"),
    "queue_s": ("Queue time", "first_scheduled_s", 1.0, "s"),
    "itl_s": ("ITL", "token_s", 1000.0, "ms"),       # one gap between tokens, at the later token's time
}


def font_px(presenter: bool = False) -> int:
    """The chart text size: FONT_PX, or PRESENTER_FONT_PX for presenter mode."""
    return PRESENTER_FONT_PX if presenter else FONT_PX


def title_chars(presenter: bool = False) -> int:
    """Characters per title line (the title's font, 4 px above the rest): a phone's chart."""
    return TITLE_WIDTH * (FONT_PX + 4) // (font_px(presenter) + 4)


def subtitle_chars(presenter: bool = False) -> int:
    """Characters per subtitle line on a half-width chart (plotly does not wrap text itself)."""
    return SUBTITLE_WIDTH * FONT_PX // font_px(presenter)


def layout(title: str, subtitle: str, xlabel: str, ylabel: str, xaxis: dict | None = None,
           yaxis: dict | None = None, shapes=(), annotations=(), presenter: bool = False,
           x_range=None, wrap: int | None = None, **extra) -> dict:
    """A chart's layout. Every text size is set here (none below font_px(presenter)).
    x_range: (lo, hi) to hold the x-axis still across refreshes instead of fitting the data.
    wrap: characters per subtitle line (by default subtitle_chars: a phone's or a half-width chart's
    line; a live chart rewraps it to the width it is drawn at, ui/live_chart)."""
    # Everything goes in at construction: no plotly template (validating one costs ~8 ms
    # per figure, and Streamlit applies its own theme anyway) and no fig.update_*/add_*
    # calls afterwards (each one re-walks the figure and costs milliseconds).
    px = font_px(presenter)
    text = dict(size=px)   # tick labels take font's size
    xlines = textwrap.wrap(xlabel, subtitle_chars(presenter)) or [xlabel]   # the axis title's lines, as the subtitle's
    xaxis = dict(title=dict(text="<br>".join(xlines), font=text), **(xaxis or {}))
    if x_range is not None:
        xaxis["range"] = [float(x_range[0]), float(x_range[1])]
    lines = textwrap.wrap(subtitle, wrap or subtitle_chars(presenter)) or [subtitle]
    heading = textwrap.wrap(title, title_chars(presenter)) or [title]     # a long title: two lines on every screen
    bigger = px - FONT_PX                   # larger text needs larger margins
    # the title is pinned to the top; below it go the subtitle's lines (about 1.4 px per px)
    top = max(80, round(34 + 1.4 * (px + 4) * len(heading) + 1.4 * px * len(lines)))
    bottom = 90 + 4 * bigger + round(1.4 * px * (len(xlines) - 1))   # tick labels, axis title, legend
    layout = dict(
        font=dict(size=px),
        title=dict(text="<br>".join(heading), font=dict(size=px + 4), yref="container", y=1, yanchor="top",
                   pad=dict(t=14), subtitle=dict(text="<br>".join(lines), font=text)),
        xaxis=xaxis,
        yaxis=dict(title=dict(text=ylabel, font=text), **(yaxis or {})),
        shapes=list(shapes),
        annotations=list(annotations),
        margin=dict(l=60 + 3 * bigger, r=20, t=top, b=bottom),
        height=300 + top + bottom - 90 + 2 * bigger,
        legend=dict(orientation="h", yref="container", yanchor="bottom", y=0.0,
                    xanchor="left", x=0.0, font=text),
        hoverlabel=dict(font=text),
        hovermode="closest",
    )
    # a chart's own margins, but never less room on top than its title and subtitle lines take
    # (a chart that set t=80 drew a three-line subtitle over its plot)
    margin = {**layout["margin"], **extra.pop("margin", {})}
    margin["t"] = max(margin["t"], top)
    if len(xlines) > 1:                     # and below, room for a wrapped axis title's second line
        margin["b"] = max(margin["b"], bottom)
    layout.update(extra, margin=margin)
    return layout


def live_x_range(now_s: float, span_s: float) -> tuple[float, float]:
    """A live time chart's x-axis: the latest span_s seconds, full width from the start of the
    run (0..span_s until the run is that long), so the axis never rescales as data arrives."""
    hi = max(float(now_s), float(span_s))
    return hi - span_s, hi


def load_x_range(now_s: float, last_s: float | None, busy: bool, span_s: float,
                 min_span_s: float = 5.0) -> tuple[float, float]:
    """A live time chart's x-axis that fits the load it shows: from 0 (or the latest span_s seconds)
    to now while requests are in flight, to the last event once they are done (a 10 s load reads
    0-10 s, not 0-120 s), and never narrower than min_span_s."""
    hi = float(now_s) if busy or last_s is None else min(float(now_s), float(last_s) + 0.5)
    hi = max(hi, min_span_s)
    return max(0.0, hi - span_s), hi


def figure(data, layout: dict) -> dict:
    """A chart as plotly's JSON: its traces (dicts with a "type") and its layout."""
    return {"data": list(data), "layout": layout}


def empty_figure(title: str, subtitle: str, xlabel: str, ylabel: str,
                 presenter: bool = False) -> dict:
    """A valid figure with no traces and a centred "no data yet" note (a lab chart built with
    plotly's graph objects returns go.Figure(empty_figure(...)), so it keeps one type)."""
    hidden = dict(showticklabels=False, showgrid=False, zeroline=False)
    note = dict(text=NO_DATA, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                font=dict(size=font_px(presenter) + 4, color="#666"))
    return figure([], layout(title, subtitle, xlabel, ylabel, xaxis=hidden,
                             yaxis=hidden, annotations=[note], presenter=presenter))


def room_above(top: float) -> dict:
    """A y-axis from 0 to a quarter above `top`, the highest value drawn: room for a label along the
    plot's top (a marked line's) that would otherwise sit on the highest points."""
    return dict(range=[0, 1.25 * top]) if top > 0 else dict(rangemode="tozero")


def is_empty(df: pd.DataFrame | None, *columns: str) -> bool:
    return df is None or len(df) == 0 or any(c not in df.columns for c in columns)


def num(df: pd.DataFrame, col: str) -> np.ndarray:
    """A column as float64 numpy (NaN where missing)."""
    if col not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def downsample_max(x: np.ndarray, ys: list[np.ndarray], max_points: int = MAX_POINTS):
    """Shrink a long series to <= max_points by taking each bucket's max.

    Max (not mean) so that a one-step spike in the queue or KV use stays visible.
    """
    n = len(x)
    if n <= max_points:
        return x, ys
    k = math.ceil(n / max_points)
    starts = np.arange(0, n, k)
    ends = np.minimum(starts + k - 1, n - 1)
    return x[ends], [np.maximum.reduceat(y, starts) for y in ys]


IDLE_GAP_S = 1.0           # an engine idle this long between steps is a gap in a chart over time
IDLE_GAP_STEPS = 20        # ... and this many of its usual (median) steps


def break_idle_gaps(steps: pd.DataFrame, ys: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Step end times and their series with a blank point (NaN) wherever the engine sat idle
    between two steps (longer than IDLE_GAP_S and IDLE_GAP_STEPS usual steps): a line over time
    stops there instead of joining the last value before the pause to the first one after it,
    which would read as a queue climbing while nothing happened."""
    end = num(steps, "t_end_s")
    start = num(steps, "t_start_s") if "t_start_s" in steps.columns else end
    if len(end) < 2:
        return end, ys
    usual = float(np.nanmedian(end - start)) if len(end) else 0.0
    idle = start[1:] - end[:-1]
    at = np.flatnonzero(idle > max(IDLE_GAP_S, IDLE_GAP_STEPS * usual)) + 1     # steps that end a pause
    if not len(at):
        return end, ys
    x = np.insert(end.astype(float), at, end[at - 1] + idle[at - 1] / 2)
    return x, [np.insert(y.astype(float), at, np.nan) for y in ys]


def stride(n: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """Evenly spaced indices 0..n-1, at most max_points of them, always keeping the last."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(int))


MARK_LABEL_CHARS = 22   # a change mark's label longer than this is cut; hover shows it whole
MARK_ROWS = 3           # labels of marks close together step down over this many rows
MARK_PLOT_PX = 500      # plot width assumed when deciding whether two mark labels would touch
MARK_NAME = "setting change (dashed line)"


def short_mark_label(label: str) -> str:
    """One short label per change mark: the change itself, or "3 changes" for several (the
    engine joins a mark's changes with ", "). A long one is cut, keeping a " +2 more" ending."""
    parts = [p for p in str(label).split(", ") if p]
    text = parts[0] if len(parts) == 1 else f"{len(parts)} changes"
    if len(text) <= MARK_LABEL_CHARS:
        return text
    more = re.search(r" \+\d+ more$", text)
    tail = more.group(0) if more else ""
    return text[:MARK_LABEL_CHARS - len(tail) - 1] + "…" + tail


def mark_lines(marks: pd.DataFrame | None, x_col: str, lo=None, hi=None,
               presenter: bool = False, span: float | None = None) -> tuple[list, list]:
    """Policy changes in lo..hi as vertical dashed lines (shapes) with a short label each
    (annotations) and the full label on hover (the marks' "detail" column when they have one).
    A label that would touch the one before it (on an x span of hi - lo, unless given, drawn
    MARK_PLOT_PX wide) steps down a row."""
    shapes, notes = [], []
    if is_empty(marks, x_col):
        return shapes, notes
    labels = marks["label"].astype(str) if "label" in marks.columns else [""] * len(marks)
    details = marks["detail"].astype(str) if "detail" in marks.columns else labels
    if span is None:
        span = hi - lo if lo is not None and hi is not None else 0.0
    px, row, last_x, last_px = font_px(presenter), 0, None, 0.0
    for x, label, detail in zip(num(marks, x_col), labels, details):
        if np.isnan(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
            continue
        gap_px = (x - last_x) / span * MARK_PLOT_PX if last_x is not None and span > 0 else 0.0
        row = (row + 1) % MARK_ROWS if last_x is not None and gap_px < last_px else 0
        text = short_mark_label(label)
        last_x, last_px = float(x), len(text) * 0.62 * px + 8
        shapes.append(dict(type="line", xref="x", yref="paper", x0=last_x, x1=last_x, y0=0, y1=1,
                           line=dict(color="#444", width=1, dash="dash")))
        notes.append(dict(x=last_x, y=1, yshift=-row * (px + 6), xref="x", yref="paper",
                          text=text, hovertext=detail or None, showarrow=False,
                          xanchor="left", yanchor="top", font=dict(size=px, color="#333"),
                          bgcolor="rgba(255,255,255,0.8)"))
    return shapes, notes


def time_marks(marks: pd.DataFrame | None, x: np.ndarray, x_range=None,
               presenter: bool = False) -> tuple[list, list]:
    """Change marks on a time chart: those inside x_range when the axis is held still, else
    all of them (the axis then stretches to show them)."""
    if x_range is not None:
        return mark_lines(marks, "t_s", *x_range, presenter=presenter)
    x = x[~np.isnan(x)]
    span = float(x.max() - x.min()) if len(x) else 0.0
    return mark_lines(marks, "t_s", presenter=presenter, span=span)


def mark_legend(shapes: list) -> list:
    """A legend entry for the change marks when there are any dashed mark lines drawn."""
    drawn = any(s.get("line", {}).get("dash") == "dash" for s in shapes)
    return [dict(type="scatter", x=[None], y=[None], mode="lines", name=MARK_NAME, hoverinfo="skip",
                 line=dict(color="#444", width=1, dash="dash"))] if drawn else []


def ghost_line(x, y, name: str, **kw) -> dict:
    """A previous or pinned run as a faint grey line behind this run's lines."""
    return dict(type="scatter", name=name, x=x, y=y, mode="lines", line=dict(color=GHOST_COLOR, width=3),
                hoverinfo="skip", **kw)


def slo_line(value: float, label: str, vertical: bool = False,
             presenter: bool = False) -> tuple[dict, dict]:
    """A dotted red SLO line (shape) and its label (annotation)."""
    line = dict(color=COLORS["bad"], width=1.5, dash="dot")
    font = dict(size=font_px(presenter), color=COLORS["bad"])
    if vertical:
        return (dict(type="line", xref="x", yref="paper", x0=value, x1=value, y0=0, y1=1, line=line),
                dict(x=value, y=0, xref="x", yref="paper", text=label, showarrow=False,
                     xanchor="left", yanchor="bottom", font=font))
    return (dict(type="line", xref="paper", yref="y", x0=0, x1=1, y0=value, y1=value, line=line),
            dict(x=1, y=value, xref="paper", yref="y", text=label, showarrow=False,
                 xanchor="right", yanchor="bottom", font=font))


MODEL_COLOR = "#555555"  # a model's prediction, drawn beside the measurements
PAIR_COLORS = (COLORS["bad"], COLORS["goodput"])   # two runs compared (chunked prefill off / on): red, green
def vline(x: float, text: str, color: str = "#444", dash: str = "dash",
          presenter: bool = False) -> tuple[dict, dict]:
    """A labelled vertical line at x (shape, annotation)."""
    return (dict(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                 line=dict(color=color, width=1.5, dash=dash)),
            dict(x=x, y=1, xref="x", yref="paper", text=text, showarrow=False, xanchor="left",
                 yanchor="top", font=dict(size=font_px(presenter), color=color),
                 bgcolor="rgba(255,255,255,0.75)"))
