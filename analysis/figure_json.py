"""A plotly figure as the live chart sends it to the browser: plain JSON data, without plotly's
default template (the browser holds that once), every font at least MIN_FONT_PX.

No Streamlit here, so a figure can be made ready once where many sessions show it (the
classroom's board) and drawn by each with ui.live_chart.show_figure.

A ReadyFigure is that JSON as text, with its height: a page that shows the same figure at its
next refresh (the Playground's time charts between two rebuilds) sends the same text again
instead of converting the figure again.
"""
from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass

import numpy as np

DEFAULT_HEIGHT = 380        # plotly's own default is 450; the analysis builders set 380
MIN_FONT_PX = 12


def json_safe(value):
    """`value` as plain JSON data: numpy arrays and numbers become lists and Python numbers,
    NaN and infinities become null (JSON has neither), dates become ISO text."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iubU":      # integers, booleans and text are JSON as they are
            return value.tolist()
        if value.dtype.kind == "f":
            clean = value.astype(object)
            clean[~np.isfinite(value)] = None
            return clean.tolist()
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "isoformat"):          # pandas Timestamp, numpy datetime64 via .item()
        return value.isoformat()
    raise TypeError(f"a chart value of type {type(value).__name__} has no JSON form: {value!r:.80}")


def _raise_fonts(value, least: int) -> None:
    """Every font size set in a layout (titles, annotations, axes...) made at least `least` px."""
    if isinstance(value, list):
        for v in value:
            _raise_fonts(v, least)
    elif isinstance(value, dict):
        font = value.get("font")
        if isinstance(font, dict) and isinstance(font.get("size"), (int, float)):
            font["size"] = max(font["size"], least)
        for k, v in value.items():
            if isinstance(v, (dict, list)) and k not in ("data", "x", "y", "z"):
                _raise_fonts(v, least)


def figure_dict(fig, font_px: int | None = None) -> dict:
    """A plotly Figure (or a figure dict) as JSON-safe {"data": [...], "layout": {...}}.
    font_px is the smallest text size (presenter mode); it never goes below MIN_FONT_PX."""
    raw = fig if isinstance(fig, dict) else fig.to_plotly_json()
    # plotly's default template is ~60% of a small figure's JSON, the same every time: the
    # browser side holds it once (template.js) and applies it to a figure that has none.
    layout = {k: v for k, v in raw.get("layout", {}).items() if k != "template"}
    out = json_safe({"data": raw.get("data", []), "layout": layout})
    least = max(font_px or MIN_FONT_PX, MIN_FONT_PX)
    out["layout"].setdefault("font", {}).setdefault("size", least)
    _raise_fonts(out["layout"], least)
    return out


def figure_height(figure: dict) -> int:
    height = figure.get("layout", {}).get("height")
    return int(height) if isinstance(height, (int, float)) and height > 0 else DEFAULT_HEIGHT


@dataclass(frozen=True)
class ReadyFigure:
    """A figure_dict as the JSON text the live chart sends, and its height in px."""
    text: str
    height: int


def ready(figure: dict) -> ReadyFigure:
    """A figure_dict, ready to send (strict JSON: figure_dict has made every NaN null)."""
    return ReadyFigure(json.dumps(figure, allow_nan=False, separators=(",", ":")), figure_height(figure))
